//! The `ctxlog` command line: a thin layer of clap definitions over the
//! library. Every command is one or two library calls and JSON printing.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{ArgAction, Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use ctxlog::a2a::TaskState;
use ctxlog::render::Budget;
use ctxlog::time::{iso8601_ms, parse_iso8601_ms};
use ctxlog::{
    ContextKey, Durability, Error, Item, ListTasksQuery, Options, RecoveryMode, Store,
    StoredMessage,
};
use serde_json::{json, Value};

const EXAMPLES: &str = "\
Examples:
  ctxlog demo                                   the guided support case, in ./ctxlog-data
  echo '{\"messageId\":\"m1\",\"role\":\"ROLE_USER\",\"parts\":[{\"text\":\"Refund order 123\"}]}' \\
    | ctxlog --tenant acme send                 receive a message under the A2A rules
  ctxlog --tenant acme tasks --status working   the tenant's running tasks
  ctxlog render CONTEXT --max-bytes 4096        the history a prompt would get
  ctxlog stats --dir /var/lib/agent/ctxlog      works while the agent holds the store
  ctxlog export --output backup.jsonl           every context of the tenant, as JSON lines
  ctxlog --dir broken salvage --output saved.jsonl

Environment: CTXLOG_DIR, CTXLOG_TENANT (shown with each option).
Errors print one line, `error: <Kind>: <what happened and what to do>`,
and exit 1 (2 for a usage error).";

/// ctxlog: the conversation history store of A2A agents, from the command
/// line.
#[derive(Parser)]
#[command(name = "ctxlog", version, after_help = EXAMPLES, propagate_version = true)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// Options of every command, accepted before or after it.
#[derive(Args)]
#[command(next_help_heading = "Global options")]
struct Global {
    /// The store's directory.
    #[arg(
        long,
        global = true,
        env = "CTXLOG_DIR",
        default_value = "ctxlog-data",
        value_name = "DIR"
    )]
    dir: PathBuf,
    /// Whose data: every command reads and writes this tenant's only.
    #[arg(long, global = true, env = "CTXLOG_TENANT", default_value = "default")]
    tenant: String,
    /// When a write returns: after its fdatasync (sync), sharing
    /// fdatasyncs with concurrent writers (group), or once in the OS's
    /// cache (buffered).
    #[arg(long, global = true, value_enum, default_value_t = DurabilityArg::Sync)]
    durability: DurabilityArg,
    /// How an open treats damage: refuse it (strict), or skip damaged
    /// records, files of another store and lost data, and report them
    /// (skip-corrupt).
    #[arg(long, global = true, value_enum, default_value_t = RecoveryArg::Strict)]
    recovery: RecoveryArg,
    /// Read without the store's lock, even when no writer holds it (read
    /// commands do so anyway when one does).
    #[arg(long, global = true)]
    read_only: bool,
    /// Log what the library does on stderr: -v for its decisions, -vv for
    /// its steps.
    #[arg(short, long, global = true, action = ArgAction::Count)]
    verbose: u8,
}

#[derive(Clone, Copy, ValueEnum)]
enum DurabilityArg {
    Sync,
    Group,
    Buffered,
}

#[derive(Clone, Copy, ValueEnum)]
enum RecoveryArg {
    Strict,
    SkipCorrupt,
}

/// A task state, by its short name or the spec's.
#[derive(Clone, Copy, ValueEnum)]
enum StateArg {
    #[value(alias = "TASK_STATE_SUBMITTED")]
    Submitted,
    #[value(alias = "TASK_STATE_WORKING")]
    Working,
    #[value(alias = "TASK_STATE_INPUT_REQUIRED", alias = "input_required")]
    InputRequired,
    #[value(alias = "TASK_STATE_AUTH_REQUIRED", alias = "auth_required")]
    AuthRequired,
    #[value(alias = "TASK_STATE_COMPLETED")]
    Completed,
    #[value(alias = "TASK_STATE_FAILED")]
    Failed,
    #[value(alias = "TASK_STATE_CANCELED", alias = "cancelled")]
    Canceled,
    #[value(alias = "TASK_STATE_REJECTED")]
    Rejected,
}

