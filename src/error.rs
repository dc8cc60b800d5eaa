//! The one error type of the library.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in ctxlog.
///
/// Each message says what happened and what to do; the underlying cause, where
/// there is one, is available through [`std::error::Error::source`] and is not
/// repeated in the message.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A file operation failed.
    Io {
        /// What the store was doing (for example `"sync segment"`).
        op: &'static str,
        /// The file or directory it was doing it to.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// There is no store at the path, and the open was not to create one
    /// ([`Options::create`](crate::Options::create) is `false`, or the open
    /// is read-only).
    StoreNotFound {
        /// The directory.
        path: PathBuf,
    },
    /// A write to a store opened read-only
    /// ([`Store::open_read_only`](crate::Store::open_read_only)).
    ReadOnly,
    /// Another process (or another `Store` in this one) holds the store open.
    Locked {
        /// The lock file.
        path: PathBuf,
    },
    /// The directory holds a segment of a format version this build cannot read.
    UnsupportedFormat {
        /// The segment file.
        path: PathBuf,
        /// The version found in its header.
        found: u32,
        /// The version this build reads and writes.
        supported: u32,
    },
    /// Bytes on disk fail their checksum or framing before the torn tail.
    Corrupt {
        /// The id of the damaged segment.
        segment: u64,
        /// The byte offset of the damaged record within the segment.
        offset: u64,
        /// What is wrong there.
        reason: String,
    },
    /// Acknowledged records are missing: a file of the store (a later
    /// segment's header, the manifest or the checkpoint) says the log
    /// reached further than the segment now does. A torn tail after a
    /// crash is never this: only bytes never acknowledged are cut as one.
    MissingRecords {
        /// The segment.
        segment: u64,
        /// How long it was (at least) when the store last knew it.
        expected: u64,
        /// How long it is now (0: the file is missing).
        actual: u64,
        /// Which file knew, and what it said.
        reason: String,
    },
    /// A file in the store's directory belongs to another store (a segment
    /// or manifest whose store identity is not this store's).
    ForeignFile {
        /// The file.
        path: PathBuf,
        /// Why it is another store's.
        reason: String,
    },
    /// An earlier write or sync failed, so the page cache can no longer be
    /// trusted: the store refuses writes until it is reopened.
    Poisoned {
        /// What the failed write or sync met (`StorageFull` for a full
        /// disk), when it was an I/O error.
        cause: Option<std::io::ErrorKind>,
    },
    /// An argument is out of range.
    InvalidParams {
        /// The argument.
        field: &'static str,
        /// Why it is refused and what would be accepted.
        reason: String,
    },
    /// The contextId cannot be honoured (empty, too long, expired or deleted).
    ContextRejected {
        /// Why, and what the caller can do instead.
        reason: String,
    },
    /// No context of that id exists for this tenant.
    ContextNotFound,
    /// No task of that id exists for this tenant.
    TaskNotFound,
    /// The operation is not allowed on the task in its state (for example a
    /// message to a task in a terminal state).
    UnsupportedOperation {
        /// Why, and what to do instead.
        reason: String,
    },
    /// Cancel of a task that is already in a terminal state.
    TaskNotCancelable {
        /// The task's state.
        state: &'static str,
    },
    /// The context's single active turn is held (under `TurnPolicy::SingleActive`).
    ContextBusy {
        /// The task whose handler holds the turn.
        task_id: String,
        /// Since when (ms since the Unix epoch).
        since_ms: u64,
    },
    /// A messageId already used by this tenant, with different content.
    IdempotencyConflict {
        /// The messageId.
        message_id: String,
    },
    /// Replication or a restore could not use its object store, or found
    /// there what it must not use (another store's objects, a damaged or
    /// missing object).
    Replica {
        /// What was being done.
        op: &'static str,
        /// Why it failed, and what to do.
        reason: String,
    },
}

