//! ctxlog: an embedded, log-structured storage engine for the conversation
//! history of agents that speak the A2A protocol.
//!
//! A [`Store`] is a directory of append-only segment files. Every context is
//! keyed by a versioned SHA-256 namespace of (tenant, contextId), so distinct
//! ids never collide and no tenant sees another's data. Inbound messages are
//! saved raw and durably before the agent processes them; what was stored
//! comes back byte for byte; an in-memory index makes reading a context's
//! last messages touch only those records.
//!
//! # An agent's turn
//!
//! ```
//! use ctxlog::a2a::{Artifact, Message, Part, Role, TaskState, TaskStatus};
//! use ctxlog::render::Budget;
//! use ctxlog::{Durability, ListTasksQuery, Options, Store};
//! # let dir = tempfile::tempdir()?;
//!
//! let store = Store::open(dir.path(), Options::default().durability(Durability::GroupCommit))?;
//!
//! // 1. Save the client's message, raw and durable, before any work on it.
//! let inbound = br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"Refund order 123"}]}"#;
//! let receipt = store.receive_message("acme", inbound)?;
//! assert!(!receipt.duplicate); // a resend would come back marked, with its task
//!
//! // 2. The context's earlier conversation for the prompt (never the message
//! //    being processed), in a frame that stored text cannot close or forge.
//! let history = store.render_history("acme", &receipt.context_id, Some(receipt.seq), Budget::default())?;
//! assert!(history.is_empty()); // the first message of its context
//!
//! // 3. The agent's work, stored as it happens.
//! store.update_status("acme", &receipt.status_update(TaskStatus::new(TaskState::Working)))?;
//! let report = Artifact::new("receipt", vec![Part::text("Refunded $42.00")]).with_name("Receipt");
//! store.add_artifact("acme", &receipt.artifact_update(report).last())?;
//! let reply = Message::new("a1", Role::Agent, &["Done: $42.00 refunded."]);
//! let done = TaskStatus::new(TaskState::Completed).with_message(reply);
//! store.update_status("acme", &receipt.status_update(done))?;
//!
//! // 4. What a client asks for later.
//! let task = store.get_task("acme", &receipt.task_id, None, true)?;
//! assert_eq!(task.status.state, TaskState::Completed);
//! let listed = store.list_tasks("acme", &ListTasksQuery::default())?;
//! assert_eq!(listed.tasks.len(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Raw bytes outside the task model go in with [`Store::append_message`]
//! and come back with [`Store::last_messages`].
//!
//! # Threads and async programs
//!
//! `Store` is `Send + Sync`: share one in an `Arc` between threads; work on
//! different contexts runs in parallel, and with
//! [`Durability::GroupCommit`] concurrent writers share each `fdatasync`.
//! Every call may block on the disk, so an async program calls it from a
//! blocking thread (`tokio::task::spawn_blocking`). To follow a task without
//! polling, [`Store::wait_for_events`] sleeps until its next event.
//!
//! # Modules
//!
//! [`a2a`] holds the A2A data model; [`render`] the history types and the
//! guard frame's parser; [`fs`] the file-system trait the store does all its
//! file calls through (with an in-memory, crash-simulating implementation for
//! tests); [`time`] ISO 8601 helpers. DESIGN.md in the repository has the
//! on-disk format, what a crash leaves behind, and the invariants.

#![deny(missing_docs)]
#![warn(unnameable_types)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod a2a;
#[doc(hidden)]
pub mod demo;
mod error;
pub mod fs;
#[doc(hidden)]
pub mod fuzzing;
mod import;
mod index;
mod log;
mod namespace;
mod options;
mod random;
pub mod render;
#[cfg(feature = "replicate")]
pub mod replicate;
mod store;
pub mod time;

pub use error::{Error, Result};
pub use import::{import_hermes, import_hermes_with, HermesImport, ImportReport, SkippedLine};
pub use log::layout::{Foreign, Lost};
pub use log::recovery::{OpenReport, Skipped, TornTail};
pub use log::verify::{Damage, VerifyReport};
pub use log::writer::Durable;
pub use namespace::{ContextKey, MAX_CONTEXT_ID_BYTES, MAX_TENANT_BYTES, NAMESPACE_VERSION};
pub use options::{
    Durability, Maintenance, Options, RecoveryMode, TurnPolicy, MAX_COMMIT_LINGER, MAX_RECORD_BYTES,
};
#[cfg(feature = "replicate")]
pub use replicate::{Replicate, ReplicationStatus};
pub use store::{
    Appended, CompactReport, ContextInfo, ContextPage, EventRecord, InlinePush, Item, ItemKind,
    ListTasksQuery, MessageBuf, MessageIds, PendingReceive, PendingWrite, PushConfig, Receipt,
    Stats, Store, StoredMessage, StoredMessageRef, TaskProgress, TaskRef, TurnGuard,
    DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, MAX_PUSH_CONFIG_ID,
};

/// The README's Rust examples, compiled and run as doc-tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The Rust example of docs/replication.md, compiled as a doc-test.
#[cfg(all(doctest, feature = "replicate-s3"))]
#[doc = include_str!("../docs/replication.md")]
pub struct ReplicationDocDoctests;

/// The Rust examples of docs/library.md, compiled and run as doc-tests.
#[cfg(doctest)]
#[doc = include_str!("../docs/library.md")]
pub struct LibraryDocDoctests;

/// What the crate's own tests, fuzz targets and benchmarks reach into: not
/// part of the API, and free to change in any release.
#[doc(hidden)]
pub mod internals {
    pub use crate::log::frame;
    pub use crate::log::record;
    pub use crate::log::segments::{list_segment_ids, segment_path};
    pub use crate::store::CompactStep;
}
