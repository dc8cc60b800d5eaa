//! The A2A task model: receiving under the A2A rules, the lifecycle,
//! idempotency, artifacts, reads, listings and tenants.

use crate::common;

use std::sync::Arc;

use ctxlog::a2a::{
    Artifact, Part, Task, TaskArtifactUpdateEvent, TaskState, TaskStatus, TaskStatusUpdateEvent,
};
use ctxlog::{Durability, Error, ListTasksQuery, Options, Receipt, Store};
use serde_json::{json, Value};

fn store() -> (tempfile::TempDir, Store) {
    common::buffered_store()
}

fn reopen(dir: &tempfile::TempDir, store: Store) -> Store {
    store.close().unwrap();
    Store::open(
        dir.path(),
        Options::default().durability(Durability::Buffered),
    )
    .unwrap()
}

fn user(id: &str, text: &str) -> Value {
    json!({ "messageId": id, "role": "ROLE_USER", "parts": [{ "text": text }] })
}

fn send(store: &Store, tenant: &str, msg: &Value) -> Result<Receipt, Error> {
    store.receive_message(tenant, &serde_json::to_vec(msg).unwrap())
}

fn status(r: &Receipt, state: TaskState, text: Option<&str>) -> TaskStatusUpdateEvent {
    TaskStatusUpdateEvent {
        task_id: r.task_id.clone(),
        context_id: r.context_id.clone(),
        status: TaskStatus {
            state,
            message: text.map(|t| {
                serde_json::from_value(json!({
                    "messageId": format!("agent-{t}"), "role": "ROLE_AGENT", "parts": [{ "text": t }]
                }))
                .unwrap()
            }),
            timestamp: None,
            extra: Default::default(),
        }
        .into(),
        metadata: None,
    }
}

fn chunk(
    r: &Receipt,
    id: &str,
    text: &str,
    append: bool,
    last_chunk: bool,
) -> TaskArtifactUpdateEvent {
    TaskArtifactUpdateEvent {
        task_id: r.task_id.clone(),
        context_id: r.context_id.clone(),
        artifact: Artifact {
            artifact_id: id.into(),
            name: Some("refund-receipt".into()),
            description: None,
            parts: vec![Part::text(text)],
            metadata: None,
            extensions: Vec::new(),
            extra: Default::default(),
        }
        .into(),
        append,
        last_chunk,
        metadata: None,
    }
}

fn texts(task: &Task) -> Vec<String> {
    task.history
        .iter()
        .map(|m| m.parts[0].text.clone().unwrap_or_default())
        .collect()
}

