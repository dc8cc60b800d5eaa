//! The public store and its write path: append raw messages, publish them
//! in the index, delete and expire contexts. Opening is in `open.rs`,
//! history reads in `history.rs`.

use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::fs::{Fs, OsFs};

use crate::index::{ContextMeta, ContextSlot, ContextState, Gone, Index, Life, MAX_SEQ};
use crate::log::manifest::Manifest;
use crate::log::recovery::OpenReport;
use crate::log::segments::{Reading, RecordLoc, Segments};
use crate::log::verify::{verify_dir, VerifyReport};
use crate::log::writer::LogWriter;

mod batch;
pub(crate) mod checkpoint;
mod compact;
mod deferred;
mod hide;
mod history;
mod maintain;
mod messages;
mod open;
use open::{holds_store, lock_dir, moved_under, READ_ONLY_TRIES};
#[cfg(feature = "replicate")]
mod attach;
pub(crate) mod portable;
mod push;
mod receive;
#[cfg(feature = "replicate")]
pub(crate) mod replica;
mod task_reads;
mod tasks;
mod turns;
mod wait;
use crate::a2a::TaskState;
use crate::index::context::Kind;
use crate::log::record::{self, ContextName, Decoded, RecordBody, RecordKind, View, ViewKind};
use crate::namespace::{context_message_key, message_key, ContextKey};
use crate::options::{Options, MAX_RECORD_BYTES};
#[cfg(feature = "replicate")]
pub use attach::ReplicationStatus;
#[cfg(feature = "replicate")]
pub(crate) use attach::{Attach, Attachment, WriteGate};
pub use compact::{CompactReport, CompactStep};
pub use deferred::{PendingReceive, PendingWrite};
pub use messages::{MessageBuf, StoredMessageRef};
pub use portable::{Item, ItemKind};
pub use push::{InlinePush, PushConfig, MAX_PUSH_CONFIG_ID};
pub use tasks::{EventRecord, ListTasksQuery, MessageIds, Receipt, TaskProgress, TaskRef};
pub use turns::TurnGuard;

/// Name of the lock file that marks a store as open.
pub const LOCK_FILE: &str = "LOCK";

/// Default and largest page sizes of listings.
pub const DEFAULT_PAGE_SIZE: usize = 50;
/// The largest page size a listing accepts.
pub const MAX_PAGE_SIZE: usize = 100;

/// An embedded conversation-history store: one directory on disk.
///
/// `Store` is `Send + Sync`; share it by reference or in an `Arc`. Unless
/// [`Options::maintenance`](crate::Options::maintenance) says otherwise, an
/// open store keeps its own log's layout on a background thread (see
/// [`Store::maintain`]), stopped when the store is closed or dropped.
pub struct Store {
    shared: Arc<Shared>,
    /// The background maintenance thread, if one runs.
    maintainer: Option<maintain::Maintainer>,
    /// The replication thread, if the store replicates.
    #[cfg(feature = "replicate")]
    replicator: Option<Box<dyn attach::Attachment>>,
    /// `close` ran: nothing left for `drop` to do.
    closed: bool,
}

/// What a [`Store`] and its maintenance thread share: everything but the
/// thread itself. A `Store` dereferences to it, so the store's methods read
/// its fields as their own.
#[doc(hidden)]
// Public only as `Store`'s `Deref` target, which must be; nothing outside
// the crate can name it or reach a field or method of it.
#[allow(unnameable_types)]
pub struct Shared {
    options: Options,
    segments: Arc<Segments>,
    writer: LogWriter,
    index: Index,
    report: OpenReport,
    /// Records served, for the checkpoint.
    records: std::sync::atomic::AtomicU64,
    /// The manifest in force; held while a merge switches segments (and
    /// by a checkpoint, which must describe one manifest).
    manifest: parking_lot::Mutex<Manifest>,
    /// Held for a whole compaction or merge, so they run one at a time.
    merging: parking_lot::Mutex<()>,
    /// Bytes appended since the last checkpoint.
    since_checkpoint: std::sync::atomic::AtomicU64,
    /// The last checkpoint's size.
    checkpoint_size: std::sync::atomic::AtomicU64,
    /// A checkpoint is being written (one at a time).
    checkpointing: std::sync::atomic::AtomicBool,
    /// A merge switched the manifest and has not yet pointed the index at
    /// the new segments (or failed to): no checkpoint may be written.
    no_checkpoint: std::sync::atomic::AtomicBool,
    /// Callers of [`wait_for_events`](Store::wait_for_events) asleep.
    waits: wait::EventWaits,
    /// What maintenance has done, for [`Store::stats`].
    maintained: maintain::Counters,
    /// With replication, what each write asks of it: whether another
    /// writer has claimed the replica (writes are then refused), and, after
    /// the write, to wait for a restore point (synchronous) or ask for a
    /// round once a batch of bytes waits.
    #[cfg(feature = "replicate")]
    replica: std::sync::OnceLock<Box<dyn attach::WriteGate>>,
    _lock: Box<dyn Send + Sync>,
}

