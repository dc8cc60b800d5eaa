//! What a conversation memory asks of a context: a turn's messages
//! appended at once (`append_messages`), the newest taken back
//! (`pop_message`), all of them (`empty_context`), durable across reopens,
//! crashes and compactions, the context's id kept.

use crate::common;

use ctxlog::{Durability, Error, Options, Store};
use proptest::prelude::*;

fn options() -> Options {
    Options::default()
        .durability(Durability::Buffered)
        .segment_bytes(4096)
}

fn history(store: &Store, tenant: &str, context: &str) -> Vec<Vec<u8>> {
    match store.last_messages(tenant, context, usize::MAX) {
        Ok(messages) => messages.into_iter().map(|m| m.raw).collect(),
        Err(Error::ContextNotFound) => Vec::new(),
        Err(e) => panic!("history of {context}: {e}"),
    }
}

#[test]
fn pop_takes_the_newest_and_empty_keeps_the_id() {
    let (_dir, store) = common::buffered_store();
    for m in [b"one", b"two", b"six"] {
        store.append_message("acme", "s", m).unwrap();
    }
    let popped = store.pop_message("acme", "s").unwrap().unwrap();
    assert_eq!((popped.raw.as_slice(), popped.seq), (&b"six"[..], 2));
    assert_eq!(
        history(&store, "acme", "s"),
        [b"one".to_vec(), b"two".to_vec()]
    );
    // The next message comes after every record, popped ones included.
    assert_eq!(store.append_message("acme", "s", b"ten").unwrap().seq, 4);
    assert_eq!(store.context_info("acme", "s").unwrap().messages, 3);

    assert_eq!(store.empty_context("acme", "s").unwrap(), 3);
    assert!(history(&store, "acme", "s").is_empty());
    assert_eq!(store.context_info("acme", "s").unwrap().messages, 0);
    // Nothing left: no record written, nothing returned.
    assert_eq!(store.pop_message("acme", "s").unwrap(), None);
    assert_eq!(store.empty_context("acme", "s").unwrap(), 0);
    // Records: one, two, six, the pop's, ten, the empty's; nothing since.
    assert_eq!(store.append_message("acme", "s", b"again").unwrap().seq, 6);
    assert_eq!(history(&store, "acme", "s"), [b"again".to_vec()]);
}

#[test]
fn a_batch_is_one_sync_and_opens_its_context_once() {
    let (dir, store) = common::buffered_store();
    let none: [&[u8]; 0] = [];
    assert!(store
        .append_messages("acme", "s", &none)
        .unwrap()
        .is_empty());
    assert!(matches!(
        store.last_messages("acme", "s", 1),
        Err(Error::ContextNotFound)
    ));
    let turn: [&[u8]; 3] = [b"q", b"call", b"a"];
    let appended = store.append_messages("acme", "s", &turn).unwrap();
    let opened: Vec<bool> = appended.iter().map(|a| a.opened_context).collect();
    assert_eq!(opened, [true, false, false]);
    let more = store.append_messages("acme", "s", &[b"q2"]).unwrap();
    assert_eq!((more[0].seq, more[0].opened_context), (3, false));
    drop(store);
    let store = Store::open(dir.path(), options()).unwrap();
    assert_eq!(history(&store, "acme", "s").len(), 4);
    // A batch with a message past the record limit stores none of them.
    let small = Options::default().max_record_bytes(1024);
    drop(store);
    let store = Store::open(dir.path(), small).unwrap();
    let big = vec![b'x'; 4096];
    let batch: [&[u8]; 2] = [b"fits", &big];
    assert!(matches!(
        store.append_messages("acme", "s", &batch),
        Err(Error::InvalidParams { .. })
    ));
    assert_eq!(history(&store, "acme", "s").len(), 4);
}

