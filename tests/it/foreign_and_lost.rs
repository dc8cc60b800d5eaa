//! Files of another store, and acknowledged records that went missing.
//!
//! What broke: store A's CHECKPOINT copied into store B (a partial restore,
//! an rsync without `--delete`) was loaded as B's index, so
//! `last_messages("alice", "secret")` served bob's bytes and `verify` said
//! clean. And after a clean close, a newest segment cut to half its size
//! opened with a "torn tail" of one record while 25 acknowledged messages
//! were silently gone; the same for a segment missing from the middle of
//! the log or replaced by an older copy of itself.

use crate::common;

use std::fs;
use std::path::Path;

use common::{segment_files, tmp};
use ctxlog::{Error, Options, RecoveryMode, Store};

fn skip() -> Options {
    Options::default().recovery(RecoveryMode::SkipCorrupt)
}

/// A closed store holding `count` messages of `tenant`'s context "secret".
fn store_of(tenant: &str, count: usize, options: Options) -> tempfile::TempDir {
    let dir = tmp();
    let store = Store::open(dir.path(), options).unwrap();
    for i in 0..count {
        let body = format!("{tenant}'s message {i:03} {}", "x".repeat(100));
        store
            .append_message(tenant, "secret", body.as_bytes())
            .unwrap();
    }
    store.close().unwrap();
    dir
}

fn messages(store: &Store, tenant: &str) -> Vec<String> {
    store
        .last_messages(tenant, "secret", usize::MAX)
        .unwrap()
        .into_iter()
        .map(|m| String::from_utf8(m.raw).unwrap())
        .collect()
}

fn verify(dir: &Path) -> ctxlog::VerifyReport {
    Store::verify(dir, &mut |_, _| {}).unwrap()
}

#[test]
fn a_checkpoint_of_another_store_is_ignored_and_the_log_is_read() {
    let a = store_of("bob", 3, Options::default());
    // Of another manifest generation too: still named another store's.
    let store = Store::open(a.path(), Options::default()).unwrap();
    store.compact().unwrap();
    store.close().unwrap();
    let b = store_of("alice", 3, Options::default());
    fs::copy(a.path().join("CHECKPOINT"), b.path().join("CHECKPOINT")).unwrap();
    assert!(verify(b.path())
        .damage
        .iter()
        .any(|d| d.reason.contains("CHECKPOINT belongs to another store")));
    let store = Store::open(b.path(), Options::default()).unwrap();
    let report = store.open_report();
    assert!(!report.from_checkpoint);
    let why = report.checkpoint_ignored.as_deref().unwrap();
    assert!(why.contains("another store"), "{why}");
    assert_eq!(messages(&store, "alice").len(), 3);
    assert!(messages(&store, "alice")[0].starts_with("alice's"));
    assert!(matches!(
        store.last_messages("bob", "secret", 1),
        Err(Error::ContextNotFound)
    ));
    // The close writes B's own checkpoint over it.
    store.close().unwrap();
    assert!(verify(b.path()).is_clean());
    let store = Store::open(b.path(), Options::default()).unwrap();
    assert!(store.open_report().from_checkpoint);
}

#[test]
fn a_segment_of_another_store_is_refused_or_left_unread() {
    let a = store_of("bob", 3, Options::default());
    let b = store_of("alice", 3, Options::default());
    // A's segment 1 over B's: the same name, a header that names the same
    // segment; only the store identity tells them apart.
    let theirs = segment_files(a.path()).pop().unwrap();
    let ours = segment_files(b.path()).pop().unwrap();
    fs::copy(&theirs, &ours).unwrap();
    match Store::open(b.path(), Options::default()) {
        Err(e @ Error::ForeignFile { .. }) => {
            assert!(e.to_string().contains("another store"), "{e}");
        }
        other => panic!("expected ForeignFile, got {:?}", other.err()),
    }
    assert!(!verify(b.path()).is_clean());
    let store = Store::open(b.path(), skip()).unwrap();
    assert_eq!(store.open_report().foreign.len(), 1);
    // Bob's records are another store's: never served here.
    assert!(matches!(
        store.last_messages("bob", "secret", 1),
        Err(Error::ContextNotFound)
    ));
    drop(store);
    assert!(ours.exists(), "a file of another store is left where it is");
}

