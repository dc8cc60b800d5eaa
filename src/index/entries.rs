//! A vector of fixed-size index entries (a context's records or its tasks)
//! that is either on the heap or read in place from the mapped checkpoint.
//!
//! An open that loads a checkpoint neither copies a context's entries nor
//! allocates for them: each context reads its span of the file where it
//! lies, and the first change copies it to a vector on the heap. See
//! DESIGN.md §6 and §10.

use std::ops::Range;
use std::sync::Arc;

use crate::fs::Mapped;

/// An entry the checkpoint keeps as a fixed number of bytes.
pub trait Fixed: Sized + Copy {
    /// Bytes per entry.
    const SIZE: usize;
    /// A placeholder, standing for an entry that does not decode (a loaded
    /// checkpoint's entries are checked first, so it is never read there).
    const PLACEHOLDER: Self;
    /// Appends the entry's bytes.
    fn put(&self, out: &mut Vec<u8>);
    /// The entry of `SIZE` bytes; `None` if they are not one.
    fn get(bytes: &[u8]) -> Option<Self>;
    /// Whether `SIZE` bytes are an entry ([`get`](Self::get) would decode
    /// them), which a type may tell without decoding them.
    fn check(bytes: &[u8]) -> bool {
        Self::get(bytes).is_some()
    }
}

/// A section of a mapped checkpoint: `len` bytes at `start`, which the
/// spans of many contexts share.
pub struct Section {
    map: Arc<Mapped>,
    start: usize,
    len: usize,
}

impl Section {
    /// The `len` bytes at `start` in `map`; `None` unless they lie wholly
    /// inside it.
    pub fn new(map: Arc<Mapped>, start: usize, len: usize) -> Option<Arc<Self>> {
        let end = start.checked_add(len)?;
        (end <= map.bytes().len()).then(|| Arc::new(Self { map, start, len }))
    }

    fn bytes(&self) -> &[u8] {
        let bytes = self.map.bytes().get(self.start..).unwrap_or_default();
        bytes.get(..self.len).unwrap_or_default()
    }
}

/// `len` entries from the `first` of a section. Positions are 4 bytes, so
/// that a span is 16 bytes and [`Entries`] (which keeps its tag in the
/// vector's spare bits then) 24, in every context, twice.
#[derive(Clone)]
pub struct Span {
    section: Arc<Section>,
    first: u32,
    len: u32,
}

impl std::fmt::Debug for Span {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Span({} from {})", self.len, self.first)
    }
}

impl Span {
    /// The `len` entries of `size` bytes from the `first` of `section`;
    /// `None` unless they lie wholly inside it (and their positions fit in
    /// 4 bytes).
    pub fn new(section: &Arc<Section>, first: usize, len: usize, size: usize) -> Option<Self> {
        let end = first.checked_add(len)?.checked_mul(size)?;
        (end <= section.len).then_some(Self {
            section: section.clone(),
            first: u32::try_from(first).ok()?,
            len: u32::try_from(len).ok()?,
        })
    }

    /// How many entries it holds.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Its bytes, for entries of `size` bytes.
    pub fn bytes(&self, size: usize) -> &[u8] {
        let start = self.first as usize * size;
        let bytes = self.section.bytes().get(start..).unwrap_or_default();
        bytes.get(..self.len() * size).unwrap_or_default()
    }
}

/// See the module documentation.
#[derive(Debug)]
pub enum Entries<T> {
    /// On the heap.
    Owned(Vec<T>),
    /// In place in the mapped checkpoint.
    Mapped(Span),
}

impl<T> Default for Entries<T> {
    fn default() -> Self {
        Entries::Owned(Vec::new())
    }
}

/// Entries of a range, oldest first (and back).
pub enum Iter<'a, T> {
    /// From the heap.
    Owned(std::slice::Iter<'a, T>),
    /// From the map.
    Mapped(std::slice::ChunksExact<'a, u8>),
}

/// The entry of `bytes`, or the placeholder if they are not one.
pub fn decode<T: Fixed>(bytes: &[u8]) -> T {
    T::get(bytes).unwrap_or(T::PLACEHOLDER)
}

impl<T: Fixed> Iterator for Iter<'_, T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        match self {
            Iter::Owned(it) => it.next().copied(),
            Iter::Mapped(it) => it.next().map(decode),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            Iter::Owned(it) => it.size_hint(),
            Iter::Mapped(it) => it.size_hint(),
        }
    }
}

impl<T: Fixed> DoubleEndedIterator for Iter<'_, T> {
    fn next_back(&mut self) -> Option<T> {
        match self {
            Iter::Owned(it) => it.next_back().copied(),
            Iter::Mapped(it) => it.next_back().map(decode),
        }
    }
}

impl<T: Fixed> ExactSizeIterator for Iter<'_, T> {}