impl std::ops::Deref for Store {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.shared
    }
}

impl std::fmt::Debug for Store {
    /// The directory, the durability, whether writes are refused, and the
    /// segments it reads (never what it holds).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dir", &self.writer.dir())
            .field("durability", &self.options.durability)
            .field("poisoned", &self.is_poisoned())
            .field("segments", &self.segments.ids().len())
            .finish_non_exhaustive()
    }
}

/// What an append returns once the message is as durable as promised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    /// The context's key.
    pub key: ContextKey,
    /// The record's position in the context's order.
    pub seq: u64,
    /// When it was appended (ms since the Unix epoch).
    pub timestamp_ms: u64,
    /// Whether this append opened the context.
    pub opened_context: bool,
}

/// A stored message, exactly as it was received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMessage {
    /// Position in the context's order.
    pub seq: u64,
    /// When it was appended (ms since the Unix epoch).
    pub timestamp_ms: u64,
    /// The bytes as received.
    pub raw: Vec<u8>,
}

/// What a listing shows of a context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextInfo {
    /// The original contextId, byte for byte.
    pub context_id: String,
    /// The context's key.
    pub key: ContextKey,
    /// When the context was opened (ms since the Unix epoch).
    pub first_activity_ms: u64,
    /// When its latest record was appended.
    pub last_activity_ms: u64,
    /// How many messages its history holds.
    pub messages: u64,
    /// How many tasks it holds.
    pub tasks: u64,
}

/// What [`Store::stats`] counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    /// Live contexts.
    pub contexts: u64,
    /// Their tasks.
    pub tasks: u64,
    /// Their history messages.
    pub messages: u64,
    /// Readable segments.
    pub segments: usize,
    /// Bytes of every file in the store directory.
    pub disk_bytes: u64,
    /// Bytes of the live records' payloads.
    pub live_bytes: u64,
    /// An estimate of the in-memory index's bytes (entries and their vectors).
    pub index_bytes: u64,
    /// Merges maintenance made since the open (see [`Store::maintain`]).
    pub merges: u64,
    /// The bytes those merges wrote.
    pub merged_bytes: u64,
    /// With [`Durability::GroupCommit`](crate::Durability::GroupCommit),
    /// the syncs its syncer ran since the open (each covers every append
    /// before it)...
    pub group_syncs: u64,
    /// ...and how many of them lingered first (see
    /// [`Options::commit_linger`](crate::Options::commit_linger)).
    pub lingered_syncs: u64,
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextPage {
    /// The contexts, oldest first activity first (ties by key).
    pub contexts: Vec<ContextInfo>,
    /// Pass this to get the next page; `None` on the last page.
    pub next_page_token: Option<String>,
}

impl Store {
    /// Whether the store was opened with
    /// [`open_read_only`](Self::open_read_only).
    pub fn is_read_only(&self) -> bool {
        self.options.read_only
    }

    /// Verifies every checksum of the store in `dir` without changing it
    /// (takes the store's lock: fails with `Locked` while it is open; see
    /// [`verify_read_only`](Self::verify_read_only)), reporting progress as
    /// (bytes read, bytes to read).
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::{Options, Store};
    /// # let dir = tempfile::tempdir()?;
    /// let store = Store::open(dir.path(), Options::default())?;
    /// store.append_message("acme", "case-42", b"hello")?;
    /// store.close()?; // verify takes the store's lock
    /// let report = Store::verify(dir.path(), &mut |_done, _total| {})?;
    /// assert!(report.is_clean());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn verify(
        dir: impl AsRef<Path>,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<VerifyReport> {
        Self::verify_on(&OsFs, dir, progress)
    }

    /// [`verify`](Self::verify) on the file system `fs` (see [`Options::fs`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ctxlog::fs::MemFs;
    /// use ctxlog::{Options, Store};
    ///
    /// let fs = MemFs::new();
    /// let store = Store::open("/store", Options::default().fs(Arc::new(fs.clone())))?;
    /// store.append_message("acme", "case-42", b"hello")?;
    /// store.close()?;
    /// assert!(Store::verify_on(&fs, "/store", &mut |_, _| {})?.is_clean());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn verify_on(
        fs: &dyn Fs,
        dir: impl AsRef<Path>,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<VerifyReport> {
        let dir = dir.as_ref();
        if !holds_store(fs, dir)? {
            return Err(Error::StoreNotFound {
                path: dir.to_path_buf(),
            });
        }
        let _lock = lock_dir(fs, dir, Options::default().lock_wait)?;
        verify_dir(fs, dir, checkpoint::peek(fs, dir), false, progress)
    }

