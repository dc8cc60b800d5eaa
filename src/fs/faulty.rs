//! A file system that fails the calls a plan chooses.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{Fs, Mapped, SegmentFile};

/// A file operation a [`FaultPlan`] may fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileOp {
    /// Writing to an open file (appending frames, or a segment header).
    Write,
    /// Truncating or extending an open file.
    Truncate,
    /// `fdatasync` of an open file.
    Sync,
    /// Creating a new file (a segment, at rotation or by compaction).
    Create,
    /// Opening an existing file for writing.
    Open,
    /// Reading a file (whole, its header, or by mapping it).
    Read,
    /// Writing a whole file and syncing it (a checkpoint or a manifest, to
    /// its temporary name, before the rename that switches to it).
    Replace,
    /// Renaming a file.
    Rename,
    /// Removing a file.
    Remove,
    /// Listing a directory.
    List,
    /// Syncing a directory.
    SyncDir,
    /// Creating a directory or taking the store's lock.
    Setup,
}

/// What a [`FaultPlan`] does to one call.
#[derive(Debug)]
pub enum Fault {
    /// Let it run.
    Pass,
    /// Fail it without doing anything.
    Fail(io::Error),
    /// (`Write` and `Replace`) write this many bytes of the buffer, then fail.
    Short(usize, io::Error),
    /// (`Write`) the bytes after the first this many reach the file and
    /// those never do, then fail: a hole inside the file's length, as a
    /// failed write on a full tmpfs leaves. Until a cut removes it, a map
    /// of the file fails (on a full tmpfs, a map's read of the hole kills
    /// the process with SIGBUS). A `Replace` fails without writing.
    Hole(usize, io::Error),
}

impl Fault {
    /// For a call that does not write: `Ok` to run it, else its error (a
    /// `Short` fails it too).
    fn allow(self) -> io::Result<()> {
        match self {
            Fault::Pass => Ok(()),
            Fault::Fail(e) | Fault::Short(_, e) | Fault::Hole(_, e) => Err(e),
        }
    }

    /// For a call that writes `buf` through `write`: all of it, nothing, or
    /// (`Short`) a prefix followed by the error, leaving torn bytes behind as
    /// a crash would.
    fn write(self, buf: &[u8], write: impl FnOnce(&[u8]) -> io::Result<()>) -> io::Result<()> {
        match self {
            Fault::Pass => write(buf),
            Fault::Fail(e) | Fault::Hole(_, e) => Err(e),
            Fault::Short(n, e) => {
                write(buf.get(..n).unwrap_or(buf))?;
                Err(e)
            }
        }
    }
}

/// Decides, call by call, which file operations fail.
pub trait FaultPlan: Send + Sync {
    /// Called before each operation on `path`.
    fn before(&self, op: FileOp, path: &Path) -> Fault;
}

/// A file system whose every call first asks a [`FaultPlan`].
#[derive(Clone)]
pub struct FaultyFs {
    inner: Arc<dyn Fs>,
    plan: Arc<dyn FaultPlan>,
    holes: Holes,
}

/// The holes [`Fault::Hole`] left: each file's, by where they start.
type Holes = Arc<Mutex<Vec<(PathBuf, u64)>>>;

/// A map of `path` fails while a hole lies in it.
fn check_holes(holes: &Holes, path: &Path) -> io::Result<()> {
    if holes.lock().iter().any(|(p, _)| p == path) {
        return Err(io::Error::other(format!(
            "a map of {} covers a range a failed write left unbacked: on a full tmpfs its \
             read would kill the process (SIGBUS)",
            path.display()
        )));
    }
    Ok(())
}

impl fmt::Debug for FaultyFs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyFs")
            .field("inner", &self.inner)
            .finish()
    }
}

impl FaultyFs {
    /// Wraps `inner`, asking `plan` before every call.
    pub fn new(inner: Arc<dyn Fs>, plan: Arc<dyn FaultPlan>) -> Self {
        Self {
            inner,
            plan,
            holes: Holes::default(),
        }
    }

    /// Fails the call if the plan says so.
    fn check(&self, op: FileOp, path: &Path) -> io::Result<()> {
        self.plan.before(op, path).allow()
    }