impl<T: Fixed> Entries<T> {
    /// How many entries there are.
    pub fn len(&self) -> usize {
        match self {
            Entries::Owned(v) => v.len(),
            Entries::Mapped(m) => m.len(),
        }
    }

    /// The entry at `pos`.
    pub fn get(&self, pos: usize) -> Option<T> {
        match self {
            Entries::Owned(v) => v.get(pos).copied(),
            Entries::Mapped(m) => {
                let at = pos.checked_mul(T::SIZE)?;
                m.bytes(T::SIZE)
                    .get(at..at.checked_add(T::SIZE)?)
                    .map(decode)
            }
        }
    }

    /// The entries at the positions of `range` that exist.
    pub fn range(&self, range: Range<usize>) -> Iter<'_, T> {
        let end = range.end.min(self.len());
        let range = range.start.min(end)..end;
        match self {
            Entries::Owned(v) => Iter::Owned(v.get(range).unwrap_or_default().iter()),
            Entries::Mapped(m) => {
                let bytes = m
                    .bytes(T::SIZE)
                    .get(range.start * T::SIZE..range.end * T::SIZE)
                    .unwrap_or_default();
                Iter::Mapped(bytes.chunks_exact(T::SIZE))
            }
        }
    }

    /// Every entry.
    /// The entries' bytes, while they are read in place.
    pub fn mapped_bytes(&self) -> Option<&[u8]> {
        match self {
            Entries::Owned(_) => None,
            Entries::Mapped(m) => Some(m.bytes(T::SIZE)),
        }
    }

    pub fn iter(&self) -> Iter<'_, T> {
        self.range(0..self.len())
    }

    /// The entries on the heap, copied there first if they were mapped
    /// (with room for a quarter more, as `state::push` would leave).
    pub fn owned(&mut self) -> &mut Vec<T> {
        if let Entries::Mapped(m) = self {
            let mut v = Vec::with_capacity(m.len() + (m.len() / 4).max(2));
            v.extend(m.bytes(T::SIZE).chunks_exact(T::SIZE).map(decode::<T>));
            *self = Entries::Owned(v);
        }
        match self {
            Entries::Owned(v) => v,
            // Made owned just above; this arm is never taken.
            Entries::Mapped(_) => {
                *self = Entries::default();
                self.owned()
            }
        }
    }

    /// Their bytes in memory: the vector's capacity, or the mapped bytes
    /// (in memory while the map's pages are).
    pub fn bytes(&self) -> usize {
        match self {
            Entries::Owned(v) => v.capacity() * std::mem::size_of::<T>(),
            Entries::Mapped(m) => m.len() * T::SIZE,
        }
    }

    /// Appends their bytes, as a checkpoint holds them.
    pub fn put(&self, out: &mut Vec<u8>) {
        match self {
            Entries::Owned(v) => v.iter().for_each(|e| e.put(out)),
            Entries::Mapped(m) => out.extend_from_slice(m.bytes(T::SIZE)),
        }
    }

    /// Reads them from `span` (a new checkpoint's) instead, if it holds
    /// them as they are now: mapped ones as many (mapped entries change
    /// only by being copied to the heap first), heap ones byte for byte as
    /// a checkpoint writes them. So after each checkpoint the heap holds
    /// only the entries changed since it was taken, as a fresh open's would
    /// after the same changes; the vector is freed.
    pub fn remap(&mut self, span: Span) {
        let same = match self {
            Entries::Mapped(m) => m.len == span.len,
            Entries::Owned(v) => v.len() == span.len() && same_bytes(v, span.bytes(T::SIZE)),
        };
        if same {
            *self = Entries::Mapped(span);
        }
    }
}

/// Whether `entries`, written as a checkpoint writes them, are `bytes`.
fn same_bytes<T: Fixed>(entries: &[T], bytes: &[u8]) -> bool {
    let mut one = Vec::with_capacity(T::SIZE);
    entries.len() * T::SIZE == bytes.len()
        && entries
            .iter()
            .zip(bytes.chunks_exact(T::SIZE))
            .all(|(entry, written)| {
                one.clear();
                entry.put(&mut one);
                one == written
            })
}

/// Whether every entry of `bytes` decodes as a `T`.
pub fn all_decode<T: Fixed>(bytes: &[u8]) -> bool {
    bytes.len().is_multiple_of(T::SIZE) && bytes.chunks_exact(T::SIZE).all(T::check)
}

/// `bytes` as a mapped file (in memory), for tests of what reads one.
#[cfg(test)]
pub fn mapped(bytes: &[u8]) -> Arc<Mapped> {
    use crate::fs::{Fs, MemFs};
    let fs = MemFs::new();
    let dir = std::path::Path::new("/d");
    fs.create_dir_all(dir).unwrap();
    fs.write_file(&dir.join("f"), bytes).unwrap();
    Arc::new(fs.map(&dir.join("f")).unwrap())
}