    /// [`verify`](Self::verify) without the store's lock, beside a writer
    /// that may be appending, rotating or compacting: bytes after the
    /// newest segment's last whole record are its unfinished append, not
    /// damage, and a scan the writer changed under (a segment gone, a
    /// manifest switched) is done again, as a read-only open is (see
    /// [`open_read_only`](Self::open_read_only)). Reports progress as (bytes
    /// read, bytes to read).
    pub fn verify_read_only(
        dir: impl AsRef<Path>,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<VerifyReport> {
        let dir = dir.as_ref();
        let fs = OsFs;
        if !holds_store(&fs, dir)? {
            return Err(Error::StoreNotFound {
                path: dir.to_path_buf(),
            });
        }
        let mut tries = 0u64;
        loop {
            let report = verify_dir(&fs, dir, checkpoint::peek(&fs, dir), true, progress);
            let moved = match &report {
                Err(e) => moved_under(e),
                // Damage a writer's change can fake: records found missing.
                Ok(r) => r.damage.iter().any(|d| d.reason.contains("missing")),
            };
            if !moved || tries >= READ_ONLY_TRIES {
                return report;
            }
            tries += 1;
            std::thread::sleep(std::time::Duration::from_millis(tries.min(10)));
        }
    }

    /// Counts of what the store holds, its size on disk and in memory.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// store.append_message("acme", "case-42", b"hello")?;
    /// let stats = store.stats();
    /// assert_eq!((stats.contexts, stats.messages), (1, 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self) -> Stats {
        let mut st = Stats {
            segments: self.segments.ids().len(),
            ..Stats::default()
        };
        for slot in self.index.all_slots() {
            let state = slot.state.read();
            st.index_bytes += crate::index::slot_bytes(&state);
            if state.life(now_ms(), self.options.retention) != Life::Live {
                continue;
            }
            st.contexts += 1;
            st.tasks += state.task_count() as u64;
            st.messages += state.history_len();
            st.live_bytes += state.record_locs().map(|l| u64::from(l.len)).sum::<u64>();
        }
        st.index_bytes += self.index.approx_map_bytes();
        (st.group_syncs, st.lingered_syncs) = self.group_syncs();
        st.merges = self
            .maintained
            .merges
            .load(std::sync::atomic::Ordering::Relaxed);
        st.merged_bytes = self
            .maintained
            .bytes_written
            .load(std::sync::atomic::Ordering::Relaxed);
        st.disk_bytes = self.disk_bytes();
        st
    }

