//! The shipper: a background thread that copies the log to the object
//! store and publishes restore points (DESIGN.md §13, "Shipping").

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, PutPayload};
use parking_lot::{Condvar, Mutex};

use super::objects::{self, Entry, Point};
use super::{Replicate, ReplicationStatus};
use crate::error::{Error, Result};
use crate::log::frame::StoreId;
use crate::store::now_ms;
use crate::store::replica::LogView;
use crate::store::Shared;

/// How often, at most, restore points and retired objects past the
/// retention window are deleted (or each round, with a shorter window).
const COLLECT_EVERY: Duration = Duration::from_secs(60);
/// The longest wait between two tries after failures.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Waits until a restore point covers a synced log position (synchronous
/// replication).
pub(crate) type Gate = Box<dyn Fn(u64) -> Result<()> + Send + Sync>;

/// The shipper's thread, stopped (after a last shipment) when the store
/// closes.
pub(crate) struct Replicator {
    shared: Arc<Control>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What the store and the thread share.
struct Control {
    rounds: Mutex<Rounds>,
    /// Wakes the thread (a stop, or a round asked for).
    wake: Condvar,
    /// Signalled as each round ends.
    done: Condvar,
    status: Mutex<ReplicationStatus>,
    /// What the newest restore point covers: the synced log position of
    /// its view, and when the view was taken (ms since the Unix epoch).
    covered: Mutex<(u64, u64)>,
}

/// The thread's rounds, counted.
#[derive(Default)]
struct Rounds {
    stop: bool,
    /// A caller waits for the round with this number to end.
    asked: u64,
    started: u64,
    finished: u64,
}

impl Replicator {
    /// Starts the thread for `store`, replicating as `config` says.
    pub fn start(store: &Arc<Shared>, config: Replicate) -> Result<Self> {
        let (target, root) = config.open()?;
        let control = Arc::new(Control {
            rounds: Mutex::new(Rounds::default()),
            wake: Condvar::new(),
            done: Condvar::new(),
            status: Mutex::new(ReplicationStatus {
                target: config.describe(),
                ..ReplicationStatus::default()
            }),
            covered: Mutex::new((0, now_ms())),
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::io("start the replication runtime", config.describe(), e))?;
        let describe = config.describe();
        let thread = std::thread::Builder::new()
            .name("ctxlog-replicate".into())
            .spawn({
                let (store, control) = (store.clone(), control.clone());
                move || {
                    let _ended = Ended(&control);
                    let shipper = Shipper::new(target, root, store.writer_store());
                    run(&runtime, shipper, &store, &config, &control);
                }
            })
            .map_err(|e| Error::io("start the replication thread", describe, e))?;
        Ok(Self {
            shared: control,
            thread: Some(thread),
        })
    }

    /// How far the replica trails a store whose synced log position is
    /// `synced`: the bytes synced since the newest restore point's view,
    /// and, if there are any, how long ago that view was taken (the oldest
    /// of them is younger).
    pub fn status(&self, synced: u64) -> ReplicationStatus {
        let mut status = self.shared.status.lock().clone();
        let (position, taken_ms) = *self.shared.covered.lock();
        status.lag_bytes = synced.saturating_sub(position);
        status.lag_ms = match status.lag_bytes {
            0 => 0,
            _ => now_ms().saturating_sub(taken_ms),
        };
        status
    }

    /// What a store with synchronous replication calls after each write.
    pub fn gate(&self, timeout: Duration) -> Gate {
        let control = self.shared.clone();
        Box::new(move |end| control.wait_covered(end, timeout))
    }

    /// Runs a round now (one that starts after this call) and waits up to
    /// `timeout` for it to end: then every byte synced before the call is
    /// in a restore point, unless the round failed.
    pub fn ship_now(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut rounds = self.shared.rounds.lock();
        let want = rounds.started + 1;
        rounds.asked = rounds.asked.max(want);
        self.shared.wake.notify_all();
        while rounds.finished < want {
            if rounds.stop
                || self
                    .shared
                    .done
                    .wait_until(&mut rounds, deadline)
                    .timed_out()
            {
                return Err(Error::replica(
                    "ship the log now",
                    format!("no round ended within {timeout:?}; see the replication status"),
                ));
            }
        }
        drop(rounds);
        match &self.shared.status.lock().last_error {
            Some(e) => Err(Error::replica("ship the log now", e.clone())),
            None => Ok(()),
        }
    }

    /// Ships what is left (within the close timeout) and stops the thread.
    pub fn stop(mut self) {
        self.shared.rounds.lock().stop = true;
        self.shared.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Control {
    /// Returns once a restore point covers the synced log position `end`,
    /// asking for rounds until one does (appenders that wait together share
    /// them); fails past `timeout`, or if the thread has stopped.
    fn wait_covered(&self, end: u64, timeout: Duration) -> Result<()> {
        if self.covered.lock().0 >= end {
            return Ok(());
        }
        let deadline = Instant::now() + timeout;
        let mut rounds = self.rounds.lock();
        loop {
            if self.covered.lock().0 >= end {
                return Ok(());
            }
            if rounds.stop {
                return Err(Error::replica(
                    "confirm a write in the replica",
                    "replication has stopped (the store is closing, or its thread failed); the \
                     write is stored and durable on this disk",
                ));
            }
            rounds.asked = rounds.asked.max(rounds.started + 1);
            self.wake.notify_all();
            if self.done.wait_until(&mut rounds, deadline).timed_out() {
                if self.covered.lock().0 >= end {
                    return Ok(());
                }
                let why = self.status.lock().last_error.clone();
                return Err(Error::replica(
                    "confirm a write in the replica",
                    format!(
                        "no restore point covered it within {timeout:?}{}; the write is stored \
                         and durable on this disk but may be missing from the replica (a \
                         resent A2A message is recognised)",
                        why.map(|e| format!(" (last error: {e})"))
                            .unwrap_or_default()
                    ),
                ));
            }
        }
    }
}

/// Marks the thread ended however it ends (a panic in a dependency
/// included), so that no caller of `ship_now` waits for a round that will
/// never come.
struct Ended<'a>(&'a Control);

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        self.0.rounds.lock().stop = true;
        self.0.done.notify_all();
        if std::thread::panicking() {
            self.0.status.lock().last_error =
                Some("the replication thread stopped after a panic; reopen the store".into());
        }
    }
}

fn run(
    runtime: &tokio::runtime::Runtime,
    mut shipper: Shipper,
    store: &Shared,
    config: &Replicate,
    control: &Control,
) {
    let mut wait = config.interval;
    let mut failed = 0u32;
    loop {
        let (stopping, number) = {
            let mut rounds = control.rounds.lock();
            // Until the interval is up, or a round is asked for; after a
            // failure, only a stop cuts the backoff short.
            let until = Instant::now() + wait;
            while !rounds.stop
                && (rounds.asked <= rounds.started || failed > 0)
                && !control.wake.wait_until(&mut rounds, until).timed_out()
            {}
            rounds.started += 1;
            (rounds.stop, rounds.started)
        };
        let end_round = || {
            control.rounds.lock().finished = number;
            control.done.notify_all();
        };
        if store.writer_poisoned() {
            control.status.lock().last_error =
                Some("the store's log is poisoned; nothing more is shipped".into());
            end_round();
            return;
        }
        let round = async {
            let view = store.log_view()?;
            shipper.round(view, config, control).await
        };
        let result = if stopping {
            runtime.block_on(async {
                tokio::time::timeout(config.close_timeout, round)
                    .await
                    .unwrap_or_else(|_| {
                        Err(Error::replica(
                            "ship the log's last bytes",
                            format!(
                                "the object store did not take them within {:?}; the replica \
                                 trails the store until it is opened again",
                                config.close_timeout
                            ),
                        ))
                    })
            })
        } else {
            runtime.block_on(round)
        };
        let mut status = control.status.lock();
        match result {
            Ok(()) => {
                status.last_error = None;
                status.rounds += 1;
                failed = 0;
                wait = config.interval;
            }
            Err(e) => {
                tracing::warn!(error = %e, target = %status.target, "replication failed; retrying");
                status.failures += 1;
                status.last_error = Some(e.to_string());
                failed = failed.saturating_add(1);
                wait = backoff(config.interval, failed);
            }
        }
        drop(status);
        end_round();
        if stopping {
            return;
        }
    }
}

/// The wait after `failed` failures in a row: the interval doubled each
/// time up to [`MAX_BACKOFF`], less up to a quarter at random so that
/// stores failing together do not retry together.
fn backoff(interval: Duration, failed: u32) -> Duration {
    let full = interval
        .saturating_mul(1u32 << failed.min(16))
        .min(MAX_BACKOFF)
        .max(interval);
    let jitter = crate::random::bytes::<2>("draw a backoff's jitter")
        .map_or(0, |b| u32::from(u16::from_le_bytes(b)) % 1024);
    full.saturating_sub(full / 4 * jitter / 1024)
}

/// The active segment as far as it is shipped.
struct Tail {
    id: u64,
    shipped: u64,
    crc: crc32fast::Hasher,
}

struct Shipper {
    target: Arc<dyn ObjectStore>,
    root: Path,
    store: StoreId,
    /// The replica's state was read (after the store opened).
    started: bool,
    /// Segments uploaded whole, and their CRC-32s where known.
    whole: HashMap<u64, Option<u32>>,
    manifests: BTreeSet<u64>,
    tail: Option<Tail>,
    /// The newest restore point published.
    last: Option<Point>,
    /// Segments uploaded whole since `last` (so that one the log stops
    /// using before a point names it is still marked retired).
    fresh: BTreeSet<u64>,
    /// Segments now whole whose pieces can go once a point names them.
    sealed_pieces: BTreeSet<u64>,
    collected: Option<Instant>,
}

impl Shipper {
    fn new(target: Arc<dyn ObjectStore>, root: Path, store: StoreId) -> Self {
        Self {
            target,
            root,
            store,
            started: false,
            whole: HashMap::new(),
            manifests: BTreeSet::new(),
            tail: None,
            last: None,
            fresh: BTreeSet::new(),
            sealed_pieces: BTreeSet::new(),
            collected: None,
        }
    }

