//! What one round of the shipper does: claim the replica for this writer,
//! ship new bytes, publish a restore point, mark and collect what the log
//! no longer uses (DESIGN.md §13, "Shipping" and "One writer").

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload};

use super::control::Control;
use super::objects::{self, Entry, Point};
use super::remote::{get, list, newest_point, remote};
use super::Replicate;
use crate::error::{Error, Result};
use crate::log::frame::StoreId;
use crate::store::now_ms;
use crate::store::replica::{LogView, SegmentView};
use crate::store::Shared;
use futures::TryStreamExt;

/// How often, at most, a writer says it is alive (each round that
/// succeeds, no more often than this).
/// How often, at most, restore points and retired objects past the
/// retention window are deleted (or each round, with a shorter window).
pub(crate) const COLLECT_EVERY: Duration = Duration::from_secs(60);
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);

/// The active segment as far as this writer has shipped it.
struct Tail {
    id: u64,
    shipped: u64,
    crc: crc32fast::Hasher,
}

pub(crate) struct Shipper {
    target: Arc<dyn ObjectStore>,
    root: Path,
    store: StoreId,
    /// Names the replica in the store's marker.
    describe: String,
    /// This writer's epoch (0: not claimed yet).
    epoch: u64,
    /// Segments whole in the replica, by id: the epoch whose upload a point
    /// names, and the CRC-32 of their bytes.
    whole: HashMap<u64, (u64, u32)>,
    /// Manifests in the replica, by (generation, epoch).
    manifests: BTreeSet<(u64, u64)>,
    tail: Option<Tail>,
    /// The newest restore point published.
    last: Option<Point>,
    /// Segments uploaded whole since `last` (so that one the log stops
    /// using before a point names it is still marked retired).
    fresh: BTreeSet<(u64, u64)>,
    /// Segments now whole whose pieces can go once a point names them.
    sealed_pieces: BTreeSet<(u64, u64)>,
    collected: Option<Instant>,
    /// When the heartbeat was last written.
    beat: Option<Instant>,
    /// Why this writer may no longer write to the replica, once another
    /// has claimed it.
    pub fenced: Option<String>,
    /// Why the replica is no longer this writer's to write to, once its
    /// claim (or the whole replica) has vanished from the object store.
    pub gone: Option<String>,
}

impl Shipper {
    pub fn new(target: Arc<dyn ObjectStore>, root: Path, store: StoreId, describe: String) -> Self {
        Self {
            target,
            root,
            store,
            describe,
            epoch: 0,
            whole: HashMap::new(),
            manifests: BTreeSet::new(),
            tail: None,
            last: None,
            fresh: BTreeSet::new(),
            sealed_pieces: BTreeSet::new(),
            collected: None,
            beat: None,
            fenced: None,
            gone: None,
        }
    }

    /// Whether this writer has claimed the replica.
    pub fn claimed(&self) -> bool {
        self.epoch > 0
    }

