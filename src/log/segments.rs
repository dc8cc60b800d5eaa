//! The set of segment files, and reading records from them.
//!
//! Sealed segments are read through a read-only map. The active segment,
//! which is still growing, is read from its mirror: the bytes an open found
//! already written, through a map of them, then a copy of the bytes the
//! writer appended since, kept in memory as it writes them, read under a
//! lock with no `unsafe` and no system call.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;

use super::frame::{verify_payload, FRAME_HEADER_LEN};
use crate::error::{Error, Result};
use crate::fs::{Fs, Mapped};

/// The largest segment id: the index keeps a segment id in 4 bytes. An open
/// refuses a segment file named past it, and the writer starts none.
pub const MAX_SEGMENT_ID: u64 = u32::MAX as u64;

/// Where one record lives: 16 bytes, the unit of the in-memory index.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct RecordLoc {
    /// The segment id.
    pub segment: u64,
    /// Offset of the frame within the segment.
    pub offset: u32,
    /// Payload length.
    pub len: u32,
}

/// A [`RecordLoc`] as the index keeps it: 12 bytes, the segment id in 4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PackedLoc {
    /// The segment id (at most [`MAX_SEGMENT_ID`]).
    pub segment: u32,
    /// Offset of the frame within the segment.
    pub offset: u32,
    /// Payload length.
    pub len: u32,
}

impl From<RecordLoc> for PackedLoc {
    fn from(loc: RecordLoc) -> Self {
        PackedLoc {
            // In range: the writer starts no segment past MAX_SEGMENT_ID and
            // an open refuses one.
            segment: u32::try_from(loc.segment).unwrap_or(u32::MAX),
            offset: loc.offset,
            len: loc.len,
        }
    }
}

impl From<PackedLoc> for RecordLoc {
    fn from(loc: PackedLoc) -> Self {
        RecordLoc {
            segment: u64::from(loc.segment),
            offset: loc.offset,
            len: loc.len,
        }
    }
}

/// How many bytes of records a history read touches ahead of reading them.
pub const PREFETCH_BYTES: usize = 256 << 10;

/// The file name of segment `id`.
pub fn segment_file_name(id: u64) -> String {
    format!("{id:016x}.seg")
}

/// The path of segment `id` in `dir`.
pub fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(segment_file_name(id))
}

/// The ids of the segment files in `dir`, ascending. Other files are ignored.
pub fn list_segment_ids(fs: &dyn Fs, dir: &Path) -> Result<Vec<u64>> {
    let entries = fs
        .list(dir)
        .map_err(|e| Error::io("list the store directory", dir, e))?;
    let mut ids: Vec<u64> = entries
        .iter()
        .filter_map(|(name, _)| segment_id_of(name))
        .collect();
    ids.sort_unstable();
    Ok(ids)
}

/// The id a segment file's name says (16 hex digits, then `.seg`); `None`
/// for any other file.
pub fn segment_id_of(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".seg").filter(|s| s.len() == 16)?;
    u64::from_str_radix(stem, 16).ok()
}

/// The active segment's bytes, from offset 0, as far as they are written.
pub type Mirror = Arc<RwLock<MirrorBytes>>;

/// The bytes of a [`Mirror`]: those an open found already written, read
/// where they lie (the writer only ever appends after them, so they never
/// change), then those appended since, in memory.
pub struct MirrorBytes {
    found: Option<Arc<Mapped>>,
    /// `found`'s length (0 without it).
    found_len: usize,
    appended: Vec<u8>,
}

impl MirrorBytes {
    /// The bytes `found` (the segment as an open found it, if it continues
    /// one), then `appended`.
    pub fn new(found: Option<Arc<Mapped>>, appended: Vec<u8>) -> Self {
        let found_len = found.as_ref().map_or(0, |m| m.bytes().len());
        Self {
            found,
            found_len,
            appended,
        }
    }

    /// How many bytes it holds.
    pub fn len(&self) -> usize {
        self.found_len + self.appended.len()
    }

