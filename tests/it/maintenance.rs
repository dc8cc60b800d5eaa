//! Self-maintenance: the background thread merges on its own, readers and
//! writers see exactly what they would without it, a close in the middle
//! of a merge loses nothing and leaves nothing behind, and the space of
//! deleted contexts comes back without `compact()`.

use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ctxlog::{Durability, Maintenance, Options, Store};

/// A thread that looks every few milliseconds and merges two sealed
/// segments at once: it is busy all through a short test.
fn eager() -> Maintenance {
    Maintenance::default()
        .interval(Duration::from_millis(2))
        .idle_after(Duration::from_millis(20))
        .tail_segments(2)
}

fn options(maintenance: Maintenance) -> Options {
    Options::default()
        .durability(Durability::Buffered)
        .segment_bytes(8192)
        .maintenance(Some(maintenance))
}

fn body(context: usize, i: usize) -> Vec<u8> {
    format!(
        "{context}:{i}:{}",
        "x".repeat(100 + (context * 7 + i * 13) % 300)
    )
    .into_bytes()
}

/// Waits (at most 60 s) until `done` holds, checking every few ms.
fn wait_until(mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

/// The names of the files in `dir`.
fn files(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// Whether a merge is writing in `dir` (its output's `.tmp` files).
fn merging(dir: &std::path::Path) -> bool {
    files(dir).iter().any(|f| f.ends_with(".tmp"))
}

#[test]
fn the_thread_merges_on_its_own_and_a_reopen_reads_the_same() {
    let dir = common::tmp();
    let store = Store::open(dir.path(), options(eager())).unwrap();
    for i in 0..400 {
        store
            .append_message("t", &format!("c{}", i % 10), &body(i % 10, i))
            .unwrap();
    }
    assert!(
        wait_until(|| store.stats().merges >= 3),
        "no merge in 60 s: {:?}",
        store.stats()
    );
    let before: Vec<_> = (0..10)
        .map(|c| {
            store
                .last_messages("t", &format!("c{c}"), usize::MAX)
                .unwrap()
        })
        .collect();
    store.close().unwrap();
    let store = Store::open(dir.path(), options(eager().background(false))).unwrap();
    for (c, msgs) in before.iter().enumerate() {
        assert_eq!(msgs.len(), 40);
        assert_eq!(
            &store
                .last_messages("t", &format!("c{c}"), usize::MAX)
                .unwrap(),
            msgs
        );
    }
}

#[test]
fn readers_and_writers_see_exactly_what_they_would_without_it() {
    let dir = common::tmp();
    let store = Arc::new(Store::open(dir.path(), options(eager())).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    // Each writer owns two contexts, so what a reader sees of one must be
    // a prefix of what its writer wrote, in order.
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let (store, stop) = (store.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut written = 0;
                while written < 3000 && (!stop.load(Ordering::Acquire) || written < 300) {
                    let c = w * 2 + written % 2;
                    store
                        .append_message("t", &format!("c{c}"), &body(c, written / 2))
                        .unwrap();
                    written += 1;
                }
                written
            })
        })
        .collect();
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (store, stop) = (store.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut reads = 0u64;
                let mut c = r;
                while !stop.load(Ordering::Acquire) || reads < 100 {
                    c = (c + 1) % 6;
                    match store.last_messages("t", &format!("c{c}"), usize::MAX) {
                        Ok(msgs) => {
                            for (i, m) in msgs.iter().enumerate() {
                                assert_eq!(m.raw, body(c, i), "context c{c}, message {i}");
                            }
                        }
                        Err(ctxlog::Error::ContextNotFound) => {}
                        Err(e) => panic!("read failed during maintenance: {e}"),
                    }
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    let merged = wait_until(|| store.stats().merges >= 5);
    stop.store(true, Ordering::Release);
    let written: Vec<usize> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    for r in readers {
        assert!(r.join().unwrap() >= 100);
    }
    assert!(merged, "maintenance merged too little: {:?}", store.stats());
    let expect = |store: &Store| {
        for (w, n) in written.iter().enumerate() {
            for c in [w * 2, w * 2 + 1] {
                let msgs = store
                    .last_messages("t", &format!("c{c}"), usize::MAX)
                    .unwrap();
                let want = n / 2 + usize::from(c % 2 == 0 && n % 2 == 1);
                assert_eq!(msgs.len(), want, "context c{c}");
                for (i, m) in msgs.iter().enumerate() {
                    assert_eq!(m.raw, body(c, i));
                }
            }
        }
    };
    expect(&store);
    drop(Arc::into_inner(store).unwrap());
    let store = Store::open(dir.path(), options(eager().background(false))).unwrap();
    expect(&store);
}

#[test]
fn a_close_during_a_merge_stops_it_and_loses_nothing() {
    let dir = common::tmp();
    // Slow merges (64 KiB/s, in chunks of 1 MiB: a chunk's wait is long),
    // of big segments, so the close lands in the middle of one.
    let slow = Maintenance::default()
        .background(false)
        .bytes_per_second(64 << 10)
        .tail_segments(2);
    let options = Options::default()
        .durability(Durability::Buffered)
        .segment_bytes(4 << 20)
        .maintenance(Some(slow.clone()));
    let mut model = BTreeMap::new();
    {
        let store = Store::open(dir.path(), options.clone()).unwrap();
        for i in 0..12_000 {
            let c = i % 50;
            store
                .append_message("t", &format!("c{c}"), &body(c, i / 50))
                .unwrap();
            *model.entry(c).or_insert(0) += 1;
        }
        store.close().unwrap();
    }
    let started = Instant::now();
    {
        let store = Store::open(
            dir.path(),
            options.clone().maintenance(Some(slow.background(true))),
        )
        .unwrap();
        // The first chunk of the merge is written before its pace waits.
        assert!(wait_until(|| merging(dir.path())), "no merge started");
        store.close().unwrap();
    }
    // The merge would take a minute at its pace; the close stopped it.
    assert!(started.elapsed() < Duration::from_secs(50));
    assert!(!merging(dir.path()), "{:?}", files(dir.path()));
    let store = Store::open(dir.path(), options).unwrap();
    assert_eq!(store.stats().merges, 0);
    for (c, n) in model {
        let msgs = store
            .last_messages("t", &format!("c{c}"), usize::MAX)
            .unwrap();
        assert_eq!(msgs.len(), n);
        for (i, m) in msgs.iter().enumerate() {
            assert_eq!(m.raw, body(c, i));
        }
    }
}

#[test]
fn appends_that_rotate_go_on_while_a_merge_waits_for_its_pace() {
    let dir = common::tmp();
    // A merge at 1 KiB/s: after its first chunk it waits for minutes.
    let crawl = Maintenance::default()
        .background(false)
        .bytes_per_second(1 << 10)
        .tail_segments(2);
    let options = Options::default()
        .durability(Durability::Buffered)
        .segment_bytes(2 << 20)
        .maintenance(Some(crawl.clone()));
    {
        let store = Store::open(dir.path(), options.clone()).unwrap();
        // 7 MB: a merge takes a segment of it at least, more than a chunk.
        for i in 0..24_000 {
            store
                .append_message("t", &format!("c{}", i % 40), &body(i % 40, i / 40))
                .unwrap();
        }
        store.close().unwrap();
    }
    let store = Arc::new(
        Store::open(
            dir.path(),
            options.clone().maintenance(Some(crawl.background(true))),
        )
        .unwrap(),
    );
    assert!(wait_until(|| merging(dir.path())), "no merge started");
    // Appends through three rotations: a rotation takes the segment set's
    // write lock, which a merge must not hold while it waits (it used to,
    // for as long as its pace slept).
    let (done, finished) = std::sync::mpsc::channel();
    let appender = {
        let store = store.clone();
        std::thread::spawn(move || {
            let before = store.stats().segments;
            for i in 0..24_000 {
                store
                    .append_message("t", &format!("n{}", i % 8), &body(i % 8, i / 8))
                    .unwrap();
            }
            let _ = done.send(store.stats().segments.saturating_sub(before));
        })
    };
    let rotated = finished
        .recv_timeout(Duration::from_secs(60))
        .expect("appends waited on the merge's pace");
    appender.join().unwrap();
    assert!(rotated >= 3, "{rotated} new segments");
    assert!(
        merging(dir.path()),
        "the merge ended: it did not wait meanwhile"
    );
    drop(Arc::into_inner(store).unwrap());
    let store = Store::open(dir.path(), options).unwrap();
    for c in 0..8 {
        let msgs = store
            .last_messages("t", &format!("n{c}"), usize::MAX)
            .unwrap();
        assert_eq!(msgs.len(), 3_000);
        assert_eq!(msgs[2_999].raw, body(c, 2_999));
    }
}

#[test]
fn the_space_of_deleted_contexts_comes_back_without_compact() {
    let dir = common::tmp();
    let options = Options::default()
        .durability(Durability::Buffered)
        .segment_bytes(64 << 10)
        .maintenance(Some(Maintenance::default().background(false)));
    let store = Store::open(dir.path(), options).unwrap();
    for i in 0..4000 {
        let c = i % 40;
        store
            .append_message("t", &format!("c{c}"), &[c as u8; 1024])
            .unwrap();
    }
    while store.maintain().unwrap().is_some() {}
    for c in (0..40).step_by(2) {
        store.delete_context("t", &format!("c{c}")).unwrap();
    }
    let deleted = store.stats();
    assert!(deleted.disk_bytes as f64 > 1.8 * deleted.live_bytes as f64);
    while store.maintain().unwrap().is_some() {}
    let after = store.stats();
    let ratio = after.disk_bytes as f64 / after.live_bytes as f64;
    assert!(
        ratio <= 1.15,
        "{ratio:.2}x the live bytes after maintenance: {after:?}"
    );
    for c in 0..40 {
        let read = store.last_messages("t", &format!("c{c}"), usize::MAX);
        match c % 2 {
            0 => assert!(matches!(read, Err(ctxlog::Error::ContextNotFound))),
            _ => assert_eq!(read.unwrap().len(), 100),
        }
    }
}

/// Opens `dir` again with its checkpoint removed: the whole log is read.
fn reopen_reading_everything(dir: &std::path::Path, options: Options) -> Store {
    std::fs::remove_file(dir.join("CHECKPOINT")).unwrap();
    let store = Store::open(dir, options).unwrap();
    assert!(!store.open_report().from_checkpoint);
    store
}

/// What broke: a merge of part of the log writes a tombstone for a gone
/// context's records there, while its later records stay in later segments
/// until a later merge. An open that read the whole log refused it as
/// damaged ("record seq 14 where the context expects 10", or "a record
/// after its context was deleted").
#[test]
fn a_gone_context_tombstoned_in_part_of_the_log_reads_back_from_the_whole_log() {
    let options = Options::default()
        .durability(Durability::Buffered)
        .segment_bytes(4096)
        .maintenance(Some(Maintenance::default().background(false)));
    let fill = |store: &Store, others: &str, n: usize| {
        for i in 0..n {
            store.append_message("t", "x", &[b'x'; 300]).unwrap();
            store
                .append_message("t", &format!("{others}{}", i % 2), &[b'o'; 300])
                .unwrap();
        }
    };
    // x deleted: its records lie in a run, in the tail, and in the active
    // segment with its delete record.
    let dir = common::tmp();
    let store = Store::open(dir.path(), options.clone()).unwrap();
    fill(&store, "a", 10);
    store.compact().unwrap();
    fill(&store, "b", 10);
    store.delete_context("t", "x").unwrap();
    assert!(store.maintain().unwrap().is_some());
    store.close().unwrap();
    let store = reopen_reading_everything(dir.path(), options.clone());
    assert!(matches!(
        store.last_messages("t", "x", 1),
        Err(ctxlog::Error::ContextNotFound)
    ));
    assert!(store.append_message("t", "x", b"again").is_err());
    for other in ["a0", "a1", "b0", "b1"] {
        assert_eq!(store.last_messages("t", other, 100).unwrap().len(), 5);
    }
    store.close().unwrap();

    // x expired: the first merge after a reopen under a retention every
    // context has outlived tombstones the records of the tail it merges.
    let dir = common::tmp();
    let store = Store::open(dir.path(), options.clone()).unwrap();
    fill(&store, "a", 10);
    store.compact().unwrap();
    fill(&store, "b", 40);
    store.close().unwrap();
    let expiring = options.clone().retention(Some(Duration::ZERO));
    let store = Store::open(dir.path(), expiring).unwrap();
    let merged = store.maintain().unwrap().unwrap();
    assert!(merged.records_dropped > 0);
    store.close().unwrap();
    let store = reopen_reading_everything(dir.path(), options);
    for context in ["x", "b0", "b1"] {
        assert!(matches!(
            store.last_messages("t", context, 1),
            Err(ctxlog::Error::ContextNotFound)
        ));
    }
    // The contexts whose records the merge did not touch read as before
    // (retention is off now).
    for context in ["a0", "a1"] {
        assert_eq!(store.last_messages("t", context, 100).unwrap().len(), 5);
    }
}
