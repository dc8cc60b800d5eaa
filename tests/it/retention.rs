//! Deletion and retention: gone contexts vanish from every read and listing
//! at once, stay gone across a reopen, and their ids are refused.

use crate::common;

use std::time::Duration;

use ctxlog::{Durability, Error, ListTasksQuery, Options, Store};
use serde_json::json;

fn options() -> Options {
    Options::default().durability(Durability::Buffered)
}

fn send(
    store: &Store,
    tenant: &str,
    id: &str,
    context: Option<&str>,
) -> Result<ctxlog::Receipt, Error> {
    let mut m = json!({ "messageId": id, "role": "ROLE_USER", "parts": [{ "text": "hi" }] });
    if let Some(c) = context {
        m["contextId"] = json!(c);
    }
    store.receive_message(tenant, &serde_json::to_vec(&m).unwrap())
}

fn assert_gone(store: &Store, tenant: &str, context: &str, task: &str, reason: &str) {
    assert!(matches!(
        store.last_messages(tenant, context, 10),
        Err(Error::ContextNotFound)
    ));
    assert!(matches!(
        store.context_info(tenant, context),
        Err(Error::ContextNotFound)
    ));
    assert!(matches!(
        store.get_task(tenant, task, None, true),
        Err(Error::TaskNotFound)
    ));
    assert!(store
        .list_contexts(tenant, 100, None)
        .unwrap()
        .contexts
        .iter()
        .all(|c| c.context_id != context));
    let q = ListTasksQuery {
        context_id: Some(context.into()),
        ..Default::default()
    };
    assert_eq!(store.list_tasks(tenant, &q).unwrap().total_size, 0);
    assert!(store
        .list_tasks(tenant, &ListTasksQuery::default())
        .unwrap()
        .tasks
        .iter()
        .all(|t| t.id != task));
    match send(store, tenant, "proposal", Some(context)) {
        Err(Error::ContextRejected { reason: r }) => assert!(r.contains(reason), "{r}"),
        other => panic!("expected ContextRejected ({reason}), got {other:?}"),
    }
    assert!(matches!(
        store.append_message(tenant, context, b"raw"),
        Err(Error::ContextRejected { .. })
    ));
}

#[test]
fn a_deleted_context_vanishes_everywhere_and_stays_deleted() {
    let dir = common::tmp();
    let store = Store::open(dir.path(), options()).unwrap();
    let r = send(&store, "t", "m1", Some("case-1")).unwrap();
    send(&store, "t", "m2", Some("case-2")).unwrap();
    send(&store, "u", "m1", Some("case-1")).unwrap();
    store.delete_context("t", "case-1").unwrap();
    assert_gone(&store, "t", "case-1", &r.task_id, "deleted");
    // Deleting again (a retried request) is no error, and changes nothing.
    store.delete_context("t", "case-1").unwrap();
    assert_gone(&store, "t", "case-1", &r.task_id, "deleted");
    assert!(matches!(
        store.delete_context("t", "never-made"),
        Err(Error::ContextNotFound)
    ));
    // Other contexts, and the same id under another tenant, are untouched.
    assert_eq!(store.context_info("t", "case-2").unwrap().messages, 1);
    assert_eq!(store.context_info("u", "case-1").unwrap().messages, 1);
    store.close().unwrap();

    let store = Store::open(dir.path(), options()).unwrap();
    assert_gone(&store, "t", "case-1", &r.task_id, "deleted");
    assert_eq!(
        store.list_contexts("t", 100, None).unwrap().contexts.len(),
        1
    );
    // The messageId whose context is gone is free again: a new message.
    let again = send(&store, "t", "m1", None).unwrap();
    assert!(!again.duplicate && again.new_context);
}

#[test]
fn idle_contexts_expire_under_the_retention_policy() {
    let dir = common::tmp();
    let store = Store::open(dir.path(), options()).unwrap();
    let a = send(&store, "t", "m1", Some("old-a")).unwrap();
    let b = send(&store, "t", "m2", Some("old-b")).unwrap();
    store.close().unwrap();

    // Reopened with a retention every context has outlived: all expire.
    let store = Store::open(dir.path(), options().retention(Some(Duration::ZERO))).unwrap();
    assert_gone(&store, "t", "old-a", &a.task_id, "expired");
    assert!(store
        .list_contexts("t", 100, None)
        .unwrap()
        .contexts
        .is_empty());
    // old-a was tombstoned by the refused proposal; expire_idle marks old-b.
    assert_eq!(store.expire_idle().unwrap(), 1);
    store.close().unwrap();

    // Both stay expired even with retention off: their tombstones are durable.
    let store = Store::open(dir.path(), options()).unwrap();
    assert_gone(&store, "t", "old-a", &a.task_id, "expired");
    assert_gone(&store, "t", "old-b", &b.task_id, "expired");
}

#[test]
fn a_long_retention_keeps_active_contexts() {
    let dir = common::tmp();
    let store = Store::open(
        dir.path(),
        options().retention(Some(Duration::from_secs(3600))),
    )
    .unwrap();
    let r = send(&store, "t", "m1", Some("fresh")).unwrap();
    assert_eq!(store.context_info("t", "fresh").unwrap().messages, 1);
    assert!(store.get_task("t", &r.task_id, None, false).is_ok());
    assert_eq!(store.expire_idle().unwrap(), 0);
}

/// What broke: with retention, `list_contexts` answered empty pages that
/// still carried a next-page token while the oldest contexts had expired,
/// so a client that stops at an empty page never saw the live ones.
#[test]
fn a_listing_skips_expired_contexts_and_is_empty_only_at_its_end() {
    let dir = common::tmp();
    let idle = Duration::from_millis(1500);
    let store = Store::open(dir.path(), options().retention(Some(idle))).unwrap();
    for i in 0..5 {
        send(&store, "t", &format!("old{i}"), Some(&format!("old-{i}"))).unwrap();
    }
    // Wait (bounded) until the old contexts have been idle past the policy.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while store.context_info("t", "old-4").is_ok() {
        assert!(std::time::Instant::now() < deadline, "old-4 never expired");
        std::thread::sleep(Duration::from_millis(20));
    }
    for i in 0..3 {
        send(&store, "t", &format!("new{i}"), Some(&format!("new-{i}"))).unwrap();
    }
    let mut seen = Vec::new();
    let mut token = None;
    for _ in 0..10 {
        let page = store.list_contexts("t", 2, token.as_deref()).unwrap();
        assert!(
            !page.contexts.is_empty() || page.next_page_token.is_none(),
            "an empty page with a next-page token"
        );
        seen.extend(page.contexts.into_iter().map(|c| c.context_id));
        token = page.next_page_token;
        if token.is_none() {
            break;
        }
    }
    assert_eq!(seen, ["new-0", "new-1", "new-2"]);
}
