//! Bodies of the fuzz targets, shared by `fuzz/` and by the tests that replay
//! the committed corpora, so a regression can never land silently. Each
//! panics (the fuzzer's signal) only when a property fails.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::a2a::{Task, TaskState};
use crate::error::Error;
use crate::fs::{Crash, Fs, MemFs};
use crate::log::frame::{decode_frame, decode_header, find_next_frame, HEADER_LEN};
use crate::log::record::{self, Decoded};
use crate::log::segments::{list_segment_ids, segment_path};
use crate::namespace::ContextKey;
use crate::options::{Durability, Maintenance, Options, RecoveryMode};
use crate::render::{self, History, Role, Turn};
use crate::store::Store;

/// A fresh in-memory store directory: fuzzing never touches the disk.
fn scratch() -> (MemFs, PathBuf) {
    let fs = MemFs::new();
    (fs, PathBuf::from("/fuzz/store"))
}

/// `options` on the in-memory file system `fs`, with maintenance only when
/// a target calls it (a thread of its own would make runs differ).
fn on(fs: &MemFs, options: Options) -> Options {
    let maintenance = options.maintenance.clone().map(|m| m.background(false));
    options.fs(Arc::new(fs.clone())).maintenance(maintenance)
}

/// Reads bytes off the front of the fuzzer's input.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    fn u16(&mut self) -> Option<u16> {
        Some(u16::from(self.byte()?) << 8 | u16::from(self.byte()?))
    }

    fn bytes(&mut self, max: usize) -> Vec<u8> {
        let n = usize::from(self.byte().unwrap_or(0)) % (max + 1);
        let n = n.min(self.0.len());
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        head.to_vec()
    }

    fn text(&mut self, max: usize) -> String {
        String::from_utf8_lossy(&self.bytes(max)).into_owned()
    }
}

/// Target `decode`: arbitrary bytes through the segment, frame and record
/// decoders: each either decodes or returns an error, and never panics; a
/// record's view reads what its decode reads and refuses what it refuses.
pub fn decode(data: &[u8]) {
    let _ = decode_header(data);
    record_views_agree(data);
    let mut at = HEADER_LEN;
    while let Ok(frame) = decode_frame(data, 1, at, 1 << 20) {
        record_views_agree(frame.payload(data));
        at = frame.end();
    }
    let _ = find_next_frame(data, 1, at, 1 << 20);
}

fn record_views_agree(payload: &[u8]) {
    match (record::view(payload), record::decode(payload)) {
        (Ok(v), Ok(Decoded::Current { key, body, blob })) => assert!(
            v.key == key
                && (v.seq, v.timestamp_ms) == (body.seq, body.timestamp_ms)
                && v.kind.task_id() == body.kind.task_id()
                && v.blob == blob,
            "a view reads a record otherwise than its decode"
        ),
        (Ok(_), _) => panic!("a view reads a record its decode refuses"),
        (Err(_), Ok(Decoded::Current { .. })) => panic!("a view refuses a record its decode reads"),
        (Err(_), _) => {}
    }
}

/// Target `namespace`: two (tenant, contextId) pairs from the input. Distinct
/// pairs get distinct keys, a key is stable, and histories written under the
/// two never mix.
pub fn namespace(data: &[u8]) {
    let mut input = Input(data);
    let a = (input.text(40), input.text(40));
    let b = (input.text(40), input.text(40));
    let (ka, kb) = (
        ContextKey::derive_unchecked(&a.0, &a.1),
        ContextKey::derive_unchecked(&b.0, &b.1),
    );
    assert_eq!(
        ka,
        ContextKey::derive_unchecked(&a.0, &a.1),
        "a key changed"
    );
    assert_eq!(a == b, ka == kb, "{a:?} and {b:?}: keys {ka} and {kb}");
    if a.1.is_empty() || b.1.is_empty() || a == b {
        return;
    }
    let (fs, dir) = scratch();
    // Two records: no need to zero-fill a megabyte of memory per input.
    let options = on(
        &fs,
        Options::default()
            .durability(Durability::Buffered)
            .preallocate(4096),
    );
    let store = Store::open(&dir, options).unwrap();
    store.append_message(&a.0, &a.1, b"first").unwrap();
    store.append_message(&b.0, &b.1, b"second").unwrap();
    let read = |(t, c): &(String, String)| -> Vec<Vec<u8>> {
        let msgs = store.last_messages(t, c, usize::MAX).unwrap();
        msgs.into_iter().map(|m| m.raw).collect()
    };
    assert_eq!(read(&a), vec![b"first".to_vec()]);
    assert_eq!(read(&b), vec![b"second".to_vec()]);
}

