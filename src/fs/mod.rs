//! Every file call the store makes, behind one small trait ([`Fs`]), with
//! three implementations:
//!
//! - [`OsFs`], the operating system's file system (the default);
//! - [`MemFs`], an in-memory file system that keeps what was written apart
//!   from what was made durable, and whose [`MemFs::crash`] hands back what a
//!   power loss at that instant could leave: synced bytes and directory
//!   entries survive, the rest is lost, kept or torn;
//! - [`FaultyFs`], which wraps either and asks a [`FaultPlan`] before every
//!   call whether to let it run, fail it, or cut a write short.
//!
//! The model of the disk that [`MemFs`] simulates is the one DESIGN.md §9
//! states: `fdatasync` makes a file's written bytes durable; a directory sync
//! makes the names created, renamed or removed in it durable; anything not
//! yet made durable may, after a crash, be gone, present, or present only in
//! some 512-byte sectors, and unsynced directory changes survive as a prefix
//! of the order in which they were made.

mod faulty;
mod mem;
mod mmap;
mod os;

pub use faulty::{Fault, FaultPlan, FaultyFs, FileOp};
pub use mem::{Crash, MemFs};
pub use os::OsFs;

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::Arc;

use mmap::SealedMap;

/// The file operations of a store.
pub trait Fs: Send + Sync + fmt::Debug {
    /// Creates `dir` and its missing parents.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Whether `path` names a file or directory.
    fn exists(&self, path: &Path) -> bool;
    /// Takes an exclusive lock named by `path` (creating the file if needed)
    /// for as long as the returned guard lives; `WouldBlock` if it is held.
    fn lock(&self, path: &Path) -> io::Result<Box<dyn Send + Sync>>;
    /// Creates a new file (failing if it exists), open for writing.
    fn create_new(&self, path: &Path) -> io::Result<Arc<dyn SegmentFile>>;
    /// Opens an existing file for writing.
    fn open(&self, path: &Path) -> io::Result<Arc<dyn SegmentFile>>;
    /// The whole contents of a file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// The first `len` bytes of a file (fewer if it is shorter).
    fn read_prefix(&self, path: &Path, len: usize) -> io::Result<Vec<u8>>;
    /// A read-only view of a file whose bytes nothing changes any more (a
    /// sealed segment, a checkpoint, or the active segment as an open found
    /// it, which only grows; see `mmap`).
    fn map(&self, path: &Path) -> io::Result<Mapped>;
    /// Creates or truncates `path`, writes `bytes` and syncs them.
    fn write_file(&self, path: &Path, bytes: &[u8]) -> io::Result<()>;
    /// [`write_file`](Self::write_file) of `parts` one after the other,
    /// which a file system may write without joining them first (a
    /// checkpoint's sections: no copy of the whole file in memory).
    fn write_file_parts(&self, path: &Path, parts: &[&[u8]]) -> io::Result<()> {
        self.write_file(path, &parts.concat())
    }
    /// Renames `from` to `to`, replacing `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// The files in `dir`: names and lengths.
    fn list(&self, dir: &Path) -> io::Result<Vec<(String, u64)>>;
    /// Makes the names created, renamed or removed in `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// A file open for writing (a segment being appended to).
pub trait SegmentFile: Send + Sync {
    /// Writes all of `buf` at `offset`.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Truncates or extends the file to `len` bytes.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// `fdatasync`: makes every byte written so far durable.
    fn sync_data(&self) -> io::Result<()>;
    /// A read-only view of the file, once nothing writes it any more.
    fn map(&self) -> io::Result<Mapped>;
    /// The file's length.
    fn file_len(&self) -> io::Result<u64>;
    /// Fills `buf` with the file's bytes from `offset` (`pread`, never a
    /// map: a range a failed write left unbacked, which a full tmpfs
    /// cannot back when a map reads it, reads as zeros).
    fn read_range(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
}

/// A read-only view of a whole file.
pub struct Mapped(MappedBytes);

enum MappedBytes {
    File(SealedMap),
    Memory(Arc<[u8]>),
}

impl Mapped {
    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        match &self.0 {
            MappedBytes::File(map) => map.bytes(),
            MappedBytes::Memory(bytes) => bytes,
        }
    }
}
