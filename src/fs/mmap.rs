//! Read-only maps of segments and checkpoints: the only module with `unsafe`.
//!
//! # The contract that makes the map sound
//!
//! A mapped file must not change or shrink while the map lives, or a read
//! could see torn bytes or fault. ctxlog guarantees this for the files it maps:
//!
//! - a sealed segment is never written, truncated or reopened for writing
//!   again: the log writer only ever appends to the single active segment;
//! - the active segment is mapped only as far as an open found it written
//!   (after cutting a torn tail, with no map of it left from before the
//!   cut), and the writer only ever appends after that point: it zero-fills
//!   and writes past it, and cuts back a failed append or the zero-filled
//!   rest only to a length past it, so the mapped bytes never change;
//! - the store holds an exclusive lock on the directory's `LOCK` file for as
//!   long as it is open, so no other ctxlog process writes the directory;
//! - removing a mapped file (after a compaction) does not invalidate the map
//!   on the platforms ctxlog supports: the inode lives until the map is dropped;
//! - the index checkpoint, mapped at open and kept mapped while the index
//!   reads messageIds from it, is only ever replaced whole (written and
//!   synced to a temporary file, then renamed over it) or removed, and only
//!   by this store, which holds the lock; the mapped inode never changes.
//!   A new checkpoint is mapped under its temporary name before the rename
//!   and kept only if the rename succeeds; the next one is written to a
//!   fresh file of that name, as the rename took the old one away. One
//!   checkpoint is written at a time (under the manifest lock).
//!
//! A process outside ctxlog that edits segment files by hand breaks the
//! contract; nothing in a library can prevent that.

use std::fs::File;
use std::io;

/// A read-only map of a whole file (see the module contract).
pub struct SealedMap {
    map: memmap2::Mmap,
}

impl SealedMap {
    /// Maps `file`, which must be a sealed segment, a checkpoint, or the
    /// active segment as an open found it (see the module contract).
    pub fn map(file: &File) -> io::Result<Self> {
        // SAFETY: `file` is a sealed segment, a checkpoint or the active
        // segment as an open found it: by the module contract nothing
        // writes or truncates the mapped range while this map lives (an
        // active segment only grows past it), so the mapped bytes stay
        // valid and unchanged for its life.
        let map = unsafe { memmap2::Mmap::map(file)? };
        Ok(Self { map })
    }

    /// The mapped bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }
}
