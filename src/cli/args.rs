//! The command line's definition (clap): its global options, its
//! commands and their arguments, and the help text around them.

use std::path::PathBuf;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};
use ctxlog::a2a::TaskState;
use ctxlog::time::parse_iso8601_ms;

pub(crate) const EXAMPLES: &str = "\
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

/// The conversation history store of A2A agents, from the command line.
#[derive(Parser)]
#[command(name = "ctxlog", version, after_help = EXAMPLES, propagate_version = true)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: Global,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Options of every command, accepted before or after it.
#[derive(Args)]
#[command(next_help_heading = "Global options")]
pub(crate) struct Global {
    /// The store's directory.
    #[arg(
        long,
        global = true,
        env = "CTXLOG_DIR",
        hide_env_values = true,
        default_value = "ctxlog-data",
        value_name = "DIR"
    )]
    pub(crate) dir: PathBuf,
    /// Whose data: every command reads and writes this tenant's only.
    #[arg(
        long,
        global = true,
        env = "CTXLOG_TENANT",
        hide_env_values = true,
        default_value = "default"
    )]
    pub(crate) tenant: String,
    /// When a write returns: after its fdatasync (sync), sharing
    /// fdatasyncs with concurrent writers (group), or once in the OS's
    /// cache (buffered).
    #[arg(long, global = true, value_enum, default_value_t = DurabilityArg::Sync)]
    pub(crate) durability: DurabilityArg,
    /// How an open treats damage: refuse it (strict), or skip damaged
    /// records, files of another store and lost data, and report them
    /// (skip-corrupt).
    #[arg(long, global = true, value_enum, default_value_t = RecoveryArg::Strict)]
    pub(crate) recovery: RecoveryArg,
    /// Read without the store's lock, even when no writer holds it (read
    /// commands do so anyway when one does).
    #[arg(long, global = true)]
    pub(crate) read_only: bool,
    /// Log what the library does on stderr: -v for its decisions, -vv for
    /// its steps.
    #[arg(short, long, global = true, action = ArgAction::Count)]
    pub(crate) verbose: u8,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum DurabilityArg {
    Sync,
    Group,
    Buffered,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum RecoveryArg {
    Strict,
    SkipCorrupt,
}

/// A task state, by its short name or the spec's.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum StateArg {
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
pub(crate) enum Command {
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
    Cancel {
        /// The taskId (as `send` printed it).
        task_id: String,
    },
    /// A task, as the A2A Task JSON.
    Task {
        /// The taskId (as `send` printed it).
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
        /// The taskId (as `send` printed it).
        task_id: String,
        /// Only the events after this one.
        #[arg(long, value_name = "SEQ", default_value_t = 0)]
        after: u64,
    },
    /// The tenant's contexts, oldest first activity first.
    Contexts {
        /// Contexts per page (1 to 100).
        #[arg(long, value_name = "N", default_value_t = ctxlog::DEFAULT_PAGE_SIZE)]
        page_size: usize,
        /// The previous page's nextPageToken.
        #[arg(long, value_name = "TOKEN")]
        page_token: Option<String>,
    },
    /// A context's messages, oldest first, each with its record number `seq` in the context (from 0).
    #[command(
        after_help = "Example:\n  ctxlog history case-7 --tenant acme --last 20\n\nA `seq` here counts every record of the context (status updates too), so it may skip numbers; `events` numbers a task's events from 1."
    )]
    History {
        /// The contextId, as the client sent it (or `send` printed it).
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
        /// The contextId, as the client sent it (or `send` printed it).
        context: String,
        /// At most N messages.
        #[arg(long, value_name = "N")]
        last: Option<usize>,
        /// At most N bytes in all.
        #[arg(long, value_name = "N")]
        max_bytes: Option<usize>,
    },
    /// Delete a context with its tasks, messages and artifacts (its id stays refused).
    Delete {
        /// The contextId, as the client sent it (or `send` printed it).
        context: String,
    },
    /// Rewrite the log without deleted and expired contexts, each context's records together.
    Compact,
    /// Save stdin, byte for byte, as a raw message of CONTEXT (outside the task model).
    Append {
        /// The contextId, as the client sent it (or `send` printed it).
        context: String,
    },
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
    Key {
        /// The contextId, as the client sent it (or `send` printed it).
        context: String,
    },
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
    /// Build a store in DIR from a replica, as of its newest restore point or of --at.
    #[cfg(feature = "replicate")]
    #[command(
        after_help = "Examples:\n  ctxlog restore /mnt/backup/agent restored          the newest restore point\n  ctxlog restore s3://bucket/agent restored --at 2026-12-01T09:30:00Z\n  ctxlog restore /mnt/backup/agent --list            the restore points kept\n\nDIR must be new or empty; the store is verified before it is put there."
    )]
    Restore {
        /// The replica: a directory (a path or file:///path), or s3://bucket/prefix.
        url: String,
        /// Where to build the store (new or empty).
        #[arg(value_name = "DIR", required_unless_present = "list")]
        into: Option<PathBuf>,
        /// The newest restore point published at or before this time (ISO
        /// 8601 UTC; a date alone means its midnight).
        #[arg(long, value_parser = parse_time, value_name = "TIME")]
        at: Option<u64>,
        /// List the restore points instead (JSON lines: number, time).
        #[arg(long, conflicts_with_all = ["into", "at"])]
        list: bool,
    },
    /// A shell completion script.
    #[command(
        after_help = "Example:\n  ctxlog completions bash > ~/.local/share/bash-completion/completions/ctxlog"
    )]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// The manual page (roff), for `man -l -`.
    Man,
}

/// A time as `--status-timestamp-after` takes it: ISO 8601 UTC, or a date
/// (its midnight, UTC).
pub(crate) fn parse_time(s: &str) -> Result<u64, String> {
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