    /// Checks that the replica is this store's and that this store's log
    /// holds the replica's newest restore point, then claims the next
    /// epoch: from now on no earlier writer can publish a restore point.
    async fn claim(
        &mut self,
        view: &LogView,
        store: &Shared,
        config: &Replicate,
        control: &Control,
    ) -> Result<()> {
        let identity = crate::log::identity::encode(self.store);
        let path = objects::identity(&self.root);
        match self.target.get(&path).await {
            Ok(found) => {
                let found = found.bytes().await.map_err(|e| remote("read", &path, e))?;
                if found.as_ref() != identity.as_slice() {
                    return Err(Error::replica(
                        "start replicating",
                        format!(
                            "{path} holds another store's replica (this store is {}); replicate \
                             to an empty place, or move that replica away",
                            self.store
                        ),
                    ));
                }
            }
            Err(object_store::Error::NotFound { .. }) => {
                self.put(&path, identity.to_vec()).await?;
            }
            Err(e) => return Err(remote("read", &path, e)),
        }
        let newest = newest_point(self.target.as_ref(), &self.root).await?;
        let claiming = Instant::now();
        let claimed = self
            .list(&objects::writers(&self.root))
            .await?
            .iter()
            .filter_map(|m| objects::parse_hexes::<1>(m.location.filename()?, ""))
            .map(|[e]| e)
            .max()
            .unwrap_or(0);
        let ours = store.replica_marker(&self.describe) == Some(claimed);
        if let Some(point) = &newest {
            // Until this round publishes, the replica holds the store as it
            // was when its newest point was published (before this open,
            // if the store wrote more since): the lag counts from then.
            control.trails_since(point.time_ms);
            if point.store != self.store {
                return Err(Error::replica(
                    "start replicating",
                    format!(
                        "the newest restore point under {} is of another store",
                        self.root
                    ),
                ));
            }
            // The last writer was this store, as it left it: nothing to
            // check. Otherwise (another writer since, or no marker), the
            // newest point must be a prefix of this store's log.
            if !ours {
                if let Err(e) = holds(view, point) {
                    // Another writer's log, not this one's: this store may
                    // never write there again.
                    self.fenced = Some(e.to_string());
                    return Err(e);
                }
            }
        }
        let epoch = claimed + 1;
        let claim = PutOptions::from(PutMode::Create);
        let mut body = self.store.0.to_vec();
        body.extend_from_slice(&now_ms().to_le_bytes());
        let path = objects::writer(&self.root, epoch);
        match self
            .target
            .put_opts(&path, PutPayload::from(body), claim)
            .await
        {
            Ok(_) => {}
            Err(object_store::Error::AlreadyExists { .. }) => {
                return Err(Error::replica(
                    "start replicating",
                    format!("another writer claimed {path} at the same moment; retrying"),
                ))
            }
            Err(e) => return Err(remote("claim", &path, e)),
        }
        store.set_replica_marker(&self.describe, epoch)?;
        self.epoch = epoch;
        if claimed > 0 && !ours {
            // Taken from another writer, which may still be acknowledging
            // writes until its lease (begun before this claim) lapses: this
            // writer's first round, which writes wait for, ends after it.
            if let Some(lease) = config.lease_in_force() {
                tracing::info!(
                    epoch,
                    lease_ms = lease.as_millis() as u64,
                    "claimed the replica from another writer; waiting out its lease"
                );
                tokio::time::sleep(lease.saturating_sub(claiming.elapsed())).await;
            }
        }
        // What the newest point names stays where it is: the segments
        // uploaded whole and the manifest. The active segment is shipped
        // again under this epoch, from its start.
        let whole: BTreeSet<(u64, u64)> = self
            .list(&self.root.child("segments"))
            .await?
            .iter()
            .filter_map(|m| objects::parse_hexes::<2>(m.location.filename()?, ".seg"))
            .map(|[id, e]| (id, e))
            .collect();
        if let Some(point) = &newest {
            for e in &point.segments {
                if whole.contains(&(e.id, e.epoch)) {
                    self.whole.insert(e.id, (e.epoch, e.crc));
                }
            }
            if point.generation > 0 {
                self.manifests
                    .insert((point.generation, point.manifest_epoch));
            }
        }
        self.last = newest;
        tracing::info!(epoch, target = %self.describe, "claimed the replica");
        Ok(())
    }

    /// One round: ship what is new, publish a restore point if the log
    /// changed, drop what is past the retention window.
    pub async fn round(
        &mut self,
        view: LogView,
        store: &Shared,
        config: &Replicate,
        control: &Control,
    ) -> Result<()> {
        if self.epoch == 0 {
            self.claim(&view, store, config, control).await?;
        }
        let mut entries = Vec::with_capacity(view.segments.len());
        for segment in &view.segments {
            let entry = if segment.sealed {
                self.ship_whole(segment, control).await?
            } else {
                self.ship_piece(segment, control).await?
            };
            entries.push(entry);
        }
        let (generation, manifest_epoch) = match &view.manifest {
            Some((generation, bytes)) => {
                let known = self
                    .manifests
                    .range((*generation, 0)..=(*generation, u64::MAX))
                    .next()
                    .map(|&(_, e)| e);
                let epoch = match known {
                    Some(epoch) => epoch,
                    None => {
                        self.put(
                            &objects::manifest(&self.root, *generation, self.epoch),
                            bytes.clone(),
                        )
                        .await?;
                        self.manifests.insert((*generation, self.epoch));
                        self.epoch
                    }
                };
                (*generation, epoch)
            }
            None => (0, 0),
        };
        let began = Instant::now();
        if !self
            .publish(generation, manifest_epoch, entries, control)
            .await?
        {
            // Nothing new to publish: the lease is renewed all the same.
            self.confirm().await?;
        }
        control.confirm(began);
        control.cover(view.position, view.taken_ms);
        if self.beat.is_none_or(|at| at.elapsed() >= HEARTBEAT_EVERY) {
            let beat = objects::Heartbeat {
                epoch: self.epoch,
                time_ms: now_ms(),
            };
            self.put(&objects::heartbeat(&self.root), beat.encode())
                .await?;
            self.beat = Some(Instant::now());
            // As often: what a reopen counts its lag from until its first
            // round reads the replica (it may not reach it).
            store.set_covered_hint(&self.describe, view.taken_ms);
        }
        if self
            .collected
            .is_none_or(|at| at.elapsed() >= COLLECT_EVERY.min(config.retain))
        {
            self.collect(config.retain).await?;
            self.collected = Some(Instant::now());
        }
        Ok(())
    }

