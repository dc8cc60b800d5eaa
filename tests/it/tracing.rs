//! What the library tells a `tracing` subscriber: the decisions an open
//! makes (a torn tail cut, a checkpoint not used), compaction, poisoning;
//! and, without a subscriber, nothing.

use crate::common;

use std::sync::{Arc, Mutex};

use ctxlog::{Durability, Options, Store};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Keeps every event's level and message.
#[derive(Clone, Default)]
struct Collect(Arc<Mutex<Vec<(Level, String)>>>);

struct Message<'a>(&'a mut String);

impl Visit for Message<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            *self.0 = format!("{value:?}");
        }
    }
}

impl Subscriber for Collect {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut message = String::new();
        event.record(&mut Message(&mut message));
        self.0
            .lock()
            .unwrap()
            .push((*event.metadata().level(), message));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

impl Collect {
    fn has(&self, level: Level, text: &str) -> bool {
        self.0
            .lock()
            .unwrap()
            .iter()
            .any(|(l, m)| *l == level && m.contains(text))
    }
}

#[test]
fn an_open_tells_what_it_cut_and_what_it_did_not_use() {
    let dir = common::tmp();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    for i in 0..5 {
        store
            .append_message("t", "c", format!("message {i}").as_bytes())
            .unwrap();
    }
    // A crash: no close, no checkpoint; then a half-written frame at the end.
    let copy = common::crash_copy(dir.path());
    drop(store);
    common::tear_newest_segment(copy.path(), &[7, 0, 0, 0, 1, 2]);
    std::fs::write(copy.path().join("CHECKPOINT"), b"not a checkpoint").unwrap();

    let seen = Collect::default();
    let store = tracing::subscriber::with_default(seen.clone(), || {
        Store::open(copy.path(), Options::default()).unwrap()
    });
    assert!(store.open_report().torn_tail.is_some());
    assert!(seen.has(Level::INFO, "cut a torn tail"));
    assert!(seen.has(Level::WARN, "checkpoint not used"));
    assert!(seen.has(Level::DEBUG, "store opened"));
}

#[test]
fn compaction_is_told_to_a_subscriber_and_only_to_it() {
    let dir = common::tmp();
    let store = Store::open(
        dir.path(),
        Options::default().durability(Durability::Buffered),
    )
    .unwrap();
    store.append_message("t", "gone", b"x").unwrap();
    store.append_message("t", "kept", b"y").unwrap();
    store.delete_context("t", "gone").unwrap();
    let seen = Collect::default();
    tracing::subscriber::with_default(seen.clone(), || store.compact().unwrap());
    assert!(seen.has(Level::INFO, "merge done"));
    assert!(seen.has(Level::DEBUG, "manifest switched"));
    // Outside the subscriber's scope nothing reaches it, and nothing fails.
    let before = seen.0.lock().unwrap().len();
    store.compact().unwrap();
    assert_eq!(seen.0.lock().unwrap().len(), before);
}

/// Fails every `fdatasync` once armed.
struct FailSyncs(std::sync::atomic::AtomicBool);

impl ctxlog::fs::FaultPlan for FailSyncs {
    fn before(&self, op: ctxlog::fs::FileOp, _: &std::path::Path) -> ctxlog::fs::Fault {
        if op == ctxlog::fs::FileOp::Sync && self.0.load(std::sync::atomic::Ordering::SeqCst) {
            ctxlog::fs::Fault::Fail(std::io::ErrorKind::Other.into())
        } else {
            ctxlog::fs::Fault::Pass
        }
    }
}

#[test]
fn a_failed_sync_is_told_once_as_an_error() {
    let plan = Arc::new(FailSyncs(std::sync::atomic::AtomicBool::new(false)));
    let fs = ctxlog::fs::FaultyFs::new(Arc::new(ctxlog::fs::MemFs::new()), plan.clone());
    let store = Store::open("/s", Options::default().fs(Arc::new(fs))).unwrap();
    store.append_message("t", "c", b"before").unwrap();
    plan.0.store(true, std::sync::atomic::Ordering::SeqCst);
    let seen = Collect::default();
    tracing::subscriber::with_default(seen.clone(), || {
        assert!(store.append_message("t", "c", b"lost").is_err());
        assert!(store.append_message("t", "c", b"refused").is_err());
    });
    assert!(store.is_poisoned());
    let errors = seen
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|(l, m)| *l == Level::ERROR && m.contains("refuses writes"))
        .count();
    assert_eq!(errors, 1);
}
