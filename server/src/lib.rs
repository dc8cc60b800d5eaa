//! ctxlog-server: an A2A v1.0.1 server whose every message, event and
//! stream position lives in a ctxlog store.
//!
//! Any agent sits behind it through [`AgentExecutor`]; any A2A client
//! drives it over JSON-RPC 2.0 (`POST /`) or HTTP+JSON (`/message:send`,
//! `/tasks/{id}`, …), with Server-Sent Events for streams. The inbound
//! message is durable before the agent sees it; a resent messageId never
//! runs the agent twice (across restarts too); every agent event is
//! checked and durable before any stream sees it; and a stream resumes
//! from its `Last-Event-ID`, replayed from the store, even after the
//! server was killed.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use std::sync::Arc;
//! let config = ctxlog_server::Config::new("http://127.0.0.1:8080");
//! let server = ctxlog_server::Server::open("ctxlog-data", config, Arc::new(ctxlog_server::agents::Echo), None)
//!     .map_err(std::io::Error::other)?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! server.run(listener, async { let _ = tokio::signal::ctrl_c().await; }).await
//! # }
//! ```

#![deny(missing_docs)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod agent;
pub mod agents;
pub mod auth;
mod bindings;
mod card;
pub mod config;
pub use config::store_options;
#[doc(hidden)]
pub mod crashpoint;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
mod http;
pub mod logline;
mod push;
mod recovery;
mod sends;
mod state;
mod streams;
mod util;
mod webhook;

use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use ctxlog::{Durability, Options, Store};
use serde_json::value::RawValue;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{info, warn};

pub use agent::{
    AgentDescription, AgentError, AgentExecutor, BoxFuture, Cancellation, EventSink, SinkError,
    Skill, TurnContext,
};
pub use auth::Tokens;
pub use config::{Config, Idempotency, OnRestart, Webhooks};
pub use error::A2aError;

use state::Shared;

/// A server over one store.
pub struct Server {
    shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
}

impl Server {
    /// Opens (or creates) the store in `dir` for the server: group commit
    /// (every write durable before it is answered, syncs shared), waiters
    /// that sleep at once (the CPU they would yield for is the requests'),
    /// and the single-active-turn policy if the configuration asks for it.
    pub fn open(
        dir: impl AsRef<Path>,
        config: Config,
        agent: Arc<dyn AgentExecutor>,
        tokens: Option<Tokens>,
    ) -> ctxlog::Result<Self> {
        let options = Options::default()
            .durability(Durability::GroupCommit)
            .commit_yields(0);
        Ok(Self::with_store(
            Store::open(dir, store_options(options, &config))?,
            config,
            agent,
            tokens,
        ))
    }

    /// A server over a store opened by the caller, which should have
    /// [`store_options`] applied (for the turn policy).
    pub fn with_store(
        store: Store,
        config: Config,
        agent: Arc<dyn AgentExecutor>,
        tokens: Option<Tokens>,
    ) -> Self {
        Self::build(store, config, agent, tokens, None)
    }

    /// A standby of the replica `config.replicate` names, in `dir`: the
    /// replica is restored there if `dir` holds no store, and followed
    /// from then on (every `Replicate::interval`); reads are served from
    /// the copy, writes refused, until [`promote_on`](Self::promote_on)'s
    /// signal makes it the writer (it then claims the replica, fencing the
    /// old writer, and replicates there itself).
    pub fn follow(
        dir: impl AsRef<Path>,
        config: Config,
        agent: Arc<dyn AgentExecutor>,
        tokens: Option<Tokens>,
    ) -> ctxlog::Result<Self> {
        let from = config
            .replicate
            .clone()
            .ok_or(ctxlog::Error::InvalidParams {
                field: "follow",
                reason: "a standby needs the replica it follows (Config::replicate)".into(),
            })?;
        let (standby, store) = state::standby::Standby::start(from, dir.as_ref().to_path_buf())?;
        Ok(Self::build(store, config, agent, tokens, Some(standby)))
    }

    /// Promotes a standby (see [`follow`](Self::follow)) each time a
    /// future `signal` makes completes (a promotion that fails goes back to
    /// following, and the next signal tries again); nothing for a server
    /// that is not one.
    pub fn promote_on<F, S>(&self, mut signal: S)
    where
        F: Future<Output = ()> + Send + 'static,
        S: FnMut() -> F + Send + 'static,
    {
        let shared = self.shared.clone();
        tokio::spawn(async move {
            loop {
                signal().await;
                match shared.standby.as_ref() {
                    Some(standby) => standby.promote.notify_one(),
                    None => return,
                }
            }
        });
    }

