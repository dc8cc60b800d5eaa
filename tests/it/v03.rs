//! Messages received in A2A v0.3's form: kept as received, read as v1.0 by
//! the task model, recognised when resent in either form, and the same
//! after a reopen, a whole-log replay and an export and import.

use ctxlog::render::Budget;
use ctxlog::{Error, ItemKind, MessageIds, Options, Store};

const V03: &[u8] = br#"{"kind":"message","messageId":"m1","role":"user","contextId":"case-1","parts":[{"kind":"text","text":"Refund order 123"},{"kind":"file","file":{"uri":"https://files.example/receipt.pdf","mimeType":"application/pdf","name":"receipt.pdf"}}]}"#;

fn check(store: &Store, task_id: &str) {
    let task = store.get_task("acme", task_id, None, false).unwrap();
    let message = &task.history[0];
    assert_eq!(message.message_id, "m1");
    assert_eq!(message.role, ctxlog::a2a::Role::User);
    assert_eq!(message.parts[0].text.as_deref(), Some("Refund order 123"));
    assert_eq!(
        message.parts[1].url.as_deref(),
        Some("https://files.example/receipt.pdf")
    );
    assert_eq!(message.parts[1].filename.as_deref(), Some("receipt.pdf"));
    assert_eq!(
        message.parts[1].media_type.as_deref(),
        Some("application/pdf")
    );
    // What the library hands back as stored is what was received.
    let last = store.last_messages("acme", "case-1", 1).unwrap();
    assert_eq!(last[0].raw, V03);
    // The rendered history shows both parts.
    let later = store
        .receive_message(
            "acme",
            format!(
                r#"{{"messageId":"m-{}","role":"ROLE_USER","taskId":"{task_id}","parts":[{{"text":"?"}}]}}"#,
                task.history.len()
            )
            .as_bytes(),
        )
        .unwrap();
    let framed = store
        .render_history("acme", "case-1", Some(later.seq), Budget::default())
        .unwrap();
    assert!(
        framed.text.contains("| Refund order 123"),
        "{}",
        framed.text
    );
    assert!(framed.text.contains("[file receipt.pdf (application/pdf)]"));
}

#[test]
fn a_v03_message_is_kept_as_received_and_read_as_v1() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let r = store
        .receive_v03_message("acme", V03, MessageIds::Idempotent)
        .unwrap();
    assert!(r.new_task && !r.duplicate);
    check(&store, &r.task_id);
    store.close().unwrap();
    // Reopened from the checkpoint, then from the whole log.
    let store = Store::open(dir.path(), Options::default()).unwrap();
    assert_eq!(
        store.last_messages("acme", "case-1", 2).unwrap()[0].raw,
        V03
    );
    store.close().unwrap();
    for f in std::fs::read_dir(dir.path()).unwrap() {
        let path = f.unwrap().path();
        if path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("CHECKPOINT")
        {
            std::fs::remove_file(path).unwrap();
        }
    }
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let task = store.get_task("acme", &r.task_id, None, false).unwrap();
    assert_eq!(
        task.history[0].parts[0].text.as_deref(),
        Some("Refund order 123")
    );
    assert_eq!(
        store.last_messages("acme", "case-1", 3).unwrap()[0].raw,
        V03
    );
}

#[test]
fn a_resend_is_recognised_in_either_form() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    assert!(store.find_received_v03("acme", V03).unwrap().is_none());
    let r = store
        .receive_v03_message("acme", V03, MessageIds::Idempotent)
        .unwrap();
    let again = store
        .receive_v03_message("acme", V03, MessageIds::Idempotent)
        .unwrap();
    assert!(again.duplicate && again.task_id == r.task_id);
    assert!(
        store
            .find_received_v03("acme", V03)
            .unwrap()
            .unwrap()
            .duplicate
    );
    // The v1.0 form of the same message (without kinds, members in another
    // order) is its resend; other content under its messageId is not.
    let v1 = br#"{"messageId":"m1","contextId":"case-1","role":"ROLE_USER","parts":[{"text":"Refund order 123"},{"url":"https://files.example/receipt.pdf","filename":"receipt.pdf","mediaType":"application/pdf"}]}"#;
    assert!(store.receive_message("acme", v1).unwrap().duplicate);
    let changed = br#"{"kind":"message","messageId":"m1","role":"user","contextId":"case-1","parts":[{"kind":"text","text":"Refund order 456"}]}"#;
    assert!(matches!(
        store.receive_v03_message("acme", changed, MessageIds::Idempotent),
        Err(Error::IdempotencyConflict { .. })
    ));
}

