//! The seam replication plugs into (DESIGN.md §1, "Layers"): what runs
//! beside an open store and is told of its writes. The store names only
//! these traits and [`ReplicationStatus`]; `replicate/` sits above the
//! store and implements them (`replicate/ship.rs`), and
//! [`Options::replicate`](crate::Options::replicate) carries the
//! configuration that attaches it.

use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;

use super::Shared;

/// What a store's writes ask of what is attached to it, on every write.
pub(crate) trait WriteGate: Send + Sync {
    /// Whether another writer has claimed the store's replica: the store
    /// then refuses writes rather than diverge.
    fn fenced(&self) -> bool;

    /// Whether a write waits, after its sync, for the replica to cover it
    /// (a deferred write, which must not block, is then not taken).
    fn synchronous(&self) -> bool;

    /// After a write that left the log synced up to `end`: waits for the
    /// replica, checks the lease, or asks for a round, as configured.
    fn after_write(&self, end: u64) -> Result<()>;
}

/// The thread attached to an open store, owned by it and stopped at its
/// close.
pub(crate) trait Attachment: Send + Sync {
    /// How far the replica trails a store whose synced log position is
    /// `synced`.
    fn status(&self, synced: u64) -> ReplicationStatus;

    /// Runs a round now and waits up to `timeout` for it to end.
    fn ship_now(&self, timeout: Duration) -> Result<()>;

    /// Ships what is left (within the close timeout) and stops the thread.
    fn stop(self: Box<Self>);
}

/// A configuration that attaches a thread to a store as it opens:
/// implemented by [`Replicate`](crate::Replicate) in `replicate/`.
pub(crate) trait Attach {
    /// Starts the thread for `store`; returns it and what each write asks
    /// of it.
    fn attach(&self, store: &Arc<Shared>) -> Result<(Box<dyn Attachment>, Box<dyn WriteGate>)>;
}

/// How far the replica trails the store ([`Store::replication`](crate::Store::replication)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplicationStatus {
    /// Where the replica is (see [`Replicate::describe`](crate::Replicate::describe)).
    pub target: String,
    /// Bytes synced to disk that no restore point covers yet (those
    /// synced since the newest point's view was taken).
    pub lag_bytes: u64,
    /// If there are any, how long ago the newest point's view was taken,
    /// in ms: the oldest of those bytes is younger (0: none wait). The
    /// replica holds the store as it was this long ago.
    pub lag_ms: u64,
    /// The newest restore point published (0: none yet).
    pub restore_point: u64,
    /// When it was published, in ms since the Unix epoch.
    pub restore_point_ms: u64,
    /// Bytes uploaded since the store was opened.
    pub shipped_bytes: u64,
    /// Rounds that succeeded since the store was opened: once this count
    /// has grown by two after a write was acknowledged, a round that began
    /// after it ended, so a restore point covers it.
    pub rounds: u64,
    /// Rounds that failed since the store was opened (each is retried,
    /// after a backoff).
    pub failures: u64,
    /// Why the last round failed, if it did (cleared by one that succeeds).
    pub last_error: Option<String>,
    /// Replication has stopped for good (another writer claimed the
    /// replica, or the replica is gone): `last_error` says why, and the
    /// store must be restored or pointed elsewhere to replicate again.
    pub stopped: bool,
    /// Whether a write is acknowledged now: not while fenced or stopped
    /// (under a lease), not while the lease has lapsed (asynchronous), not
    /// while rounds fail (synchronous: its writes wait for one that
    /// succeeds). `/healthz` answers 503 while it is false.
    pub acknowledging: bool,
}