    async fn ship_whole(&mut self, segment: &SegmentView, control: &Control) -> Result<Entry> {
        let id = segment.id;
        // Any writer's upload of it will do: a claim checked that this
        // log holds what earlier writers shipped.
        if let Some(&(epoch, crc)) = self.whole.get(&id) {
            return Ok(Entry {
                id,
                epoch,
                len: segment.len,
                crc,
            });
        }
        let bytes = segment.read(0, segment.len)?;
        let crc = crc32fast::hash(&bytes);
        let n = bytes.len() as u64;
        self.put_checked(&objects::segment(&self.root, id, self.epoch), bytes)
            .await?;
        control.status.lock().shipped_bytes += n;
        self.fresh.insert((id, self.epoch));
        if self.tail.as_ref().is_some_and(|t| t.id == id) {
            self.tail = None;
            self.sealed_pieces.insert((id, self.epoch));
        }
        self.whole.insert(id, (self.epoch, crc));
        Ok(Entry {
            id,
            epoch: self.epoch,
            len: segment.len,
            crc,
        })
    }

    async fn ship_piece(&mut self, segment: &SegmentView, control: &Control) -> Result<Entry> {
        let id = segment.id;
        let mut tail = match self.tail.take() {
            Some(tail) if tail.id == id => tail,
            _ => Tail {
                id,
                shipped: 0,
                crc: crc32fast::Hasher::new(),
            },
        };
        if segment.len > tail.shipped {
            let bytes = match segment.read(tail.shipped, segment.len) {
                Ok(bytes) => bytes,
                Err(e) => {
                    self.tail = Some(tail);
                    return Err(e);
                }
            };
            let n = bytes.len() as u64;
            let mut crc = tail.crc.clone();
            crc.update(&bytes);
            let path = objects::piece(&self.root, id, self.epoch, tail.shipped);
            if let Err(e) = self.put_checked(&path, bytes).await {
                // Not shipped: the next round tries again from here.
                self.tail = Some(tail);
                return Err(e);
            }
            tail.crc = crc;
            tail.shipped += n;
            control.status.lock().shipped_bytes += n;
        }
        let entry = Entry {
            id,
            epoch: self.epoch,
            len: tail.shipped,
            crc: tail.crc.clone().finalize(),
        };
        self.tail = Some(tail);
        Ok(entry)
    }

    /// Checks that the replica is still this writer's: its claim is there
    /// and no later one. A later claim fences this writer; a missing claim
    /// (the replica was wiped, or moved) stops replication: either way for
    /// good, with the reason in the status.
    async fn confirm(&mut self) -> Result<()> {
        let dir = objects::writers(&self.root);
        let before = objects::writer(&self.root, self.epoch.saturating_sub(1));
        let mut listed = self
            .target
            .list_with_offset(Some(&dir), &before)
            .try_collect::<Vec<_>>()
            .await
            .map_err(|e| remote("list", &dir, e))?
            .iter()
            .filter_map(|m| objects::parse_hexes::<1>(m.location.filename()?, ""))
            .map(|[e]| e)
            .filter(|&e| e >= self.epoch)
            .collect::<Vec<u64>>();
        listed.sort_unstable();
        if let Some(&later) = listed.iter().find(|&&e| e > self.epoch) {
            return Err(self.fence(format!("writer {later} claimed the replica")));
        }
        if listed.first() != Some(&self.epoch) {
            let why = format!(
                "this writer's claim ({}) is gone from {}: the replica was wiped or moved since \
                 this store claimed it; nothing more is shipped there. Restart the store to \
                 replicate it again from its start (to the same place, now empty, or another)",
                objects::writer(&self.root, self.epoch),
                self.describe
            );
            self.gone = Some(why.clone());
            return Err(Error::replica("replicate", why));
        }
        Ok(())
    }