#[test]
fn a_manifest_of_another_store_is_refused_or_ignored_without_removing_anything() {
    let small = || Options::default().segment_bytes(4096);
    let a = store_of("bob", 60, small());
    let b = store_of("alice", 60, small());
    for dir in [&a, &b] {
        let store = Store::open(dir.path(), small()).unwrap();
        store.compact().unwrap();
        store.close().unwrap();
    }
    let before = fs::read_dir(b.path()).unwrap().count();
    fs::copy(a.path().join("MANIFEST"), b.path().join("MANIFEST")).unwrap();
    fs::remove_file(b.path().join("CHECKPOINT")).unwrap();
    assert!(matches!(
        Store::open(b.path(), small()),
        Err(Error::ForeignFile { .. })
    ));
    let store = Store::open(b.path(), small().recovery(RecoveryMode::SkipCorrupt)).unwrap();
    assert_eq!(store.open_report().foreign.len(), 1);
    assert!(store.open_report().removed_segments.is_empty());
    let got = messages(&store, "alice");
    assert_eq!(got.len(), 60);
    assert!(got.iter().all(|m| m.starts_with("alice's")));
    drop(store);
    assert!(fs::read_dir(b.path()).unwrap().count() >= before - 1);
}

#[test]
fn a_newest_segment_cut_after_a_clean_close_is_lost_data_not_a_torn_tail() {
    let dir = store_of("t", 50, Options::default());
    let seg = segment_files(dir.path()).pop().unwrap();
    let len = fs::metadata(&seg).unwrap().len();
    let file = fs::OpenOptions::new().write(true).open(&seg).unwrap();
    file.set_len(len / 2).unwrap();
    drop(file);
    match Store::open(dir.path(), Options::default()) {
        Err(
            e @ Error::MissingRecords {
                segment,
                expected,
                actual,
                ..
            },
        ) => {
            assert_eq!((segment, expected, actual), (1, len, len / 2));
            assert!(
                e.to_string().contains("acknowledged records are missing"),
                "{e}"
            );
        }
        other => panic!("expected MissingRecords, got {:?}", other.err()),
    }
    let report = verify(dir.path());
    assert!(
        report
            .damage
            .iter()
            .any(|d| d.reason.contains("acknowledged records are missing")),
        "{report:?}"
    );
    let store = Store::open(dir.path(), skip()).unwrap();
    let lost = &store.open_report().lost;
    assert_eq!(
        (lost.len(), lost[0].expected, lost[0].actual),
        (1, len, len / 2)
    );
    let kept = messages(&store, "t");
    assert!(kept.len() < 50 && kept.len() >= 20, "{}", kept.len());
}

#[test]
fn a_newest_segment_cut_inside_its_header_after_a_close_is_lost_data_too() {
    // Shorter than a header, a newest segment looks like a rotation that
    // crashed before its header was durable, which is removed; but the
    // checkpoint says records of it were durable, so it was cut.
    for cut in [0u64, 1, 30, 63] {
        let dir = store_of("t", 50, Options::default());
        let seg = segment_files(dir.path()).pop().unwrap();
        let len = fs::metadata(&seg).unwrap().len();
        let file = fs::OpenOptions::new().write(true).open(&seg).unwrap();
        file.set_len(cut).unwrap();
        drop(file);
        match Store::open(dir.path(), Options::default()) {
            Err(Error::MissingRecords {
                segment,
                expected,
                actual,
                ..
            }) => assert_eq!((segment, expected, actual), (1, len, cut)),
            other => panic!(
                "cut at {cut}: expected MissingRecords, got {:?}",
                other.err()
            ),
        }
        assert!(seg.exists(), "cut at {cut}: the evidence was removed");
        match Store::open_read_only(dir.path(), Options::default()) {
            Err(Error::MissingRecords { .. }) => {}
            other => panic!(
                "cut at {cut}: read-only: expected MissingRecords, got {:?}",
                other.err()
            ),
        }
        assert!(!verify(dir.path()).is_clean(), "cut at {cut}");
        // Accepting the loss (skip-corrupt) opens, and says what was lost.
        let store = Store::open(dir.path(), skip()).unwrap();
        let lost = &store.open_report().lost;
        assert_eq!(
            (lost.len(), lost[0].expected, lost[0].actual),
            (1, len, cut)
        );
    }
}

/// A store whose log spans several segments (small ones), closed.
fn rotated(count: usize) -> tempfile::TempDir {
    store_of("t", count, Options::default().segment_bytes(4096))
}

#[test]
fn a_segment_missing_from_the_middle_is_lost_data() {
    for with_checkpoint in [true, false] {
        let dir = rotated(120);
        if !with_checkpoint {
            fs::remove_file(dir.path().join("CHECKPOINT")).unwrap();
        }
        let segs = segment_files(dir.path());
        assert!(segs.len() >= 4);
        let gone = &segs[1];
        let gone_len = fs::metadata(gone).unwrap().len();
        fs::remove_file(gone).unwrap();
        let options = Options::default().segment_bytes(4096);
        match Store::open(dir.path(), options.clone()) {
            Err(Error::MissingRecords {
                segment,
                expected,
                actual,
                ..
            }) => assert_eq!((segment, expected, actual), (2, gone_len, 0)),
            other => panic!("expected MissingRecords, got {:?}", other.err()),
        }
        assert!(!verify(dir.path()).is_clean());
        let store = Store::open(dir.path(), options.recovery(RecoveryMode::SkipCorrupt)).unwrap();
        assert_eq!(store.open_report().lost[0].segment, 2);
        let kept = messages(&store, "t");
        assert!(kept.len() < 120 && kept.len() > 60, "{}", kept.len());
    }
}

