//! The manifest: which segments make up the log, in replay order.
//!
//! ```text
//! magic "CTXLMAN\0" | version:u32 = 3 | store id:[u8; 16] | generation:u64
//! | tail_from:u64 | count:u32 | count × (segment id:u64, length:u64, run:u64)
//! | crc32 of everything before:u32
//! ```
//!
//! A segment's `run` is the generation of the merge that wrote it: adjacent
//! segments of one run hold each context's records of that run together.
//! (Version 2, still read, has no runs: its segments are one run, of its
//! generation; version 1 has neither the store id nor the lengths.)
//!
//! The log replays the compacted segments the manifest lists, in its order,
//! then every segment with id ≥ `tail_from` that the manifest does not list,
//! in id order. No manifest means no compaction has happened: every segment
//! is tail. The manifest is replaced atomically (written to `MANIFEST.tmp`,
//! synced, renamed over `MANIFEST`, directory synced): that rename is the
//! moment a compaction takes effect.

use std::path::Path;

use super::frame::StoreId;
use super::segments::sync_dir;
use crate::error::{Error, Result};
use crate::fs::Fs;

/// The manifest's file name.
pub const MANIFEST: &str = "MANIFEST";
const MAGIC: [u8; 8] = *b"CTXLMAN\0";
const VERSION: u32 = 3;
/// Without runs.
const VERSION_2: u32 = 2;
/// Without the store id and the lengths.
const LEGACY_VERSION: u32 = 1;

/// Which segments make up the log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manifest {
    /// The store it belongs to (`None`: none written yet, or version 1).
    pub store: Option<StoreId>,
    /// Bumped by every compaction.
    pub generation: u64,
    /// Compacted segments, in replay order.
    pub compacted: Vec<u64>,
    /// Each compacted segment's length, in the same order (empty for a
    /// version 1 manifest, which did not record them).
    pub lens: Vec<u64>,
    /// Which merge wrote each compacted segment (its generation), in the
    /// same order: adjacent segments with the same run are one run.
    pub runs: Vec<u64>,
    /// Segments with this id or above (and not listed) replay after them.
    pub tail_from: u64,
}

/// What reading a manifest found.
#[derive(Debug)]
pub enum Read {
    /// None yet: the empty manifest.
    Missing,
    /// A sound one.
    Found(Manifest),
    /// One that fails its checksum or format.
    Damaged,
}

impl Manifest {
    /// Whether segment `id` (with `compacted` telling its header flag) is
    /// part of the log; anything else is left over from a compaction.
    pub fn is_live(&self, id: u64, compacted: bool) -> bool {
        if compacted {
            self.compacted.contains(&id)
        } else {
            id >= self.tail_from
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&self.store.unwrap_or_default().0);
        b.extend_from_slice(&self.generation.to_le_bytes());
        b.extend_from_slice(&self.tail_from.to_le_bytes());
        b.extend_from_slice(&(self.compacted.len() as u32).to_le_bytes());
        for (i, id) in self.compacted.iter().enumerate() {
            b.extend_from_slice(&id.to_le_bytes());
            b.extend_from_slice(&self.lens.get(i).copied().unwrap_or(0).to_le_bytes());
            b.extend_from_slice(&self.runs.get(i).copied().unwrap_or(0).to_le_bytes());
        }
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let (body, crc) = bytes.split_at_checked(bytes.len().checked_sub(4)?)?;
        if crc32fast::hash(body).to_le_bytes() != crc {
            return None;
        }
        let mut r = Reader(body);
        if r.take(8)? != MAGIC {
            return None;
        }
        let version = r.u32()?;
        let store = match version {
            VERSION | VERSION_2 => Some(StoreId(r.take(16)?.try_into().ok()?)),
            LEGACY_VERSION => None,
            _ => return None,
        };
        let generation = r.u64()?;
        let tail_from = r.u64()?;
        let count = r.u32()? as usize;
        let (mut compacted, mut lens, mut runs) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..count {
            compacted.push(r.u64()?);
            if store.is_some() {
                lens.push(r.u64()?);
            }
            // Before version 3, the compacted segments were one run.
            runs.push(if version == VERSION {
                r.u64()?
            } else {
                generation
            });
        }
        r.0.is_empty().then_some(Manifest {
            store,
            generation,
            compacted,
            lens,
            runs,
            tail_from,
        })
    }

    /// Reads the manifest of `dir`.
    pub fn read(fs: &dyn Fs, dir: &Path) -> Result<Read> {
        let path = dir.join(MANIFEST);
        match fs.read(&path) {
            Ok(bytes) => Ok(Self::decode(&bytes).map_or(Read::Damaged, Read::Found)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Read::Missing),
            Err(e) => Err(Error::io("read the manifest", path, e)),
        }
    }

    /// Replaces the manifest of `dir` atomically and durably.
    pub fn write(&self, fs: &dyn Fs, dir: &Path) -> Result<()> {
        let tmp = dir.join("MANIFEST.tmp");
        fs.write_file(&tmp, &self.encode())
            .map_err(|e| Error::io("write the new manifest", &tmp, e))?;
        fs.rename(&tmp, &dir.join(MANIFEST))
            .map_err(|e| Error::io("switch to the new manifest", &tmp, e))?;
        sync_dir(fs, dir)
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let m = Manifest {
            store: Some(StoreId([3; 16])),
            generation: 3,
            compacted: vec![9, 10],
            lens: vec![4096, 100],
            runs: vec![2, 3],
            tail_from: 8,
        };
        let bytes = m.encode();
        assert_eq!(Manifest::decode(&bytes), Some(m.clone()));
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 1;
            assert_eq!(Manifest::decode(&bad), None);
            assert_eq!(Manifest::decode(&bytes[..i]), None);
        }
        assert!(m.is_live(9, true) && !m.is_live(11, true));
        assert!(m.is_live(8, false) && !m.is_live(7, false));
        assert_eq!(m.lens.get(1), Some(&100));
    }

    #[test]
    fn a_version_1_manifest_still_reads() {
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&3u64.to_le_bytes());
        b.extend_from_slice(&8u64.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&9u64.to_le_bytes());
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        let m = Manifest::decode(&b).unwrap();
        assert_eq!((m.store, m.generation, m.tail_from), (None, 3, 8));
        assert_eq!((m.compacted, m.lens, m.runs), (vec![9], vec![], vec![3]));
    }

    #[test]
    fn a_version_2_manifest_reads_as_one_run() {
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&2u32.to_le_bytes());
        b.extend_from_slice(&[5; 16]);
        b.extend_from_slice(&4u64.to_le_bytes());
        b.extend_from_slice(&8u64.to_le_bytes());
        b.extend_from_slice(&2u32.to_le_bytes());
        for (id, len) in [(9u64, 100u64), (10, 200)] {
            b.extend_from_slice(&id.to_le_bytes());
            b.extend_from_slice(&len.to_le_bytes());
        }
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        let m = Manifest::decode(&b).unwrap();
        assert_eq!(m.store, Some(StoreId([5; 16])));
        assert_eq!(
            (m.compacted, m.lens, m.runs),
            (vec![9, 10], vec![100, 200], vec![4, 4])
        );
    }
}
