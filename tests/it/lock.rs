//! A false `Locked`.
//!
//! What broke: while another thread of the same process started child
//! processes (agents run tools as subprocesses), a child shared the store's
//! lock file between its fork and its exec, so a store reopened right after
//! `close()` failed with `Locked` (152 times in 600). An open now retries a
//! held lock for `Options::lock_wait` before it reports one.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ctxlog::{Durability, Error, Options, Store};

#[test]
fn reopens_while_a_thread_spawns_children_never_see_a_false_lock() {
    let dir = common::tmp();
    let stop = Arc::new(AtomicBool::new(false));
    let spawned = Arc::new(AtomicUsize::new(0));
    let spawner = {
        let (stop, spawned) = (stop.clone(), spawned.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                let status = std::process::Command::new("/bin/true").status().unwrap();
                assert!(status.success());
                spawned.fetch_add(1, Ordering::AcqRel);
            }
        })
    };
    let options = Options::default().durability(Durability::Buffered);
    for i in 0..500 {
        let store =
            Store::open(dir.path(), options.clone()).unwrap_or_else(|e| panic!("reopen {i}: {e}"));
        store.append_message("t", "c", b"x").unwrap();
        store.close().unwrap();
    }
    stop.store(true, Ordering::Release);
    spawner.join().unwrap();
    assert!(spawned.load(Ordering::Acquire) > 0);
}

#[test]
fn a_lock_that_stays_held_is_reported_once_the_wait_is_over() {
    let dir = common::tmp();
    let _holder = Store::open(dir.path(), Options::default()).unwrap();
    let started = std::time::Instant::now();
    let wait = Duration::from_millis(50);
    match Store::open(dir.path(), Options::default().lock_wait(wait)) {
        Err(Error::Locked { .. }) => {}
        other => panic!("expected Locked, got {:?}", other.err()),
    }
    assert!(started.elapsed() >= wait);
}
