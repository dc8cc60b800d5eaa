//! Bodies of the fuzz targets, shared by `fuzz/` and by the tests that replay
//! the committed corpora, so a regression can never land silently. Each
//! panics (the fuzzer's signal) only when a property fails.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::fs::{Crash, MemFs};
use crate::log::frame::{decode_frame, decode_header, find_next_frame, HEADER_LEN};
use crate::log::segments::{list_segment_ids, segment_path};
use crate::namespace::ContextKey;
use crate::options::{Durability, Options, RecoveryMode};
use crate::render::{self, History, Role, Turn};
use crate::store::Store;
use crate::{record, Error};

/// A fresh in-memory store directory: fuzzing never touches the disk.
fn scratch() -> (MemFs, PathBuf) {
    let fs = MemFs::new();
    (fs, PathBuf::from("/fuzz/store"))
}

/// `options` on the in-memory file system `fs`.
fn on(fs: &MemFs, options: Options) -> Options {
    options.fs(Arc::new(fs.clone()))
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
/// decoders: each either decodes or returns an error, and never panics.
pub fn decode(data: &[u8]) {
    let _ = decode_header(data);
    let _ = record::decode(data);
    let mut at = HEADER_LEN;
    while let Ok(frame) = decode_frame(data, 1, at, 1 << 20) {
        if let Some(payload) = data.get(frame.payload_start() as usize..frame.end() as usize) {
            let _ = record::decode(payload);
        }
        at = frame.end();
    }
    let _ = find_next_frame(data, 1, at, 1 << 20);
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
    let options = on(&fs, Options::default().durability(Durability::Buffered));
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
        let role = [Role::User, Role::Agent, Role::Unknown, Role::Artifact][usize::from(b % 4)];
        let task_id = (b & 4 != 0).then(|| input.text(20));
        turns.push(Turn {
            position: turns.len() as u64,
            role,
            task_id,
            text: input.text(200),
            cut: 0,
        });
    }
    let history = History { turns, omitted: 0 };
    let out = render::render(&history, "0123456789abcdef0123456789abcdef");
    assert_eq!(out.text.matches("<<<").count(), 2, "{}", out.text);
    let parsed = render::parse(&out.text).unwrap_or_else(|e| panic!("{e}: {}", out.text));
    assert_eq!(parsed.turns, history.turns);
}

/// A small store to mutate, built the same way every time.
fn seed_store(fs: &MemFs, dir: &Path) {
    let options = on(
        fs,
        Options::default()
            .durability(Durability::Buffered)
            .segment_bytes(4096),
    );
    let store = Store::open(dir, options).unwrap();
    for i in 0..60u32 {
        let body = format!(
            "{{\"n\":{i},\"pad\":\"{}\"}}",
            "x".repeat((i as usize * 13) % 80)
        );
        store
            .append_message("t", &format!("c{}", i % 4), body.as_bytes())
            .unwrap();
    }
    store.delete_context("t", "c3").unwrap();
    store.close().unwrap();
}

/// Target `open`: a store whose segments are mutated by the input opens
/// without panicking, in both recovery modes, and either fails with an error
/// or serves only records that pass their checksums.
pub fn open(data: &[u8]) {
    let (fs, dir) = scratch();
    seed_store(&fs, &dir);
    let ids = list_segment_ids(&fs, &dir).unwrap();
    let mut input = Input(data);
    while let (Some(pick), Some(at), Some(op)) = (input.byte(), input.u16(), input.byte()) {
        // One pick past the segments is the checkpoint the close wrote.
        let path = match ids.get(usize::from(pick) % (ids.len() + 1)) {
            Some(&id) => segment_path(&dir, id),
            None => dir.join("CHECKPOINT"),
        };
        let mut bytes = fs.contents(&path).unwrap();
        if bytes.is_empty() {
            continue;
        }
        let at = usize::from(at) % bytes.len();
        match op % 4 {
            0 => bytes.truncate(at),
            1 => bytes[at] ^= op | 1,
            2 => bytes.splice(at..at, input.bytes(16)).for_each(drop),
            _ => bytes[at..].iter_mut().for_each(|b| *b = 0),
        }
        fs.set_contents(&path, bytes).unwrap();
    }
    for mode in [RecoveryMode::Strict, RecoveryMode::SkipCorrupt] {
        let options = on(&fs, Options::default().recovery(mode).segment_bytes(4096));
        match Store::open(&dir, options) {
            Ok(store) => {
                let page = store.list_contexts("t", 100, None).unwrap();
                for c in page.contexts {
                    match store.last_messages("t", &c.context_id, usize::MAX) {
                        Ok(_) | Err(Error::Corrupt { .. }) => {}
                        Err(e) => panic!("reading {}: {e}", c.context_id),
                    }
                }
            }
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
}

/// Target `ops`: a sequence of appends, deletes, compactions, reopens and
/// crashes (a power loss at that instant, with the unsynced bytes and names
/// torn as the input says), checked after each step against a plain model.
/// With `Sync` durability every step that returned is durable, so a crash
/// must lose nothing the model holds.
pub fn ops(data: &[u8]) {
    let (mut fs, dir) = scratch();
    let options = Options::default()
        .durability(Durability::Sync)
        .segment_bytes(4096)
        .checkpoint_interval(Some(2048));
    let mut store = Some(Store::open(&dir, on(&fs, options.clone())).unwrap());
    let mut model: BTreeMap<String, Option<Vec<Vec<u8>>>> = BTreeMap::new();
    let mut input = Input(data);
    while let Some(op) = input.byte() {
        let context = format!("c{}", op % 5);
        let s = store.as_ref().unwrap();
        match op / 5 % 6 {
            0 | 1 => {
                let body = input.bytes(120);
                let result = s.append_message("t", &context, &body);
                match model.entry(context).or_insert_with(|| Some(Vec::new())) {
                    Some(msgs) => {
                        result.unwrap();
                        msgs.push(body);
                    }
                    None => assert!(matches!(result, Err(Error::ContextRejected { .. }))),
                }
            }
            2 => {
                let result = s.delete_context("t", &context);
                if let Some(Some(_)) = model.get(&context) {
                    result.unwrap();
                    model.insert(context, None);
                } else {
                    assert!(matches!(result, Err(Error::ContextNotFound)));
                }
            }
            3 => {
                s.compact().unwrap();
            }
            4 => {
                store.take().unwrap().close().unwrap();
                store = Some(Store::open(&dir, on(&fs, options.clone())).unwrap());
            }
            _ => {
                // A power loss now: the store dies with whatever it had not
                // synced torn, then the survivor's disk is opened.
                let seed = u64::from(input.u16().unwrap_or(0));
                fs = fs.crash(Crash::Torn(seed));
                drop(store.take());
                store = Some(Store::open(&dir, on(&fs, options.clone())).unwrap());
            }
        }
        let s = store.as_ref().unwrap();
        for (context, want) in &model {
            let got = s.last_messages("t", context, usize::MAX);
            match want {
                Some(msgs) => {
                    let got: Vec<Vec<u8>> = got.unwrap().into_iter().map(|m| m.raw).collect();
                    assert_eq!(&got, msgs, "{context}");
                }
                None => assert!(matches!(got, Err(Error::ContextNotFound)), "{context}"),
            }
        }
    }
}
