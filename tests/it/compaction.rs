//! Compaction and maintenance's merges: every live record kept byte for
//! byte, deleted contexts stay deleted, a crash at each step leaves a store
//! that opens correctly (a checkpoint written before the switch is
//! re-pointed at the merge's output), reads and writes go on meanwhile,
//! and the space comes back.

use crate::common;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ctxlog::internals::CompactStep;
use ctxlog::{Durability, Error, Maintenance, Options, Store};
use proptest::prelude::*;
use serde_json::json;

/// Maintenance only when a test calls `maintain`, after two sealed
/// segments: every merge is one the test chose.
fn options() -> Options {
    Options::default()
        .durability(Durability::Buffered)
        .segment_bytes(4096)
        .maintenance(Some(
            Maintenance::default().background(false).tail_segments(2),
        ))
}

/// What must be there: per context, its raw messages, or `None` if deleted.
type Model = BTreeMap<String, Option<Vec<Vec<u8>>>>;

fn check(store: &Store, model: &Model) -> Result<(), TestCaseError> {
    for (context, want) in model {
        match want {
            Some(msgs) => {
                let got: Vec<Vec<u8>> = store
                    .last_messages("t", context, usize::MAX)
                    .map_err(|e| TestCaseError::fail(format!("{context}: {e}")))?
                    .into_iter()
                    .map(|m| m.raw)
                    .collect();
                prop_assert_eq!(&got, msgs, "{}", context);
            }
            None => {
                let read = store.last_messages("t", context, 1);
                prop_assert!(matches!(read, Err(Error::ContextNotFound)), "{:?}", read);
                let again = store.append_message("t", context, b"again");
                prop_assert!(
                    matches!(again, Err(Error::ContextRejected { .. })),
                    "{:?}",
                    again
                );
            }
        }
    }
    Ok(())
}

/// `check`, and the tenant lists exactly the live contexts of the model.
fn check_all(store: &Store, model: &Model) -> Result<(), TestCaseError> {
    check(store, model)?;
    let listed = store.list_contexts("t", 100, None).unwrap().contexts.len();
    prop_assert_eq!(listed, model.values().filter(|v| v.is_some()).count());
    Ok(())
}

/// Removes the store's checkpoint, if it has one: the next open reads the
/// whole log.
fn drop_checkpoint(dir: &Path) {
    match fs::remove_file(dir.join("CHECKPOINT")) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => panic!("{e}"),
        _ => {}
    }
}

#[derive(Debug, Clone)]
enum Op {
    Append(u8, Vec<u8>),
    Delete(u8),
    Compact,
    Maintain,
    /// Close and open again; `true`: without the checkpoint, reading the
    /// whole log.
    Reopen(bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..6u8, proptest::collection::vec(any::<u8>(), 0..300)).prop_map(|(c, b)| Op::Append(c, b)),
        1 => (0..6u8).prop_map(Op::Delete),
        1 => Just(Op::Compact),
        2 => Just(Op::Maintain),
        1 => any::<bool>().prop_map(Op::Reopen),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn compaction_and_merges_keep_every_live_record_byte_for_byte(ops in proptest::collection::vec(op(), 1..50)) {
        let dir = common::tmp();
        let mut store = Store::open(dir.path(), options()).unwrap();
        let mut model = Model::new();
        for op in ops {
            match op {
                Op::Append(c, body) => {
                    let context = format!("c{c}");
                    let result = store.append_message("t", &context, &body);
                    match model.entry(context).or_insert_with(|| Some(Vec::new())) {
                        Some(msgs) => {
                            result.map_err(|e| TestCaseError::fail(e.to_string()))?;
                            msgs.push(body);
                        }
                        None => prop_assert!(matches!(result, Err(Error::ContextRejected { .. })), "{:?}", result),
                    }
                }
                Op::Delete(c) => {
                    let context = format!("c{c}");
                    let result = store.delete_context("t", &context);
                    match model.get(&context) {
                        Some(Some(_)) => {
                            result.map_err(|e| TestCaseError::fail(e.to_string()))?;
                            model.insert(context, None);
                        }
                        // Deleted before (compacted or not): deleting again is no error.
                        Some(None) => prop_assert!(result.is_ok(), "{:?}", result),
                        None => prop_assert!(matches!(result, Err(Error::ContextNotFound))),
                    }
                }
                Op::Compact => {
                    store.compact().map_err(|e| TestCaseError::fail(e.to_string()))?;
                }
                Op::Maintain => {
                    store.maintain().map_err(|e| TestCaseError::fail(e.to_string()))?;
                }
                Op::Reopen(whole) => {
                    store.close().unwrap();
                    if whole {
                        drop_checkpoint(dir.path());
                    }
                    store = Store::open(dir.path(), options()).unwrap();
                }
            }
            check_all(&store, &model)?;
        }
        store.close().unwrap();
        let store = Store::open(dir.path(), options()).unwrap();
        check_all(&store, &model)?;
        store.close().unwrap();
        drop_checkpoint(dir.path());
        let store = Store::open(dir.path(), options()).unwrap();
        check_all(&store, &model)?;
    }
}

