//! Deferred task events: written at once, published once durable, the
//! context's lock held by the pending write in between.

use crate::common;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use ctxlog::a2a::{Artifact, Part, TaskState, TaskStatus};
use ctxlog::{Durability, Options, Receipt, Store};

fn store(dir: &std::path::Path, durability: Durability) -> Arc<Store> {
    Arc::new(Store::open(dir, Options::default().durability(durability)).unwrap())
}

fn received(store: &Store, id: &str) -> Receipt {
    let raw = format!(r#"{{"messageId":"{id}","role":"ROLE_USER","parts":[{{"text":"hi"}}]}}"#);
    store.receive_message("t", raw.as_bytes()).unwrap()
}

fn state(store: &Store, r: &Receipt) -> TaskState {
    store
        .get_task("t", &r.task_id, Some(0), false)
        .unwrap()
        .status
        .state
}

#[test]
fn a_deferred_status_is_seen_once_durable_and_published() {
    for durability in [
        Durability::GroupCommit,
        Durability::Sync,
        Durability::Buffered,
    ] {
        let dir = common::tmp();
        let store = store(dir.path(), durability);
        let r = received(&store, "m1");
        let done = r.status_update(TaskStatus::new(TaskState::Completed));
        let pending = store.update_status_deferred("t", &done).unwrap().unwrap();
        assert_eq!(
            state(&store, &r),
            TaskState::Submitted,
            "written, not published"
        );
        common::block_on(pending.durable()).unwrap();
        assert_eq!(
            state(&store, &r),
            TaskState::Submitted,
            "durable, not published"
        );
        let record = pending.publish().unwrap();
        assert_eq!(record.seq, 2, "the task's second event, {durability:?}");
        assert_eq!(state(&store, &r), TaskState::Completed);
        drop(Arc::try_unwrap(store).unwrap());
        let store = self::store(dir.path(), durability);
        assert_eq!(state(&store, &r), TaskState::Completed, "after a reopen");
    }
}

#[test]
fn a_writer_behind_a_pending_write_waits_for_its_publication() {
    let dir = common::tmp();
    let store = store(dir.path(), Durability::GroupCommit);
    let r = received(&store, "m1");
    let working = r.status_update(TaskStatus::new(TaskState::Working));
    let pending = store
        .update_status_deferred("t", &working)
        .unwrap()
        .unwrap();
    // The context's lock is held: a deferred write finds it so and writes
    // nothing; a blocking one waits.
    assert!(store
        .update_status_deferred("t", &working)
        .unwrap()
        .is_none());
    let chunk = r.artifact_update(Artifact::new("a", vec![Part::text("x")]));
    assert!(store.add_artifact_deferred("t", &chunk).unwrap().is_none());
    let (tx, rx) = mpsc::channel();
    let behind = {
        let store = store.clone();
        std::thread::spawn(move || tx.send(store.add_artifact("t", &chunk).unwrap()).unwrap())
    };
    assert!(
        rx.recv_timeout(Duration::from_millis(200)).is_err(),
        "the blocking write went past a held lock"
    );
    assert_eq!(pending.publish().unwrap().seq, 2);
    let artifact = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    behind.join().unwrap();
    assert_eq!(artifact.seq, 3, "after the published status");
    let task = store.get_task("t", &r.task_id, Some(0), true).unwrap();
    assert_eq!(task.status.state, TaskState::Working);
    assert_eq!(task.artifacts.map(|a| a.len()), Some(1));
}

#[test]
fn a_pending_write_dropped_unpublished_is_published_by_its_drop() {
    let dir = common::tmp();
    let store = store(dir.path(), Durability::GroupCommit);
    let r = received(&store, "m1");
    let working = r.status_update(TaskStatus::new(TaskState::Working));
    drop(
        store
            .update_status_deferred("t", &working)
            .unwrap()
            .unwrap(),
    );
    assert_eq!(state(&store, &r), TaskState::Working);
    // And the lock is free again.
    let done = r.status_update(TaskStatus::new(TaskState::Completed));
    let pending = store.update_status_deferred("t", &done).unwrap().unwrap();
    assert_eq!(pending.publish().unwrap().seq, 3);
    drop(Arc::try_unwrap(store).unwrap());
    let store = self::store(dir.path(), Durability::GroupCommit);
    assert_eq!(state(&store, &r), TaskState::Completed);
}

#[test]
fn a_deferred_event_is_checked_as_a_blocking_one_is() {
    let dir = common::tmp();
    let store = store(dir.path(), Durability::GroupCommit);
    let r = received(&store, "m1");
    let done = r.status_update(TaskStatus::new(TaskState::Completed));
    store.update_status("t", &done).unwrap();
    // A terminal task takes nothing more, deferred or not; the refusal
    // leaves the lock free.
    assert!(store.update_status_deferred("t", &done).is_err());
    let chunk = r.artifact_update(Artifact::new("a", vec![Part::text("x")]));
    assert!(store.add_artifact_deferred("t", &chunk).is_err());
    assert!(store.update_status("t", &done).is_err());
    let other = received(&store, "m2");
    let working = other.status_update(TaskStatus::new(TaskState::Working));
    assert!(store
        .update_status_deferred("t", &working)
        .unwrap()
        .is_some());
}

#[test]
fn a_checkpoint_due_after_deferred_writes_is_left_to_the_caller() {
    let dir = common::tmp();
    let options = Options::default()
        .durability(Durability::GroupCommit)
        .checkpoint_interval(Some(4096));
    let store = Arc::new(Store::open(dir.path(), options).unwrap());
    let r = received(&store, "m1");
    let big = "x".repeat(5000);
    let chunk = r.artifact_update(Artifact::new("a", vec![Part::text(&big)]));
    store.checkpoint_if_due();
    assert!(!store.checkpoint_due());
    let pending = store.add_artifact_deferred("t", &chunk).unwrap().unwrap();
    pending.publish().unwrap();
    assert!(store.checkpoint_due(), "the publication wrote none");
    store.checkpoint_if_due();
    assert!(!store.checkpoint_due());
}
