//! The `ctxlog` command line: a thin layer of clap definitions over the
//! library. Every command is one or two library calls and JSON printing.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::Path;
use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};
use ctxlog::a2a::TaskState;
use ctxlog::render::Budget;
use ctxlog::time::iso8601_ms;
use ctxlog::{
    ContextKey, Durability, Error, ListTasksQuery, Options, RecoveryMode, Store, StoredMessage,
};
use serde_json::{json, Value};

mod args;
mod backup;
mod failure;

use backup::{export, import, salvage, Output};

use args::{Cli, Command, DurabilityArg, Global, RecoveryArg};
use failure::{clap_usage, exit, io_error, usage, Failure, Outcome};

fn main() -> ExitCode {
    // clap reads the environment's fallbacks too, but says only that some
    // argument was not UTF-8: name the variable.
    let not_utf8 = ["CTXLOG_TENANT"]
        .into_iter()
        .find(|v| std::env::var_os(v).is_some_and(|x| x.to_str().is_none()));
    let outcome = match not_utf8 {
        Some(var) => Err(usage(format!(
            "the environment variable {var} is not UTF-8"
        ))),
        None => run(std::env::args_os()),
    };
    exit(outcome)
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
                        Err(usage("no command given"))
                    } else {
                        Ok(())
                    }
                }
                _ => Err(clap_usage(&e)),
            };
        }
    };
    let cli = Cli::from_arg_matches(&matches).map_err(|e| clap_usage(&e))?;
    // An explicit tenant: on the command line or in the environment.
    let tenant_given = matches!(
        matches.value_source("tenant"),
        Some(ValueSource::CommandLine | ValueSource::EnvVariable)
    );
    logging(cli.global.verbose);
    command(cli.command, &cli.global, tenant_given).map_err(|f| f.searched(&cli.global.tenant))
}

/// Runs one command.
fn command(command: Command, g: &Global, tenant_given: bool) -> Outcome {
    match command {
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
            let first_page = query.page_token.is_none();
            let filtered = query.context_id.is_some()
                || query.status.is_some()
                || query.status_timestamp_after_ms.is_some();
            let page = open_read(g)?.list_tasks(&g.tenant, &query)?;
            if page.tasks.is_empty() && first_page {
                let which = if filtered { " that match" } else { "" };
                empty_note(&format!("no tasks{which}"), &g.tenant);
            }
            print_json(&page)?;
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
        #[cfg(feature = "replicate")]
        Command::Restore {
            url,
            into,
            at,
            list,
        } => backup::restore(&url, into.as_deref(), at, list),
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

pub(crate) fn options(g: &Global) -> Options {
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
pub(crate) fn open_write(g: &Global, create: bool) -> Result<Store, Failure> {
    if g.read_only {
        return Err(usage(
            "--read-only is for commands that only read; this one writes",
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

pub(crate) fn stdin_bytes() -> Result<Vec<u8>, Failure> {
    let mut raw = Vec::new();
    std::io::stdin()
        .read_to_end(&mut raw)
        .map_err(|e| io_error("read standard input", "-", e))?;
    Ok(raw)
}

fn send(g: &Global) -> Outcome {
    let raw = stdin_bytes()?;
    // Checked before the store is opened (and perhaps created): a bad
    // message leaves nothing behind.
    Store::check_message(&raw)?;
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
    if page.contexts.is_empty() && token.is_none() {
        empty_note("no contexts", &g.tenant);
    }
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

/// The note on stderr of an empty listing: whose it is, since another
/// tenant's data is the common reason to see none.
fn empty_note(what: &str, tenant: &str) {
    eprintln!("note: {what} for tenant {tenant:?} (choose another with --tenant or CTXLOG_TENANT)");
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
        return Err(usage(
            "import-hermes needs an explicit --tenant (or CTXLOG_TENANT): the journals cannot \
             prove whose they are",
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

/// A progress bar on stderr when it is a terminal, by bytes (as the
/// library reports its scans); nothing otherwise.
pub(crate) fn progress(label: &'static str) -> impl FnMut(usize, usize) {
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

pub(crate) fn print_json<T: serde::Serialize>(v: &T) -> Outcome {
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
pub(crate) fn print_text(text: &str) -> Outcome {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(Failure::Closed),
        other => other.map_err(|e| io_error("write to standard output", "-", e)),
    }
}
