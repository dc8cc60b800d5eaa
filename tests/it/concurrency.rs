//! The per-context lock under load: every acknowledged append present exactly
//! once, in the order the appends returned, readers always seeing a prefix,
//! nothing deadlocking; and turn leases as a policy.

use crate::common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use ctxlog::{Durability, Error, Options, Store, TurnPolicy};

#[test]
fn the_store_is_send_and_sync() {
    fn shared<T: Send + Sync>() {}
    shared::<Store>();
    shared::<Arc<Store>>();
}

/// Runs `f` on another thread and fails if it has not finished in time: a
/// deadlock shows as a failure, not a hung test run.
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .expect("the run did not finish: deadlock or livelock")
}

/// `writers` threads append `per_writer` messages each over `contexts`
/// contexts while `readers` threads read whole histories; returns what each
/// writer saw acknowledged, in order: (context, seq, body).
fn hammer(
    store: Arc<Store>,
    writers: usize,
    per_writer: usize,
    contexts: usize,
    readers: usize,
) -> Vec<Vec<(String, u64, Vec<u8>)>> {
    let done = Arc::new(AtomicBool::new(false));
    let reader_threads: Vec<_> = (0..readers)
        .map(|r| {
            let (store, done) = (store.clone(), done.clone());
            std::thread::spawn(move || {
                let mut reads = 0u64;
                while !done.load(Ordering::Acquire) || reads == 0 {
                    let context = format!("c{}", (reads as usize + r) % contexts);
                    match store.last_messages("t", &context, usize::MAX) {
                        Ok(msgs) => {
                            // A prefix of the context's order: seqs 0..n, no gap.
                            for (i, m) in msgs.iter().enumerate() {
                                assert_eq!(m.seq, i as u64, "a reader saw a gap in {context}");
                            }
                        }
                        Err(Error::ContextNotFound) => {}
                        Err(e) => panic!("read failed: {e}"),
                    }
                    reads += 1;
                }
            })
        })
        .collect();
    let writer_threads: Vec<_> = (0..writers)
        .map(|w| {
            let store = store.clone();
            std::thread::spawn(move || {
                (0..per_writer)
                    .map(|i| {
                        let context = format!("c{}", (w * 7 + i) % contexts);
                        let body = format!("w{w}-i{i}").into_bytes();
                        let a = store.append_message("t", &context, &body).unwrap();
                        (context, a.seq, body)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let acked: Vec<_> = writer_threads
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    done.store(true, Ordering::Release);
    for r in reader_threads {
        r.join().unwrap();
    }
    acked
}

fn verify(store: &Store, acked: &[Vec<(String, u64, Vec<u8>)>]) {
    let mut by_context: HashMap<&str, Vec<(u64, &[u8])>> = HashMap::new();
    for writer in acked {
        // Within one writer, later appends to a context got later seqs.
        let mut last: HashMap<&str, u64> = HashMap::new();
        for (context, seq, body) in writer {
            if let Some(prev) = last.insert(context, *seq) {
                assert!(*seq > prev, "{context}: seq {seq} after {prev}");
            }
            by_context.entry(context).or_default().push((*seq, body));
        }
    }
    for (context, mut want) in by_context {
        want.sort_unstable();
        let got = store.last_messages("t", context, usize::MAX).unwrap();
        assert_eq!(
            got.len(),
            want.len(),
            "{context}: every acknowledged append exactly once"
        );
        for (m, (seq, body)) in got.iter().zip(want) {
            assert_eq!((m.seq, m.raw.as_slice()), (seq, body), "{context}");
        }
    }
}

fn stress(contexts: usize, durability: Durability) {
    stress_with(contexts, Options::default().durability(durability));
}

fn stress_with(contexts: usize, options: Options) {
    let dir = common::tmp();
    let options = options
        // Small segments: a few dozen rotations, each racing appends whose
        // frames are not yet in the file (group commit writes them late).
        .segment_bytes(16 * 1024);
    let path = dir.path().to_path_buf();
    let opts = options.clone();
    let (store, acked) = within(Duration::from_secs(120), move || {
        let store = Arc::new(Store::open(&path, opts).unwrap());
        let acked = hammer(store.clone(), 16, 150, contexts, 4);
        (store, acked)
    });
    verify(&store, &acked);
    drop(store);
    let store = Store::open(dir.path(), options).unwrap();
    assert_eq!(store.open_report().records, 16 * 150);
    verify(&store, &acked);
}

#[test]
fn many_threads_on_few_contexts() {
    stress(3, Durability::GroupCommit);
}

#[test]
fn many_threads_on_many_contexts() {
    stress(400, Durability::GroupCommit);
}

#[test]
fn many_threads_whose_waits_sleep_at_once() {
    // As the server opens its store: group-commit waiters never yield.
    stress_with(
        400,
        Options::default()
            .durability(Durability::GroupCommit)
            .commit_yields(0),
    );
}

#[test]
fn many_threads_with_a_sync_each() {
    stress(16, Durability::Sync);
}

#[test]
fn a_single_active_turn_rejects_a_second_at_once() {
    let dir = common::tmp();
    let options = Options::default().turns(TurnPolicy::SingleActive { lease: None });
    let store = Store::open(dir.path(), options).unwrap();
    let first = store.begin_turn("t", "c", "task-1").unwrap();
    match store.begin_turn("t", "c", "task-2") {
        Err(Error::ContextBusy { task_id, since_ms }) => {
            assert_eq!(task_id, "task-1");
            assert!(since_ms > 0);
        }
        Err(e) => panic!("expected ContextBusy, got {e}"),
        Ok(_) => panic!("a second turn was granted"),
    }
    // Another context, or the same id under another tenant, is not blocked.
    let _other = store.begin_turn("t", "other", "task-3").unwrap();
    let _tenant = store.begin_turn("u", "c", "task-4").unwrap();
    drop(first);
    let second = store.begin_turn("t", "c", "task-2").unwrap();
    // A panicking handler releases its turn as the panic unwinds.
    let store = Arc::new(store);
    drop(second);
    let s = store.clone();
    let panicked = std::thread::spawn(move || {
        let _turn = s.begin_turn("t", "c", "task-5").unwrap();
        panic!("the handler failed");
    })
    .join();
    assert!(panicked.is_err());
    let _turn = store.begin_turn("t", "c", "task-6").unwrap();
}

#[test]
fn an_expired_lease_frees_the_context_and_its_late_guard_frees_nothing() {
    let dir = common::tmp();
    // Leases that expire at once: every begin_turn takes over.
    let zero = Options::default().turns(TurnPolicy::SingleActive {
        lease: Some(Duration::ZERO),
    });
    let store = Store::open(dir.path(), zero).unwrap();
    let stuck = store.begin_turn("t", "c", "stuck").unwrap();
    let next = store.begin_turn("t", "c", "next").unwrap();
    assert_eq!(
        store.turn_holder("t", "c").unwrap().map(|(t, _)| t),
        Some("next".to_string())
    );
    // The stuck handler's guard finally drops: `next` keeps its lease.
    drop(stuck);
    assert_eq!(
        store.turn_holder("t", "c").unwrap().map(|(t, _)| t),
        Some("next".to_string())
    );
    drop(next);
    assert_eq!(store.turn_holder("t", "c").unwrap(), None);
    drop(store);

    // Leases that do not expire within the test hold until dropped.
    let hour = Options::default().turns(TurnPolicy::SingleActive {
        lease: Some(Duration::from_secs(3600)),
    });
    let store = Store::open(dir.path(), hour).unwrap();
    let held = store.begin_turn("t", "c", "a").unwrap();
    assert!(matches!(
        store.begin_turn("t", "c", "b"),
        Err(Error::ContextBusy { .. })
    ));
    drop(held);
    let _turn = store.begin_turn("t", "c", "b").unwrap();
}

#[test]
fn parallel_turns_are_the_default() {
    let dir = common::tmp();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let _a = store.begin_turn("t", "c", "a").unwrap();
    let _b = store.begin_turn("t", "c", "b").unwrap();
}

#[test]
fn many_threads_whose_syncs_linger() {
    // Every acknowledged append present once, in order, with syncs that
    // wait for more appends before they start.
    stress_with(
        400,
        Options::default()
            .durability(Durability::GroupCommit)
            .commit_linger(Duration::from_micros(200)),
    );
}

/// Opens a group-commit store with `linger`, runs `threads` appenders of
/// `each` durable appends on contexts of their own, and returns the
/// store's (syncs, lingered syncs) after checking every append is there.
fn appenders_with_linger(threads: usize, each: usize, linger: Duration) -> (u64, u64) {
    let dir = common::tmp();
    let options = Options::default()
        .durability(Durability::GroupCommit)
        .commit_yields(0)
        .commit_linger(linger)
        .maintenance(None);
    let store = Arc::new(Store::open(dir.path(), options).unwrap());
    let runner = store.clone();
    within(Duration::from_secs(60), move || {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let store = runner.clone();
                std::thread::spawn(move || {
                    for i in 0..each {
                        let body = format!("{t}/{i}");
                        store
                            .append_message("t", &format!("c{t}"), body.as_bytes())
                            .unwrap();
                    }
                })
            })
            .collect();
        handles.into_iter().for_each(|h| h.join().unwrap());
    });
    for t in 0..threads {
        let history = store
            .last_messages("t", &format!("c{t}"), usize::MAX)
            .unwrap();
        let bodies: Vec<Vec<u8>> = history.into_iter().map(|m| m.raw).collect();
        let wanted: Vec<Vec<u8>> = (0..each).map(|i| format!("{t}/{i}").into_bytes()).collect();
        assert_eq!(bodies, wanted, "context c{t}");
    }
    let stats = store.stats();
    (stats.group_syncs, stats.lingered_syncs)
}

#[test]
fn a_lone_appender_never_waits_for_a_linger() {
    // One appender asks for one sync at a time: no sync it waits for may
    // linger, however long the linger.
    let (syncs, lingered) = appenders_with_linger(1, 40, ctxlog::MAX_COMMIT_LINGER);
    assert!(syncs >= 1, "the syncer ran no sync");
    assert_eq!(lingered, 0, "a lone appender's sync lingered");
}

#[test]
fn concurrent_appenders_share_lingering_syncs() {
    // Eight appenders of 25 each: with a linger, a sync that follows
    // another waits for the appenders its predecessor woke, so the syncs
    // that linger carry several appends each.
    let (_, none) = appenders_with_linger(8, 25, Duration::ZERO);
    assert_eq!(none, 0, "a sync lingered with no linger set");
    let (syncs, lingered) = appenders_with_linger(8, 25, ctxlog::MAX_COMMIT_LINGER);
    assert!(lingered > 0, "no sync lingered ({syncs} syncs)");
    assert!(syncs <= 100, "{syncs} syncs for 200 appends");
}

#[test]
fn a_linger_is_clamped_and_can_change_on_an_open_store() {
    let dir = common::tmp();
    let options = Options::default()
        .durability(Durability::GroupCommit)
        .commit_linger(Duration::from_secs(5));
    let store = Store::open(dir.path(), options).unwrap();
    assert_eq!(store.commit_linger(), ctxlog::MAX_COMMIT_LINGER);
    store.set_commit_linger(Duration::from_micros(150));
    assert_eq!(store.commit_linger(), Duration::from_micros(150));
    store.set_commit_linger(Duration::ZERO);
    assert_eq!(store.commit_linger(), Duration::ZERO);
}

#[test]
fn with_one_turn_per_task_only_one_of_answers_sent_at_once_joins() {
    use ctxlog::a2a::{TaskState, TaskStatus};
    let dir = common::tmp();
    let store =
        Arc::new(Store::open(dir.path(), Options::default().one_turn_per_task(true)).unwrap());
    for round in 0..20 {
        let opened = store
            .receive_message(
                "acme",
                format!(
                    r#"{{"messageId":"q{round}","role":"ROLE_USER","parts":[{{"text":"q"}}]}}"#
                )
                .as_bytes(),
            )
            .unwrap();
        // A turn is due: a message to the task now is refused.
        let early = format!(
            r#"{{"messageId":"early{round}","taskId":"{}","role":"ROLE_USER","parts":[{{"text":"e"}}]}}"#,
            opened.task_id
        );
        let err = store.receive_message("acme", early.as_bytes()).unwrap_err();
        assert!(matches!(err, Error::UnsupportedOperation { .. }), "{err}");
        store
            .update_status(
                "acme",
                &opened.status_update(TaskStatus::new(TaskState::InputRequired)),
            )
            .unwrap();
        let answers: Vec<_> = (0..4)
            .map(|i| {
                let (store, task) = (store.clone(), opened.task_id.clone());
                std::thread::spawn(move || {
                    let answer = format!(
                        r#"{{"messageId":"a{round}-{i}","taskId":"{task}","role":"ROLE_USER","parts":[{{"text":"a"}}]}}"#
                    );
                    store.receive_message("acme", answer.as_bytes())
                })
            })
            .collect();
        let joined = answers
            .into_iter()
            .map(|a| a.join().unwrap())
            .filter(|r| match r {
                Ok(_) => true,
                Err(Error::UnsupportedOperation { reason }) => {
                    assert!(reason.contains("TASK_STATE_WORKING"), "{reason}");
                    false
                }
                Err(e) => panic!("{e}"),
            })
            .count();
        assert_eq!(joined, 1, "round {round}");
        let task = store
            .get_task("acme", &opened.task_id, None, false)
            .unwrap();
        assert_eq!(task.history.len(), 2, "the refused answers are not stored");
    }
    // Without the option, a message joins any task that is not terminal.
    let dir = common::tmp();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let opened = store
        .receive_message(
            "acme",
            br#"{"messageId":"q","role":"ROLE_USER","parts":[{"text":"q"}]}"#,
        )
        .unwrap();
    let more = format!(
        r#"{{"messageId":"more","taskId":"{}","role":"ROLE_USER","parts":[{{"text":"m"}}]}}"#,
        opened.task_id
    );
    store.receive_message("acme", more.as_bytes()).unwrap();
}
