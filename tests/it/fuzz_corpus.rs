//! Replays every committed fuzz corpus input through its target's body, so CI
//! catches a regression without a fuzzing engine.

use std::fs;
use std::path::Path;

fn replay(target: &str, body: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut n = 0;
    for entry in fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        body(&fs::read(&path).unwrap());
        n += 1;
    }
    assert!(n >= 3, "{target}: only {n} corpus inputs");
}

#[test]
fn decode_corpus() {
    replay("decode", ctxlog::fuzzing::decode);
}

#[test]
fn namespace_corpus() {
    replay("namespace", ctxlog::fuzzing::namespace);
}

#[test]
fn render_corpus() {
    replay("render", ctxlog::fuzzing::render);
}

#[test]
fn open_corpus() {
    replay("open", ctxlog::fuzzing::open);
}

#[test]
fn ops_corpus() {
    replay("ops", ctxlog::fuzzing::ops);
}
