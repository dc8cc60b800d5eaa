//! The floor the load bench measures ctxlog-server against: the same HTTP
//! stack (hyper's HTTP/1 under axum, on tokio's multi-threaded runtime with
//! as many workers as the server's), the same route, the same JSON-RPC
//! envelope and the same message parsing, answering every `SendMessage`
//! with a task of the server's shape (the message in its history, a
//! COMPLETED status with the agent's reply): no store, no agent, no turn,
//! nothing durable. What ctxlog-server spends above it is what the work
//! costs.
//!
//! The bench runs it as a process of its own (itself, started again with
//! `CTXLOG_BENCH_FLOOR` set to the port), so its CPU time is read apart
//! from the load client's.

use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Bytes;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::value::RawValue;

/// The environment variable that makes the bench binary the floor.
pub const VARIABLE: &str = "CTXLOG_BENCH_FLOOR";

#[derive(serde::Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    id: &'a RawValue,
    method: &'a str,
    #[serde(borrow)]
    params: &'a RawValue,
}

#[derive(serde::Deserialize)]
struct SendParams {
    message: ctxlog::a2a::Message,
}

/// Task and message ids: unique in the process, 32 hex digits as the
/// server's are.
fn next_id() -> String {
    static N: AtomicU64 = AtomicU64::new(1);
    format!("{:032x}", N.fetch_add(1, Ordering::Relaxed))
}

fn json(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn endpoint(body: Bytes) -> Response {
    let Ok(envelope) = serde_json::from_slice::<Envelope>(&body) else {
        return json(
            StatusCode::OK,
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}"#.into(),
        );
    };
    let id = envelope.id.get();
    let params = match serde_json::from_str::<SendParams>(envelope.params.get()) {
        Ok(p) if envelope.method == "SendMessage" => p,
        _ => {
            return json(
                StatusCode::OK,
                format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32602,"message":"not a SendMessage"}}}}"#
                ),
            )
        }
    };
    let (task_id, context_id) = (next_id(), next_id());
    let text = params
        .message
        .parts
        .iter()
        .find_map(|p| p.text.clone())
        .unwrap_or_default();
    let mut reply =
        ctxlog::a2a::Message::new(next_id(), ctxlog::a2a::Role::Agent, &[text.as_str()]);
    reply.task_id = Some(task_id.clone());
    reply.context_id = Some(context_id.clone());
    let result = serde_json::json!({
        "task": {
            "id": task_id,
            "contextId": context_id,
            "status": {
                "state": "TASK_STATE_COMPLETED",
                "message": reply,
                "timestamp": "2026-01-01T00:00:00.000Z",
            },
            "history": [params.message, reply],
        }
    });
    json(
        StatusCode::OK,
        format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#),
    )
}

async fn card() -> Response {
    json(
        StatusCode::OK,
        r#"{"name":"floor","supportedInterfaces":[]}"#.into(),
    )
}

/// Serves the floor on 127.0.0.1:`port` until the process is killed.
pub fn serve(port: u16) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("the floor's port binds");
        let app = Router::new()
            .route("/", post(endpoint))
            .route("/.well-known/agent-card.json", get(card));
        axum::serve(listener, app).await.expect("the floor serves");
    });
}
