//! Fault injection on the append path: failed syncs poison the store, failed
//! or short writes store nothing half-written, a failed rotation leaves a
//! store that opens, and a crash that loses unsynced bytes loses only
//! unacknowledged appends.

use crate::common;

use std::collections::{HashMap, VecDeque};
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};

use ctxlog::fs::{Crash, Fault, FaultPlan, FaultyFs, FileOp, Fs, MemFs};
use ctxlog::{Durability, Error, Options, Store};

/// A queued failure: a short write of that many bytes, or (`None`) a plain failure.
type Queued = (Option<usize>, io::ErrorKind);

/// Fails the calls it is told to, on an in-memory disk that can lose power.
#[derive(Default)]
struct Plan {
    queued: Mutex<HashMap<FileOp, VecDeque<Queued>>>,
    disk: Mutex<MemFs>,
}

impl Plan {
    fn fail_next(&self, op: FileOp, kind: io::ErrorKind) {
        self.queue(op, (None, kind));
    }

    fn short_next(&self, bytes: usize) {
        self.short_next_on(FileOp::Write, bytes);
    }

    fn short_next_on(&self, op: FileOp, bytes: usize) {
        self.queue(op, (Some(bytes), io::ErrorKind::StorageFull));
    }

    fn queue(&self, op: FileOp, failure: Queued) {
        let mut queued = self.queued.lock().unwrap();
        queued.entry(op).or_default().push_back(failure);
    }

    /// A power loss: only what was synced survives.
    fn crash(&self) {
        let mut disk = self.disk.lock().unwrap();
        *disk = disk.crash(Crash::LoseUnsynced);
    }

    /// Options on the disk as it is now, without fault injection.
    fn plain(&self) -> Options {
        Options::default().fs(Arc::new(self.disk.lock().unwrap().clone()))
    }

    fn exists(&self, path: &Path) -> bool {
        self.disk.lock().unwrap().exists(path)
    }
}

impl FaultPlan for Plan {
    fn before(&self, op: FileOp, _path: &Path) -> Fault {
        let next = self
            .queued
            .lock()
            .unwrap()
            .get_mut(&op)
            .and_then(VecDeque::pop_front);
        match next {
            None => Fault::Pass,
            Some((None, kind)) => Fault::Fail(io::Error::from(kind)),
            Some((Some(n), kind)) => Fault::Short(n, io::Error::from(kind)),
        }
    }
}

fn faulty(durability: Durability) -> (Arc<Plan>, Options) {
    let plan = Arc::new(Plan::default());
    let disk: Arc<dyn Fs> = Arc::new(plan.disk.lock().unwrap().clone());
    let options = Options::default()
        .durability(durability)
        .fs(Arc::new(FaultyFs::new(disk, plan.clone())));
    (plan, options)
}

fn bodies(store: &Store, context: &str) -> Vec<Vec<u8>> {
    store
        .last_messages("t", context, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|m| m.raw)
        .collect()
}

#[test]
fn a_failed_sync_poisons_the_store_until_reopened() {
    for durability in [Durability::Sync, Durability::GroupCommit] {
        let dir = common::tmp();
        let (plan, options) = faulty(durability);
        let store = Store::open(dir.path(), options).unwrap();
        store.append_message("t", "c", b"acknowledged").unwrap();
        assert_eq!(store.poison_cause(), None);
        plan.fail_next(FileOp::Sync, io::ErrorKind::StorageFull);
        assert!(store.append_message("t", "c", b"not acknowledged").is_err());
        // The refusal names what the failed sync met.
        let refused = store.append_message("t", "c", b"refused").unwrap_err();
        assert!(
            matches!(
                refused,
                Error::Poisoned {
                    cause: Some(io::ErrorKind::StorageFull)
                }
            ),
            "{refused:?}"
        );
        assert!(refused.to_string().contains("disk is full"), "{refused}");
        assert_eq!(store.poison_cause(), Some(io::ErrorKind::StorageFull));
        // Reads go on, and show only what was acknowledged.
        assert_eq!(bodies(&store, "c"), vec![b"acknowledged".to_vec()]);
        drop(store);
        plan.crash();
        let store = Store::open(dir.path(), plan.plain()).unwrap();
        let after = bodies(&store, "c");
        assert_eq!(
            after.first().map(Vec::as_slice),
            Some(&b"acknowledged"[..]),
            "{durability:?}"
        );
        assert!(!after.contains(&b"refused".to_vec()));
        store.append_message("t", "c", b"after reopen").unwrap();
    }
}

