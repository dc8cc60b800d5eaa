//! The store's API: raw bytes kept byte for byte, tenants isolated, limits
//! enforced, listings paged, every durability round-tripping through reopen.

use crate::common;

use std::sync::Arc;

use common::{body, tmp};
use ctxlog::{Durability, Error, Options, Store, MAX_CONTEXT_ID_BYTES};
use proptest::prelude::*;

#[test]
fn messages_come_back_byte_for_byte_after_reopen() {
    let dir = tmp();
    let raws: Vec<Vec<u8>> = vec![
        br#"{"messageId":"m1","metadata":{"unknown":{"nested":[1,2,3]}},"extensions":["x"]}"#
            .to_vec(),
        vec![0, 159, 146, 150, 255, b'\n'],
        Vec::new(),
        "héllo\u{301} 👋".as_bytes().to_vec(),
    ];
    let context = format!("{}\0 ", "ctx/é".repeat(10));
    let store = Store::open(dir.path(), Options::default()).unwrap();
    for (i, raw) in raws.iter().enumerate() {
        let a = store.append_message("acme", &context, raw).unwrap();
        assert_eq!(a.seq, i as u64);
        assert_eq!(a.opened_context, i == 0);
    }
    assert_eq!(messages(&store, "acme", &context), raws);
    store.close().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    assert_eq!(messages(&store, "acme", &context), raws);
    let info = store.context_info("acme", &context).unwrap();
    assert_eq!(info.context_id, context);
    assert_eq!(info.messages, raws.len() as u64);
    assert!(info.first_activity_ms <= info.last_activity_ms);
}

fn messages(store: &Store, tenant: &str, context: &str) -> Vec<Vec<u8>> {
    store
        .last_messages(tenant, context, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|m| m.raw)
        .collect()
}

#[test]
fn last_n_returns_the_newest_in_order() {
    let dir = tmp();
    let store = Store::open(
        dir.path(),
        Options::default().durability(Durability::Buffered),
    )
    .unwrap();
    for i in 0..50 {
        store.append_message("t", "c", &body(i, 40)).unwrap();
    }
    let last = store.last_messages("t", "c", 20).unwrap();
    assert_eq!(last.len(), 20);
    for (j, m) in last.iter().enumerate() {
        assert_eq!(m.seq, 30 + j as u64);
        assert_eq!(m.raw, body(30 + j, 40));
    }
    assert!(store.last_messages("t", "c", 0).unwrap().is_empty());
    assert_eq!(store.last_messages("t", "c", 500).unwrap().len(), 50);
}

#[test]
fn another_tenant_sees_exactly_what_a_missing_context_shows() {
    let dir = tmp();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    store.append_message("alice", "case-1", b"secret").unwrap();
    let other = store.last_messages("bob", "case-1", 10).unwrap_err();
    let missing = store.last_messages("bob", "never-used", 10).unwrap_err();
    assert!(matches!(other, Error::ContextNotFound));
    assert_eq!(other.to_string(), missing.to_string());
    assert!(matches!(
        store.context_info("bob", "case-1"),
        Err(Error::ContextNotFound)
    ));
    assert!(store
        .list_contexts("bob", 10, None)
        .unwrap()
        .contexts
        .is_empty());
    // Bob may use the same id: it is his own, separate context.
    let a = store.append_message("bob", "case-1", b"bob's").unwrap();
    assert!(a.opened_context);
    assert_eq!(
        messages(&store, "alice", "case-1"),
        vec![b"secret".to_vec()]
    );
    assert_eq!(messages(&store, "bob", "case-1"), vec![b"bob's".to_vec()]);
}

#[test]
fn ids_at_and_past_the_limits() {
    let dir = tmp();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let longest = "é".repeat(MAX_CONTEXT_ID_BYTES / 2);
    store.append_message("t", &longest, b"x").unwrap();
    assert_eq!(
        store.list_contexts("t", 10, None).unwrap().contexts[0].context_id,
        longest
    );
    let too_long = format!("{longest}x");
    let e = store.append_message("t", &too_long, b"x").unwrap_err();
    assert!(matches!(e, Error::ContextRejected { .. }), "{e}");
    assert!(e.to_string().contains("4096"), "{e}");
    assert!(matches!(
        store.append_message("t", "", b"x"),
        Err(Error::ContextRejected { .. })
    ));
}

