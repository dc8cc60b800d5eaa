//! The append path's file operations, behind a small trait so that tests can
//! fail any of them, cut writes short, and simulate a crash that loses what
//! was written but not yet synced.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A segment file being appended to.
pub trait SegmentFile: Send + Sync {
    /// Writes all of `buf` at `offset`.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Truncates or extends the file to `len` bytes.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// `fdatasync`.
    fn sync_data(&self) -> io::Result<()>;
    /// The underlying file (to map it once sealed).
    fn file(&self) -> &File;
}

impl SegmentFile for File {
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.write_all_at(buf, offset)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        File::set_len(self, len)
    }

    fn sync_data(&self) -> io::Result<()> {
        File::sync_data(self)
    }

    fn file(&self) -> &File {
        self
    }
}

/// A file operation a [`FaultPlan`] may fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileOp {
    /// Writing a batch of frames.
    Write,
    /// Truncating after a failed write.
    Truncate,
    /// `fdatasync` of a segment.
    Sync,
    /// Creating a segment (rotation).
    Create,
    /// Writing a checkpoint or a manifest (to its temporary file, before the
    /// rename that switches to it).
    Replace,
}

/// What a [`FaultPlan`] does to one call.
#[derive(Debug)]
pub enum Fault {
    /// Let it run.
    Pass,
    /// Fail it without doing anything.
    Fail(io::Error),
    /// (`Write` only) write this many bytes of the buffer, then fail.
    Short(usize, io::Error),
}

/// Decides, call by call, which file operations fail (for tests).
pub trait FaultPlan: Send + Sync {
    /// Called before each operation on `path`.
    fn before(&self, op: FileOp, path: &Path) -> Fault;

    /// Called once per segment file the writer opens: where to record how
    /// many of its bytes are durable (for crash simulation).
    fn track(&self, _path: &Path) -> Arc<AtomicU64> {
        Arc::new(AtomicU64::new(0))
    }
}

/// Writes `bytes` to `path` (a temporary file about to be renamed into
/// place) and syncs it, through the fault plan if there is one: a `Short`
/// fault leaves a torn file behind, as a crash would.
pub fn write_replacement(path: &Path, bytes: &[u8], faults: Option<&Faults>) -> io::Result<()> {
    let mut len = bytes.len();
    let mut failure = None;
    if let Some(Faults(plan)) = faults {
        match plan.before(FileOp::Replace, path) {
            Fault::Pass => {}
            Fault::Fail(e) => return Err(e),
            Fault::Short(n, e) => {
                len = n.min(len);
                failure = Some(e);
            }
        }
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    file.write_all_at(bytes.get(..len).unwrap_or(bytes), 0)?;
    file.sync_all()?;
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Wraps a segment file for the writer: through the fault plan if there is one.
pub fn wrap(file: File, path: PathBuf, len: u64, faults: Option<&Faults>) -> Arc<dyn SegmentFile> {
    match faults {
        None => Arc::new(file),
        Some(Faults(plan)) => {
            let synced = plan.track(&path);
            Arc::new(FaultyFile::new(file, path, len, plan.clone(), synced))
        }
    }
}

/// Fault injection for [`Options`](crate::Options); `None` in production.
#[derive(Clone)]
pub struct Faults(pub Arc<dyn FaultPlan>);

impl fmt::Debug for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Faults(..)")
    }
}

/// A segment file whose calls go through a [`FaultPlan`], and which records
/// how far it was synced, so a test can cut it there to simulate a crash.
pub struct FaultyFile {
    file: File,
    path: PathBuf,
    plan: Arc<dyn FaultPlan>,
    written: AtomicU64,
    synced: Arc<AtomicU64>,
}

impl FaultyFile {
    /// Wraps `file` (`len` bytes, all durable) at `path`.
    pub fn new(
        file: File,
        path: PathBuf,
        len: u64,
        plan: Arc<dyn FaultPlan>,
        synced: Arc<AtomicU64>,
    ) -> Self {
        synced.store(len, Ordering::Release);
        FaultyFile {
            file,
            path,
            plan,
            written: AtomicU64::new(len),
            synced,
        }
    }
}

impl SegmentFile for FaultyFile {
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        match self.plan.before(FileOp::Write, &self.path) {
            Fault::Pass => {}
            Fault::Fail(e) => return Err(e),
            Fault::Short(n, e) => {
                self.file
                    .write_all_at(buf.get(..n).unwrap_or(buf), offset)?;
                return Err(e);
            }
        }
        self.file.write_all_at(buf, offset)?;
        self.written
            .fetch_max(offset + buf.len() as u64, Ordering::AcqRel);
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        match self.plan.before(FileOp::Truncate, &self.path) {
            Fault::Pass => self.file.set_len(len),
            Fault::Fail(e) | Fault::Short(_, e) => Err(e),
        }
    }

    fn sync_data(&self) -> io::Result<()> {
        match self.plan.before(FileOp::Sync, &self.path) {
            Fault::Pass => {
                // What was written before the sync started is durable after it.
                let written = self.written.load(Ordering::Acquire);
                self.file.sync_data()?;
                self.synced.fetch_max(written, Ordering::AcqRel);
                Ok(())
            }
            Fault::Fail(e) | Fault::Short(_, e) => Err(e),
        }
    }

    fn file(&self) -> &File {
        &self.file
    }
}
