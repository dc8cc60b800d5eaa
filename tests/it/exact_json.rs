//! What the store keeps of A2A JSON, and what it hands back.
//!
//! Three things broke here. A message with a key twice in one object
//! (`"parts"` twice, `"messageId"` twice) was checked through a
//! `serde_json::Value`, where the last key wins, and stored; every later
//! read parsed the bytes strictly and failed, so `get_task`, `events_since`
//! and the whole tenant's `list_tasks` answered `Corrupt`, also after a
//! reopen. Stored objects were re-encoded on the way out (numbers through
//! `f64`, keys reordered). And the idempotency digest read numbers through
//! `f64`, so a resend whose number differed in its 20th digit was taken for
//! the same message.

use crate::common;

use std::fs;

use ctxlog::{Durability, Error, ListTasksQuery, Options, Store};
use proptest::prelude::*;

fn store() -> (tempfile::TempDir, Store) {
    common::buffered_store()
}

fn reopen(dir: &tempfile::TempDir, store: Store) -> Store {
    store.close().unwrap();
    let options = Options::default().durability(Durability::Buffered);
    Store::open(dir.path(), options).unwrap()
}

fn receive(store: &Store, text: &str) -> Result<ctxlog::Receipt, Error> {
    store.receive_message("t", text.as_bytes())
}

fn all_tasks(store: &Store) -> ctxlog::a2a::ListTasksResponse {
    store.list_tasks("t", &ListTasksQuery::default()).unwrap()
}

#[test]
fn a_key_twice_in_any_object_is_refused_and_nothing_is_stored() {
    let (dir, store) = store();
    receive(
        &store,
        r#"{"messageId":"ok","contextId":"c2","role":"ROLE_USER","parts":[{"text":"a"}]}"#,
    )
    .unwrap();
    for (text, key) in [
        (
            r#"{"messageId":"d","contextId":"c2","role":"ROLE_USER","parts":[{"text":"a"}],"parts":[{"text":"b"}]}"#,
            "parts",
        ),
        (
            r#"{"messageId":"d","messageId":"e","contextId":"c2","role":"ROLE_USER","parts":[{"text":"a"}]}"#,
            "messageId",
        ),
        (
            r#"{"messageId":"d","contextId":"c3","role":"ROLE_USER","parts":[{"text":"a","metadata":{"k":1,"k":2}}]}"#,
            "k",
        ),
        (
            r#"{"messageId":"d","contextId":"c3","role":"ROLE_USER","parts":[{"text":"a"}],"metadata":{"x":{"y":[{"z":0,"\u007a":1}]}}}"#,
            "z",
        ),
    ] {
        match receive(&store, text) {
            Err(e @ Error::InvalidParams { .. }) => {
                assert!(e.to_string().contains(&format!("{key:?}")), "{e}");
            }
            other => panic!("{text}: {other:?}"),
        }
    }
    // Nothing of them was stored, and everything reads, before and after a reopen.
    let check = |store: &Store| {
        assert_eq!(store.last_messages("t", "c2", usize::MAX).unwrap().len(), 1);
        assert!(matches!(
            store.context_info("t", "c3"),
            Err(Error::ContextNotFound)
        ));
        let listed = all_tasks(store);
        assert_eq!((listed.tasks.len(), listed.damaged.len()), (1, 0));
        let id = &listed.tasks[0].id;
        store.get_task("t", id, None, true).unwrap();
        store.events_since("t", id, 0).unwrap();
        store.cancel_task("t", id).unwrap();
    };
    check(&store);
    let store = reopen(&dir, store);
    assert_eq!(all_tasks(&store).tasks.len(), 1);
    // The messageId of a refused message was never taken.
    let r = receive(
        &store,
        r#"{"messageId":"d","contextId":"c2","role":"ROLE_USER","parts":[{"text":"a"}]}"#,
    )
    .unwrap();
    assert!(!r.duplicate);
}