impl From<StateArg> for TaskState {
    fn from(s: StateArg) -> Self {
        match s {
            StateArg::Submitted => TaskState::Submitted,
            StateArg::Working => TaskState::Working,
            StateArg::InputRequired => TaskState::InputRequired,
            StateArg::AuthRequired => TaskState::AuthRequired,
            StateArg::Completed => TaskState::Completed,
            StateArg::Failed => TaskState::Failed,
            StateArg::Canceled => TaskState::Canceled,
            StateArg::Rejected => TaskState::Rejected,
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// The guided support case TCK-4821 on the store; run again, it continues.
    Demo,
    /// Receive one A2A Message (JSON on stdin) under the A2A rules.
    #[command(
        after_help = "Example:\n  echo '{\"messageId\":\"m1\",\"role\":\"ROLE_USER\",\"parts\":[{\"text\":\"hi\"}]}' | ctxlog send\n\nPrints {\"contextId\", \"taskId\", \"duplicate\"}. An A2A v0.3 message (role \"user\", parts with \"kind\") is refused with what v1.0 expects instead."
    )]
    Send,
    /// Apply one A2A StreamResponse with a statusUpdate or an artifactUpdate (stdin).
    #[command(
        after_help = "Example:\n  echo '{\"statusUpdate\":{\"taskId\":\"TASK\",\"contextId\":\"CTX\",\"status\":{\"state\":\"TASK_STATE_COMPLETED\"}}}' | ctxlog event"
    )]
    Event,
    /// Cancel a task that is not finished; prints the Task.
    Cancel { task_id: String },
    /// A task, as the A2A Task JSON.
    Task {
        task_id: String,
        /// The last N messages of its history (0: none; default: all).
        #[arg(long, value_name = "N")]
        history_length: Option<usize>,
        /// Include its artifacts.
        #[arg(long)]
        include_artifacts: bool,
    },
    /// The tenant's tasks, newest status first (an A2A ListTasksResponse).
    #[command(
        after_help = "Examples:\n  ctxlog tasks --tenant acme --status working\n  ctxlog tasks --context case-7 --status-timestamp-after 2026-11-01 --page-size 10"
    )]
    Tasks {
        /// Only this context's.
        #[arg(long, value_name = "CONTEXT")]
        context: Option<String>,
        /// Only tasks in this state.
        #[arg(long, value_enum)]
        status: Option<StateArg>,
        /// Only tasks whose status is at or after this time (ISO 8601 UTC;
        /// a date alone means its midnight).
        #[arg(long, value_name = "TIME", value_parser = parse_time)]
        status_timestamp_after: Option<u64>,
        /// Tasks per page (1 to 100).
        #[arg(long, value_name = "N")]
        page_size: Option<usize>,
        /// The previous page's nextPageToken.
        #[arg(long, value_name = "TOKEN")]
        page_token: Option<String>,
        /// The last N messages of each task's history.
        #[arg(long, value_name = "N")]
        history_length: Option<usize>,
        /// Include each task's artifacts.
        #[arg(long)]
        include_artifacts: bool,
    },
    /// A task's events (StreamResponse objects), each with its per-task event number `seq` (from 1).
    Events {
        task_id: String,
        /// Only the events after this one.
        #[arg(long, value_name = "SEQ", default_value_t = 0)]
        after: u64,
    },
    /// The tenant's contexts, oldest first activity first.
    Contexts {
        #[arg(long, value_name = "N", default_value_t = ctxlog::DEFAULT_PAGE_SIZE)]
        page_size: usize,
        #[arg(long, value_name = "TOKEN")]
        page_token: Option<String>,
    },
    /// A context's messages, oldest first, each with its record number `seq` in the context (from 0).
    #[command(
        after_help = "Example:\n  ctxlog history case-7 --tenant acme --last 20\n\nA `seq` here counts every record of the context (status updates too), so it may skip numbers; `events` numbers a task's events from 1."
    )]
    History {
        context: String,
        /// Only the last N.
        #[arg(long, value_name = "N")]
        last: Option<usize>,
    },
    /// The context's history as a prompt would get it: inside the injection-guard frame (text).
    #[command(
        after_help = "Example:\n  ctxlog render case-7 --tenant acme --last 20 --max-bytes 8192"
    )]
    Render {
        context: String,
        /// At most N messages.
        #[arg(long, value_name = "N")]
        last: Option<usize>,
        /// At most N bytes in all.
        #[arg(long, value_name = "N")]
        max_bytes: Option<usize>,
    },
    /// Delete a context with its tasks, messages and artifacts (its id stays refused).
    Delete { context: String },
    /// Rewrite the log without deleted and expired contexts, each context's records together.
    Compact,
    /// Save stdin, byte for byte, as a raw message of CONTEXT (outside the task model).
    Append { context: String },
    /// A full checksum scan that changes nothing; exits 0 only when the store is clean.
    Verify,
    /// Contexts, tasks, messages, segments, bytes on disk, live bytes, index bytes.
    Stats,
    /// Import the Hermes A2A plugin's journals (<name>.jsonl) into an explicit --tenant.
    #[command(
        after_help = "Examples:\n  ctxlog import-hermes ~/.hermes/a2a_conversations --tenant acme --dry-run\n  ctxlog import-hermes ~/.hermes/a2a_conversations --tenant acme\n\nRun it again to resume an interrupted import, or to add what the journals gained since."
    )]
    ImportHermes {
        /// The journal directory (named apart from the global --dir, the store's).
        #[arg(value_name = "JOURNALS")]
        journals: PathBuf,
        /// Import nothing if any line cannot be imported; the error names the first.
        #[arg(long)]
        strict: bool,
        /// Report what would be imported, and write nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// The context's namespace key.
    Key { context: String },
    /// Open the store and print what recovery found, and what it took from the checkpoint unread.
    #[command(
        after_help = "Examples:\n  ctxlog check --dir /var/lib/agent/ctxlog\n  ctxlog check --full                 read every record too, as verify does"
    )]
    Check {
        /// Also read every record of the log and check it (as verify does).
        #[arg(long)]
        full: bool,
    },
    /// Write contexts as JSON lines, one per stored record, byte for byte (a backup `import` reads back).
    #[command(
        after_help = "Examples:\n  ctxlog export --tenant acme --output acme.jsonl\n  ctxlog export --all-tenants > all.jsonl\n  ctxlog export --context case-7 --context case-8"
    )]
    Export {
        /// Only these contexts (default: all of the tenant's).
        #[arg(long = "context", value_name = "CONTEXT")]
        contexts: Vec<String>,
        /// Every tenant's contexts, not only --tenant's.
        #[arg(long)]
        all_tenants: bool,
        /// Write here instead of stdout (the summary then goes to stdout).
        #[arg(long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Read back what `export` wrote (a file, or stdin) into the store.
    #[command(
        after_help = "Examples:\n  ctxlog --dir restored import acme.jsonl\n  ctxlog --dir restored import --resume acme.jsonl    after an interrupted import"
    )]
    Import {
        /// The export (default: stdin).
        file: Option<PathBuf>,
        /// Skip the records of each context the store already holds (an
        /// interrupted import, run again).
        #[arg(long)]
        resume: bool,
    },
    /// Export everything readable of a damaged store (--dir), skipping and listing what is not.
    #[command(
        after_help = "Example:\n  ctxlog --dir broken salvage --output saved.jsonl && ctxlog --dir fresh import saved.jsonl\n\nThe damaged store is opened read-only and left as it is."
    )]
    Salvage {
        /// Write here instead of stdout (the summary then goes to stdout).
        #[arg(long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// A shell completion script.
    #[command(
        after_help = "Example:\n  ctxlog completions bash > ~/.local/share/bash-completion/completions/ctxlog"
    )]
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// The manual page (roff), for `man -l -`.
    Man,
}

