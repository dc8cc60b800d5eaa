//! The replica's objects: their names, and the restore point's bytes
//! (DESIGN.md §13, "The replica's objects").

use object_store::path::Path;

use crate::error::{Error, Result};
use crate::log::frame::StoreId;

/// The store's identity file, as in the store's directory.
pub(crate) fn identity(root: &Path) -> Path {
    root.child("IDENTITY")
}

/// Segment `id` as writer `epoch` uploaded it, whole (once it was sealed).
pub(crate) fn segment(root: &Path, id: u64, epoch: u64) -> Path {
    root.child("segments")
        .child(format!("{id:016x}-{epoch:016x}.seg"))
}

/// Where the pieces of segment `id` that writer `epoch` shipped lie.
pub(crate) fn pieces(root: &Path, id: u64, epoch: u64) -> Path {
    root.child("pieces")
        .child(format!("{id:016x}-{epoch:016x}"))
}

/// The piece of segment `id` that writer `epoch` shipped from byte `from`.
pub(crate) fn piece(root: &Path, id: u64, epoch: u64, from: u64) -> Path {
    pieces(root, id, epoch).child(format!("{from:016x}"))
}

/// The manifest of generation `generation`, as writer `epoch` uploaded it.
pub(crate) fn manifest(root: &Path, generation: u64, epoch: u64) -> Path {
    root.child("manifests")
        .child(format!("{generation:016x}-{epoch:016x}"))
}

/// Where the writers' claims lie.
pub(crate) fn writers(root: &Path) -> Path {
    root.child("writers")
}

/// Writer `epoch`'s claim (created only if absent: one writer per epoch).
pub(crate) fn writer(root: &Path, epoch: u64) -> Path {
    writers(root).child(format!("{epoch:016x}"))
}

/// The writer's heartbeat: which epoch last said it was alive, and when.
pub(crate) fn heartbeat(root: &Path) -> Path {
    root.child("heartbeat")
}

/// What the heartbeat says: magic, epoch, time (ms since the Unix epoch),
/// CRC-32 of the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heartbeat {
    /// The writer's epoch.
    pub epoch: u64,
    /// When it last said it was alive (its clock), in ms since the Unix
    /// epoch.
    pub time_ms: u64,
}

const BEAT_MAGIC: [u8; 8] = *b"CTXLBEAT";

impl Heartbeat {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = BEAT_MAGIC.to_vec();
        b.extend_from_slice(&self.epoch.to_le_bytes());
        b.extend_from_slice(&self.time_ms.to_le_bytes());
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        let (body, crc) = bytes.split_at_checked(24)?;
        if crc.len() != 4
            || crc32fast::hash(body).to_le_bytes() != crc
            || body.get(..8)? != BEAT_MAGIC
        {
            return None;
        }
        Some(Self {
            epoch: u64::from_le_bytes(body.get(8..16)?.try_into().ok()?),
            time_ms: u64::from_le_bytes(body.get(16..24)?.try_into().ok()?),
        })
    }
}

/// Where restore points lie.
pub(crate) fn points(root: &Path) -> Path {
    root.child("points")
}

/// Restore point `number`, published at `time_ms`.
pub(crate) fn point(root: &Path, number: u64, time_ms: u64) -> Path {
    points(root).child(format!("{number:016x}-{time_ms:016x}"))
}

/// Where the marks of segments the log stopped using lie.
pub(crate) fn retired_dir(root: &Path) -> Path {
    root.child("retired")
}

/// The mark that segment `id` of writer `epoch` left the log at `time_ms`.
pub(crate) fn retired(root: &Path, id: u64, epoch: u64, time_ms: u64) -> Path {
    retired_dir(root).child(format!("{id:016x}-{epoch:016x}-{time_ms:016x}"))
}

