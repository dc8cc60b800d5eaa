//! A context's artifacts, as a loaded checkpoint holds them until they are
//! first read.
//!
//! An artifact costs two heap allocations once decoded (its id and its
//! chunk list), and on a store whose every task has one, decoding them all
//! was most of an open's work. A load checks the checkpoint's bytes of a
//! context's artifacts (exactly as bincode would decode them) and keeps
//! them as one byte string; the first read decodes them, which cannot fail
//! then. See DESIGN.md §2 (Checkpoint) and §6.

use std::sync::OnceLock;

use serde::ser::{SerializeTuple, Serializer};
use serde::{Deserialize, Deserializer, Serialize};

use crate::index::tasks::ArtifactEntry;
use crate::log::frame::u32_at;
use crate::log::record::{take_bool, take_count, take_items, take_str, take_u32};

/// Every artifact of a context's tasks, in the order they were first
/// created: packed as the checkpoint held them, decoded on first read.
#[derive(Debug)]
pub enum Artifacts {
    /// As a loaded checkpoint held them (boxed, so that the enum takes no
    /// more room in a context's extras than the list alone).
    Packed(Box<Packed>),
    /// Them, on the heap: none yet, or changed since the load.
    Owned(Vec<ArtifactEntry>),
}

/// A context's artifacts as a loaded checkpoint held them.
#[derive(Debug)]
pub struct Packed {
    /// The checkpoint's bytes of them (a count, then each artifact, in
    /// bincode's fixed-width little-endian form), checked when loaded.
    bytes: Box<[u8]>,
    /// Them, decoded from `bytes` on first read.
    decoded: OnceLock<Vec<ArtifactEntry>>,
}

impl Packed {
    /// Whether they were read since loaded.
    #[cfg(test)]
    pub fn is_read(&self) -> bool {
        self.decoded.get().is_some()
    }
}

impl Default for Artifacts {
    fn default() -> Self {
        Artifacts::Owned(Vec::new())
    }
}

/// Walks the checkpoint's form of a list of artifacts from the front of
/// `bytes`, which it advances, handing each to `each` (task, id, chunk
/// bytes, closed); `None` wherever bincode would refuse the bytes.
fn walk<'a>(
    bytes: &mut &'a [u8],
    mut each: impl FnMut(u32, &'a str, &'a [u8], bool),
) -> Option<()> {
    for _ in 0..take_count(bytes, 4 + 8 + 8 + 1)? {
        let task = take_u32(bytes)?;
        let id = take_str(bytes)?;
        let chunks = take_items(bytes, 4)?;
        each(task, id, chunks, take_bool(bytes)?);
    }
    Some(())
}

/// Decodes a list `walk` accepts.
fn decode(mut bytes: &[u8]) -> Option<Vec<ArtifactEntry>> {
    let mut out = Vec::new();
    walk(&mut bytes, |task, id, chunks, closed| {
        out.push(ArtifactEntry {
            task,
            id: id.to_string(),
            chunks: chunks.chunks_exact(4).map(|c| u32_at(c, 0)).collect(),
            closed,
        })
    })?;
    Some(out)
}

impl Artifacts {
    /// Takes the checkpoint's form of a list of artifacts from the front of
    /// `bytes`, which it advances, checked but not decoded; `None` wherever
    /// bincode would refuse the bytes.
    pub fn take_packed(bytes: &mut &[u8]) -> Option<Self> {
        let whole = *bytes;
        let mut n = 0usize;
        walk(bytes, |_, _, _, _| n += 1)?;
        let used = whole.len() - bytes.len();
        Some(if n == 0 {
            Self::default()
        } else {
            Artifacts::Packed(Box::new(Packed {
                bytes: whole.get(..used)?.into(),
                decoded: OnceLock::new(),
            }))
        })
    }

    /// The artifacts, decoded on the first call if packed.
    pub fn get(&self) -> &[ArtifactEntry] {
        match self {
            Artifacts::Owned(list) => list,
            // The bytes were checked by `walk` when loaded, so they decode;
            // were they not to, the context would show no artifacts rather
            // than fail.
            Artifacts::Packed(p) => p
                .decoded
                .get_or_init(|| decode(&p.bytes).unwrap_or_default()),
        }
    }

    /// The artifacts, to change: on the heap from now on.
    pub fn get_mut(&mut self) -> &mut Vec<ArtifactEntry> {
        if let Artifacts::Packed(p) = self {
            let list = p
                .decoded
                .take()
                .unwrap_or_else(|| decode(&p.bytes).unwrap_or_default());
            *self = Artifacts::Owned(list);
        }
        match self {
            Artifacts::Owned(list) => list,
            // Made owned just above; this arm is never taken.
            Artifacts::Packed(..) => {
                *self = Artifacts::default();
                self.get_mut()
            }
        }
    }