#[test]
fn a_segment_replaced_by_an_older_copy_of_itself_is_lost_data() {
    let dir = tmp();
    let options = Options::default().segment_bytes(4096).preallocate(0);
    let store = Store::open(dir.path(), options.clone()).unwrap();
    store.append_message("t", "secret", b"early").unwrap();
    let first = segment_files(dir.path())[0].clone();
    let older = fs::read(&first).unwrap();
    for i in 0..100 {
        let body = format!("later {i} {}", "y".repeat(100));
        store
            .append_message("t", "secret", body.as_bytes())
            .unwrap();
    }
    store.close().unwrap();
    assert!(segment_files(dir.path()).len() > 2);
    fs::write(&first, &older).unwrap();
    fs::remove_file(dir.path().join("CHECKPOINT")).unwrap();
    match Store::open(dir.path(), options) {
        Err(Error::MissingRecords {
            segment, actual, ..
        }) => assert_eq!((segment, actual), (1, older.len() as u64)),
        other => panic!("expected MissingRecords, got {:?}", other.err()),
    }
}

#[test]
fn a_torn_tail_after_a_crash_is_still_cut_as_before() {
    // Appends after the last checkpoint, then a crash that tears the last
    // of them: only bytes never acknowledged are cut, and that is no loss.
    let dir = store_of("t", 5, Options::default());
    let store = Store::open(dir.path(), Options::default()).unwrap();
    for i in 0..5 {
        store
            .append_message("t", "secret", format!("after {i}").as_bytes())
            .unwrap();
    }
    // The directory as a crash now leaves it (the store is still open).
    let crashed = common::crash_copy(dir.path());
    drop(store);
    let seg = segment_files(crashed.path()).pop().unwrap();
    let mut bytes = fs::read(&seg).unwrap();
    let end = bytes.iter().rposition(|&b| b != 0).unwrap() + 1;
    bytes.truncate(end - 3);
    fs::write(&seg, &bytes).unwrap();
    let store = Store::open(crashed.path(), Options::default()).unwrap();
    assert!(store.open_report().torn_tail.is_some());
    assert!(store.open_report().lost.is_empty());
    assert_eq!(messages(&store, "t").len(), 9);
}

#[test]
fn an_identity_file_lost_is_restored_from_the_segments() {
    let dir = store_of("t", 3, Options::default());
    let id = fs::read(dir.path().join("IDENTITY")).unwrap();
    fs::remove_file(dir.path().join("IDENTITY")).unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    assert!(store.open_report().identity_restored);
    assert!(store.open_report().from_checkpoint);
    drop(store);
    assert_eq!(fs::read(dir.path().join("IDENTITY")).unwrap(), id);
}

#[test]
fn a_lost_identity_is_the_one_most_files_name_not_a_stray_newest_segment() {
    // Store A over several segments; store B's newest segment copied in
    // past A's; then A's IDENTITY is lost.
    let a = rotated(120);
    let b = store_of("t", 2, Options::default());
    let a_id = fs::read(a.path().join("IDENTITY")).unwrap();
    let ours = segment_files(a.path());
    assert!(ours.len() >= 3, "{ours:?}");
    let stray = a.path().join("0000000000000099.seg");
    fs::copy(segment_files(b.path()).last().unwrap(), &stray).unwrap();
    fs::remove_file(a.path().join("IDENTITY")).unwrap();
    // Strict: the stray file is named, not taken for the store.
    match Store::open(a.path(), Options::default()) {
        Err(Error::ForeignFile { path, .. }) => assert_eq!(path, stray),
        other => panic!("expected ForeignFile, got {:?}", other.map(|_| ())),
    }
    let store = Store::open(a.path(), skip()).unwrap();
    let report = store.open_report().clone();
    assert!(report.identity_restored);
    assert_eq!(report.foreign.len(), 1, "{:?}", report.foreign);
    assert_eq!(report.foreign[0].path, stray);
    assert_eq!(messages(&store, "t").len(), 120);
    assert!(messages(&store, "t")
        .iter()
        .all(|m| m.starts_with("t's message")));
    drop(store);
    assert_eq!(fs::read(a.path().join("IDENTITY")).unwrap(), a_id);
}
