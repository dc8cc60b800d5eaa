//! How the server runs: the options the binary's flags set, as plain data
//! (a program that mounts the server builds it directly).

use std::time::Duration;

/// What the server does on start with tasks a process that died left
/// mid-turn (SUBMITTED or WORKING).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnRestart {
    /// Store FAILED, with an agent message saying the turn was interrupted.
    #[default]
    Fail,
    /// Call the agent again with the same turn (the task's latest message).
    Resume,
}

/// How a resent message is recognised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Idempotency {
    /// By its messageId, within the context it names (or its task's), or
    /// within the tenant for a first message that names neither: a resend
    /// gets the first answer and the agent is not called again; the same
    /// messageId with other content is `IDEMPOTENCY_CONFLICT`.
    #[default]
    MessageId,
    /// Only by an `Idempotency-Key` header: messageIds are the client's
    /// labels, and a message that reuses one is a new message.
    Header,
}

/// The server's options.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where the store replicates its log (`--replicate-to`), if anywhere:
    /// see `ctxlog::replicate`. `/healthz` shows how far the replica
    /// trails.
    pub replicate: Option<ctxlog::Replicate>,
    /// A standby (`Server::follow`) promotes itself once the writer's
    /// heartbeat in the replica is older than this (`--takeover-after`);
    /// `None`: only when asked.
    pub takeover_after: Option<std::time::Duration>,
    /// The URL clients reach the server at, as the agent card gives it
    /// (JSON-RPC at `{public_url}/`, HTTP+JSON at `{public_url}`).
    pub public_url: String,
    /// One turn per context at a time (the store's
    /// `TurnPolicy::SingleActive`): a second message to a context whose
    /// turn is running is refused with `CONTEXT_BUSY`.
    pub single_active_turn: bool,
    /// What to do with turns a crash interrupted.
    pub on_restart: OnRestart,
    /// The largest request body accepted, in bytes (default 4 MiB).
    pub body_limit: usize,
    /// How long a non-streaming call may take: a blocking `SendMessage`
    /// answers with the task as it stands once this has passed (default
    /// 300 s).
    pub request_timeout: Duration,
    /// How long the store's group commit lets a sync wait for more
    /// writes while many sends are in flight (default 100 µs; zero: never).
    /// See DESIGN.md §12, "Syncs shared under load".
    pub commit_linger: Duration,
    /// Turns running at once, at most (default 256); a send past it is
    /// refused before anything is stored.
    pub max_turns: usize,
    /// How long a shutdown lets running turns finish before it fails them
    /// (default 10 s).
    pub grace: Duration,
    /// The extended agent card (`GetExtendedAgentCard`), if one is
    /// configured.
    pub extended_card: Option<serde_json::Value>,
    /// How often an idle stream sends a keep-alive comment (default 15 s).
    pub keep_alive: Duration,
    /// How long a connection may take to send a complete request header,
    /// from its opening or the end of its last response: slow headers and
    /// idle keep-alive connections are closed after it (default 30 s).
    pub header_timeout: Duration,
    /// How long a request body may take before it must keep up with
    /// `body_min_rate` (default 10 s).
    pub body_timeout: Duration,
    /// The slowest a request body may arrive after `body_timeout`, in bytes
    /// a second (default 16 KiB/s).
    pub body_min_rate: u64,
    /// How long a write to a client may make no progress (a client that
    /// stopped reading its stream) before the connection is closed
    /// (default 60 s).
    pub write_timeout: Duration,
    /// Connections served at once, at most (default 1024); one more gets a
    /// 503 and is closed at once.
    pub max_connections: usize,
    /// How a resent message is recognised (default: by messageId). An
    /// `Idempotency-Key` header is honoured either way.
    pub idempotency: Idempotency,
    /// How long an `Idempotency-Key` is remembered (default 24 hours).
    pub idempotency_key_window: Duration,
    /// Push notifications: off unless `enabled`.
    pub push: Webhooks,
    /// The protocol versions served (default: 1.0 and 0.3).
    pub protocols: crate::auth::Protocols,
}

/// How push notifications are delivered (`--push` and the flags after it).
#[derive(Debug, Clone)]
pub struct Webhooks {
    /// Push notifications are served: the card says so, and configs are
    /// taken and delivered to. Off, every push method answers
    /// `PushNotificationNotSupported`.
    pub enabled: bool,
    /// Webhooks at loopback, private, link-local and other non-public
    /// addresses are delivered to (for tests and private deployments).
    pub allow_private: bool,
    /// How long one delivery (connect, request, response) may take
    /// (default 10 s).
    pub timeout: Duration,
    /// The first delay after a failed delivery, doubled for each failure
    /// after it, with jitter (default 1 s).
    pub retry_base: Duration,
    /// The longest such delay (default 60 s).
    pub retry_max: Duration,
    /// After this many failures in a row a config is marked failing
    /// (logged, and listed in `/healthz`) and retried every
    /// `failing_retry` (default 8).
    pub failing_after: u32,
    /// How often a failing config is tried (default 300 s); never dropped.
    pub failing_retry: Duration,
    /// Deliveries under way at once, at most, over all configs (default
    /// 64); a quarter of them at most to one host, and a quarter as many
    /// retries of failed ones beside them (so receivers that hang cannot
    /// hold up the others).
    pub max_in_flight: usize,
    /// Root certificates (a PEM file) trusted for `https` webhooks beside
    /// the system's (`--webhook-ca`).
    pub ca_file: Option<std::path::PathBuf>,
}

impl Default for Webhooks {
    fn default() -> Self {
        Webhooks {
            enabled: false,
            allow_private: false,
            timeout: Duration::from_secs(10),
            retry_base: Duration::from_secs(1),
            retry_max: Duration::from_secs(60),
            failing_after: 8,
            failing_retry: Duration::from_secs(300),
            max_in_flight: 64,
            ca_file: None,
        }
    }
}

impl Config {
    /// The defaults, for a server reached at `public_url`.
    pub fn new(public_url: impl Into<String>) -> Self {
        Config {
            replicate: None,
            takeover_after: None,
            public_url: public_url.into(),
            single_active_turn: false,
            on_restart: OnRestart::Fail,
            body_limit: 4 << 20,
            request_timeout: Duration::from_secs(300),
            commit_linger: Duration::from_micros(100),
            max_turns: 256,
            grace: Duration::from_secs(10),
            extended_card: None,
            keep_alive: Duration::from_secs(15),
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(10),
            body_min_rate: 16 << 10,
            write_timeout: Duration::from_secs(60),
            max_connections: 1024,
            idempotency: Idempotency::MessageId,
            idempotency_key_window: Duration::from_secs(24 * 3600),
            push: Webhooks::default(),
            protocols: crate::auth::Protocols::default(),
        }
    }
}

/// The store options the configuration needs (the turn policy, the
/// replica), on top of `options`.
pub fn store_options(options: ctxlog::Options, config: &Config) -> ctxlog::Options {
    // A task's turns never interleave: an answer sent while its turn runs
    // is refused, not answered with another turn's outcome (DESIGN §12).
    let options = options.one_turn_per_task(true);
    let options = match &config.replicate {
        Some(replicate) => options.replicate(replicate.clone()),
        None => options,
    };
    if config.single_active_turn {
        options.turns(ctxlog::TurnPolicy::SingleActive { lease: None })
    } else {
        options
    }
}