#[test]
fn an_oversized_message_is_refused_and_stores_nothing() {
    let dir = tmp();
    let store = Store::open(dir.path(), Options::default().max_record_bytes(1024)).unwrap();
    let e = store.append_message("t", "c", &[7u8; 2000]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidParams {
                field: "message",
                ..
            }
        ),
        "{e}"
    );
    assert!(matches!(
        store.context_info("t", "c"),
        Err(Error::ContextNotFound)
    ));
    assert!(
        e.to_string().contains("raise Options::max_record_bytes"),
        "{e}"
    );
    store.append_message("t", "c", &[7u8; 500]).unwrap();
    assert_eq!(store.context_info("t", "c").unwrap().messages, 1);
    // At the most a record may hold, the error does not send the caller
    // to raise the limit.
    let dir = tmp();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let big = vec![7u8; ctxlog::MAX_RECORD_BYTES as usize];
    let e = store.append_message("t", "c", &big).unwrap_err();
    assert!(
        e.to_string()
            .contains("16 MiB is the most a record may hold"),
        "{e}"
    );
    assert!(!e.to_string().contains("raise"), "{e}");
}

#[test]
fn invalid_options_are_refused() {
    let dir = tmp();
    for options in [
        Options::default().segment_bytes(100),
        Options::default().max_record_bytes(1),
        Options::default().max_record_bytes(u32::MAX),
    ] {
        assert!(matches!(
            Store::open(dir.path(), options),
            Err(Error::InvalidParams { .. })
        ));
    }
}

#[test]
fn contexts_are_listed_in_pages_with_their_original_ids() {
    let dir = tmp();
    let store = Store::open(
        dir.path(),
        Options::default().durability(Durability::Buffered),
    )
    .unwrap();
    let ids: Vec<String> = (0..23).map(|i| format!("ctx {i} / ü")).collect();
    for id in &ids {
        store.append_message("t", id, b"m").unwrap();
        store.append_message("other", id, b"m").unwrap();
    }
    // The first page before a close, the rest after the reopen (which
    // loads the checkpoint and numbers the contexts afresh): the token
    // still resumes right after the first page.
    let first = store.list_contexts("t", 10, None).unwrap();
    let mut token = first.next_page_token;
    let mut listed: Vec<_> = first.contexts;
    store.close().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    loop {
        let page = store.list_contexts("t", 10, token.as_deref()).unwrap();
        assert!(page.contexts.len() <= 10);
        listed.extend(page.contexts);
        match page.next_page_token {
            Some(t) => token = Some(t),
            None => break,
        }
    }
    // In order of first activity, then key (many share a millisecond).
    let order: Vec<_> = listed
        .iter()
        .map(|c| (c.first_activity_ms, c.key))
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    let seen: Vec<String> = listed.into_iter().map(|c| c.context_id).collect();
    let mut sorted_seen = seen.clone();
    sorted_seen.sort();
    let mut sorted_ids = ids.clone();
    sorted_ids.sort();
    assert_eq!(sorted_seen, sorted_ids, "every context exactly once");
    assert!(matches!(
        store.list_contexts("t", 0, None),
        Err(Error::InvalidParams {
            field: "page_size",
            ..
        })
    ));
    assert!(matches!(
        store.list_contexts("t", 10, Some("not-a-token")),
        Err(Error::InvalidParams {
            field: "page_token",
            ..
        })
    ));
}

#[test]
fn every_durability_round_trips_through_reopen() {
    for durability in [
        Durability::Sync,
        Durability::GroupCommit,
        Durability::Buffered,
    ] {
        let dir = tmp();
        let options = Options::default()
            .durability(durability)
            .segment_bytes(8192);
        let store = Store::open(dir.path(), options.clone()).unwrap();
        for i in 0..200 {
            store
                .append_message("t", &format!("c{}", i % 7), &body(i, 100))
                .unwrap();
        }
        store.close().unwrap();
        let store = Store::open(dir.path(), options).unwrap();
        assert_eq!(store.open_report().records, 200, "{durability:?}");
        assert!(store.open_report().segments > 1, "{durability:?}");
        for c in 0..7 {
            let got = messages(&store, "t", &format!("c{c}"));
            let want: Vec<Vec<u8>> = (0..200)
                .filter(|i| i % 7 == c)
                .map(|i| body(i, 100))
                .collect();
            assert_eq!(got, want, "{durability:?}");
        }
    }
}