    /// What opening found: records, contexts, a torn tail, skipped damage.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::{Options, Store};
    /// # let dir = tempfile::tempdir()?;
    /// let store = Store::open(dir.path(), Options::default())?;
    /// let report = store.open_report();
    /// assert!(report.torn_tail.is_none() && report.skipped.is_empty() && report.lost.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_report(&self) -> &OpenReport {
        &self.report
    }

    /// The directory the store was opened in.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// assert_eq!(store.dir(), dir.path());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn dir(&self) -> &Path {
        self.writer.dir()
    }

    /// The options the store was opened with.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::{Durability, Options, Store};
    /// # let dir = tempfile::tempdir()?;
    /// let store = Store::open(dir.path(), Options::default().durability(Durability::Buffered))?;
    /// assert_eq!(store.options().durability, Durability::Buffered);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Saves an inbound message exactly as received, before anyone processes it.
    ///
    /// The bytes are stored unchanged and never rewritten; the call returns
    /// once they are as durable as the store's [`Durability`](crate::Durability) promises (on disk,
    /// for the default `Sync`). The first message of a context opens it.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// let first = store.append_message("acme", "case-42", br#"{"messageId":"m1"}"#)?; // durable here
    /// assert!(first.opened_context && first.seq == 0);
    /// let next = store.append_message("acme", "case-42", b"any bytes at all")?;
    /// assert_eq!(next.seq, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn append_message(&self, tenant: &str, context_id: &str, raw: &[u8]) -> Result<Appended> {
        let key = ContextKey::derive(tenant, context_id)?;
        let slot = self.index.get_or_insert(&key);
        let _turn = slot.write.lock();
        self.refuse_if_gone(&slot)?;
        let (opened, timestamp_ms) = {
            let state = slot.state.read();
            (state.meta.is_some(), next_timestamp(&state))
        };
        let name = (!opened).then(|| ContextName {
            tenant: tenant.to_string(),
            context_id: context_id.to_string(),
        });
        let kind = RecordKind::Message { task: None };
        let seq = self.append_record(&slot, name, kind, raw, timestamp_ms, Hints::default())?;
        Ok(Appended {
            key,
            seq,
            timestamp_ms,
            opened_context: !opened,
        })
    }

    /// Appends one record to the context of `slot`, whose write lock the
    /// caller holds, and publishes it once durable. `opens` is set exactly
    /// when the context has no record yet. Returns the record's seq.
    fn append_record(
        &self,
        slot: &ContextSlot,
        opens: Option<ContextName>,
        kind: RecordKind,
        blob: &[u8],
        timestamp_ms: u64,
        hints: Hints,
    ) -> Result<u64> {
        let (body, payload) = self.next_record(slot, opens, kind, blob, timestamp_ms)?;
        let seq = body.seq;
        let loc = self.writer.append(&payload)?;
        apply(
            &self.index,
            slot,
            &mut slot.state.write(),
            &body,
            loc,
            hints,
        );
        self.after_publish(slot, std::slice::from_ref(&loc), payload.len() as u64)?;
        Ok(seq)
    }

    /// The context's next record (the caller holds its write lock) and
    /// its encoded payload, once the store takes writes and the context
    /// has room for it.
    fn next_record(
        &self,
        slot: &ContextSlot,
        opens: Option<ContextName>,
        kind: RecordKind,
        blob: &[u8],
        timestamp_ms: u64,
    ) -> Result<(RecordBody, Vec<u8>)> {
        if self.options.read_only {
            return Err(Error::ReadOnly);
        }
        self.check_fenced()?;
        let seq = slot.state.read().next_seq;
        room_for(seq, 1)?;
        let body = RecordBody {
            seq,
            timestamp_ms,
            opens,
            kind,
        };
        let payload = self.encode(&slot.key, &body, blob)?;
        Ok((body, payload))
    }

    /// Fails once another writer has claimed the store's replica.
    pub(crate) fn check_fenced(&self) -> Result<()> {
        #[cfg(feature = "replicate")]
        if self.replica.get().is_some_and(|r| r.fenced()) {
            return Err(Error::replica(
                "write",
                "another writer has claimed this store's replica (a standby was promoted, or a \
                 restored copy replicates there); this store stops writing rather than diverge: \
                 restore from the replica (ctxlog restore) to go on from what it holds",
            ));
        }
        Ok(())
    }

    /// After records of `slot` at `locs` (`bytes` in all) are published in
    /// the index: the writer lets go of them, waiters on the context are
    /// told, they are counted, and a checkpoint is written if one is due.
    /// With synchronous replication, returns once a restore point covers
    /// them (an error past its timeout: they stay stored).
    fn after_publish(&self, slot: &ContextSlot, locs: &[RecordLoc], bytes: u64) -> Result<()> {
        self.published(slot, locs);
        self.maybe_checkpoint(bytes);
        self.after_replicated()
    }

    /// The writer lets go of the records of `slot` at `locs`, waiters on
    /// the context are told, and they are counted.
    fn published(&self, slot: &ContextSlot, locs: &[RecordLoc]) {
        for &loc in locs {
            self.writer.published(loc);
        }
        self.waits.notify(slot.number);
        self.records
            .fetch_add(locs.len() as u64, std::sync::atomic::Ordering::AcqRel);
    }

    /// With synchronous replication, returns once a restore point covers
    /// what is synced; otherwise asks for a round when a batch waits.
    fn after_replicated(&self) -> Result<()> {
        #[cfg(feature = "replicate")]
        if let Some(replica) = self.replica.get() {
            return replica.after_write(self.writer.synced_position());
        }
        Ok(())
    }

    fn encode(&self, key: &ContextKey, body: &RecordBody, blob: &[u8]) -> Result<Vec<u8>> {
        let payload = record::encode(key, body, blob).map_err(|e| Error::InvalidParams {
            field: "message",
            reason: e.0,
        })?;
        if payload.len() > self.options.max_record_bytes as usize {
            return Err(Error::InvalidParams {
                field: "message",
                reason: format!(
                    "its record is {} bytes, above the limit of {}; send a smaller \
                     message{}",
                    payload.len(),
                    self.options.max_record_bytes,
                    if self.options.max_record_bytes < MAX_RECORD_BYTES {
                        " or raise Options::max_record_bytes (to 16 MiB at most)"
                    } else {
                        " (16 MiB is the most a record may hold)"
                    }
                ),
            });
        }
        Ok(payload)
    }

    /// Whether an earlier sync failed: the store then refuses every write
    /// ([`Error::Poisoned`]) until it is reopened, and serves reads.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// assert!(!store.is_poisoned()); // until a sync fails
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_poisoned(&self) -> bool {
        self.writer.is_poisoned()
    }

    /// What the failed write or sync that poisoned the store met
    /// (`StorageFull` for a full disk): `None` while the store takes
    /// writes, or when the failure was no I/O error.
    pub fn poison_cause(&self) -> Option<std::io::ErrorKind> {
        self.writer.poison_cause()
    }

    /// Makes every append so far durable (for [`Durability::Buffered`](crate::Durability::Buffered)).
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::{Durability, Options, Store};
    /// # let dir = tempfile::tempdir()?;
    /// let store = Store::open(dir.path(), Options::default().durability(Durability::Buffered))?;
    /// store.append_message("acme", "case-42", b"hello")?; // in the OS's cache only
    /// store.sync()?; // on disk
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sync(&self) -> Result<()> {
        if self.options.read_only {
            return Err(Error::ReadOnly);
        }
        self.writer.sync_all()
    }

    /// Sets how long a group-commit sync that follows the one before back
    /// to back first waits for more appends (see
    /// [`Options::commit_linger`]): a program that knows how many writers it
    /// has in flight can set it while they are many and clear it while
    /// they are few. Takes effect from the syncer's next sync.
    pub fn set_commit_linger(&self, linger: std::time::Duration) {
        self.writer.set_commit_linger(linger);
    }

    /// With [`Durability::GroupCommit`](crate::Durability::GroupCommit),
    /// the syncs its syncer ran since the open and how many of them
    /// lingered first: [`Stats::group_syncs`] and
    /// [`Stats::lingered_syncs`], without the rest of the stats' walk.
    pub fn group_syncs(&self) -> (u64, u64) {
        self.writer.group_syncs()
    }

    /// The linger in force (see [`Store::set_commit_linger`]).
    pub fn commit_linger(&self) -> std::time::Duration {
        self.writer.commit_linger()
    }

    /// Syncs and closes the store, writing the index checkpoint so that the
    /// next open reads only what is appended after it; reports any failure.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::{Options, Store};
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// store.append_message("acme", "case-42", b"hello")?;
    /// store.close()?;
    /// let store = Store::open(dir.path(), Options::default())?;
    /// assert_eq!(store.last_messages("acme", "case-42", 1)?[0].raw, b"hello");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn close(mut self) -> Result<()> {
        self.closed = true;
        self.stop_maintenance();
        if self.options.read_only {
            return Ok(());
        }
        let finished = self.writer.finish().and_then(|()| {
            if self.checkpoint_stale() {
                self.write_checkpoint()
            } else {
                Ok(())
            }
        });
        self.stop_replication();
        finished
    }

    /// Ships what the log holds and stops the replication thread, if one
    /// runs (after the log's last bytes are synced).
    fn stop_replication(&mut self) {
        #[cfg(feature = "replicate")]
        if let Some(replicator) = self.replicator.take() {
            replicator.stop();
        }
    }

    /// How far the store's replica trails it (`None`: the store does not
    /// replicate). See [`Options::replicate`](crate::Options::replicate).
    #[cfg(feature = "replicate")]
    pub fn replication(&self) -> Option<ReplicationStatus> {
        self.replicator
            .as_ref()
            .map(|r| r.status(self.synced_position()))
    }

    /// Ships everything synced so far and publishes a restore point now,
    /// waiting up to `timeout` (the thread otherwise does so every
    /// [`Replicate::interval`](crate::Replicate::interval)). The round
    /// starts at once, even while the thread backs off after a failed
    /// round: the answer is that round's.
    /// Fails if the store does not replicate, the round fails (its error
    /// says why; the thread retries), or it does not end in time.
    #[cfg(feature = "replicate")]
    pub fn ship_replica(&self, timeout: std::time::Duration) -> Result<ReplicationStatus> {
        match &self.replicator {
            Some(replicator) => {
                replicator.ship_now(timeout)?;
                Ok(replicator.status(self.synced_position()))
            }
            None => Err(Error::InvalidParams {
                field: "replicate",
                reason: "the store was opened without Options::replicate".into(),
            }),
        }
    }

    /// Whether a checkpoint written now would say more than the one on disk
    /// (and may be written: no compaction is half done).
    fn checkpoint_stale(&self) -> bool {
        use std::sync::atomic::Ordering;
        !self.no_checkpoint.load(Ordering::Acquire)
            && self.since_checkpoint.load(Ordering::Acquire) > 0
    }

    /// The slot of a live context of this tenant.
    fn visible_slot(&self, tenant: &str, context_id: &str) -> Result<Arc<ContextSlot>> {
        let key = ContextKey::derive(tenant, context_id)?;
        let slot = self.index.get(&key).ok_or(Error::ContextNotFound)?;
        if self.life(&slot) != Life::Live {
            return Err(Error::ContextNotFound);
        }
        Ok(slot)
    }

    /// Whether the context of `slot` can be used now.
    pub(crate) fn life(&self, slot: &ContextSlot) -> Life {
        slot.state.read().life(now_ms(), self.options.retention)
    }

    /// Refuses a write to a context that is gone; an expired one is first
    /// marked with a durable tombstone, so its expiry outlives a change of
    /// the retention setting. Called with the context's write lock held.
    pub(crate) fn refuse_if_gone(&self, slot: &ContextSlot) -> Result<()> {
        let gone = match self.life(slot) {
            Life::Gone(gone) => gone,
            Life::Live | Life::Missing => return Ok(()),
        };
        if gone == Gone::Expired && slot.state.read().gone.is_none() {
            self.append_tombstone(slot, Gone::Expired)?;
        }
        let reason = match gone {
            Gone::Expired => "expired: it was idle longer than the retention policy allows",
            Gone::Deleted => "deleted in this tenant's namespace",
        };
        Err(Error::ContextRejected {
            reason: format!("it was {reason}; start a new context (send no contextId)"),
        })
    }

    /// Appends the tombstone that makes a context gone (the caller holds its
    /// write lock).
    fn append_tombstone(&self, slot: &ContextSlot, gone: Gone) -> Result<u64> {
        let kind = RecordKind::Gone {
            expired: gone == Gone::Expired,
        };
        let ts = next_timestamp(&slot.state.read());
        self.append_record(slot, None, kind, &[], ts, Hints::default())
    }

    /// Deletes a context with its tasks, messages and artifacts from every
    /// read and listing at once, durably. Its id stays refused. Deleting a
    /// context already deleted (or expired) succeeds and writes nothing, so
    /// a retried delete is no error; one that never existed is
    /// [`Error::ContextNotFound`].
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// store.append_message("acme", "case-42", b"hello")?;
    /// store.delete_context("acme", "case-42")?;
    /// assert!(matches!(
    ///     store.last_messages("acme", "case-42", 1),
    ///     Err(ctxlog::Error::ContextNotFound)
    /// ));
    /// // Its id stays refused; deleting again is no error.
    /// assert!(store.append_message("acme", "case-42", b"again").is_err());
    /// store.delete_context("acme", "case-42")?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn delete_context(&self, tenant: &str, context_id: &str) -> Result<()> {
        let key = ContextKey::derive(tenant, context_id)?;
        let slot = self.index.get(&key).ok_or(Error::ContextNotFound)?;
        let _turn = slot.write.lock();
        match self.life(&slot) {
            Life::Live => self.append_tombstone(&slot, Gone::Deleted).map(drop),
            // Deleting again (a retried request) finds what it asked for.
            Life::Gone(_) => Ok(()),
            Life::Missing => Err(Error::ContextNotFound),
        }
    }

    /// Marks every context idle past the retention policy with a durable
    /// tombstone; returns how many. (Reads treat them as expired already;
    /// this makes it permanent.)
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ctxlog::{Options, Store};
    /// # let dir = tempfile::tempdir()?;
    /// let month = Duration::from_secs(30 * 86_400);
    /// let store = Store::open(dir.path(), Options::default().retention(Some(month)))?;
    /// store.append_message("acme", "case-42", b"hello")?;
    /// assert_eq!(store.expire_idle()?, 0); // nothing has been idle for a month
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn expire_idle(&self) -> Result<usize> {
        let mut expired = 0;
        for slot in self.index.all_slots() {
            let _turn = slot.write.lock();
            let state = slot.state.read();
            if state.gone.is_none()
                && state.life(now_ms(), self.options.retention) == Life::Gone(Gone::Expired)
            {
                drop(state);
                self.append_tombstone(&slot, Gone::Expired)?;
                expired += 1;
            }
        }
        if expired > 0 {
            tracing::info!(expired, "idle contexts expired (tombstones written)");
        }
        Ok(expired)
    }
}