/// Target `render`: arbitrary histories render to one frame that parses back
/// to exactly the original turns.
pub fn render(data: &[u8]) {
    let mut input = Input(data);
    let mut turns = Vec::new();
    while let Some(b) = input.byte() {
        let (role, artifact) = [
            (Role::User, false),
            (Role::Agent, false),
            (Role::Unspecified, false),
            (Role::Agent, true),
        ][usize::from(b % 4)];
        let task_id = (b & 4 != 0).then(|| input.text(20));
        // A message of no role may name its speaker: a word of the input's,
        // kept only where the rendering would show it.
        let speaker = (b & 8 != 0 && role == Role::Unspecified && !artifact)
            .then(|| input.text(16))
            .filter(|s| render::is_speaker(s));
        turns.push(Turn {
            position: turns.len() as u64,
            role,
            artifact,
            task_id,
            task_cut: 0,
            speaker,
            text: input.text(200),
            cut: 0,
        });
    }
    let history = History { turns, omitted: 0 };
    let out = render::render(&history, "0123456789abcdef0123456789abcdef");
    if history.turns.is_empty() {
        // Nothing to show renders as nothing.
        assert!(out.is_empty() && out.text.is_empty());
        return;
    }
    assert_eq!(out.text.matches("<<<").count(), 2, "{}", out.text);
    let parsed = render::parse(&out.text).unwrap_or_else(|e| panic!("{e}: {}", out.text));
    assert_eq!(parsed.turns, history.turns);
}

/// A small store to mutate, built the same way every time (each message
/// names `who`): rotated segments, a compaction (so a manifest and
/// compacted segments), a deleted context, then more appends.
fn seed_store(fs: &MemFs, dir: &Path, who: &str) {
    let options = on(
        fs,
        Options::default()
            .durability(Durability::Buffered)
            .segment_bytes(4096),
    );
    let store = Store::open(dir, options).unwrap();
    let append = |i: u32, contexts: u32| {
        let body = format!(
            "{{\"n\":{i},\"who\":\"{who}\",\"pad\":\"{}\"}}",
            "x".repeat((i as usize * 13) % 80)
        );
        store
            .append_message("t", &format!("c{}", i % contexts), body.as_bytes())
            .unwrap();
    };
    (0..40).for_each(|i| append(i, 4));
    store.delete_context("t", "c3").unwrap();
    store.compact().unwrap();
    (40..70).for_each(|i| append(i, 3));
    store.close().unwrap();
}