/// The seed scenario of the brief, end to end, across a restart.
#[test]
fn the_refund_case() {
    let (dir, store) = store();
    let first = send(
        &store,
        "acme",
        &user("m1", "Refund the duplicate charge on order 123."),
    )
    .unwrap();
    assert!(first.new_context && first.new_task && !first.duplicate);
    assert_eq!(
        first.context_id.len(),
        32,
        "store-made ids carry 128 random bits"
    );
    assert_eq!(first.task_id.len(), 32);
    store
        .update_status(
            "acme",
            &status(
                &first,
                TaskState::InputRequired,
                Some("Which card was charged?"),
            ),
        )
        .unwrap();
    let mut reply = user("m2", "The Visa ending 4242.");
    reply["taskId"] = json!(first.task_id);
    reply["contextId"] = json!(first.context_id);
    let joined = send(&store, "acme", &reply).unwrap();
    assert_eq!(
        (joined.task_id.as_str(), joined.new_task),
        (first.task_id.as_str(), false)
    );
    store
        .update_status("acme", &status(&first, TaskState::Working, None))
        .unwrap();
    store
        .add_artifact("acme", &chunk(&first, "receipt", "Refunded ", false, false))
        .unwrap();
    store
        .add_artifact("acme", &chunk(&first, "receipt", "$42.00 ", true, false))
        .unwrap();
    store
        .add_artifact(
            "acme",
            &chunk(&first, "receipt", "to Visa 4242.", true, true),
        )
        .unwrap();
    store
        .update_status("acme", &status(&first, TaskState::Completed, Some("Done.")))
        .unwrap();

    let store = reopen(&dir, store);
    // The finished task is a fixed record: a message to it is refused.
    let mut late = user("m3", "Also the shipping fee.");
    late["taskId"] = json!(first.task_id);
    assert!(matches!(
        send(&store, "acme", &late),
        Err(Error::UnsupportedOperation { .. })
    ));
    // The refinement is a new task in the same context, pointing back.
    let mut follow = user(
        "m4",
        "Also refund the $6.90 shipping fee on the same order.",
    );
    follow["contextId"] = json!(first.context_id);
    follow["referenceTaskIds"] = json!([first.task_id]);
    let second = send(&store, "acme", &follow).unwrap();
    assert!(second.new_task && !second.new_context);
    assert_eq!(second.context_id, first.context_id);

    let task = store.get_task("acme", &first.task_id, None, true).unwrap();
    assert_eq!(task.status.state, TaskState::Completed);
    assert_eq!(
        texts(&task),
        [
            "Refund the duplicate charge on order 123.",
            "Which card was charged?",
            "The Visa ending 4242.",
            "Done."
        ]
    );
    let artifacts = task.artifacts.unwrap();
    assert_eq!(artifacts.len(), 1);
    let parts: Vec<_> = artifacts[0]
        .parts
        .iter()
        .map(|p| p.text.clone().unwrap())
        .collect();
    assert_eq!(parts, ["Refunded ", "$42.00 ", "to Visa 4242."]);

    let query = ListTasksQuery {
        context_id: Some(first.context_id.clone()),
        ..Default::default()
    };
    let listed = store.list_tasks("acme", &query).unwrap();
    let mut ids: Vec<_> = listed.tasks.iter().map(|t| t.id.clone()).collect();
    // Newest status first, ties (same millisecond) by id.
    let order: Vec<(std::cmp::Reverse<String>, String)> = listed
        .tasks
        .iter()
        .map(|t| {
            (
                std::cmp::Reverse(t.status.timestamp.clone().unwrap()),
                t.id.clone(),
            )
        })
        .collect();
    assert!(order.windows(2).all(|w| w[0] <= w[1]), "{order:?}");
    ids.sort();
    let mut want = vec![first.task_id.clone(), second.task_id.clone()];
    want.sort();
    assert_eq!(ids, want);
    assert_eq!(listed.total_size, 2);
    assert!(
        listed.tasks.iter().all(|t| t.artifacts.is_none()),
        "artifacts omitted unless asked"
    );
    let follow_up = store
        .get_task("acme", &second.task_id, None, false)
        .unwrap();
    assert_eq!(
        follow_up.history[0].reference_task_ids,
        vec![first.task_id.clone()]
    );

    // Another tenant sees neither task, and its answers match a missing task's.
    let other = store.list_tasks("globex", &query).unwrap();
    assert!(other.tasks.is_empty() && other.total_size == 0);
    assert!(store
        .list_tasks("globex", &ListTasksQuery::default())
        .unwrap()
        .tasks
        .is_empty());
    assert!(matches!(
        store.get_task("globex", &first.task_id, None, true),
        Err(Error::TaskNotFound)
    ));
    let mut probe = user("m5", "hi");
    probe["taskId"] = json!(first.task_id);
    assert!(matches!(
        send(&store, "globex", &probe),
        Err(Error::TaskNotFound)
    ));
}

