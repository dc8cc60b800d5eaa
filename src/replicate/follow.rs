//! Keeping a local copy of a replica up to date, for a standby that serves
//! reads from it (DESIGN.md §13, "Following").

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use object_store::path::Path as ObjectPath;
use object_store::ObjectStore;

use super::objects::{self, Entry, Heartbeat};
use super::remote::{get, newest_point, remote, segment_range};
use super::restore::{restore_into, RestorePoint};
use super::Replicate;
use crate::error::{Error, Result};
use crate::fs::OsFs;
use crate::log::manifest::Manifest;
use crate::log::segments::{segment_id_of, segment_path, sync_dir};

/// A local segment's length and the CRC-32 of its bytes.
type Held = (u64, u32);

/// A local copy of a replica, brought up to its newest restore point by
/// [`catch_up`](Self::catch_up): the segments' new bytes appended, new
/// segments and manifests written, segments no longer named removed. Open
/// it with [`Store::open_read_only`](crate::Store::open_read_only) after
/// each catch-up that changed it; never write to it (promote instead: open
/// it with [`Options::replicate`](crate::Options::replicate) to the same
/// replica, which claims it).
pub struct Follower {
    from: Replicate,
    target: Arc<dyn ObjectStore>,
    root: ObjectPath,
    dir: PathBuf,
    /// Each local segment's length and the CRC-32 of its bytes.
    segments: BTreeMap<u64, Held>,
    /// The manifest written, by (generation, epoch).
    manifest: Option<(u64, u64)>,
    point: Option<RestorePoint>,
}

impl std::fmt::Debug for Follower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follower")
            .field("from", &self.from.describe())
            .field("dir", &self.dir)
            .field("point", &self.point)
            .finish_non_exhaustive()
    }
}

impl Follower {
    /// Follows the replica at `from` into `dir`: restores it there first
    /// if `dir` holds no store; otherwise reads the local segments (whose
    /// bytes the next catch-up checks against the replica's newest point).
    pub fn start(from: &Replicate, dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        let empty = std::fs::read_dir(&dir).map_or(true, |mut d| d.next().is_none());
        let mut segments = BTreeMap::new();
        let point = if empty {
            // What was restored is what the point names: nothing to read back.
            let (report, restored) = restore_into(from, &dir, None)?;
            for e in &restored.segments {
                segments.insert(e.id, (e.len, e.crc));
            }
            Some(report.point)
        } else {
            let entries =
                std::fs::read_dir(&dir).map_err(|e| Error::io("read the directory", &dir, e))?;
            for entry in entries {
                let entry = entry.map_err(|e| Error::io("read the directory", &dir, e))?;
                let name = entry.file_name();
                let Some(id) = name.to_str().and_then(segment_id_of) else {
                    continue;
                };
                let bytes =
                    std::fs::read(entry.path()).map_err(|e| Error::io("read", entry.path(), e))?;
                segments.insert(id, (bytes.len() as u64, crc32fast::hash(&bytes)));
            }
            None
        };
        let (target, root) = from.open()?;
        Ok(Self {
            from: from.clone(),
            target,
            root,
            dir,
            segments,
            manifest: None,
            point,
        })
    }

    /// What the replica's writer last said: its epoch and when it said it
    /// was alive (`None`: no writer has, or the heartbeat is damaged). A
    /// standby that sees it older than a lease it chose (its own clock
    /// against the writer's: keep them in step) may promote itself.
    pub fn heartbeat(&self) -> Result<Option<Heartbeat>> {
        let runtime = super::restore::runtime()?;
        let path = objects::heartbeat(&self.root);
        runtime.block_on(async {
            match self.target.get(&path).await {
                Ok(found) => {
                    let bytes = found.bytes().await.map_err(|e| remote("read", &path, e))?;
                    Ok(Heartbeat::decode(&bytes))
                }
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(remote("read", &path, e)),
            }
        })
    }

    /// Writes the copy's index checkpoint, so that a read-only open of it
    /// reads only the log after this point (a read-only open never writes
    /// one): the copy is opened to write, without replication or
    /// maintenance, and closed, which changes none of its log's bytes.
    /// Call it when read-only opens replay much (their
    /// [`OpenReport::replayed`](crate::OpenReport::replayed) says how
    /// much), never while anything writes to the copy.
    pub fn checkpoint(&self) -> Result<()> {
        let options = crate::options::Options::default()
            .create(false)
            .maintenance(None);
        crate::store::Store::open(&self.dir, options)?.close()
    }

    /// The restore point the local copy holds (`None` until a catch-up
    /// when it was not restored just now).
    pub fn point(&self) -> Option<RestorePoint> {
        self.point
    }

