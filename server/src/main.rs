//! `ctxlog-server`: the A2A server, with a bundled agent, on a ctxlog store.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use ctxlog_server::agents::{Echo, Script, Scripted};
use ctxlog_server::{AgentExecutor, Config, Idempotency, OnRestart, Server, Tokens, Webhooks};

/// An A2A v1.0.1 server (JSON-RPC and HTTP+JSON, SSE streams) whose every
/// message, event and stream position lives in a ctxlog store.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// The store's directory (created if needed).
    #[arg(long, env = "CTXLOG_DIR", default_value = "ctxlog-data")]
    dir: PathBuf,
    /// The address to listen on. Without --tokens, only a loopback address
    /// is accepted unless --allow-remote is given.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// The agent: `echo`, or `scripted:SCRIPT`, where SCRIPT is a JSON
    /// script file or a built-in script's name (refund-desk,
    /// streaming-report, flaky); docs/server.md gives the script's format.
    #[arg(long, default_value = "echo")]
    agent: String,
    /// A file of `TOKEN TENANT` lines: requests then need
    /// `Authorization: Bearer TOKEN`, and work in that tenant.
    #[arg(long)]
    tokens: Option<PathBuf>,
    /// Serve beyond loopback without --tokens (every caller is then the one
    /// local tenant).
    #[arg(long)]
    allow_remote: bool,
    /// The URL clients reach the server at, for the agent card (default:
    /// http://LISTEN).
    #[arg(long)]
    public_url: Option<String>,
    /// One turn per context at a time: a second message to a context whose
    /// turn runs is refused (UnsupportedOperation, reason CONTEXT_BUSY).
    #[arg(long)]
    single_active_turn: bool,
    /// What to do on start with turns a crash interrupted.
    #[arg(long, value_enum, default_value_t = RestartPolicy::Fail)]
    on_restart: RestartPolicy,
    /// The largest request body, in bytes.
    #[arg(long, default_value_t = 4 << 20)]
    body_limit: usize,
    /// Seconds a non-streaming call may take.
    #[arg(long, default_value_t = 300)]
    request_timeout: u64,
    /// Microseconds a sync of the store may wait for more writes while
    /// many sends are in flight (0: never; at most 10000).
    #[arg(long, default_value_t = 100)]
    commit_linger_us: u64,
    /// Turns running at once, at most.
    #[arg(long, default_value_t = 256)]
    max_turns: usize,
    /// Seconds a shutdown lets running turns finish.
    #[arg(long, default_value_t = 10)]
    grace: u64,
    /// A JSON file holding the extended agent card.
    #[arg(long)]
    extended_card: Option<PathBuf>,
    /// Seconds a connection may take to send a whole request header, from
    /// its opening or the end of its last response (slow headers and idle
    /// keep-alive connections are closed after it).
    #[arg(long, default_value_t = 30)]
    header_timeout: u64,
    /// Seconds a request body may take before it must keep up with
    /// --body-min-rate.
    #[arg(long, default_value_t = 10)]
    body_timeout: u64,
    /// The slowest a request body may arrive after --body-timeout, in bytes
    /// a second (a slower body is cut with 408).
    #[arg(long, default_value_t = 16384)]
    body_min_rate: u64,
    /// Seconds a write to a client may make no progress (a client that
    /// stopped reading its stream) before the connection is closed.
    #[arg(long, default_value_t = 60)]
    write_timeout: u64,
    /// Connections served at once; one more gets a 503 and is closed.
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// How a resent message is recognised: by its messageId (in its
    /// context, or in the tenant for a first message that names none), or
    /// only by an Idempotency-Key header (messageIds are then labels).
    #[arg(long, value_enum, default_value_t = IdempotencyMode::MessageId)]
    idempotency: IdempotencyMode,
    /// Hours an Idempotency-Key is remembered.
    #[arg(long, default_value_t = 24)]
    idempotency_key_hours: u64,
    /// Serve push notifications: take configs and deliver every task
    /// event to their webhooks, at least once, in order, across restarts.
    #[arg(long)]
    push: bool,
    /// Deliver to webhooks at loopback, private and link-local addresses
    /// too (tests, private deployments); by default only public ones.
    #[arg(long)]
    allow_private_webhooks: bool,
    /// Seconds one delivery (connect, request, response) may take.
    #[arg(long, default_value_t = 10)]
    push_timeout: u64,
    /// Milliseconds before the first retry of a failed delivery (doubled
    /// for each failure after it, with jitter, up to --push-retry-max).
    #[arg(long, default_value_t = 1000)]
    push_retry_ms: u64,
    /// Seconds between retries, at most, before a config is failing.
    #[arg(long, default_value_t = 60)]
    push_retry_max: u64,
    /// Failures in a row after which a config is marked failing (logged,
    /// listed in /healthz) and retried every --push-failing-retry seconds.
    #[arg(long, default_value_t = 8)]
    push_failing_after: u32,
    /// Seconds between the retries of a failing config.
    #[arg(long, default_value_t = 300)]
    push_failing_retry: u64,
    /// Root certificates (a PEM file) trusted for https webhooks beside
    /// the system's (a private CA, or tests).
    #[arg(long, value_name = "FILE")]
    webhook_ca: Option<PathBuf>,
    /// The A2A versions served, comma-separated: 1.0 (requests that send
    /// A2A-Version: 1.0) and 0.3 (requests without the header, as v0.3
    /// clients send them). A version not served answers
    /// VersionNotSupported.
    #[arg(long, default_value = "1.0,0.3", value_parser = ctxlog_server::auth::Protocols::parse)]
    protocols: ctxlog_server::auth::Protocols,
    /// Replicate the store's log to this object store, continuously: a
    /// directory (a path or file:///path) or s3://bucket/prefix (AWS_*
    /// variables give the credentials, region and endpoint). `ctxlog
    /// restore` builds a store from it; /healthz shows the lag.
    #[arg(long, env = "CTXLOG_REPLICATE_TO", value_name = "URL")]
    replicate_to: Option<String>,
    /// How often the replica is brought up to date, in milliseconds: the
    /// most it trails the store while the object store keeps up.
    #[arg(long, default_value_t = 1000)]
    replicate_interval_ms: u64,
    /// How long the replica keeps restore points for a restore to a point
    /// in time, in hours.
    #[arg(long, default_value_t = 24)]
    replicate_retain_hours: u64,
    /// Answer a request only once its writes are in the replica (a restore
    /// point covers them), not only on this disk. Requests that arrive
    /// together share one upload.
    #[arg(long)]
    replicate_sync: bool,
    /// Without --replicate-sync: answer a write only while a replication
    /// round that began at most this many milliseconds ago found the
    /// replica still this server's (0: no lease). A writer cut off from
    /// the object store, or paused, then stops answering writes before a
    /// standby that takes over starts; taking over waits this long.
    #[arg(long, default_value_t = 5_000)]
    replicate_lease_ms: u64,
    /// Run as a standby of the writer replicating to URL: restore its
    /// replica into --dir (if it holds no store), follow it every
    /// --replicate-interval-ms, serve reads, refuse writes; on SIGUSR1
    /// take over (claim the replica, fencing the old writer, and
    /// replicate to it).
    #[arg(long, value_name = "URL", conflicts_with_all = ["replicate_to", "push"])]
    follow: Option<String>,
    /// With --follow: take over by itself once the writer's heartbeat in
    /// the replica (written once a second) is older than this many
    /// seconds, at least 3 (the two machines' clocks must agree to well
    /// within it). Without it, only SIGUSR1 promotes.
    #[arg(long, value_name = "SECONDS", requires = "follow")]
    takeover_after: Option<u64>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum IdempotencyMode {
    /// A resent messageId gets the first answer.
    MessageId,
    /// Only an Idempotency-Key header makes a resend.
    Header,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum RestartPolicy {
    /// Store FAILED with a message saying the turn was interrupted.
    Fail,
    /// Call the agent again with the same turn.
    Resume,
}

fn main() -> ExitCode {
    fixed_mmap_threshold();
    let args = Args::parse();
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_writer(ctxlog_server::logline::OneLine::new(std::io::stderr, ansi))
        .with_ansi(ansi)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    match serve(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn serve(args: Args) -> Result<(), String> {
    let tokens = args.tokens.as_deref().map(Tokens::load).transpose()?;
    if tokens.is_none() && !args.listen.ip().is_loopback() && !args.allow_remote {
        return Err(format!(
            "{} is not a loopback address and no --tokens are given: every caller would share \
             one tenant; pass --tokens FILE, or --allow-remote to do it anyway",
            args.listen
        ));
    }
    let agent: Arc<dyn AgentExecutor> = match args.agent.split_once(':') {
        None if args.agent == "echo" => Arc::new(Echo),
        Some(("scripted", script)) => Arc::new(Scripted::new(Script::named(script)?)),
        _ => {
            return Err(format!(
                "unknown agent {:?}: use echo, or scripted:FILE (a script file), or \
                 scripted:NAME (refund-desk, streaming-report, flaky)",
                args.agent
            ))
        }
    };
    let extended_card = args
        .extended_card
        .as_deref()
        .map(|p| {
            let text = std::fs::read_to_string(p)
                .map_err(|e| format!("cannot read {}: {e}", p.display()))?;
            serde_json::from_str(&text).map_err(|e| format!("{} is not JSON: {e}", p.display()))
        })
        .transpose()?;
    let mut config = Config::new(args.public_url.clone().unwrap_or_default());
    config.single_active_turn = args.single_active_turn;
    config.on_restart = match args.on_restart {
        RestartPolicy::Fail => OnRestart::Fail,
        RestartPolicy::Resume => OnRestart::Resume,
    };
    config.body_limit = args.body_limit.min(ctxlog::MAX_RECORD_BYTES as usize);
    config.request_timeout = Duration::from_secs(args.request_timeout);
    config.commit_linger = Duration::from_micros(args.commit_linger_us);
    config.max_turns = args.max_turns;
    config.grace = Duration::from_secs(args.grace);
    config.extended_card = extended_card;
    config.header_timeout = Duration::from_secs(args.header_timeout.max(1));
    config.body_timeout = Duration::from_secs(args.body_timeout);
    config.body_min_rate = args.body_min_rate.max(1);
    config.write_timeout = Duration::from_secs(args.write_timeout.max(1));
    config.max_connections = args.max_connections.max(1);
    config.idempotency = match args.idempotency {
        IdempotencyMode::MessageId => Idempotency::MessageId,
        IdempotencyMode::Header => Idempotency::Header,
    };
    config.idempotency_key_window = Duration::from_secs(args.idempotency_key_hours.max(1) * 3600);
    config.protocols = args.protocols;
    config.takeover_after = args.takeover_after.map(|s| Duration::from_secs(s.max(3)));
    if args.replicate_sync && args.replicate_to.is_none() && args.follow.is_none() {
        return Err("--replicate-sync needs --replicate-to (or --follow)".into());
    }
    config.replicate = args
        .replicate_to
        .as_deref()
        .or(args.follow.as_deref())
        .map(|url| {
            ctxlog::Replicate::to(url)
                .interval(Duration::from_millis(args.replicate_interval_ms.max(1)))
                .retain(Duration::from_secs(args.replicate_retain_hours * 3600))
                .synchronous(args.replicate_sync)
                .lease(
                    (args.replicate_lease_ms > 0)
                        .then(|| Duration::from_millis(args.replicate_lease_ms)),
                )
        });
    config.push = Webhooks {
        enabled: args.push,
        allow_private: args.allow_private_webhooks,
        timeout: Duration::from_secs(args.push_timeout.max(1)),
        retry_base: Duration::from_millis(args.push_retry_ms.max(1)),
        retry_max: Duration::from_secs(args.push_retry_max.max(1)),
        failing_after: args.push_failing_after.max(1),
        failing_retry: Duration::from_secs(args.push_failing_retry.max(1)),
        ca_file: args.webhook_ca.clone(),
        ..Webhooks::default()
    };
    if let Some(ca) = &args.webhook_ca {
        ctxlog_server::check_webhook_ca(ca)?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
        let local = listener.local_addr().map_err(|e| e.to_string())?;
        if args.public_url.is_none() {
            // The address bound (a port of 0 is the one the OS chose).
            config.public_url = format!("http://{local}");
        }
        let (dir, following) = (args.dir.clone(), args.follow.is_some());
        let server = tokio::task::spawn_blocking(move || {
            if following {
                Server::follow(&dir, config, agent, tokens)
            } else {
                Server::open(&dir, config, agent, tokens)
            }
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("{}: {e}", e.kind_name()))?;
        // Every SIGUSR1 promotes (again, after one that failed).
        #[cfg(unix)]
        let usr1 = std::sync::Arc::new(tokio::sync::Mutex::new(
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())
                .map_err(|e| format!("listen for SIGUSR1: {e}"))?,
        ));
        server.promote_on(move || {
            #[cfg(unix)]
            let usr1 = usr1.clone();
            async move {
                #[cfg(unix)]
                if usr1.lock().await.recv().await.is_some() {
                    return;
                }
                std::future::pending::<()>().await;
            }
        });
        tracing::info!(address = %local, dir = %args.dir.display(), "serving A2A");
        server
            .run(listener, shutdown_signal())
            .await
            .map_err(|e| format!("the server failed: {e}"))
    })
}

/// glibc's allocator raises its mmap threshold each time a large block is
/// freed (up to 32 MiB): after the first request body of a few MiB, or the
/// first 16 MiB segment mirror dropped at a rotation, every transient buffer
/// below that size is carved from its arenas, long-lived index entries land
/// among the holes they leave, and the arenas are never given back: the
/// soak bench measured 163 MiB resident after 200,000 requests with 25 MiB
/// of the heap in use, growing with every request. A fixed threshold turns
/// the raising off (resident memory then follows the heap). glibc reads it
/// from the environment when a process starts, so unless
/// `MALLOC_MMAP_THRESHOLD_` is set already, the server sets it (to glibc's
/// own default, 128 KiB) and starts itself again in place (`exec`: the same
/// process, arguments and descriptors). If that cannot be done, it goes on
/// as it is.
fn fixed_mmap_threshold() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::process::CommandExt;
        const VARIABLE: &str = "MALLOC_MMAP_THRESHOLD_";
        if std::env::var_os(VARIABLE).is_some() {
            return;
        }
        let Ok(exe) = std::env::current_exe() else {
            return;
        };
        let mut args = std::env::args_os();
        let name = args.next().unwrap_or_else(|| exe.clone().into_os_string());
        // Returns only if the exec failed.
        let _ = std::process::Command::new(&exe)
            .arg0(name)
            .args(args)
            .env(VARIABLE, "131072")
            .exec();
    }
}

/// SIGINT or SIGTERM.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}
