//! An agent of your own behind a small HTTP endpoint, on the ctxlog library
//! directly (not the A2A server of this crate): tokio and axum, with every
//! store call on the blocking pool (`spawn_blocking`), because each may wait
//! on the disk.
//!
//! - `POST /messages` takes an A2A message (JSON), saves it durably before
//!   any work, answers with the task once the agent has replied;
//! - `GET /tasks/{id}` answers with the task as stored.
//!
//! ```sh
//! cargo run -p ctxlog-server --example axum_agent -- --demo   # serve, call itself twice, exit
//! cargo run -p ctxlog-server --example axum_agent             # serve on 127.0.0.1:8090
//! ```

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::routing::{get, post};
use axum::Router;
use ctxlog::a2a::{Message, Role, Task, TaskState, TaskStatus};
use ctxlog::render::Budget;
use ctxlog::{Durability, Options, Store};

type Answer = Result<([(header::HeaderName, &'static str); 1], String), (StatusCode, String)>;

/// A task as a JSON answer.
fn json(task: &Task) -> Answer {
    let text = serde_json::to_string(task)
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(([(header::CONTENT_TYPE, "application/json")], text))
}

/// Runs a store call on the blocking pool.
async fn blocking<T: Send + 'static>(
    store: &Arc<Store>,
    f: impl FnOnce(&Store) -> ctxlog::Result<T> + Send + 'static,
) -> Result<T, (StatusCode, String)> {
    let store = store.clone();
    tokio::task::spawn_blocking(move || f(&store))
        .await
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))
}

/// One turn: save the message, build the prompt, answer, store the answer.
async fn message(State(store): State<Arc<Store>>, body: Bytes) -> Answer {
    let receipt = blocking(&store, move |s| s.receive_message("local", &body)).await?;
    if !receipt.duplicate {
        let r = receipt.clone();
        let prompt = blocking(&store, move |s| {
            s.render_history("local", &r.context_id, Some(r.seq), Budget::default())
        })
        .await?;
        // The model call would go here, with `prompt.text` as the history.
        let answer = format!(
            "Noted ({} earlier message(s) in this context).",
            prompt.included
        );
        let done = receipt.status_update(TaskStatus::new(TaskState::Completed).with_message(
            Message::new(format!("reply-{}", receipt.seq), Role::Agent, &[&answer]),
        ));
        blocking(&store, move |s| s.update_status("local", &done)).await?;
    }
    let id = receipt.task_id;
    json(&blocking(&store, move |s| s.get_task("local", &id, None, false)).await?)
}

async fn task(State(store): State<Arc<Store>>, Path(id): Path<String>) -> Answer {
    json(&blocking(&store, move |s| s.get_task("local", &id, None, true)).await?)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let demo = std::env::args().any(|a| a == "--demo");
    let dir = std::env::temp_dir().join(format!("ctxlog-axum-agent-{}", std::process::id()));
    let store = Arc::new(Store::open(
        &dir,
        Options::default().durability(Durability::GroupCommit),
    )?);
    let app = Router::new()
        .route("/messages", post(message))
        .route("/tasks/{id}", get(task))
        .with_state(store.clone());
    let listener = tokio::net::TcpListener::bind(if demo {
        "127.0.0.1:0"
    } else {
        "127.0.0.1:8090"
    })
    .await?;
    let addr = listener.local_addr()?;
    println!("serving on http://{addr}");
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    if demo {
        let http = reqwest::Client::new();
        let mut context = String::new();
        for (id, text) in [
            ("m1", "My order 123 arrived broken."),
            ("m2", "Photo attached."),
        ] {
            let context_field = match context.as_str() {
                "" => String::new(),
                c => format!(r#","contextId":"{c}""#),
            };
            let body = format!(
                r#"{{"messageId":"{id}","role":"ROLE_USER"{context_field},"parts":[{{"text":"{text}"}}]}}"#
            );
            let answer = http
                .post(format!("http://{addr}/messages"))
                .body(body)
                .send()
                .await?
                .error_for_status()?
                .text()
                .await?;
            let task: serde_json::Value = serde_json::from_str(&answer)?;
            context = task["contextId"].as_str().unwrap_or_default().to_string();
            println!(
                "{id}: {} {}",
                task["status"]["state"], task["status"]["message"]["parts"][0]["text"]
            );
        }
        server.abort();
        drop(store);
        std::fs::remove_dir_all(&dir)?;
    } else {
        server.await??;
    }
    Ok(())
}