#[test]
fn a_full_disk_during_an_append_stores_nothing_half_written() {
    let dir = common::tmp();
    let (plan, options) = faulty(Durability::Sync);
    let store = Store::open(dir.path(), options).unwrap();
    store.append_message("t", "c", b"one").unwrap();
    plan.fail_next(FileOp::Write, io::ErrorKind::StorageFull);
    match store.append_message("t", "c", b"two") {
        Err(Error::Io { source, .. }) => assert_eq!(source.kind(), io::ErrorKind::StorageFull),
        other => panic!("expected an Io error, got {other:?}"),
    }
    // A short write: part of the frame reached the file, then the disk was full.
    plan.short_next(7);
    assert!(store.append_message("t", "c", b"three").is_err());
    assert_eq!(bodies(&store, "c"), vec![b"one".to_vec()]);
    // Not poisoned: the partial bytes were cut off, the next append works.
    store.append_message("t", "c", b"four").unwrap();
    drop(store);
    let store = Store::open(dir.path(), plan.plain()).unwrap();
    assert_eq!(bodies(&store, "c"), vec![b"one".to_vec(), b"four".to_vec()]);
    assert_eq!(store.open_report().torn_tail, None);
}

#[test]
fn a_short_write_that_cannot_be_cut_back_poisons_and_recovers_on_reopen() {
    let dir = common::tmp();
    let (plan, options) = faulty(Durability::Sync);
    let store = Store::open(dir.path(), options).unwrap();
    store.append_message("t", "c", b"one").unwrap();
    plan.short_next(9);
    plan.fail_next(FileOp::Truncate, io::ErrorKind::Other);
    assert!(store.append_message("t", "c", b"two").is_err());
    assert!(matches!(
        store.append_message("t", "c", b"three"),
        Err(Error::Poisoned { .. })
    ));
    drop(store);
    let store = Store::open(dir.path(), plan.plain()).unwrap();
    assert_eq!(bodies(&store, "c"), vec![b"one".to_vec()]);
    // The 9 bytes of the cut-short frame were cut, with the zero-filled
    // space after them.
    let torn = store.open_report().torn_tail.clone().unwrap();
    assert_eq!(torn.records, 1);
    assert!(torn.bytes >= 9);
}

#[test]
fn a_failed_rotation_leaves_a_store_that_opens() {
    let dir = common::tmp();
    let (plan, options) = faulty(Durability::Sync);
    let store = Store::open(dir.path(), options.segment_bytes(4096)).unwrap();
    let body = vec![b'x'; 1000];
    let mut acked = 0;
    for _ in 0..3 {
        store.append_message("t", "c", &body).unwrap();
        acked += 1;
    }
    // The next append must rotate; creating the new segment fails.
    plan.fail_next(FileOp::Create, io::ErrorKind::StorageFull);
    assert!(store.append_message("t", "c", &body).is_err());
    store.append_message("t", "c", &body).unwrap();
    acked += 1;
    // A failed sync of the segment being sealed poisons the store.
    for _ in 0..2 {
        store.append_message("t", "c", &body).unwrap();
        acked += 1;
    }
    plan.fail_next(FileOp::Sync, io::ErrorKind::Other);
    let _ = store.append_message("t", "c", &body);
    drop(store);
    plan.crash();
    let store = Store::open(dir.path(), plan.plain().segment_bytes(4096)).unwrap();
    assert!(bodies(&store, "c").len() >= acked);
}

