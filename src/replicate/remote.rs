//! Reading the object store: listings, objects, the newest restore point,
//! a segment's bytes from its objects, and the error that names what
//! failed. Shared by the shipper, the follower and restore.

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::ObjectStore;

use super::objects::{self, Entry, Point};
use crate::error::{Error, Result};

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
        .filter_map(|m| {
            let [number, _] = objects::parse_hexes::<2>(m.location.filename()?, "")?;
            Some((number, m.location))
        })
        .max_by_key(|p| p.0);
    match newest {
        Some((_, path)) => {
            let bytes = get(target, &path).await?;
            Point::decode(&bytes, path.as_ref()).map(Some)
        }
        None => Ok(None),
    }
}

/// Bytes `from..entry.len` of a segment: from its whole object, or from
/// the pieces that cover them (each starting where the one before ended,
/// from the segment's start). `doing` names the operation and adds a hint
/// to the error when they are not all there.
pub(crate) async fn segment_range(
    target: &dyn ObjectStore,
    root: &Path,
    entry: &Entry,
    from: u64,
    doing: (&'static str, &str),
) -> Result<Vec<u8>> {
    let missing = |at: u64| {
        Error::replica(
            doing.0,
            format!(
                "the replica lacks bytes {at}..{} of segment {} (an object is missing or cut \
                 short){}",
                entry.len, entry.id, doing.1
            ),
        )
    };
    let whole = objects::segment(root, entry.id, entry.epoch);
    match target.head(&whole).await {
        Ok(meta) if meta.size >= entry.len => {
            return target
                .get_range(&whole, from..entry.len)
                .await
                .map(|b| b.to_vec())
                .map_err(|e| remote("read", &whole, e));
        }
        Ok(_) => return Err(missing(from)),
        Err(object_store::Error::NotFound { .. }) => {}
        Err(e) => return Err(remote("read", &whole, e)),
    }
    let mut pieces: Vec<(u64, u64, Path)> =
        list(target, &objects::pieces(root, entry.id, entry.epoch))
            .await?
            .into_iter()
            .filter_map(|m| {
                let [start] = objects::parse_hexes::<1>(m.location.filename()?, "")?;
                Some((start, m.size, m.location))
            })
            .collect();
    pieces.sort_unstable_by_key(|p| p.0);
    // The pieces chain from the segment's start; those that overlap the
    // bytes wanted are read.
    let (mut at, mut bytes) = (0u64, Vec::new());
    for (start, size, path) in pieces {
        if start != at || at >= entry.len {
            continue;
        }
        let end = (start + size).min(entry.len);
        if end > from {
            let range = from.max(start) - start..end - start;
            let got = target
                .get_range(&path, range)
                .await
                .map_err(|e| remote("read", &path, e))?;
            bytes.extend_from_slice(&got);
        }
        at = start + size;
    }
    if at < entry.len || bytes.len() as u64 != entry.len - from {
        return Err(missing(from + bytes.len() as u64));
    }
    Ok(bytes)
}

/// An object store's failure, naming the object.
pub(crate) fn remote(doing: &str, path: &Path, e: object_store::Error) -> Error {
    Error::replica(
        "use the object store",
        format!("could not {doing} {path}: {e}; check that it is reachable and writable"),
    )
}