/// A store with tasks, artifacts and deleted contexts; returns the model.
fn populate(dir: &Path) -> Model {
    let store = Store::open(dir, options()).unwrap();
    let mut model = Model::new();
    for c in 0..8 {
        let context = format!("c{c}");
        let mut msgs = Vec::new();
        for i in 0..30 {
            let body = format!("context {c} message {i} {}", "x".repeat(i * 7)).into_bytes();
            store.append_message("t", &context, &body).unwrap();
            msgs.push(body);
        }
        model.insert(context, Some(msgs));
    }
    for c in [1, 4, 6] {
        store.delete_context("t", &format!("c{c}")).unwrap();
        model.insert(format!("c{c}"), None);
    }
    store.close().unwrap();
    model
}

fn copy_dir(from: &Path, to: &Path) {
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

#[test]
fn a_crash_at_each_step_of_compaction_leaves_a_store_that_opens_correctly() {
    let original = common::tmp();
    let model = populate(original.path());
    for step in [
        CompactStep::Written,
        CompactStep::Renamed,
        CompactStep::Switched,
        CompactStep::Done,
    ] {
        let dir = common::tmp();
        copy_dir(original.path(), dir.path());
        let store = Store::open(dir.path(), options()).unwrap();
        store.compact_until(step).unwrap();
        // The process dies here: nothing more is written or cleaned up.
        drop(store);
        // A read-only open (it removes nothing: the inputs are still
        // there after the switch) answers the same.
        let reader = Store::open_read_only(dir.path(), options()).unwrap();
        check_all(&reader, &model).unwrap_or_else(|e| panic!("read-only at {step:?}: {e}"));
        let read = reader.open_report();
        assert_eq!(read.checkpoint_ignored, None, "{step:?}");
        assert_eq!(
            read.repointed > 0,
            step == CompactStep::Switched,
            "{step:?}"
        );
        drop(reader);
        let store = Store::open(dir.path(), options())
            .unwrap_or_else(|e| panic!("open after a crash at {step:?}: {e}"));
        // After the switch and before the checkpoint that follows it, the
        // checkpoint on disk describes the log before the switch: it is
        // loaded, and every live record it holds is found in the merge's
        // output and pointed at there.
        let report = store.open_report();
        assert!(report.from_checkpoint, "{step:?}: {report:?}");
        assert_eq!(report.checkpoint_ignored, None, "{step:?}");
        let live: usize = model.values().flatten().map(Vec::len).sum();
        let repointed = if step == CompactStep::Switched {
            live
        } else {
            0
        };
        assert_eq!(report.repointed, repointed as u64, "{step:?}");
        check_all(&store, &model).unwrap_or_else(|e| panic!("after a crash at {step:?}: {e}"));
        // A later compaction finishes the job.
        store.compact().unwrap();
        drop(store);
        let store = Store::open(dir.path(), options()).unwrap();
        check_all(&store, &model).unwrap_or_else(|e| panic!("after recompacting ({step:?}): {e}"));
        let leftovers: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }
}

/// A checkpoint two switches behind (the checkpoint after the first was
/// lost too) cannot be re-pointed: it is set aside, said why, and the whole
/// log is read.
#[test]
fn a_checkpoint_two_switches_behind_is_set_aside_and_the_whole_log_read() {
    let dir = common::tmp();
    let model = populate(dir.path());
    let old = fs::read(dir.path().join("CHECKPOINT")).unwrap();
    let store = Store::open(dir.path(), options()).unwrap();
    store.compact().unwrap();
    store.compact().unwrap();
    store.close().unwrap();
    fs::write(dir.path().join("CHECKPOINT"), old).unwrap();
    let store = Store::open(dir.path(), options()).unwrap();
    let report = store.open_report();
    assert!(!report.from_checkpoint, "{report:?}");
    let why = report.checkpoint_ignored.as_deref().unwrap_or_default();
    assert!(
        why.contains("before a compaction or merge switched it"),
        "{why}"
    );
    check_all(&store, &model).unwrap();
}

/// A checkpoint of this store, one generation behind, that the merge's
/// output does not match (here: written by a copy of the store that went
/// further) is set aside with the reason, and the whole log is read.
#[test]
fn a_checkpoint_the_merge_output_does_not_match_is_set_aside() {
    let dir = common::tmp();
    let model = populate(dir.path());
    let copy = common::tmp();
    copy_dir(dir.path(), copy.path());
    let store = Store::open(copy.path(), options()).unwrap();
    store
        .append_message("t", "c0", b"only in the copy")
        .unwrap();
    store.close().unwrap();
    let further = fs::read(copy.path().join("CHECKPOINT")).unwrap();
    let store = Store::open(dir.path(), options()).unwrap();
    store.compact_until(CompactStep::Switched).unwrap();
    drop(store);
    fs::write(dir.path().join("CHECKPOINT"), further).unwrap();
    let store = Store::open(dir.path(), options()).unwrap();
    let report = store.open_report();
    assert!(!report.from_checkpoint, "{report:?}");
    let why = report.checkpoint_ignored.as_deref().unwrap_or_default();
    assert!(why.contains("before a merge switched it"), "{why}");
    check_all(&store, &model).unwrap();
}

#[test]
fn tasks_survive_compaction_with_their_history_and_artifacts() {
    let dir = common::tmp();
    let store = Store::open(dir.path(), options()).unwrap();
    let msg = |id: &str, extra: serde_json::Value| {
        let mut m = json!({ "messageId": id, "role": "ROLE_USER", "parts": [{ "text": id }] });
        if let (serde_json::Value::Object(m), serde_json::Value::Object(e)) = (&mut m, extra) {
            m.extend(e);
        }
        serde_json::to_vec(&m).unwrap()
    };
    let r = store
        .receive_message("t", &msg("m1", json!({ "contextId": "case" })))
        .unwrap();
    let event = json!({ "artifactUpdate": { "taskId": r.task_id, "contextId": "case",
        "artifact": { "artifactId": "a", "parts": [{ "text": "chunk" }] } } });
    store
        .apply_event("t", event.to_string().as_bytes())
        .unwrap();
    store
        .receive_message("t", &msg("m2", json!({ "taskId": r.task_id })))
        .unwrap();
    store
        .receive_message("t", &msg("x1", json!({ "contextId": "doomed" })))
        .unwrap();
    store.delete_context("t", "doomed").unwrap();
    let before = store.get_task("t", &r.task_id, None, true).unwrap();
    let report = store.compact().unwrap();
    // Kept: two messages and the artifact chunk; dropped: the deleted
    // context's message and its tombstone (replaced by one compact tombstone).
    assert_eq!(
        (report.records_kept, report.records_dropped),
        (3, 2),
        "{report:?}"
    );
    assert_eq!(store.get_task("t", &r.task_id, None, true).unwrap(), before);
    assert!(
        store
            .receive_message("t", &msg("m1", json!({ "contextId": "case" })))
            .unwrap()
            .duplicate
    );
    drop(store);
    let store = Store::open(dir.path(), options()).unwrap();
    assert_eq!(store.get_task("t", &r.task_id, None, true).unwrap(), before);
    assert_eq!(store.events_since("t", &r.task_id, 0).unwrap().len(), 3);
    assert!(matches!(
        store.receive_message("t", &msg("x2", json!({ "contextId": "doomed" }))),
        Err(Error::ContextRejected { .. })
    ));
}

#[test]
fn reads_and_writes_go_on_during_compaction() {
    let dir = common::tmp();
    let model = populate(dir.path());
    let store = Arc::new(Store::open(dir.path(), options()).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (store, stop, model) = (store.clone(), stop.clone(), model.clone());
        std::thread::spawn(move || {
            let mut reads = 0;
            while !stop.load(Ordering::Acquire) || reads < 10 {
                check(&store, &model).unwrap();
                reads += 1;
            }
        })
    };
    let writer = {
        let store = store.clone();
        std::thread::spawn(move || {
            for i in 0..200 {
                store
                    .append_message("t", "busy", format!("w{i}").as_bytes())
                    .unwrap();
            }
        })
    };
    for _ in 0..3 {
        store.compact().unwrap();
    }
    writer.join().unwrap();
    stop.store(true, Ordering::Release);
    reader.join().unwrap();
    assert_eq!(
        store.last_messages("t", "busy", usize::MAX).unwrap().len(),
        200
    );
}

#[test]
fn space_after_compaction_is_close_to_the_live_payload() {
    let dir = common::tmp();
    let store = Store::open(
        dir.path(),
        Options::default()
            .durability(Durability::Buffered)
            .segment_bytes(1 << 20),
    )
    .unwrap();
    let mut live = 0u64;
    for c in 0..40 {
        for i in 0..25 {
            let body = vec![(c * 31 + i) as u8; 1024];
            store.append_message("t", &format!("c{c}"), &body).unwrap();
            if c % 2 == 0 {
                live += body.len() as u64;
            }
        }
    }
    for c in (1..40).step_by(2) {
        store.delete_context("t", &format!("c{c}")).unwrap();
    }
    store.compact().unwrap();
    let on_disk: u64 = common::segment_files(dir.path())
        .iter()
        .map(|p| fs::metadata(p).unwrap().len())
        .sum();
    let ratio = on_disk as f64 / live as f64;
    assert!(
        ratio <= 1.15,
        "{on_disk} bytes on disk for {live} live bytes: {ratio:.3}x"
    );
}

/// A step of the workload before a merge that a crash interrupts (its
/// writes come after the merge's switch too).
#[derive(Debug, Clone)]
enum Before {
    Append(u8, usize),
    /// A message received in a context: a new task.
    Receive(u8),
    Delete(u8),
    Maintain,
    Compact,
    Reopen,
}

fn before() -> impl Strategy<Value = Before> {
    prop_oneof![
        8 => (0..6u8, 0..400usize).prop_map(|(c, n)| Before::Append(c, n)),
        3 => (0..6u8).prop_map(Before::Receive),
        1 => (0..6u8).prop_map(Before::Delete),
        1 => Just(Before::Maintain),
        1 => Just(Before::Compact),
        1 => Just(Before::Reopen),
    ]
}

/// What a store answers of the contexts `c0`..`c5` of tenant `t`: their
/// messages (seq and bytes), their tasks with history and artifacts, and
/// the tenant's listing.
fn answers(store: &Store) -> Vec<String> {
    let mut out: Vec<String> = (0..6)
        .flat_map(|c| {
            let context = format!("c{c}");
            let messages = match store.last_messages("t", &context, usize::MAX) {
                Ok(m) => format!(
                    "{:?}",
                    m.iter().map(|m| (m.seq, &m.raw)).collect::<Vec<_>>()
                ),
                Err(e) => e.to_string(),
            };
            let query = ctxlog::ListTasksQuery {
                context_id: Some(context),
                history_length: Some(100),
                include_artifacts: true,
                ..Default::default()
            };
            let tasks = match store.list_tasks("t", &query) {
                Ok(page) => serde_json::to_string(&page.tasks).unwrap(),
                Err(e) => e.to_string(),
            };
            [messages, tasks]
        })
        .collect();
    let listed = store.list_contexts("t", 100, None).unwrap().contexts;
    out.push(format!("{listed:?}"));
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// A crash between a merge's switch and its checkpoint leaves a
    /// checkpoint of the log before the switch: the open loads it, finds
    /// the records it holds in the merge's output, and answers exactly as
    /// an open that reads the whole log does, then and after a reopen.
    #[test]
    fn after_a_crash_between_a_switch_and_its_checkpoint_the_checkpoint_is_repointed(
        steps in proptest::collection::vec(before(), 1..60),
        compact in any::<bool>(),
        expire in any::<bool>(),
        after in proptest::collection::vec(before(), 0..6),
    ) {
        let options = || options().checkpoint_interval(Some(2048));
        let dir = common::tmp();
        // One step; `i` makes received messageIds unique.
        let run = |store: Store, i: usize, step: Before| -> Store {
            let context = |c: u8| format!("c{c}");
            match step {
                Before::Append(c, n) => {
                    // A gone context refuses it.
                    let _ = store.append_message("t", &context(c), &vec![b'a' + c; n]);
                }
                Before::Receive(c) => {
                    let m = json!({
                        "messageId": format!("m{i}"), "contextId": context(c),
                        "role": "ROLE_USER", "parts": [{ "text": format!("{i}") }],
                    });
                    let _ = store.receive_message("t", &serde_json::to_vec(&m).unwrap());
                }
                Before::Delete(c) => {
                    let _ = store.delete_context("t", &context(c));
                }
                Before::Maintain => {
                    store.maintain().unwrap();
                }
                Before::Compact => {
                    store.compact().unwrap();
                }
                Before::Reopen => {
                    store.close().unwrap();
                    return Store::open(dir.path(), options()).unwrap();
                }
            }
            store
        };
        let mut store = Store::open(dir.path(), options()).unwrap();
        for (i, step) in steps.into_iter().enumerate() {
            store = run(store, i, step);
        }
        if expire {
            // Every context has outlived this retention: the merge
            // tombstones the ones it finds.
            store.close().unwrap();
            store = Store::open(dir.path(), options().retention(Some(std::time::Duration::ZERO))).unwrap();
        }
        let switched = if compact {
            store.compact_until(CompactStep::Switched).map(|r| r.records_kept).unwrap()
        } else {
            store.maintain_until(CompactStep::Switched).unwrap().map_or(0, |r| r.records_kept)
        };
        // Writes go on after the switch (not maintenance, which the
        // stopped merge would still hold), then the process dies.
        for (i, step) in after.into_iter().enumerate() {
            if matches!(step, Before::Append(..) | Before::Receive(_) | Before::Delete(_)) {
                store = run(store, 1000 + i, step);
            }
        }
        drop(store);
        let whole = common::tmp();
        copy_dir(dir.path(), whole.path());
        drop_checkpoint(whole.path());
        let read_all = Store::open(whole.path(), options()).unwrap();
        let want = answers(&read_all);
        let store = Store::open(dir.path(), options()).unwrap();
        let report = store.open_report();
        prop_assert_eq!(&report.checkpoint_ignored, &None);
        prop_assert!(report.repointed <= switched, "{:?}", report);
        prop_assert_eq!(&answers(&store), &want);
        store.close().unwrap();
        let store = Store::open(dir.path(), options()).unwrap();
        prop_assert!(store.open_report().from_checkpoint);
        prop_assert_eq!(&answers(&store), &want);
    }
}