impl Shared {
    /// Bytes of every file in the store directory (0 if it cannot be
    /// listed).
    pub(crate) fn disk_bytes(&self) -> u64 {
        self.writer
            .fs()
            .list(self.writer.dir())
            .map(|files| files.iter().map(|(_, len)| len).sum())
            .unwrap_or(0)
    }

    /// Records served now (of the current namespace).
    pub(crate) fn records(&self) -> u64 {
        self.records.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Hands the record at `loc` of the context keyed `key` to `f`,
    /// straight from the segment's bytes (see [`ContextRecords::record`]).
    pub(crate) fn with_record<T>(
        &self,
        key: &ContextKey,
        loc: RecordLoc,
        f: impl FnOnce(&RecordBody, &[u8]) -> T,
    ) -> Result<T> {
        self.context_records(key).record(loc, f)
    }

    /// The records of the context keyed `key`, for the reads of one request.
    fn context_records<'a>(&'a self, key: &'a ContextKey) -> ContextRecords<'a> {
        ContextRecords {
            key,
            reading: self.segments.reading(),
        }
    }
}

/// The records of one context, read for one request under one read lock of
/// the segment set. A record that names another context is damage (the
/// index, or a file, is not what it claims to be), never served.
pub(crate) struct ContextRecords<'a> {
    key: &'a ContextKey,
    reading: Reading<'a>,
}

