//! Importing the conversation journals of the Hermes agent's A2A plugin.
//!
//! A journal directory holds one `<name>.jsonl` file per context, each line a
//! JSON object `{"ts", "role", "text", "task_id"}`. Their original contextIds
//! cannot be proven from the sanitised file names, so the caller must name the
//! tenant explicitly; each file becomes a context whose id is the file's stem,
//! and each message is marked as imported with its source file.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::{Error, Result};
use crate::store::Store;

/// One journal line.
#[derive(Deserialize)]
struct Line {
    ts: Option<Value>,
    role: Option<String>,
    text: String,
    task_id: Option<String>,
}

/// What an import did, per file and in all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ImportReport {
    /// Journal files found.
    pub files: usize,
    /// Contexts created.
    pub contexts: usize,
    /// Messages imported.
    pub messages: u64,
    /// Lines skipped: torn, not JSON, or not a journal entry.
    pub skipped_lines: u64,
    /// Files not imported, with why (for example: the context already exists).
    pub skipped_files: Vec<(PathBuf, String)>,
}

/// Imports every `*.jsonl` journal in `dir` into `tenant`'s namespace,
/// reporting progress as (files done, files in all).
pub fn import_hermes(
    store: &Store,
    tenant: &str,
    dir: &Path,
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
        ..ImportReport::default()
    };
    for (i, file) in files.iter().enumerate() {
        progress(i, files.len());
        import_file(store, tenant, file, &mut report)?;
    }
    progress(files.len(), files.len());
    Ok(report)
}

fn import_file(store: &Store, tenant: &str, file: &Path, report: &mut ImportReport) -> Result<()> {
    let Some(context) = file
        .file_stem()
        .and_then(|s| s.to_str())
        .map(str::to_string)
    else {
        report
            .skipped_files
            .push((file.to_path_buf(), "the file name is not UTF-8".into()));
        return Ok(());
    };
    match store.context_info(tenant, &context) {
        Ok(_) => {
            report.skipped_files.push((
                file.to_path_buf(),
                format!("context {context:?} already exists"),
            ));
            return Ok(());
        }
        Err(Error::ContextNotFound) => {}
        Err(e) => return Err(e),
    }
    let bytes = std::fs::read(file).map_err(|e| Error::io("read a journal", file, e))?;
    let source = file
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_string();
    let mut imported = 0u64;
    // Split on newlines only: a line torn by a crash, or cut inside a UTF-8
    // character, fails on its own and never takes its neighbours with it.
    for (n, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let Ok(line) = serde_json::from_slice::<Line>(raw) else {
            report.skipped_lines += 1;
            continue;
        };
        let role = match line.role.as_deref() {
            Some("user") => "ROLE_USER",
            _ => "ROLE_AGENT",
        };
        let mut metadata =
            json!({ "importedFrom": { "format": "hermes-jsonl", "file": source, "line": n + 1 } });
        if let Some(ts) = line.ts {
            metadata["ts"] = ts;
        }
        if let Some(task) = line.task_id {
            metadata["hermesTaskId"] = json!(task);
        }
        let message = json!({
            "messageId": format!("hermes-{context}-{}", n + 1),
            "contextId": context,
            "role": role,
            "parts": [{ "text": line.text }],
            "metadata": metadata,
        });
        let body = serde_json::to_vec(&message).map_err(|e| Error::InvalidParams {
            field: "journal line",
            reason: e.to_string(),
        })?;
        match store.append_message(tenant, &context, &body) {
            Ok(_) => imported += 1,
            // The stem is not an id the store can honour: skip the file.
            Err(Error::ContextRejected { reason }) if imported == 0 => {
                report.skipped_files.push((file.to_path_buf(), reason));
                return Ok(());
            }
            // One line too large for a record: skip that line.
            Err(Error::InvalidParams { .. }) => report.skipped_lines += 1,
            Err(e) => return Err(e),
        }
    }
    if imported > 0 {
        report.contexts += 1;
        report.messages += imported;
    } else {
        report
            .skipped_files
            .push((file.to_path_buf(), "no line could be read".into()));
    }
    Ok(())
}