#[test]
fn an_event_with_a_key_twice_is_refused() {
    let (_dir, store) = store();
    let r = receive(
        &store,
        r#"{"messageId":"m","role":"ROLE_USER","parts":[{"text":"a"}]}"#,
    )
    .unwrap();
    let (t, c) = (&r.task_id, &r.context_id);
    for event in [
        format!(
            r#"{{"statusUpdate":{{"taskId":"{t}","contextId":"{c}","status":{{"state":"TASK_STATE_WORKING","state":"TASK_STATE_COMPLETED"}}}}}}"#
        ),
        format!(
            r#"{{"artifactUpdate":{{"taskId":"{t}","contextId":"{c}","artifact":{{"artifactId":"a","parts":[{{"data":{{"n":1,"n":2}}}}]}}}}}}"#
        ),
    ] {
        match store.apply_event("t", event.as_bytes()) {
            Err(e @ Error::InvalidParams { .. }) => assert!(e.to_string().contains("repeats")),
            other => panic!("{event}: {other:?}"),
        }
    }
    assert_eq!(store.events_since("t", t, 0).unwrap().len(), 1);
}

#[test]
fn one_unreadable_task_never_hides_the_others_from_a_listing() {
    let dir = common::tmp();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let mut ids = Vec::new();
    for i in 0..5 {
        let text = format!(
            r#"{{"messageId":"m{i}","contextId":"c{i}","role":"ROLE_USER","parts":[{{"text":"needle-{i}"}}]}}"#
        );
        ids.push(receive(&store, &text).unwrap().task_id);
    }
    store.close().unwrap();
    // Damage the bytes of task 2's message on disk.
    let seg = common::segment_files(dir.path()).pop().unwrap();
    let mut bytes = fs::read(&seg).unwrap();
    let at = bytes.windows(8).position(|w| w == b"needle-2").unwrap();
    bytes[at] ^= 0x20;
    fs::write(&seg, bytes).unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let listed = all_tasks(&store);
    assert_eq!(listed.tasks.len(), 4);
    assert_eq!(listed.total_size, 5);
    assert_eq!(listed.damaged.len(), 1);
    assert_eq!(listed.damaged[0].task_id, ids[2]);
    assert!(
        listed.damaged[0].reason.contains("segment"),
        "{:?}",
        listed.damaged
    );
    assert!(matches!(
        store.get_task("t", &ids[2], None, false),
        Err(Error::Corrupt { .. })
    ));
    store.get_task("t", &ids[3], None, false).unwrap();
}

#[test]
fn a_resend_whose_numbers_differ_is_a_conflict_and_one_spelled_otherwise_is_not() {
    let (_dir, store) = store();
    // Past u64, so a parser that reads numbers as f64 (53 bits) would take
    // the two for one.
    let first = r#"{"messageId":"num","role":"ROLE_USER","parts":[{"data":{"n":123456789012345678901234567890}}]}"#;
    let r = receive(&store, first).unwrap();
    let differs = first.replace("890", "891");
    assert!(matches!(
        receive(&store, &differs),
        Err(Error::IdempotencyConflict { .. })
    ));
    let decimal = first.replace("890}", "890.0}");
    assert!(matches!(
        receive(&store, &decimal),
        Err(Error::IdempotencyConflict { .. })
    ));
    // White space, key order and string escapes are not content.
    let respelled = r#" { "role" : "ROLE_USER", "parts":[{"data":{"n":123456789012345678901234567890}}],
        "messageId":"n\u0075m" } "#;
    let again = receive(&store, respelled).unwrap();
    assert!(again.duplicate);
    assert_eq!(again.task_id, r.task_id);
}