impl ContextRecords<'_> {
    /// Hands the record at `loc` to `f`, straight from the segment's bytes.
    fn record<T>(&mut self, loc: RecordLoc, f: impl FnOnce(&RecordBody, &[u8]) -> T) -> Result<T> {
        let bad = |reason: &str| Error::corrupt(loc.segment, u64::from(loc.offset), reason);
        let key = self.key;
        self.reading
            .with_payload(loc, |payload| match record::decode(payload) {
                Ok(Decoded::Current { key: k, .. }) if k != *key => Err(bad(ANOTHER_CONTEXT)),
                Ok(Decoded::Current { body, blob, .. }) => Ok(f(&body, blob)),
                Ok(Decoded::ForeignNamespace(_)) => {
                    Err(bad("the index points at a record of another namespace"))
                }
                Err(e) => Err(bad(&e.0)),
            })?
    }

    /// Hands the message of the history record at `loc` to `f`, straight
    /// from the segment's bytes (no copy): an inbound message's blob, or the
    /// `message` member of a status's blob. The record is viewed, not
    /// decoded whole: a history read builds nothing per record but what it
    /// returns.
    fn message<T>(&mut self, loc: RecordLoc, f: impl FnOnce(&View, &[u8]) -> T) -> Result<T> {
        /// A stored status, read only for the bytes of its message.
        #[derive(serde::Deserialize)]
        struct StatusMessage<'a> {
            #[serde(borrow)]
            message: Option<&'a serde_json::value::RawValue>,
        }
        let bad = |reason: &str| Error::corrupt(loc.segment, u64::from(loc.offset), reason);
        let key = self.key;
        self.reading.with_payload(loc, |payload| {
            let view = record::view(payload).map_err(|e| bad(&e.0))?;
            if view.key != *key {
                return Err(bad(ANOTHER_CONTEXT));
            }
            match view.kind {
                ViewKind::Message { .. } => Ok(f(&view, view.blob)),
                ViewKind::Status { .. } => {
                    let status: StatusMessage = serde_json::from_slice(view.blob)
                        .map_err(|e| bad(&format!("a stored status does not parse: {e}")))?;
                    let message = status
                        .message
                        .ok_or_else(|| bad("a history status without a message"))?;
                    Ok(f(&view, message.get().as_bytes()))
                }
                ViewKind::Artifact { .. }
                | ViewKind::Gone
                | ViewKind::Hide
                | ViewKind::Push { .. } => {
                    Err(bad("the history points at a record that holds no message"))
                }
            }
        })?
    }
}