/// The hex numbers of a name made of `N` of them joined by `-` (after
/// `suffix` is taken off).
pub(crate) fn parse_hexes<const N: usize>(name: &str, suffix: &str) -> Option<[u64; N]> {
    let mut out = [0u64; N];
    let mut parts = name.strip_suffix(suffix)?.split('-');
    for slot in &mut out {
        let part = parts.next()?;
        if part.len() != 16 {
            return None;
        }
        *slot = u64::from_str_radix(part, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

const MAGIC: [u8; 8] = *b"CTXLREP\0";
const VERSION: u32 = 1;
/// The fixed part before the entries.
const HEAD: usize = 8 + 4 + 16 + 8 + 8 + 8 + 8 + 8 + 4;
const ENTRY: usize = 28;

/// A restore point: the log as it stood when it was published.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Point {
    pub store: StoreId,
    pub number: u64,
    pub time_ms: u64,
    /// The writer that published it.
    pub epoch: u64,
    /// The manifest's generation (0: the log had none).
    pub generation: u64,
    /// The writer whose upload of that manifest it names.
    pub manifest_epoch: u64,
    pub segments: Vec<Entry>,
}

/// One segment of a restore point: its first `len` bytes, as writer
/// `epoch` uploaded them, whose CRC-32 is `crc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub id: u64,
    pub epoch: u64,
    pub len: u64,
    pub crc: u32,
}

impl Point {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HEAD + ENTRY * self.segments.len() + 4);
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&self.store.0);
        b.extend_from_slice(&self.number.to_le_bytes());
        b.extend_from_slice(&self.time_ms.to_le_bytes());
        b.extend_from_slice(&self.epoch.to_le_bytes());
        b.extend_from_slice(&self.generation.to_le_bytes());
        b.extend_from_slice(&self.manifest_epoch.to_le_bytes());
        b.extend_from_slice(&(self.segments.len() as u32).to_le_bytes());
        for e in &self.segments {
            b.extend_from_slice(&e.id.to_le_bytes());
            b.extend_from_slice(&e.epoch.to_le_bytes());
            b.extend_from_slice(&e.len.to_le_bytes());
            b.extend_from_slice(&e.crc.to_le_bytes());
        }
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes a point's bytes; `what` names it in the error.
    pub fn decode(bytes: &[u8], what: &str) -> Result<Self> {
        let bad = |why: &str| {
            Error::replica(
                "read a restore point",
                format!("{what} is damaged ({why}); restore from an older point with --at"),
            )
        };
        let (body, crc) = bytes
            .split_at_checked(bytes.len().saturating_sub(4))
            .ok_or_else(|| bad("too short"))?;
        if bytes.len() < HEAD + 4 || crc32fast::hash(body).to_le_bytes() != crc {
            return Err(bad("its checksum does not match"));
        }
        let u64_at = |at: usize| {
            body.get(at..at + 8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
                .ok_or_else(|| bad("too short"))
        };
        if body.get(..8) != Some(&MAGIC[..]) {
            return Err(bad("not a restore point"));
        }
        let version = body
            .get(8..12)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
            .ok_or_else(|| bad("too short"))?;
        if version != VERSION {
            return Err(Error::replica(
                "read a restore point",
                format!("{what} has version {version}, this build reads {VERSION}; restore with a matching build"),
            ));
        }
        let mut store = [0u8; 16];
        store.copy_from_slice(body.get(12..28).ok_or_else(|| bad("too short"))?);
        let count = body
            .get(68..72)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
            .ok_or_else(|| bad("too short"))? as usize;
        if body.len() != HEAD + ENTRY * count {
            return Err(bad("its length does not match its count"));
        }
        let segments = (0..count)
            .map(|i| {
                let at = HEAD + ENTRY * i;
                Ok(Entry {
                    id: u64_at(at)?,
                    epoch: u64_at(at + 8)?,
                    len: u64_at(at + 16)?,
                    crc: body
                        .get(at + 24..at + 28)
                        .and_then(|b| b.try_into().ok())
                        .map(u32::from_le_bytes)
                        .ok_or_else(|| bad("too short"))?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            store: StoreId(store),
            number: u64_at(28)?,
            time_ms: u64_at(36)?,
            epoch: u64_at(44)?,
            generation: u64_at(52)?,
            manifest_epoch: u64_at(60)?,
            segments,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_round_trips_and_any_changed_byte_is_refused() {
        let point = Point {
            store: StoreId([7; 16]),
            number: 3,
            time_ms: 1_700_000_000_000,
            epoch: 4,
            generation: 2,
            manifest_epoch: 3,
            segments: vec![
                Entry {
                    id: 9,
                    epoch: 3,
                    len: 4096,
                    crc: 0xdead_beef,
                },
                Entry {
                    id: 12,
                    epoch: 4,
                    len: 64,
                    crc: 1,
                },
            ],
        };
        let bytes = point.encode();
        assert_eq!(bytes.len(), HEAD + 2 * ENTRY + 4);
        assert_eq!(Point::decode(&bytes, "p").unwrap(), point);
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert!(Point::decode(&bad, "p").is_err(), "byte {i}");
        }
        for n in 0..bytes.len() {
            assert!(Point::decode(&bytes[..n], "p").is_err(), "cut at {n}");
        }
    }

    proptest::proptest! {
        /// Whatever bytes an object holds, reading it never panics.
        #[test]
        fn any_bytes_decode_or_are_refused(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            let _ = Point::decode(&bytes, "p");
            let _ = Heartbeat::decode(&bytes);
            let name = String::from_utf8_lossy(&bytes);
            let _ = parse_hexes::<3>(&name, ".seg");
        }
    }

    #[test]
    fn a_heartbeat_round_trips_and_damage_is_refused() {
        let beat = Heartbeat {
            epoch: 3,
            time_ms: 99,
        };
        let bytes = beat.encode();
        assert_eq!(Heartbeat::decode(&bytes), Some(beat));
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 1;
            assert_eq!(Heartbeat::decode(&bad), None, "byte {i}");
            assert_eq!(Heartbeat::decode(&bytes[..i]), None, "cut at {i}");
        }
    }

    #[test]
    fn names_parse_back() {
        let root = Path::from("r");
        let p = point(&root, 5, 77);
        assert_eq!(p.as_ref(), "r/points/0000000000000005-000000000000004d");
        assert_eq!(parse_hexes::<2>(p.filename().unwrap(), ""), Some([5, 77]));
        assert_eq!(parse_hexes::<2>("5-77", ""), None);
        let s = segment(&root, 9, 2);
        assert_eq!(
            parse_hexes::<2>(s.filename().unwrap(), ".seg"),
            Some([9, 2])
        );
        let r = retired(&root, 9, 2, 3);
        assert_eq!(parse_hexes::<3>(r.filename().unwrap(), ""), Some([9, 2, 3]));
        assert_eq!(parse_hexes::<2>(r.filename().unwrap(), ""), None);
        assert_eq!(
            parse_hexes::<1>(piece(&root, 1, 2, 64).filename().unwrap(), ""),
            Some([64])
        );
        assert_eq!(parse_hexes::<1>("zz", ""), None);
    }
}