    /// Publishes a restore point for the log `entries` make up, unless the
    /// newest one says the same (then `false`); then marks the segments
    /// the log stopped using, and drops the pieces of those now whole.
    /// Before it, checks that the replica is still this writer's
    /// (`confirm`); the point itself is created only if its number is
    /// free, so that of two writers only one can publish it.
    async fn publish(
        &mut self,
        generation: u64,
        manifest_epoch: u64,
        entries: Vec<Entry>,
        control: &Control,
    ) -> Result<bool> {
        if self.last.as_ref().is_some_and(|p| {
            p.generation == generation
                && p.manifest_epoch == manifest_epoch
                && p.segments == entries
        }) {
            return Ok(false);
        }
        self.confirm().await?;
        let (number, time_ms) = match &self.last {
            Some(p) => (p.number + 1, now_ms().max(p.time_ms)),
            None => (1, now_ms()),
        };
        let point = Point {
            store: self.store,
            number,
            time_ms,
            epoch: self.epoch,
            generation,
            manifest_epoch,
            segments: entries,
        };
        let path = objects::point(&self.root, number, time_ms);
        let create = PutOptions::from(PutMode::Create);
        match self
            .target
            .put_opts(&path, PutPayload::from(point.encode()), create)
            .await
        {
            Ok(_) => {}
            Err(object_store::Error::AlreadyExists { .. }) => {
                return Err(self.fence(format!(
                    "restore point {number} was published by another writer"
                )))
            }
            Err(e) => return Err(remote("write", &path, e)),
        }
        let live: BTreeSet<(u64, u64)> = point.segments.iter().map(|e| (e.id, e.epoch)).collect();
        let before: BTreeSet<(u64, u64)> = self
            .last
            .iter()
            .flat_map(|p| p.segments.iter().map(|e| (e.id, e.epoch)))
            .chain(self.fresh.iter().copied())
            .collect();
        self.last = Some(point);
        self.fresh.clear();
        {
            let mut status = control.status.lock();
            status.restore_point = number;
            status.restore_point_ms = time_ms;
        }
        for &(id, epoch) in before.difference(&live) {
            self.put(
                &objects::retired(&self.root, id, epoch, time_ms),
                Vec::new(),
            )
            .await?;
            if self.whole.get(&id).is_some_and(|&(e, _)| e == epoch) {
                self.whole.remove(&id);
            }
        }
        while let Some((id, epoch)) = self.sealed_pieces.pop_first() {
            if let Err(e) = self
                .delete_under(&objects::pieces(&self.root, id, epoch))
                .await
            {
                self.sealed_pieces.insert((id, epoch));
                return Err(e);
            }
        }
        Ok(true)
    }

    /// Stops this writer for good: another has claimed the replica.
    fn fence(&mut self, why: String) -> Error {
        let reason = format!(
            "{why} (this writer is {}); this store stops writing rather than diverge from the \
             replica: restore from it (ctxlog restore) to go on from what it holds",
            self.epoch
        );
        self.fenced = Some(reason.clone());
        Error::replica("replicate", reason)
    }