#[test]
fn receive_rules_and_errors_store_nothing() {
    let (_dir, store) = store();
    let first = send(&store, "t", &user("a", "hello")).unwrap();
    let records = || store.context_info("t", &first.context_id).unwrap().messages;

    let mut unknown = user("b", "x");
    unknown["taskId"] = json!("no-such-task");
    assert!(matches!(
        send(&store, "t", &unknown),
        Err(Error::TaskNotFound)
    ));

    let mut mismatched = user("c", "x");
    mismatched["taskId"] = json!(first.task_id);
    mismatched["contextId"] = json!("another-context");
    assert!(matches!(
        send(&store, "t", &mismatched),
        Err(Error::InvalidParams {
            field: "contextId",
            ..
        })
    ));

    store
        .update_status("t", &status(&first, TaskState::Rejected, None))
        .unwrap();
    let mut to_terminal = user("d", "x");
    to_terminal["taskId"] = json!(first.task_id);
    assert!(matches!(
        send(&store, "t", &to_terminal),
        Err(Error::UnsupportedOperation { .. })
    ));
    assert_eq!(records(), 1);

    for bad in [json!(""), json!("x".repeat(5000))] {
        let mut m = user("e", "x");
        m["contextId"] = bad;
        assert!(matches!(
            send(&store, "t", &m),
            Err(Error::ContextRejected { .. })
        ));
    }
    let not_utf8 = b"{\"messageId\":\"f\",\"role\":\"ROLE_USER\",\"contextId\":\"c\xff\",\"parts\":[{\"text\":\"x\"}]}";
    assert!(matches!(
        store.receive_message("t", not_utf8),
        Err(Error::ContextRejected { .. })
    ));
    for bad in [
        json!({ "role": "ROLE_USER", "parts": [{ "text": "no id" }] }),
        json!({ "messageId": "g", "role": "ROLE_AGENT", "parts": [{ "text": "x" }] }),
        json!({ "messageId": "g", "role": "ROLE_USER", "parts": [] }),
        json!({ "messageId": "g", "role": "ROLE_USER", "parts": [{ "text": "x", "url": "u" }] }),
    ] {
        assert!(
            matches!(send(&store, "t", &bad), Err(Error::InvalidParams { .. })),
            "{bad}"
        );
    }

    // A client-proposed contextId nobody has used is accepted as given.
    let mut proposed = user("h", "x");
    proposed["contextId"] = json!("client/ctx é");
    let r = send(&store, "t", &proposed).unwrap();
    assert_eq!(r.context_id, "client/ctx é");
    assert!(r.new_context);
    // The same id under another tenant is simply another context.
    let r2 = send(&store, "u", &json!({
        "messageId": "h", "role": "ROLE_USER", "contextId": "client/ctx é", "parts": [{ "text": "y" }]
    }))
    .unwrap();
    assert!(r2.new_context && !r2.duplicate);
}

#[test]
fn a_resent_message_returns_the_first_receipt_even_after_a_restart() {
    let (dir, store) = store();
    let msg = json!({ "messageId": "once", "role": "ROLE_USER", "parts": [{ "text": "pay" }], "metadata": { "a": 1, "b": 2 } });
    let first = send(&store, "t", &msg).unwrap();
    // Same content, other key order and spacing: a duplicate.
    let respaced = br#"{ "metadata": {"b":2,"a":1}, "parts":[{"text":"pay"}], "role":"ROLE_USER", "messageId":"once" }"#;
    let again = store.receive_message("t", respaced).unwrap();
    assert!(again.duplicate);
    assert_eq!(
        (again.context_id.as_str(), again.task_id.as_str(), again.seq),
        (first.context_id.as_str(), first.task_id.as_str(), first.seq)
    );
    assert_eq!(
        store.context_info("t", &first.context_id).unwrap().messages,
        1
    );
    let store = reopen(&dir, store);
    assert!(send(&store, "t", &msg).unwrap().duplicate);
    let changed =
        json!({ "messageId": "once", "role": "ROLE_USER", "parts": [{ "text": "pay twice" }] });
    assert!(matches!(
        send(&store, "t", &changed),
        Err(Error::IdempotencyConflict { .. })
    ));
    // The same messageId from another tenant is that tenant's own message.
    assert!(!send(&store, "other", &msg).unwrap().duplicate);
}

/// Resends of every message, checked against the receipts the first sends
/// gave: those of `gone` contexts are new messages now.
fn assert_resends(store: &Store, sent: &[(Value, Receipt)], gone: &str) {
    for (m, first) in sent {
        let id = m["messageId"].as_str().unwrap();
        if first.context_id == gone {
            let again = send(store, "t", &user(id, "after the delete")).unwrap();
            assert!(!again.duplicate, "{id}");
        } else {
            let again = send(store, "t", m).unwrap();
            assert!(again.duplicate, "{id}");
            assert_eq!(
                (&again.task_id, again.seq),
                (&first.task_id, first.seq),
                "{id}"
            );
        }
    }
}

