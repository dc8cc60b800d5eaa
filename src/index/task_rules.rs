//! The task rules' tests, beside the files they test (the index's
//! per-task entry, `tasks.rs`, and a context's state, `context.rs`, which
//! applies them): the lifecycle table (every task state × operation
//! against its expected outcome), task ids, entry bytes, artifact chunks.

use super::tasks::*;
use crate::a2a::lifecycle::Op;
use crate::a2a::TaskState;
use crate::error::Result;
use crate::index::context::{ContextState, Kind};
use crate::log::segments::RecordLoc;

const LOC: RecordLoc = RecordLoc {
    segment: 1,
    offset: 32,
    len: 1,
};

/// A context holding task "t" in `state`.
fn task_in(state: TaskState) -> ContextState {
    let mut s = ContextState::default();
    s.open_task("t", 0, 0, LOC);
    if state != TaskState::Submitted {
        let kind = Kind::Status {
            with_message: false,
        };
        s.push_record(1, LOC, kind, Some(0));
        s.set_status(0, state, 1);
    }
    s
}

fn kind(r: Result<()>) -> &'static str {
    match r {
        Ok(()) => "ok",
        Err(e) => e.kind_name(),
    }
}

/// Every (state × operation) pair against its expected outcome.
#[test]
fn the_lifecycle_table() {
    use TaskState::*;
    let ops: [(&str, Op<'static>); 7] = [
        ("message", Op::Message),
        ("status working", Op::Status(Working)),
        ("status completed", Op::Status(Completed)),
        ("status unspecified", Op::Status(Unspecified)),
        (
            "new artifact",
            Op::Artifact {
                artifact_id: "a",
                append: false,
            },
        ),
        (
            "append unknown",
            Op::Artifact {
                artifact_id: "zz",
                append: true,
            },
        ),
        ("cancel", Op::Cancel),
    ];
    let expected = |state: TaskState, op: &str| -> &'static str {
        match (state.is_terminal(), op) {
            (true, "cancel") => "TaskNotCancelable",
            (true, _) => "UnsupportedOperation",
            (false, "status unspecified") | (false, "append unknown") => "InvalidParams",
            (false, _) => "ok",
        }
    };
    for state in TaskState::ALL.into_iter().filter(|s| *s != Unspecified) {
        let context = task_in(state);
        let task = context.task("t").unwrap();
        assert_eq!(task.state(), state);
        for (name, op) in ops {
            assert_eq!(
                kind(task.check(op)),
                expected(state, name),
                "{} × {name}",
                state.name()
            );
        }
    }
}

#[test]
fn task_ids_keep_their_text_and_store_made_ones_take_16_bytes() {
    let made = "0123456789abcdef00ff7f80a0b0c0d0";
    for id in [made, "0123456789ABCDEF00FF7F80A0B0C0D0", "t-1", "", "é"] {
        let key = IdKey::of(id);
        assert_eq!(key.to_string(), id);
        assert_ne!(key, IdKey::of(&format!("{id}0")));
        let mut s = ContextState::default();
        s.open_task(id, 0, 0, LOC);
        assert_eq!(s.task(id).unwrap().id().to_string(), id);
        assert!(s.task(&format!("{id}0")).is_none());
    }
    assert!(matches!(IdKey::of(made), IdKey::Made(_)));
    // Upper case is not what the store makes: kept as text, so that it
    // comes back byte for byte.
    assert!(matches!(IdKey::of(&made.to_uppercase()), IdKey::Other(_)));
    // Status times keep every bit up to 48, and stop there.
    let mut entry = TaskEntry::opened(Some([7; 8]), u64::MAX - 1);
    assert_eq!(entry.status_ms(), MAX_STATUS_MS);
    let mut far = entry.to_bytes();
    far[12..16].copy_from_slice(&0x1_0000u32.to_le_bytes());
    assert_eq!(
        TaskEntry::from_bytes(&far).unwrap().status_ms(),
        MAX_STATUS_MS
    );
    entry.set_status(TaskState::Working, MAX_STATUS_MS - 0x1234_5678_9abc);
    assert_eq!(entry.status_ms(), MAX_STATUS_MS - 0x1234_5678_9abc);
    (entry.events, entry.last) = (3, u32::MAX);
    for state in TaskState::ALL {
        for reply in [false, true] {
            entry.state = state;
            if reply {
                entry.mark_reply();
            }
            assert_eq!(TaskEntry::from_bytes(&entry.to_bytes()), Some(entry));
        }
    }
    let mut bad = entry.to_bytes();
    bad[TASK_BYTES - 2] = 9;
    assert_eq!(TaskEntry::from_bytes(&bad), None, "no tenth state");
    bad = entry.to_bytes();
    bad[TASK_BYTES - 1] = 4;
    assert_eq!(TaskEntry::from_bytes(&bad), None, "two flag bits");
    assert_eq!(entry.tail(), Some([7; 8]));
    assert!(TaskEntry::opened(None, 0).tail().is_none());
}