#[test]
fn tenants_and_missing_contexts_answer_as_missing() {
    let (_dir, store) = common::buffered_store();
    store.append_message("acme", "s", b"one").unwrap();
    for result in [
        store.pop_message("other", "s").map(drop),
        store.pop_message("acme", "nope").map(drop),
        store.empty_context("other", "s").map(drop),
    ] {
        assert!(matches!(result, Err(Error::ContextNotFound)), "{result:?}");
    }
    assert_eq!(history(&store, "acme", "s"), [b"one".to_vec()]);
    store.delete_context("acme", "s").unwrap();
    assert!(matches!(
        store.pop_message("acme", "s"),
        Err(Error::ContextNotFound)
    ));
}

#[test]
fn a_context_with_tasks_keeps_its_messages() {
    let (_dir, store) = common::buffered_store();
    let msg = br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#;
    let receipt = store.receive_message("acme", msg).unwrap();
    for result in [
        store.pop_message("acme", &receipt.context_id).map(drop),
        store.empty_context("acme", &receipt.context_id).map(drop),
    ] {
        match result {
            Err(Error::UnsupportedOperation { reason }) => assert!(reason.contains("tasks")),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(history(&store, "acme", &receipt.context_id).len(), 1);
}

#[test]
fn an_export_holds_what_is_left() {
    let (_dir, store) = common::buffered_store();
    for m in [b"one", b"two", b"six"] {
        store.append_message("acme", "s", m).unwrap();
    }
    store.pop_message("acme", "s").unwrap();
    let items = store.export_context("acme", "s").unwrap();
    let copy_dir = common::tmp();
    let copy = Store::open(copy_dir.path(), options()).unwrap();
    for item in &items {
        copy.import_item(item).unwrap();
    }
    assert_eq!(history(&copy, "acme", "s"), history(&store, "acme", "s"));
    assert_eq!(items.len(), 2);
}

/// What a step of the model test does.
#[derive(Debug, Clone)]
enum Op {
    Append(u8, Vec<u8>),
    AppendAll(u8, Vec<Vec<u8>>),
    Pop(u8),
    Empty(u8),
    Reopen,
    /// Reopen from a copy taken as a crash would leave the files (the log
    /// read, not only the checkpoint a close writes).
    Crash,
    Compact,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..3, proptest::collection::vec(any::<u8>(), 0..200)).prop_map(|(c, raw)| Op::Append(c, raw)),
        3 => (0u8..3, proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 0..5)).prop_map(|(c, raws)| Op::AppendAll(c, raws)),
        2 => (0u8..3).prop_map(Op::Pop),
        1 => (0u8..3).prop_map(Op::Empty),
        1 => Just(Op::Reopen),
        1 => Just(Op::Crash),
        1 => Just(Op::Compact),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Random appends, pops and empties over a few contexts, with reopens,
    /// crash copies and compactions between them, always read back as a
    /// list per context says.
    #[test]
    fn pops_and_empties_match_a_model(ops in proptest::collection::vec(op(), 1..50)) {
        let mut dir = common::tmp();
        let mut store = Store::open(dir.path(), options()).unwrap();
        let mut model: [Vec<Vec<u8>>; 3] = Default::default();
        for op in ops {
            match op {
                Op::Append(c, raw) => {
                    store.append_message("t", &format!("c{c}"), &raw).unwrap();
                    model[c as usize].push(raw);
                }
                Op::AppendAll(c, raws) => {
                    let context = format!("c{c}");
                    let next = store.context_info("t", &context).map_or(0, |i| i.messages);
                    let appended = store.append_messages("t", &context, &raws).unwrap();
                    prop_assert_eq!(appended.len(), raws.len());
                    prop_assert!(appended.windows(2).all(|w| w[1].seq == w[0].seq + 1));
                    prop_assert!(appended.first().is_none_or(|a| a.seq >= next));
                    model[c as usize].extend(raws);
                }
                Op::Pop(c) => match store.pop_message("t", &format!("c{c}")) {
                    Ok(popped) => prop_assert_eq!(popped.map(|m| m.raw), model[c as usize].pop()),
                    Err(Error::ContextNotFound) => prop_assert!(model[c as usize].is_empty()),
                    Err(e) => panic!("{e}"),
                },
                Op::Empty(c) => match store.empty_context("t", &format!("c{c}")) {
                    Ok(n) => prop_assert_eq!(n as usize, std::mem::take(&mut model[c as usize]).len()),
                    Err(Error::ContextNotFound) => prop_assert!(model[c as usize].is_empty()),
                    Err(e) => panic!("{e}"),
                },
                Op::Reopen => {
                    store.close().unwrap();
                    store = Store::open(dir.path(), options()).unwrap();
                }
                Op::Crash => {
                    store.sync().unwrap();
                    let copy = common::crash_copy(dir.path());
                    drop(store);
                    dir = copy;
                    store = Store::open(dir.path(), options()).unwrap();
                    let report = store.open_report();
                    prop_assert!(report.lost.is_empty() && report.skipped.is_empty(), "{:?}", report);
                }
                Op::Compact => {
                    store.compact().unwrap();
                }
            }
            for (c, want) in model.iter().enumerate() {
                prop_assert_eq!(&history(&store, "t", &format!("c{c}")), want);
                let count = store.context_info("t", &format!("c{c}")).map_or(0, |i| i.messages);
                prop_assert_eq!(count as usize, want.len());
            }
        }
        store.close().unwrap();
        let verified = Store::verify(dir.path(), &mut |_, _| {}).unwrap();
        prop_assert!(verified.is_clean(), "{:?}", verified);
    }
}