    /// Bytes `range` (offsets in the segment), if it holds them all on one
    /// side of where the open found the segment ending (a frame, or bytes
    /// appended since, always are).
    pub fn get(&self, range: std::ops::Range<usize>) -> Option<&[u8]> {
        if range.start >= self.found_len {
            let n = self.found_len;
            self.appended
                .get(range.start - n..range.end.checked_sub(n)?)
        } else {
            self.found.as_ref()?.bytes().get(range)
        }
    }

    /// A copy of bytes `range`, wherever they lie: on one side of where
    /// the open found the segment ending, or across it (replication ships
    /// a segment from its start after a reopen, DESIGN.md §13); `None` if
    /// it does not hold them all.
    #[cfg_attr(not(feature = "replicate"), allow(dead_code))]
    pub fn copy(&self, range: std::ops::Range<usize>) -> Option<Vec<u8>> {
        if range.end > self.len() || range.start > range.end {
            return None;
        }
        let split = range.end.min(self.found_len).max(range.start);
        let mut bytes = Vec::with_capacity(range.end - range.start);
        if range.start < split {
            bytes.extend_from_slice(self.get(range.start..split)?);
        }
        if split < range.end {
            bytes.extend_from_slice(self.get(split..range.end)?);
        }
        Some(bytes)
    }

    /// The bytes the open found (the segment's first bytes), if any.
    pub fn found(&self) -> Option<&[u8]> {
        self.found.as_ref().map(|m| m.bytes())
    }

    /// Where the writer appends (after every byte held).
    pub fn appended(&mut self) -> &mut Vec<u8> {
        &mut self.appended
    }

    /// Drops every byte from `len` on (never below what the open found).
    pub fn truncate(&mut self, len: usize) {
        self.appended.truncate(len.saturating_sub(self.found_len));
    }
}

/// A sealed segment: mapped, or mapped on its first read (an open maps
/// none of the segments its checkpoint covers: it knows their lengths and
/// headers from the directory's survey).
pub struct Sealed {
    len: u64,
    map: std::sync::OnceLock<Mapped>,
    /// Where to map it from, until it is mapped.
    file: Option<(Arc<dyn Fs>, PathBuf)>,
}

impl Sealed {
    /// A segment mapped already.
    pub fn mapped(map: Mapped) -> Self {
        let len = map.bytes().len() as u64;
        Self {
            len,
            map: std::sync::OnceLock::from(map),
            file: None,
        }
    }

    /// Segment file `path` of `fs`, `len` bytes long, mapped when first read.
    pub fn unmapped(fs: Arc<dyn Fs>, path: PathBuf, len: u64) -> Self {
        Self {
            len,
            map: std::sync::OnceLock::new(),
            file: Some((fs, path)),
        }
    }

    /// Its length.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Its bytes, mapping it first if it is not yet. (Two first reads at
    /// once may both map it; one map is kept, the other dropped.)
    pub fn bytes(&self) -> Result<&[u8]> {
        if let Some(map) = self.map.get() {
            return Ok(map.bytes());
        }
        let Some((fs, path)) = &self.file else {
            // Unreachable: a segment made without a map has a file.
            return Err(Error::corrupt(0, 0, "a sealed segment without a file"));
        };
        let map = fs
            .map(path)
            .map_err(|e| Error::io("map a segment", path, e))?;
        Ok(self.map.get_or_init(|| map).bytes())
    }
}

/// A segment as readers see it.
#[derive(Clone)]
pub enum SegmentData {
    /// Sealed: read through a map.
    Sealed(Arc<Sealed>),
    /// Still being appended to; read from its in-memory mirror.
    Active(Mirror),
}

/// All readable segments, by id.
#[derive(Default)]
pub struct Segments {
    map: RwLock<BTreeMap<u64, SegmentData>>,
}

