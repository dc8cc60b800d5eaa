//! Building a store from its replica (DESIGN.md §13, "Restoring").

use std::path::{Path, PathBuf};

use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::ObjectStore;

use super::objects::{self, Point};
use super::remote::{get, list, segment_range};
use super::Replicate;
use crate::error::{Error, Result};
use crate::fs::{Fs, OsFs};
use crate::log::manifest::Manifest;
use crate::log::segments::sync_dir;
use crate::options::Options;
use crate::store::Store;

/// A restore point of a replica: the log as it stood at a moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RestorePoint {
    /// Its number: restore points are numbered from 1 as they are
    /// published.
    pub number: u64,
    /// When it was published, in ms since the Unix epoch.
    pub time_ms: u64,
}

/// What [`restore`] built.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RestoreReport {
    /// The restore point the store holds.
    pub point: RestorePoint,
    /// Segments written.
    pub segments: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Records the verification read (every one passed its checksum).
    pub records: u64,
}

/// The replica's restore points, oldest first (those within its
/// retention window, and always the newest).
pub fn restore_points(from: &Replicate) -> Result<Vec<RestorePoint>> {
    let (target, root) = from.open()?;
    let found = runtime()?.block_on(points(target.as_ref(), &root))?;
    Ok(found.into_iter().map(|p| p.0).collect())
}

async fn points(
    target: &dyn ObjectStore,
    root: &ObjectPath,
) -> Result<Vec<(RestorePoint, ObjectPath)>> {
    let mut found: Vec<(RestorePoint, ObjectPath)> = list(target, &objects::points(root))
        .await?
        .into_iter()
        .filter_map(|m| {
            let [number, time_ms] = objects::parse_hexes::<2>(m.location.filename()?, "")?;
            Some((RestorePoint { number, time_ms }, m.location))
        })
        .collect();
    found.sort_unstable_by_key(|p| p.0.number);
    Ok(found)
}

/// Checks that every restore point the replica keeps can be restored:
/// each names a manifest that is there and segments whose first bytes
/// (from the whole object or the chain of pieces) match the CRC-32 it
/// records. Reads each object once, however many points name it (a
/// restore reads it once per point), and builds no store: what it leaves
/// to [`restore`] is the record-by-record check of the log. The number of
/// points checked; an error names the first point that fails and why.
pub fn check_points(from: &Replicate) -> Result<usize> {
    let (target, root) = from.open()?;
    runtime()?.block_on(check_all(target.as_ref(), &root))
}

async fn check_all(target: &dyn ObjectStore, root: &ObjectPath) -> Result<usize> {
    use std::collections::BTreeMap;
    let found = points(target, root).await?;
    // Per upload of a segment: each (length, CRC-32) a point names, and
    // the first point that names it.
    let mut named: BTreeMap<(u64, u64), BTreeMap<u64, (u32, u64)>> = BTreeMap::new();
    let mut manifests: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    for (p, path) in &found {
        let point = Point::decode(&get(target, path).await?, path.as_ref())?;
        if point.generation > 0 {
            manifests
                .entry((point.generation, point.manifest_epoch))
                .or_insert(p.number);
        }
        for e in &point.segments {
            let lens = named.entry((e.id, e.epoch)).or_default();
            let (crc, _) = *lens.entry(e.len).or_insert((e.crc, p.number));
            if crc != e.crc {
                return Err(unrestorable(
                    p.number,
                    e.id,
                    e.epoch,
                    e.len,
                    "another point's",
                ));
            }
        }
    }
    for (&(generation, epoch), &number) in &manifests {
        let path = objects::manifest(root, generation, epoch);
        get(target, &path).await.map_err(|e| {
            Error::replica(
                "check the restore points",
                format!("restore point {number} names a manifest that cannot be read: {e}"),
            )
        })?;
    }
    for ((id, epoch), lens) in named {
        let Some((&len, &(crc, _))) = lens.last_key_value() else {
            continue;
        };
        let entry = super::objects::Entry {
            id,
            epoch,
            len,
            crc,
        };
        let bytes = segment_range(target, root, &entry, 0, ("check the restore points", ""))
            .await
            .map_err(|e| {
                let first = lens.values().map(|&(_, n)| n).min().unwrap_or(0);
                Error::replica(
                    "check the restore points",
                    format!("restore point {first} (and later) names what is not there: {e}"),
                )
            })?;
        let (mut hasher, mut at) = (crc32fast::Hasher::new(), 0u64);
        for (&len, &(crc, number)) in &lens {
            // `bytes` holds the longest length named, so every shorter one.
            let slice = usize::try_from(at)
                .ok()
                .zip(usize::try_from(len).ok())
                .and_then(|(a, b)| bytes.get(a..b));
            let Some(slice) = slice else {
                return Err(unrestorable(number, id, epoch, len, "the objects'"));
            };
            hasher.update(slice);
            at = len;
            if hasher.clone().finalize() != crc {
                return Err(unrestorable(number, id, epoch, len, "the objects'"));
            }
        }
    }
    Ok(found.len())
}