    /// Reads what the replica holds: checks that it is this store's, and
    /// learns which objects are there and the newest restore point.
    async fn start(&mut self, view: &LogView) -> Result<()> {
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
        for meta in self.list(&self.root.child("segments")).await? {
            if let Some(id) = meta
                .location
                .filename()
                .and_then(|n| n.strip_suffix(".seg"))
                .and_then(objects::parse_hex)
            {
                self.whole.insert(id, None);
            }
        }
        for meta in self.list(&self.root.child("manifests")).await? {
            if let Some(g) = meta.location.filename().and_then(objects::parse_hex) {
                self.manifests.insert(g);
            }
        }
        self.last = newest_point(self.target.as_ref(), &self.root).await?;
        if let Some(last) = &self.last {
            if last.store != self.store {
                return Err(Error::replica(
                    "start replicating",
                    format!(
                        "the newest restore point at {} is of another store",
                        self.root
                    ),
                ));
            }
            for e in &last.segments {
                if let Some(crc) = self.whole.get_mut(&e.id) {
                    *crc = Some(e.crc);
                }
            }
            self.resume_tail(last.clone(), view)?;
        }
        self.started = true;
        Ok(())
    }

    /// Continues shipping the active segment where the newest restore
    /// point left it, once its bytes there are checked to be this store's.
    fn resume_tail(&mut self, last: Point, view: &LogView) -> Result<()> {
        let Some(active) = view.segments.last().filter(|s| !s.sealed) else {
            return Ok(());
        };
        let Some(entry) = last.segments.iter().find(|e| e.id == active.id) else {
            return Ok(());
        };
        if self.whole.contains_key(&entry.id) {
            return Ok(());
        }
        let bytes = active.read(0, entry.len)?;
        if bytes.len() as u64 != entry.len || crc32fast::hash(&bytes) != entry.crc {
            return Err(Error::replica(
                "start replicating",
                format!(
                    "the replica holds {} bytes of segment {} that this store does not have; \
                     replicate to an empty place (the replica is of this store's past)",
                    entry.len, entry.id
                ),
            ));
        }
        let mut crc = crc32fast::Hasher::new();
        crc.update(&bytes);
        self.tail = Some(Tail {
            id: entry.id,
            shipped: entry.len,
            crc,
        });
        Ok(())
    }

