//! The command-line examples of the README and of docs/cli.md, run against
//! the built binary so the docs cannot drift from it.
//!
//! Every ```console block of docs/cli.md is a shell session: a line `$ cmd`
//! runs `cmd` (through `sh`, with this build's
//! `ctxlog` first on the PATH, in one empty directory shared by all blocks,
//! variables kept from line to line within a block), and the lines up to the
//! next `$` are what it prints, stdout and stderr together. In those lines, a
//! line `...` matches any lines and `...` inside a line any text. A command
//! whose expected output starts with `error:` must fail; every other one
//! must succeed. The ```sh block of the README's "The command line" section
//! is a session too, each line a command that must succeed.

// They drive the built binary, which needs the `cli` feature.
#![cfg(feature = "cli")]

use std::path::Path;
use std::process::Command;

use crate::common;

/// One command of a session and what it should print.
struct Step {
    command: String,
    expected: Vec<String>,
}

/// The sessions of a page's blocks of `kind` (`console`, or `sh`: every
/// line a command, its output not shown).
fn sessions(page: &str, kind: &str) -> Vec<Vec<Step>> {
    let opening = format!("```{kind}");
    let mut sessions = Vec::new();
    let mut lines = page.lines();
    while let Some(line) = lines.next() {
        if line.trim() != opening {
            continue;
        }
        let mut steps: Vec<Step> = Vec::new();
        for line in lines.by_ref() {
            if line.trim() == "```" {
                break;
            }
            let command = match kind {
                "sh" => Some(line),
                _ => line.strip_prefix("$ "),
            };
            match (command, steps.last_mut()) {
                (Some(command), _) => steps.push(Step {
                    command: command.to_string(),
                    expected: Vec::new(),
                }),
                (None, Some(step)) => step.expected.push(line.to_string()),
                (None, None) => panic!("output before any command: {line:?}"),
            }
        }
        sessions.push(steps);
    }
    sessions
}

