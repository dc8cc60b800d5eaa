//! The set of segment files, and reading records from them.
//!
//! Sealed segments are read through a read-only map; the active segment,
//! which is still growing, is read with positional reads (`pread`).

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;

use super::frame::{verify_payload, FRAME_HEADER_LEN};
use crate::error::{Error, Result};
use crate::mmap::SealedMap;

/// Where one record lives: 16 bytes, the unit of the in-memory index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RecordLoc {
    /// The segment id.
    pub segment: u64,
    /// Offset of the frame within the segment.
    pub offset: u32,
    /// Payload length.
    pub len: u32,
}

/// The file name of segment `id`.
pub fn segment_file_name(id: u64) -> String {
    format!("{id:016x}.seg")
}

/// The path of segment `id` in `dir`.
pub fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(segment_file_name(id))
}

/// The ids of the segment files in `dir`, ascending. Other files are ignored.
pub fn list_segment_ids(dir: &Path) -> Result<Vec<u64>> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| Error::io("list the store directory", dir, e))?;
    let mut ids = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("list the store directory", dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(stem) = name.strip_suffix(".seg") else {
            continue;
        };
        if stem.len() == 16 {
            if let Ok(id) = u64::from_str_radix(stem, 16) {
                ids.push(id);
            }
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

/// A segment as readers see it.
#[derive(Clone)]
pub enum SegmentData {
    /// Sealed and mapped.
    Sealed(Arc<SealedMap>),
    /// Still being appended to; read with `pread`.
    Active(Arc<File>),
}

/// All readable segments, by id.
pub struct Segments {
    dir: PathBuf,
    map: RwLock<BTreeMap<u64, SegmentData>>,
}

impl Segments {
    /// An empty set for the store in `dir`.
    pub fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            map: RwLock::new(BTreeMap::new()),
        }
    }

    /// Adds or replaces segment `id`.
    pub fn insert(&self, id: u64, data: SegmentData) {
        self.map.write().insert(id, data);
    }

    fn get(&self, id: u64) -> Option<SegmentData> {
        self.map.read().get(&id).cloned()
    }

    /// Reads the payload at `loc`, checking its frame's CRC, and hands it to `f`.
    pub fn with_payload<T>(&self, loc: RecordLoc, f: impl FnOnce(&[u8]) -> T) -> Result<T> {
        let data = self.get(loc.segment).ok_or_else(|| {
            Error::corrupt(
                loc.segment,
                u64::from(loc.offset),
                "the index points into a segment that is gone",
            )
        })?;
        let start = u64::from(loc.offset);
        let total = FRAME_HEADER_LEN + u64::from(loc.len);
        match data {
            SegmentData::Sealed(map) => {
                let frame = usize::try_from(start)
                    .ok()
                    .and_then(|s| map.bytes().get(s..s + total as usize))
                    .ok_or_else(|| Error::corrupt(loc.segment, start, "record past segment end"))?;
                let (head, payload) = frame.split_at(FRAME_HEADER_LEN as usize);
                self.check(loc, head, payload)?;
                Ok(f(payload))
            }
            SegmentData::Active(file) => {
                let mut buf = vec![0u8; total as usize];
                file.read_exact_at(&mut buf, start).map_err(|e| {
                    Error::io(
                        "read the active segment",
                        segment_path(&self.dir, loc.segment),
                        e,
                    )
                })?;
                let (head, payload) = buf.split_at(FRAME_HEADER_LEN as usize);
                self.check(loc, head, payload)?;
                Ok(f(payload))
            }
        }
    }

    fn check(&self, loc: RecordLoc, head: &[u8], payload: &[u8]) -> Result<()> {
        if verify_payload(loc.segment, u64::from(loc.offset), head, payload) {
            Ok(())
        } else {
            Err(Error::corrupt(
                loc.segment,
                u64::from(loc.offset),
                "the record checksum does not match on read",
            ))
        }
    }
}