/// Target `open`: a store whose files (segments, checkpoint, manifest,
/// identity) are mutated by the input (cut, flipped, spliced, zeroed,
/// deleted, or replaced by the same file of another store) opens without
/// panicking, in both recovery modes, and either fails with an error or
/// serves only its own records that pass their checksums: never a record
/// of the other store.
pub fn open(data: &[u8]) {
    let (fs, dir) = scratch();
    seed_store(&fs, &dir, "ours");
    let other = PathBuf::from("/fuzz/other");
    seed_store(&fs, &other, "theirs");
    let mut files: Vec<PathBuf> = list_segment_ids(&fs, &dir)
        .unwrap()
        .into_iter()
        .map(|id| segment_path(&dir, id))
        .collect();
    files.extend(["CHECKPOINT", "MANIFEST", "IDENTITY"].map(|f| dir.join(f)));
    let ours = fs.read(&dir.join("IDENTITY")).ok();
    let mut input = Input(data);
    while let (Some(pick), Some(at), Some(op)) = (input.byte(), input.u16(), input.byte()) {
        let path = &files[usize::from(pick) % files.len()];
        let Ok(mut bytes) = fs.read(path) else {
            continue;
        };
        match op % 6 {
            4 => {
                let name = path.file_name().unwrap_or_default();
                if let Ok(theirs) = fs.read(&other.join(name)) {
                    fs.set_contents(path, theirs).unwrap();
                }
                continue;
            }
            5 => {
                fs.remove_file(path).unwrap();
                continue;
            }
            _ if bytes.is_empty() => continue,
            _ => {}
        }
        let at = usize::from(at) % bytes.len();
        match op % 6 {
            0 => bytes.truncate(at),
            1 => bytes[at] ^= op | 1,
            2 => bytes.splice(at..at, input.bytes(16)).for_each(drop),
            _ => bytes[at..].iter_mut().for_each(|b| *b = 0),
        }
        fs.set_contents(path, bytes).unwrap();
    }
    // Which store the directory says it is: its own identity file, unless
    // that was replaced by the other store's (then the other store's
    // records are its own), or is damaged or gone (then its other files
    // say, and whichever store they name, it is one).
    let identity = fs.read(&dir.join("IDENTITY")).ok();
    let theirs_named = identity.is_some() && identity == fs.read(&other.join("IDENTITY")).ok();
    let ours_named = identity.is_some() && identity == ours;
    for mode in [RecoveryMode::Strict, RecoveryMode::SkipCorrupt] {
        let options = on(&fs, Options::default().recovery(mode).segment_bytes(4096));
        match Store::open(&dir, options) {
            Ok(store) => {
                // Never records of two stores in one open; never the other
                // store's while this one's identity stands.
                let mut whose = std::collections::BTreeSet::new();
                let page = store.list_contexts("t", 100, None).unwrap();
                for c in page.contexts {
                    match store.last_messages("t", &c.context_id, usize::MAX) {
                        Ok(msgs) => {
                            for m in msgs {
                                let text = String::from_utf8_lossy(&m.raw);
                                whose.insert(text.contains("theirs"));
                            }
                        }
                        Err(Error::Corrupt { .. }) => {}
                        Err(e) => panic!("reading {}: {e}", c.context_id),
                    }
                }
                assert!(whose.len() <= 1, "records of two stores served in one open");
                assert!(
                    !(ours_named && whose.contains(&true)),
                    "another store's record"
                );
                assert!(
                    !(theirs_named && whose.contains(&false)),
                    "another store's record"
                );
            }
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
}

/// What the `ops` target expects the store to hold.
#[derive(Default)]
struct Model {
    /// Per context: its messages' raw bytes, or `None` once deleted.
    contexts: BTreeMap<String, Option<Vec<Vec<u8>>>>,
    /// Per task: its context and the task as the store last acknowledged it.
    tasks: BTreeMap<String, (String, Task)>,
    /// Messages received, to resend: (context, raw).
    received: Vec<(String, Vec<u8>)>,
}

impl Model {
    fn live(&self, context: &str) -> bool {
        !matches!(self.contexts.get(context), Some(None))
    }

    fn push(&mut self, context: &str, raw: Vec<u8>) {
        let entry = self
            .contexts
            .entry(context.to_string())
            .or_insert_with(|| Some(Vec::new()));
        if let Some(msgs) = entry {
            msgs.push(raw);
        }
    }

    /// Records the task as the store holds it now.
    fn refresh(&mut self, store: &Store, context: &str, task_id: &str) {
        let task = store.get_task("t", task_id, None, true).unwrap();
        self.tasks
            .insert(task_id.to_string(), (context.to_string(), task));
    }

    /// Every context and task of the model, read back from `store`.
    fn check(&self, store: &Store) {
        for (context, want) in &self.contexts {
            let got = store.last_messages("t", context, usize::MAX);
            match want {
                Some(msgs) => {
                    let got: Vec<Vec<u8>> = got.unwrap().into_iter().map(|m| m.raw).collect();
                    assert_eq!(&got, msgs, "{context}");
                }
                None => assert!(matches!(got, Err(Error::ContextNotFound)), "{context}"),
            }
        }
        for (id, (context, want)) in &self.tasks {
            let got = store.get_task("t", id, None, true);
            if self.live(context) {
                assert_eq!(&got.unwrap(), want, "task {id}");
            } else {
                assert!(matches!(got, Err(Error::TaskNotFound)), "task {id}");
            }
        }
    }

    /// A task id of `input`'s choosing, with its context, if there are tasks.
    fn pick(&self, input: &mut Input) -> Option<(String, String, TaskState)> {
        let n = usize::from(input.byte()?) % self.tasks.len().max(1);
        let (id, (context, task)) = self.tasks.iter().nth(n)?;
        Some((id.clone(), context.clone(), task.status.state))
    }
}

/// A JSON number in a form the input picks: a long integer (past what an
/// f64 holds exactly), a long decimal, or one with an exponent.
fn number(input: &mut Input) -> String {
    let digits: String = input
        .bytes(40)
        .iter()
        .map(|b| char::from(b'0' + b % 10))
        .collect();
    let digits = format!("9{digits}");
    match input.byte().unwrap_or(0) % 4 {
        0 => digits,
        1 => format!("-{digits}"),
        2 => format!("0.{digits}"),
        _ => format!("{digits}e-7"),
    }
}

const STATES: [&str; 8] = [
    "TASK_STATE_SUBMITTED",
    "TASK_STATE_WORKING",
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_AUTH_REQUIRED",
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_REJECTED",
];

/// Target `ops`: a sequence of raw appends, received A2A messages (new
/// tasks, follow-ups, resends), status updates, artifact chunks, deletes,
/// compactions, maintenance's merges, reopens (with the checkpoint or
/// reading the whole log) and crashes (a power loss at that instant, with
/// the unsynced bytes and names torn as the input says), checked after each
/// step against a plain model. Every step that returned is durable (with
/// `Sync`, or with `GroupCommit`, whose syncer thread writes and syncs the
/// frames: an input of odd length picks it, so that the same bytes mean the
/// same steps under both), so a crash must lose nothing the model holds.
pub fn ops(data: &[u8]) {
    let (mut fs, dir) = scratch();
    let durability = if data.len() % 2 == 1 {
        Durability::GroupCommit
    } else {
        Durability::Sync
    };
    let options = Options::default()
        .durability(durability)
        .segment_bytes(4096)
        .checkpoint_interval(Some(2048))
        .maintenance(Some(
            Maintenance::default().background(false).tail_segments(2),
        ));
    let mut store = Some(Store::open(&dir, on(&fs, options.clone())).unwrap());
    let mut model = Model::default();
    let mut input = Input(data);
    let mut next_message = 0u32;
    while let Some(op) = input.byte() {
        let context = format!("c{}", op % 5);
        let s = store.as_ref().unwrap();
        match op / 5 % 10 {
            0 | 1 => {
                let body = input.bytes(120);
                let result = s.append_message("t", &context, &body);
                if model.live(&context) {
                    result.unwrap();
                    model.push(&context, body);
                } else {
                    assert!(matches!(result, Err(Error::ContextRejected { .. })));
                }
            }
            2 => {
                let result = s.delete_context("t", &context);
                match model.contexts.get(&context) {
                    Some(Some(_)) => {
                        result.unwrap();
                        model.contexts.insert(context, None);
                    }
                    // Deleted before: deleting again is no error.
                    Some(None) => result.unwrap(),
                    None => assert!(matches!(result, Err(Error::ContextNotFound))),
                }
            }
            3 if op / 50 % 2 == 1 => {
                // Every merge maintenance picks now.
                while s.maintain().unwrap().is_some() {}
            }
            3 => {
                s.compact().unwrap();
            }
            4 => {
                store.take().unwrap().close().unwrap();
                if op / 50 % 2 == 1 {
                    // Without the checkpoint: the open reads the whole log.
                    let _ = fs.remove_file(&dir.join("CHECKPOINT"));
                }
                store = Some(Store::open(&dir, on(&fs, options.clone())).unwrap());
            }
            5 => {
                // A power loss now: the store dies with whatever it had not
                // synced torn, then the survivor's disk is opened.
                let seed = u64::from(input.u16().unwrap_or(0));
                fs = fs.crash(Crash::Torn(seed));
                drop(store.take());
                store = Some(Store::open(&dir, on(&fs, options.clone())).unwrap());
            }
            6 | 7 => {
                // A new task in `context`, or a follow-up into a task of it.
                let follow = input.byte().unwrap_or(0);
                let task = (follow % 2 == 1)
                    .then(|| {
                        let mine: Vec<&String> = model
                            .tasks
                            .iter()
                            .filter(|(_, (c, _))| *c == context)
                            .map(|(id, _)| id)
                            .collect();
                        mine.get(usize::from(follow / 2) % mine.len().max(1))
                            .map(|id| (*id).clone())
                    })
                    .flatten();
                next_message += 1;
                // The message's JSON as text: its keys in an odd order, and
                // a number in a form the input chooses (a long integer, a
                // decimal, an exponent), which must come back as written.
                let shape = input.byte().unwrap_or(0);
                let text = serde_json::to_string(&input.text(60)).unwrap();
                let mut fields = vec![
                    format!(r#""parts":[{{"text":{text}}}]"#),
                    r#""role":"ROLE_USER""#.to_string(),
                    format!(r#""messageId":"m{next_message}""#),
                    format!(
                        r#""contextId":{}"#,
                        serde_json::to_string(&context).unwrap()
                    ),
                ];
                if shape & 1 == 1 {
                    fields.push(format!(r#""metadata":{{"n":{}}}"#, number(&mut input)));
                }
                if let Some(task) = &task {
                    fields.push(format!(
                        r#""taskId":{}"#,
                        serde_json::to_string(task).unwrap()
                    ));
                }
                // A key twice: refused, and nothing stored.
                let twice = shape & 2 == 2;
                if twice {
                    fields.push(format!(r#""parts":[{{"text":{text}}}]"#));
                }
                let raw = format!("{{{}}}", fields.join(",")).into_bytes();
                let terminal = task
                    .as_ref()
                    .and_then(|t| model.tasks.get(t))
                    .is_some_and(|(_, t)| t.status.state.is_terminal());
                match s.receive_message("t", &raw) {
                    Ok(receipt) => {
                        assert!(model.live(&context) && !terminal && !twice, "{receipt:?}");
                        model.push(&context, raw.clone());
                        model.received.push((context.clone(), raw.clone()));
                        model.refresh(s, &context, &receipt.task_id);
                        let (_, task) = &model.tasks[&receipt.task_id];
                        let stored = serde_json::to_string(task.history.last().unwrap()).unwrap();
                        assert_eq!(stored.as_bytes(), &raw[..], "the message changed");
                    }
                    Err(Error::InvalidParams { .. }) if twice => {}
                    Err(e) => assert!(!model.live(&context) || terminal, "{e}"),
                }
            }
            8 => {
                // A resent message: recognised, nothing stored again; spelled
                // with other white space it is the same message, and with
                // one of its numbers changed it is a conflict.
                let n = input.byte().unwrap_or(0);
                let picked = model
                    .received
                    .get(usize::from(n) % model.received.len().max(1));
                if let Some((_, raw)) = picked.filter(|(c, _)| model.live(c)) {
                    let mut again = raw.clone();
                    if n & 0x80 != 0 {
                        again.insert(1, b' ');
                    }
                    // The metadata number ends where the metadata object does.
                    let end = raw
                        .windows(4)
                        .position(|w| w == br#""n":"#)
                        .and_then(|at| Some(at + raw.get(at..)?.iter().position(|&b| b == b'}')?));
                    match end.filter(|_| n & 0x40 != 0) {
                        Some(end) => {
                            again.insert(end + usize::from(n & 0x80 != 0), b'1');
                            assert!(matches!(
                                s.receive_message("t", &again),
                                Err(Error::IdempotencyConflict { .. })
                            ));
                        }
                        None => assert!(s.receive_message("t", &again).unwrap().duplicate),
                    }
                }
            }
            _ => {
                // An agent event on a task: a status update or an artifact chunk.
                let Some((task, context, state)) = model.pick(&mut input) else {
                    continue;
                };
                let b = input.byte().unwrap_or(0);
                let event = if b % 2 == 0 {
                    serde_json::json!({ "statusUpdate": { "taskId": task, "contextId": context,
                        "status": { "state": STATES[usize::from(b / 2) % STATES.len()] } } })
                } else {
                    serde_json::json!({ "artifactUpdate": { "taskId": task, "contextId": context,
                        "artifact": { "artifactId": format!("a{}", b / 2 % 2),
                            "parts": [{ "text": input.text(40) }] },
                        "append": b & 4 != 0, "lastChunk": b & 8 != 0 } })
                };
                let result = s.apply_event("t", event.to_string().as_bytes());
                if state.is_terminal() && b % 2 == 0 {
                    assert!(result.is_err(), "a status update after {state:?}");
                }
                if result.is_ok() {
                    model.refresh(s, &context, &task);
                }
            }
        }
        model.check(store.as_ref().unwrap());
    }
}