    /// Deletes restore points older than `retain` (all but the newest),
    /// the manifests only they named, and the objects of segments retired
    /// before then.
    async fn collect(&mut self, retain: Duration) -> Result<()> {
        let horizon =
            now_ms().saturating_sub(u64::try_from(retain.as_millis()).unwrap_or(u64::MAX));
        let mut points: Vec<(u64, u64, Path)> = self
            .list(&objects::points(&self.root))
            .await?
            .into_iter()
            .filter_map(|m| {
                let [n, t] = objects::parse_hexes::<2>(m.location.filename()?, "")?;
                Some((n, t, m.location))
            })
            .collect();
        points.sort_unstable_by_key(|p| p.0);
        let newest = points.last().map_or(0, |p| p.0);
        let mut oldest_kept = None;
        for (n, t, path) in &points {
            if *t < horizon && *n != newest {
                self.delete(path).await?;
            } else if oldest_kept.is_none() {
                oldest_kept = Some(path.clone());
            }
        }
        if let Some(path) = oldest_kept {
            let bytes = self.get(&path).await?;
            let oldest = Point::decode(&bytes, path.as_ref())?;
            let old: Vec<(u64, u64)> = self
                .manifests
                .iter()
                .copied()
                .filter(|&(g, _)| g < oldest.generation)
                .collect();
            for (g, e) in old {
                self.delete(&objects::manifest(&self.root, g, e)).await?;
                self.manifests.remove(&(g, e));
            }
        }
        for meta in self.list(&objects::retired_dir(&self.root)).await? {
            let Some([id, epoch, t]) = meta
                .location
                .filename()
                .and_then(|n| objects::parse_hexes::<3>(n, ""))
            else {
                continue;
            };
            if t < horizon {
                self.delete(&objects::segment(&self.root, id, epoch))
                    .await?;
                self.delete_under(&objects::pieces(&self.root, id, epoch))
                    .await?;
                self.delete(&meta.location).await?;
            }
        }
        Ok(())
    }

    async fn put(&self, path: &Path, bytes: Vec<u8>) -> Result<()> {
        self.target
            .put(path, PutPayload::from(Bytes::from(bytes)))
            .await
            .map(drop)
            .map_err(|e| remote("write", path, e))
    }

    /// Uploads `bytes` to `path` and reads them back: a restore point
    /// names only objects known to hold what it records (a mismatch fails
    /// the round, which uploads them again).
    async fn put_checked(&self, path: &Path, bytes: Vec<u8>) -> Result<()> {
        // Kept (a reference count, not a copy) to compare with what comes
        // back: the caller has hashed these bytes for the point already.
        let sent = Bytes::from(bytes);
        self.target
            .put(path, PutPayload::from(sent.clone()))
            .await
            .map_err(|e| remote("write", path, e))?;
        let back = self.get(path).await?;
        if back != sent {
            return Err(Error::replica(
                "replicate",
                format!(
                    "{path} holds other bytes than were uploaded ({} bytes read back, {} \
                     sent): the object store lost or changed them; shipping them again",
                    back.len(),
                    sent.len()
                ),
            ));
        }
        Ok(())
    }

    async fn get(&self, path: &Path) -> Result<Bytes> {
        get(self.target.as_ref(), path).await
    }

    async fn delete(&self, path: &Path) -> Result<()> {
        match self.target.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(remote("delete", path, e)),
        }
    }

    async fn delete_under(&self, prefix: &Path) -> Result<()> {
        for meta in self.list(prefix).await? {
            self.delete(&meta.location).await?;
        }
        Ok(())
    }

    async fn list(&self, prefix: &Path) -> Result<Vec<object_store::ObjectMeta>> {
        list(self.target.as_ref(), prefix).await
    }
}

/// Whether the log of `view` holds every segment of `point` as the point
/// names it (its first bytes, by their CRC-32): an error naming the first
/// that it does not.
fn holds(view: &LogView, point: &Point) -> Result<()> {
    for entry in &point.segments {
        let same = view
            .segments
            .iter()
            .find(|s| s.id == entry.id)
            .filter(|s| s.len >= entry.len)
            .map(|s| s.read(0, entry.len))
            .transpose()?
            .is_some_and(|bytes| crc32fast::hash(&bytes) == entry.crc);
        if !same {
            return Err(Error::replica(
                "start replicating",
                format!(
                    "the replica's restore point {} holds segment {} ({} bytes) as this store \
                     does not: another writer has written it since this store last did (or it \
                     is of this store's past); restore from the replica (ctxlog restore) to go \
                     on from it, or replicate to an empty place",
                    point.number, entry.id, entry.len
                ),
            ));
        }
    }
    Ok(())
}