impl Segments {
    /// Adds or replaces segment `id`.
    pub fn insert(&self, id: u64, data: SegmentData) {
        self.map.write().insert(id, data);
    }

    /// Segment `id`, if it is readable.
    pub fn get(&self, id: u64) -> Option<SegmentData> {
        self.map.read().get(&id).cloned()
    }

    /// Removes segment `id`, handing back its data.
    pub fn remove(&self, id: u64) -> Option<SegmentData> {
        self.map.write().remove(&id)
    }

    /// The ids of the readable segments, ascending.
    pub fn ids(&self) -> Vec<u64> {
        self.map.read().keys().copied().collect()
    }

    /// Reads the payload at `loc`, checking its frame's CRC, and hands it to `f`.
    pub fn with_payload<T>(&self, loc: RecordLoc, f: impl FnOnce(&[u8]) -> T) -> Result<T> {
        self.reading().with_payload(loc, f)
    }

    /// The set, read-locked for the reads of one request.
    pub fn reading(&self) -> Reading<'_> {
        Reading {
            map: self.map.read(),
            reads: 0,
        }
    }
}

/// How many payloads a [`Reading`] reads before it lets a waiting writer of
/// the segment set in.
const READS_PER_TURN: u32 = 32;

/// The segment set read-locked for the records of one request (a history
/// read): one lock for them all, not one per record, whose atomic
/// operations stalled each record's read behind the loads before it. Every
/// [`READS_PER_TURN`] payloads it lets a waiting writer (a rotation, a
/// merge's switch) in first, so a long read never holds one back for long.
/// `f`s only decode and copy, and never touch the set.
pub struct Reading<'a> {
    map: parking_lot::RwLockReadGuard<'a, BTreeMap<u64, SegmentData>>,
    reads: u32,
}

impl Reading<'_> {
    /// Reads the payload at `loc`, checking its frame's CRC, and hands it to `f`.
    pub fn with_payload<T>(&mut self, loc: RecordLoc, f: impl FnOnce(&[u8]) -> T) -> Result<T> {
        self.reads += 1;
        if self.reads == READS_PER_TURN {
            self.reads = 0;
            parking_lot::RwLockReadGuard::bump(&mut self.map);
        }
        let data = self.map.get(&loc.segment).ok_or_else(|| {
            Error::corrupt(
                loc.segment,
                u64::from(loc.offset),
                "the index points into a segment that is gone",
            )
        })?;
        match data {
            SegmentData::Sealed(sealed) => {
                Segments::payload_in(loc, sealed.bytes()?.get(Segments::frame(loc)), f)
            }
            // Checked too: after an open from a checkpoint, the mirror holds
            // bytes on disk that no scan has verified.
            SegmentData::Active(mirror) => {
                Segments::payload_in(loc, mirror.read().get(Segments::frame(loc)), f)
            }
        }
    }

    /// Reads one byte of every cache line of the records at `locs`, all
    /// before any is used: the loads are independent, so the processor
    /// overlaps their cache misses instead of taking them one record at a
    /// time when the records are then checked and copied in turn. Stops
    /// after [`PREFETCH_BYTES`], which stay in the cache until they are read.
    /// A record that lies right after the one before it (a context's
    /// records merged into a run) is not touched: reading a run in order,
    /// the processor fetches ahead on its own.
    pub fn prefetch(&self, locs: impl Iterator<Item = RecordLoc>) {
        const LINE: usize = 64;
        let mut acc = 0u8;
        let mut budget = PREFETCH_BYTES;
        let mut after: Option<(u64, usize)> = None;
        for loc in locs {
            budget = match budget.checked_sub(loc.len as usize) {
                Some(left) => left,
                None => break,
            };
            let frame = Segments::frame(loc);
            let follows = after == Some((loc.segment, frame.start));
            after = Some((loc.segment, frame.end));
            if follows {
                continue;
            }
            let touch = |bytes: &[u8]| {
                bytes
                    .get(frame.clone())
                    .map_or(0, |r| r.iter().step_by(LINE).fold(0u8, |a, b| a ^ b))
            };
            acc ^= match self.map.get(&loc.segment) {
                Some(SegmentData::Sealed(m)) => m.bytes().map_or(0, touch),
                // What the open found of the active segment is mapped like a
                // sealed one; what was appended since is recent, hence
                // likely cached already.
                Some(SegmentData::Active(m)) => m.read().found().map_or(0, touch),
                None => 0,
            };
        }
        std::hint::black_box(acc);
    }
}