/// A close writes a version 12 checkpoint, which keeps hidden records
/// hidden; one of version 11 (no hidden records could exist then) is still
/// loaded, and one of 10 sets the log to be read.
#[test]
fn hidden_records_hold_in_the_checkpoint_and_version_11_still_loads() {
    let dir = common::tmp();
    let store = Store::open(dir.path(), options()).unwrap();
    for m in [b"one", b"two"] {
        store.append_message("acme", "s", m).unwrap();
    }
    store.pop_message("acme", "s").unwrap();
    store.close().unwrap();
    let path = dir.path().join("CHECKPOINT");
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes[8..12], 12u32.to_le_bytes());
    for (version, loads) in [(12u32, true), (11, true), (10, false)] {
        let mut old = bytes.clone();
        old[8..12].copy_from_slice(&version.to_le_bytes());
        std::fs::write(&path, old).unwrap();
        let store = Store::open(dir.path(), options()).unwrap();
        assert_eq!(
            store.open_report().from_checkpoint,
            loads,
            "version {version}"
        );
        assert_eq!(history(&store, "acme", "s"), [b"one".to_vec()]);
        drop(store);
    }
}

/// A page read backwards from any seq passes over hidden messages and
/// holds the newest `n` below the seq.
#[test]
fn pages_read_backwards_skip_what_is_hidden() {
    let (_dir, store) = common::buffered_store();
    for m in ["m0", "m1", "m2", "m3"] {
        store.append_message("acme", "s", m.as_bytes()).unwrap();
    }
    store.pop_message("acme", "s").unwrap(); // m3; seq 4 hides it
    store.append_message("acme", "s", b"m5").unwrap(); // seq 5
    let page = |before: Option<u64>, n: usize| {
        let mut buf = ctxlog::MessageBuf::new();
        store
            .messages_before_into("acme", "s", before, n, None, &mut buf)
            .unwrap();
        buf.iter()
            .map(|m| (m.seq, String::from_utf8(m.raw.to_vec()).unwrap()))
            .collect::<Vec<_>>()
    };
    let pairs = |p: &[(u64, &str)]| -> Vec<(u64, String)> {
        p.iter().map(|&(s, m)| (s, m.to_string())).collect()
    };
    assert_eq!(page(None, 2), pairs(&[(2, "m2"), (5, "m5")]));
    assert_eq!(page(Some(5), 2), pairs(&[(1, "m1"), (2, "m2")]));
    assert_eq!(page(Some(2), 10), pairs(&[(0, "m0"), (1, "m1")]));
    assert!(page(Some(0), 10).is_empty());
}