#[test]
fn resent_messages_are_known_across_checkpoints_deletes_and_compaction() {
    use ctxlog::fs::{Crash, MemFs};
    let disk = MemFs::new();
    let dir = std::path::Path::new("/store");
    // A checkpoint every few KiB: several are written while the store serves.
    let options = Options::default()
        .durability(Durability::Sync)
        .checkpoint_interval(Some(4 << 10))
        .segment_bytes(16 << 10);
    let open = |fs: &MemFs| Store::open(dir, options.clone().fs(Arc::new(fs.clone()))).unwrap();
    let msg = |i: usize| {
        json!({ "messageId": format!("m{i}"), "role": "ROLE_USER", "contextId": format!("c{}", i % 4),
                "parts": [{ "text": format!("{i} {}", "x".repeat(300)) }] })
    };
    let store = open(&disk);
    let mut sent = Vec::new();
    for i in 0..40 {
        sent.push((msg(i), send(&store, "t", &msg(i)).unwrap()));
    }
    // The index now reads them from the checkpoint it wrote last, as an
    // open from that checkpoint does.
    assert_resends(&store, &sent, "");
    let crashed = open(&disk.crash(Crash::LoseUnsynced));
    assert!(crashed.open_report().from_checkpoint);
    assert_resends(&crashed, &sent, "");
    drop(crashed);

    // A deleted context's messageIds are free again, and stay so.
    store.delete_context("t", "c1").unwrap();
    let gone: Vec<_> = sent
        .iter()
        .filter(|(_, r)| r.context_id == "c1")
        .cloned()
        .collect();
    sent.retain(|(_, r)| r.context_id != "c1");
    assert_resends(&store, &gone, "c1");
    for i in 40..80 {
        if i % 4 != 1 {
            sent.push((msg(i), send(&store, "t", &msg(i)).unwrap()));
        }
    }
    assert_resends(&store, &sent, "");
    // Compaction ends with a checkpoint: a crash right after it opens from
    // that checkpoint, with nothing to replay.
    store.compact().unwrap();
    assert_resends(&store, &sent, "");
    let crashed = open(&disk.crash(Crash::LoseUnsynced));
    let report = crashed.open_report();
    assert!(report.from_checkpoint && report.replayed == 0, "{report:?}");
    assert_resends(&crashed, &sent, "");
    // The messageIds resent after the delete are known too.
    for (m, _) in &gone {
        let id = m["messageId"].as_str().unwrap();
        assert!(
            send(&crashed, "t", &user(id, "after the delete"))
                .unwrap()
                .duplicate
        );
    }
}

#[test]
fn concurrent_resends_do_the_work_once() {
    let (_dir, store) = store();
    let store = Arc::new(store);
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let store = store.clone();
            std::thread::spawn(move || send(&store, "t", &user("same", "charge me once")).unwrap())
        })
        .collect();
    let receipts: Vec<Receipt> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(receipts.iter().filter(|r| !r.duplicate).count(), 1);
    assert!(receipts.iter().all(|r| r.task_id == receipts[0].task_id));
    assert_eq!(
        store.list_contexts("t", 10, None).unwrap().contexts.len(),
        1
    );
}

#[test]
fn messages_come_back_equal_unknown_fields_included() {
    let (dir, store) = store();
    let msg = json!({
        "messageId": "m", "role": "ROLE_USER",
        "parts": [
            { "text": "see file", "metadata": { "x-trace": [1, { "deep": null }] } },
            { "raw": "aGVsbG8=", "filename": "h.txt", "mediaType": "text/plain" },
            { "url": "https://example.com/a.pdf" },
            { "data": { "amount": 6.9, "list": [true, "s"] } }
        ],
        "metadata": { "unknown": { "nested": "kept" } },
        "extensions": ["https://example.com/ext/v1"],
        "futureField": { "from": "a later spec" }
    });
    let r = send(&store, "t", &msg).unwrap();
    let store = reopen(&dir, store);
    let task = store.get_task("t", &r.task_id, None, false).unwrap();
    assert_eq!(serde_json::to_value(&task.history[0]).unwrap(), msg);
    let events = store.events_since("t", &r.task_id, 0).unwrap();
    assert_eq!(
        serde_json::to_value(events[0].1.message.as_ref().unwrap()).unwrap(),
        msg
    );
}

