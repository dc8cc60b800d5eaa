//! Helpers for the server's tests: a server on an ephemeral loopback port,
//! a small HTTP client for both bindings and SSE, and test agents.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ctxlog::a2a::{Message, Role, TaskState};
use ctxlog_server::{
    AgentError, AgentExecutor, BoxFuture, Config, EventSink, Server, Tokens, TurnContext,
};
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::sync::{oneshot, Semaphore};

#[path = "process.rs"]
pub mod process;
#[allow(unused_imports)]
pub use process::{health, probe};

/// A server running in this process.
pub struct TestServer {
    pub url: String,
    pub dir: tempfile::TempDir,
    stop: Option<oneshot::Sender<()>>,
    handle: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    /// Starts a server on a fresh store.
    pub async fn start(
        agent: Arc<dyn AgentExecutor>,
        configure: impl FnOnce(&mut Config),
        tokens: Option<&str>,
    ) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        Self::start_in(dir, agent, configure, tokens).await
    }

    /// Starts a server on a store the test opened (in `dir`).
    pub async fn start_on(
        dir: tempfile::TempDir,
        store: ctxlog::Store,
        agent: Arc<dyn AgentExecutor>,
        configure: impl FnOnce(&mut Config),
    ) -> TestServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let mut config = Config::new(&url);
        configure(&mut config);
        let server = Server::with_store(store, config, agent, None);
        Self::serve(dir, url, server, listener)
    }

    fn serve(
        dir: tempfile::TempDir,
        url: String,
        server: Server,
        listener: tokio::net::TcpListener,
    ) -> TestServer {
        let (stop, stopped) = oneshot::channel::<()>();
        let handle = tokio::spawn(server.run(listener, async move {
            let _ = stopped.await;
        }));
        TestServer {
            url,
            dir,
            stop: Some(stop),
            handle: Some(handle),
        }
    }

    /// Starts a server on the store in `dir`.
    pub async fn start_in(
        dir: tempfile::TempDir,
        agent: Arc<dyn AgentExecutor>,
        configure: impl FnOnce(&mut Config),
        tokens: Option<&str>,
    ) -> TestServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let mut config = Config::new(&url);
        configure(&mut config);
        let tokens = tokens.map(|t| Tokens::parse(t).unwrap());
        let server = Server::open(dir.path(), config, agent, tokens).unwrap();
        Self::serve(dir, url, server, listener)
    }

    /// Stops it gracefully; returns the store's directory.
    pub async fn stop(mut self) -> tempfile::TempDir {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(handle) = self.handle.take() {
            handle.await.unwrap().unwrap();
        }
        let dir = tempfile::tempdir().unwrap();
        std::mem::replace(&mut self.dir, dir)
    }
}

/// An HTTP client for one caller (with its token, if any).
#[derive(Clone)]
pub struct Client {
    pub base: String,
    pub token: Option<String>,
    http: reqwest::Client,
}

impl Client {
    pub fn new(base: &str, token: Option<&str>) -> Self {
        Client {
            base: base.to_string(),
            token: token.map(str::to_string),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap(),
        }
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut r = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("A2A-Version", "1.0");
        if let Some(t) = &self.token {
            r = r.bearer_auth(t);
        }
        r
    }

    /// A JSON-RPC call: (HTTP status, response body).
    pub async fn rpc(&self, method: &str, params: Value) -> (u16, Value) {
        let body = json!({ "jsonrpc": "2.0", "id": 7, "method": method, "params": params });
        self.raw_rpc(body.to_string().into_bytes()).await
    }

