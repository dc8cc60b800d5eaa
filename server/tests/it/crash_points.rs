//! A crash at each of the server's own steps between a message's receive
//! and its agent's first event, for a message that opens a task and for a
//! follow-up to a task that asked for input, under both restart policies.
//! The process dies at the point (`CTXLOG_SERVER_CRASH_AT`, an abort, as a
//! `kill -9`) and is started again on the same store: the turn is never
//! left unanswered. `fail` fails it with the interruption message, `resume`
//! runs it again, and a resend of the message waits for that turn's end.
//!
//! What broke: a follow-up received just before a crash left its task
//! INPUT_REQUIRED, with the answer in its history and no turn to run it,
//! forever; the restart scan only looked at SUBMITTED and WORKING tasks.

use crate::common;

use std::time::Duration;

use common::{user, Client};
use serde_json::{json, Value};

use common::process;

use process::Process;

const BIN: &str = env!("CARGO_BIN_EXE_ctxlog-server");

fn script(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("script.json");
    let script = json!({ "rules": [
        { "text": "question", "steps": [
            { "status": "TASK_STATE_INPUT_REQUIRED", "text": "which card?" } ] },
        { "text": "card", "steps": [
            { "status": "TASK_STATE_WORKING", "text": "charging" },
            { "status": "TASK_STATE_COMPLETED", "text": "charged {text}" } ] }
    ]});
    std::fs::write(&path, script.to_string()).unwrap();
    path
}

fn start(store: &std::path::Path, script: &std::path::Path, policy: &str, crash: &str) -> Process {
    let scripted = format!("scripted:{}", script.display());
    let args = [
        "--dir".as_ref(),
        store.as_os_str(),
        "--on-restart".as_ref(),
        policy.as_ref(),
        "--agent".as_ref(),
        scripted.as_ref(),
    ];
    let env: &[(&str, &str)] = match crash {
        "" => &[],
        point => &[(ctxlog_server::crashpoint::VARIABLE, point)],
    };
    Process::with_env(BIN, &args, "info", env)
}

/// A blocking SendMessage that may get no answer (the server dies).
async fn send_dying(url: &str, message: Value) {
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                       "params": { "message": message } });
    let _ = reqwest::Client::new()
        .post(format!("{url}/"))
        .header("A2A-Version", "1.0")
        .header("content-type", "application/json")
        .body(body.to_string())
        .timeout(Duration::from_secs(30))
        .send()
        .await;
}

fn texts(task: &Value) -> Vec<String> {
    task["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["parts"][0]["text"].as_str().unwrap().to_string())
        .collect()
}

/// One crash: at `point`, on the message `crashed` (a follow-up to a task
/// that asked which card when `follow_up`), then a restart under `policy`.
async fn crash_at(point: &str, follow_up: bool, policy: &str) {
    let case = format!("{point}, follow-up {follow_up}, {policy}");
    let dir = tempfile::tempdir().unwrap();
    let script = script(dir.path());
    let store = dir.path().join("store");

    let mut task_id = None;
    if follow_up {
        let server = start(&store, &script, policy, "");
        let c = Client::new(&server.url, None);
        let (_, asked) = c
            .rpc(
                "SendMessage",
                json!({ "message": user("q1", "a question") }),
            )
            .await;
        let task = &asked["result"]["task"];
        assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
        task_id = Some(task["id"].as_str().unwrap().to_string());
        server.kill();
    }
    let mut answer = user("a1", "the blue card");
    if let Some(id) = &task_id {
        answer["taskId"] = json!(id);
    }

    let mut dying = start(&store, &script, policy, point);
    send_dying(&dying.url, answer.clone()).await;
    assert!(
        dying.exited_within(Duration::from_secs(30)),
        "{case}: the server dies at the point"
    );

    let server = start(&store, &script, policy, "");
    let c = Client::new(&server.url, None);
    // A resend of the message waits for its own turn's end (the run again,
    // or the failure the restart stored), never the task's earlier state.
    let (_, again) = c.rpc("SendMessage", json!({ "message": answer })).await;
    let task = &again["result"]["task"];
    if let Some(id) = &task_id {
        assert_eq!(task["id"], json!(id), "{case}");
    }
    let state = task["status"]["state"].as_str().unwrap();
    let said = task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default();
    match policy {
        "fail" => {
            assert_eq!(state, "TASK_STATE_FAILED", "{case}: {again}");
            assert!(said.contains("interrupted"), "{case}: {said}");
        }
        _ => {
            assert_eq!(state, "TASK_STATE_COMPLETED", "{case}: {again}");
            assert_eq!(said, "charged the blue card", "{case}");
        }
    }
    // Nothing acknowledged or received is lost: the answer is in the
    // history, after the question when there was one.
    let history = texts(task);
    let answered = history.iter().position(|t| t == "the blue card");
    assert!(answered.is_some(), "{case}: {history:?}");
    if follow_up {
        assert_eq!(history[..2], ["a question", "which card?"], "{case}");
    }
    // The restart said what it did.
    assert!(
        server
            .log()
            .iter()
            .any(|l| l.contains("interrupted") && l.contains("tasks=1")),
        "{case}: {:?}",
        server.log()
    );
    server.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_receive_and_first_event_never_leaves_a_turn_unanswered() {
    for point in ctxlog_server::crashpoint::POINTS {
        for follow_up in [false, true] {
            for policy in ["fail", "resume"] {
                crash_at(point, follow_up, policy).await;
            }
        }
    }
}
