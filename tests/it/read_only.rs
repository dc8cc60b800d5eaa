//! Read-only opens beside a live writer in another process: whatever the
//! writer is doing (appending, rotating segments, writing checkpoints,
//! compacting), every answer a reader gets is a prefix of what the writer
//! wrote, a checksum scan finds nothing wrong, and the reader changes
//! nothing on disk.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};

use ctxlog::{Durability, Error, Options, Store};

const CONTEXTS: u64 = 5;
const APPENDS: u64 = 3000;

fn writer_options() -> Options {
    Options::default()
        .durability(Durability::GroupCommit)
        .segment_bytes(4096)
        .checkpoint_interval(Some(8192))
}

/// The writer, run in a child process by the test below (ignored when the
/// suite runs): message `i` goes to context `c{i % 5}` with body `i`; a
/// compaction every 400 appends rewrites every sealed segment.
#[test]
#[ignore = "the writer process of readers_beside_a_live_writer_see_prefixes"]
fn writer_process() {
    let Some(dir) = std::env::var_os("CTXLOG_TEST_WRITER_DIR") else {
        return;
    };
    let store = Store::open(&dir, writer_options()).unwrap();
    // Tell the parent the store exists.
    println!("ready");
    for i in 0..APPENDS {
        let context = format!("c{}", i % CONTEXTS);
        store
            .append_message("t", &context, i.to_string().as_bytes())
            .unwrap();
        if i % 400 == 399 {
            store.compact().unwrap();
        }
    }
    store.close().unwrap();
}

/// Checks that each context holds `first, first + 5, …` from its start,
/// with no gap: a prefix of what the writer appends to it.
fn check_prefixes(store: &Store) -> u64 {
    let mut seen = 0;
    for c in 0..CONTEXTS {
        let messages = match store.last_messages("t", &format!("c{c}"), usize::MAX) {
            Ok(m) => m,
            Err(Error::ContextNotFound) => continue,
            Err(e) => panic!("context c{c}: {e}"),
        };
        for (k, m) in messages.iter().enumerate() {
            let n: u64 = std::str::from_utf8(&m.raw).unwrap().parse().unwrap();
            assert_eq!(n, c + CONTEXTS * k as u64, "context c{c}, message {k}");
            assert_eq!(m.seq, k as u64);
        }
        seen += messages.len() as u64;
    }
    seen
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn readers_beside_a_live_writer_see_prefixes() {
    let dir = common::tmp();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "read_only::writer_process",
            "--ignored",
            "--nocapture",
            "--quiet",
        ])
        .env("CTXLOG_TEST_WRITER_DIR", dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    // Wait (bounded by the child's life) for the store to exist.
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("ready") {
        line.clear();
        if std::io::BufRead::read_line(&mut out, &mut line).unwrap() == 0 {
            panic!("the writer exited before it opened the store");
        }
    }
    let mut reads = 0;
    let mut last = 0;
    let mut grew = 0;
    let mut verified = 0;
    while child.try_wait().unwrap().is_none() && reads < 2000 {
        let store = Store::open_read_only(dir.path(), Options::default()).unwrap();
        assert!(store.is_read_only());
        assert!(store.open_report().torn_tail.is_none());
        let seen = check_prefixes(&store);
        if reads % 25 == 0 {
            // A full checksum scan beside the writer finds nothing wrong.
            let report = Store::verify_read_only(dir.path(), &mut |_, _| {}).unwrap();
            assert!(report.is_clean(), "{report:?}");
            verified += 1;
        }
        if seen > last {
            grew += 1;
        }
        last = seen;
        reads += 1;
    }
    assert!(child.wait().unwrap().success(), "the writer failed");
    // The reader followed the writer along the way.
    eprintln!("{reads} reads, grew {grew} times");
    assert!(reads >= 2 && grew >= 1, "{reads} reads, grew {grew} times");
    assert!(verified >= 1);
    // And after it, sees everything.
    let store = Store::open_read_only(dir.path(), Options::default()).unwrap();
    assert_eq!(check_prefixes(&store), APPENDS);
}

#[test]
fn a_read_only_open_changes_nothing_and_refuses_writes() {
    let dir = common::tmp();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    store.append_message("t", "c", b"one").unwrap();
    // A crash copy: no checkpoint, no clean close, a lock file left.
    let copy = common::crash_copy(dir.path());
    drop(store);
    // A half-written frame at the end, which a writer's open would cut.
    let (seg, bytes) = common::tear_newest_segment(copy.path(), &[9, 0, 0, 0, 1]);
    std::fs::remove_file(copy.path().join("IDENTITY")).unwrap();
    std::fs::write(copy.path().join("0000000000000009.seg.tmp"), b"half").unwrap();
    let before = listing(copy.path());
    let reader = Store::open_read_only(copy.path(), Options::default()).unwrap();
    assert_eq!(reader.last_messages("t", "c", 9).unwrap()[0].raw, b"one");
    for refused in [
        reader.append_message("t", "c", b"two").err(),
        reader.delete_context("t", "c").err(),
        reader.compact().err(),
        reader.sync().err(),
        reader.begin_turn("t", "c", "task").err(),
    ] {
        assert!(matches!(refused, Some(Error::ReadOnly)), "{refused:?}");
    }
    reader.close().unwrap();
    // Nothing was cut, created, restored or removed.
    assert_eq!(listing(copy.path()), before);
    assert_eq!(std::fs::read(&seg).unwrap(), bytes);
    // A directory without a store is not made into one.
    let empty = common::tmp();
    assert!(matches!(
        Store::open_read_only(empty.path().join("typo"), Options::default()),
        Err(Error::StoreNotFound { .. })
    ));
    assert!(matches!(
        Store::open(empty.path().join("typo"), Options::default().create(false)),
        Err(Error::StoreNotFound { .. })
    ));
    assert!(!empty.path().join("typo").exists());
}