#[test]
fn the_specs_examples_round_trip() {
    // Every Task and Message object in the specification's JSON examples,
    // gathered into one file beside the tests.
    let file: Value = serde_json::from_str(include_str!("data/a2a-v1.0.1-examples.json")).unwrap();
    let examples = file["examples"].as_array().unwrap();
    assert!(examples.len() >= 5, "only {} examples", examples.len());
    for example in examples {
        let item = &example["value"];
        let back = match example["kind"].as_str() {
            Some("task") => {
                serde_json::to_value(serde_json::from_value::<Task>(item.clone()).unwrap())
            }
            Some("message") => serde_json::to_value(
                serde_json::from_value::<ctxlog::a2a::Message>(item.clone()).unwrap(),
            ),
            other => panic!("unknown kind {other:?}"),
        }
        .unwrap();
        assert_eq!(&back, item);
    }
}

#[test]
fn events_replay_from_any_point_and_cancel_follows_the_rules() {
    let (dir, store) = store();
    let r = send(&store, "t", &user("m1", "start")).unwrap();
    let e1 = store
        .update_status("t", &status(&r, TaskState::Working, Some("on it")))
        .unwrap();
    assert_eq!(e1.seq, 2);
    let e2 = store
        .add_artifact("t", &chunk(&r, "a", "part", false, false))
        .unwrap();
    assert_eq!(e2.seq, 3);
    let store = reopen(&dir, store);
    let all = store.events_since("t", &r.task_id, 0).unwrap();
    assert_eq!(all.iter().map(|(s, _)| *s).collect::<Vec<_>>(), [1, 2, 3]);
    assert!(all[0].1.message.is_some());
    assert_eq!(
        all[1].1.status_update.as_ref().unwrap().status.state,
        TaskState::Working
    );
    assert_eq!(
        all[2]
            .1
            .artifact_update
            .as_ref()
            .unwrap()
            .artifact
            .artifact_id,
        "a"
    );
    let missed = store.events_since("t", &r.task_id, 2).unwrap();
    assert_eq!(missed.len(), 1);
    assert_eq!(missed[0].0, 3);
    assert!(store.events_since("t", &r.task_id, 99).unwrap().is_empty());

    let canceled = store.cancel_task("t", &r.task_id).unwrap();
    assert_eq!(canceled.status.state, TaskState::Canceled);
    assert!(matches!(
        store.cancel_task("t", &r.task_id),
        Err(Error::TaskNotCancelable { .. })
    ));
    assert!(matches!(
        store.add_artifact("t", &chunk(&r, "a", "more", true, false)),
        Err(Error::UnsupportedOperation { .. })
    ));
    assert!(matches!(
        store.cancel_task("t", "nope"),
        Err(Error::TaskNotFound)
    ));
}

#[test]
fn history_length_and_include_artifacts_shape_the_task() {
    let (_dir, store) = store();
    let r = send(&store, "t", &user("m1", "one")).unwrap();
    for (i, text) in ["two", "three"].iter().enumerate() {
        let mut m = user(&format!("m{}", i + 2), text);
        m["taskId"] = json!(r.task_id);
        send(&store, "t", &m).unwrap();
    }
    let full = store.get_task("t", &r.task_id, None, false).unwrap();
    assert_eq!(texts(&full), ["one", "two", "three"]);
    let last2 = store.get_task("t", &r.task_id, Some(2), false).unwrap();
    assert_eq!(texts(&last2), ["two", "three"]);
    let none =
        serde_json::to_value(store.get_task("t", &r.task_id, Some(0), false).unwrap()).unwrap();
    assert!(none.get("history").is_none());
    assert!(none.get("artifacts").is_none());
    let with =
        serde_json::to_value(store.get_task("t", &r.task_id, Some(0), true).unwrap()).unwrap();
    assert_eq!(with["artifacts"], json!([]));
    assert_eq!(with["status"]["state"], "TASK_STATE_SUBMITTED");
    assert!(with["status"]["timestamp"].as_str().unwrap().ends_with('Z'));
}

