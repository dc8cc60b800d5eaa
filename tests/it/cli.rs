//! The command line, driven through the built binary: the demo twice on one
//! directory, every command's JSON, and every error Kind with its exit status.

// They drive the built binary, which needs the `cli` feature.
#![cfg(feature = "cli")]

use crate::common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

/// Held (shared) while a child process is being started. A child forked
/// while this process holds a store open inherits the store's lock file
/// descriptor until it execs; a test that drops its store and then expects
/// a child to open the same directory takes this exclusively first, so that
/// no such copy of the lock is still alive.
static SPAWNING: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn ctxlog(dir: &Path, args: &[&str], stdin: &[u8]) -> Output {
    // `spawn` returns once the child has exec'd, and exec closes the
    // inherited descriptors (they are all close-on-exec).
    let spawning = SPAWNING.read().unwrap_or_else(|e| e.into_inner());
    let mut child = Command::new(env!("CARGO_BIN_EXE_ctxlog"))
        .arg("--dir")
        .arg(dir)
        .args(args)
        .env_remove("CTXLOG_TENANT")
        .env_remove("CTXLOG_DIR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(spawning);
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn ok(dir: &Path, args: &[&str], stdin: &[u8]) -> String {
    let out = ctxlog(dir, args, stdin);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn ok_json(dir: &Path, args: &[&str], stdin: &[u8]) -> Value {
    serde_json::from_str(&ok(dir, args, stdin)).unwrap()
}

/// Runs a command that must fail; checks the one-line `error: Kind: …` and
/// the exit status.
fn fails(dir: &Path, args: &[&str], stdin: &[u8], kind: &str, status: i32) {
    let out = ctxlog(dir, args, stdin);
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(status), "{args:?}: {err}");
    assert!(
        err.starts_with(&format!("error: {kind}: ")),
        "{args:?}: {err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

fn msg(id: &str, extra: Value) -> Vec<u8> {
    let mut m = json!({ "messageId": id, "role": "ROLE_USER", "parts": [{ "text": format!("text of {id}") }] });
    if let (Value::Object(m), Value::Object(e)) = (&mut m, extra) {
        m.extend(e);
    }
    serde_json::to_vec(&m).unwrap()
}

#[test]
fn the_demo_runs_twice_on_one_directory_and_continues_the_case() {
    let dir = common::tmp();
    let first = ok(dir.path(), &["demo"], b"");
    assert!(first.contains("run 1"), "{first}");
    assert!(first.contains("duplicate = true"));
    assert!(first.contains("refused: UnsupportedOperation"));
    assert!(first.contains("| assistant: I have verified you are the operator."));
    let second = ok(dir.path(), &["demo"], b"");
    assert!(
        second.contains("run 2 (tenant \"default\"; 5 message(s) already stored)"),
        "{second}"
    );
    assert!(second.contains("(4 in all)"), "{second}");
}

#[test]
fn the_a2a_commands_work_together() {
    let dir = common::tmp();
    let d = dir.path();
    let receipt = ok_json(
        d,
        &["send"],
        &msg("m1", json!({ "metadata": { "k": [1, 2] } })),
    );
    assert_eq!(receipt["duplicate"], false);
    let task = receipt["taskId"].as_str().unwrap().to_string();
    let context = receipt["contextId"].as_str().unwrap().to_string();
    assert_eq!(
        ok_json(
            d,
            &["send"],
            &msg("m1", json!({ "metadata": { "k": [1, 2] } }))
        )["duplicate"],
        true
    );

    let status = json!({ "statusUpdate": { "taskId": task, "contextId": context,
        "status": { "state": "TASK_STATE_WORKING", "message": { "messageId": "a1", "role": "ROLE_AGENT", "parts": [{ "text": "working" }] } } } });
    let ack = ok_json(d, &["event"], status.to_string().as_bytes());
    assert_eq!(
        (ack["taskId"].as_str(), ack["seq"].as_u64()),
        (Some(task.as_str()), Some(2))
    );
    let chunk = json!({ "artifactUpdate": { "taskId": task, "contextId": context,
        "artifact": { "artifactId": "r", "parts": [{ "text": "result" }] }, "lastChunk": true } });
    assert_eq!(
        ok_json(d, &["event"], chunk.to_string().as_bytes())["seq"],
        3
    );

    let t = ok_json(
        d,
        &[
            "task",
            &task,
            "--history-length",
            "1",
            "--include-artifacts",
        ],
        b"",
    );
    assert_eq!(t["status"]["state"], "TASK_STATE_WORKING");
    assert_eq!(t["history"].as_array().unwrap().len(), 1);
    assert_eq!(t["artifacts"][0]["parts"][0]["text"], "result");

    let listed = ok_json(
        d,
        &[
            "tasks",
            "--context",
            &context,
            "--status",
            "TASK_STATE_WORKING",
            "--page-size",
            "5",
            "--status-timestamp-after",
            "2000-01-01T00:00:00Z",
        ],
        b"",
    );
    assert_eq!(listed["totalSize"], 1);
    assert_eq!(listed["pageSize"], 5);
    assert_eq!(listed["nextPageToken"], "");
    assert_eq!(listed["tasks"][0]["id"], task.as_str());
    assert!(listed["tasks"][0].get("artifacts").is_none());

    let events = ok_json(d, &["events", &task, "--after", "1"], b"");
    let seqs: Vec<u64> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [2, 3]);
    assert!(events[0]["statusUpdate"].is_object() && events[1]["artifactUpdate"].is_object());

    let contexts = ok_json(d, &["contexts", "--page-size", "10"], b"");
    assert_eq!(contexts["contexts"][0]["contextId"], context.as_str());
    assert_eq!(contexts["contexts"][0]["tasks"], 1);
    let history = ok_json(d, &["history", &context, "--last", "5"], b"");
    assert_eq!(history[0]["message"]["metadata"]["k"], json!([1, 2]));
    let text = ok(
        d,
        &["render", &context, "--last", "5", "--max-bytes", "4096"],
        b"",
    );
    assert!(text.starts_with("<<<ctxlog-history nonce=") && text.contains("| working"));
    assert!(ok(d, &["key", &context], b"").starts_with("v1-"));
    assert_eq!(
        ok_json(d, &["check"], b"")["records"],
        3,
        "the resend stored nothing"
    );

    let canceled = ok_json(d, &["cancel", &task], b"");
    assert_eq!(canceled["status"]["state"], "TASK_STATE_CANCELED");

    assert_eq!(ok_json(d, &["delete", &context], b"")["deleted"], true);
    // A retried delete finds what it asked for; a context never made is not found.
    assert_eq!(ok_json(d, &["delete", &context], b"")["deleted"], true);
    fails(d, &["delete", "never-made"], b"", "ContextNotFound", 1);
    let compacted = ok_json(d, &["compact"], b"");
    assert!(
        compacted["recordsDropped"].as_u64().unwrap() >= 4,
        "{compacted}"
    );
    fails(d, &["history", &context], b"", "ContextNotFound", 1);
    fails(d, &["task", &task], b"", "TaskNotFound", 1);
    fails(
        d,
        &["send"],
        &msg("m9", json!({ "contextId": context })),
        "ContextRejected",
        1,
    );
}

#[test]
fn every_error_kind_has_its_line_and_status() {
    let dir = common::tmp();
    let d = dir.path();
    let r = ok_json(d, &["send"], &msg("m1", json!({})));
    let task = r["taskId"].as_str().unwrap().to_string();
    fails(d, &["task", "no-such-task"], b"", "TaskNotFound", 1);
    fails(
        d,
        &["--tenant", "other", "task", &task],
        b"",
        "TaskNotFound",
        1,
    );
    fails(
        d,
        &["send"],
        &msg("m1", json!({ "metadata": { "changed": true } })),
        "IdempotencyConflict",
        1,
    );
    fails(
        d,
        &["send"],
        &msg("m2", json!({ "contextId": "" })),
        "ContextRejected",
        1,
    );
    fails(d, &["send"], b"not json", "InvalidParams", 1);
    fails(d, &["history", "never-used"], b"", "ContextNotFound", 1);
    ok(d, &["cancel", &task], b"");
    fails(d, &["cancel", &task], b"", "TaskNotCancelable", 1);
    fails(
        d,
        &["send"],
        &msg("m3", json!({ "taskId": task })),
        "UnsupportedOperation",
        1,
    );
    fails(d, &["tasks", "--page-size", "0"], b"", "InvalidParams", 1);

    // Usage errors exit 2.
    fails(d, &["frobnicate"], b"", "Usage", 2);
    fails(d, &["history"], b"", "Usage", 2);
    fails(d, &["history", "c", "--last", "many"], b"", "Usage", 2);
    fails(d, &["tasks", "--status", "DONE"], b"", "Usage", 2);
    fails(d, &["tasks", "--bogus"], b"", "Usage", 2);
    fails(d, &["--durability", "never", "check"], b"", "Usage", 2);

    // A directory that is a file, and a segment of another format version.
    let file = d.join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    fails(&file, &["check"], b"", "Io", 1);
    let other = common::tmp();
    let store = ctxlog::internals::frame::StoreId([1; 16]);
    let mut header = ctxlog::internals::frame::encode_header(1, 0, store, None);
    header[8..12].copy_from_slice(&9u32.to_le_bytes());
    std::fs::write(other.path().join("0000000000000001.seg"), header).unwrap();
    fails(other.path(), &["check"], b"", "UnsupportedFormat", 1);

    // A second writer, here another process, gets Locked; a reader reads
    // beside the holder, read-only, and says so on stderr.
    let holder = ctxlog::Store::open(d, ctxlog::Options::default()).unwrap();
    fails(d, &["append", "c"], b"x", "Locked", 1);
    let out = ctxlog(d, &["check"], b"");
    assert!(out.status.success());
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["readOnly"], true);
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("note: the store is in use"));
    {
        let _no_fork = SPAWNING.write().unwrap_or_else(|e| e.into_inner());
        drop(holder);
    }
    ok(d, &["check"], b"");
}

#[test]
fn a_damaged_store_reports_corrupt() {
    let dir = common::tmp();
    let d = dir.path();
    for i in 0..5 {
        ok(d, &["append", "c"], format!("message {i}").as_bytes());
    }
    let seg = common::segment_files(d).pop().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[60] ^= 0x40;
    std::fs::write(&seg, bytes).unwrap();
    // The open trusts the checkpoint written at the last close; the damaged
    // record is caught by its checksum when it is read.
    fails(d, &["history", "c"], b"", "Corrupt", 1);
    // Without a checkpoint, the open's scan refuses it.
    std::fs::remove_file(d.join("CHECKPOINT")).unwrap();
    fails(d, &["check"], b"", "Corrupt", 1);
}

#[test]
fn check_reports_a_torn_tail_it_cut() {
    let dir = common::tmp();
    ok(dir.path(), &["append", "c"], b"hello");
    let seg = common::segment_files(dir.path()).pop().unwrap();
    let mut f = std::fs::OpenOptions::new().append(true).open(&seg).unwrap();
    f.write_all(&[9, 0, 0, 0, 1, 2]).unwrap();
    drop(f);
    // Verify (which changes nothing) calls it what the open will.
    let out = ctxlog(dir.path(), &["verify"], b"");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let verified: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(verified["clean"], true);
    assert_eq!(verified["tornTail"]["bytes"], 6);
    assert!(String::from_utf8_lossy(&out.stderr).contains("torn tail of 6 bytes"));
    let report = ok_json(dir.path(), &["check"], b"");
    assert_eq!(report["tornTail"]["bytes"], 6);
    assert_eq!(report["records"], 1);
}

#[test]
fn verify_stats_and_the_operator_tools() {
    let dir = common::tmp();
    let d = dir.path();
    ok(d, &["demo"], b"");
    let clean = ok_json(d, &["verify"], b"");
    assert_eq!(clean["clean"], true);
    assert!(clean["records"].as_u64().unwrap() >= 10);
    let stats = ok_json(d, &["stats"], b"");
    assert_eq!(stats["contexts"], 1);
    assert_eq!(stats["tasks"], 2);
    assert_eq!(stats["messages"], 5);
    assert!(stats["diskBytes"].as_u64().unwrap() > stats["liveBytes"].as_u64().unwrap());
    assert!(stats["indexBytes"].as_u64().unwrap() > 0);

    // Damage in a record: verify names it and exits 1, changing nothing.
    let seg = common::segment_files(d).pop().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    let len = bytes.len();
    bytes[len / 2] ^= 0x01;
    std::fs::write(&seg, &bytes).unwrap();
    let out = ctxlog(d, &["verify"], b"");
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["clean"], false);
    assert!(report["damage"][0]["offset"].as_u64().unwrap() > 0);
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("error: Corrupt: "));
    assert_eq!(
        std::fs::read(&seg).unwrap(),
        bytes,
        "verify changed nothing"
    );
}

