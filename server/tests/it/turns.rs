//! Turns as reads see them: a follow-up taken but not yet answered reads as
//! WORKING (never the question it answers), its resend waits for its own
//! turn, and a resend is answered even when the server runs as many turns
//! as it may.
//!
//! What broke: while the agent worked on a follow-up, GetTask, a
//! `returnImmediately` answer and a resend of the follow-up all reported
//! the stale INPUT_REQUIRED and the previous question; at `--max-turns`, a
//! resend (which starts no turn) was refused TOO_MANY_TURNS.

use crate::common;

use std::sync::Arc;

use ctxlog::a2a::{Message, Role, TaskState};
use ctxlog_server::{AgentError, AgentExecutor, BoxFuture, EventSink, TurnContext};
use serde_json::{json, Value};

use common::{reason, user, Client, Gated, GatedAgent, TestServer};

/// Asks which card on a task's first turn; every later turn goes through
/// the gate (WORKING, wait, COMPLETED).
struct AsksFirst(Arc<Gated>);

impl AgentExecutor for AsksFirst {
    fn execute(&self, turn: TurnContext, events: EventSink) -> BoxFuture<Result<(), AgentError>> {
        if turn.task.history.len() > 1 {
            return GatedAgent(self.0.clone()).execute(turn, events);
        }
        Box::pin(async move {
            let question = Message::new("", Role::Agent, &["which card?"]);
            events
                .status(TaskState::InputRequired, Some(question))
                .await?;
            Ok(())
        })
    }
}

fn now(message: Value) -> Value {
    json!({ "message": message, "configuration": { "returnImmediately": true } })
}

fn state(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_in_progress_reads_as_working_and_its_resend_waits_for_its_turn() {
    let gated = Gated::new(0);
    let server = TestServer::start(Arc::new(AsksFirst(gated.clone())), |_| {}, None).await;
    let c = Client::new(&server.url, None);
    let (_, asked) = c
        .rpc("SendMessage", json!({ "message": user("q", "refund") }))
        .await;
    let task = &asked["result"]["task"];
    assert_eq!(state(task), "TASK_STATE_INPUT_REQUIRED");
    let id = task["id"].as_str().unwrap().to_string();

    let mut answer = user("a", "the blue one");
    answer["taskId"] = json!(id);
    // Taken, not yet answered: WORKING, the question no longer the status.
    let (_, taken) = c.rpc("SendMessage", now(answer.clone())).await;
    let taken = &taken["result"]["task"];
    assert_eq!(state(taken), "TASK_STATE_WORKING", "{taken}");
    assert!(taken["status"].get("message").is_none(), "{taken}");
    let (_, got) = c.rpc("GetTask", json!({ "id": id })).await;
    assert_eq!(state(&got["result"]), "TASK_STATE_WORKING");
    let listed = c
        .rest("GET", "/tasks?status=TASK_STATE_INPUT_REQUIRED", None)
        .await
        .1;
    assert_eq!(listed["totalSize"], 0, "{listed}");

    // A blocking resend waits for the follow-up's own turn to end.
    let resend = {
        let c = c.clone();
        let answer = answer.clone();
        tokio::spawn(async move { c.rpc("SendMessage", json!({ "message": answer })).await })
    };
    gated.open();
    let (_, done) = resend.await.unwrap();
    let done = &done["result"]["task"];
    assert_eq!(state(done), "TASK_STATE_COMPLETED", "{done}");
    assert_eq!(
        done["status"]["message"]["parts"][0]["text"],
        "done: the blue one"
    );
    assert_eq!(gated.calls(), 1, "the resend ran nothing");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_sent_at_once_to_one_question_are_each_its_own_turns_or_refused() {
    // Five answers to one INPUT_REQUIRED task at once, 20 rounds: one
    // joins the task and gets its own turn's outcome; the others are
    // refused (the task is WORKING on the first), never answered with the
    // first's outcome, and their messages are not stored.
    let gated = Gated::new(0);
    for _ in 0..100 {
        gated.open();
    }
    let server = TestServer::start(Arc::new(AsksFirst(gated.clone())), |_| {}, None).await;
    let c = Client::new(&server.url, None);
    let mut refused = 0;
    for round in 0..20 {
        let (_, asked) = c
            .rpc(
                "SendMessage",
                json!({ "message": user(&format!("q{round}"), "refund") }),
            )
            .await;
        let id = asked["result"]["task"]["id"].as_str().unwrap().to_string();
        let sends: Vec<_> = (0..5)
            .map(|i| {
                let c = c.clone();
                let mut answer = user(&format!("a{round}-{i}"), &format!("card {round}-{i}"));
                answer["taskId"] = json!(id);
                tokio::spawn(async move {
                    let got = c.rpc("SendMessage", json!({ "message": answer })).await.1;
                    (i, got)
                })
            })
            .collect();
        let mut joined = Vec::new();
        for send in sends {
            let (i, got) = send.await.unwrap();
            if got["result"]["task"].is_object() {
                let task = &got["result"]["task"];
                assert_eq!(state(task), "TASK_STATE_COMPLETED", "{got}");
                assert_eq!(
                    task["status"]["message"]["parts"][0]["text"],
                    format!("done: card {round}-{i}"),
                    "answer {i} of round {round} got another's outcome: {got}"
                );
                joined.push(i);
            } else {
                assert_eq!(got["error"]["code"], -32004, "{got}");
                // Refused while the first's turn runs, or once it ended.
                let why = got["error"]["message"].as_str().unwrap();
                assert!(
                    why.contains("its turn is running") || why.contains("terminal states"),
                    "{got}"
                );
                refused += 1;
            }
        }
        assert_eq!(joined.len(), 1, "round {round}: {joined:?} joined");
        // The task holds the question, and the one answer that joined.
        let (_, got) = c.rpc("GetTask", json!({ "id": id })).await;
        let history = got["result"]["history"].as_array().unwrap();
        let users = history.iter().filter(|m| m["role"] == "ROLE_USER").count();
        assert_eq!(users, 2, "{got}");
    }
    assert_eq!(refused, 80);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_bound_on_turns_a_resend_is_answered_and_a_new_message_refused() {
    let gated = Gated::new(0);
    let server = TestServer::start(
        Arc::new(GatedAgent(gated.clone())),
        |c| c.max_turns = 1,
        None,
    )
    .await;
    let c = Client::new(&server.url, None);
    let (_, first) = c.rpc("SendMessage", now(user("m1", "hold"))).await;
    let id = first["result"]["task"]["id"].clone();
    let (_, again) = c.rpc("SendMessage", now(user("m1", "hold"))).await;
    assert_eq!(again["result"]["task"]["id"], id, "{again}");
    let (_, other) = c.rpc("SendMessage", now(user("m2", "more"))).await;
    assert_eq!(reason(&other), "TOO_MANY_TURNS", "{other}");
    // Nothing was stored for the refused one: once there is room, it is new.
    gated.open();
    let (_, done) = c
        .rpc("SendMessage", json!({ "message": user("m1", "hold") }))
        .await;
    assert_eq!(
        state(&done["result"]["task"]),
        "TASK_STATE_COMPLETED",
        "{done}"
    );
    gated.open();
    let (_, later) = c
        .rpc("SendMessage", json!({ "message": user("m2", "more") }))
        .await;
    assert_eq!(state(&later["result"]["task"]), "TASK_STATE_COMPLETED");
    assert_eq!(gated.calls(), 2);
    server.stop().await;
}
