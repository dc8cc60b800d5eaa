//! An in-memory file system that simulates crashes (see the `fs` module docs).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{Fs, Mapped, MappedBytes, SegmentFile};

/// How the bytes and names not yet made durable fare in a simulated crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crash {
    /// All of them are lost.
    LoseUnsynced,
    /// All of them made it to the disk.
    KeepUnsynced,
    /// Some did, chosen by a generator seeded with this: each file keeps a
    /// length between its synced and its written one and, sector by sector,
    /// the written or the synced bytes; each directory keeps a prefix of its
    /// unsynced changes.
    Torn(u64),
}

/// An in-memory file system that simulates crashes: see the module docs.
/// Clones share the same files.
#[derive(Clone, Default)]
pub struct MemFs {
    state: Arc<Mutex<MemState>>,
}

#[derive(Default)]
struct MemState {
    dirs: BTreeSet<PathBuf>,
    /// Every file by node number, named or not (an open handle keeps a
    /// removed file's node alive, as on a real file system).
    nodes: BTreeMap<u64, Node>,
    next_node: u64,
    /// The names now.
    names: BTreeMap<PathBuf, u64>,
    /// The names as of the last sync of their directory.
    durable_names: BTreeMap<PathBuf, u64>,
    /// Changes to names since their directory was last synced, in order.
    pending: Vec<NameChange>,
    locks: BTreeSet<PathBuf>,
}

#[derive(Default)]
struct Node {
    bytes: Vec<u8>,
    /// The bytes as of the last sync.
    durable: Vec<u8>,
    /// Bytes from here on may differ from `durable`...
    dirty_from: usize,
    /// ...up to here (so that a sync copies only what changed, not a
    /// preallocated tail again and again).
    dirty_to: usize,
}

impl Node {
    fn write(&mut self, buf: &[u8], offset: usize) {
        let end = offset + buf.len();
        if self.bytes.len() < end {
            self.bytes.resize(end, 0);
        }
        if let Some(dst) = self.bytes.get_mut(offset..end) {
            dst.copy_from_slice(buf);
        }
        self.dirty_from = self.dirty_from.min(offset);
        self.dirty_to = self.dirty_to.max(end);
    }

    fn set_len(&mut self, len: usize) {
        let old = self.bytes.len();
        self.bytes.resize(len, 0);
        self.dirty_from = self.dirty_from.min(old.min(len));
        self.dirty_to = self.dirty_to.max(old.max(len));
    }

    fn sync(&mut self) {
        let len = self.bytes.len();
        // Bytes past the old durable length are all in the dirty range.
        self.durable.resize(len, 0);
        let (from, to) = (self.dirty_from.min(len), self.dirty_to.min(len));
        if let (Some(dst), Some(src)) = (self.durable.get_mut(from..to), self.bytes.get(from..to)) {
            dst.copy_from_slice(src);
        }
        self.clean();
    }

    /// Marks every byte as synced.
    fn clean(&mut self) {
        self.dirty_from = self.bytes.len();
        self.dirty_to = 0;
    }
}

enum NameChange {
    Link(PathBuf, u64),
    Unlink(PathBuf),
    /// Atomic: after a crash the name `to` points at the old file or the new.
    Rename {
        from: PathBuf,
        to: PathBuf,
        node: u64,
    },
}

impl NameChange {
    /// The name changed (for a rename, the new one: both are in one directory).
    fn path(&self) -> &Path {
        match self {
            NameChange::Link(p, _) | NameChange::Unlink(p) => p,
            NameChange::Rename { to, .. } => to,
        }
    }

    fn apply(&self, names: &mut BTreeMap<PathBuf, u64>) {
        match self {
            NameChange::Link(p, node) => {
                names.insert(p.clone(), *node);
            }
            NameChange::Unlink(p) => {
                names.remove(p);
            }
            NameChange::Rename { from, to, node } => {
                names.remove(from);
                names.insert(to.clone(), *node);
            }
        }
    }
}

fn not_found() -> io::Error {
    io::ErrorKind::NotFound.into()
}

impl MemState {
    fn node_of(&self, path: &Path) -> io::Result<u64> {
        self.names.get(path).copied().ok_or_else(not_found)
    }

    fn node(&mut self, node: u64) -> io::Result<&mut Node> {
        self.nodes.get_mut(&node).ok_or_else(not_found)
    }

    fn check_parent(&self, path: &Path) -> io::Result<()> {
        match path.parent() {
            Some(p) if !p.as_os_str().is_empty() && !self.dirs.contains(p) => Err(not_found()),
            _ => Ok(()),
        }
    }

