//! The server examples of the README and docs/server.md, run as written,
//! in the order written, in one directory, as a reader following both
//! would run them: each `ctxlog-server` line starts this build's server
//! (on a free port instead of 8080; the one before is stopped first), and
//! each `curl` line is run by `sh` against it, as written but for the
//! port, with `TASK_ID` standing for the last task an answer named. Every
//! command must exit 0 and answer no error (a JSON body, or each event of
//! a stream). `cargo install` lines are what built the binaries used here.
//! Blocks naming `s3://` need an object store and are left to the
//! replication tests; the CLI's examples are run by the engine's
//! `tests/it/readme_cli.rs`.
//!
//! What broke: the README's v0.3 curl and docs/server.md's examples reused
//! `m1`/`m2` on the same store, so following both answered
//! IDEMPOTENCY_CONFLICT.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::process::Process;
use serde_json::Value;

/// A ```sh block: where it is, and its commands (continuation lines and
/// quoted text across lines joined).
struct Block {
    at: String,
    commands: Vec<String>,
}

fn blocks(file: &str) -> Vec<Block> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(file))
        .unwrap_or_else(|e| panic!("{file}: {e}"));
    let mut blocks = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((n, line)) = lines.next() {
        if line.trim() != "```sh" {
            continue;
        }
        let mut commands = Vec::new();
        let mut open = String::new();
        for (_, line) in lines.by_ref() {
            if line.trim() == "```" {
                break;
            }
            open.push_str(line);
            open.push('\n');
            let quoted = open.matches('\'').count() % 2 == 1;
            if !quoted && !line.ends_with('\\') {
                commands.push(std::mem::take(&mut open));
            }
        }
        assert!(
            open.is_empty(),
            "{file}:{}: a command is never closed",
            n + 1
        );
        blocks.push(Block {
            at: format!("{file}:{}", n + 1),
            commands,
        });
    }
    blocks
}

/// The server a `ctxlog-server` line starts, on a free port.
fn start(dir: &Path, line: &str) -> Process {
    let line = match line.contains("--listen 127.0.0.1:8080") {
        true => line.replace("--listen 127.0.0.1:8080", "--listen 127.0.0.1:0"),
        false => line.replacen("ctxlog-server", "ctxlog-server --listen 127.0.0.1:0", 1),
    };
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(format!("exec {line}"))
        .current_dir(dir)
        .env("PATH", path());
    Process::spawn(command, "warn,ctxlog_server=info")
}

/// PATH with this build's binaries first.
fn path() -> String {
    let bin = Path::new(env!("CARGO_BIN_EXE_ctxlog-server"))
        .parent()
        .expect("the binary's folder");
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// The answers in `output`: one JSON body, or each event of a stream.
fn answers(output: &str) -> Vec<Value> {
    if let Ok(v) = serde_json::from_str::<Value>(output) {
        return vec![v];
    }
    output
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
        .collect()
}

/// The task an answer names, if any (v1.0's `task`, a stream's, v0.3's
/// JSON-RPC `result`).
fn task_id(answer: &Value) -> Option<String> {
    let task = answer
        .get("task")
        .or_else(|| answer.get("result").filter(|r| r["kind"] == "task"))?;
    task["id"].as_str().map(str::to_string)
}

#[test]
fn the_server_examples_run_as_written_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut server: Option<Process> = None;
    let mut task: Option<String> = None;
    let mut curls = 0;
    for file in ["README.md", "docs/server.md"] {
        for block in blocks(file) {
            let text = block.commands.concat();
            let serves = block
                .commands
                .iter()
                .any(|c| c.trim_start().starts_with("ctxlog-server"));
            if text.contains("s3://") || !serves && !text.contains("localhost:8080") {
                continue;
            }
            for command in &block.commands {
                let at = &block.at;
                let trimmed = command.trim_start();
                if trimmed.starts_with("cargo install") {
                    continue;
                }
                if trimmed.starts_with("ctxlog-server") {
                    if let Some(mut old) = server.take() {
                        old.signal("TERM");
                        assert!(old.exited_within(Duration::from_secs(30)), "{at}: no exit");
                    }
                    server = Some(start(dir.path(), trimmed));
                    continue;
                }
                assert!(trimmed.starts_with("curl "), "{at}: what runs {trimmed:?}?");
                let url = &server.as_ref().expect("a server started above").url;
                let host = url.trim_start_matches("http://");
                let mut line = command.replace("localhost:8080", host).replacen(
                    "curl ",
                    "curl --max-time 30 ",
                    1,
                );
                if line.contains("TASK_ID") {
                    let id = task.as_deref().expect("a task named before TASK_ID");
                    line = line.replace("TASK_ID", id);
                }
                let out = Command::new("sh")
                    .arg("-c")
                    .arg(&line)
                    .current_dir(dir.path())
                    .output()
                    .unwrap();
                let output = String::from_utf8_lossy(&out.stdout);
                let short: String = output.chars().take(600).collect();
                assert!(out.status.success(), "{at}: {line}\nexited {}", out.status);
                let answers = answers(&output);
                assert!(
                    !answers.is_empty(),
                    "{at}: {line}\nanswered nothing: {short}"
                );
                for answer in &answers {
                    assert!(
                        answer.get("error").is_none(),
                        "{at}: {line}\nanswered an error: {short}"
                    );
                    if let Some(id) = task_id(answer) {
                        task = Some(id);
                    }
                }
                curls += 1;
            }
        }
    }
    assert!(curls >= 7, "{curls} curl examples found");
}
