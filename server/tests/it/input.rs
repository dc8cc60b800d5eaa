//! Loose input is refused at the door, with the error that says what is
//! wrong: a `raw` part that is not base64 (from a client or an agent), a
//! JSON-RPC id that no client could read back.
//!
//! What broke: a raw part that was not base64 was stored; a JSON-RPC id of
//! `1e999999` was echoed back.

use crate::common;

use std::sync::Arc;

use ctxlog_server::agents::{Echo, Script, Scripted};
use serde_json::{json, Value};

use common::{reason, user, Client, TestServer};

fn with_raw(id: &str, raw: &str) -> Value {
    json!({ "messageId": id, "role": "ROLE_USER", "parts": [{ "raw": raw, "mediaType": "text/plain" }] })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_part_must_be_base64() {
    let server = TestServer::start(Arc::new(Echo), |_| {}, None).await;
    let c = Client::new(&server.url, None);
    let (_, refused) = c
        .rpc(
            "SendMessage",
            json!({ "message": with_raw("m1", "not base64!") }),
        )
        .await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(refused["error"]["message"]
        .as_str()
        .unwrap()
        .contains("base64"));
    let (status, refused) = c
        .rest(
            "POST",
            "/message:send",
            Some(json!({ "message": with_raw("m2", "a") })),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    // Nothing was stored: the messageIds are still free.
    let (_, listed) = c.rpc("ListTasks", json!({})).await;
    assert_eq!(listed["result"]["totalSize"], 0);
    for (id, raw) in [("m1", "aGVsbG8="), ("m2", "aGVsbG8")] {
        let (_, ok) = c
            .rpc("SendMessage", json!({ "message": with_raw(id, raw) }))
            .await;
        assert_eq!(
            ok["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
            "{ok}"
        );
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_artifact_whose_raw_part_is_not_base64_fails_its_task() {
    let script: Script = serde_json::from_value(json!({ "default": [
        { "artifact": { "artifactId": "a1", "parts": [{ "raw": "%%%" }] }, "lastChunk": true },
        { "status": "TASK_STATE_COMPLETED" } ] }))
    .unwrap();
    let server = TestServer::start(Arc::new(Scripted::new(script)), |_| {}, None).await;
    let c = Client::new(&server.url, None);
    let (_, answer) = c
        .rpc("SendMessage", json!({ "message": user("m1", "hi") }))
        .await;
    assert_eq!(reason(&answer), "INVALID_AGENT_RESPONSE", "{answer}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_rpc_id_must_be_one_a_client_can_read_back() {
    let server = TestServer::start(Arc::new(Echo), |_| {}, None).await;
    let c = Client::new(&server.url, None);
    let call = |id: &str| {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ListTasks","params":{{}}}}"#).into_bytes()
    };
    for bad in [
        "1e999999",
        "1.5",
        "-0.0",
        "99999999999999999999",
        "true",
        "[1]",
        "{}",
    ] {
        let (status, body) = c.raw_rpc(call(bad)).await;
        assert_eq!(status, 200);
        assert_eq!(body["error"]["code"], -32600, "{bad}: {body}");
        assert_eq!(body["id"], Value::Null, "{bad}");
    }
    for good in ["7", "-3", "18446744073709551615", "\"abc\"", "null"] {
        let (_, body) = c.raw_rpc(call(good)).await;
        assert!(body["result"].is_object(), "{good}: {body}");
        assert_eq!(body["id"].to_string(), good);
    }
    server.stop().await;
}