    /// A JSON-RPC POST of these bytes.
    pub async fn raw_rpc(&self, body: Vec<u8>) -> (u16, Value) {
        let r = self
            .request(reqwest::Method::POST, "/")
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// A REST call: (HTTP status, response body).
    pub async fn rest(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut r = self.request(method.parse().unwrap(), path);
        if let Some(b) = body {
            r = r
                .header("content-type", "application/a2a+json")
                .body(b.to_string());
        }
        let r = r.send().await.unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// Opens an SSE stream (JSON-RPC when `path` is "/", with `method`).
    pub async fn sse(
        &self,
        http_method: &str,
        path: &str,
        body: Option<Value>,
        last_event_id: Option<u64>,
    ) -> Sse {
        let mut r = self
            .request(http_method.parse().unwrap(), path)
            .header("accept", "text/event-stream");
        if let Some(b) = body {
            r = r
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        if let Some(id) = last_event_id {
            r = r.header("last-event-id", id.to_string());
        }
        let response = r.send().await.unwrap();
        let status = response.status().as_u16();
        let is_sse = response
            .headers()
            .get("content-type")
            .is_some_and(|v| v.to_str().unwrap().starts_with("text/event-stream"));
        Sse {
            status,
            is_sse,
            stream: Box::pin(response.bytes_stream()),
            buffer: String::new(),
        }
    }
}

/// An SSE event: (id, event name, data as JSON).
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: Option<u64>,
    pub name: Option<String>,
    pub data: Value,
}

/// An open SSE response.
pub struct Sse {
    pub status: u16,
    pub is_sse: bool,
    stream:
        std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buffer: String,
}

impl Sse {
    /// The next event, or `None` when the stream ends (bounded: panics
    /// after 30 s without one).
    pub async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut event = Event {
                    id: None,
                    name: None,
                    data: Value::Null,
                };
                let mut data = Vec::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        event.id = Some(v.trim().parse().unwrap());
                    } else if let Some(v) = line.strip_prefix("event:") {
                        event.name = Some(v.trim().to_string());
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push(v.strip_prefix(' ').unwrap_or(v).to_string());
                    }
                }
                if data.is_empty() {
                    continue; // a keep-alive comment
                }
                event.data = serde_json::from_str(&data.join("\n")).unwrap();
                return Some(event);
            }
            let chunk = tokio::time::timeout(Duration::from_secs(30), self.stream.next())
                .await
                .expect("an SSE event within 30 s");
            match chunk {
                Some(Ok(bytes)) => self.buffer.push_str(&String::from_utf8_lossy(&bytes)),
                Some(Err(_)) | None => return None,
            }
        }
    }

    /// Every event until the stream ends.
    pub async fn all(&mut self) -> Vec<Event> {
        let mut out = Vec::new();
        while let Some(e) = self.next().await {
            out.push(e);
        }
        out
    }

    /// The body of a response that is not a stream (an error).
    pub async fn body(mut self) -> Value {
        let mut text = std::mem::take(&mut self.buffer);
        while let Some(Ok(bytes)) = self.stream.next().await {
            text.push_str(&String::from_utf8_lossy(&bytes));
        }
        serde_json::from_str(&text).unwrap()
    }
}

/// A user message (JSON).
pub fn user(id: &str, text: &str) -> Value {
    json!({ "messageId": id, "role": "ROLE_USER", "parts": [{ "text": text }] })
}

/// The `ErrorInfo` reason of a JSON-RPC or REST error body.
pub fn reason(body: &Value) -> String {
    let details = if body["error"]["data"].is_array() {
        &body["error"]["data"]
    } else {
        &body["error"]["details"]
    };
    details[0]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// An agent the test drives: each turn reports WORKING, then waits for a
/// permit, then sends the chunks it is told and completes. Counts its
/// turns.
pub struct Gated {
    pub calls: AtomicUsize,
    pub gate: Semaphore,
    pub chunks: usize,
}

impl Gated {
    pub fn new(chunks: usize) -> Arc<Self> {
        Arc::new(Gated {
            calls: AtomicUsize::new(0),
            gate: Semaphore::new(0),
            chunks,
        })
    }

    /// Lets one waiting turn go on.
    pub fn open(&self) {
        self.gate.add_permits(1);
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

/// Shares a `Gated` as the server's agent.
pub struct GatedAgent(pub Arc<Gated>);

impl AgentExecutor for GatedAgent {
    fn execute(&self, turn: TurnContext, events: EventSink) -> BoxFuture<Result<(), AgentError>> {
        let gated = self.0.clone();
        Box::pin(async move {
            gated.calls.fetch_add(1, Ordering::SeqCst);
            events.status(TaskState::Working, None).await?;
            let mut cancel = turn.cancel.clone();
            tokio::select! {
                permit = gated.gate.acquire() => permit.unwrap().forget(),
                _ = cancel.canceled() => return Ok(()),
            }
            for i in 0..gated.chunks {
                let artifact = serde_json::from_value(json!({
                    "artifactId": "a1", "parts": [{ "text": format!("chunk {i}") }]
                }))
                .unwrap();
                events
                    .artifact(artifact, i > 0, i + 1 == gated.chunks)
                    .await?;
            }
            let text = format!(
                "done: {}",
                ctxlog_server::agents::message_text(&turn.message)
            );
            let reply = Message::new("", Role::Agent, &[&text]);
            events.status(TaskState::Completed, Some(reply)).await?;
            Ok(())
        })
    }
}