fn unrestorable(number: u64, id: u64, epoch: u64, len: u64, whose: &str) -> Error {
    Error::replica(
        "check the restore points",
        format!(
            "restore point {number} names segment {id} as uploaded by writer {epoch} with {len} \
             bytes whose CRC-32 is not {whose}: that point cannot be restored"
        ),
    )
}

/// Builds a store in `dir` (new or empty) from the replica at `from`: as of
/// its newest restore point, or with `at` (ms since the Unix epoch) as of
/// the newest one published at or before that time. Every segment's bytes
/// are checked against the restore point's CRC-32 before they are written,
/// and the store is verified record by record before it is put in place
/// (built beside `dir` and renamed onto it, so that a failed restore
/// leaves nothing that opens). Runs its own small runtime: call it from a
/// thread that is not running an async runtime's tasks.
pub fn restore(from: &Replicate, dir: impl AsRef<Path>, at: Option<u64>) -> Result<RestoreReport> {
    restore_into(from, dir.as_ref(), at).map(|(report, _)| report)
}

/// [`restore`], giving the restore point it restored too.
pub(super) fn restore_into(
    from: &Replicate,
    dir: &Path,
    at: Option<u64>,
) -> Result<(RestoreReport, Point)> {
    if std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()) {
        return Err(Error::InvalidParams {
            field: "dir",
            reason: format!(
                "{} is not empty; restore into a new or empty directory",
                dir.display()
            ),
        });
    }
    let (target, root) = from.open()?;
    let runtime = runtime()?;
    let found = runtime.block_on(points(target.as_ref(), &root))?;
    let Some(oldest) = found.first() else {
        return Err(Error::replica(
            "restore",
            format!(
                "{} holds no restore point (nothing was shipped there)",
                from.describe()
            ),
        ));
    };
    let chosen = match at {
        None => found.last(),
        Some(at) => found.iter().rev().find(|p| p.0.time_ms <= at),
    };
    let Some((_, path)) = chosen else {
        return Err(Error::replica(
            "restore",
            format!(
                "the oldest restore point of {} is from {}, after {}; choose a later time",
                from.describe(),
                crate::time::iso8601_ms(oldest.0.time_ms),
                crate::time::iso8601_ms(at.unwrap_or(0))
            ),
        ));
    };
    let point = runtime.block_on(async {
        let bytes = get(target.as_ref(), path).await?;
        Point::decode(&bytes, path.as_ref())
    })?;
    let building = building_dir(dir)?;
    let built = runtime.block_on(build(target.as_ref(), &root, &point, &building));
    let report = built.and_then(|(segments, bytes)| {
        // A strict open with no checkpoint reads every record and checks
        // its checksum: it fails on damage, and would cut a torn tail,
        // which a restored log (whole frames only) never has.
        let options = Options::default().create(false).maintenance(None);
        let store = Store::open(&building, options)?;
        let open = store.open_report().clone();
        store.close()?;
        let clean = open.torn_tail.is_none()
            && open.skipped.is_empty()
            && open.lost.is_empty()
            && open.foreign.is_empty()
            && open.removed_segments.is_empty();
        if !clean {
            return Err(Error::replica(
                "restore",
                format!(
                    "the restored log does not open clean ({open:?}); restore from an older \
                     point with --at"
                ),
            ));
        }
        Ok(RestoreReport {
            point: RestorePoint {
                number: point.number,
                time_ms: point.time_ms,
            },
            segments,
            bytes,
            records: open.records,
        })
    });
    let report = report.and_then(|report| {
        std::fs::rename(&building, dir)
            .map_err(|e| Error::io("put the restored store in place", dir, e))?;
        Ok(report)
    });
    if report.is_err() {
        let _ = std::fs::remove_dir_all(&building);
    }
    report.map(|report| (report, point))
}

