//! Importing the conversation journals of the Hermes agent's A2A plugin.
//!
//! A journal directory holds one `<name>.jsonl` file per context, each line a
//! JSON object `{"ts", "role", "text", "task_id"}` (`content` is read where
//! `text` is missing). Their original contextIds cannot be proven from the
//! sanitised file names, so the caller must name the tenant explicitly; each
//! file becomes a context whose id is the file's stem, and each message is
//! marked as imported with its source file and line, which is also how an
//! interrupted import finds where to resume.

use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use crate::error::{Error, Result};
use crate::store::portable::{Item, ItemKind};
use crate::store::Store;

/// The `format` an imported message's `metadata.importedFrom` names.
const FORMAT: &str = "hermes-jsonl";

/// How to import journals; the default writes every good line and skips
/// (and reports) the others.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HermesImport {
    /// Refuse the whole import, writing nothing, if any line of any journal
    /// cannot be imported; the error names the first such line.
    pub strict: bool,
    /// Read the journals and the store, write nothing, and report what an
    /// import would do.
    pub dry_run: bool,
}

impl HermesImport {
    /// Sets [`strict`](Self::strict).
    pub fn strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }

    /// Sets [`dry_run`](Self::dry_run).
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }
}

/// A journal line that was not imported, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct SkippedLine {
    /// The journal file.
    #[serde(serialize_with = "crate::log::layout::path_text")]
    pub file: PathBuf,
    /// The line's number in it, from 1.
    pub line: u64,
    /// Why it was skipped.
    pub reason: String,
}

/// What an import did (or, for a dry run, would do), per file and in all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ImportReport {
    /// Journal files found.
    pub files: usize,
    /// Contexts created.
    pub contexts: usize,
    /// Messages imported.
    pub messages: u64,
    /// Lines skipped (as many as [`skipped`](Self::skipped) lists).
    pub skipped_lines: u64,
    /// Each line skipped, with its file, number and reason: torn, not JSON,
    /// without a role or a text, too large for a record.
    pub skipped: Vec<SkippedLine>,
    /// Files whose context an earlier import of the same file had started:
    /// their lines after the last one imported then were imported now.
    pub resumed_files: usize,
    /// Lines of resumed files that an earlier import had already stored.
    pub already_imported: u64,
    /// Files not imported, with why (for example: a context of that name
    /// exists that is not an import of this file).
    pub skipped_files: Vec<(PathBuf, String)>,
    /// Whether this was a dry run (nothing was written).
    pub dry_run: bool,
}

