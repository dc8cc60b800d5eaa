//! Keeping a local copy of a replica up to date, for a standby that serves
//! reads from it (DESIGN.md §13, "Following").

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use object_store::path::Path as ObjectPath;
use object_store::ObjectStore;

use super::objects::{self, Entry, Heartbeat};
use super::restore::{restore, RestorePoint};
use super::ship::{get, newest_point, remote, segment_range};
use super::Replicate;
use crate::error::{Error, Result};
use crate::log::manifest::MANIFEST;
use crate::log::segments::{segment_id_of, segment_path};

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
    /// Each local segment's length and the CRC-32 state of its bytes.
    segments: BTreeMap<u64, (u64, crc32fast::Hasher)>,
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
        let point = if empty {
            Some(restore(from, &dir, None)?.point)
        } else {
            None
        };
        let (target, root) = from.open()?;
        let mut segments = BTreeMap::new();
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
            let mut crc = crc32fast::Hasher::new();
            crc.update(&bytes);
            segments.insert(id, (bytes.len() as u64, crc));
        }
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
        let options = crate::Options::default().create(false).maintenance(None);
        crate::Store::open(&self.dir, options)?.close()
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
            let (len, crc) = self
                .segments
                .remove(&entry.id)
                .unwrap_or((0, crc32fast::Hasher::new()));
            let caught = self.catch_up_segment(&runtime, entry, len, crc);
            let (len, crc) = match caught {
                Ok(done) => done,
                Err((kept, e)) => {
                    self.segments.insert(entry.id, kept);
                    return Err(e);
                }
            };
            self.segments.insert(entry.id, (len, crc));
        }
        if point.generation > 0 && self.manifest != Some((point.generation, point.manifest_epoch)) {
            let path = objects::manifest(&root, point.generation, point.manifest_epoch);
            let bytes = runtime.block_on(get(target.as_ref(), &path))?;
            let tmp = self.dir.join("MANIFEST.tmp");
            write_synced(&tmp, &bytes, false)?;
            std::fs::rename(&tmp, self.dir.join(MANIFEST))
                .map_err(|e| Error::io("switch to the new manifest", &tmp, e))?;
            sync_dir(&self.dir)?;
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
        sync_dir(&self.dir)?;
        self.point = Some(RestorePoint {
            number: point.number,
            time_ms: point.time_ms,
        });
        Ok(true)
    }

    /// Appends bytes `len..entry.len` of a segment to its local file and
    /// checks the whole against the entry's CRC-32; on failure, gives back
    /// what the file then holds.
    #[allow(clippy::type_complexity)]
    fn catch_up_segment(
        &self,
        runtime: &tokio::runtime::Runtime,
        entry: &Entry,
        len: u64,
        crc: crc32fast::Hasher,
    ) -> std::result::Result<(u64, crc32fast::Hasher), ((u64, crc32fast::Hasher), Error)> {
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
        let mut next = crc.clone();
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
            let path = segment_path(&self.dir, entry.id);
            if let Err(e) = write_synced(&path, &bytes, len > 0) {
                return Err(((len, crc), e));
            }
            next.update(&bytes);
        }
        if next.clone().finalize() != entry.crc {
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

fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io("sync the directory", dir, e))
}
