//! Deferred receives: a message written at once and published once
//! durable, the context's lock and the messageId's claim held by the
//! pending receive in between.

use crate::common;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use ctxlog::a2a::{TaskState, TaskStatus};
use ctxlog::{Durability, Error, MessageIds, Options, Receipt, Store};

fn store(dir: &std::path::Path, durability: Durability) -> Arc<Store> {
    Arc::new(Store::open(dir, Options::default().durability(durability)).unwrap())
}

fn message(id: &str, extra: &str) -> Vec<u8> {
    format!(r#"{{"messageId":"{id}","role":"ROLE_USER","parts":[{{"text":"hi {id}"}}]{extra}}}"#)
        .into_bytes()
}

/// Received deferred and published at once (nothing else writes).
fn receive_now(store: &Arc<Store>, raw: &[u8], ids: MessageIds) -> Receipt {
    store
        .receive_deferred("t", raw, ids)
        .unwrap()
        .unwrap()
        .publish()
        .unwrap()
}

fn history_len(store: &Store, task_id: &str) -> Option<usize> {
    store
        .get_task("t", task_id, None, false)
        .ok()
        .map(|t| t.history.len())
}

#[test]
fn a_deferred_receive_is_seen_once_durable_and_published() {
    for durability in [
        Durability::GroupCommit,
        Durability::Sync,
        Durability::Buffered,
    ] {
        let dir = common::tmp();
        let store = store(dir.path(), durability);
        let raw = message("m1", r#","contextId":"c1""#);
        let pending = store
            .receive_deferred("t", &raw, MessageIds::Idempotent)
            .unwrap()
            .unwrap();
        let task_id = pending.receipt().task_id.clone();
        assert_eq!(
            history_len(&store, &task_id),
            None,
            "written, not published"
        );
        common::block_on(pending.durable()).unwrap();
        assert_eq!(
            history_len(&store, &task_id),
            None,
            "durable, not published"
        );
        let receipt = pending.publish().unwrap();
        assert!(receipt.new_task && receipt.new_context && !receipt.duplicate);
        assert_eq!((receipt.context_id.as_str(), receipt.event), ("c1", 1));
        assert_eq!(history_len(&store, &task_id), Some(1), "{durability:?}");
        // The task's next message joins it, deferred too.
        let follow = message("m2", &format!(r#","taskId":"{task_id}""#));
        let joined = receive_now(&store, &follow, MessageIds::Idempotent);
        assert_eq!((joined.event, joined.seq), (2, receipt.seq + 1));
        assert!(!joined.new_task && joined.task_id == task_id);
        drop(Arc::try_unwrap(store).unwrap());
        let store = self::store(dir.path(), durability);
        assert_eq!(history_len(&store, &task_id), Some(2), "after a reopen");
        let again = store.receive_message("t", &raw).unwrap();
        assert!(
            again.duplicate && again.task_id == task_id,
            "a resend after a reopen"
        );
    }
}

#[test]
fn a_resend_is_answered_at_once_and_a_v03_message_is_taken() {
    let dir = common::tmp();
    let store = store(dir.path(), Durability::GroupCommit);
    let v03 = br#"{"kind":"message","messageId":"m1","role":"user","parts":[{"kind":"text","text":"hi"}]}"#;
    let first = store
        .receive_v03_deferred("t", v03, MessageIds::Idempotent)
        .unwrap()
        .unwrap()
        .publish()
        .unwrap();
    let task = store.get_task("t", &first.task_id, None, false).unwrap();
    assert_eq!(task.history[0].parts[0].text.as_deref(), Some("hi"));
    // A resend in v1.0's form, deferred: nothing written, the same task.
    let v1 = br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#;
    let resend = store
        .receive_deferred("t", v1, MessageIds::Idempotent)
        .unwrap()
        .unwrap();
    common::block_on(resend.durable()).unwrap();
    let resend = resend.publish().unwrap();
    assert!(resend.duplicate && resend.task_id == first.task_id);
    assert_eq!(history_len(&store, &first.task_id), Some(1));
    // Other content under the same messageId is refused, as ever.
    let changed = br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"bye"}]}"#;
    assert!(matches!(
        store.receive_deferred("t", changed, MessageIds::Idempotent),
        Err(Error::IdempotencyConflict { .. })
    ));
    // As labels, every message is new.
    let a = receive_now(&store, v1, MessageIds::Labels);
    assert!(!a.duplicate && a.task_id != first.task_id);
}

#[test]
fn a_resend_behind_a_pending_receive_waits_and_is_answered_as_one() {
    let dir = common::tmp();
    let store = store(dir.path(), Durability::GroupCommit);
    let raw = message("m1", r#","contextId":"c1""#);
    let pending = store
        .receive_deferred("t", &raw, MessageIds::Idempotent)
        .unwrap()
        .unwrap();
    // The messageId is claimed: a deferred resend writes nothing and says
    // so; so does another message to the context (its lock is held).
    assert!(store
        .receive_deferred("t", &raw, MessageIds::Idempotent)
        .unwrap()
        .is_none());
    let other = message("m2", r#","contextId":"c1""#);
    assert!(store
        .receive_deferred("t", &other, MessageIds::Idempotent)
        .unwrap()
        .is_none());
    let (tx, rx) = mpsc::channel();
    let behind = {
        let (store, raw) = (store.clone(), raw.clone());
        std::thread::spawn(move || tx.send(store.receive_message("t", &raw).unwrap()).unwrap())
    };
    assert!(
        rx.recv_timeout(Duration::from_millis(200)).is_err(),
        "a blocking resend went past a claimed messageId"
    );
    let receipt = pending.publish().unwrap();
    let resend = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    behind.join().unwrap();
    assert!(resend.duplicate && resend.task_id == receipt.task_id);
    // The second message, refused for the held lock, was not claimed for good.
    let r2 = store.receive_message("t", &other).unwrap();
    assert!(!r2.duplicate && r2.context_id == "c1");
}

#[test]
fn a_pending_receive_dropped_unpublished_is_published_by_its_drop() {
    let dir = common::tmp();
    let store = store(dir.path(), Durability::GroupCommit);
    let raw = message("m1", "");
    let pending = store
        .receive_deferred("t", &raw, MessageIds::Idempotent)
        .unwrap()
        .unwrap();
    let task_id = pending.receipt().task_id.clone();
    drop(pending);
    assert_eq!(history_len(&store, &task_id), Some(1));
    // The messageId and the lock are free: a resend is one, and the task
    // takes a status.
    let again = receive_now(&store, &raw, MessageIds::Idempotent);
    assert!(again.duplicate && again.task_id == task_id);
    let done = again.status_update(TaskStatus::new(TaskState::Completed));
    assert!(store.update_status_deferred("t", &done).unwrap().is_some());
}

#[test]
fn a_deferred_receive_is_checked_as_a_blocking_one_is() {
    let dir = common::tmp();
    let store = store(dir.path(), Durability::GroupCommit);
    let first = store.receive_message("t", &message("m1", "")).unwrap();
    let done = first.status_update(TaskStatus::new(TaskState::Completed));
    store.update_status("t", &done).unwrap();
    // A finished task takes no message; the refusal frees its messageId
    // and the context's lock.
    let late = message("m2", &format!(r#","taskId":"{}""#, first.task_id));
    assert!(matches!(
        store.receive_deferred("t", &late, MessageIds::Idempotent),
        Err(Error::UnsupportedOperation { .. })
    ));
    assert!(matches!(
        store.receive_message("t", &late),
        Err(Error::UnsupportedOperation { .. })
    ));
    let bad = br#"{"messageId":"m3","role":"ROLE_AGENT","parts":[{"text":"hi"}]}"#;
    assert!(store
        .receive_deferred("t", bad, MessageIds::Idempotent)
        .is_err());
    let long = "x".repeat(10_000);
    assert!(store
        .receive_deferred(&long, &message("m4", ""), MessageIds::Idempotent)
        .is_err());
    let follow = message("m5", &format!(r#","contextId":"{}""#, first.context_id));
    let joined = receive_now(&store, &follow, MessageIds::Idempotent);
    assert!(joined.new_task && !joined.new_context);
    // A gone context is left to the blocking form, which refuses it.
    store.delete_context("t", &first.context_id).unwrap();
    let gone = message("m6", &format!(r#","contextId":"{}""#, first.context_id));
    assert!(store
        .receive_deferred("t", &gone, MessageIds::Idempotent)
        .unwrap()
        .is_none());
    assert!(matches!(
        store.receive_message("t", &gone),
        Err(Error::ContextRejected { .. })
    ));
}