/// A failure of the command line: a usage error (exit 2), the library's
/// (exit 1), or stdout closed by its reader (exit 141, as a writer killed
/// by SIGPIPE, without a word).
enum Failure {
    Usage(String),
    Store(Error),
    Closed,
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Store(e)
    }
}

type Outcome = Result<(), Failure>;

fn main() -> ExitCode {
    // clap reads the environment's fallbacks too, but says only that some
    // argument was not UTF-8: name the variable.
    let not_utf8 = ["CTXLOG_TENANT"]
        .into_iter()
        .find(|v| std::env::var_os(v).is_some_and(|x| x.to_str().is_none()));
    let outcome = match not_utf8 {
        Some(var) => Err(Failure::Usage(format!(
            "the environment variable {var} is not UTF-8"
        ))),
        None => run(std::env::args_os()),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(msg)) => {
            eprintln!("error: Usage: {}; see ctxlog --help", one_line(&msg));
            ExitCode::from(2)
        }
        Err(Failure::Closed) => ExitCode::from(141),
        // Stdout closed by its reader under a write the library made (the
        // demo's story, an export's lines): the same quiet end.
        Err(Failure::Store(Error::Io { source, .. }))
            if source.kind() == std::io::ErrorKind::BrokenPipe =>
        {
            ExitCode::from(141)
        }
        Err(Failure::Store(e)) => {
            // The library names its Rust option; the command line's is a flag.
            let text = with_causes(&e).replace(
                "open with RecoveryMode::SkipCorrupt",
                "run with --recovery skip-corrupt (or `ctxlog salvage`)",
            );
            eprintln!("error: {}: {}", e.kind_name(), one_line(&text));
            ExitCode::from(1)
        }
    }
}

/// An error's message and, after it, each of its causes (the operating
/// system's error, say), so the line says why.
fn with_causes(e: &Error) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text.push_str(&format!(": {c}"));
        cause = c.source();
    }
    text
}

/// `text` on one line: every control character (a newline in a path) written
/// as `\u{hex}`, so an error is always the one line it promises.
fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// A clap error as one line: what is wrong and clap's tip, without the
/// usage block it prints after them.
fn clap_line(e: &clap::Error) -> String {
    let rendered = e.render().to_string();
    rendered
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more"))
        .map(|l| l.trim_start_matches("error: "))
        .collect::<Vec<_>>()
        .join("; ")
}