    fn build(
        store: Store,
        config: Config,
        agent: Arc<dyn AgentExecutor>,
        tokens: Option<Tokens>,
        standby: Option<state::standby::Standby>,
    ) -> Self {
        let (shutdown, watching) = watch::channel(false);
        let description = agent.describe();
        let cards = card::Cards::new(&config, &description, tokens.is_some());
        let shared = Arc::new_cyclic(|me| Shared {
            store: state::storecell::StoreCell::new(store, recovery::health::reopener(me.clone()))
                .with_linger(config.commit_linger),
            agent,
            turns: state::turns::Turns::new(config.max_turns.max(1)),
            pushes: state::pushes::Pushes::new(&config.push),
            config,
            hub: Arc::new(state::hub::Hub::default()),
            cards,
            tokens,
            shutdown: watching,
            context_locks: state::ContextLocks::default(),
            connections: Default::default(),
            keys: Default::default(),
            input_modes: description.input_modes,
            standby,
        });
        Server { shared, shutdown }
    }

    /// The routes of both bindings, the agent card and `/healthz`, for a
    /// program that serves them itself (`run` does this).
    pub fn router(&self) -> Router {
        Router::new()
            .route("/", post(bindings::rpc::endpoint))
            .route("/.well-known/agent-card.json", get(agent_card))
            .route("/healthz", get(recovery::health::healthz))
            .route("/livez", get(recovery::health::livez))
            .route("/readyz", get(recovery::health::readyz))
            .merge(bindings::rest::routes())
            .merge(bindings::v03::rest::routes())
            .fallback(bindings::rest::not_found)
            .layer(axum::middleware::from_fn(negotiate))
            .layer(tower_http::trace::TraceLayer::new_for_http())
            .with_state(self.shared.clone())
    }

    /// Resolves the turns a process that died left running (SUBMITTED or
    /// WORKING), by the configured policy, and (with push notifications
    /// served) resumes every config's delivery from its last
    /// acknowledged event; returns how many turns it resolved. `run` calls
    /// it before it accepts a request.
    pub async fn recover(&self) -> usize {
        let resolved = recovery::restart::recover(&self.shared).await;
        let deliveries = push::delivery::resume(&self.shared).await;
        if deliveries > 0 {
            info!(configs = deliveries, "resumed push deliveries");
        }
        resolved
    }

    /// Serves on `listener` until `shutdown` completes, then stops
    /// accepting, lets running turns finish within the grace period, fails
    /// the rest, and closes the store (writing its checkpoint).
    pub async fn run(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        if self.shared.standby.is_some() {
            // A standby writes nothing until it is promoted (which resolves
            // the turns the old writer left then).
            tokio::spawn(recovery::following::run(self.shared.clone()));
        } else {
            let resolved = self.recover().await;
            if resolved > 0 {
                info!(
                    tasks = resolved,
                    "resolved turns interrupted by the last stop"
                );
            }
        }
        if let Some(files) = http::listener::open_files_limit() {
            let wanted = self.shared.config.max_connections as u64 + 64;
            if files < wanted {
                warn!(
                    open_files = files,
                    max_connections = self.shared.config.max_connections,
                    "the limit on open files is below --max-connections plus the store's files: \
                     raise it (ulimit -n) or lower --max-connections, or connections past it \
                     fail to be accepted"
                );
            }
        }
        let app = self.router();
        let Server {
            shared,
            shutdown: stop,
        } = self;
        let (signalled_tx, mut signalled) = watch::channel(false);
        let drain = {
            let shared = shared.clone();
            tokio::spawn(async move {
                let _ = signalled.changed().await;
                let left = shared.turns.drain(shared.config.grace).await;
                for (tenant, task) in left {
                    sends::turn::fail(
                        &shared,
                        &tenant,
                        &task,
                        "The turn was interrupted: the server shut down while it ran. To \
                         retry, send it again as a new message (a new messageId, with \
                         referenceTaskIds naming this task).",
                    )
                    .await;
                }
            })
        };
        let graceful = async move {
            shutdown.await;
            info!("shutting down: no new requests; running turns get the grace period");
            let _ = stop.send(true);
            let _ = signalled_tx.send(true);
        };
        let served = http::listener::serve(listener, app, shared.clone(), graceful).await;
        let _ = drain.await;
        close(shared).await;
        served
    }
}