/// Why a record read for one context is refused when it names another.
const ANOTHER_CONTEXT: &str = "the record belongs to another context than the one read";

impl Drop for Store {
    fn drop(&mut self) {
        self.stop_maintenance();
        if self.closed || self.options.read_only {
            return;
        }
        // Best effort: `close` is the way to learn whether this worked.
        if self.writer.finish().is_ok() && self.checkpoint_stale() {
            let _ = self.write_checkpoint();
        }
        self.stop_replication();
    }
}

/// Refuses `count` more records in a context whose next seq is
/// `next_seq` if that would take it past [`MAX_SEQ`].
fn room_for(next_seq: u64, count: u64) -> Result<()> {
    if next_seq.saturating_add(count) > MAX_SEQ + 1 {
        return Err(Error::InvalidParams {
            field: "contextId",
            reason: format!(
                "the context would hold more than {} records, the most one context can; \
                 continue the case in a new context",
                MAX_SEQ + 1
            ),
        });
    }
    Ok(())
}

/// What the index takes of a record beside its body, read from its blob:
/// the appender knows it, recovery and an import read it
/// ([`Hints::of`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Hints {
    /// A received message that named neither a context nor a task: its
    /// messageId is recognised within the tenant too.
    pub(crate) tenant_scoped: bool,
    /// A COMPLETED status that is the agent's direct reply (its JSON has
    /// [`DIRECT_REPLY`](crate::a2a::DIRECT_REPLY): `true`).
    pub(crate) direct_reply: bool,
}

impl Hints {
    /// What a stored record's blob says. Only two kinds of record have a
    /// blob to read, and they are few: a received message that opened its
    /// context (one per context: did it name the context?), and a COMPLETED
    /// status with a message that names the direct-reply member at all
    /// (found by a byte search first).
    pub(crate) fn of(body: &RecordBody, blob: &[u8]) -> Hints {
        #[derive(serde::Deserialize)]
        struct Named<'a> {
            #[serde(rename = "contextId", borrow, default)]
            context_id: Option<&'a serde_json::value::RawValue>,
        }
        #[derive(serde::Deserialize)]
        struct Replied<'a> {
            #[serde(rename = "ctxlogDirectReply", borrow, default)]
            marker: Option<&'a serde_json::value::RawValue>,
        }
        match &body.kind {
            RecordKind::Message { task: Some(link) } if link.opens_task && body.opens.is_some() => {
                Hints {
                    tenant_scoped: serde_json::from_slice::<Named>(blob)
                        .is_ok_and(|n| n.context_id.is_none()),
                    direct_reply: false,
                }
            }
            RecordKind::Status {
                state: TaskState::Completed,
                with_message: true,
                ..
            } if contains(blob, crate::a2a::DIRECT_REPLY.as_bytes()) => Hints {
                tenant_scoped: false,
                direct_reply: serde_json::from_slice::<Replied>(blob)
                    .is_ok_and(|r| r.marker.is_some_and(|m| m.get() == "true")),
            },
            _ => Hints::default(),
        }
    }
}