/// A JSON value as text: big integers, long decimals, exponents, escapes
/// (of quotes, slashes, non-ASCII and astral characters), and objects whose
/// keys are out of order.
fn json_text() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        "-?[1-9][0-9]{18,40}",
        "-?(0|[1-9][0-9]{0,5})\\.[0-9]{10,30}",
        "-?[1-9]\\.[0-9]{1,5}[eE][+-]?[0-9]{1,2}",
        Just("-0".to_string()),
        Just("0.10".to_string()),
        Just("true".to_string()),
        Just("null".to_string()),
        Just(r#""\u00e9\/\"\ud83d\ude00\t""#.to_string()),
        "[a-z ]{0,8}".prop_map(|s| format!("\"{s}\"")),
        any::<String>().prop_map(|s| serde_json::to_string(&s).unwrap()),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(", "))),
            prop::collection::btree_map("[a-z]{1,4}", inner, 0..4).prop_map(|m| {
                let members: Vec<String> = m
                    .iter()
                    .rev()
                    .map(|(k, v)| format!("\"{k}\" : {v}"))
                    .collect();
                format!("{{ {} }}", members.join(" ,"))
            }),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever was received comes back byte for byte: from get_task,
    /// events_since and last_messages, and inside a status and an artifact
    /// chunk the agent sent as text, before and after a reopen.
    #[test]
    fn stored_objects_come_back_byte_for_byte(
        meta in json_text(),
        data in json_text(),
        extra in json_text(),
    ) {
        let (dir, store) = store();
        let msg = format!(
            r#"{{"zeta":{extra},"role":"ROLE_USER","metadata":{{"m":{meta}}},"parts":[{{"data":{{"v":{data}}}}},{{"text":"caf\u00e9"}}],"messageId":"m1"}}"#
        );
        let r = receive(&store, &msg).unwrap();
        let reply = format!(
            r#"{{"parts":[{{"data":{{"v":{data}}}}}],"messageId":"s1","role":"ROLE_AGENT","metadata":{{"m":{meta}}}}}"#
        );
        let status = format!(
            r#"{{"timestamp":"2026-01-01T00:00:00.000Z","message":{reply},"state":"TASK_STATE_WORKING","x":{extra}}}"#
        );
        let chunk = format!(r#"{{"parts":[{{"data":{{"v":{data}}}}}],"artifactId":"a","q":{meta}}}"#);
        let (t, c) = (&r.task_id, &r.context_id);
        store.apply_event("t", format!(
            r#"{{"statusUpdate":{{"taskId":"{t}","contextId":"{c}","status":{status}}}}}"#
        ).as_bytes()).unwrap();
        store.apply_event("t", format!(
            r#"{{"artifactUpdate":{{"taskId":"{t}","contextId":"{c}","artifact":{chunk}}}}}"#
        ).as_bytes()).unwrap();
        let store = reopen(&dir, store);
        let task = store.get_task("t", t, None, true).unwrap();
        prop_assert_eq!(serde_json::to_string(&task.history[0]).unwrap(), msg.clone());
        prop_assert_eq!(serde_json::to_string(&task.history[1]).unwrap(), reply.clone());
        prop_assert_eq!(serde_json::to_string(&task.status).unwrap(), status.clone());
        let artifacts = task.artifacts.unwrap();
        prop_assert_eq!(serde_json::to_string(&artifacts[0]).unwrap(), chunk.clone());
        let events = store.events_since("t", t, 0).unwrap();
        prop_assert_eq!(serde_json::to_string(events[0].1.message.as_ref().unwrap()).unwrap(), msg.clone());
        let event = serde_json::to_string(&events[1].1).unwrap();
        prop_assert!(event.contains(&status), "{}", event);
        let event = serde_json::to_string(&events[2].1).unwrap();
        prop_assert!(event.contains(&chunk), "{}", event);
        let raw = store.last_messages("t", c, usize::MAX).unwrap();
        prop_assert_eq!(&raw[0].raw, msg.as_bytes());
        prop_assert_eq!(&raw[1].raw, reply.as_bytes());
        // And the whole task, as JSON, still parses.
        let whole = serde_json::to_string(&task.history).unwrap();
        prop_assert!(serde_json::from_str::<serde_json::Value>(&whole).is_ok());
    }
}

#[test]
fn chunks_of_one_artifact_are_joined_around_their_parts_as_stored() {
    let (_dir, store) = store();
    let r = receive(
        &store,
        r#"{"messageId":"m","role":"ROLE_USER","parts":[{"text":"a"}]}"#,
    )
    .unwrap();
    let (t, c) = (&r.task_id, &r.context_id);
    let chunks = [
        (
            r#"{"artifactId":"a","name":"n1","parts":[{"data":{"big":1e400000}}]}"#,
            false,
        ),
        (
            r#"{"artifactId":"a","parts":[{"text":"café"},{"data":[1.50]}],"name":"n2","description":null}"#,
            true,
        ),
    ];
    let first = chunks[0]
        .0
        .replace("1e400000", "123456789012345678901234567890");
    for (i, (chunk, append)) in chunks.iter().enumerate() {
        let chunk = if i == 0 {
            first.clone()
        } else {
            chunk.to_string()
        };
        store
            .apply_event(
                "t",
                format!(
                    r#"{{"artifactUpdate":{{"taskId":"{t}","contextId":"{c}","artifact":{chunk},"append":{append}}}}}"#
                )
                .as_bytes(),
            )
            .unwrap();
    }
    let task = store.get_task("t", t, Some(0), true).unwrap();
    assert_eq!(
        serde_json::to_string(&task.artifacts.unwrap()[0]).unwrap(),
        r#"{"artifactId":"a","name":"n2","parts":[{"data":{"big":123456789012345678901234567890}},{"text":"café"},{"data":[1.50]}]}"#
    );
}

