//! messageIds: recognised in the context a message names (or its task's),
//! within the tenant only for a message that names neither; or taken as
//! the client's labels. Both hold across reopens, whole-log reads and a
//! checkpoint of the version before.
//!
//! What broke: a messageId was recognised across the whole tenant, so two
//! conversations that both began at `m1`, in contexts of their own, were
//! an `IdempotencyConflict`; and a client that uses messageIds as labels
//! (as most SDKs do) could not send the same one twice.

use crate::common;

use ctxlog::a2a::{Message, Role, TaskState, TaskStatus, DIRECT_REPLY};
use ctxlog::{Error, ListTasksQuery, MessageIds, Options, Store};
use serde_json::{json, Value};

fn message(id: &str, text: &str, context: Option<&str>, task: Option<&str>) -> Vec<u8> {
    let mut m = json!({ "messageId": id, "role": "ROLE_USER", "parts": [{ "text": text }] });
    if let Some(c) = context {
        m["contextId"] = json!(c);
    }
    if let Some(t) = task {
        m["taskId"] = json!(t);
    }
    m.to_string().into_bytes()
}

fn conflict<T: std::fmt::Debug>(r: Result<T, Error>) -> bool {
    matches!(r, Err(Error::IdempotencyConflict { .. }))
}

/// The scoped answers, checked on `store` (after whatever opened it).
fn check_scopes(store: &Store, first: &Firsts) {
    // The same message again, in its scope: the first receipt.
    for (raw, task) in [
        (message("m1", "a", Some("c1"), None), &first.c1),
        (message("m1", "b", Some("c2"), None), &first.c2),
        (message("m1", "n", None, None), &first.neither),
        (message("m2", "f", None, Some(&first.c1)), &first.c1),
    ] {
        let again = store.receive_message("t", &raw).unwrap();
        assert!(again.duplicate, "{}", String::from_utf8_lossy(&raw));
        assert_eq!(&again.task_id, task);
    }
    // The same messageId with other content, in the same scope.
    assert!(conflict(
        store.receive_message("t", &message("m1", "x", Some("c1"), None))
    ));
    assert!(conflict(
        store.receive_message("t", &message("m1", "x", None, None))
    ));
    assert!(conflict(store.receive_message(
        "t",
        &message("m2", "x", None, Some(&first.c1))
    )));
    // Another tenant has received none of them.
    for raw in [
        message("m1", "a", Some("c1"), None),
        message("m1", "n", None, None),
    ] {
        assert!(store.find_received("u", &raw).unwrap().is_none());
    }
}

struct Firsts {
    c1: String,
    c2: String,
    neither: String,
}

fn firsts(store: &Store) -> Firsts {
    let c1 = store
        .receive_message("t", &message("m1", "a", Some("c1"), None))
        .unwrap();
    // Another conversation that also begins at m1: no conflict.
    let c2 = store
        .receive_message("t", &message("m1", "b", Some("c2"), None))
        .unwrap();
    assert!(!c2.duplicate && c2.task_id != c1.task_id);
    // A message that names neither is recognised within the tenant only
    // against others that name neither.
    let neither = store
        .receive_message("t", &message("m1", "n", None, None))
        .unwrap();
    assert!(!neither.duplicate);
    // A follow-up's messageId is its task's context's.
    let follow = store.receive_message("t", &message("m2", "f", None, Some(&c1.task_id)));
    assert!(!follow.unwrap().duplicate);
    let elsewhere = store.receive_message("t", &message("m2", "f", None, Some(&c2.task_id)));
    assert!(!elsewhere.unwrap().duplicate);
    Firsts {
        c1: c1.task_id,
        c2: c2.task_id,
        neither: neither.task_id,
    }
}

#[test]
fn a_message_id_is_recognised_in_its_scope_across_every_kind_of_open() {
    let dir = common::tmp();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let first = firsts(&store);
    check_scopes(&store, &first);
    // From the checkpoint a close writes.
    store.close().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    assert!(store.open_report().from_checkpoint);
    check_scopes(&store, &first);
    drop(store);
    // From the whole log.
    std::fs::remove_file(dir.path().join("CHECKPOINT")).ok();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    assert!(!store.open_report().from_checkpoint);
    check_scopes(&store, &first);
    store.close().unwrap();
    // A checkpoint of the version before (its messageIds keyed by tenant
    // alone) is set aside, and the log read once: the resends of messages
    // stored before are answered as they were.
    let path = dir.path().join("CHECKPOINT");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[8..12].copy_from_slice(&10u32.to_le_bytes());
    std::fs::write(&path, bytes).unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    assert!(!store.open_report().from_checkpoint);
    check_scopes(&store, &first);
}

#[test]
fn message_ids_as_labels_make_every_message_new() {
    let dir = common::tmp();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let raw = message("m1", "same", Some("c1"), None);
    let a = store
        .receive_message_with("t", &raw, MessageIds::Labels)
        .unwrap();
    let b = store
        .receive_message_with("t", &raw, MessageIds::Labels)
        .unwrap();
    assert!(!b.duplicate && a.task_id != b.task_id);
    let c = store
        .receive_message_with(
            "t",
            &message("m1", "other", Some("c1"), None),
            MessageIds::Labels,
        )
        .unwrap();
    assert!(!c.duplicate);
    // A follow-up reusing its question's messageId joins the task.
    let f = message("m1", "again", None, Some(&a.task_id));
    let joined = store
        .receive_message_with("t", &f, MessageIds::Labels)
        .unwrap();
    assert_eq!(joined.task_id, a.task_id);
    let task = store.get_task("t", &a.task_id, None, false).unwrap();
    let ids: Vec<&str> = task.history.iter().map(|m| m.message_id.as_str()).collect();
    assert_eq!(ids, ["m1", "m1"]);
    let listed = store
        .list_tasks(
            "t",
            &ListTasksQuery {
                context_id: Some("c1".into()),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(listed.total_size, 3);
    // All of them are there after a reopen.
    store.close().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let task = store.get_task("t", &a.task_id, None, false).unwrap();
    assert_eq!(task.history.len(), 2);
}

#[test]
fn a_task_answered_by_a_direct_reply_is_never_listed() {
    let dir = common::tmp();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let kept = store
        .receive_message("t", &message("k", "keep", Some("c"), None))
        .unwrap();
    let replied = store
        .receive_message("t", &message("r", "reply", Some("c"), None))
        .unwrap();
    let mut status = TaskStatus::new(TaskState::Completed)
        .with_message(Message::new("a1", Role::Agent, &["hi"]).in_task(&replied.task_id, "c"));
    status.extra.insert(DIRECT_REPLY.into(), Value::Bool(true));
    store
        .update_status("t", &replied.status_update(status))
        .unwrap();
    let visible = |store: &Store| {
        let page = store.list_tasks("t", &ListTasksQuery::default()).unwrap();
        let ids: Vec<String> = page.tasks.iter().map(|t| t.id.clone()).collect();
        assert_eq!(page.total_size as usize, ids.len());
        assert!(
            store
                .task_progress("t", &replied.task_id)
                .unwrap()
                .direct_reply
        );
        assert!(
            !store
                .task_progress("t", &kept.task_id)
                .unwrap()
                .direct_reply
        );
        ids
    };
    assert_eq!(visible(&store), vec![kept.task_id.clone()]);
    store.close().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    assert_eq!(visible(&store), vec![kept.task_id.clone()]);
    drop(store);
    std::fs::remove_file(dir.path().join("CHECKPOINT")).ok();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    assert_eq!(visible(&store), vec![kept.task_id.clone()]);
}