    /// One round: ship what is new, publish a restore point if the log
    /// changed, drop what is past the retention window.
    async fn round(&mut self, view: LogView, config: &Replicate, control: &Control) -> Result<()> {
        if !self.started {
            self.start(&view).await?;
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
        let generation = match &view.manifest {
            Some((generation, bytes)) => {
                if !self.manifests.contains(generation) {
                    self.put(&objects::manifest(&self.root, *generation), bytes.clone())
                        .await?;
                    self.manifests.insert(*generation);
                }
                *generation
            }
            None => 0,
        };
        self.publish(generation, entries, control).await?;
        *control.covered.lock() = (view.position, view.taken_ms);
        if self
            .collected
            .is_none_or(|at| at.elapsed() >= COLLECT_EVERY.min(config.retain))
        {
            self.collect(config.retain).await?;
            self.collected = Some(Instant::now());
        }
        Ok(())
    }

    async fn ship_whole(
        &mut self,
        segment: &crate::store::replica::SegmentView,
        control: &Control,
    ) -> Result<Entry> {
        let id = segment.id;
        if let Some(Some(crc)) = self.whole.get(&id) {
            return Ok(Entry {
                id,
                len: segment.len,
                crc: *crc,
            });
        }
        let bytes = segment.read(0, segment.len)?;
        let crc = crc32fast::hash(&bytes);
        if !self.whole.contains_key(&id) {
            let n = bytes.len() as u64;
            self.put(&objects::segment(&self.root, id), bytes).await?;
            control.status.lock().shipped_bytes += n;
            self.fresh.insert(id);
            if self.tail.as_ref().is_some_and(|t| t.id == id) {
                self.tail = None;
            }
            self.sealed_pieces.insert(id);
        }
        self.whole.insert(id, Some(crc));
        Ok(Entry {
            id,
            len: segment.len,
            crc,
        })
    }

    async fn ship_piece(
        &mut self,
        segment: &crate::store::replica::SegmentView,
        control: &Control,
    ) -> Result<Entry> {
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
            let bytes = segment.read(tail.shipped, segment.len)?;
            let n = bytes.len() as u64;
            let mut crc = tail.crc.clone();
            crc.update(&bytes);
            let put = self
                .put(&objects::piece(&self.root, id, tail.shipped), bytes)
                .await;
            if let Err(e) = put {
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
            len: tail.shipped,
            crc: tail.crc.clone().finalize(),
        };
        self.tail = Some(tail);
        Ok(entry)
    }

    /// Publishes a restore point for the log `entries` make up, unless the
    /// newest one says the same; then marks the segments the log stopped
    /// using, and drops the pieces of those now whole.
    async fn publish(
        &mut self,
        generation: u64,
        entries: Vec<Entry>,
        control: &Control,
    ) -> Result<()> {
        if self
            .last
            .as_ref()
            .is_some_and(|p| p.generation == generation && p.segments == entries)
        {
            return Ok(());
        }
        let (number, time_ms) = match &self.last {
            Some(p) => (p.number + 1, now_ms().max(p.time_ms)),
            None => (1, now_ms()),
        };
        let point = Point {
            store: self.store,
            number,
            time_ms,
            generation,
            segments: entries,
        };
        self.put(&objects::point(&self.root, number, time_ms), point.encode())
            .await?;
        let live: BTreeSet<u64> = point.segments.iter().map(|e| e.id).collect();
        let before: BTreeSet<u64> = self
            .last
            .iter()
            .flat_map(|p| p.segments.iter().map(|e| e.id))
            .chain(self.fresh.iter().copied())
            .collect();
        self.last = Some(point);
        self.fresh.clear();
        {
            let mut status = control.status.lock();
            status.restore_point = number;
            status.restore_point_ms = time_ms;
        }
        for id in before.difference(&live) {
            self.put(&objects::retired(&self.root, *id, time_ms), Vec::new())
                .await?;
            self.whole.remove(id);
        }
        while let Some(id) = self.sealed_pieces.pop_first() {
            if let Err(e) = self.delete_under(&objects::pieces(&self.root, id)).await {
                self.sealed_pieces.insert(id);
                return Err(e);
            }
        }
        Ok(())
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
                let (n, t) = objects::parse_pair(m.location.filename()?)?;
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
            let old: Vec<u64> = self
                .manifests
                .iter()
                .copied()
                .filter(|&g| g < oldest.generation)
                .collect();
            for g in old {
                self.delete(&objects::manifest(&self.root, g)).await?;
                self.manifests.remove(&g);
            }
        }
        for meta in self.list(&objects::retired_dir(&self.root)).await? {
            let Some((id, t)) = meta.location.filename().and_then(objects::parse_pair) else {
                continue;
            };
            if t < horizon {
                self.delete(&objects::segment(&self.root, id)).await?;
                self.delete_under(&objects::pieces(&self.root, id)).await?;
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

/// The objects under `prefix`.
pub(crate) async fn list(
    target: &dyn ObjectStore,
    prefix: &Path,
) -> Result<Vec<object_store::ObjectMeta>> {
    target
        .list(Some(prefix))
        .try_collect()
        .await
        .map_err(|e| remote("list", prefix, e))
}

/// The object at `path`, whole.
pub(crate) async fn get(target: &dyn ObjectStore, path: &Path) -> Result<Bytes> {
    let found = target
        .get(path)
        .await
        .map_err(|e| remote("read", path, e))?;
    found.bytes().await.map_err(|e| remote("read", path, e))
}

/// The newest restore point under `root`, if there is one.
pub(crate) async fn newest_point(target: &dyn ObjectStore, root: &Path) -> Result<Option<Point>> {
    let newest = list(target, &objects::points(root))
        .await?
        .into_iter()
        .filter_map(|m| Some((objects::parse_pair(m.location.filename()?)?.0, m.location)))
        .max_by_key(|p| p.0);
    match newest {
        Some((_, path)) => {
            let bytes = get(target, &path).await?;
            Point::decode(&bytes, path.as_ref()).map(Some)
        }
        None => Ok(None),
    }
}

/// An object store's failure, naming the object.
pub(crate) fn remote(doing: &str, path: &Path, e: object_store::Error) -> Error {
    Error::replica(
        "use the object store",
        format!("could not {doing} {path}: {e}; check that it is reachable and writable"),
    )
}
