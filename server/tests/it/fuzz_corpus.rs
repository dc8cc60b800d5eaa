//! Replays every committed input of the `rpc` fuzz target through its body,
//! so CI catches a regression without a fuzzing engine.

#[test]
fn rpc_corpus() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/rpc");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        ctxlog_server::fuzzing::rpc(&std::fs::read(&path).unwrap());
        n += 1;
    }
    assert!(n >= 10, "only {n} corpus inputs");
}