    fn link(&mut self, path: &Path, node: u64) {
        self.names.insert(path.to_path_buf(), node);
        self.pending
            .push(NameChange::Link(path.to_path_buf(), node));
    }

    fn new_node(&mut self) -> u64 {
        let id = self.next_node;
        self.next_node += 1;
        self.nodes.insert(id, Node::default());
        id
    }
}

impl fmt::Debug for MemFs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.lock();
        f.debug_struct("MemFs")
            .field("files", &state.names.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl MemFs {
    /// An empty file system.
    pub fn new() -> Self {
        Self::default()
    }

    /// What a power loss at this instant leaves: a new, independent file
    /// system holding every synced byte and name, and of the rest what
    /// `how` says. Locks are not kept (their holder died).
    pub fn crash(&self, how: Crash) -> MemFs {
        let state = self.state.lock();
        let mut rng = Rng(match how {
            Crash::Torn(seed) => seed,
            _ => 0,
        });
        let mut names = state.durable_names.clone();
        let kept_changes = match how {
            Crash::LoseUnsynced => 0,
            Crash::KeepUnsynced => state.pending.len(),
            Crash::Torn(_) => rng.below(state.pending.len() as u64 + 1) as usize,
        };
        for change in state.pending.iter().take(kept_changes) {
            change.apply(&mut names);
        }
        let mut nodes = BTreeMap::new();
        for &id in names.values() {
            let Some(node) = state.nodes.get(&id) else {
                continue;
            };
            let bytes = match how {
                Crash::LoseUnsynced => node.durable.clone(),
                Crash::KeepUnsynced => node.bytes.clone(),
                Crash::Torn(_) => torn(node, &mut rng),
            };
            let mut node = Node {
                durable: bytes.clone(),
                bytes,
                ..Node::default()
            };
            node.clean();
            nodes.insert(id, node);
        }
        MemFs {
            state: Arc::new(Mutex::new(MemState {
                dirs: state.dirs.clone(),
                nodes,
                next_node: state.next_node,
                durable_names: names.clone(),
                names,
                pending: Vec::new(),
                locks: BTreeSet::new(),
            })),
        }
    }

    /// Replaces the contents of `path`, durably (for tests that damage files).
    pub fn set_contents(&self, path: &Path, bytes: Vec<u8>) -> io::Result<()> {
        let mut state = self.state.lock();
        let id = state.node_of(path)?;
        let node = state.node(id)?;
        node.durable = bytes.clone();
        node.bytes = bytes;
        node.clean();
        Ok(())
    }

    fn handle(&self, node: u64, path: &Path) -> Arc<dyn SegmentFile> {
        Arc::new(MemFile {
            fs: self.clone(),
            node,
            path: path.to_path_buf(),
        })
    }
}

/// What a crash leaves of one file's unsynced bytes, under [`Crash::Torn`].
fn torn(node: &Node, rng: &mut Rng) -> Vec<u8> {
    const SECTOR: usize = 512;
    let (synced, written) = (node.durable.len(), node.bytes.len());
    let (lo, hi) = (synced.min(written), synced.max(written));
    let len = lo + rng.below((hi - lo) as u64 + 1) as usize;
    // Bytes before this are the same written and synced.
    let stable = node.dirty_from.min(synced).min(written);
    let mut out = Vec::with_capacity(len);
    let mut at = 0;
    while at < len {
        let end = (at + SECTOR).min(len);
        let src = if end <= stable || rng.below(2) == 0 {
            &node.durable
        } else {
            &node.bytes
        };
        // Past a source's end lie bytes never written there: zeros.
        out.extend((at..end).map(|i| src.get(i).copied().unwrap_or(0)));
        at = end;
    }
    out
}

/// A small deterministic generator (splitmix64) for torn crashes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

struct MemFile {
    fs: MemFs,
    node: u64,
    path: PathBuf,
}

impl SegmentFile for MemFile {
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let offset = usize::try_from(offset).map_err(|_| io::ErrorKind::InvalidInput)?;
        self.fs.state.lock().node(self.node)?.write(buf, offset);
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let len = usize::try_from(len).map_err(|_| io::ErrorKind::InvalidInput)?;
        self.fs.state.lock().node(self.node)?.set_len(len);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        self.fs.state.lock().node(self.node)?.sync();
        Ok(())
    }

    fn map(&self) -> io::Result<Mapped> {
        let bytes = self.fs.state.lock().node(self.node)?.bytes.clone();
        Ok(Mapped(MappedBytes::Memory(bytes.into())))
    }

    fn file_len(&self) -> io::Result<u64> {
        Ok(self.fs.state.lock().node(self.node)?.bytes.len() as u64)
    }

    fn read_range(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let offset = usize::try_from(offset).map_err(|_| io::ErrorKind::InvalidInput)?;
        let mut state = self.fs.state.lock();
        let bytes = &state.node(self.node)?.bytes;
        let from = offset
            .checked_add(buf.len())
            .and_then(|end| bytes.get(offset..end));
        buf.copy_from_slice(from.ok_or(io::ErrorKind::UnexpectedEof)?);
        Ok(())
    }
}