#[test]
fn a_crash_loses_only_unacknowledged_appends() {
    let dir = common::tmp();
    let (plan, options) = faulty(Durability::GroupCommit);
    let store = Arc::new(Store::open(dir.path(), options.segment_bytes(64 * 1024)).unwrap());
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                for i in 0..2000 {
                    let body = format!("t{t}-{i}").into_bytes();
                    match store.append_message("t", &format!("c{t}"), &body) {
                        Ok(_) => acked.push(body),
                        Err(_) => break,
                    }
                }
                acked
            })
        })
        .collect();
    // Somewhere in the middle, one sync fails: the store is poisoned and
    // every thread stops at its first refused append.
    let stored = |store: &Store| -> u64 {
        (0..6)
            .map(|t| {
                store
                    .context_info("t", &format!("c{t}"))
                    .map_or(0, |i| i.messages)
            })
            .sum()
    };
    while stored(&store) < 300 {
        std::thread::yield_now();
    }
    plan.fail_next(FileOp::Sync, io::ErrorKind::Other);
    let acked: Vec<Vec<Vec<u8>>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let total: usize = acked.iter().map(Vec::len).sum();
    assert!((300..12_000).contains(&total), "{total} acknowledged");
    drop(store);
    plan.crash();
    let store = Store::open(dir.path(), plan.plain()).unwrap();
    for (t, acked) in acked.iter().enumerate() {
        let got = bodies_or_empty(&store, &format!("c{t}"));
        assert!(
            got.len() >= acked.len(),
            "c{t}: {} stored < {} acknowledged",
            got.len(),
            acked.len()
        );
        assert_eq!(&got[..acked.len()], &acked[..], "c{t}");
    }
}

fn bodies_or_empty(store: &Store, context: &str) -> Vec<Vec<u8>> {
    match store.last_messages("t", context, usize::MAX) {
        Ok(m) => m.into_iter().map(|m| m.raw).collect(),
        Err(Error::ContextNotFound) => Vec::new(),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn a_failed_or_torn_checkpoint_leaves_a_store_that_opens_whole() {
    for torn in [false, true] {
        let dir = common::tmp();
        let (plan, options) = faulty(Durability::Sync);
        let store = Store::open(dir.path(), options.clone()).unwrap();
        for i in 0..30 {
            store
                .append_message("t", "c", format!("m{i}").as_bytes())
                .unwrap();
        }
        store.close().unwrap();
        let store = Store::open(dir.path(), options).unwrap();
        for i in 30..40 {
            store
                .append_message("t", "c", format!("m{i}").as_bytes())
                .unwrap();
        }
        if torn {
            plan.short_next_on(FileOp::Replace, 20);
        } else {
            plan.fail_next(FileOp::Replace, io::ErrorKind::StorageFull);
        }
        assert!(matches!(store.close(), Err(Error::Io { .. })));
        let store = Store::open(dir.path(), plan.plain()).unwrap();
        let want: Vec<Vec<u8>> = (0..40).map(|i| format!("m{i}").into_bytes()).collect();
        assert_eq!(bodies(&store, "c"), want, "torn: {torn}");
        assert!(!plan.exists(&dir.path().join("CHECKPOINT.tmp")));
    }
}

#[test]
fn a_failed_manifest_switch_leaves_the_old_log_in_force() {
    let dir = common::tmp();
    let (plan, options) = faulty(Durability::Sync);
    let store = Store::open(dir.path(), options.segment_bytes(4096)).unwrap();
    for i in 0..60 {
        store
            .append_message("t", &format!("c{}", i % 3), &[b'x'; 200])
            .unwrap();
    }
    store.delete_context("t", "c1").unwrap();
    plan.short_next_on(FileOp::Replace, 10);
    assert!(store.compact().is_err());
    // The store keeps serving reads and writes.
    assert_eq!(bodies(&store, "c0").len(), 20);
    store.append_message("t", "c0", b"after").unwrap();
    drop(store);
    let store = Store::open(dir.path(), plan.plain().segment_bytes(4096)).unwrap();
    assert_eq!(bodies(&store, "c0").len(), 21);
    assert_eq!(bodies(&store, "c2").len(), 20);
    assert!(matches!(
        store.last_messages("t", "c1", 1),
        Err(Error::ContextNotFound)
    ));
    store.compact().unwrap();
    drop(store);
    let store = Store::open(dir.path(), plan.plain().segment_bytes(4096)).unwrap();
    assert_eq!(bodies(&store, "c0").len(), 21);
}

/// A group-commit appender asleep waiting for its sync must wake and fail
/// when another appender's rotation poisons the log.
#[test]
fn a_poisoning_rotation_wakes_group_commit_waiters() {
    let dir = common::tmp();
    let (plan, options) = faulty(Durability::GroupCommit);
    let store = Arc::new(Store::open(dir.path(), options.segment_bytes(8192)).unwrap());
    plan.fail_next(FileOp::Sync, io::ErrorKind::Other);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                let mut results = Vec::new();
                for i in 0..40 {
                    results.push(
                        store
                            .append_message("t", &format!("c{t}"), &[b'x'; 900])
                            .is_ok(),
                    );
                    if !results[i] {
                        break;
                    }
                }
                results
            })
        })
        .collect();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let all: Vec<Vec<bool>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let _ = tx.send(all);
    });
    let all = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("an appender never woke after the log was poisoned");
    assert!(
        all.iter().all(|r| r.last() == Some(&false)),
        "every thread ends on a refused append"
    );
    assert!(matches!(
        store.append_message("t", "c0", b"x"),
        Err(Error::Poisoned { .. })
    ));
}