// The binary is built only with the `cli` feature.
#[cfg(feature = "cli")]
#[test]
fn the_command_line_prints_stored_messages_as_they_were_stored() {
    let dir = common::tmp();
    let msg = r#"{"role":"ROLE_USER","messageId":"m","parts":[{"data":{"n":12345678901234567890123,"s":"é"}}]}"#;
    let run = |args: &[&str], input: &str| {
        use std::io::Write;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ctxlog"))
            .arg("--dir")
            .arg(dir.path())
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let sent: serde_json::Value = serde_json::from_str(&run(&["send"], msg)).unwrap();
    let history = run(&["history", sent["contextId"].as_str().unwrap()], "");
    assert!(history.contains(msg), "{history}");
    let events = run(&["events", sent["taskId"].as_str().unwrap()], "");
    assert!(events.contains(msg), "{events}");
    let task = run(&["task", sent["taskId"].as_str().unwrap()], "");
    assert!(task.contains(msg), "{task}");
}

/// The members the A2A proto defines, by object.
const MESSAGE: &[&str] = &[
    "messageId",
    "contextId",
    "taskId",
    "role",
    "parts",
    "metadata",
    "extensions",
    "referenceTaskIds",
];
const PART: &[&str] = &[
    "text",
    "raw",
    "url",
    "data",
    "metadata",
    "filename",
    "mediaType",
];

/// Checks a message in its wire form: only the proto's members, in the
/// message and in each part (what `metadata` and `data` hold is free).
fn spec_form(message: &serde_json::Value) -> Result<(), TestCaseError> {
    let object = message.as_object().unwrap();
    for key in object.keys() {
        prop_assert!(MESSAGE.contains(&key.as_str()), "message member {key}");
    }
    for part in object["parts"].as_array().unwrap() {
        for key in part.as_object().unwrap().keys() {
            prop_assert!(PART.contains(&key.as_str()), "part member {key}");
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A stored message with members the proto does not define, at the top
    /// or in a part, keeps them (its bytes come back as sent) but its wire
    /// form has none, and one without any comes back byte for byte.
    #[test]
    fn the_wire_form_of_a_stored_message_has_only_the_protos_members(
        top in proptest::collection::btree_map("x[a-zA-Z]{0,6}", 0..4u8, 0..3),
        in_part in proptest::collection::btree_map("y[a-zA-Z]{0,6}", 0..4u8, 0..3),
        metadata in proptest::option::of(proptest::collection::btree_map("[a-z]{1,5}", 0..9u8, 0..3)),
        text in "[a-z ]{0,12}",
    ) {
        let mut m = serde_json::json!({
            "messageId": "m", "role": "ROLE_USER", "parts": [{ "text": text }]
        });
        for (k, v) in &top {
            m[k] = (*v).into();
        }
        for (k, v) in &in_part {
            m["parts"][0][k] = (*v).into();
        }
        if let Some(meta) = &metadata {
            // Anything goes inside metadata: it is the proto's Struct.
            m["metadata"] = serde_json::to_value(meta).unwrap();
            m["parts"][0]["metadata"] = serde_json::json!({ "xUnknownLooking": true });
        }
        let text = m.to_string();
        let (_dir, store) = store();
        let r = receive(&store, &text).unwrap();
        let task = store.get_task("t", &r.task_id, None, false).unwrap();
        prop_assert_eq!(task.history[0].raw_json(), Some(text.as_str()));
        let wire = serde_json::to_value(task.into_wire()).unwrap();
        let sent = &wire["history"][0];
        spec_form(sent)?;
        if top.is_empty() && in_part.is_empty() {
            prop_assert_eq!(sent, &m);
        } else {
            prop_assert_eq!(&sent["parts"][0]["text"], &m["parts"][0]["text"]);
            prop_assert_eq!(&sent.get("metadata"), &m.get("metadata"));
        }
        // The events a stream sends, too.
        for (_, event) in store.events_since("t", &r.task_id, 0).unwrap() {
            let event = serde_json::to_value(event.into_wire()).unwrap();
            spec_form(&event["message"])?;
        }
    }
}