impl fmt::Debug for MemFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MemFile({})", self.path.display())
    }
}

struct MemLock {
    fs: MemFs,
    path: PathBuf,
}

impl Drop for MemLock {
    fn drop(&mut self) {
        self.fs.state.lock().locks.remove(&self.path);
    }
}

impl Fs for MemFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.state.lock();
        for a in dir.ancestors().filter(|a| !a.as_os_str().is_empty()) {
            state.dirs.insert(a.to_path_buf());
        }
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        let state = self.state.lock();
        state.names.contains_key(path) || state.dirs.contains(path)
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn Send + Sync>> {
        let mut state = self.state.lock();
        state.check_parent(path)?;
        if !state.locks.insert(path.to_path_buf()) {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(Box::new(MemLock {
            fs: self.clone(),
            path: path.to_path_buf(),
        }))
    }

    fn create_new(&self, path: &Path) -> io::Result<Arc<dyn SegmentFile>> {
        let mut state = self.state.lock();
        state.check_parent(path)?;
        if state.names.contains_key(path) {
            return Err(io::ErrorKind::AlreadyExists.into());
        }
        let node = state.new_node();
        state.link(path, node);
        Ok(self.handle(node, path))
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn SegmentFile>> {
        let node = self.state.lock().node_of(path)?;
        Ok(self.handle(node, path))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.read_prefix(path, usize::MAX)
    }

    fn read_prefix(&self, path: &Path, len: usize) -> io::Result<Vec<u8>> {
        let mut state = self.state.lock();
        let id = state.node_of(path)?;
        let bytes = &state.node(id)?.bytes;
        Ok(bytes
            .get(..len.min(bytes.len()))
            .unwrap_or_default()
            .to_vec())
    }

    fn map(&self, path: &Path) -> io::Result<Mapped> {
        Ok(Mapped(MappedBytes::Memory(self.read(path)?.into())))
    }

    fn write_file(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut state = self.state.lock();
        state.check_parent(path)?;
        let id = match state.names.get(path) {
            Some(&id) => id,
            None => {
                let id = state.new_node();
                state.link(path, id);
                id
            }
        };
        let node = state.node(id)?;
        node.set_len(0);
        node.write(bytes, 0);
        node.sync();
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.state.lock();
        state.check_parent(to)?;
        let node = state.node_of(from)?;
        let change = NameChange::Rename {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
            node,
        };
        change.apply(&mut state.names);
        state.pending.push(change);
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut state = self.state.lock();
        state.node_of(path)?;
        state.names.remove(path);
        state.pending.push(NameChange::Unlink(path.to_path_buf()));
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<(String, u64)>> {
        let state = self.state.lock();
        if !state.dirs.contains(dir) {
            return Err(not_found());
        }
        Ok(state
            .names
            .iter()
            .filter(|(p, _)| p.parent() == Some(dir))
            .filter_map(|(p, id)| {
                let name = p.file_name()?.to_str()?.to_string();
                Some((name, state.nodes.get(id)?.bytes.len() as u64))
            })
            .collect())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.state.lock();
        if !state.dirs.contains(dir) {
            return Err(not_found());
        }
        let (here, elsewhere): (Vec<_>, Vec<_>) = std::mem::take(&mut state.pending)
            .into_iter()
            .partition(|c| c.path().parent() == Some(dir));
        for change in &here {
            change.apply(&mut state.durable_names);
        }
        state.pending = elsewhere;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(name: &str) -> PathBuf {
        Path::new("/d").join(name)
    }

    /// A disk with `/d/a` holding `synced` durably and `more` written after.
    fn disk(synced: &[u8], more: &[u8]) -> MemFs {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        let f = fs.create_new(&p("a")).unwrap();
        f.write_at(synced, 0).unwrap();
        f.sync_data().unwrap();
        fs.sync_dir(Path::new("/d")).unwrap();
        f.write_at(more, synced.len() as u64).unwrap();
        fs
    }

    #[test]
    fn a_crash_keeps_synced_bytes_and_loses_or_keeps_the_rest() {
        let fs = disk(b"durable", b" and not");
        assert_eq!(fs.read(&p("a")).unwrap(), b"durable and not");
        let lost = fs.crash(Crash::LoseUnsynced);
        assert_eq!(lost.read(&p("a")).unwrap(), b"durable");
        let kept = fs.crash(Crash::KeepUnsynced);
        assert_eq!(kept.read(&p("a")).unwrap(), b"durable and not");
        // The original is untouched by a crash taken of it.
        assert_eq!(fs.read(&p("a")).unwrap(), b"durable and not");
    }

    #[test]
    fn a_sync_makes_durable_exactly_what_the_file_holds_after_any_changes() {
        // Overwrites in the middle, a shrink and a regrowth (whose bytes are
        // zeros, not the old ones), a write past the end: after a sync, a
        // crash that loses everything unsynced keeps exactly these bytes.
        let fs = disk(b"0123456789", b"");
        let f = fs.open(&p("a")).unwrap();
        f.write_at(b"ab", 3).unwrap();
        f.set_len(6).unwrap();
        f.set_len(8).unwrap();
        f.write_at(b"z", 10).unwrap();
        f.sync_data().unwrap();
        let want = b"012ab5\0\0\0\0z";
        assert_eq!(fs.read(&p("a")).unwrap(), want);
        assert_eq!(fs.crash(Crash::LoseUnsynced).read(&p("a")).unwrap(), want);
        // And again from there: only the changed range is copied.
        f.write_at(b"Q", 0).unwrap();
        f.sync_data().unwrap();
        let lost = fs.crash(Crash::LoseUnsynced).read(&p("a")).unwrap();
        assert_eq!(lost, b"Q12ab5\0\0\0\0z");
    }

    #[test]
    fn a_torn_crash_keeps_the_synced_prefix_and_a_length_in_between() {
        let synced = vec![1u8; 1500];
        let more = vec![2u8; 3000];
        let fs = disk(&synced, &more);
        let mut lengths = BTreeSet::new();
        for seed in 0..64 {
            let bytes = fs.crash(Crash::Torn(seed)).read(&p("a")).unwrap();
            assert!((1500..=4500).contains(&bytes.len()), "{}", bytes.len());
            assert_eq!(&bytes[..1500], &synced[..], "seed {seed}");
            // Each 512-byte sector after the synced bytes holds either what
            // was written or zeros, whole.
            let mut at = 1500;
            while at < bytes.len() {
                let end = ((at / 512 + 1) * 512).min(bytes.len());
                let sector = &bytes[at..end];
                assert!(
                    sector.iter().all(|&b| b == 2) || sector.iter().all(|&b| b == 0),
                    "seed {seed}, bytes {at}..{end}"
                );
                at = end;
            }
            lengths.insert(bytes.len());
        }
        assert!(lengths.len() > 10, "torn lengths vary: {lengths:?}");
    }

    #[test]
    fn names_are_durable_only_once_their_directory_is_synced() {
        let fs = disk(b"x", b"");
        let b = fs.create_new(&p("b")).unwrap();
        b.write_at(b"new", 0).unwrap();
        b.sync_data().unwrap();
        fs.remove_file(&p("a")).unwrap();
        let lost = fs.crash(Crash::LoseUnsynced);
        assert!(lost.exists(&p("a")) && !lost.exists(&p("b")));
        fs.sync_dir(Path::new("/d")).unwrap();
        let after = fs.crash(Crash::LoseUnsynced);
        assert!(!after.exists(&p("a")));
        assert_eq!(after.read(&p("b")).unwrap(), b"new");
    }

    #[test]
    fn a_rename_survives_a_torn_crash_whole_or_not_at_all() {
        let fs = disk(b"old", b"");
        fs.write_file(&p("a.tmp"), b"new").unwrap();
        fs.rename(&p("a.tmp"), &p("a")).unwrap();
        let mut seen = BTreeSet::new();
        for seed in 0..64 {
            let after = fs.crash(Crash::Torn(seed));
            let a = after.read(&p("a")).unwrap();
            let tmp = after.read(&p("a.tmp")).ok();
            match (a.as_slice(), tmp.as_deref()) {
                (b"old", Some(b"new")) | (b"old", None) | (b"new", None) => {}
                other => panic!("seed {seed}: {other:?}"),
            }
            seen.insert(a);
        }
        assert_eq!(seen.len(), 2, "both outcomes occur");
    }

    #[test]
    fn locks_exclude_until_dropped_and_do_not_survive_a_crash() {
        let fs = disk(b"", b"");
        let guard = fs.lock(&p("LOCK")).unwrap();
        assert_eq!(
            fs.lock(&p("LOCK")).err().map(|e| e.kind()),
            Some(io::ErrorKind::WouldBlock)
        );
        assert!(fs.crash(Crash::KeepUnsynced).lock(&p("LOCK")).is_ok());
        drop(guard);
        assert!(fs.lock(&p("LOCK")).is_ok());
    }
}