/// What broke: after a full disk cut a group commit's flush short, `ctxlog
/// verify` called the unfinished frame damage ("restore it from a backup")
/// while the next open cut it as a torn tail and lost nothing acknowledged.
#[test]
fn verify_and_open_agree_on_the_torn_tail_a_full_disk_leaves() {
    let dir = common::tmp();
    let (plan, options) = faulty(Durability::GroupCommit);
    let store = Store::open(dir.path(), options).unwrap();
    store.append_message("t", "c", b"one").unwrap();
    plan.short_next(9);
    assert!(store.append_message("t", "c", b"two").is_err());
    assert!(store.is_poisoned());
    drop(store);
    let disk = plan.disk.lock().unwrap().clone();
    let report = Store::verify_on(&disk, dir.path(), &mut |_, _| {}).unwrap();
    assert!(report.is_clean(), "{report:?}");
    let torn = report
        .torn_tail
        .clone()
        .expect("verify reports the torn tail");
    assert_eq!(torn.records, 1);
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["tornTail"]["offset"], torn.offset);
    let store = Store::open(dir.path(), plan.plain()).unwrap();
    assert_eq!(store.open_report().torn_tail, Some(torn));
    assert_eq!(bodies(&store, "c"), vec![b"one".to_vec()]);
    drop(store);
    // Cut, the tail is gone for verify too.
    let after = Store::verify_on(&disk, dir.path(), &mut |_, _| {}).unwrap();
    assert!(after.is_clean() && after.torn_tail.is_none(), "{after:?}");
}

#[test]
fn a_failed_sync_fails_a_deferred_write_and_publishes_nothing() {
    use ctxlog::a2a::{TaskState, TaskStatus};
    let dir = common::tmp();
    let (plan, options) = faulty(Durability::GroupCommit);
    let store = Arc::new(Store::open(dir.path(), options).unwrap());
    let raw = br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#;
    let r = store.receive_message("t", raw).unwrap();
    plan.fail_next(FileOp::Sync, io::ErrorKind::Other);
    let done = r.status_update(TaskStatus::new(TaskState::Completed));
    let pending = store.update_status_deferred("t", &done).unwrap().unwrap();
    assert!(matches!(
        common::block_on(pending.durable()),
        Err(Error::Poisoned { .. })
    ));
    assert!(pending.publish().is_err());
    let task = store.get_task("t", &r.task_id, Some(0), false).unwrap();
    assert_eq!(task.status.state, TaskState::Submitted, "nothing published");
    drop(Arc::try_unwrap(store).unwrap());
    plan.crash();
    let store = Store::open(dir.path(), plan.plain()).unwrap();
    let task = store.get_task("t", &r.task_id, Some(0), false).unwrap();
    assert_eq!(task.status.state, TaskState::Submitted, "nor stored");
}