/// Checks a `--webhook-ca` file: it reads, and holds PEM certificates
/// (how many); the error names the file and what is wrong.
pub fn check_webhook_ca(path: &Path) -> Result<usize, String> {
    webhook::check_ca_file(path)
}

/// Closes the store once nothing else holds it.
async fn close(shared: Arc<Shared>) {
    let mut shared = shared;
    for _ in 0..200 {
        match Arc::try_unwrap(shared) {
            Ok(s) => {
                let store = s.store.take();
                let closed =
                    tokio::task::spawn_blocking(move || match store.map(Arc::try_unwrap) {
                        Some(Ok(store)) => store.close().map_err(|e| e.to_string()),
                        Some(Err(_)) => Err("the store is still in use".to_string()),
                        None => Err("the store was being reopened".to_string()),
                    })
                    .await;
                match closed {
                    Ok(Ok(())) => info!("the store is closed"),
                    Ok(Err(e)) => warn!(error = %e, "the store did not close cleanly"),
                    Err(e) => warn!(error = %e, "closing the store failed"),
                }
                return;
            }
            Err(still) => {
                shared = still;
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    }
    warn!("the store is still in use; it is closed when the process exits");
}

/// Every call of both bindings: a body of another type is refused before
/// anything reads it (JSON-RPC: -32005 with HTTP 200, as the binding's
/// errors are; HTTP+JSON: 415), and a JSON response is written in the
/// client's type ([`http::media::response_type`]). The agent card and `/healthz` are
/// not calls: they keep their own.
async fn negotiate(request: Request, next: Next) -> Response {
    let path = request.uri().path();
    if path == "/healthz" || path.starts_with("/.well-known/") {
        return next.run(request).await;
    }
    let rpc = path == "/";
    if request.method() == Method::POST {
        if let Err(e) = http::media::check_request(request.headers()) {
            return match rpc {
                true => bindings::rpc::error(&RawValue::NULL.to_owned(), &e),
                false => bindings::rest::error(&e),
            };
        }
    }
    let wanted = http::media::response_type(request.headers());
    let mut response = next.run(request).await;
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| {
            matches!(
                http::media::essence(t).as_str(),
                http::media::JSON | http::media::A2A_JSON
            )
        });
    if json {
        response.headers_mut().insert(header::CONTENT_TYPE, wanted);
    }
    response
}

async fn agent_card(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let cards = &shared.cards;
    // A v1.0 client (asking with A2A-Version: 1.0) gets v1.0's card; any
    // other request, v0.3's members beside it (card.rs, `with_v03`).
    let v1 = auth::requested_version(request.headers(), request.uri().query())
        == Some(auth::Protocol::V1_0);
    let card = if v1 { &cards.public } else { &cards.public_v03 };
    let etag = HeaderValue::from_str(&card.etag).unwrap_or(HeaderValue::from_static("\"\""));
    let modified =
        HeaderValue::from_str(&cards.last_modified).unwrap_or(HeaderValue::from_static(""));
    let cache = HeaderValue::from_static("public, max-age=300");
    let headers = request.headers();
    // If-None-Match wins over If-Modified-Since (RFC 9110 §13.2.2).
    let unchanged = match headers.get(header::IF_NONE_MATCH) {
        Some(tags) => tags.as_bytes().split(|&b| b == b',').any(|t| {
            let t = t.trim_ascii();
            t == b"*" || t.strip_prefix(b"W/").unwrap_or(t) == card.etag.as_bytes()
        }),
        None => headers
            .get(header::IF_MODIFIED_SINCE)
            .is_some_and(|since| since.as_bytes() == cards.last_modified.as_bytes()),
    };
    let common = [
        (header::ETAG, etag),
        (header::LAST_MODIFIED, modified),
        (header::CACHE_CONTROL, cache),
        (header::VARY, HeaderValue::from_static("A2A-Version")),
    ];
    if unchanged {
        return (StatusCode::NOT_MODIFIED, common).into_response();
    }
    (
        StatusCode::OK,
        common,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        card.json.clone(),
    )
        .into_response()
}
