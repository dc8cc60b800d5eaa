//! The command line: the demo runs on a fresh directory, scripts get JSON on
//! stdout, and errors are one `error: Kind: …` line with exit status 1 or 2.

mod common;

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn ctxlog(dir: &std::path::Path, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ctxlog"))
        .arg("--dir")
        .arg(dir)
        .args(args)
        .env_remove("CTXLOG_TENANT")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

#[test]
fn the_demo_runs_twice_on_one_directory() {
    let dir = common::tmp();
    for run in 0..2 {
        let out = ctxlog(dir.path(), &["demo"], b"");
        assert!(out.status.success(), "{}", stderr(&out));
        let text = stdout(&out);
        assert!(text.contains("ContextNotFound"), "{text}");
        assert!(
            text.contains(&format!("reopened: {} record(s)", 4 * (run + 1))),
            "{text}"
        );
    }
}

#[test]
fn append_then_history_round_trips_raw_bytes() {
    let dir = common::tmp();
    let msg = br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}],"metadata":{"x":{"y":1}}}"#;
    let out = ctxlog(dir.path(), &["--tenant", "acme", "append", "case 1"], msg);
    assert!(out.status.success(), "{}", stderr(&out));
    let receipt: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(receipt["seq"], 0);
    assert_eq!(receipt["contextId"], "case 1");
    assert!(receipt["key"].as_str().unwrap().starts_with("v1-"));

    let out = ctxlog(
        dir.path(),
        &["--tenant", "acme", "history", "case 1", "--last", "5"],
        b"",
    );
    let history: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let original: serde_json::Value = serde_json::from_slice(msg).unwrap();
    assert_eq!(history[0]["message"], original);

    let out = ctxlog(dir.path(), &["--tenant", "acme", "contexts"], b"");
    let listing: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(listing["contexts"][0]["contextId"], "case 1");
    assert_eq!(listing["contexts"][0]["messages"], 1);
}

#[test]
fn errors_are_one_line_with_the_kind_and_exit_status() {
    let dir = common::tmp();
    let out = ctxlog(dir.path(), &["--tenant", "other", "history", "case 1"], b"");
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.starts_with("error: ContextNotFound: "), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");

    let out = ctxlog(dir.path(), &["frobnicate"], b"");
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).starts_with("error: Usage: "));

    let out = ctxlog(dir.path(), &["history", "c", "--last", "many"], b"");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn check_reports_a_torn_tail_it_cut() {
    let dir = common::tmp();
    assert!(ctxlog(dir.path(), &["append", "c"], b"hello")
        .status
        .success());
    let seg = common::segment_files(dir.path()).pop().unwrap();
    let mut f = std::fs::OpenOptions::new().append(true).open(&seg).unwrap();
    f.write_all(&[9, 0, 0, 0, 1, 2]).unwrap();
    drop(f);
    let out = ctxlog(dir.path(), &["check"], b"");
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["tornTail"]["bytes"], 6);
    assert_eq!(report["records"], 1);
}