#[test]
fn concurrent_group_commit_appenders_lose_nothing() {
    let dir = tmp();
    let options = Options::default()
        .durability(Durability::GroupCommit)
        .segment_bytes(64 * 1024);
    let store = Arc::new(Store::open(dir.path(), options.clone()).unwrap());
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                for i in 0..50 {
                    let a = store
                        .append_message("t", &format!("c{}", t % 4), &body(t * 1000 + i, 200))
                        .unwrap();
                    // A context's records are numbered in the order they return.
                    assert!(a.seq < 100);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    drop(store);
    let store = Store::open(dir.path(), options).unwrap();
    assert_eq!(store.open_report().records, 400);
    for c in 0..4 {
        let got = store
            .last_messages("t", &format!("c{c}"), usize::MAX)
            .unwrap();
        assert_eq!(got.len(), 100);
        for (j, m) in got.iter().enumerate() {
            assert_eq!(m.seq, j as u64);
        }
        // Each thread's own appends stay in the order it made them.
        for t in [c, c + 4] {
            let mine: Vec<Vec<u8>> = got
                .iter()
                .map(|m| m.raw.clone())
                .filter(|r| message_number(r) / 1000 == t)
                .collect();
            let want: Vec<Vec<u8>> = (0..50).map(|i| body(t * 1000 + i, 200)).collect();
            assert_eq!(mine, want);
        }
    }
}

/// The number `n` that `body(n, _)` wrote into a message.
fn message_number(raw: &[u8]) -> usize {
    let text = std::str::from_utf8(raw).unwrap();
    let rest = text.strip_prefix("{\"messageId\":\"m").unwrap();
    rest[..rest.find('"').unwrap()].parse().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Random appends over a few tenants and contexts, with reopens at random
    /// points, always read back exactly as a plain in-memory model says.
    #[test]
    fn the_store_matches_a_model_across_reopens(
        ops in proptest::collection::vec((0u8..3, 0u8..4, proptest::collection::vec(any::<u8>(), 0..64), any::<bool>()), 1..60)
    ) {
        let dir = tmp();
        let options = Options::default().durability(Durability::Buffered).segment_bytes(4096);
        let mut store = Store::open(dir.path(), options.clone()).unwrap();
        let mut model: std::collections::BTreeMap<(String, String), Vec<Vec<u8>>> = Default::default();
        for (tenant, context, raw, reopen) in ops {
            let (tenant, context) = (format!("t{tenant}"), format!("c{context}"));
            store.append_message(&tenant, &context, &raw).unwrap();
            model.entry((tenant, context)).or_default().push(raw);
            if reopen {
                store.close().unwrap();
                store = Store::open(dir.path(), options.clone()).unwrap();
            }
            for ((t, c), want) in &model {
                prop_assert_eq!(&messages(&store, t, c), want);
            }
        }
    }
}

#[test]
fn a_store_is_made_only_where_no_other_files_live() {
    // A directory of someone else's files (a source checkout, a home) is
    // refused, and left as it was; an empty one, a missing one and one a
    // creation cut short (its lock, a temporary identity) are taken.
    let tmp = tmp();
    let theirs = tmp.path().join("checkout");
    std::fs::create_dir_all(&theirs).unwrap();
    std::fs::write(theirs.join("Cargo.toml"), b"[package]").unwrap();
    let err = Store::open(&theirs, Options::default()).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidParams { field: "dir", .. }),
        "{err}"
    );
    assert!(err.to_string().contains("Cargo.toml"), "{err}");
    let left: Vec<_> = std::fs::read_dir(&theirs).unwrap().collect();
    assert_eq!(left.len(), 1, "nothing was written there");
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    Store::open(&empty, Options::default())
        .unwrap()
        .close()
        .unwrap();
    Store::open(tmp.path().join("missing"), Options::default())
        .unwrap()
        .close()
        .unwrap();
    let cut = tmp.path().join("cut");
    std::fs::create_dir_all(&cut).unwrap();
    std::fs::write(cut.join("LOCK"), b"").unwrap();
    std::fs::write(cut.join("IDENTITY.tmp"), b"half").unwrap();
    Store::open(&cut, Options::default())
        .unwrap()
        .close()
        .unwrap();
    // A store, with files of its own beside (a checkpoint, a manifest), is
    // opened as ever.
    std::fs::write(empty.join("notes.txt"), b"the operator's").unwrap();
    Store::open(&empty, Options::default())
        .unwrap()
        .close()
        .unwrap();
}

#[cfg(feature = "cli")]
#[test]
fn the_command_line_checks_a_message_before_it_makes_a_store() {
    let tmp = tmp();
    let dir = tmp.path().join("new-store");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ctxlog"))
        .args(["--dir", dir.to_str().unwrap(), "send"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"{not json").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("InvalidParams"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!dir.exists(), "a refused message made the store's folder");
}
