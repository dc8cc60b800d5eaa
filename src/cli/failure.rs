//! How the command line fails: the one line it prints on stderr, and the
//! exit status.

use std::path::Path;
use std::process::ExitCode;

use ctxlog::Error;

/// A failure of the command line: a usage error (exit 2), the library's
/// (exit 1), or stdout closed by its reader (exit 141, as a writer killed
/// by SIGPIPE, without a word).
pub(crate) enum Failure {
    /// What is wrong, and the command whose `--help` tells more.
    Usage {
        what: String,
        command: String,
    },
    Store(Error),
    /// A not-found error of the library, with the tenant it searched.
    NotFound {
        error: Error,
        tenant: String,
    },
    Closed,
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Store(e)
    }
}

pub(crate) type Outcome = Result<(), Failure>;

/// A usage error clap found.
pub(crate) fn clap_usage(e: &clap::Error) -> Failure {
    let (what, command) = clap_line(e);
    Failure::Usage { what, command }
}

/// A usage error of `ctxlog` as a whole.
pub(crate) fn usage(what: impl Into<String>) -> Failure {
    Failure::Usage {
        what: what.into(),
        command: "ctxlog".into(),
    }
}

impl Failure {
    /// Names the tenant in a not-found error, which the library words as
    /// "for this tenant": the tenant is the first thing to check.
    pub(crate) fn searched(self, tenant: &str) -> Failure {
        match self {
            Failure::Store(error @ (Error::ContextNotFound | Error::TaskNotFound)) => {
                Failure::NotFound {
                    error,
                    tenant: tenant.to_string(),
                }
            }
            other => other,
        }
    }
}

/// Prints the failure's line and gives the exit status.
pub(crate) fn exit(outcome: Outcome) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage { what, command }) => {
            eprintln!("error: Usage: {}; see {command} --help", one_line(&what));
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
        Err(Failure::NotFound { error, tenant }) => {
            let what = match error {
                Error::TaskNotFound => "task",
                _ => "context",
            };
            eprintln!(
                "error: {}: no such {what} for tenant {}; check the {what}'s id, and --tenant \
                 (or CTXLOG_TENANT)",
                error.kind_name(),
                one_line(&format!("{tenant:?}")),
            );
            ExitCode::from(1)
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
pub(crate) fn with_causes(e: &Error) -> String {
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
pub(crate) fn one_line(text: &str) -> String {
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

/// A clap error as one line: what is wrong (a list it gives on the lines
/// after a colon, joined to it) and the usage of the command it concerns,
/// without the blank lines and the pointer to --help it prints around
/// them; and the command whose help to read.
fn clap_line(e: &clap::Error) -> (String, String) {
    let rendered = e.render().to_string();
    let mut what = String::new();
    let mut usage = None;
    for line in rendered.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(u) = line.strip_prefix("Usage: ") {
            usage = Some(u.to_string());
        } else if !line.starts_with("For more") {
            let line = line.trim_start_matches("error: ");
            if !what.is_empty() {
                what.push_str(if what.ends_with(':') { " " } else { "; " });
            }
            what.push_str(line);
        }
    }
    // `ctxlog history [OPTIONS] <CONTEXT>`: the command is the words
    // before the first placeholder.
    let command = usage.as_deref().map_or_else(
        || "ctxlog".to_string(),
        |u| {
            let words: Vec<&str> = u
                .split_whitespace()
                .take_while(|w| !w.starts_with(['[', '<', '-']))
                .collect();
            words.join(" ")
        },
    );
    if let Some(u) = usage {
        what.push_str(&format!(" (usage: {u})"));
    }
    (what, command)
}

pub(crate) fn io_error(op: &'static str, path: impl AsRef<Path>, e: std::io::Error) -> Failure {
    Failure::Store(Error::Io {
        op,
        path: path.as_ref().to_path_buf(),
        source: e,
    })
}
