//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use ctxlog::internals::list_segment_ids;
use ctxlog::internals::segment_path;

/// A fresh temporary directory, removed when dropped.
pub fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("temporary directory")
}

/// A store with `Durability::Buffered` in a fresh temporary directory.
pub fn buffered_store() -> (tempfile::TempDir, ctxlog::Store) {
    let dir = tmp();
    let options = ctxlog::Options::default().durability(ctxlog::Durability::Buffered);
    let store = ctxlog::Store::open(dir.path(), options).unwrap();
    (dir, store)
}

/// The paths of the store's segment files, oldest first.
pub fn segment_files(dir: &Path) -> Vec<PathBuf> {
    list_segment_ids(&ctxlog::fs::OsFs, dir)
        .expect("list segments")
        .into_iter()
        .map(|id| segment_path(dir, id))
        .collect()
}

/// A message body of `len` bytes that differs for every `n`.
pub fn body(n: usize, len: usize) -> Vec<u8> {
    let mut v = format!("{{\"messageId\":\"m{n}\",\"pad\":\"").into_bytes();
    while v.len() + 2 < len {
        v.push(b'a' + (n % 26) as u8);
    }
    v.extend_from_slice(b"\"}");
    v
}

/// Copies a store directory as a crash would leave it (without the lock).
pub fn crash_copy(from: &Path) -> tempfile::TempDir {
    let to = tmp();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() != "LOCK" {
            std::fs::copy(entry.path(), to.path().join(entry.file_name())).unwrap();
        }
    }
    to
}

/// Ends the newest segment of `dir` as a crash mid-append can: its
/// preallocated zeros cut, then `junk` (the start of a frame never
/// finished) after its last record. Returns the segment's path and the
/// bytes it now holds.
pub fn tear_newest_segment(dir: &Path, junk: &[u8]) -> (PathBuf, Vec<u8>) {
    let seg = segment_files(dir).pop().expect("a segment");
    let mut bytes = std::fs::read(&seg).expect("read the segment");
    let end = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    bytes.truncate(end);
    bytes.extend_from_slice(junk);
    std::fs::write(&seg, &bytes).expect("write the segment");
    (seg, bytes)
}

/// Runs `future` on this thread to its end, parking between polls; fails
/// if a poll's wake-up never comes (a missed wake-up would hang here).
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread, std::sync::atomic::AtomicBool);
    impl Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.1.store(true, std::sync::atomic::Ordering::SeqCst);
            self.0.unpark();
        }
    }
    let unpark = std::sync::Arc::new(Unpark(
        std::thread::current(),
        std::sync::atomic::AtomicBool::new(false),
    ));
    let waker = Waker::from(unpark.clone());
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        let start = std::time::Instant::now();
        while !unpark.1.swap(false, std::sync::atomic::Ordering::SeqCst) {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(30),
                "a pending future was never woken"
            );
            std::thread::park_timeout(std::time::Duration::from_secs(1));
        }
    }
}