    /// Brings the local copy to the replica's newest restore point; whether
    /// it changed. Fails, leaving the copy as it was or with whole frames
    /// appended only, if an object is missing or damaged, or if the copy
    /// does not hold what the point says it should (it is then no copy of
    /// this replica: remove the directory and start again). Runs a small
    /// runtime of its own while it works: call it from a thread that is not
    /// running an async runtime's tasks.
    pub fn catch_up(&mut self) -> Result<bool> {
        let runtime = super::restore::runtime()?;
        let (target, root) = (self.target.clone(), self.root.clone());
        let Some(point) = runtime.block_on(newest_point(target.as_ref(), &root))? else {
            return Ok(false);
        };
        if self.point.is_some_and(|p| p.number == point.number) {
            return Ok(false);
        }
        for entry in &point.segments {
            let held = self.segments.get(&entry.id).copied().unwrap_or((0, 0));
            let caught = self.catch_up_segment(&runtime, entry, held);
            let (Ok(held) | Err((held, _))) = &caught;
            self.segments.insert(entry.id, *held);
            caught.map_err(|(_, e)| e)?;
        }
        if point.generation > 0 && self.manifest != Some((point.generation, point.manifest_epoch)) {
            let path = objects::manifest(&root, point.generation, point.manifest_epoch);
            let bytes = runtime.block_on(get(target.as_ref(), &path))?;
            Manifest::decode(&bytes)
                .ok_or_else(|| {
                    Error::replica(
                        "follow the replica",
                        format!("{path} is not a sound manifest"),
                    )
                })?
                .write(&OsFs, &self.dir)?;
            self.manifest = Some((point.generation, point.manifest_epoch));
        }
        let named: Vec<u64> = point.segments.iter().map(|e| e.id).collect();
        let gone: Vec<u64> = self
            .segments
            .keys()
            .copied()
            .filter(|id| !named.contains(id))
            .collect();
        for id in gone {
            let path = segment_path(&self.dir, id);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("remove a segment the replica dropped", path, e)),
            }
            self.segments.remove(&id);
        }
        sync_dir(&OsFs, &self.dir)?;
        self.point = Some(RestorePoint {
            number: point.number,
            time_ms: point.time_ms,
        });
        Ok(true)
    }

    /// Appends bytes `len..entry.len` of a segment to its local file and
    /// checks the whole against the entry's CRC-32; on failure, gives back
    /// what the file then holds.
    fn catch_up_segment(
        &self,
        runtime: &tokio::runtime::Runtime,
        entry: &Entry,
        (len, crc): Held,
    ) -> std::result::Result<Held, (Held, Error)> {
        let diverged = |why: &str| {
            Error::replica(
                "follow the replica",
                format!(
                    "the local copy in {} {why} segment {} of restore point's: it is no copy of \
                     this replica; remove the directory and start again",
                    self.dir.display(),
                    entry.id
                ),
            )
        };
        if len > entry.len {
            return Err(((len, crc), diverged("holds more of")));
        }
        let mut next = crc32fast::Hasher::new_with_initial(crc);
        if len < entry.len {
            let fetched = runtime.block_on(segment_range(
                self.target.as_ref(),
                &self.root,
                entry,
                len,
                ("follow the replica", ""),
            ));
            let bytes = match fetched {
                Ok(bytes) => bytes,
                Err(e) => return Err(((len, crc), e)),
            };
            next.update(&bytes);
            // Checked before a byte is written: a damaged object leaves the
            // copy as it was, and a later catch-up goes on from there once
            // the object is whole again (or a newer point names another).
            if next.clone().finalize() != entry.crc {
                return Err((
                    (len, crc),
                    Error::replica(
                        "follow the replica",
                        format!(
                            "bytes {len}..{} of segment {} in the replica do not match \
                             the CRC-32 its restore point records (a damaged or \
                             half-written object, or the copy holds other bytes before them): the \
                             local copy is left as it was, and following goes on once the \
                             object is whole",
                            entry.len, entry.id
                        ),
                    ),
                ));
            }
            let path = segment_path(&self.dir, entry.id);
            if let Err(e) = write_synced(&path, &bytes, len > 0) {
                return Err(((len, crc), e));
            }
        }
        let next = next.finalize();
        if next != entry.crc {
            return Err(((entry.len, next), diverged("does not hold")));
        }
        Ok((entry.len, next))
    }
}

/// Writes (or, with `append`, appends) `bytes` to `path` and syncs it.
fn write_synced(path: &Path, bytes: &[u8], append: bool) -> Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .open(path)
        .map_err(|e| Error::io("open", path, e))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_data())
        .map_err(|e| Error::io("write", path, e))
}
