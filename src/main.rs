//! The `ctxlog` command line: a thin argument layer over the library.

use std::ffi::OsString;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use ctxlog::a2a::TaskState;
use ctxlog::render::Budget;
use ctxlog::time::{iso8601_ms, parse_iso8601_ms};
use ctxlog::{
    ContextKey, Durability, Error, ListTasksQuery, OpenReport, Options, Store, StoredMessage,
};
use serde_json::{json, Value};

const USAGE: &str = "\
usage: ctxlog [--dir DIR] [--tenant TENANT] [--durability sync|group|buffered] COMMAND

DIR defaults to $CTXLOG_DIR or ./ctxlog-data; TENANT to $CTXLOG_TENANT or 'default'.

commands:
  demo                                  the guided support case on the store in DIR
  send                                  receive one A2A Message (JSON on stdin) under the A2A rules
  event                                 apply one A2A StreamResponse with a statusUpdate or artifactUpdate (stdin)
  cancel TASK_ID                        cancel a task; prints the Task
  task TASK_ID [--history-length N] [--include-artifacts]
  tasks [--context C] [--status TASK_STATE_...] [--status-timestamp-after TS]
        [--page-size N] [--page-token T] [--history-length N] [--include-artifacts]
  events TASK_ID [--after SEQ]          the task's events with their sequence numbers
  contexts [--page-size N] [--page-token T]
  history CONTEXT [--last N]            the context's messages, oldest first, as JSON
  render CONTEXT [--last N] [--max-bytes N]
                                        the guarded rendering of the history, as text
  delete CONTEXT                        delete a context with its tasks, messages and artifacts
  compact                               rewrite the log without deleted and expired contexts
  append CONTEXT                        save stdin, byte for byte, as a raw message of CONTEXT
  verify                                a full checksum scan; exit 0 only when clean
  stats                                 contexts, tasks, messages, segments, bytes on disk, live and index bytes
  import-hermes DIR                     import Hermes A2A journals (<name>.jsonl) into --tenant (required)
  key CONTEXT                           the context's namespace key
  check                                 open the store and print what recovery found";

/// A failure of the command line: a usage error (exit 2) or the library's (exit 1).
enum Failure {
    Usage(String),
    Store(Error),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Store(e)
    }
}

type Outcome = Result<(), Failure>;

struct Global {
    dir: PathBuf,
    tenant: String,
    /// Whether `--tenant` was given on the command line.
    tenant_given: bool,
    durability: Durability,
}

/// A command's arguments: positionals, `--flag value` pairs and switches.
struct Args {
    positional: Vec<String>,
    values: Vec<(String, String)>,
    switches: Vec<String>,
}

impl Args {
    fn parse(args: &[String], values: &[&str], switches: &[&str]) -> Result<Self, Failure> {
        let mut out = Args {
            positional: Vec::new(),
            values: Vec::new(),
            switches: Vec::new(),
        };
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            if switches.contains(&arg.as_str()) {
                out.switches.push(arg.clone());
            } else if values.contains(&arg.as_str()) {
                let v = it
                    .next()
                    .ok_or_else(|| usage(format!("{arg} needs a value")))?;
                out.values.push((arg.clone(), v.clone()));
            } else if arg.starts_with("--") {
                return Err(usage(format!("unknown option {arg}")));
            } else {
                out.positional.push(arg.clone());
            }
        }
        Ok(out)
    }

    fn exactly<const N: usize>(&self) -> Result<[String; N], Failure> {
        self.positional
            .clone()
            .try_into()
            .map_err(|p: Vec<String>| usage(format!("expected {N} argument(s), got {}", p.len())))
    }

    fn value(&self, name: &str) -> Option<&str> {
        self.values
            .iter()
            .rev()
            .find(|(f, _)| f == name)
            .map(|(_, v)| v.as_str())
    }

    fn number(&self, name: &str) -> Result<Option<usize>, Failure> {
        self.value(name)
            .map(|v| {
                v.parse()
                    .map_err(|_| usage(format!("{name} needs a whole number, got {v:?}")))
            })
            .transpose()
    }

    fn switch(&self, name: &str) -> bool {
        self.switches.iter().any(|s| s == name)
    }
}

fn usage(msg: String) -> Failure {
    Failure::Usage(msg)
}

fn main() -> ExitCode {
    // OS strings: an argument that is not UTF-8 is a usage error (or, for
    // a path, a path), never a panic.
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(msg)) => {
            eprintln!("error: Usage: {}; see ctxlog --help", one_line(&msg));
            ExitCode::from(2)
        }
        Err(Failure::Store(e)) => {
            eprintln!("error: {}: {}", e.kind_name(), one_line(&e.to_string()));
            ExitCode::from(1)
        }
    }
}