/// Imports every `*.jsonl` journal in `dir` into `tenant`'s namespace with
/// the default [`HermesImport`], reporting progress as (journal bytes read,
/// journal bytes in all). See [`import_hermes_with`].
pub fn import_hermes(
    store: &Store,
    tenant: &str,
    dir: &Path,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<ImportReport> {
    import_hermes_with(store, tenant, dir, HermesImport::default(), progress)
}

/// Imports every `*.jsonl` journal in `dir` into `tenant`'s namespace,
/// reporting progress as (journal bytes read, journal bytes in all).
///
/// Each file becomes the context named by its stem, each good line one
/// message appended to it (outside the task model, as
/// [`Store::append_message`] saves), with `metadata.importedFrom` naming
/// the file and line. Roles: `user` (or `human`) is `ROLE_USER`, `agent` (or
/// `assistant`) is `ROLE_AGENT`; any other (`system`, `tool`) is
/// `ROLE_UNSPECIFIED` with the journal's role in `metadata.hermesRole` and,
/// when it is a short lowercase word, in `metadata.speaker`, which the
/// rendering labels the turn with. A line's `ts` (seconds or milliseconds
/// since the epoch, or an ISO 8601 UTC time) is its stored timestamp, so
/// retention counts from when it was said; a `ts` before the context's
/// latest (a journal whose clock went backwards) is stored as that latest,
/// since a context's timestamps never go backwards, and a missing or
/// unreadable one as the import's time; the journal's own `ts` is kept in
/// `metadata.ts` either way.
///
/// A file whose context exists is resumed when the context is an import of
/// that same file (its last message says so): the lines after the last one
/// imported are appended, so an interrupted import, or a journal that grew
/// since, is finished by running the import again. Any other existing
/// context is left alone and its file reported as skipped.
pub fn import_hermes_with(
    store: &Store,
    tenant: &str,
    dir: &Path,
    how: HermesImport,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<ImportReport> {
    let mut files = Vec::new();
    let mut links = Vec::new();
    for entry in
        std::fs::read_dir(dir).map_err(|e| Error::io("list the journal directory", dir, e))?
    {
        let entry = entry.map_err(|e| Error::io("list the journal directory", dir, e))?;
        let path = entry.path();
        if path.extension().is_none_or(|x| x != "jsonl") {
            continue;
        }
        // The entry's own type, not its target's: a link is never followed
        // out of the directory.
        match entry.file_type() {
            Ok(t) if t.is_file() => files.push(path),
            Ok(_) => links.push((
                path,
                "not a regular file (a link or a directory): only regular files in the \
                 journal directory are read"
                    .to_string(),
            )),
            Err(e) => return Err(Error::io("look at a journal", &path, e)),
        }
    }
    files.sort();
    links.sort();
    let mut report = ImportReport {
        files: files.len(),
        skipped_files: links,
        dry_run: how.dry_run,
        ..ImportReport::default()
    };
    let mut journals = Vec::with_capacity(files.len());
    for file in &files {
        let bytes = std::fs::read(file).map_err(|e| Error::io("read a journal", file, e))?;
        journals.push((file, bytes));
    }
    // A strict import refuses before its first write.
    if how.strict {
        for (file, bytes) in &journals {
            if let Some((line, reason)) = bad_lines(bytes).next() {
                return Err(Error::InvalidParams {
                    field: "journal line",
                    reason: format!(
                        "{}, line {line}: {reason} (nothing was imported)",
                        file.display()
                    ),
                });
            }
        }
    }
    let total: usize = journals.iter().map(|(_, b)| b.len()).sum();
    let mut done = 0;
    for (file, bytes) in &journals {
        progress(done, total);
        import_file(store, tenant, file, bytes, how, &mut report)?;
        done += bytes.len();
    }
    progress(total, total);
    report.skipped_lines = report.skipped.len() as u64;
    Ok(report)
}

/// The journal's lines, numbered from 1, without blank ones. Split on
/// newlines only: a line torn by a crash, or cut inside a UTF-8 character,
/// fails on its own and never takes its neighbours with it.
fn lines(bytes: &[u8]) -> impl Iterator<Item = (u64, &[u8])> {
    bytes
        .split(|&b| b == b'\n')
        .enumerate()
        .map(|(n, raw)| (n as u64 + 1, raw))
        .filter(|(_, raw)| !raw.iter().all(u8::is_ascii_whitespace))
}

/// Every line of a journal that cannot be imported, with why.
fn bad_lines(bytes: &[u8]) -> impl Iterator<Item = (u64, String)> + '_ {
    lines(bytes).filter_map(|(n, raw)| read_line(raw).err().map(|why| (n, why)))
}

/// One journal line, read.
struct Line {
    role: String,
    text: String,
    ts: Option<Value>,
    task_id: Option<Value>,
}

fn read_line(raw: &[u8]) -> std::result::Result<Line, String> {
    let text = std::str::from_utf8(raw)
        .map_err(|_| "not UTF-8 (a line cut inside a character?)".to_string())?;
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON (torn?): {e}"))?;
    let Value::Object(mut object) = value else {
        return Err("not a JSON object".into());
    };
    let role = match object.remove("role") {
        Some(Value::String(role)) if !role.is_empty() => role,
        Some(_) => return Err("\"role\" is not a non-empty string".into()),
        None => return Err("no \"role\"".into()),
    };
    let text = match (object.remove("text"), object.remove("content")) {
        (Some(Value::String(t)), _) => t,
        (None, Some(content)) => content_text(&content)
            .ok_or("\"content\" is neither a string nor a list of text parts")?,
        (Some(_), _) => return Err("\"text\" is not a string".into()),
        (None, None) => return Err("neither \"text\" nor \"content\"".into()),
    };
    Ok(Line {
        role,
        text,
        ts: object.remove("ts"),
        task_id: object.remove("task_id"),
    })
}

/// A `content` as text: a string, or a list of parts whose `text` strings
/// are joined with newlines.
fn content_text(content: &Value) -> Option<String> {
    match content {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let texts: Option<Vec<&str>> = parts
                .iter()
                .map(|p| p.get("text").and_then(Value::as_str))
                .collect();
            texts.map(|t| t.join("\n"))
        }
        _ => None,
    }
}

/// A journal `ts` as ms since the epoch: a number is seconds below 10^11
/// (until the year 5138) and milliseconds from there; a string is an ISO
/// 8601 UTC time or such a number.
fn ts_ms(ts: &Value) -> Option<u64> {
    let seconds_or_ms = |n: f64| {
        (n.is_finite() && n >= 0.0).then(|| {
            let ms = if n < 1e11 { n * 1000.0 } else { n };
            // Saturating: a number past u64 is the far future.
            ms as u64
        })
    };
    match ts {
        Value::Number(n) => n.as_f64().and_then(seconds_or_ms),
        Value::String(s) => crate::time::parse_iso8601_ms(s)
            .or_else(|| s.parse::<f64>().ok().and_then(seconds_or_ms)),
        _ => None,
    }
}