/// Whether `needle` occurs in `haystack`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// Adds one record to a context's index entry (`state`, of `slot`); used by
/// appends and recovery alike, so both build the same index. The record was
/// checked before.
fn apply(
    index: &Index,
    slot: &ContextSlot,
    state: &mut ContextState,
    body: &RecordBody,
    loc: RecordLoc,
    hints: Hints,
) {
    if let Some(name) = &body.opens {
        index.list_in_tenant(&name.tenant, body.timestamp_ms, slot);
        state.meta = Some(ContextMeta::new(
            &name.tenant,
            &name.context_id,
            body.timestamp_ms,
        ));
    }
    let tenant = state.meta.as_ref().map_or("", ContextMeta::tenant);
    match &body.kind {
        RecordKind::Message { task: None } => {
            state.push_record(body.seq, loc, Kind::Message, None);
        }
        RecordKind::Message { task: Some(link) } => {
            // Recognised in its context, and (if it named neither a context
            // nor a task) within the tenant.
            let in_context = context_message_key(&slot.key, &link.message_id);
            index.idem_done(crate::index::short_key(&in_context), slot.number, body.seq);
            if hints.tenant_scoped {
                index.idem_done(
                    crate::index::short_key(&message_key(tenant, &link.message_id)),
                    slot.number,
                    body.seq,
                );
            }
            if link.opens_task {
                index.enter_task(tenant, slot.number, &link.task_id);
                state.open_task(&link.task_id, body.seq, body.timestamp_ms, loc);
            } else {
                let task = state.task_pos(&link.task_id);
                state.push_record(body.seq, loc, Kind::Message, task);
                if let Some(task) = task {
                    state.message_joined(task, body.timestamp_ms);
                }
            }
        }
        RecordKind::Status {
            task_id,
            state: new_state,
            with_message,
        } => {
            let task = state.task_pos(task_id);
            let kind = Kind::Status {
                with_message: *with_message,
            };
            state.push_record(body.seq, loc, kind, task);
            if let Some(task) = task {
                state.set_status(task, *new_state, body.timestamp_ms);
                if hints.direct_reply {
                    state.mark_direct_reply(task);
                }
            }
        }
        RecordKind::Artifact {
            task_id,
            artifact_id,
            append,
            last_chunk,
        } => {
            let task = state.task_pos(task_id);
            let pos = state.push_record(body.seq, loc, Kind::Artifact, task);
            if let Some(task) = task {
                state.add_chunk(task, pos, artifact_id, *append, *last_chunk);
            }
        }
        RecordKind::Hide { from_seq, to_seq } => {
            state.push_record(body.seq, loc, Kind::Hide, None);
            state.hide(*from_seq, *to_seq);
        }
        RecordKind::Push { .. } => {
            // Not a task event: the index keeps it under no task, so a
            // task's events and their numbers never count it.
            state.push_record(body.seq, loc, Kind::Push, None);
        }
        RecordKind::Gone { expired } => {
            if let Some(meta) = &state.meta {
                index.unlist_in_tenant(meta.tenant(), meta.first_ms, slot);
                index.leave_tasks(meta.tenant(), slot.number, state);
            }
            state.gone = Some(if *expired {
                Gone::Expired
            } else {
                Gone::Deleted
            });
            // Only the name is kept: it keeps the id refused.
            state.clear();
        }
    }
    state.next_seq = body.seq + 1;
    state.last_ms = state.last_ms.max(body.timestamp_ms);
}

/// A listing's cursor: hex of a millisecond timestamp (u64 LE) and the bytes
/// that break ties at that timestamp.
pub(crate) fn encode_cursor(ms: u64, tail: &[u8]) -> String {
    let mut bytes = ms.to_le_bytes().to_vec();
    bytes.extend_from_slice(tail);
    hex::encode(bytes)
}

/// Undoes [`encode_cursor`]; a token it did not make is `InvalidParams`.
pub(crate) fn decode_cursor(token: &str, field: &'static str) -> Result<(u64, Vec<u8>)> {
    let bytes = hex::decode(token).map_err(|_| bad_cursor(field))?;
    let (ms, tail) = bytes.split_at_checked(8).ok_or_else(|| bad_cursor(field))?;
    let ms = u64::from_le_bytes(ms.try_into().map_err(|_| bad_cursor(field))?);
    Ok((ms, tail.to_vec()))
}

pub(crate) fn bad_cursor(field: &'static str) -> Error {
    Error::InvalidParams {
        field,
        reason: "it is not a token this store handed out; start again without one".into(),
    }
}

/// A listing's page size must be 1 to [`MAX_PAGE_SIZE`].
pub(crate) fn check_page_size(size: usize, field: &'static str) -> Result<()> {
    if (1..=MAX_PAGE_SIZE).contains(&size) {
        return Ok(());
    }
    Err(Error::InvalidParams {
        field,
        reason: format!("{size} is not between 1 and {MAX_PAGE_SIZE}"),
    })
}

/// The timestamp of a context's next record: now, but never before its
/// latest, so a context's timestamps never go backwards.
pub(crate) fn next_timestamp(state: &ContextState) -> u64 {
    now_ms().max(state.last_ms)
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::MemFs;

    #[test]
    fn a_record_read_for_another_context_is_damage_and_never_served() {
        let options = Options::default().fs(Arc::new(MemFs::new()));
        let store = Store::open("/s", options).unwrap();
        store.append_message("alice", "secret", b"alice's").unwrap();
        store.append_message("bob", "secret", b"bob's").unwrap();
        let key = |tenant| ContextKey::derive(tenant, "secret").unwrap();
        let slot = store.index.get(&key("bob")).unwrap();
        let loc = slot.state.read().record_locs().next().unwrap();
        let blob = |k: &ContextKey| store.with_record(k, loc, |_, blob| blob.to_vec());
        assert_eq!(blob(&key("bob")).unwrap(), b"bob's");
        match blob(&key("alice")) {
            Err(Error::Corrupt { reason, .. }) => assert!(reason.contains("another context")),
            other => panic!("{other:?}"),
        }
    }
}