fn run(args: impl IntoIterator<Item = OsString>) -> Outcome {
    let matches = match Cli::command().try_get_matches_from(args) {
        Ok(m) => m,
        Err(e) => {
            use clap::error::ErrorKind;
            return match e.kind() {
                ErrorKind::DisplayHelp
                | ErrorKind::DisplayVersion
                | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                    // Help asked for (or a bare `ctxlog`): print it.
                    let _ = e.print();
                    if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                        Err(Failure::Usage("no command given".into()))
                    } else {
                        Ok(())
                    }
                }
                _ => Err(Failure::Usage(clap_line(&e))),
            };
        }
    };
    let cli = Cli::from_arg_matches(&matches).map_err(|e| Failure::Usage(clap_line(&e)))?;
    // An explicit tenant: on the command line or in the environment.
    let tenant_given = matches!(
        matches.value_source("tenant"),
        Some(ValueSource::CommandLine | ValueSource::EnvVariable)
    );
    logging(cli.global.verbose);
    let g = &cli.global;
    match cli.command {
        Command::Demo => {
            let store = open_write(g, true)?;
            ctxlog::demo::run(&store, &g.tenant, &mut std::io::stdout())?;
            Ok(store.close()?)
        }
        Command::Send => send(g),
        Command::Event => {
            let raw = stdin_bytes()?;
            let e = open_write(g, false)?.apply_event(&g.tenant, &raw)?;
            print_json(&json!({ "taskId": e.task_id, "seq": e.seq }))?;
            Ok(())
        }
        Command::Cancel { task_id } => {
            print_json(&open_write(g, false)?.cancel_task(&g.tenant, &task_id)?)?;
            Ok(())
        }
        Command::Task {
            task_id,
            history_length,
            include_artifacts,
        } => {
            let t =
                open_read(g)?.get_task(&g.tenant, &task_id, history_length, include_artifacts)?;
            print_json(&t)?;
            Ok(())
        }
        Command::Tasks {
            context,
            status,
            status_timestamp_after,
            page_size,
            page_token,
            history_length,
            include_artifacts,
        } => {
            let query = ListTasksQuery {
                context_id: context,
                status: status.map(TaskState::from),
                status_timestamp_after_ms: status_timestamp_after,
                page_size,
                page_token,
                history_length,
                include_artifacts,
            };
            print_json(&open_read(g)?.list_tasks(&g.tenant, &query)?)?;
            Ok(())
        }
        Command::Events { task_id, after } => events(g, &task_id, after),
        Command::Contexts {
            page_size,
            page_token,
        } => contexts(g, page_size, page_token.as_deref()),
        Command::History { context, last } => {
            let msgs =
                open_read(g)?.last_messages(&g.tenant, &context, last.unwrap_or(usize::MAX))?;
            let out: Vec<HistoryLine> = msgs.iter().map(HistoryLine::of).collect();
            print_json(&out)?;
            Ok(())
        }
        Command::Render {
            context,
            last,
            max_bytes,
        } => {
            let defaults = Budget::default();
            let budget = Budget::new(
                max_bytes.unwrap_or(defaults.max_bytes),
                last.unwrap_or(defaults.max_messages),
            );
            let rendered = open_read(g)?.render_history(&g.tenant, &context, None, budget)?;
            print_text(&rendered.text)?;
            Ok(())
        }
        Command::Delete { context } => {
            open_write(g, false)?.delete_context(&g.tenant, &context)?;
            print_json(&json!({ "contextId": context, "deleted": true }))?;
            Ok(())
        }
        Command::Compact => {
            let store = open_write(g, false)?;
            let report = store.compact_with_progress(&mut progress("compact"))?;
            print_json(&report)?;
            Ok(store.close()?)
        }
        Command::Append { context } => {
            let raw = stdin_bytes()?;
            let a = open_write(g, true)?.append_message(&g.tenant, &context, &raw)?;
            print_json(&json!({
                "contextId": context,
                "key": a.key.to_string(),
                "seq": a.seq,
                "timestamp": iso8601_ms(a.timestamp_ms),
                "openedContext": a.opened_context,
            }))?;
            Ok(())
        }
        Command::Verify => verify(g),
        Command::Stats => {
            print_json(&open_read(g)?.stats())?;
            Ok(())
        }
        Command::ImportHermes {
            journals,
            strict,
            dry_run,
        } => import_hermes(
            g,
            tenant_given,
            &journals,
            ctxlog::HermesImport::default()
                .strict(strict)
                .dry_run(dry_run),
        ),
        Command::Key { context } => {
            print_text(&format!("{}\n", ContextKey::derive(&g.tenant, &context)?))?;
            Ok(())
        }
        Command::Check { full } => check(g, full),
        Command::Export {
            contexts,
            all_tenants,
            output,
        } => {
            let store = open_read(g)?;
            let mut out = Output::to(output.as_deref())?;
            let summary = export(&store, &g.tenant, &contexts, all_tenants, &mut out)?;
            out.finish(&summary)
        }
        Command::Import { file, resume } => import(g, file.as_deref(), resume),
        Command::Salvage { output } => salvage(g, output.as_deref()),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "ctxlog", &mut std::io::stdout());
            Ok(())
        }
        Command::Man => {
            clap_mangen::Man::new(Cli::command())
                .render(&mut std::io::stdout())
                .map_err(|e| io_error("write the manual page", "-", e))?;
            Ok(())
        }
    }
}

