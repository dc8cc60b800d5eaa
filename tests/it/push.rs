//! Push-notification configs and delivery positions kept in the log: set,
//! replaced, deleted, tenant-scoped, never task events, and the same after
//! a reopen, a whole-log replay, a compaction and a crash.

use crate::common;

use ctxlog::a2a::{TaskState, TaskStatus};
use ctxlog::{Error, Options, Receipt, Store};

const HOOK: &[u8] = br#"{"url":"http://127.0.0.1:9/hook"}"#;
const OTHER: &[u8] = br#"{"url":"http://127.0.0.1:9/other","token":"t"}"#;

fn receive(store: &Store, id: &str) -> Receipt {
    let raw = format!(r#"{{"messageId":"{id}","role":"ROLE_USER","parts":[{{"text":"hi"}}]}}"#);
    store.receive_message("acme", raw.as_bytes()).unwrap()
}

fn work(store: &Store, r: &Receipt, state: TaskState) {
    store
        .update_status("acme", &r.status_update(TaskStatus::new(state)))
        .unwrap();
}

/// The version of the task's config `id`.
fn version(store: &Store, task: &str, id: &str) -> u64 {
    let configs = store.push_configs("acme", task).unwrap();
    configs.iter().find(|c| c.config_id == id).unwrap().version
}

/// (config id, config bytes, start, delivered) of each of the task's configs.
fn configs(store: &Store, task: &str) -> Vec<(String, Vec<u8>, u64, u64)> {
    store
        .push_configs("acme", task)
        .unwrap()
        .into_iter()
        .map(|c| (c.config_id, c.config, c.start_after, c.delivered))
        .collect()
}

#[test]
fn configs_are_set_replaced_deleted_and_scoped_to_their_tenant() {
    let (_dir, store) = common::buffered_store();
    let r = receive(&store, "m1");
    assert_eq!(
        store
            .set_push_config("acme", &r.task_id, "a", HOOK, None)
            .unwrap()
            .start_after,
        1
    );
    work(&store, &r, TaskState::Working);
    // A later config starts after the events already there.
    assert_eq!(
        store
            .set_push_config("acme", &r.task_id, "b", OTHER, None)
            .unwrap()
            .start_after,
        2
    );
    // Replacing keeps the config's place and starts it again from now.
    assert_eq!(
        store
            .set_push_config("acme", &r.task_id, "a", OTHER, None)
            .unwrap()
            .start_after,
        2
    );
    assert_eq!(
        configs(&store, &r.task_id),
        [
            ("a".into(), OTHER.to_vec(), 2, 2),
            ("b".into(), OTHER.to_vec(), 2, 2)
        ]
    );
    // `after` is taken as given, but never past the task's events.
    assert_eq!(
        store
            .set_push_config("acme", &r.task_id, "c", HOOK, Some(0))
            .unwrap()
            .start_after,
        0
    );
    assert_eq!(
        store
            .set_push_config("acme", &r.task_id, "d", HOOK, Some(9))
            .unwrap()
            .start_after,
        2
    );

    assert!(store.delete_push_config("acme", &r.task_id, "b").unwrap());
    assert!(!store.delete_push_config("acme", &r.task_id, "b").unwrap());
    let ids: Vec<String> = configs(&store, &r.task_id)
        .into_iter()
        .map(|c| c.0)
        .collect();
    assert_eq!(ids, ["a", "c", "d"]);

    // Another tenant's task is no task at all.
    for e in [
        store
            .set_push_config("other", &r.task_id, "x", HOOK, None)
            .err(),
        store.push_configs("other", &r.task_id).err(),
        store.delete_push_config("other", &r.task_id, "a").err(),
        store.push_delivered("other", &r.task_id, "a", 0, 1).err(),
    ] {
        assert!(matches!(e, Some(Error::TaskNotFound)), "{e:?}");
    }
    assert!(matches!(
        store.push_configs("acme", "no-such-task"),
        Err(Error::TaskNotFound)
    ));
    assert!(matches!(
        store.set_push_config("acme", &r.task_id, "", HOOK, None),
        Err(Error::InvalidParams { field: "id", .. })
    ));
}

#[test]
fn push_records_are_no_task_events_and_no_history() {
    let (_dir, store) = common::buffered_store();
    let r = receive(&store, "m1");
    store
        .set_push_config("acme", &r.task_id, "a", HOOK, None)
        .unwrap();
    work(&store, &r, TaskState::Working);
    assert!(store
        .push_delivered("acme", &r.task_id, "a", version(&store, &r.task_id, "a"), 2)
        .unwrap());
    work(&store, &r, TaskState::Completed);

    let progress = store.task_progress("acme", &r.task_id).unwrap();
    assert_eq!((progress.events, progress.state), (3, TaskState::Completed));
    let events: Vec<u64> = store
        .events_since("acme", &r.task_id, 0)
        .unwrap()
        .into_iter()
        .map(|(seq, _)| seq)
        .collect();
    assert_eq!(events, [1, 2, 3]);
    let task = store.get_task("acme", &r.task_id, None, true).unwrap();
    assert_eq!(task.history.len(), 1);
    // A finished task still takes a config, and its delivery can move on.
    assert_eq!(
        store
            .set_push_config("acme", &r.task_id, "late", HOOK, Some(1))
            .unwrap()
            .start_after,
        1
    );
    assert!(store
        .push_delivered(
            "acme",
            &r.task_id,
            "late",
            version(&store, &r.task_id, "late"),
            3
        )
        .unwrap());
}

#[test]
fn delivery_moves_only_forward_and_never_past_the_last_event() {
    let (_dir, store) = common::buffered_store();
    let r = receive(&store, "m1");
    store
        .set_push_config("acme", &r.task_id, "a", HOOK, Some(0))
        .unwrap();
    work(&store, &r, TaskState::Working);
    assert!(store
        .push_delivered("acme", &r.task_id, "a", version(&store, &r.task_id, "a"), 2)
        .unwrap());
    // Behind or at the position: nothing written.
    assert!(!store
        .push_delivered("acme", &r.task_id, "a", version(&store, &r.task_id, "a"), 1)
        .unwrap());
    assert!(!store
        .push_delivered("acme", &r.task_id, "a", version(&store, &r.task_id, "a"), 2)
        .unwrap());
    assert_eq!(configs(&store, &r.task_id)[0].3, 2);
    assert!(matches!(
        store.push_delivered("acme", &r.task_id, "a", version(&store, &r.task_id, "a"), 3),
        Err(Error::InvalidParams {
            field: "through",
            ..
        })
    ));
    // A deleted config takes no position, nor does a replaced one at its
    // old version (its successor starts where it was set).
    let old = version(&store, &r.task_id, "a");
    store
        .set_push_config("acme", &r.task_id, "a", OTHER, Some(0))
        .unwrap();
    assert!(!store
        .push_delivered("acme", &r.task_id, "a", old, 2)
        .unwrap());
    assert_eq!(configs(&store, &r.task_id)[0].3, 0);
    let new = version(&store, &r.task_id, "a");
    assert!(store
        .push_delivered("acme", &r.task_id, "a", new, 1)
        .unwrap());
    store.delete_push_config("acme", &r.task_id, "a").unwrap();
    assert!(!store
        .push_delivered("acme", &r.task_id, "a", new, 2)
        .unwrap());
}

/// Two tasks with configs, one with none, one deleted context.
fn populate(store: &Store) -> (Receipt, Receipt) {
    let a = receive(store, "m1");
    let b = receive(store, "m2");
    let _plain = receive(store, "m3");
    let gone = receive(store, "m4");
    store
        .set_push_config("acme", &a.task_id, "a1", HOOK, Some(0))
        .unwrap();
    store
        .set_push_config("acme", &a.task_id, "a2", OTHER, None)
        .unwrap();
    work(store, &a, TaskState::Working);
    store
        .push_delivered(
            "acme",
            &a.task_id,
            "a1",
            version(store, &a.task_id, "a1"),
            2,
        )
        .unwrap();
    store
        .set_push_config("acme", &b.task_id, "b1", HOOK, None)
        .unwrap();
    store
        .set_push_config("acme", &gone.task_id, "g", HOOK, None)
        .unwrap();
    store.delete_context("acme", &gone.context_id).unwrap();
    (a, b)
}

fn pending(store: &Store) -> Vec<String> {
    let mut tasks: Vec<String> = store
        .push_tasks()
        .unwrap()
        .into_iter()
        .map(|t| t.task_id)
        .collect();
    tasks.sort();
    tasks
}

#[test]
fn configs_and_positions_survive_reopen_replay_compaction_and_a_crash() {
    let dir = common::tmp();
    let options = || Options::default().segment_bytes(4096);
    let store = Store::open(dir.path(), options()).unwrap();
    let (a, b) = populate(&store);
    let mut want_pending = vec![a.task_id.clone(), b.task_id.clone()];
    want_pending.sort();
    let want = (configs(&store, &a.task_id), configs(&store, &b.task_id));
    assert_eq!(want.0.len(), 2);
    assert_eq!(want.0[0].3, 2);
    assert_eq!(pending(&store), want_pending);
    let seen = |store: &Store| {
        assert_eq!(
            (configs(store, &a.task_id), configs(store, &b.task_id)),
            want
        );
        assert_eq!(pending(store), want_pending);
    };

    // A crash: the directory as it is, no clean close.
    let crashed = common::crash_copy(dir.path());
    seen(&Store::open(crashed.path(), options()).unwrap());

    store.close().unwrap();
    let store = Store::open(dir.path(), options()).unwrap();
    seen(&store);
    store.compact().unwrap();
    seen(&store);
    store.close().unwrap();

    // The whole log read again, with no checkpoint to load.
    std::fs::remove_file(dir.path().join("CHECKPOINT")).unwrap();
    let store = Store::open(dir.path(), options()).unwrap();
    assert!(!store.open_report().from_checkpoint);
    seen(&store);
    assert!(matches!(
        store.set_push_config("acme", "no-such-task", "x", HOOK, None),
        Err(Error::TaskNotFound)
    ));
}

#[test]
fn an_export_leaves_push_records_out() {
    let (_dir, store) = common::buffered_store();
    let (a, _) = populate(&store);
    let items = store.export_context("acme", &a.context_id).unwrap();
    // The message and the WORKING status: nothing of the configs.
    assert_eq!(items.len(), 2);
    let (_dir2, copy) = common::buffered_store();
    for item in &items {
        copy.import_item(item).unwrap();
    }
    assert_eq!(copy.push_configs("acme", &a.task_id).unwrap(), []);
    assert_eq!(copy.task_progress("acme", &a.task_id).unwrap().events, 2);
}

mod model {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Set(usize, Option<u64>),
        Delete(usize),
        Delivered(usize, u64),
        Event,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..3usize, proptest::option::of(0..6u64)).prop_map(|(c, a)| Op::Set(c, a)),
            (0..3usize).prop_map(Op::Delete),
            (0..3usize, 0..6u64).prop_map(|(c, t)| Op::Delivered(c, t)),
            Just(Op::Event),
        ]
    }

    /// (config id, start, delivered) of each of the task's configs.
    fn positions(store: &Store, task: &str) -> Vec<(String, u64, u64)> {
        configs(store, task)
            .into_iter()
            .map(|(id, _, start, delivered)| (id, start, delivered))
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// Every answer equals a model's: configs in the order first set,
        /// replaced in place, positions that only grow, deletes; and the
        /// same after a reopen.
        #[test]
        fn configs_follow_the_model(ops in proptest::collection::vec(op(), 1..40)) {
            let dir = common::tmp();
            let options = || Options::default().durability(ctxlog::Durability::Buffered);
            let store = Store::open(dir.path(), options()).unwrap();
            let r = receive(&store, "m1");
            let mut events = 1u64;
            // (id, start, delivered), in the order first set.
            let mut model: Vec<(String, u64, u64)> = Vec::new();
            for op in ops {
                match op {
                    Op::Set(c, after) => {
                        let id = format!("c{c}");
                        let through = after.unwrap_or(events).min(events);
                        let got = store.set_push_config("acme", &r.task_id, &id, HOOK, after).unwrap();
                        prop_assert_eq!((got.start_after, got.delivered), (through, through));
                        match model.iter_mut().find(|m| m.0 == id) {
                            Some(m) => *m = (id, through, through),
                            None => model.push((id, through, through)),
                        }
                    }
                    Op::Delete(c) => {
                        let id = format!("c{c}");
                        let existed = model.iter().any(|m| m.0 == id);
                        model.retain(|m| m.0 != id);
                        let got = store.delete_push_config("acme", &r.task_id, &id).unwrap();
                        prop_assert_eq!(got, existed);
                    }
                    Op::Delivered(c, through) => {
                        let id = format!("c{c}");
                        let at = store
                            .push_configs("acme", &r.task_id)
                            .unwrap()
                            .into_iter()
                            .find(|c| c.config_id == id)
                            .map_or(0, |c| c.version);
                        let got = store.push_delivered("acme", &r.task_id, &id, at, through);
                        if through > events {
                            prop_assert!(got.is_err());
                            continue;
                        }
                        let m = model.iter_mut().find(|m| m.0 == id);
                        let behind = m.as_ref().is_some_and(|m| m.2 < through);
                        if let Some(m) = m.filter(|_| behind) {
                            m.2 = through;
                        }
                        prop_assert_eq!(got.unwrap(), behind);
                    }
                    Op::Event => {
                        let state = if events % 2 == 1 { TaskState::Working } else { TaskState::InputRequired };
                        if events < 5 {
                            work(&store, &r, state);
                            events += 1;
                        }
                    }
                }
                prop_assert_eq!(&positions(&store, &r.task_id), &model);
            }
            store.close().unwrap();
            let store = Store::open(dir.path(), options()).unwrap();
            prop_assert_eq!(positions(&store, &r.task_id), model);
        }
    }
}