/// `text` on one line: every control character (a newline in a path, say)
/// written as `\u{hex}`, so an error is always the one line it promises.
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

/// An argument as UTF-8, or a usage error naming it.
fn utf8(arg: OsString, what: &str) -> Result<String, Failure> {
    arg.into_string().map_err(|bad| {
        usage(format!(
            "{what} is not valid UTF-8 ({:?}); pass it in UTF-8",
            bad.to_string_lossy()
        ))
    })
}

fn run(args: Vec<OsString>) -> Outcome {
    let tenant = match std::env::var("CTXLOG_TENANT") {
        Ok(tenant) => tenant,
        Err(std::env::VarError::NotPresent) => "default".into(),
        // Never another tenant's data in its place.
        Err(std::env::VarError::NotUnicode(_)) => {
            return Err(usage(
                "CTXLOG_TENANT is not valid UTF-8; set it to the tenant's name in UTF-8".into(),
            ))
        }
    };
    let mut global = Global {
        dir: std::env::var_os("CTXLOG_DIR").map_or_else(|| "ctxlog-data".into(), PathBuf::from),
        tenant,
        tenant_given: false,
        durability: Durability::Sync,
    };
    let mut rest = args.into_iter();
    let command = loop {
        let next = |rest: &mut std::vec::IntoIter<OsString>, flag: &str| {
            rest.next()
                .ok_or_else(|| usage(format!("{flag} needs a value")))
        };
        let Some(arg) = rest.next() else {
            return Err(usage("no command given".into()));
        };
        match utf8(arg, "the command")?.as_str() {
            "--dir" => global.dir = next(&mut rest, "--dir")?.into(),
            "--tenant" => {
                global.tenant = utf8(next(&mut rest, "--tenant")?, "--tenant")?;
                global.tenant_given = true;
            }
            "--durability" => {
                let value = utf8(next(&mut rest, "--durability")?, "--durability")?;
                global.durability = match value.as_str() {
                    "sync" => Durability::Sync,
                    "group" => Durability::GroupCommit,
                    "buffered" => Durability::Buffered,
                    other => return Err(usage(format!("unknown durability {other:?}"))),
                }
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            cmd => break cmd.to_string(),
        }
    };
    if command == "import-hermes" {
        return import_hermes(&global, rest.collect());
    }
    let args = rest
        .enumerate()
        .map(|(i, a)| utf8(a, &format!("argument {} of {command}", i + 1)))
        .collect::<Result<Vec<String>, _>>()?;
    let g = &global;
    match command.as_str() {
        "demo" => {
            Args::parse(&args, &[], &[])?.exactly::<0>()?;
            let store = open(g)?;
            ctxlog::demo::run(&store, &g.tenant, &mut std::io::stdout())?;
            Ok(store.close()?)
        }
        "send" => send(g, &args),
        "event" => event(g, &args),
        "cancel" => {
            let [task] = Args::parse(&args, &[], &[])?.exactly::<1>()?;
            print_json(&open(g)?.cancel_task(&g.tenant, &task)?);
            Ok(())
        }
        "task" => task(g, &args),
        "tasks" => tasks(g, &args),
        "events" => events(g, &args),
        "contexts" => contexts(g, &args),
        "history" => history(g, &args),
        "render" => render(g, &args),
        "append" => append(g, &args),
        "compact" => {
            Args::parse(&args, &[], &[])?.exactly::<0>()?;
            let r = open(g)?.compact_with_progress(&mut progress("compact"))?;
            print_json(&json!({
                "inputSegments": r.input_segments, "inputBytes": r.input_bytes,
                "outputSegments": r.output_segments, "outputBytes": r.output_bytes,
                "recordsKept": r.records_kept, "recordsDropped": r.records_dropped,
                "livePayloadBytes": r.live_payload_bytes,
            }));
            Ok(())
        }
        "delete" => {
            let [context] = Args::parse(&args, &[], &[])?.exactly::<1>()?;
            open(g)?.delete_context(&g.tenant, &context)?;
            print_json(&json!({ "contextId": context, "deleted": true }));
            Ok(())
        }
        "verify" => verify(g, &args),
        "stats" => {
            Args::parse(&args, &[], &[])?.exactly::<0>()?;
            let st = open(g)?.stats();
            print_json(&json!({
                "contexts": st.contexts, "tasks": st.tasks, "messages": st.messages,
                "segments": st.segments, "diskBytes": st.disk_bytes, "liveBytes": st.live_bytes,
                "indexBytes": st.index_bytes,
            }));
            Ok(())
        }
        "key" => {
            let [context] = Args::parse(&args, &[], &[])?.exactly::<1>()?;
            println!("{}", ContextKey::derive(&g.tenant, &context)?);
            Ok(())
        }
        "check" => {
            Args::parse(&args, &[], &[])?.exactly::<0>()?;
            print_json(&report_json(open(g)?.open_report()));
            Ok(())
        }
        other => Err(usage(format!("unknown command {other:?}"))),
    }
}

fn verify(g: &Global, args: &[String]) -> Outcome {
    Args::parse(args, &[], &[])?.exactly::<0>()?;
    let report = Store::verify(&g.dir, &mut progress("verify"))?;
    let damage: Vec<Value> = report
        .damage
        .iter()
        .map(|d| json!({ "segment": d.segment, "offset": d.offset, "reason": d.reason }))
        .collect();
    print_json(&json!({
        "clean": report.is_clean(), "segments": report.segments, "records": report.records,
        "bytes": report.bytes, "damage": damage,
    }));
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

fn import_hermes(g: &Global, args: Vec<OsString>) -> Outcome {
    // The journal directory is a path: any bytes the OS allows.
    let [from] = <[OsString; 1]>::try_from(args)
        .map_err(|a| usage(format!("expected 1 argument(s), got {}", a.len())))?;
    if from.to_str().is_some_and(|f| f.starts_with("--")) {
        return Err(usage(format!("unknown option {}", from.to_string_lossy())));
    }
    if !g.tenant_given {
        return Err(usage(
            "import-hermes needs an explicit --tenant: the journals cannot prove whose they are"
                .into(),
        ));
    }
    let store = open(g)?;
    let r = ctxlog::import_hermes(
        &store,
        &g.tenant,
        std::path::Path::new(&from),
        &mut progress("import"),
    )?;
    let skipped: Vec<Value> = r
        .skipped_files
        .iter()
        .map(|(f, why)| json!({ "file": f.display().to_string(), "reason": why }))
        .collect();
    print_json(&json!({
        "files": r.files, "contexts": r.contexts, "messages": r.messages,
        "skippedLines": r.skipped_lines, "skippedFiles": skipped,
    }));
    Ok(store.close()?)
}

/// A progress bar on stderr when it is a terminal; nothing otherwise.
fn progress(label: &'static str) -> impl FnMut(usize, usize) {
    use std::io::IsTerminal;
    let tty = std::io::stderr().is_terminal();
    move |done, total| {
        if !tty || total == 0 {
            return;
        }
        let filled = done * 30 / total;
        eprint!(
            "\r{label} [{}{}] {done}/{total}",
            "#".repeat(filled),
            ".".repeat(30 - filled)
        );
        if done == total {
            eprintln!();
        }
    }
}

fn open(global: &Global) -> Result<Store, Failure> {
    Ok(Store::open(
        &global.dir,
        Options::default().durability(global.durability),
    )?)
}

fn stdin_bytes() -> Result<Vec<u8>, Failure> {
    let mut raw = Vec::new();
    std::io::stdin()
        .read_to_end(&mut raw)
        .map_err(|e| Error::Io {
            op: "read standard input",
            path: "-".into(),
            source: e,
        })?;
    Ok(raw)
}

fn send(g: &Global, args: &[String]) -> Outcome {
    Args::parse(args, &[], &[])?.exactly::<0>()?;
    let raw = stdin_bytes()?;
    let r = open(g)?.receive_message(&g.tenant, &raw)?;
    print_json(
        &json!({ "contextId": r.context_id, "taskId": r.task_id, "duplicate": r.duplicate }),
    );
    Ok(())
}

fn event(g: &Global, args: &[String]) -> Outcome {
    Args::parse(args, &[], &[])?.exactly::<0>()?;
    let raw = stdin_bytes()?;
    let e = open(g)?.apply_event(&g.tenant, &raw)?;
    print_json(&json!({ "taskId": e.task_id, "seq": e.seq }));
    Ok(())
}

fn task(g: &Global, args: &[String]) -> Outcome {
    let a = Args::parse(args, &["--history-length"], &["--include-artifacts"])?;
    let [task] = a.exactly::<1>()?;
    let history = a.number("--history-length")?;
    let t = open(g)?.get_task(&g.tenant, &task, history, a.switch("--include-artifacts"))?;
    print_json(&t);
    Ok(())
}

fn tasks(g: &Global, args: &[String]) -> Outcome {
    let a = Args::parse(
        args,
        &[
            "--context",
            "--status",
            "--status-timestamp-after",
            "--page-size",
            "--page-token",
            "--history-length",
        ],
        &["--include-artifacts"],
    )?;
    a.exactly::<0>()?;
    let status = a
        .value("--status")
        .map(|s| {
            TaskState::from_name(s)
                .ok_or_else(|| usage(format!("unknown --status {s:?}; use a TASK_STATE_… name")))
        })
        .transpose()?;
    let after = a
        .value("--status-timestamp-after")
        .map(|s| {
            parse_iso8601_ms(s).ok_or_else(|| {
                usage(format!(
                    "--status-timestamp-after {s:?} is not an ISO 8601 UTC time"
                ))
            })
        })
        .transpose()?;
    let query = ListTasksQuery {
        context_id: a.value("--context").map(str::to_string),
        status,
        status_timestamp_after_ms: after,
        page_size: a.number("--page-size")?,
        page_token: a.value("--page-token").map(str::to_string),
        history_length: a.number("--history-length")?,
        include_artifacts: a.switch("--include-artifacts"),
    };
    print_json(&open(g)?.list_tasks(&g.tenant, &query)?);
    Ok(())
}

fn events(g: &Global, args: &[String]) -> Outcome {
    let a = Args::parse(args, &["--after"], &[])?;
    let [task] = a.exactly::<1>()?;
    let after = a.number("--after")?.unwrap_or(0) as u64;
    let list = open(g)?.events_since(&g.tenant, &task, after)?;
    /// An event with its sequence number; the stored objects in it are
    /// printed as they were stored.
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
    print_json(&out);
    Ok(())
}

fn contexts(g: &Global, args: &[String]) -> Outcome {
    let a = Args::parse(args, &["--page-size", "--page-token"], &[])?;
    a.exactly::<0>()?;
    let size = a
        .number("--page-size")?
        .unwrap_or(ctxlog::DEFAULT_PAGE_SIZE);
    let store = open(g)?;
    let page = store.list_contexts(&g.tenant, size, a.value("--page-token"))?;
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
    );
    Ok(())
}

fn history(g: &Global, args: &[String]) -> Outcome {
    let a = Args::parse(args, &["--last"], &[])?;
    let [context] = a.exactly::<1>()?;
    let last = a.number("--last")?.unwrap_or(usize::MAX);
    let msgs = open(g)?.last_messages(&g.tenant, &context, last)?;
    let out: Vec<HistoryLine> = msgs.iter().map(HistoryLine::of).collect();
    print_json(&out);
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

fn render(g: &Global, args: &[String]) -> Outcome {
    let a = Args::parse(args, &["--last", "--max-bytes"], &[])?;
    let [context] = a.exactly::<1>()?;
    let defaults = Budget::default();
    let budget = Budget::new(
        a.number("--max-bytes")?.unwrap_or(defaults.max_bytes),
        a.number("--last")?.unwrap_or(defaults.max_messages),
    );
    print!(
        "{}",
        open(g)?
            .render_history(&g.tenant, &context, None, budget)?
            .text
    );
    Ok(())
}

fn append(g: &Global, args: &[String]) -> Outcome {
    let [context] = Args::parse(args, &[], &[])?.exactly::<1>()?;
    let raw = stdin_bytes()?;
    let a = open(g)?.append_message(&g.tenant, &context, &raw)?;
    print_json(&json!({
        "contextId": context,
        "key": a.key.to_string(),
        "seq": a.seq,
        "timestamp": iso8601_ms(a.timestamp_ms),
        "openedContext": a.opened_context,
    }));
    Ok(())
}

fn report_json(r: &OpenReport) -> Value {
    json!({
        "segments": r.segments,
        "records": r.records,
        "contexts": r.contexts,
        "tornTail": r.torn_tail.as_ref().map(|t| json!({
            "segment": t.segment, "offset": t.offset, "bytes": t.bytes, "records": t.records,
        })),
        "skipped": r.skipped.iter().map(|s| json!({
            "segment": s.segment, "offset": s.offset, "bytes": s.bytes, "reason": s.reason,
        })).collect::<Vec<_>>(),
        "foreignNamespaceRecords": r.foreign_namespace_records,
        "removedSegments": r.removed_segments,
        "storeId": r.store_id,
        "identityRestored": r.identity_restored,
        "lost": r.lost.iter().map(|l| json!({
            "segment": l.segment, "expected": l.expected, "actual": l.actual, "reason": l.reason,
        })).collect::<Vec<_>>(),
        "foreignFiles": r.foreign.iter().map(|f| json!({
            "file": f.path.display().to_string(), "reason": f.reason,
        })).collect::<Vec<_>>(),
        "fromCheckpoint": r.from_checkpoint,
        "checkpointIgnored": r.checkpoint_ignored,
    })
}

fn print_json<T: serde::Serialize>(v: &T) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}