#[test]
fn entry_bytes_are_checked_and_their_tail_read_as_decoding_would() {
    let made = TaskEntry::opened(Some([9; 8]), 5).to_bytes();
    let other = TaskEntry::opened(None, 5).to_bytes();
    for base in [made, other] {
        for state in 0..=255u8 {
            for flag in 0..=255u8 {
                let mut bytes = base;
                bytes[TASK_BYTES - 2] = state;
                bytes[TASK_BYTES - 1] = flag;
                let decoded = TaskEntry::from_bytes(&bytes);
                assert_eq!(TaskEntry::sound_bytes(&bytes), decoded.is_some());
                if let Some(entry) = decoded {
                    assert_eq!(TaskEntry::tail_in(&bytes), entry.tail());
                }
            }
        }
    }
    assert!(!TaskEntry::sound_bytes(&made[1..]), "a short entry");
}

#[test]
fn a_store_made_id_is_exactly_32_lowercase_hex_digits() {
    for c in (0u8..128).map(char::from) {
        for at in [0, 1, 30, 31] {
            let mut id: Vec<char> = "0123456789abcdef0123456789abcdef".chars().collect();
            id[at] = c;
            let id: String = id.into_iter().collect();
            let hex = c.is_ascii_digit() || ('a'..='f').contains(&c);
            assert_eq!(made(&id).is_some(), hex, "{c:?} at {at}");
            if let Some(bytes) = made(&id) {
                assert_eq!(hex::encode(bytes), id);
            }
        }
    }
    assert!(made("0123456789abcdef0123456789abcde").is_none());
    assert!(made("0123456789abcdef0123456789abcdef0").is_none());
    assert!(made("é123456789abcdef0123456789abcde").is_none());
}

#[test]
fn artifact_chunks_follow_their_rules() {
    let mut s = task_in(TaskState::Working);
    let chunk = |id, append| Op::Artifact {
        artifact_id: id,
        append,
    };
    let check = |s: &ContextState, op| kind(s.task("t").unwrap().check(op));
    let mut seq = 2;
    let mut add = |s: &mut ContextState, id: &str, append, last| {
        let pos = s.push_record(seq, LOC, Kind::Artifact, Some(0));
        s.add_chunk(0, pos, id, append, last);
        seq += 1;
    };
    assert_eq!(check(&s, chunk("a", true)), "InvalidParams");
    add(&mut s, "a", false, false);
    assert_eq!(check(&s, chunk("a", true)), "ok");
    add(&mut s, "a", true, false);
    let chunks = |s: &ContextState| s.task("t").unwrap().artifacts().next().unwrap().len();
    assert_eq!(chunks(&s), 2);
    // Replacing starts the artifact over.
    add(&mut s, "a", false, false);
    assert_eq!(chunks(&s), 1);
    add(&mut s, "a", true, true);
    assert_eq!(check(&s, chunk("a", true)), "InvalidParams");
    assert_eq!(check(&s, chunk("a", false)), "InvalidParams");
    assert_eq!(check(&s, chunk("b", false)), "ok");
    let task = s.task("t").unwrap();
    assert_eq!(
        task.event_count(),
        6,
        "the opening message, one status, four chunks"
    );
    assert_eq!(task.history_newest().collect::<Vec<_>>(), vec![LOC]);
    // Another task's artifact of the same id is its own.
    s.open_task("u", seq, 0, LOC);
    assert_eq!(
        kind(s.task("u").unwrap().check(chunk("a", true))),
        "InvalidParams"
    );
}