#[test]
fn the_v1_receive_refuses_v03_and_the_v03_receive_checks_its_form() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    match store.receive_message("acme", V03) {
        Err(Error::InvalidParams { reason, .. }) => assert!(reason.contains("v0.3"), "{reason}"),
        other => panic!("{other:?}"),
    }
    for (bad, says) in [
        (
            &br#"{"messageId":"m","role":"user","parts":[{"kind":"image"}]}"#[..],
            "parts[0]",
        ),
        (
            br#"{"messageId":"m","role":"user","role":"user","parts":[]}"#,
            "role",
        ),
        (
            br#"{"messageId":"m","role":"agent","parts":[{"kind":"text","text":"x"}]}"#,
            "ROLE_USER",
        ),
        (
            br#"{"messageId":"","role":"user","parts":[{"kind":"text","text":"x"}]}"#,
            "messageId",
        ),
        (b"[1]", "object"),
    ] {
        match store.receive_v03_message("acme", bad, MessageIds::Idempotent) {
            Err(Error::InvalidParams { field, reason }) => {
                assert!(format!("{field}: {reason}").contains(says), "{reason}")
            }
            other => panic!("{}: {other:?}", String::from_utf8_lossy(bad)),
        }
    }
    assert!(store
        .list_contexts("acme", 10, None)
        .unwrap()
        .contexts
        .is_empty());
}

#[test]
fn an_export_gives_the_v03_bytes_and_imports_again() {
    let dir = tempfile::tempdir().unwrap();
    let copy_dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let r = store
        .receive_v03_message("acme", V03, MessageIds::Idempotent)
        .unwrap();
    let items = store.export_context("acme", "case-1").unwrap();
    match &items[0].kind {
        ItemKind::Received { message, .. } => assert_eq!(message, V03),
        other => panic!("{other:?}"),
    }
    let copy = Store::open(copy_dir.path(), Options::default()).unwrap();
    for item in &items {
        copy.import_item(item).unwrap();
    }
    assert_eq!(copy.export_context("acme", "case-1").unwrap(), items);
    let task = copy.get_task("acme", &r.task_id, None, false).unwrap();
    assert_eq!(task.history[0].message_id, "m1");
    // The imported message is recognised as received.
    assert!(
        copy.find_received_v03("acme", V03)
            .unwrap()
            .unwrap()
            .duplicate
    );
}

#[test]
fn a_message_in_v03_http_json_form_is_taken_too() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let proto = br#"{"messageId":"m2","role":"ROLE_USER","content":[{"text":"hello"},{"data":{"data":{"order":123}}}]}"#;
    let r = store
        .receive_v03_message("acme", proto, MessageIds::Idempotent)
        .unwrap();
    let task = store.get_task("acme", &r.task_id, None, false).unwrap();
    let parts = &task.history[0].parts;
    assert_eq!(parts[0].text.as_deref(), Some("hello"));
    assert_eq!(parts[1].data, Some(serde_json::json!({"order": 123})));
    assert_eq!(
        store.last_messages("acme", &r.context_id, 1).unwrap()[0].raw,
        proto
    );
    // Its JSON-RPC form is the same message.
    let rpc = br#"{"kind":"message","messageId":"m2","role":"user","parts":[{"kind":"text","text":"hello"},{"kind":"data","data":{"order":123}}]}"#;
    assert!(
        store
            .find_received_v03("acme", rpc)
            .unwrap()
            .unwrap()
            .duplicate
    );
}

#[test]
fn a_tasks_events_read_its_v03_message_as_v1() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let r = store
        .receive_v03_message("acme", V03, MessageIds::Idempotent)
        .unwrap();
    let events = store.events_since("acme", &r.task_id, 0).unwrap();
    let message = events[0].1.message.as_ref().expect("the message event");
    assert_eq!(message.message_id, "m1");
    assert_eq!(message.role, ctxlog::a2a::Role::User);
    assert_eq!(message.parts[0].text.as_deref(), Some("Refund order 123"));
}

#[test]
fn a_v1_message_that_mentions_kind_or_content_reads_as_sent() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    // In its values, and as members v1.0 does not define.
    let sent = r#"{"messageId":"m1","role":"ROLE_USER","kind":"note","content":"y","metadata":{"kind":"note","content":1},"parts":[{"data":{"kind":"text","content":"x"}}]}"#;
    let r = store.receive_message("acme", sent.as_bytes()).unwrap();
    let task = store.get_task("acme", &r.task_id, None, false).unwrap();
    assert_eq!(task.history[0].raw_json(), Some(sent));
    assert_eq!(task.history[0].role, ctxlog::a2a::Role::User);
    let events = store.events_since("acme", &r.task_id, 0).unwrap();
    assert_eq!(events[0].1.message.as_ref().unwrap().raw_json(), Some(sent));
}