    /// The heap bytes they hold: the packed bytes, and the list (at its
    /// capacity) once decoded.
    pub fn heap_bytes(&self) -> usize {
        let list = |list: &Vec<ArtifactEntry>| {
            list.capacity() * std::mem::size_of::<ArtifactEntry>()
                + list
                    .iter()
                    .map(|a| a.id.capacity() + a.chunks.capacity() * 4)
                    .sum::<usize>()
        };
        match self {
            Artifacts::Owned(l) => list(l),
            Artifacts::Packed(p) => {
                std::mem::size_of::<Packed>() + p.bytes.len() + p.decoded.get().map_or(0, list)
            }
        }
    }
}

impl Serialize for Artifacts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Artifacts::Owned(list) => list.serialize(s),
            // Unchanged since loaded (a change makes them owned): the bytes
            // of a list's form in the checkpoint's bincode, as they were
            // loaded (bincode writes a tuple of bytes as they are).
            Artifacts::Packed(p) => {
                let mut t = s.serialize_tuple(p.bytes.len())?;
                for byte in p.bytes.iter() {
                    t.serialize_element(byte)?;
                }
                t.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Artifacts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Artifacts::Owned(Vec::deserialize(d)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::index::checkpoint_config as config;

    fn entry(task: u32, id: &str, chunks: &[u32], closed: bool) -> ArtifactEntry {
        ArtifactEntry {
            task,
            id: id.to_string(),
            chunks: chunks.to_vec(),
            closed,
        }
    }

    fn show(list: &[ArtifactEntry]) -> String {
        format!("{list:?}")
    }

    #[test]
    fn packed_artifacts_read_write_and_change_as_the_list_they_pack() {
        let list = vec![entry(0, "a", &[1, 2], false), entry(3, "bé", &[], true)];
        let mut bytes = bincode::serde::encode_to_vec(&list, config()).unwrap();
        bytes.extend_from_slice(b"next");
        let mut rest = &bytes[..];
        let mut packed = Artifacts::take_packed(&mut rest).unwrap();
        assert_eq!(rest, b"next");
        assert!(
            matches!(&packed, Artifacts::Packed(p) if !p.is_read() && p.bytes.len() == bytes.len() - 4)
        );
        // No more room in a context's extras than the list alone.
        assert_eq!(
            std::mem::size_of::<Artifacts>(),
            std::mem::size_of::<Vec<ArtifactEntry>>()
        );
        // Written back as they were loaded, before and after a read.
        let written = bincode::serde::encode_to_vec(&packed, config()).unwrap();
        assert_eq!(written, bytes[..bytes.len() - 4]);
        let held = packed.heap_bytes();
        assert_eq!(show(packed.get()), show(&list));
        assert!(packed.heap_bytes() > held);
        assert_eq!(
            bincode::serde::encode_to_vec(&packed, config()).unwrap(),
            written
        );
        // A change makes them owned, and is written.
        packed.get_mut().push(entry(4, "c", &[9], false));
        assert!(matches!(packed, Artifacts::Owned(_)));
        let mut changed = list.clone();
        changed.push(entry(4, "c", &[9], false));
        assert_eq!(show(packed.get()), show(&changed));
        assert_eq!(
            bincode::serde::encode_to_vec(&packed, config()).unwrap(),
            bincode::serde::encode_to_vec(&changed, config()).unwrap()
        );
        // Changed before any read: decoded first.
        let mut rest = &bytes[..];
        let mut packed = Artifacts::take_packed(&mut rest).unwrap();
        packed.get_mut().retain(|a| a.task == 3);
        assert_eq!(show(packed.get()), show(&list[1..]));
        // None packs to nothing held; cut or damaged bytes are refused.
        let none = bincode::serde::encode_to_vec(Vec::<ArtifactEntry>::new(), config()).unwrap();
        let empty = Artifacts::take_packed(&mut &none[..]).unwrap();
        assert!(matches!(&empty, Artifacts::Owned(l) if l.is_empty()));
        assert_eq!(empty.heap_bytes(), 0);
        for cut in 0..bytes.len() - 4 {
            assert!(
                Artifacts::take_packed(&mut &bytes[..cut]).is_none(),
                "{cut}"
            );
        }
        let mut bad = bytes.clone();
        let closed_at = bytes.len() - 5;
        bad[closed_at] = 2;
        assert!(Artifacts::take_packed(&mut &bad[..]).is_none());
    }
}
