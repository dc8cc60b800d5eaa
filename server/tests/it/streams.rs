//! Streams that always end, and followers that leave nothing behind.
//!
//! What broke: a SubscribeToTask with a `Last-Event-ID` at or past the end
//! of a finished task (the reconnect of a client that had the final event
//! but not the close), or naming no event of the task, answered 200 with
//! keep-alives only, forever; and the hub that tells followers of writes
//! kept an entry, with a copy of the settled task, for every task a
//! blocking send had waited on and every unknown task id subscribed to.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ctxlog_server::agents::Echo;
use serde_json::{json, Value};

use common::{user, Client, Gated, GatedAgent, TestServer};

/// The `tasksFollowed` count `/healthz` gives.
async fn followed(url: &str) -> u64 {
    common::health(url).await.1["tasksFollowed"]
        .as_u64()
        .unwrap()
}

/// Waits (at most 10 s) for the server to follow no task.
async fn until_nothing_followed(url: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while followed(url).await > 0 {
        assert!(Instant::now() < deadline, "a follower was never let go");
        tokio::task::yield_now().await;
    }
}

fn subscribe_rpc(id: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": 3, "method": "SubscribeToTask", "params": { "id": id } })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_at_the_end_of_a_finished_task_closes_and_one_past_it_is_refused() {
    let server = TestServer::start(Arc::new(Echo), |_| {}, None).await;
    let c = Client::new(&server.url, None);
    let (_, sent) = c
        .rpc("SendMessage", json!({ "message": user("m1", "hi") }))
        .await;
    let id = sent["result"]["task"]["id"].as_str().unwrap().to_string();
    // Every event from the start: the last is the COMPLETED status.
    let all = c
        .sse("GET", &format!("/tasks/{id}:subscribe"), None, Some(0))
        .await
        .all()
        .await;
    let end = all.last().unwrap().id.unwrap();
    assert_eq!(
        all.last().unwrap().data["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );

    for (method, path, body) in [
        ("POST", "/".to_string(), Some(subscribe_rpc(&id))),
        ("GET", format!("/tasks/{id}:subscribe"), None),
    ] {
        let mut at_end = c.sse(method, &path, body.clone(), Some(end)).await;
        assert_eq!((at_end.status, at_end.is_sse), (200, true));
        assert_eq!(at_end.all().await, vec![], "{path}: nothing more, closed");

        let past = c.sse(method, &path, body, Some(end + 1)).await;
        let refused = past.body().await;
        if path == "/" {
            assert_eq!(refused["error"]["code"], -32602, "{refused}");
        } else {
            assert_eq!(refused["error"]["code"], 400, "{refused}");
        }
        let text = refused["error"]["message"].as_str().unwrap();
        assert!(text.contains("names no event"), "{text}");
    }
    until_nothing_followed(&server.url).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_at_the_end_of_a_live_task_waits_for_its_next_event() {
    let gated = Gated::new(0);
    let server = TestServer::start(Arc::new(GatedAgent(gated.clone())), |_| {}, None).await;
    let c = Client::new(&server.url, None);
    let send = json!({ "message": user("m1", "wait"),
                       "configuration": { "returnImmediately": true } });
    let (_, sent) = c.rpc("SendMessage", send).await;
    let id = sent["result"]["task"]["id"].as_str().unwrap().to_string();
    // Its first stream shows WORKING (event 2) and stays open.
    let mut first = c
        .sse("GET", &format!("/tasks/{id}:subscribe"), None, None)
        .await;
    let mut last = first.next().await.unwrap();
    while last.data.to_string().contains("SUBMITTED") {
        last = first.next().await.unwrap();
    }
    drop(first);
    let mut resumed = c
        .sse("GET", &format!("/tasks/{id}:subscribe"), None, last.id)
        .await;
    gated.open();
    let next = resumed.all().await;
    assert_eq!(next.len(), 1, "{next:?}");
    assert_eq!(next[0].id, Some(last.id.unwrap() + 1));
    assert_eq!(
        next[0].data["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hub_holds_a_task_only_while_someone_follows_it() {
    let server = TestServer::start(
        Arc::new(Echo),
        |c| c.keep_alive = Duration::from_millis(50),
        None,
    )
    .await;
    let c = Client::new(&server.url, None);
    // Blocking sends wait on their task until its turn ends.
    for i in 0..50 {
        let (_, r) = c
            .rpc(
                "SendMessage",
                json!({ "message": user(&format!("b{i}"), "hi") }),
            )
            .await;
        assert_eq!(
            r["result"]["task"]["status"]["state"],
            "TASK_STATE_COMPLETED"
        );
    }
    assert_eq!(followed(&server.url).await, 0);
    // Subscriptions to tasks that do not exist.
    for i in 0..200 {
        let (_, r) = c
            .rest("GET", &format!("/tasks/nope-{i}:subscribe"), None)
            .await;
        assert_eq!(r["error"]["status"], "NOT_FOUND");
    }
    assert_eq!(followed(&server.url).await, 0);
    // Streams that end with their task, and one dropped while open.
    for i in 0..20 {
        let body = json!({ "message": user(&format!("s{i}"), "hi") });
        let events = c
            .sse("POST", "/message:stream", Some(body), None)
            .await
            .all()
            .await;
        assert!(!events.is_empty());
    }
    let gated = Gated::new(0);
    let held = TestServer::start(
        Arc::new(GatedAgent(gated.clone())),
        |c| c.keep_alive = Duration::from_millis(50),
        None,
    )
    .await;
    let h = Client::new(&held.url, None);
    let body = json!({ "message": user("open", "hi") });
    let mut open = h.sse("POST", "/message:stream", Some(body), None).await;
    open.next().await.unwrap();
    assert_eq!(followed(&held.url).await, 1);
    drop(open);
    until_nothing_followed(&held.url).await;
    gated.open();
    held.stop().await;
    until_nothing_followed(&server.url).await;
    server.stop().await;
}

/// Completes each task with three 300 KiB artifact chunks.
struct Chunky;

impl ctxlog_server::AgentExecutor for Chunky {
    fn execute(
        &self,
        _turn: ctxlog_server::TurnContext,
        events: ctxlog_server::EventSink,
    ) -> ctxlog_server::BoxFuture<Result<(), ctxlog_server::AgentError>> {
        Box::pin(async move {
            for i in 0..3 {
                let part = ctxlog::a2a::Part::text("y".repeat(300 << 10));
                let artifact = ctxlog::a2a::Artifact::new("a", vec![part]);
                events.artifact(artifact, i > 0, i == 2).await?;
            }
            events
                .status(ctxlog::a2a::TaskState::Completed, None)
                .await?;
            Ok(())
        })
    }
}

/// What broke: a stream reads the store a page at a time, and a page that
/// held only the client's own message (passed over) left the stream
/// waiting for the next write, or the next keep-alive, instead of reading
/// on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_reads_on_past_a_page_of_passed_over_messages() {
    let server = TestServer::start(
        Arc::new(Chunky),
        |c| c.keep_alive = Duration::from_secs(600),
        None,
    )
    .await;
    let c = Client::new(&server.url, None);
    let (_, sent) = c
        .rpc("SendMessage", json!({ "message": user("m1", "go") }))
        .await;
    let id = sent["result"]["task"]["id"].as_str().unwrap().to_string();
    for _ in 0..3 {
        let events = c
            .sse("GET", &format!("/tasks/{id}:subscribe"), None, Some(0))
            .await
            .all()
            .await;
        let ids: Vec<u64> = events.iter().map(|e| e.id.unwrap()).collect();
        assert_eq!(ids, [2, 3, 4, 5]);
    }
    server.stop().await;
}

/// A stream sends the event its writer read back and numbered in the news
/// without reading the store, and reads nothing once it has sent every
/// event it was told of. What it sends must still be what a replay of the
/// store sends: every stream of a task, opened before the events, gets
/// each of them once and in order, also when the agent writes faster than
/// the streams are read, and a cancel from outside the turn ends them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_stream_of_a_task_sends_what_a_replay_of_the_store_sends() {
    let gated = Gated::new(40);
    let server = TestServer::start(
        Arc::new(GatedAgent(gated.clone())),
        |c| c.keep_alive = Duration::from_secs(600),
        None,
    )
    .await;
    let c = Client::new(&server.url, None);
    let mut tasks = Vec::new();
    for name in ["runs", "canceled"] {
        let params = json!({ "message": user(name, "go"),
            "configuration": { "returnImmediately": true } });
        let (_, sent) = c.rpc("SendMessage", params).await;
        let id = sent["result"]["task"]["id"].as_str().unwrap().to_string();
        // Eight streams, each started with the task as it stands.
        let mut streams = Vec::new();
        for _ in 0..8 {
            let mut s = c
                .sse("GET", &format!("/tasks/{id}:subscribe"), None, None)
                .await;
            let first = s.next().await.unwrap();
            assert!(first.data.get("task").is_some(), "{}", first.data);
            streams.push((first.id.unwrap(), s));
        }
        tasks.push((id, streams));
    }
    // The second task is canceled while its turn waits; the first is let
    // go on (the gate's one permit goes to the turn still waiting).
    let (_, canceled) = c
        .rpc("CancelTask", json!({ "id": tasks[1].0.clone() }))
        .await;
    assert_eq!(canceled["result"]["status"]["state"], "TASK_STATE_CANCELED");
    gated.open();
    for ((id, streams), end) in tasks.into_iter().zip(["COMPLETED", "CANCELED"]) {
        for (start, mut stream) in streams {
            let sent = stream.all().await;
            let replay = c
                .sse("GET", &format!("/tasks/{id}:subscribe"), None, Some(start))
                .await
                .all()
                .await;
            assert_eq!(sent, replay, "task {id}: a stream from event {start}");
            let last = &sent.last().unwrap().data["statusUpdate"]["status"]["state"];
            assert_eq!(last, &format!("TASK_STATE_{end}"));
            if end == "COMPLETED" {
                let chunks = sent
                    .iter()
                    .filter(|e| e.data.get("artifactUpdate").is_some());
                assert_eq!(chunks.count(), 40);
            }
        }
    }
    until_nothing_followed(&server.url).await;
    server.stop().await;
}

/// Answers with a message (a direct reply) after a pause of its own.
struct RepliesAfterAPause;

impl ctxlog_server::AgentExecutor for RepliesAfterAPause {
    fn execute(
        &self,
        turn: ctxlog_server::TurnContext,
        events: ctxlog_server::EventSink,
    ) -> ctxlog_server::BoxFuture<Result<(), ctxlog_server::AgentError>> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            let text = format!(
                "reply to {}",
                ctxlog_server::agents::message_text(&turn.message)
            );
            let reply = ctxlog::a2a::Message::new("", ctxlog::a2a::Role::Agent, &[&text]);
            events.reply(reply).await?;
            Ok(())
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_streamed_resends_of_a_direct_reply_each_get_the_reply() {
    // Six streamed sends of one message at once, 10 rounds: the one that
    // runs the turn and the five resends each stream the reply alone,
    // never the task it is kept in (which no client may read).
    let server = TestServer::start(Arc::new(RepliesAfterAPause), |_| {}, None).await;
    let c = Client::new(&server.url, None);
    for round in 0..10 {
        let body = json!({ "message": user(&format!("r{round}"), &format!("ask {round}")) });
        let streams: Vec<_> = (0..6)
            .map(|_| {
                let (c, body) = (c.clone(), body.clone());
                tokio::spawn(async move {
                    c.sse("POST", "/message:stream", Some(body), None)
                        .await
                        .all()
                        .await
                })
            })
            .collect();
        for stream in streams {
            let events = stream.await.unwrap();
            assert_eq!(events.len(), 1, "round {round}: {events:?}");
            let message = &events[0].data["message"];
            assert_eq!(
                message["parts"][0]["text"],
                format!("reply to ask {round}"),
                "round {round}: {events:?}"
            );
        }
    }
    server.stop().await;
}