#[test]
fn a_failed_sync_fails_a_deferred_receive_and_frees_its_message_id() {
    let dir = common::tmp();
    let (plan, options) = faulty(Durability::GroupCommit);
    let store = Arc::new(Store::open(dir.path(), options).unwrap());
    let raw = br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#;
    plan.fail_next(FileOp::Sync, io::ErrorKind::Other);
    let pending = store
        .receive_deferred("t", raw, ctxlog::MessageIds::Idempotent)
        .unwrap()
        .unwrap();
    let task_id = pending.receipt().task_id.clone();
    assert!(matches!(
        common::block_on(pending.durable()),
        Err(Error::Poisoned { .. })
    ));
    assert!(pending.publish().is_err());
    assert!(
        store.get_task("t", &task_id, None, false).is_err(),
        "nothing published"
    );
    // The claim was given back: a resend is refused for the poisoned
    // store, not left waiting on it.
    assert!(matches!(
        store.receive_message("t", raw),
        Err(Error::Poisoned { .. })
    ));
    drop(Arc::try_unwrap(store).unwrap());
    plan.crash();
    let store = Store::open(dir.path(), plan.plain()).unwrap();
    assert!(
        store.get_task("t", &task_id, None, false).is_err(),
        "nor stored"
    );
    assert!(!store.receive_message("t", raw).unwrap().duplicate);
}

/// Leaves a hole on the next write once armed (a failed write on a full
/// tmpfs: the pages after it written, those in it never).
#[derive(Default)]
struct HolePlan {
    armed: std::sync::atomic::AtomicBool,
}

impl FaultPlan for HolePlan {
    fn before(&self, op: FileOp, _path: &Path) -> Fault {
        use std::sync::atomic::Ordering;
        if op == FileOp::Write && self.armed.swap(false, Ordering::SeqCst) {
            Fault::Hole(100, io::ErrorKind::StorageFull.into())
        } else {
            Fault::Pass
        }
    }
}

#[test]
fn a_failed_write_that_leaves_a_hole_is_cut_without_mapping_the_hole() {
    // The faulty file system fails a map that covers a hole, as a full
    // tmpfs kills the process that reads one through a map: recovery must
    // read the newest segment's tail, not map it, until the hole is cut.
    for durability in [Durability::GroupCommit, Durability::Sync] {
        let plan = Arc::new(HolePlan::default());
        let disk: Arc<dyn Fs> = Arc::new(MemFs::new());
        let options = Options::default()
            .durability(durability)
            .fs(Arc::new(FaultyFs::new(disk, plan.clone())));
        let dir = Path::new("/store");
        let store = Store::open(dir, options.clone()).unwrap();
        store.append_message("t", "c", b"one").unwrap();
        store.append_message("t", "c", b"two").unwrap();
        plan.armed.store(true, std::sync::atomic::Ordering::SeqCst);
        let failed = store.append_message("t", "c", &[b'x'; 4000]);
        assert!(failed.is_err(), "{durability:?}");
        drop(store);
        let store = Store::open(dir, options.clone()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(bodies(&store, "c"), vec![b"one".to_vec(), b"two".to_vec()]);
        // The store takes writes again, and a later open maps it whole.
        store.append_message("t", "c", b"three").unwrap();
        drop(store);
        let store = Store::open(dir, options).unwrap();
        assert_eq!(bodies(&store, "c").len(), 3, "{durability:?}");
    }
}
