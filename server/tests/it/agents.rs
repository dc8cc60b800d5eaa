//! The bundled agents as a new user meets them: the echo agent's stream
//! shows every kind of event, and the built-in scripts run by name from
//! any directory with `{text}` replaced in every text, artifacts included.
//!
//! What broke: the echo agent's stream was a single event, so streaming
//! looked like nothing happened; the scripted agent left `{text}` in
//! artifact texts; and `--agent scripted:refund-desk` worked only from a
//! source checkout.

use crate::common;

use std::sync::Arc;

use ctxlog_server::agents::{Echo, Script, Scripted, BUILT_IN};
use serde_json::json;

use common::{user, Client, TestServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_echo_agent_streams_work_chunks_and_its_reply() {
    let server = TestServer::start(Arc::new(Echo), |_| {}, None).await;
    let c = Client::new(&server.url, None);
    let body = json!({ "message": user("m1", "hello there") });
    let events = c
        .sse("POST", "/message:stream", Some(body), None)
        .await
        .all()
        .await;
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e.data.as_object().unwrap().keys().next().unwrap().as_str())
        .collect();
    assert_eq!(kinds.first(), Some(&"task"), "{events:?}");
    assert_eq!(kinds.last(), Some(&"statusUpdate"));
    let chunks: Vec<&str> = events
        .iter()
        .filter_map(|e| e.data["artifactUpdate"]["artifact"]["parts"][0]["text"].as_str())
        .collect();
    // The snapshot may already hold the first chunks; the rest stream.
    let (_, task) = c
        .rpc("GetTask", json!({ "id": events[0].data["task"]["id"] }))
        .await;
    let whole = &task["result"]["artifacts"][0]["parts"];
    let texts: Vec<&str> = whole
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts.concat(), "hello there");
    assert!(texts.len() >= 2 && chunks.len() <= texts.len());
    assert_eq!(
        task["result"]["status"]["message"]["parts"][0]["text"],
        "hello there (0 earlier turn(s) in this context)"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_built_in_script_runs_by_name_with_text_in_its_artifacts() {
    for (name, _) in BUILT_IN {
        Script::named(name).unwrap();
    }
    let missing = Script::named("no-such-script").unwrap_err();
    assert!(missing.contains("refund-desk"), "{missing}");
    let desk = Scripted::new(Script::named("refund-desk").unwrap());
    let server = TestServer::start(Arc::new(desk), |_| {}, None).await;
    let c = Client::new(&server.url, None);
    let (_, asked) = c
        .rpc(
            "SendMessage",
            json!({ "message": user("m1", "a refund please") }),
        )
        .await;
    let task = &asked["result"]["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{asked}"
    );
    let mut answer = user("m2", "the blue card");
    answer["taskId"] = task["id"].clone();
    let (_, done) = c.rpc("SendMessage", json!({ "message": answer })).await;
    let done = &done["result"]["task"];
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    assert_eq!(
        done["artifacts"][0]["parts"][0]["text"],
        "refunded 6.90 to the blue card"
    );
    server.stop().await;
}

/// The script format as docs/server.md shows it is the format the server
/// reads: its example loads and answers as the page says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_script_runs() {
    let page =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/server.md")).unwrap();
    let text = page
        .split("```json\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("docs/server.md shows a script");
    let script = Script::parse(text, "docs/server.md").unwrap();
    let server = TestServer::start(Arc::new(Scripted::new(script)), |_| {}, None).await;
    let c = Client::new(&server.url, None);
    let (_, asked) = c
        .rpc("SendMessage", json!({ "message": user("m1", "a refund") }))
        .await;
    let task = &asked["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    assert_eq!(
        task["artifacts"][0]["parts"][0]["text"],
        "refund for: a refund"
    );
    let (_, hello) = c
        .rpc("SendMessage", json!({ "message": user("m2", "hello") }))
        .await;
    assert_eq!(
        hello["result"]["message"]["parts"][0]["text"],
        "hi! you said: hello"
    );
    server.stop().await;
}
