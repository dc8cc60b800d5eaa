//! Replays every committed fuzz corpus input through its target's body, so CI
//! catches a regression without a fuzzing engine.

use std::fs;
use std::path::Path;

fn replay(target: &str, body: fn(&[u8])) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut n = 0;
    for entry in fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        body(&fs::read(&path).unwrap());
        n += 1;
    }
    n
}

#[test]
fn decode_corpus_replays_without_panic() {
    assert!(replay("decode", ctxlog::fuzzing::decode) >= 3);
}