fn message(id: &str, task: Option<&str>) -> Vec<u8> {
    let task = task.map_or(String::new(), |t| format!(r#","taskId":"{t}""#));
    format!(r#"{{"messageId":"{id}","role":"ROLE_USER","parts":[{{"text":"hi"}}]{task}}}"#)
        .into_bytes()
}

#[test]
fn a_config_received_with_its_message_is_the_one_set_after_it() {
    use ctxlog::{InlinePush, MessageIds};
    let ids = MessageIds::Idempotent;
    let (_dir, store) = common::buffered_store();
    let push = |id| InlinePush {
        config_id: id,
        config: HOOK,
    };
    // A new task's config: named by the task's id when it names none.
    let (r, config) = store
        .receive_with_push("acme", &message("m1", None), ids, false, push(None))
        .unwrap();
    let config = config.unwrap();
    assert_eq!(
        (config.config_id.as_str(), config.start_after),
        (r.task_id.as_str(), 1)
    );
    assert_eq!(store.push_configs("acme", &r.task_id).unwrap(), [config]);
    work(&store, &r, TaskState::InputRequired);
    // A follow-up's: delivered after the follow-up's event, beside the first.
    let follow = message("m2", Some(&r.task_id));
    let (again, second) = store
        .receive_with_push("acme", &follow, ids, false, push(Some("b")))
        .unwrap();
    assert_eq!((again.event, second.clone().unwrap().start_after), (3, 3));
    // What setting the config after the message would have stored.
    let (_twin_dir, twin) = common::buffered_store();
    let t = twin.receive_message("acme", &message("m1", None)).unwrap();
    twin.set_push_config("acme", &t.task_id, &t.task_id, HOOK, Some(1))
        .unwrap();
    let but_id = |c: &(String, Vec<u8>, u64, u64)| (c.1.clone(), c.2, c.3);
    assert_eq!(
        but_id(&configs(&twin, &t.task_id)[0]),
        but_id(&configs(&store, &r.task_id)[0])
    );
    let stored = store.push_configs("acme", &r.task_id).unwrap();
    assert_eq!(stored.last(), second.as_ref());
    // The message is a task event, the config is not.
    assert_eq!(store.task_progress("acme", &r.task_id).unwrap().events, 3);
    work(&store, &again, TaskState::Working);
    let version = second.unwrap().version;
    assert!(store
        .push_delivered("acme", &r.task_id, "b", version, 4)
        .unwrap());
    // A resend stores nothing: its config is the caller's to set.
    let (dup, none) = store
        .receive_with_push("acme", &follow, ids, false, push(Some("c")))
        .unwrap();
    assert!(dup.duplicate && none.is_none());
    assert_eq!(store.push_configs("acme", &r.task_id).unwrap().len(), 2);
    // A bad config id stores neither the message nor the config.
    let long = "x".repeat(ctxlog::MAX_PUSH_CONFIG_ID + 1);
    let refused =
        store.receive_with_push("acme", &message("m3", None), ids, false, push(Some(&long)));
    assert!(matches!(
        refused,
        Err(Error::InvalidParams { field: "id", .. })
    ));
    assert!(store
        .find_received("acme", &message("m3", None))
        .unwrap()
        .is_none());
}

#[test]
fn a_crash_keeps_a_received_message_without_its_config_never_the_reverse() {
    use ctxlog::{InlinePush, MessageIds};
    let dir = common::tmp();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let push = InlinePush {
        config_id: Some("a"),
        config: HOOK,
    };
    let raw = message("m1", None);
    let (r, _) = store
        .receive_with_push("acme", &raw, MessageIds::Idempotent, false, push)
        .unwrap();
    let copy = common::crash_copy(dir.path());
    let whole = Store::open(copy.path(), Options::default()).unwrap();
    assert_eq!(whole.push_configs("acme", &r.task_id).unwrap().len(), 1);
    let crashed = common::crash_copy(dir.path());
    let (seg, bytes) = common::tear_newest_segment(crashed.path(), &[]);
    // Every place the write could have stopped, from its end back to
    // before the message.
    let (mut both, mut alone) = (0, 0);
    for cut in (0..bytes.len()).rev() {
        std::fs::write(&seg, &bytes[..cut]).unwrap();
        // The last open's checkpoint knew a longer log: read it again.
        let _ = std::fs::remove_file(crashed.path().join("CHECKPOINT"));
        let Ok(reopened) = Store::open(crashed.path(), Options::default()) else {
            break;
        };
        let kept = reopened.find_received("acme", &raw).unwrap();
        let Some(kept) = kept else { break };
        assert_eq!(kept.task_id, r.task_id);
        match reopened.push_configs("acme", &r.task_id).unwrap().len() {
            1 => both += 1,
            _ => alone += 1,
        }
        reopened.close().unwrap();
    }
    // Cut inside the config: the message alone; never a config without it.
    assert!(alone > 0, "some cut keeps the message alone");
    assert_eq!(both, 0, "a cut before the end loses the config's record");
}
