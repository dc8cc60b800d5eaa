//! ctxlog: an embedded, log-structured storage engine for A2A agent
//! conversation history.
//!
//! A [`Store`] is a directory of append-only segment files. Every context is
//! keyed by a versioned SHA-256 namespace of (tenant, contextId) so distinct
//! ids never collide and no tenant sees another's data; inbound messages are
//! saved raw and durably before the agent processes them; an in-memory index
//! makes reading the last N messages touch only those records.
//!
//! ```no_run
//! use ctxlog::{Options, Store};
//! let store = Store::open("ctxlog-data", Options::default())?;
//! store.append_message("acme", "case-42", br#"{"messageId":"m1"}"#)?;
//! let last = store.last_messages("acme", "case-42", 20)?;
//! assert_eq!(last[0].raw, br#"{"messageId":"m1"}"#);
//! # Ok::<(), ctxlog::Error>(())
//! ```
//!
//! Layers, top down: [`store`] (the public API) → [`index`] (context key to
//! records) → [`log`] (segments, frames, the writer, recovery) → [`fs`] (every
//! file call, behind a trait with a real, an in-memory and a fault-injecting
//! implementation) → `mmap` (the one module with `unsafe`).

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
mod store;
pub mod time;

pub use error::{Error, Result};
pub use import::{import_hermes, ImportReport};
pub use log::layout::{Foreign, Lost};
pub use log::recovery::{OpenReport, Skipped, TornTail};
pub use log::verify::{Damage, VerifyReport};
pub use namespace::{ContextKey, MAX_CONTEXT_ID_BYTES, MAX_TENANT_BYTES, NAMESPACE_VERSION};
pub use options::{Durability, Options, RecoveryMode, TurnPolicy};
pub use store::{
    Appended, CompactReport, ContextInfo, ContextPage, EventRecord, ListTasksQuery, Receipt, Stats,
    Store, StoredMessage, TaskRef, TurnGuard, DEFAULT_PAGE_SIZE,
};

/// What the crate's own tests, fuzz targets and benchmarks reach into: not
/// part of the API, and free to change in any release.
#[doc(hidden)]
pub mod internals {
    pub use crate::log::frame;
    pub use crate::log::record;
    pub use crate::log::segments::{list_segment_ids, segment_path};
    pub use crate::store::CompactStep;
}

/// The largest record payload the format allows (16 MiB).
pub const MAX_RECORD_BYTES: u32 = 16 << 20;
