//! The body of the `rpc` fuzz target, shared by `server/fuzz/` and by the
//! test that replays its committed corpus: arbitrary requests, on either
//! binding, through the whole router (decoder, dispatcher, the request
//! core and the store), must never panic, and must answer with a status
//! the bindings use and, outside streams, with a JSON body.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use tower::ServiceExt;

use crate::agents::{Script, Scripted};
use crate::{Config, Server};

/// A script with no pauses: every turn ends at once.
const SCRIPT: &str = r#"{ "rules": [
  { "text": "ask", "steps": [ { "status": "TASK_STATE_INPUT_REQUIRED", "text": "which?" } ] },
  { "text": "hi", "steps": [ { "reply": "hello {text}" } ] },
  { "text": "art", "steps": [
      { "artifact": { "artifactId": "a", "parts": [ { "text": "x" } ] } },
      { "status": "TASK_STATE_COMPLETED" } ] },
  { "text": "bad", "steps": [ { "status": "TASK_STATE_UNSPECIFIED" } ] }
] }"#;

/// Requests that set the store up, so the input reaches existing tasks
/// (the last is v0.3's, sent without `A2A-Version`).
const SETUP: [&str; 4] = [
    r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"s1","contextId":"c1","role":"ROLE_USER","parts":[{"text":"ask"}]}}}"#,
    r#"{"jsonrpc":"2.0","id":2,"method":"SendMessage","params":{"message":{"messageId":"s2","contextId":"c1","role":"ROLE_USER","parts":[{"text":"art"}]}}}"#,
    r#"{"jsonrpc":"2.0","id":3,"method":"SendMessage","params":{"message":{"messageId":"s3","role":"ROLE_USER","parts":[{"text":"hi"}]}}}"#,
    r#"{"jsonrpc":"2.0","id":4,"method":"message/send","params":{"message":{"kind":"message","messageId":"s4","contextId":"c3","role":"user","parts":[{"kind":"text","text":"ask"}]}}}"#,
];

/// Target `rpc`: the input's first byte picks a route and method (below
/// 128: v1.0's, with `A2A-Version: 1.0`; from 128: v0.3's, without it),
/// the rest is the path suffix or query (up to a newline) and the body.
pub fn rpc(data: &[u8]) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run(data));
}

async fn run(data: &[u8]) {
    let fs = Arc::new(ctxlog::fs::MemFs::new());
    let options = ctxlog::Options::default()
        .durability(ctxlog::Durability::Buffered)
        .preallocate(0)
        .fs(fs);
    let store = ctxlog::Store::open("/fuzz/rpc", options).unwrap();
    let script: Script = serde_json::from_str(SCRIPT).unwrap();
    let mut config = Config::new("http://127.0.0.1:1");
    config.body_limit = 64 << 10;
    config.request_timeout = std::time::Duration::from_secs(5);
    let server = Server::with_store(store, config, Arc::new(Scripted::new(script)), None);
    let app = server.router();
    for (i, body) in SETUP.iter().enumerate() {
        let version = (i < 3).then_some("1.0");
        let setup = request("POST", "/", version, body.as_bytes().to_vec());
        let response = app.clone().oneshot(setup).await.unwrap();
        assert_eq!(response.status(), 200);
    }
    let (&pick, rest) = data.split_first().unwrap_or((&0, &[]));
    let (line, body) = match rest.iter().position(|&b| b == b'\n') {
        Some(at) => (&rest[..at], rest[at + 1..].to_vec()),
        None => (rest, Vec::new()),
    };
    let suffix = String::from_utf8_lossy(line).replace(|c: char| c.is_whitespace() || c == '#', "");
    let version = (pick < 128).then_some("1.0");
    let (method, path) = match (version, pick % 9) {
        (_, 0..=2) => ("POST", "/".to_string()),
        (Some(_), 3) => ("POST", "/message:send".to_string()),
        (Some(_), 4) => ("POST", "/message:stream".to_string()),
        (Some(_), 5) => ("GET", format!("/tasks?{suffix}")),
        (Some(_), 6) => ("GET", format!("/tasks/{suffix}")),
        (Some(_), 7) => ("POST", format!("/tasks/{suffix}")),
        (Some(_), _) => (
            "DELETE",
            format!("/tasks/{suffix}/pushNotificationConfigs/x"),
        ),
        (None, 3) => ("POST", "/v1/message:send".to_string()),
        (None, 4) => ("POST", "/v1/message:stream".to_string()),
        (None, 5) => ("GET", format!("/v1/tasks/{suffix}")),
        (None, 6) => ("POST", format!("/v1/tasks/{suffix}")),
        (None, 7) => (
            "POST",
            format!("/v1/tasks/{suffix}/pushNotificationConfigs"),
        ),
        (None, _) => ("GET", "/.well-known/agent-card.json".to_string()),
    };
    let Ok(uri) = path.parse::<axum::http::Uri>() else {
        return;
    };
    let response = app
        .clone()
        .oneshot(request(method, &uri.to_string(), version, body))
        .await
        .unwrap();
    let status = response.status().as_u16();
    assert!(
        matches!(status, 200 | 204 | 400 | 401 | 404 | 413 | 500 | 503),
        "status {status}"
    );
    let streaming = response
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if streaming || status == 204 {
        return;
    }
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 24)
        .await
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&bytes)));
    if status != 200 || path == "/" {
        assert!(
            json.get("error").is_some() || json.get("result").is_some(),
            "{json}"
        );
    }
}

fn request(method: &str, uri: &str, version: Option<&str>, body: Vec<u8>) -> Request<Body> {
    let mut request = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json");
    if let Some(version) = version {
        request = request.header("a2a-version", version);
    }
    request.body(Body::from(body)).unwrap()
}
