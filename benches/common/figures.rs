//! A bench's headline figures, kept for `scripts/headline.py`: each
//! [`record`] appends one JSON line to `target/bench-results/figures.jsonl`
//! (or to the file `CTXLOG_BENCH_FIGURES` names), which
//! `python3 scripts/headline.py update` folds into
//! `docs/benchmarks/figures.json` and BENCHMARKS.md's headline tables.
//! Included by path by the benches that feed the headline (the engine's,
//! the server's, the comparison harness).

use std::io::Write;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

/// The file figures go to: `CTXLOG_BENCH_FIGURES`, else the workspace's
/// `target/bench-results/figures.jsonl` (`CARGO_TARGET_DIR` if set).
fn figures_file() -> PathBuf {
    if let Some(path) = std::env::var_os("CTXLOG_BENCH_FIGURES") {
        return PathBuf::from(path);
    }
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => {
            // The workspace root: the first folder up with a Cargo.lock.
            let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
            while !dir.join("Cargo.lock").exists() && dir.pop() {}
            dir.join("target")
        }
    };
    target.join("bench-results").join("figures.jsonl")
}

/// A JSON string of `text` (quotes, backslashes and control characters
/// escaped).
fn json_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Records `figure` of `bench` (`value` in `unit`); `quick` says the run
/// was a short one, which `headline.py update` leaves out unless asked.
/// A figure that cannot be written is said on stderr: the bench's printed
/// output stands.
pub fn record(bench: &str, figure: &str, value: f64, unit: &str, quick: bool) {
    if !value.is_finite() {
        return;
    }
    // When it was measured, in seconds since the Unix epoch.
    let at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let line = format!(
        "{{\"bench\":{},\"figure\":{},\"value\":{value},\"unit\":{},\"at\":{at},\"quick\":{quick}}}\n",
        json_string(bench),
        json_string(figure),
        json_string(unit),
    );
    let path = figures_file();
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
        })
        .and_then(|mut file| file.write_all(line.as_bytes()));
    if let Err(e) = written {
        eprintln!("(figure {figure} not recorded in {}: {e})", path.display());
    }
}
