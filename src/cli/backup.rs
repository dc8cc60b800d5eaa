//! Backups: `export` (contexts as JSON lines, byte for byte), `import`
//! (those lines read back) and `salvage` (what a damaged store still
//! holds, exported).

use std::io::Write;
use std::path::{Path, PathBuf};

use ctxlog::{Error, Item, RecoveryMode, Store};
use serde_json::{json, Value};

use crate::args::Global;
use crate::failure::{io_error, usage, with_causes, Failure, Outcome};
#[cfg(feature = "replicate")]
use crate::print_text;
use crate::{open_write, options, print_json, progress, stdin_bytes};
#[cfg(feature = "replicate")]
use ctxlog::time::iso8601_ms;

/// Where export lines go: a file, or stdout; and where the summary goes
/// (stdout when the lines went to a file, stderr otherwise).
pub(crate) struct Output {
    file: Option<(PathBuf, std::io::BufWriter<std::fs::File>)>,
    stdout: std::io::BufWriter<std::io::Stdout>,
}

impl Output {
    pub(crate) fn to(path: Option<&Path>) -> Result<Self, Failure> {
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
    pub(crate) fn finish(mut self, summary: &Value) -> Outcome {
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

pub(crate) fn export(
    store: &Store,
    tenant: &str,
    contexts: &[String],
    all_tenants: bool,
    out: &mut Output,
) -> Result<Value, Failure> {
    let chosen = match (all_tenants, contexts.is_empty()) {
        (true, true) => all_contexts(store, &store.tenants())?,
        (true, false) => {
            return Err(usage(
                "--context names a context of --tenant; leave out --all-tenants",
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

pub(crate) fn salvage(g: &Global, output: Option<&Path>) -> Outcome {
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

/// `ctxlog restore`: a store from a replica, or its restore points.
#[cfg(feature = "replicate")]
pub(crate) fn restore(url: &str, into: Option<&Path>, at: Option<u64>, list: bool) -> Outcome {
    use ctxlog::replicate::Replicate;
    let from = Replicate::to(url);
    let Some(dir) = into.filter(|_| !list) else {
        let mut lines = String::new();
        for point in ctxlog::replicate::restore_points(&from)? {
            lines.push_str(&format!(
                "{}\n",
                json!({"restorePoint": point.number, "time": iso8601_ms(point.time_ms)})
            ));
        }
        return print_text(&lines);
    };
    let report = ctxlog::replicate::restore(&from, dir, at)?;
    print_json(&json!({
        "dir": dir.display().to_string(),
        "restorePoint": report.point.number,
        "time": iso8601_ms(report.point.time_ms),
        "segments": report.segments,
        "bytes": report.bytes,
        "records": report.records,
    }))
}

pub(crate) fn import(g: &Global, file: Option<&Path>, resume: bool) -> Outcome {
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