    fn wrap(&self, file: Arc<dyn SegmentFile>, path: &Path) -> Arc<dyn SegmentFile> {
        Arc::new(FaultyFile {
            inner: file,
            path: path.to_path_buf(),
            plan: self.plan.clone(),
            holes: self.holes.clone(),
        })
    }
}

impl Fs for FaultyFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.check(FileOp::Setup, dir)?;
        self.inner.create_dir_all(dir)
    }

    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn Send + Sync>> {
        self.check(FileOp::Setup, path)?;
        self.inner.lock(path)
    }

    fn create_new(&self, path: &Path) -> io::Result<Arc<dyn SegmentFile>> {
        self.check(FileOp::Create, path)?;
        Ok(self.wrap(self.inner.create_new(path)?, path))
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn SegmentFile>> {
        self.check(FileOp::Open, path)?;
        Ok(self.wrap(self.inner.open(path)?, path))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.check(FileOp::Read, path)?;
        self.inner.read(path)
    }

    fn read_prefix(&self, path: &Path, len: usize) -> io::Result<Vec<u8>> {
        self.check(FileOp::Read, path)?;
        self.inner.read_prefix(path, len)
    }

    fn map(&self, path: &Path) -> io::Result<Mapped> {
        self.check(FileOp::Read, path)?;
        check_holes(&self.holes, path)?;
        self.inner.map(path)
    }

    fn write_file(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.plan
            .before(FileOp::Replace, path)
            .write(bytes, |b| self.inner.write_file(path, b))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.check(FileOp::Rename, from)?;
        self.inner.rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.check(FileOp::Remove, path)?;
        self.inner.remove_file(path)?;
        self.holes.lock().retain(|(p, _)| p != path);
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<(String, u64)>> {
        self.check(FileOp::List, dir)?;
        self.inner.list(dir)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.check(FileOp::SyncDir, dir)?;
        self.inner.sync_dir(dir)
    }
}

struct FaultyFile {
    inner: Arc<dyn SegmentFile>,
    path: PathBuf,
    plan: Arc<dyn FaultPlan>,
    holes: Holes,
}

impl SegmentFile for FaultyFile {
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        match self.plan.before(FileOp::Write, &self.path) {
            Fault::Hole(n, e) => {
                if let Some(after) = buf.get(n..).filter(|a| !a.is_empty()) {
                    self.inner.write_at(after, offset + n as u64)?;
                    self.holes.lock().push((self.path.clone(), offset));
                }
                Err(e)
            }
            fault => fault.write(buf, |b| self.inner.write_at(b, offset)),
        }
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.plan.before(FileOp::Truncate, &self.path).allow()?;
        self.inner.set_len(len)?;
        // A cut below a hole removes it.
        self.holes
            .lock()
            .retain(|(p, at)| p != &self.path || *at < len);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        self.plan.before(FileOp::Sync, &self.path).allow()?;
        self.inner.sync_data()
    }

    fn map(&self) -> io::Result<Mapped> {
        self.plan.before(FileOp::Read, &self.path).allow()?;
        check_holes(&self.holes, &self.path)?;
        self.inner.map()
    }

    fn file_len(&self) -> io::Result<u64> {
        self.inner.file_len()
    }

    fn read_range(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.plan.before(FileOp::Read, &self.path).allow()?;
        self.inner.read_range(buf, offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::MemFs;

    fn p(name: &str) -> PathBuf {
        Path::new("/d").join(name)
    }

    /// Cuts every write to 2 bytes and fails it.
    struct CutWrites(std::sync::atomic::AtomicUsize);

    impl FaultPlan for CutWrites {
        fn before(&self, op: FileOp, _path: &Path) -> Fault {
            let n = self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            match op {
                FileOp::Write if n > 0 => Fault::Short(2, io::ErrorKind::StorageFull.into()),
                _ => Fault::Pass,
            }
        }
    }

    #[test]
    fn a_faulty_fs_cuts_writes_short_as_its_plan_says() {
        let mem = MemFs::new();
        let fs = FaultyFs::new(
            Arc::new(mem.clone()),
            Arc::new(CutWrites(std::sync::atomic::AtomicUsize::new(0))),
        );
        fs.create_dir_all(Path::new("/d")).unwrap();
        let f = fs.create_new(&p("a")).unwrap();
        f.write_at(b"whole", 0).unwrap_err();
        assert_eq!(mem.read(&p("a")).unwrap(), b"wh");
    }
}