#[test]
fn hermes_journals_import_with_their_good_lines() {
    let journals = common::tmp();
    let j = journals.path();
    let good = |n: u32, role: &str| {
        format!(r#"{{"ts": {n}, "role": "{role}", "text": "line {n}", "task_id": "t1"}}"#)
    };
    std::fs::write(
        j.join("support_case-1.jsonl"),
        format!(
            "{}\n{}\n{{\"ts\": 3, \"role\": \"user\", \"te\n{}\n",
            good(1, "user"),
            good(2, "assistant"),
            good(4, "user")
        ),
    )
    .unwrap();
    // A cut inside a multi-byte character must not empty the whole file.
    let mut cut = format!("{}\n", good(1, "user")).into_bytes();
    cut.extend_from_slice(
        "{\"ts\": 2, \"role\": \"user\", \"text\": \"caf\u{e9}"
            .as_bytes()
            .split_last()
            .unwrap()
            .1,
    );
    std::fs::write(j.join("other.jsonl"), cut).unwrap();
    std::fs::write(j.join("notes.txt"), "ignored").unwrap();

    let dir = common::tmp();
    let d = dir.path();
    let jd = j.to_str().unwrap();
    fails(d, &["import-hermes", jd], b"", "Usage", 2);
    // A dry run says what an import would do and writes nothing: there is
    // still no store.
    let dry = ok_json(
        d,
        &["import-hermes", jd, "--tenant", "hermes-users", "--dry-run"],
        b"",
    );
    assert_eq!(
        (dry["dryRun"].clone(), dry["messages"].clone()),
        (json!(true), json!(4))
    );
    fails(
        d,
        &["--tenant", "hermes-users", "stats"],
        b"",
        "StoreNotFound",
        1,
    );
    // --strict refuses the whole import, naming the first bad line.
    let out = ctxlog(
        d,
        &["--tenant", "hermes-users", "import-hermes", jd, "--strict"],
        b"",
    );
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("line 2: not UTF-8") && err.contains("nothing was imported"),
        "{err}"
    );
    fails(
        d,
        &["--tenant", "hermes-users", "stats"],
        b"",
        "StoreNotFound",
        1,
    );

    let report = ok_json(d, &["--tenant", "hermes-users", "import-hermes", jd], b"");
    assert_eq!(report["files"], 2);
    assert_eq!(report["contexts"], 2);
    assert_eq!(report["messages"], 4);
    assert_eq!(report["skippedLines"], 2);
    // Each skipped line with its file, number and reason.
    let skipped: Vec<(String, u64, String)> = report["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let file = s["file"].as_str().unwrap();
            let name = Path::new(file).file_name().unwrap().to_str().unwrap();
            (
                name.to_string(),
                s["line"].as_u64().unwrap(),
                s["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(skipped[0].0, "other.jsonl");
    assert_eq!(skipped[0].1, 2);
    assert!(skipped[0].2.starts_with("not UTF-8"), "{skipped:?}");
    assert_eq!(skipped[1].0, "support_case-1.jsonl");
    assert_eq!(skipped[1].1, 3);
    assert!(skipped[1].2.starts_with("not JSON"), "{skipped:?}");
    let history = ok_json(
        d,
        &["--tenant", "hermes-users", "history", "support_case-1"],
        b"",
    );
    let texts: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["message"]["parts"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["line 1", "line 2", "line 4"]);
    assert_eq!(history[1]["message"]["role"], "ROLE_AGENT");
    assert_eq!(
        history[2]["message"]["metadata"]["importedFrom"],
        json!({ "format": "hermes-jsonl", "file": "support_case-1.jsonl", "line": 4 })
    );
    // The journal's ts (seconds) are the stored timestamps.
    assert_eq!(history[1]["timestamp"], "1970-01-01T00:00:02.000Z");
    // Imported contexts are the tenant's own; running again imports nothing
    // twice, and resumes each file after its last imported line.
    fails(d, &["history", "support_case-1"], b"", "ContextNotFound", 1);
    let again = ok_json(d, &["--tenant", "hermes-users", "import-hermes", jd], b"");
    assert_eq!(again["messages"], 0);
    assert_eq!(again["resumedFiles"], 2);
    assert_eq!(again["skippedFiles"], json!([]));
}

/// An import cut short, or a journal that grew since, goes on from the
/// last line imported; other roles stay themselves; `content` is text; a
/// clock that went backwards keeps the context's order.
#[test]
fn import_hermes_resumes_and_keeps_roles_and_times() {
    let journals = common::tmp();
    let j = journals.path().join("case.jsonl");
    let lines = [
        r#"{"ts": "2026-11-30T09:00:00Z", "role": "user", "content": "hello"}"#,
        r#"{"ts": "2026-11-30T09:00:01Z", "role": "system", "content": [{"type": "text", "text": "be brief"}]}"#,
        r#"{"ts": "2026-11-30T08:00:00Z", "role": "tool", "text": "42"}"#,
        r#"{"ts": 1796029205000, "role": "assistant", "text": "done"}"#,
        r#"{"role": "agent"}"#,
        r#"{"text": "who said this?"}"#,
    ];
    let dir = common::tmp();
    let d = dir.path();
    let import = || {
        ok_json(
            d,
            &[
                "import-hermes",
                "--tenant",
                "h",
                journals.path().to_str().unwrap(),
            ],
            b"",
        )
    };
    std::fs::write(&j, format!("{}\n{}\n", lines[0], lines[1])).unwrap();
    let first = import();
    assert_eq!(
        (first["contexts"].clone(), first["messages"].clone()),
        (json!(1), json!(2))
    );
    std::fs::write(&j, lines.join("\n")).unwrap();
    let second = import();
    assert_eq!(second["resumedFiles"], 1);
    assert_eq!(second["alreadyImported"], 2);
    assert_eq!(second["messages"], 2);
    let reasons: Vec<(u64, &str)> = second["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["line"].as_u64().unwrap(), s["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(
        reasons,
        [(5, "neither \"text\" nor \"content\""), (6, "no \"role\"")]
    );
    let history = ok_json(d, &["--tenant", "h", "history", "case"], b"");
    let got: Vec<(&str, &str, &str)> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["message"]["role"].as_str().unwrap(),
                m["message"]["parts"][0]["text"].as_str().unwrap(),
                m["timestamp"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("ROLE_USER", "hello", "2026-11-30T09:00:00.000Z"),
            ("ROLE_UNSPECIFIED", "be brief", "2026-11-30T09:00:01.000Z"),
            // Earlier than the line before: stored at the context's latest.
            ("ROLE_UNSPECIFIED", "42", "2026-11-30T09:00:01.000Z"),
            ("ROLE_AGENT", "done", "2026-11-30T09:00:05.000Z"),
        ]
    );
    assert_eq!(history[2]["message"]["metadata"]["hermesRole"], "tool");
    assert_eq!(
        history[2]["message"]["metadata"]["ts"],
        "2026-11-30T08:00:00Z"
    );
    // Rendered as who they were.
    let text = ok(d, &["--tenant", "h", "render", "case"], b"");
    let heads: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with('[') && l.contains(" #"))
        .map(|l| l.rsplit(' ').next().unwrap())
        .collect();
    assert_eq!(heads, ["user]", "system]", "tool]", "agent]"]);
    // A context of that name that is not this file's import is left alone.
    ok(d, &["--tenant", "h2", "append", "case"], b"mine");
    let other = ok_json(
        d,
        &[
            "import-hermes",
            "--tenant",
            "h2",
            journals.path().to_str().unwrap(),
        ],
        b"",
    );
    assert_eq!(other["messages"], 0);
    assert!(other["skippedFiles"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("not an import of this file"));
}

/// What broke: `import-hermes` followed symbolic links out of the journal
/// directory, reading whatever they pointed at.
#[test]
fn import_hermes_reads_only_regular_files_in_the_directory() {
    let outside = common::tmp();
    let secret = outside.path().join("secret.jsonl");
    std::fs::write(&secret, r#"{"ts": 1, "role": "user", "text": "outside"}"#).unwrap();
    let journals = common::tmp();
    let j = journals.path();
    std::fs::write(
        j.join("inside.jsonl"),
        r#"{"ts": 1, "role": "user", "text": "inside"}"#,
    )
    .unwrap();
    std::os::unix::fs::symlink(&secret, j.join("linked.jsonl")).unwrap();
    std::os::unix::fs::symlink(outside.path(), j.join("dir.jsonl")).unwrap();
    let dir = common::tmp();
    let d = dir.path();
    let args = ["--tenant", "h", "import-hermes", j.to_str().unwrap()];
    let report = ok_json(d, &args, b"");
    assert_eq!(
        (report["files"].clone(), report["messages"].clone()),
        (json!(1), json!(1))
    );
    let skipped = report["skippedFiles"].as_array().unwrap();
    assert_eq!(skipped.len(), 2, "{report}");
    assert!(skipped
        .iter()
        .all(|s| s["reason"].as_str().unwrap().contains("not a regular file")));
    fails(
        d,
        &["--tenant", "h", "history", "linked"],
        b"",
        "ContextNotFound",
        1,
    );
}

/// Runs the binary with raw arguments and environment, outside the helpers.
fn raw(args: &[&std::ffi::OsStr], env: &[(&str, &std::ffi::OsStr)]) -> Output {
    let _spawning = SPAWNING.read().unwrap_or_else(|e| e.into_inner());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ctxlog"));
    cmd.args(args)
        .env_remove("CTXLOG_TENANT")
        .env_remove("CTXLOG_DIR")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// What broke: an argument or `--dir` that was not UTF-8 panicked (exit 101
/// with a backtrace), and a `CTXLOG_TENANT` that was not UTF-8 silently
/// became tenant `default`, printing that tenant's data.
#[test]
fn bytes_that_are_not_utf8_are_usage_errors_or_paths_never_a_panic() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let base = common::tmp();
    let dir = base.path().join(OsStr::from_bytes(b"store-\xff"));
    let d = dir.as_os_str();
    let bad = OsStr::from_bytes(b"c\xff");
    let s = |t: &'static str| OsStr::new(t);
    // A path that is not UTF-8 is a path like any other.
    let out = raw(&[s("--dir"), d, s("append"), s("c")], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dir.exists());
    for (args, says) in [
        (vec![s("--dir"), d, s("key"), bad], "UTF-8"),
        // Not a command of the list, whatever its bytes.
        (vec![s("--dir"), d, bad], "unrecognized subcommand"),
        (vec![s("--dir"), d, s("--tenant"), bad, s("stats")], "UTF-8"),
    ] {
        let out = raw(&args, &[]);
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.starts_with("error: Usage: ") && err.contains(says),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    let out = raw(
        &[s("--dir"), d, s("history"), s("c")],
        &[("CTXLOG_TENANT", bad)],
    );
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("CTXLOG_TENANT"), "{err}");
    assert!(out.stdout.is_empty());
}

/// What broke: an error whose text held a newline (from a path) broke the
/// one-line `error: Kind: …` contract.
#[test]
fn an_error_line_is_one_line_whatever_its_text_holds() {
    let base = common::tmp();
    let file = base.path().join("a\nb\u{2028}c");
    std::fs::write(&file, b"not a directory").unwrap();
    let out = raw(
        &[
            std::ffi::OsStr::new("--dir"),
            file.as_os_str(),
            std::ffi::OsStr::new("stats"),
        ],
        &[],
    );
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.starts_with("error: Io: "), "{err}");
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(err.ends_with('\n') && !err.trim_end_matches('\n').contains(['\n', '\u{2028}']));
    assert!(err.contains("a\\u{a}b\\u{2028}c"), "{err}");
}

/// What broke: a message in the form of A2A v0.3, which many clients still
/// send, was refused as "unknown variant `user`" with no word of what to
/// write instead.
#[test]
fn a_v03_message_or_event_is_refused_with_what_v1_expects() {
    let dir = common::tmp();
    let d = dir.path();
    let message = br#"{"kind":"message","messageId":"m1","role":"user","parts":[{"kind":"text","text":"hi"}]}"#;
    let event = br#"{"kind":"status-update","taskId":"t","contextId":"c","status":{"state":"working"},"final":false}"#;
    // A store for the event to go to (a refused send makes none).
    let made = ctxlog(
        d,
        &["send"],
        br#"{"messageId":"m0","role":"ROLE_USER","parts":[{"text":"hi"}]}"#,
    );
    assert_eq!(made.status.code(), Some(0), "{made:?}");
    for (command, body) in [("send", &message[..]), ("event", &event[..])] {
        let out = ctxlog(d, &[command], body);
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.starts_with("error: InvalidParams: "), "{err}");
        assert!(
            err.contains("A2A v0.3")
                && err.contains("\"ROLE_USER\"")
                && err.contains("statusUpdate"),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1);
    }
    // The same message in v1.0 form is taken.
    let v1 = br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#;
    assert_eq!(ok_json(d, &["send"], v1)["duplicate"], false);
}

/// Runs the binary with `args` alone (no --dir added).
fn bare(args: &[&str]) -> Output {
    let args: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
    raw(&args, &[])
}

/// The command names `ctxlog --help` lists.
fn commands() -> Vec<String> {
    let help = bare(&["--help"]);
    assert!(help.status.success());
    let text = String::from_utf8(help.stdout).unwrap();
    let list = text.split("Commands:\n").nth(1).unwrap();
    list.lines()
        .take_while(|l| l.starts_with("  "))
        .filter(|l| l.as_bytes().get(2).is_some_and(u8::is_ascii_lowercase))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect()
}

#[test]
fn every_command_has_its_help_and_the_binary_its_version() {
    let commands = commands();
    for c in [
        "send",
        "export",
        "import",
        "salvage",
        "import-hermes",
        "completions",
        "man",
    ] {
        assert!(commands.iter().any(|x| x == c), "{c} not in {commands:?}");
    }
    for command in commands.iter().filter(|c| *c != "help") {
        for args in [[command, "--help"], ["help", command]] {
            let out = bare(&args);
            let text = String::from_utf8(out.stdout).unwrap();
            assert!(out.status.success(), "{args:?}");
            assert!(text.contains(&format!("Usage: ctxlog {command}")), "{text}");
            assert!(
                text.contains("Global options:\n      --dir <DIR>"),
                "{text}"
            );
            let with_example = [
                "send",
                "event",
                "tasks",
                "history",
                "render",
                "check",
                "export",
                "import",
                "salvage",
                "import-hermes",
                "completions",
            ];
            if with_example.contains(&command.as_str()) {
                assert!(text.contains("\nExample"), "{command} has no example");
            }
        }
    }
    let version = bare(&["--version"]);
    assert_eq!(
        String::from_utf8(version.stdout).unwrap(),
        format!("ctxlog {}\n", env!("CARGO_PKG_VERSION"))
    );
    // "Did you mean" for a typo, on the one error line.
    let typo = bare(&["histroy", "c"]);
    let err = String::from_utf8(typo.stderr).unwrap();
    assert_eq!(typo.status.code(), Some(2));
    assert!(err.contains("history"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // Completions and the manual page, from the same definition.
    let bash = bare(&["completions", "bash"]);
    let bash = String::from_utf8(bash.stdout).unwrap();
    assert!(bash.contains("import-hermes") && bash.contains("--read-only"));
    let man = bare(&["man"]);
    let man = String::from_utf8(man.stdout).unwrap();
    assert!(
        man.starts_with(".ie") || man.starts_with(".TH"),
        "{}",
        &man[..80]
    );
    assert!(man.contains("salvage"));
    // Its NAME line says what ctxlog is once, and the help shows which
    // variables it reads without claiming they are set to nothing.
    assert!(
        man.contains("\nctxlog \\- The conversation history store"),
        "{}",
        &man[..300]
    );
    let help = String::from_utf8(bare(&["history", "--help"]).stdout).unwrap();
    assert!(help.contains("[env: CTXLOG_DIR]") && !help.contains("CTXLOG_DIR="));
    assert!(
        help.contains("<CONTEXT>  The contextId"),
        "the argument has no description: {help}"
    );
}

/// The error lines a newcomer meets first: a command missing its argument,
/// a search in the wrong tenant, a path through a file.
#[test]
fn errors_name_what_to_fix() {
    let dir = common::tmp();
    let d = dir.path();
    let stderr = |args: &[&str]| String::from_utf8(ctxlog(d, args, b"").stderr).unwrap();
    let missing = stderr(&["history"]);
    assert_eq!(
        missing.trim_end(),
        "error: Usage: the following required arguments were not provided: <CONTEXT> \
         (usage: ctxlog history <CONTEXT>); see ctxlog history --help"
    );
    ok(
        d,
        &["--tenant", "acme", "send"],
        &msg("m1", json!({ "contextId": "case" })),
    );
    let other = stderr(&["--tenant", "other", "history", "case"]);
    assert!(
        other.starts_with("error: ContextNotFound: no such context for tenant \"other\""),
        "{other}"
    );
    assert!(stderr(&["task", "t-1"]).contains("for tenant \"default\""));
    // An empty listing says whose it was, on stderr; stdout stays JSON.
    let out = ctxlog(d, &["--tenant", "other", "tasks"], b"");
    let note = String::from_utf8(out.stderr).unwrap();
    assert!(
        note.starts_with("note: no tasks for tenant \"other\""),
        "{note}"
    );
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["tasks"],
        json!([])
    );
    let out = ctxlog(d, &["--tenant", "acme", "tasks", "--status", "failed"], b"");
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains("no tasks that match"));
    let out = ctxlog(d, &["--tenant", "acme", "contexts"], b"");
    assert!(out.stderr.is_empty(), "a listing with contexts has no note");
    // A path through a file is that, not "no store here".
    let file = d.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let through = String::from_utf8(ctxlog(&file.join("x"), &["stats"], b"").stderr).unwrap();
    assert!(
        through.starts_with("error: Io: ") && through.contains("is a file"),
        "{through}"
    );
}

#[test]
fn global_options_go_before_or_after_the_command_in_either_spelling() {
    let dir = common::tmp();
    let d = dir.path().to_str().unwrap();
    for args in [
        vec!["--tenant", "acme", "append", "c"],
        vec!["append", "c", "--tenant", "acme"],
        vec!["append", "--tenant=acme", "c"],
    ] {
        let mut all = vec!["--dir", d];
        all.extend(args.iter());
        assert!(bare(&all).status.success(), "{args:?}");
    }
    let dir_flag = format!("--dir={d}");
    let tasks = bare(&["history", "c", &dir_flag, "--tenant", "acme"]);
    let history: Value = serde_json::from_slice(&tasks.stdout).unwrap();
    assert_eq!(history.as_array().unwrap().len(), 3);
    // A state in the spec's spelling or the short one; a date alone.
    for state in ["working", "TASK_STATE_WORKING", "input-required"] {
        let out = ctxlog(
            dir.path(),
            &[
                "tasks",
                "--status",
                state,
                "--status-timestamp-after",
                "2026-01-01",
            ],
            b"",
        );
        assert!(
            out.status.success(),
            "{state}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = ctxlog(dir.path(), &["tasks", "--status", "busy"], b"");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("possible values: submitted, working"), "{err}");
}

/// What broke: a mistyped `--dir` made a new, empty store and every read
/// command answered from it with zeros and exit 0.
#[test]
fn only_commands_that_add_data_create_a_store() {
    let base = common::tmp();
    let typo = base.path().join("stroe");
    for args in [
        vec!["stats"],
        vec!["contexts"],
        vec!["tasks"],
        vec!["task", "t"],
        vec!["events", "t"],
        vec!["history", "c"],
        vec!["render", "c"],
        vec!["verify"],
        vec!["check"],
        vec!["check", "--full"],
        vec!["export"],
        vec!["salvage"],
        vec!["delete", "c"],
        vec!["cancel", "t"],
        vec!["compact"],
        vec!["stats", "--read-only"],
    ] {
        fails(&typo, &args, b"", "StoreNotFound", 1);
        assert!(!typo.exists(), "{args:?} created {}", typo.display());
    }
    fails(&typo, &["event"], br#"{"statusUpdate":{"taskId":"t","contextId":"c","status":{"state":"TASK_STATE_WORKING"}}}"#, "StoreNotFound", 1);
    assert!(!typo.exists());
    ok(&typo, &["append", "c"], b"hello");
    assert!(typo.exists());
    // A writing command with --read-only is a usage error.
    fails(&typo, &["append", "c", "--read-only"], b"x", "Usage", 2);
}

/// Every read command answers while another process holds the store and
/// writes to it: from a snapshot of what was on disk when it opened, which
/// is a prefix of what the writer wrote.
#[test]
fn read_commands_work_beside_a_live_writer() {
    let dir = common::tmp();
    let d = dir.path();
    ok(d, &["send"], &msg("m0", json!({ "contextId": "c" })));
    let task = ok_json(d, &["tasks"], b"")["tasks"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let holder = std::sync::Arc::new(
        ctxlog::Store::open(
            d,
            ctxlog::Options::default().durability(ctxlog::Durability::Buffered),
        )
        .unwrap(),
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (holder, stop) = (holder.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            // Bounded: at most 20 000 appends, stopped when the readers are done.
            while n < 20_000 && !stop.load(std::sync::atomic::Ordering::Relaxed) {
                holder
                    .append_message("default", "log", format!("{n:08}").as_bytes())
                    .unwrap();
                n += 1;
            }
            n
        })
    };
    for args in [
        vec!["stats"],
        vec!["contexts"],
        vec!["tasks"],
        vec!["task", task.as_str()],
        vec!["events", task.as_str()],
        vec!["history", "c"],
        vec!["render", "c"],
        vec!["verify"],
        vec!["check"],
        vec!["export"],
    ] {
        let out = ctxlog(d, &args, b"");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {err}");
        assert!(
            err.starts_with("note: the store is in use"),
            "{args:?}: {err}"
        );
    }
    for _ in 0..5 {
        let history = ok_json(d, &["history", "log"], b"");
        let got: Vec<&str> = history
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["text"].as_str().unwrap())
            .collect();
        // The appends in order from the first, none missing: a prefix.
        for (i, body) in got.iter().enumerate() {
            assert_eq!(*body, format!("{i:08}"));
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let written = writer.join().unwrap();
    assert!(written > 0);
    // Writes beside the holder are refused with Locked.
    fails(d, &["append", "c"], b"x", "Locked", 1);
    let _no_fork = SPAWNING.write().unwrap_or_else(|e| e.into_inner());
    drop(holder);
}

/// `export` then `import` into an empty store, then `export` again, gives
/// the same bytes, for a store with every kind of record.
#[test]
fn export_then_import_round_trips_byte_for_byte() {
    let dir = common::tmp();
    let d = dir.path();
    // The demo makes messages that open and join tasks, statuses with
    // messages, artifacts in chunks and a follow-up task.
    ok(d, &["demo"], b"");
    ok(
        d,
        &["--tenant", "other", "append", "raw"],
        b"{\"not\": \"a2a\"}\n\xff",
    );
    ok(d, &["--tenant", "other", "append", "gone"], b"x");
    ok(d, &["--tenant", "other", "delete", "gone"], b"");
    let file = d.join("all.jsonl");
    let summary = ok_json(
        d,
        &[
            "export",
            "--all-tenants",
            "--output",
            file.to_str().unwrap(),
        ],
        b"",
    );
    let lines = std::fs::read_to_string(&file).unwrap();
    for key in [
        "\"raw\"",
        "\"opensTask\":true",
        "\"opensTask\":false",
        "\"statusUpdate\"",
        "\"artifactUpdate\"",
    ] {
        assert!(lines.contains(key), "no {key} in the export");
    }
    assert!(
        !lines.contains("\"gone\""),
        "a deleted context is not exported"
    );
    assert_eq!(
        summary["records"].as_u64().unwrap(),
        lines.lines().count() as u64
    );

    let copy = common::tmp();
    let c = copy.path();
    let imported = ok_json(c, &["import", file.to_str().unwrap()], b"");
    assert_eq!(imported["records"], summary["records"]);
    let again = ok(c, &["export", "--all-tenants"], b"");
    assert_eq!(again, lines, "the export of the import differs");
    // Importing the same file again would duplicate: refused; --resume skips.
    let out = ctxlog(c, &["import", file.to_str().unwrap()], b"");
    assert_eq!(out.status.code(), Some(1));
    let resumed = ok_json(c, &["import", "--resume", file.to_str().unwrap()], b"");
    assert_eq!(resumed["records"], 0);
    assert_eq!(resumed["skippedAsPresent"], summary["records"]);
    // The tasks read the same.
    let tasks = |d: &Path| {
        ok(
            d,
            &["tasks", "--include-artifacts", "--history-length", "100"],
            b"",
        )
    };
    assert_eq!(tasks(c), tasks(d));
}

/// `salvage` saves every readable record of a store with a flipped byte,
/// without changing the store, and lists what it could not read.
#[test]
fn salvage_saves_what_is_readable_of_a_damaged_store() {
    let dir = common::tmp();
    let d = dir.path();
    for i in 0..4 {
        for c in ["a", "b"] {
            ok(d, &["append", c], format!("{c}{i}").as_bytes());
        }
    }
    let seg = common::segment_files(d).pop().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    let at = bytes.windows(2).position(|w| w == b"a2").unwrap();
    bytes[at] ^= 0x10;
    std::fs::write(&seg, &bytes).unwrap();
    let files = || {
        let mut v: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.file_name(), std::fs::read(e.path()).unwrap())
            })
            .collect();
        v.sort();
        v
    };
    let before = files();
    // Strict: the damaged context cannot be read, and the error says how on.
    let out = ctxlog(d, &["history", "a"], b"");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with("error: Corrupt: ") && err.contains("--recovery skip-corrupt"),
        "{err}"
    );
    assert!(!err.contains("RecoveryMode"), "{err}");
    let saved = d.join("saved.jsonl");
    let summary = ok_json(d, &["salvage", "--output", saved.to_str().unwrap()], b"");
    assert_eq!(summary["records"], 7);
    assert_eq!(
        summary["open"]["skipped"].as_array().unwrap().len(),
        1,
        "{summary}"
    );
    std::fs::remove_file(&saved).ok();
    assert_eq!(files(), before, "salvage changed the store");
    let saved_text = ok(d, &["salvage"], b"");
    let raws: Vec<String> = saved_text
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["raw"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(raws, ["a0", "a1", "a3", "b0", "b1", "b2", "b3"]);
    // And --recovery skip-corrupt reads past it on any read command.
    let history = ok_json(
        d,
        &["history", "a", "--recovery", "skip-corrupt", "--read-only"],
        b"",
    );
    assert_eq!(history.as_array().unwrap().len(), 3);
    // check --full finds what check alone took from the checkpoint unread.
    let check = ctxlog(d, &["check"], b"");
    let report: Value = serde_json::from_slice(&check.stdout).unwrap();
    assert!(check.status.success());
    assert_eq!(report["recordsFromCheckpointUnread"], 8);
    assert!(report["note"].as_str().unwrap().contains("check --full"));
    let out = ctxlog(d, &["check", "--full"], b"");
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["verify"]["clean"], false);
}

/// What broke: a reader that stopped early (`ctxlog history c | head`) made
/// the command panic on the closed pipe. It now ends quietly, with the
/// status of a writer killed by SIGPIPE.
#[test]
fn a_reader_that_stops_reading_ends_the_command_quietly() {
    use std::io::Read;
    let dir = common::tmp();
    let d = dir.path();
    ok(d, &["append", "big"], &vec![b'x'; 1 << 20]);
    for args in [&["history", "big"][..], &["export"][..]] {
        let mut child = {
            let _spawning = SPAWNING.read().unwrap_or_else(|e| e.into_inner());
            Command::new(env!("CARGO_BIN_EXE_ctxlog"))
                .arg("--dir")
                .arg(d)
                .args(args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let mut first = [0u8; 16];
        child.stdout.take().unwrap().read_exact(&mut first).unwrap();
        // The pipe's read end is closed here, with most of the output unread.
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(141), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "{args:?}");
    }
}