/// Whether `got` matches `want`, where `...` inside a line is any text.
fn line_matches(want: &str, got: &str) -> bool {
    let mut pieces = want.split("...");
    let first = pieces.next().unwrap_or_default();
    let Some(mut rest) = got.strip_prefix(first) else {
        return false;
    };
    let pieces: Vec<&str> = pieces.collect();
    for (i, piece) in pieces.iter().enumerate() {
        if i == pieces.len() - 1 {
            return rest.ends_with(piece);
        }
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// Whether the lines `got` match `want`, where a line `...` is any lines.
fn lines_match(want: &[String], got: &[&str]) -> bool {
    match want.split_first() {
        None => got.is_empty(),
        Some((w, rest)) if w == "..." => {
            (0..=got.len()).any(|skip| lines_match(rest, &got[skip..]))
        }
        Some((w, rest)) => got
            .split_first()
            .is_some_and(|(g, more)| line_matches(w, g) && lines_match(rest, more)),
    }
}

/// Runs a session in `dir` as one shell script, each command's output and
/// exit status fenced by markers; returns (output, status) per command.
fn run(dir: &Path, steps: &[Step]) -> Vec<(String, i32)> {
    let mut script = String::from("exec 2>&1\n");
    for (i, step) in steps.iter().enumerate() {
        script.push_str(&format!(
            "printf '\\n@@start {i}@@\\n'\n{}\nprintf '\\n@@status %s@@\\n' \"$?\"\n",
            step.command
        ));
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_ctxlog")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .current_dir(dir)
        .env("PATH", path)
        .env_remove("CTXLOG_DIR")
        .env_remove("CTXLOG_TENANT")
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut results = Vec::new();
    for (i, _) in steps.iter().enumerate() {
        let start = format!("\n@@start {i}@@\n");
        let after = &text[text.find(&start).expect("the session ran to its end") + start.len()..];
        let end = after.find("\n@@status ").unwrap();
        let status = after[end + 10..]
            .split("@@")
            .next()
            .unwrap()
            .parse()
            .unwrap();
        results.push((after[..end].to_string(), status));
    }
    results
}

#[test]
fn the_readme_command_line_examples_do_what_they_show() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let section = readme
        .split("\n## ")
        .find(|s| s.starts_with("The command line"))
        .expect("the README has a command-line section");
    let [steps] = &sessions(section, "sh")[..] else {
        panic!("the README's command-line section has not one sh block");
    };
    assert!(
        steps.len() >= 4,
        "the README shows {} commands",
        steps.len()
    );
    let dir = common::tmp();
    for (step, (output, status)) in steps.iter().zip(run(dir.path(), steps)) {
        assert_eq!(status, 0, "$ {}\nexited {status}:\n{output}", step.command);
    }
}

#[test]
fn the_command_line_page_examples_do_what_they_show() {
    let page =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cli.md")).unwrap();
    let sessions = sessions(&page, "console");
    assert!(
        sessions.len() >= 3,
        "the console blocks of docs/cli.md were not found"
    );
    let dir = common::tmp();
    let mut commands = 0;
    for steps in &sessions {
        for (step, (output, status)) in steps.iter().zip(run(dir.path(), steps)) {
            commands += 1;
            let should_fail = step
                .expected
                .first()
                .is_some_and(|l| l.starts_with("error:"));
            assert_eq!(
                status != 0,
                should_fail,
                "$ {}\nexited {status}:\n{output}",
                step.command
            );
            let got: Vec<&str> = output.trim_end_matches('\n').lines().collect();
            // A command shown without output is checked for its status only.
            if !step.expected.is_empty() {
                assert!(
                    lines_match(&step.expected, &got),
                    "$ {}\nprinted:\n{output}\ndocs/cli.md shows:\n{}",
                    step.command,
                    step.expected.join("\n")
                );
            }
        }
    }
    assert!(commands >= 20, "{commands} commands found");
}

#[test]
fn the_matcher_tells_apart_what_it_should() {
    let want = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(lines_match(
        &want(&["a", "...", "d"]),
        &["a", "b", "c", "d"]
    ));
    assert!(lines_match(&want(&["a", "...", "d"]), &["a", "d"]));
    assert!(!lines_match(&want(&["a", "...", "d"]), &["a", "b", "c"]));
    assert!(!lines_match(&want(&["a", "b"]), &["a", "b", "c"]));
    assert!(line_matches(
        r#"  "taskId": "...""#,
        r#"  "taskId": "0f3a""#
    ));
    assert!(!line_matches(r#"  "taskId": "...""#, r#"  "taskId": 7"#));
    assert!(line_matches("x...y...z", "x1y2z"));
    assert!(!line_matches("x...y...z", "x1z2y"));
    assert!(!line_matches("abc", "abcd"));
}

/// The command line as `cargo install --path .` builds it (its default
/// features) restores from what the server replicates to: a directory or
/// S3, as the README and docs/replication.md show.
#[test]
fn a_default_build_has_restore_for_a_directory_and_s3() {
    let help = Command::new(env!("CARGO_BIN_EXE_ctxlog"))
        .args(["restore", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.status.success(),
        "{}",
        String::from_utf8_lossy(&help.stderr)
    );
    assert!(text.contains("s3://"), "{text}");
    // An S3 URL is taken (it fails on the missing bucket or credentials,
    // not on a build without S3).
    let tmp = tempfile::tempdir().unwrap();
    let listed = Command::new(env!("CARGO_BIN_EXE_ctxlog"))
        .args(["restore", "s3://no-such-bucket/prefix", "--list"])
        .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_ACCESS_KEY_ID", "x")
        .env("AWS_SECRET_ACCESS_KEY", "x")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_MAX_ATTEMPTS", "1")
        .current_dir(tmp.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&listed.stderr);
    assert!(!listed.status.success());
    assert!(!stderr.contains("replicate-s3 feature"), "{stderr}");
}