impl Segments {
    /// Where the frame of the record at `loc` lies in its segment.
    fn frame(loc: RecordLoc) -> std::ops::Range<usize> {
        let start = loc.offset as usize;
        start..start + FRAME_HEADER_LEN as usize + loc.len as usize
    }

    /// Checks the frame of the record at `loc` (`None` if its segment ends
    /// before it) and hands its payload to `f`.
    fn payload_in<T>(
        loc: RecordLoc,
        frame: Option<&[u8]>,
        f: impl FnOnce(&[u8]) -> T,
    ) -> Result<T> {
        let frame = frame.ok_or_else(|| {
            Error::corrupt(
                loc.segment,
                u64::from(loc.offset),
                "record past the segment's end",
            )
        })?;
        let (head, payload) = frame.split_at(FRAME_HEADER_LEN as usize);
        if !verify_payload(loc.segment, u64::from(loc.offset), head, payload) {
            return Err(Error::corrupt(
                loc.segment,
                u64::from(loc.offset),
                "the record checksum does not match on read",
            ));
        }
        Ok(f(payload))
    }
}

/// Syncs a directory, making the names in it durable.
pub fn sync_dir(fs: &dyn Fs, dir: &Path) -> Result<()> {
    fs.sync_dir(dir)
        .map_err(|e| Error::io("sync the store directory", dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{Fs, MemFs};

    #[test]
    fn a_mirror_reads_what_the_open_found_then_what_was_appended() {
        let fs = MemFs::new();
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        fs.write_file(&dir.join("f"), b"found").unwrap();
        let found = Arc::new(fs.map(&dir.join("f")).unwrap());
        let mut mirror = MirrorBytes::new(Some(found), b"-".to_vec());
        mirror.appended().extend_from_slice(b"more");
        assert_eq!(mirror.len(), 10);
        assert_eq!(mirror.get(0..5), Some(&b"found"[..]));
        assert_eq!(mirror.get(1..3), Some(&b"ou"[..]));
        assert_eq!(mirror.get(5..10), Some(&b"-more"[..]));
        assert_eq!(mirror.get(6..8), Some(&b"mo"[..]));
        // Nothing across the two parts (no frame is), or past the end.
        assert_eq!(mirror.get(4..6), None);
        assert_eq!(mirror.get(8..11), None);
        assert_eq!(mirror.get(0..11), None);
        // A copy reads across them.
        assert_eq!(mirror.copy(0..10).as_deref(), Some(&b"found-more"[..]));
        assert_eq!(mirror.copy(4..7).as_deref(), Some(&b"d-m"[..]));
        assert_eq!(mirror.copy(0..5).as_deref(), Some(&b"found"[..]));
        assert_eq!(mirror.copy(7..10).as_deref(), Some(&b"ore"[..]));
        assert_eq!(mirror.copy(3..3).as_deref(), Some(&b""[..]));
        assert_eq!(mirror.copy(8..11), None);
        // A cut keeps what the open found.
        mirror.truncate(7);
        assert_eq!((mirror.len(), mirror.get(5..7)), (7, Some(&b"-m"[..])));
        mirror.truncate(2);
        assert_eq!((mirror.len(), mirror.get(0..5)), (5, Some(&b"found"[..])));
        let fresh = MirrorBytes::new(None, b"header".to_vec());
        assert_eq!((fresh.len(), fresh.get(0..6)), (6, Some(&b"header"[..])));
    }
}