#[test]
fn task_pages_stay_correct_while_tasks_change_between_them() {
    let (_dir, store) = store();
    let mut ids = Vec::new();
    for i in 0..25 {
        ids.push(send(&store, "t", &user(&format!("m{i}"), "x")).unwrap());
    }
    let mut seen = Vec::new();
    let mut query = ListTasksQuery {
        page_size: Some(10),
        history_length: Some(0),
        ..Default::default()
    };
    let first = store.list_tasks("t", &query).unwrap();
    assert_eq!(
        (first.tasks.len(), first.total_size, first.page_size),
        (10, 25, 10)
    );
    seen.extend(first.tasks.iter().map(|t| t.id.clone()));
    // Between pages: a new task arrives and an unseen one is updated; both
    // move ahead of the cursor and so are not repeated.
    send(&store, "t", &user("late", "x")).unwrap();
    let unseen = ids.iter().find(|r| !seen.contains(&r.task_id)).unwrap();
    store
        .update_status("t", &status(unseen, TaskState::Working, None))
        .unwrap();
    query.page_token = Some(first.next_page_token.clone());
    loop {
        let page = store.list_tasks("t", &query).unwrap();
        seen.extend(page.tasks.iter().map(|t| t.id.clone()));
        if page.next_page_token.is_empty() {
            break;
        }
        query.page_token = Some(page.next_page_token);
    }
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), seen.len(), "no task is listed twice");
    for r in &ids {
        assert!(
            seen.contains(&r.task_id) || r.task_id == unseen.task_id,
            "no unchanged task is skipped"
        );
    }

    let working = store
        .list_tasks(
            "t",
            &ListTasksQuery {
                status: Some(TaskState::Working),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(working.tasks.len(), 1);
    assert_eq!(working.tasks[0].id, unseen.task_id);
    let later = store
        .list_tasks(
            "t",
            &ListTasksQuery {
                status_timestamp_after_ms: Some(u64::MAX - 1),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(later.total_size, 0);
    for size in [0, 101] {
        let q = ListTasksQuery {
            page_size: Some(size),
            ..Default::default()
        };
        assert!(matches!(
            store.list_tasks("t", &q),
            Err(Error::InvalidParams { .. })
        ));
    }
    let q = ListTasksQuery {
        page_token: Some("zz".into()),
        ..Default::default()
    };
    assert!(matches!(
        store.list_tasks("t", &q),
        Err(Error::InvalidParams { .. })
    ));
}

#[test]
fn agent_status_messages_join_the_rendered_context_history() {
    let (_dir, store) = store();
    let r = send(&store, "t", &user("m1", "refund please")).unwrap();
    store
        .update_status(
            "t",
            &status(&r, TaskState::InputRequired, Some("which order?")),
        )
        .unwrap();
    let h = store
        .history("t", &r.context_id, None, ctxlog::render::Budget::default())
        .unwrap();
    let turns: Vec<_> = h
        .turns
        .iter()
        .map(|t| (t.role, t.text.as_str(), t.task_id.clone()))
        .collect();
    assert_eq!(turns[0].0, ctxlog::render::Role::User);
    assert_eq!(turns[1].0, ctxlog::render::Role::Agent);
    assert_eq!(turns[1].1, "which order?");
}

/// Everything a reader sees of a context's tasks: each task as `get_task`
/// returns it (artifacts included) and its whole event stream.
fn snapshot(store: &Store, ids: &[String]) -> Vec<(Value, Value)> {
    ids.iter()
        .map(|id| {
            let task = store.get_task("t", id, None, true).unwrap();
            let events: Vec<_> = store
                .events_since("t", id, 0)
                .unwrap()
                .into_iter()
                .map(|(seq, e)| (seq, serde_json::to_value(e).unwrap()))
                .collect();
            (
                serde_json::to_value(task).unwrap(),
                serde_json::to_value(events).unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_context_of_many_interleaved_tasks_reads_the_same_after_each_kind_of_reopen() {
    let (dir, store) = store();
    let mut open: Vec<(Receipt, bool)> = Vec::new();
    // 40 tasks in one context (past the 16 a lookup scans), their events
    // interleaved: every round opens a task and moves a third of the open
    // ones on (a status with a message, an artifact chunk).
    for round in 0..40 {
        let mut msg = user(&format!("m{round}"), &format!("ask {round}"));
        msg["contextId"] = json!("case");
        open.push((send(&store, "t", &msg).unwrap(), false));
        for (i, (r, started)) in open.iter_mut().enumerate() {
            if (round + i) % 3 != 0 {
                continue;
            }
            let event = status(r, TaskState::Working, Some(&format!("step {round}.{i}")));
            store.update_status("t", &event).unwrap();
            let c = chunk(r, "a", &format!("part {round}"), *started, false);
            store.add_artifact("t", &c).unwrap();
            *started = true;
        }
    }
    let open: Vec<Receipt> = open.into_iter().map(|(r, _)| r).collect();
    for r in open.iter().step_by(4) {
        store
            .update_status("t", &status(r, TaskState::Completed, Some("done")))
            .unwrap();
    }
    let ids: Vec<String> = open.iter().map(|r| r.task_id.clone()).collect();
    let before = snapshot(&store, &ids);
    let listed = |store: &Store| {
        let query = ListTasksQuery {
            page_size: Some(100),
            ..Default::default()
        };
        let page = store.list_tasks("t", &query).unwrap();
        let mut ids: Vec<String> = page.tasks.into_iter().map(|t| t.id).collect();
        ids.sort();
        ids
    };
    let mut all = ids.clone();
    all.sort();
    assert_eq!(listed(&store), all);
    // From the checkpoint written at close, then from a scan of the log.
    let store = reopen(&dir, store);
    assert!(store.open_report().from_checkpoint);
    assert_eq!(
        snapshot(&store, &ids),
        before,
        "after loading the checkpoint"
    );
    assert_eq!(listed(&store), all);
    store.close().unwrap();
    std::fs::remove_file(dir.path().join("CHECKPOINT")).unwrap();
    let store = Store::open(
        dir.path(),
        Options::default().durability(Durability::Buffered),
    )
    .unwrap();
    assert!(!store.open_report().from_checkpoint);
    assert_eq!(snapshot(&store, &ids), before, "after a scan");
    // A task opened now is found beside them.
    let mut msg = user("late", "one more");
    msg["contextId"] = json!("case");
    let late = send(&store, "t", &msg).unwrap();
    assert_eq!(
        store.get_task("t", &late.task_id, None, false).unwrap().id,
        late.task_id
    );
    assert_eq!(snapshot(&store, &ids), before);
}

#[test]
fn what_a_server_asks_of_the_store_on_a_turn_and_after_a_crash() {
    let (_dir, store) = store();
    let first = user("m1", "hello");
    let r = send(&store, "t", &first).unwrap();
    // A resend is found without storing anything; a new message is not.
    let raw = serde_json::to_vec(&first).unwrap();
    let found = store.find_received("t", &raw).unwrap().unwrap();
    assert!(found.duplicate && found.task_id == r.task_id);
    // Each receipt names the message's event in its task, a resend's too.
    assert_eq!((r.event, found.event), (1, 1));
    let other = serde_json::to_vec(&user("m2", "new")).unwrap();
    assert_eq!(store.find_received("t", &other).unwrap(), None);
    assert_eq!(store.find_received("u", &raw).unwrap(), None);
    let changed = serde_json::to_vec(&user("m1", "changed")).unwrap();
    assert!(matches!(
        store.find_received("t", &changed),
        Err(Error::IdempotencyConflict { .. })
    ));
    store
        .update_status("t", &status(&r, TaskState::Working, Some("thinking")))
        .unwrap();
    // The snapshot and the number of events it reflects, read together.
    let (task, events) = store.task_snapshot("t", &r.task_id, None, true).unwrap();
    assert_eq!((task.status.state, events), (TaskState::Working, 2));
    assert_eq!(
        store.events_since("t", &r.task_id, events).unwrap().len(),
        0
    );
    // The message the turn processes is the client's, not the agent's status message.
    let (seq, message) = store.latest_received("t", &r.task_id).unwrap().unwrap();
    assert_eq!((seq, message.message_id.as_str()), (r.seq, "m1"));
    // A turn's start reads both at once, the same (the task's newest
    // history entry here is the agent's status message, not m1).
    let same_as_apart = |task_id: &str| {
        let (task, latest) = store.task_and_latest_received("t", task_id).unwrap();
        assert_eq!(task, store.get_task("t", task_id, None, true).unwrap());
        let apart = store.latest_received("t", task_id).unwrap();
        assert_eq!(
            latest.map(|(s, m)| (s, m.raw_json().map(str::to_string))),
            apart.map(|(s, m)| (s, m.raw_json().map(str::to_string)))
        );
    };
    assert_eq!(
        task.history.last().map(|m| m.message_id.as_str()),
        Some("agent-thinking")
    );
    same_as_apart(&r.task_id);
    // Tasks left mid-turn, across tenants.
    let u = send(&store, "u", &user("m1", "other tenant")).unwrap();
    let mut mid: Vec<(String, String)> = store
        .tasks_in(&[TaskState::Submitted, TaskState::Working])
        .into_iter()
        .map(|t| (t.tenant, t.task_id))
        .collect();
    mid.sort();
    assert_eq!(
        mid,
        [("t".into(), r.task_id.clone()), ("u".into(), u.task_id)]
    );
    // A message that answers a question is the task's next event.
    store
        .update_status("t", &status(&r, TaskState::InputRequired, Some("which?")))
        .unwrap();
    let mut answer = user("m3", "this one");
    answer["taskId"] = json!(r.task_id);
    let joined = send(&store, "t", &answer).unwrap();
    assert_eq!(joined.event, 4);
    let resent = store
        .find_received("t", &serde_json::to_vec(&answer).unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(resent.event, 4);
    let (seq, message) = store.latest_received("t", &r.task_id).unwrap().unwrap();
    assert_eq!((seq, message.message_id.as_str()), (joined.seq, "m3"));
    same_as_apart(&r.task_id);
    assert!(!store.is_poisoned());
}

#[test]
fn status_timestamp_after_includes_its_own_instant() {
    let (_dir, store) = store();
    let r = send(&store, "t", &user("m1", "hello")).unwrap();
    let ms = store.get_task("t", &r.task_id, None, false).unwrap();
    let at = ctxlog::time::parse_iso8601_ms(ms.status.timestamp.as_deref().unwrap()).unwrap();
    let listed = |after| {
        let q = ListTasksQuery {
            status_timestamp_after_ms: Some(after),
            ..Default::default()
        };
        store.list_tasks("t", &q).unwrap().total_size
    };
    assert_eq!((listed(at), listed(at + 1)), (1, 0));
}

#[test]
fn a_waiter_wakes_for_its_tasks_next_event_and_a_timeout_answers_empty() {
    let (_dir, store) = store();
    let store = Arc::new(store);
    let r = send(&store, "t", &user("m1", "start")).unwrap();
    // Nothing past the message: a short wait answers empty.
    let none = store
        .wait_for_events("t", &r.task_id, 1, std::time::Duration::from_millis(20))
        .unwrap();
    assert!(none.is_empty());
    // Events already there answer at once.
    assert_eq!(
        store
            .wait_for_events("t", &r.task_id, 0, std::time::Duration::ZERO)
            .unwrap()
            .len(),
        1
    );
    // A waiter on another thread gets each status as it is stored; a write
    // to another task before it does not end its wait empty.
    let other = send(&store, "t", &user("o1", "another context")).unwrap();
    let states = [TaskState::Working, TaskState::InputRequired];
    for (i, state) in states.into_iter().enumerate() {
        let after = i as u64 + 1;
        let (started_tx, started) = std::sync::mpsc::channel();
        let waiter = {
            let store = store.clone();
            let task = r.task_id.clone();
            std::thread::spawn(move || {
                started_tx.send(()).unwrap();
                let began = std::time::Instant::now();
                let got = store
                    .wait_for_events("t", &task, after, std::time::Duration::from_secs(60))
                    .unwrap();
                (got, began.elapsed())
            })
        };
        started.recv().unwrap();
        store
            .update_status("t", &status(&other, TaskState::Working, None))
            .unwrap();
        store.update_status("t", &status(&r, state, None)).unwrap();
        let (got, waited) = waiter.join().unwrap();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].0, after + 1);
        let update = got[0].1.status_update.as_ref().unwrap();
        assert_eq!(update.status.state, state);
        // Woken by the write, not by the end of its time.
        assert!(waited < std::time::Duration::from_secs(60));
    }
    // A task that does not exist is an error, not a wait.
    assert!(matches!(
        store.wait_for_events("t", "nope", 0, std::time::Duration::from_secs(60)),
        Err(Error::TaskNotFound)
    ));
}