/// With `-v`, a tracing subscriber on stderr: the library's decisions
/// (info) or its steps too (debug); `RUST_LOG` overrides.
fn logging(verbose: u8) {
    if verbose == 0 {
        return;
    }
    let level = match verbose {
        1 => "ctxlog=info",
        2 => "ctxlog=debug",
        _ => "ctxlog=trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .without_time()
        .try_init();
}

/// A time as `--status-timestamp-after` takes it: ISO 8601 UTC, or a date
/// (its midnight, UTC).
fn parse_time(s: &str) -> Result<u64, String> {
    let bad =
        || format!("{s:?} is not an ISO 8601 UTC time; write 2026-01-31 or 2026-01-31T09:30:00Z");
    if let Some(ms) = parse_iso8601_ms(s) {
        return Ok(ms);
    }
    let date = s.len() == 10 && s.as_bytes().get(4) == Some(&b'-');
    match date {
        true => parse_iso8601_ms(&format!("{s}T00:00:00Z")).ok_or_else(bad),
        false => Err(bad()),
    }
}

fn options(g: &Global) -> Options {
    Options::default()
        .durability(match g.durability {
            DurabilityArg::Sync => Durability::Sync,
            DurabilityArg::Group => Durability::GroupCommit,
            DurabilityArg::Buffered => Durability::Buffered,
        })
        .recovery(match g.recovery {
            RecoveryArg::Strict => RecoveryMode::Strict,
            RecoveryArg::SkipCorrupt => RecoveryMode::SkipCorrupt,
        })
}

/// The store, to write: created only by a command that adds data (`create`).
fn open_write(g: &Global, create: bool) -> Result<Store, Failure> {
    if g.read_only {
        return Err(Failure::Usage(
            "--read-only is for commands that only read; this one writes".into(),
        ));
    }
    Ok(Store::open(&g.dir, options(g).create(create))?)
}

/// The store, to read: an existing one only, read-only when asked or when
/// another process holds it (an agent running on it).
fn open_read(g: &Global) -> Result<Store, Failure> {
    if g.read_only {
        return Ok(Store::open_read_only(&g.dir, options(g))?);
    }
    match Store::open(&g.dir, options(g).create(false)) {
        Err(Error::Locked { .. }) => {
            eprintln!(
                "note: the store is in use; reading a read-only snapshot of {}",
                g.dir.display()
            );
            Ok(Store::open_read_only(&g.dir, options(g))?)
        }
        other => Ok(other?),
    }
}

fn io_error(op: &'static str, path: impl AsRef<Path>, e: std::io::Error) -> Failure {
    Failure::Store(Error::Io {
        op,
        path: path.as_ref().to_path_buf(),
        source: e,
    })
}

fn stdin_bytes() -> Result<Vec<u8>, Failure> {
    let mut raw = Vec::new();
    std::io::stdin()
        .read_to_end(&mut raw)
        .map_err(|e| io_error("read standard input", "-", e))?;
    Ok(raw)
}

fn send(g: &Global) -> Outcome {
    let raw = stdin_bytes()?;
    let r = open_write(g, true)?.receive_message(&g.tenant, &raw)?;
    print_json(
        &json!({ "contextId": r.context_id, "taskId": r.task_id, "duplicate": r.duplicate }),
    )?;
    Ok(())
}

fn events(g: &Global, task: &str, after: u64) -> Outcome {
    let list = open_read(g)?.events_since(&g.tenant, task, after)?;
    /// An event with its number; the stored objects in it are printed as
    /// they were stored.
    #[derive(serde::Serialize)]
    struct Numbered {
        seq: u64,
        #[serde(flatten)]
        event: ctxlog::a2a::StreamResponse,
    }
    let out: Vec<Numbered> = list
        .into_iter()
        .map(|(seq, event)| Numbered { seq, event })
        .collect();
    print_json(&out)?;
    Ok(())
}

fn contexts(g: &Global, size: usize, token: Option<&str>) -> Outcome {
    let store = open_read(g)?;
    let page = store.list_contexts(&g.tenant, size, token)?;
    let contexts: Vec<Value> = page
        .contexts
        .iter()
        .map(|c| {
            json!({
                "contextId": c.context_id,
                "key": c.key.to_string(),
                "firstActivity": iso8601_ms(c.first_activity_ms),
                "lastActivity": iso8601_ms(c.last_activity_ms),
                "messages": c.messages,
                "tasks": c.tasks,
            })
        })
        .collect();
    print_json(
        &json!({ "contexts": contexts, "nextPageToken": page.next_page_token.unwrap_or_default() }),
    )?;
    Ok(())
}

/// A stored message as JSON: the message itself, exactly as stored, when
/// its bytes are JSON; otherwise its text (or, for bytes that are not
/// UTF-8, their hex).
#[derive(serde::Serialize)]
struct HistoryLine {
    seq: u64,
    timestamp: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<Box<serde_json::value::RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hex: Option<String>,
}

impl HistoryLine {
    fn of(m: &StoredMessage) -> Self {
        let text = std::str::from_utf8(&m.raw).ok();
        let message = text.and_then(|t| serde_json::from_str(t).ok());
        HistoryLine {
            seq: m.seq,
            timestamp: iso8601_ms(m.timestamp_ms),
            text: text.filter(|_| message.is_none()).map(str::to_string),
            hex: text.is_none().then(|| hex::encode(&m.raw)),
            message,
        }
    }
}

/// The scan, with the lock when the store is free, beside its writer
/// otherwise.
fn verify_report(g: &Global) -> Result<ctxlog::VerifyReport, Failure> {
    if g.read_only {
        return Ok(Store::verify_read_only(&g.dir, &mut progress("verify"))?);
    }
    match Store::verify(&g.dir, &mut progress("verify")) {
        Err(Error::Locked { .. }) => {
            eprintln!("note: the store is in use; verifying beside its writer");
            Ok(Store::verify_read_only(&g.dir, &mut progress("verify"))?)
        }
        other => Ok(other?),
    }
}

fn verify(g: &Global) -> Outcome {
    let report = verify_report(g)?;
    print_json(&report)?;
    if let Some(t) = &report.torn_tail {
        eprintln!(
            "note: segment {} ends in a torn tail of {} bytes at offset {} ({} record(s) never \
             acknowledged, as a crash or a failed write leaves them): the next open cuts it, and \
             loses nothing that was acknowledged",
            t.segment, t.bytes, t.offset, t.records
        );
    }
    damage_error(&report)
}

/// `Corrupt` naming the first damaged place, if there is one.
fn damage_error(report: &ctxlog::VerifyReport) -> Outcome {
    match report.damage.first() {
        None => Ok(()),
        Some(d) => Err(Failure::Store(Error::Corrupt {
            segment: d.segment,
            offset: d.offset,
            reason: format!(
                "{} ({} damaged place(s) in all, listed on stdout)",
                d.reason,
                report.damage.len()
            ),
        })),
    }
}

fn check(g: &Global, full: bool) -> Outcome {
    let verified = full.then(|| verify_report(g)).transpose()?;
    let store = open_read(g)?;
    let r = store.open_report();
    // What the open read (the records replayed, and those re-pointed at a
    // merge's output it read whole), and what it took from the checkpoint
    // unread.
    let read = r.replayed + r.repointed;
    let unread = if r.from_checkpoint {
        r.records.saturating_sub(read)
    } else {
        0
    };
    // The library's report, with what the command adds after its keys.
    let mut out = json!(r);
    out["readOnly"] = json!(store.is_read_only());
    out["recordsRead"] = json!(read);
    out["recordsFromCheckpointUnread"] = json!(unread);
    if unread > 0 && verified.is_none() {
        out["note"] = json!(
            "records indexed from the checkpoint were not read back; `check --full` reads every record"
        );
    }
    if let Some(v) = &verified {
        out["verify"] = json!(v);
    }
    print_json(&out)?;
    verified.as_ref().map_or(Ok(()), damage_error)
}

fn import_hermes(
    g: &Global,
    tenant_given: bool,
    from: &Path,
    how: ctxlog::HermesImport,
) -> Outcome {
    if !tenant_given {
        return Err(Failure::Usage(
            "import-hermes needs an explicit --tenant (or CTXLOG_TENANT): the journals cannot \
             prove whose they are"
                .into(),
        ));
    }
    // A dry run writes nothing: it reads the store read-only (beside a
    // writer, if one runs), and one that does not exist yet as an empty one
    // (in memory).
    let look = || match Store::open_read_only(&g.dir, options(g)) {
        Err(Error::StoreNotFound { .. }) => Store::open(
            &g.dir,
            options(g).fs(std::sync::Arc::new(ctxlog::fs::MemFs::new())),
        ),
        other => other,
    };
    let store = match how.dry_run {
        false => {
            // A strict import refuses before the store is even created.
            if how.strict {
                ctxlog::import_hermes_with(
                    &look()?,
                    &g.tenant,
                    from,
                    how.dry_run(true),
                    &mut |_, _| {},
                )?;
            }
            open_write(g, true)?
        }
        true => look()?,
    };
    let r = ctxlog::import_hermes_with(&store, &g.tenant, from, how, &mut progress("import"))?;
    let skipped_files: Vec<Value> = r
        .skipped_files
        .iter()
        .map(|(f, why)| json!({ "file": f.display().to_string(), "reason": why }))
        .collect();
    print_json(&json!({
        "dryRun": r.dry_run,
        "files": r.files, "contexts": r.contexts, "messages": r.messages,
        "resumedFiles": r.resumed_files, "alreadyImported": r.already_imported,
        "skippedLines": r.skipped_lines, "skipped": r.skipped,
        "skippedFiles": skipped_files,
    }))?;
    if !how.dry_run {
        store.close()?;
    }
    Ok(())
}

/// Where export lines go: a file, or stdout; and where the summary goes
/// (stdout when the lines went to a file, stderr otherwise).
struct Output {
    file: Option<(PathBuf, std::io::BufWriter<std::fs::File>)>,
    stdout: std::io::BufWriter<std::io::Stdout>,
}

impl Output {
    fn to(path: Option<&Path>) -> Result<Self, Failure> {
        let file = match path {
            Some(p) => {
                let f =
                    std::fs::File::create(p).map_err(|e| io_error("create the output", p, e))?;
                Some((p.to_path_buf(), std::io::BufWriter::new(f)))
            }
            None => None,
        };
        Ok(Output {
            file,
            stdout: std::io::BufWriter::new(std::io::stdout()),
        })
    }

    fn line(&mut self, line: &str) -> Outcome {
        let written = match &mut self.file {
            Some((_, f)) => writeln!(f, "{line}"),
            None => writeln!(self.stdout, "{line}"),
        };
        written.map_err(|e| io_error("write the export", self.path(), e))
    }

    fn path(&self) -> PathBuf {
        self.file
            .as_ref()
            .map_or_else(|| PathBuf::from("-"), |(p, _)| p.clone())
    }

    /// Flushes (and syncs a file: a backup is durable once this returns),
    /// then prints the summary.
    fn finish(mut self, summary: &Value) -> Outcome {
        let path = self.path();
        match &mut self.file {
            Some((_, f)) => {
                f.flush()
                    .and_then(|()| f.get_ref().sync_all())
                    .map_err(|e| io_error("write the export", &path, e))?;
                print_json(summary)?;
            }
            None => {
                self.stdout
                    .flush()
                    .map_err(|e| io_error("write the export", &path, e))?;
                eprintln!("{}", serde_json::to_string(summary).unwrap_or_default());
            }
        }
        Ok(())
    }
}

/// Writes the chosen contexts; a context that cannot be read is skipped and
/// listed (as `salvage` needs), unless `strict`.
fn export_contexts(
    store: &Store,
    chosen: &[(String, String)],
    out: &mut Output,
    strict: bool,
) -> Result<Value, Failure> {
    let mut records = 0u64;
    let mut skipped = Vec::new();
    // By bytes written, against the live bytes of the log (the lines'
    // escapes and keys make them somewhat more: the bar grows to fit).
    let mut shown = progress("export");
    let estimate = usize::try_from(store.stats().live_bytes).unwrap_or(usize::MAX);
    let mut written = 0usize;
    for (tenant, context) in chosen {
        shown(written, estimate.max(written + 1));
        match store.export_context(tenant, context) {
            Ok(items) => {
                for item in &items {
                    let line = item.to_json_line();
                    written += line.len() + 1;
                    out.line(&line)?;
                }
                records += items.len() as u64;
            }
            Err(e) if !strict => skipped.push(json!({
                "tenant": tenant, "contextId": context, "reason": with_causes(&e),
            })),
            Err(e) => return Err(e.into()),
        }
    }
    shown(written, written);
    Ok(json!({
        "contexts": chosen.len() - skipped.len(),
        "records": records,
        "skippedContexts": skipped,
    }))
}

/// Every live context of `tenants`, as (tenant, contextId).
fn all_contexts(store: &Store, tenants: &[String]) -> Result<Vec<(String, String)>, Failure> {
    let mut out = Vec::new();
    for tenant in tenants {
        let mut token: Option<String> = None;
        loop {
            let page = store.list_contexts(tenant, ctxlog::MAX_PAGE_SIZE, token.as_deref())?;
            out.extend(
                page.contexts
                    .into_iter()
                    .map(|c| (tenant.clone(), c.context_id)),
            );
            match page.next_page_token {
                Some(t) => token = Some(t),
                None => break,
            }
        }
    }
    Ok(out)
}

fn export(
    store: &Store,
    tenant: &str,
    contexts: &[String],
    all_tenants: bool,
    out: &mut Output,
) -> Result<Value, Failure> {
    let chosen = match (all_tenants, contexts.is_empty()) {
        (true, true) => all_contexts(store, &store.tenants())?,
        (true, false) => {
            return Err(Failure::Usage(
                "--context names a context of --tenant; leave out --all-tenants".into(),
            ))
        }
        (false, true) => all_contexts(store, &[tenant.to_string()])?,
        (false, false) => contexts
            .iter()
            .map(|c| (tenant.to_string(), c.clone()))
            .collect(),
    };
    export_contexts(store, &chosen, out, true)
}

fn salvage(g: &Global, output: Option<&Path>) -> Outcome {
    // Read-only, so that saving what can be saved changes nothing of the
    // damaged store (and works while a writer holds it).
    let store = Store::open_read_only(&g.dir, options(g).recovery(RecoveryMode::SkipCorrupt))?;
    let report = store.open_report().clone();
    let chosen = all_contexts(&store, &store.tenants())?;
    let mut out = Output::to(output)?;
    let mut summary = export_contexts(&store, &chosen, &mut out, false)?;
    summary["open"] = json!(report);
    out.finish(&summary)
}

fn import(g: &Global, file: Option<&Path>, resume: bool) -> Outcome {
    let text = match file {
        Some(p) if p != Path::new("-") => {
            std::fs::read(p).map_err(|e| io_error("read the export", p, e))?
        }
        _ => stdin_bytes()?,
    };
    let text = String::from_utf8(text).map_err(|_| {
        Failure::Store(Error::InvalidParams {
            field: "export",
            reason: "it is not UTF-8 text; give a file `ctxlog export` wrote".into(),
        })
    })?;
    let store = open_write(g, true)?;
    // Per context: how many of its records the store held before (with
    // --resume, the export's first that many are there already).
    let mut held: std::collections::HashMap<(String, String), (u64, u64)> =
        std::collections::HashMap::new();
    let (mut imported, mut skipped) = (0u64, 0u64);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut shown = progress("import");
    let mut read = 0usize;
    for (n, line) in lines.iter().enumerate() {
        shown(read, text.len());
        read += line.len() + 1;
        let at_line = |e: Error| match e {
            Error::InvalidParams { field, reason } => Error::InvalidParams {
                field,
                reason: format!("line {}: {reason}", n + 1),
            },
            other => other,
        };
        let item = Item::from_json_line(line).map_err(at_line)?;
        let key = (item.tenant.clone(), item.context_id.clone());
        let (before, seen) = held.entry(key).or_insert_with(|| {
            let count = match resume {
                true => store
                    .export_context(&item.tenant, &item.context_id)
                    .map_or(0, |records| records.len() as u64),
                false => 0,
            };
            (count, 0)
        });
        *seen += 1;
        if *seen <= *before {
            skipped += 1;
            continue;
        }
        store.import_item(&item).map_err(at_line)?;
        imported += 1;
    }
    shown(text.len(), text.len());
    print_json(&json!({ "records": imported, "skippedAsPresent": skipped }))?;
    Ok(store.close()?)
}

/// A progress bar on stderr when it is a terminal, by bytes (as the
/// library reports its scans); nothing otherwise.
fn progress(label: &'static str) -> impl FnMut(usize, usize) {
    bar(label, "{msg} [{bar:30}] {bytes}/{total_bytes} ({eta})")
}

fn bar(label: &'static str, template: &'static str) -> impl FnMut(usize, usize) {
    use std::io::IsTerminal;
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(0);
        if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("#>."));
        }
        bar.set_message(label);
        bar
    });
    move |done, total| {
        if let Some(bar) = &bar {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
            if done >= total {
                bar.finish_and_clear();
            }
        }
    }
}

fn print_json<T: serde::Serialize>(v: &T) -> Outcome {
    match serde_json::to_string_pretty(v) {
        Ok(text) => print_text(&format!("{text}\n")),
        Err(e) => Err(Failure::Store(Error::InvalidParams {
            field: "answer",
            reason: format!("could not print it as JSON: {e}"),
        })),
    }
}

/// Writes to stdout. A reader that stopped reading (`| head`) ends the
/// command quietly, as a pipe's writer ends, rather than with a panic.
fn print_text(text: &str) -> Outcome {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(Failure::Closed),
        other => other.map_err(|e| io_error("write to standard output", "-", e)),
    }
}