impl Error {
    /// The error's kind as a stable name, used by the command line.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Error::Io { .. } => "Io",
            Error::StoreNotFound { .. } => "StoreNotFound",
            Error::ReadOnly => "ReadOnly",
            Error::Locked { .. } => "Locked",
            Error::UnsupportedFormat { .. } => "UnsupportedFormat",
            Error::Corrupt { .. } => "Corrupt",
            Error::MissingRecords { .. } => "MissingRecords",
            Error::ForeignFile { .. } => "ForeignFile",
            Error::Poisoned { .. } => "Poisoned",
            Error::InvalidParams { .. } => "InvalidParams",
            Error::ContextRejected { .. } => "ContextRejected",
            Error::ContextNotFound => "ContextNotFound",
            Error::TaskNotFound => "TaskNotFound",
            Error::UnsupportedOperation { .. } => "UnsupportedOperation",
            Error::TaskNotCancelable { .. } => "TaskNotCancelable",
            Error::IdempotencyConflict { .. } => "IdempotencyConflict",
            Error::ContextBusy { .. } => "ContextBusy",
            Error::Replica { .. } => "Replica",
        }
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    #[cfg_attr(not(feature = "replicate"), allow(dead_code))]
    pub(crate) fn replica(op: &'static str, reason: impl Into<String>) -> Self {
        Error::Replica {
            op,
            reason: reason.into(),
        }
    }

    pub(crate) fn corrupt(segment: u64, offset: u64, reason: impl Into<String>) -> Self {
        Error::Corrupt {
            segment,
            offset,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { op, path, .. } => write!(
                f,
                "could not {op} at {}; check the disk and permissions, then retry",
                path.display()
            ),
            Error::StoreNotFound { path } => write!(
                f,
                "there is no store at {}; check the path (a store is created only by an open \
                 that may create one)",
                path.display()
            ),
            Error::ReadOnly => write!(
                f,
                "the store was opened read-only; open it with Store::open to write"
            ),
            Error::Locked { path } => write!(
                f,
                "the store is open elsewhere (lock held on {}); close the other user first",
                path.display()
            ),
            Error::UnsupportedFormat {
                path,
                found,
                supported,
            } => write!(
                f,
                "{} has format version {found} but this build reads version {supported}; \
                 open it with a matching ctxlog build",
                path.display()
            ),
            Error::Corrupt {
                segment,
                offset,
                reason,
            } => write!(
                f,
                "segment {segment} is damaged at offset {offset}: {reason}; restore it from a \
                 backup, or open with RecoveryMode::SkipCorrupt to skip damaged records"
            ),
            Error::MissingRecords {
                segment,
                expected,
                actual,
                reason,
            } => {
                match actual {
                    0 => write!(f, "segment {segment} is missing")?,
                    n => write!(f, "segment {segment} ends at byte {n}")?,
                }
                write!(
                    f,
                    " where {reason} (at least {expected} bytes): acknowledged records are \
                     missing; restore the segment from a backup, or open with \
                     RecoveryMode::SkipCorrupt to accept the loss"
                )
            }
            Error::ForeignFile { path, reason } => write!(
                f,
                "{} belongs to another store ({reason}); move it out of the store directory, \
                 or open with RecoveryMode::SkipCorrupt to leave it unread",
                path.display()
            ),
            Error::Poisoned { cause } => {
                let why = match cause {
                    Some(std::io::ErrorKind::StorageFull) => " (the disk is full)".to_string(),
                    Some(kind) => format!(" ({kind})"),
                    None => String::new(),
                };
                write!(
                    f,
                    "an earlier write or sync to disk failed{why}, so this store refuses \
                     writes; reopen it"
                )
            }
            Error::InvalidParams { field, reason } => write!(f, "invalid {field}: {reason}"),
            Error::ContextRejected { reason } => write!(f, "contextId rejected: {reason}"),
            Error::ContextNotFound => write!(
                f,
                "no such context for this tenant; check the contextId and tenant"
            ),
            Error::TaskNotFound => write!(
                f,
                "no such task for this tenant; check the taskId and tenant"
            ),
            Error::UnsupportedOperation { reason } => write!(f, "{reason}"),
            Error::TaskNotCancelable { state } => write!(
                f,
                "the task is {state}, a terminal state, and cannot be canceled"
            ),
            Error::ContextBusy { task_id, since_ms } => write!(
                f,
                "the context's turn is held by task {task_id} since {}; retry once it is done",
                crate::time::iso8601_ms(*since_ms)
            ),
            Error::IdempotencyConflict { message_id } => write!(
                f,
                "messageId {message_id:?} was already received with different content; \
                 resend the original message or use a new messageId"
            ),
            Error::Replica { op, reason } => write!(f, "could not {op}: {reason}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