/// A new directory beside `dir` to build the store in.
fn building_dir(dir: &Path) -> Result<PathBuf> {
    let name = dir.file_name().ok_or_else(|| Error::InvalidParams {
        field: "dir",
        reason: format!("{} names no directory", dir.display()),
    })?;
    let parent = dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| Error::io("make the directory", parent, e))?;
    let building = parent.join(format!(
        ".{}.restoring-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&building);
    std::fs::create_dir(&building).map_err(|e| Error::io("make the directory", &building, e))?;
    Ok(building)
}

/// Writes the point's identity, manifest and segments into `dir`; returns
/// the segments' count and bytes.
async fn build(
    target: &dyn ObjectStore,
    root: &ObjectPath,
    point: &Point,
    dir: &Path,
) -> Result<(usize, u64)> {
    let identity = get(target, &objects::identity(root)).await?;
    if identity.as_ref() != crate::log::identity::encode(point.store).as_slice() {
        return Err(Error::replica(
            "restore",
            format!(
                "{} is not the identity of the store the restore point names",
                objects::identity(root)
            ),
        ));
    }
    write_file(&dir.join(crate::log::identity::IDENTITY), &identity)?;
    if point.generation > 0 {
        let path = objects::manifest(root, point.generation, point.manifest_epoch);
        let bytes = get(target, &path).await?;
        let manifest = Manifest::decode(&bytes)
            .filter(|m| m.generation == point.generation && m.store == Some(point.store))
            .ok_or_else(|| {
                Error::replica(
                    "restore",
                    format!("{path} is damaged or not the manifest the restore point names"),
                )
            })?;
        manifest.write(&OsFs, dir)?;
    }
    // Up to FETCHES segments at once are read, checked, written and
    // synced (the writes on the runtime's blocking threads).
    // After a failure, the rest are skipped and those under way awaited, so
    // that nothing writes into the directory once the caller removes it.
    let failed = &std::sync::atomic::AtomicBool::new(false);
    let mut restored = futures::stream::iter(&point.segments)
        .map(|entry| async move {
            if failed.load(std::sync::atomic::Ordering::Acquire) {
                return Ok(0);
            }
            let bytes = segment_range(
                target,
                root,
                entry,
                0,
                ("restore", "; restore from an older point with --at"),
            )
            .await?;
            if crc32fast::hash(&bytes) != entry.crc {
                return Err(Error::replica(
                    "restore",
                    format!(
                        "segment {} of the replica does not match its restore point's checksum \
                         (a damaged object); restore from an older point with --at",
                        entry.id
                    ),
                ));
            }
            let path = crate::log::segments::segment_path(dir, entry.id);
            tokio::task::spawn_blocking(move || write_file(&path, &bytes))
                .await
                .map_err(|e| {
                    Error::replica("restore", format!("a segment's write failed: {e}"))
                })??;
            Ok(entry.len)
        })
        .buffer_unordered(FETCHES);
    let (mut total, mut first_error) = (0, None);
    while let Some(len) = restored.next().await {
        match len {
            Ok(len) => total += len,
            Err(e) => {
                failed.store(true, std::sync::atomic::Ordering::Release);
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    sync_dir(&OsFs, dir)?;
    Ok((point.segments.len(), total))
}

/// How many segments a restore reads at once.
const FETCHES: usize = 4;

/// Writes a file of the store being built, synced.
fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    OsFs.write_file(path, bytes)
        .map_err(|e| Error::io("write", path, e))
}

pub(super) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("start a runtime", "tokio", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restore_into_a_directory_with_files_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("x"), b"x").unwrap();
        let err = restore(
            &Replicate::to("/nonexistent-bucket-dir-not-used"),
            dir.path(),
            None,
        )
        .unwrap_err();
        assert!(err.to_string().contains("not empty"), "{err}");
    }
}