/// The line of the journal `source` that the context's last message was
/// imported from, if the context is an import of that file.
fn imported_up_to(store: &Store, tenant: &str, context: &str, source: &str) -> Result<Option<u64>> {
    let last = store.last_messages(tenant, context, 1)?;
    let Some(message) = last.first() else {
        return Ok(None);
    };
    let from = serde_json::from_slice::<Value>(&message.raw)
        .ok()
        .and_then(|m| m.get("metadata")?.get("importedFrom").cloned());
    Ok(from.and_then(|f| {
        (f.get("format")? == FORMAT && f.get("file")? == source)
            .then(|| f.get("line")?.as_u64())
            .flatten()
    }))
}

fn import_file(
    store: &Store,
    tenant: &str,
    file: &Path,
    bytes: &[u8],
    how: HermesImport,
    report: &mut ImportReport,
) -> Result<()> {
    let (Some(context), Some(source)) = (
        file.file_stem().and_then(|s| s.to_str()),
        file.file_name().and_then(|s| s.to_str()),
    ) else {
        report
            .skipped_files
            .push((file.to_path_buf(), "the file name is not UTF-8".into()));
        return Ok(());
    };
    let after = match store.context_info(tenant, context) {
        Ok(_) => match imported_up_to(store, tenant, context, source)? {
            Some(line) => {
                report.resumed_files += 1;
                line
            }
            None => {
                report.skipped_files.push((
                    file.to_path_buf(),
                    format!("context {context:?} exists and is not an import of this file"),
                ));
                return Ok(());
            }
        },
        Err(Error::ContextNotFound) => 0,
        Err(e) => return Err(e),
    };
    let mut imported = 0u64;
    for (n, raw) in lines(bytes) {
        if n <= after {
            report.already_imported += 1;
            continue;
        }
        let skip = |report: &mut ImportReport, reason: String| {
            report.skipped.push(SkippedLine {
                file: file.to_path_buf(),
                line: n,
                reason,
            })
        };
        let line = match read_line(raw) {
            Ok(line) => line,
            Err(why) => {
                skip(report, why);
                continue;
            }
        };
        let message = message(context, source, n, &line);
        if how.dry_run {
            imported += 1;
            continue;
        }
        let item = Item {
            tenant: tenant.to_string(),
            context_id: context.to_string(),
            seq: 0,
            timestamp_ms: line
                .ts
                .as_ref()
                .and_then(ts_ms)
                .unwrap_or_else(crate::store::now_ms),
            kind: ItemKind::Appended { raw: message },
        };
        match store.import_item(&item) {
            Ok(()) => imported += 1,
            // The stem is not an id the store can honour: skip the file.
            Err(Error::ContextRejected { reason }) if imported == 0 && after == 0 => {
                report.skipped_files.push((file.to_path_buf(), reason));
                return Ok(());
            }
            // One line too large for a record: skip that line.
            Err(Error::InvalidParams { reason, .. }) => skip(report, reason),
            Err(e) => return Err(e),
        }
    }
    if imported > 0 && after == 0 {
        report.contexts += 1;
    }
    report.messages += imported;
    if imported == 0 && after == 0 {
        report.skipped_files.push((
            file.to_path_buf(),
            "no line could be imported (each is listed with why)".into(),
        ));
    }
    Ok(())
}

/// The A2A message a journal line becomes.
fn message(context: &str, source: &str, n: u64, line: &Line) -> Vec<u8> {
    let role = match line.role.as_str() {
        "user" | "human" => "ROLE_USER",
        "agent" | "assistant" => "ROLE_AGENT",
        _ => "ROLE_UNSPECIFIED",
    };
    let mut metadata = Map::new();
    metadata.insert(
        "importedFrom".into(),
        json!({ "format": FORMAT, "file": source, "line": n }),
    );
    if role == "ROLE_UNSPECIFIED" {
        metadata.insert("hermesRole".into(), json!(line.role));
        if crate::render::is_speaker(&line.role) {
            metadata.insert("speaker".into(), json!(line.role));
        }
    }
    if let Some(ts) = &line.ts {
        metadata.insert("ts".into(), ts.clone());
    }
    if let Some(task) = &line.task_id {
        metadata.insert("hermesTaskId".into(), task.clone());
    }
    let message = json!({
        "messageId": format!("hermes-{context}-{n}"),
        "contextId": context,
        "role": role,
        "parts": [{ "text": line.text }],
        "metadata": metadata,
    });
    // Serialising a Value built here cannot fail (string keys only).
    serde_json::to_vec(&message).unwrap_or_default()
}
