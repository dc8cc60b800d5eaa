//! The public store: open, append raw messages, read histories, list contexts.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::fs::{Fs, OsFs};

use crate::index::{
    ContextMeta, ContextSlot, ContextState, Gone, Index, Life, MessageRef, MAX_SEQ,
};
use crate::log::layout::Layout;
use crate::log::manifest::Manifest;
use crate::log::recovery::{self, recover, OpenReport};
use crate::log::segments::{Reading, RecordLoc, Segments};
use crate::log::verify::{verify_dir, VerifyReport};
use crate::log::writer::LogWriter;

mod batch;
pub(crate) mod checkpoint;
mod compact;
mod hide;
mod maintain;
mod messages;
pub(crate) mod portable;
mod push;
#[cfg(feature = "replicate")]
pub(crate) mod replica;
mod tasks;
mod turns;
mod wait;
use crate::a2a::lifecycle::Op;
use crate::a2a::TaskState;
use crate::index::context::Kind;
use crate::log::record::{self, ContextName, Decoded, RecordBody, RecordKind, View, ViewKind};
use crate::namespace::{context_message_key, message_key, ContextKey};
use crate::options::{Options, RecoveryMode};
use crate::render::{self, Budget, History, Rendered, Turn};
use crate::MAX_RECORD_BYTES;
pub use compact::{CompactReport, CompactStep};
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
    replicator: Option<crate::replicate::Replicator>,
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
    replica: std::sync::OnceLock<crate::replicate::Link>,
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

/// One item of a context's history: a message, or (`chunks > 0`) an
/// artifact, at the place of its latest chunk.
#[derive(Debug, Clone, Copy)]
struct HistoryItem {
    seq: u64,
    loc: RecordLoc,
    chunks: u32,
}

impl HistoryItem {
    fn message(r: MessageRef) -> Self {
        HistoryItem {
            seq: r.seq(),
            loc: r.loc(),
            chunks: 0,
        }
    }
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
    /// Opens the store in `dir`, creating it if needed, and recovers the log.
    ///
    /// Fails with [`Error::Locked`] if another `Store` has it open, with
    /// [`Error::UnsupportedFormat`] for another format version, and with
    /// [`Error::Corrupt`] for damage before the torn tail (unless
    /// [`RecoveryMode::SkipCorrupt`](crate::RecoveryMode) is chosen).
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::{Durability, Options, Store};
    /// # let dir = tempfile::tempdir()?;
    /// let store = Store::open(dir.path(), Options::default().durability(Durability::GroupCommit))?;
    /// assert_eq!(store.open_report().records, 0); // a new store
    /// store.close()?;
    /// // Reopened, it reads its checkpoint instead of its log.
    /// let store = Store::open(dir.path(), Options::default())?;
    /// assert!(store.open_report().from_checkpoint);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        check_options(&options)?;
        let fs = options.fs.clone();
        if options.create {
            create_dir(fs.as_ref(), &dir)?;
        } else if !holds_store(fs.as_ref(), &dir)? {
            return Err(Error::StoreNotFound { path: dir });
        }
        let lock = lock_dir(fs.as_ref(), &dir, options.lock_wait)?;
        Self::open_locked(dir, options, lock)
    }

    /// Opens the store in `dir` to read it, even while another process
    /// writes it: no lock taken, nothing written (no cut tail, no
    /// checkpoint, no file created or removed). The store answers as of the
    /// open: every record whole in its files then, that is, a prefix of
    /// the log, even when a writer was appending, rotating or compacting
    /// meanwhile (bytes after the last whole record of the newest segment
    /// are taken for the writer's unfinished append, and not reported as a
    /// torn tail). A record a writer had written but not yet synced may be
    /// included: a crash of that writer may still cut it. Reopen to see
    /// what was written since. Every write answers [`Error::ReadOnly`]; a
    /// directory without a store answers [`Error::StoreNotFound`].
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::{Options, Store};
    /// # let dir = tempfile::tempdir()?;
    /// let writer = Store::open(dir.path(), Options::default())?;
    /// writer.append_message("acme", "case-42", b"hello")?;
    /// // Beside the writer, which holds the store's lock:
    /// let reader = Store::open_read_only(dir.path(), Options::default())?;
    /// assert_eq!(reader.last_messages("acme", "case-42", 1)?[0].raw, b"hello");
    /// assert!(matches!(
    ///     reader.append_message("acme", "case-42", b"no"),
    ///     Err(ctxlog::Error::ReadOnly)
    /// ));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_read_only(dir: impl AsRef<Path>, options: Options) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        let mut options = options.durability(crate::Durability::Buffered);
        options.read_only = true;
        check_options(&options)?;
        if !holds_store(options.fs.as_ref(), &dir)? {
            return Err(Error::StoreNotFound { path: dir });
        }
        // A writer may change the directory while this reads it: a
        // compaction removes segments (a file listed is gone when read),
        // renames new ones in and switches the manifest (which then names
        // files the listing did not see), a checkpoint may reach past the
        // listing. Each such view fails to open and a later look sees a
        // consistent one: look again, a bounded number of times, with a
        // short pause for the writer's step to finish. Damage that stays
        // is reported as it is after the last look.
        let mut tries = 0u64;
        loop {
            match Self::open_locked(dir.clone(), options.clone(), Box::new(())) {
                Err(e) if tries < READ_ONLY_TRIES && moved_under(&e) => {
                    tries += 1;
                    tracing::debug!(dir = %dir.display(), tries, error = %e, "the store changed while opening read-only; again");
                    std::thread::sleep(std::time::Duration::from_millis(tries.min(10)));
                }
                other => return other,
            }
        }
    }

    /// The rest of [`open`](Self::open) (and of a read-only open), once the
    /// lock (or, read-only, nothing) is held.
    fn open_locked(dir: PathBuf, options: Options, lock: Box<dyn Send + Sync>) -> Result<Self> {
        let fs = options.fs.clone();
        // With a sound checkpoint, load the index and read only the log
        // after it; if the log does not match it, read everything instead.
        let first = Index::default();
        // The directory is looked at on this thread while the checkpoint's
        // other threads load it.
        let mut looked = None;
        let look = || looked = Some(recovery::look(fs.as_ref(), &dir, options.read_only));
        // A checkpoint written before the last two switches of the log (or
        // more) is set aside with its reason; one switch behind, it is
        // re-pointed (`scan_log`).
        let mut stale = None;
        let attempt = checkpoint::load(fs.as_ref(), &dir, &first, look).and_then(|loaded| {
            if let Some(Ok(layout)) = &looked {
                stale = recovery::stale(&loaded.resume, layout);
                if stale.is_some() {
                    return None;
                }
            }
            let segments = Arc::new(Segments::default());
            Some((
                scan_log(
                    &dir,
                    &options,
                    &first,
                    &segments,
                    Some((loaded, looked.take())),
                ),
                segments,
            ))
        });
        let (index, segments, recovered, report) = match attempt {
            Some((Ok((recovered, report)), segments))
                if options.recovery == RecoveryMode::Strict
                    && report.checkpoint_ignored.is_none() =>
            {
                (first, segments, recovered, report)
            }
            // Read everything again if the checkpoint did not match a
            // merge's output (see `repoint`), or to skip damage: that needs
            // every record read (a checkpoint indexes records it does not
            // read, so a damaged one would fail each read of its context
            // instead of being skipped). The checkpoint was still checked
            // against the log (what it says was acknowledged and is gone is
            // reported as lost, below).
            Some((Ok((_, first_report)), _)) => {
                let index = Index::default();
                let segments = Arc::new(Segments::default());
                let (recovered, mut report) = scan_log(&dir, &options, &index, &segments, None)?;
                // What the first scan repaired, the second finds whole: keep
                // its word for it.
                report.identity_restored |= first_report.identity_restored;
                report.torn_tail = report.torn_tail.or(first_report.torn_tail);
                report
                    .removed_segments
                    .extend(first_report.removed_segments);
                report.removed_segments.sort_unstable();
                report.removed_segments.dedup();
                report.checkpoint_ignored =
                    Some(first_report.checkpoint_ignored.unwrap_or_else(|| {
                        "recovery skip-corrupt reads every record rather than trust the checkpoint"
                            .into()
                    }));
                (index, segments, recovered, report)
            }
            other => {
                let mut lost = None;
                let ignored = match other {
                    // The checkpoint knew the log reached further than it
                    // does: a scan without it could not tell.
                    Some((Err(e @ Error::MissingRecords { .. }), _))
                        if options.recovery == RecoveryMode::Strict =>
                    {
                        return Err(e)
                    }
                    Some((Err(e), _)) => {
                        if let Error::MissingRecords {
                            segment,
                            expected,
                            actual,
                            reason,
                        } = &e
                        {
                            lost = Some(crate::log::layout::Lost {
                                segment: *segment,
                                expected: *expected,
                                actual: *actual,
                                reason: reason.clone(),
                            });
                        }
                        Some(format!("{e}"))
                    }
                    _ if stale.is_some() => stale,
                    _ if fs.exists(&dir.join(checkpoint::CHECKPOINT)) => {
                        Some("the checkpoint is damaged or of another version".to_string())
                    }
                    _ => None,
                };
                let index = Index::default();
                let segments = Arc::new(Segments::default());
                let (recovered, mut report) = scan_log(&dir, &options, &index, &segments, None)?;
                report.checkpoint_ignored = ignored;
                report.lost.extend(lost);
                (index, segments, recovered, report)
            }
        };
        trace_open(&dir, &report);
        let writer = LogWriter::resume(
            dir,
            &options,
            segments.clone(),
            recovered.active,
            recovered.next_id,
            recovered.store,
        );
        let stale_at_open =
            u64::from(!report.from_checkpoint || report.replayed > 0 || report.repointed > 0);
        let shared = Arc::new(Shared {
            options,
            segments,
            writer,
            index,
            records: std::sync::atomic::AtomicU64::new(report.records),
            report,
            manifest: parking_lot::Mutex::new(recovered.manifest),
            merging: parking_lot::Mutex::new(()),
            // A checkpoint that holds everything read at open makes a new
            // one at close needless until something changes.
            since_checkpoint: std::sync::atomic::AtomicU64::new(stale_at_open),
            checkpoint_size: std::sync::atomic::AtomicU64::new(0),
            checkpointing: std::sync::atomic::AtomicBool::new(false),
            no_checkpoint: std::sync::atomic::AtomicBool::new(false),
            waits: wait::EventWaits::default(),
            maintained: maintain::Counters::default(),
            #[cfg(feature = "replicate")]
            replica: std::sync::OnceLock::new(),
            _lock: lock,
        });
        let maintainer = maintain::Maintainer::start(&shared);
        #[cfg(feature = "replicate")]
        let replicator = match shared.options.replicate.clone() {
            Some(config) if !shared.options.read_only => {
                if config.synchronous && shared.options.durability == crate::Durability::Buffered {
                    return Err(Error::InvalidParams {
                        field: "replicate",
                        reason: "synchronous replication ships only synced bytes, which \
                                 Durability::Buffered leaves unsynced; use Sync or GroupCommit"
                            .into(),
                    });
                }
                let replicator = crate::replicate::Replicator::start(&shared, config.clone())?;
                let _ = shared.replica.set(replicator.link(&config));
                Some(replicator)
            }
            _ => None,
        };
        Ok(Self {
            shared,
            maintainer,
            #[cfg(feature = "replicate")]
            replicator,
            closed: false,
        })
    }

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
        for &loc in locs {
            self.writer.published(loc);
        }
        self.waits.notify(slot.number);
        self.records
            .fetch_add(locs.len() as u64, std::sync::atomic::Ordering::AcqRel);
        self.maybe_checkpoint(bytes);
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
                     message or raise Options::max_record_bytes",
                    payload.len(),
                    self.options.max_record_bytes
                ),
            });
        }
        Ok(payload)
    }

    /// The last `n` messages of a context, oldest first (`usize::MAX`: all).
    ///
    /// Reads only those records. [`last_messages_into`](Self::last_messages_into)
    /// reads them into a buffer the caller reuses, without an allocation per
    /// message. Another tenant's context answers exactly as
    /// a missing one: [`Error::ContextNotFound`].
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// for text in ["one", "two", "three"] {
    ///     store.append_message("acme", "case-42", text.as_bytes())?;
    /// }
    /// let last = store.last_messages("acme", "case-42", 2)?;
    /// assert_eq!((last[0].raw.as_slice(), last[1].raw.as_slice()), (&b"two"[..], &b"three"[..]));
    /// // Another tenant's context answers as a missing one.
    /// assert!(matches!(
    ///     store.last_messages("other", "case-42", 2),
    ///     Err(ctxlog::Error::ContextNotFound)
    /// ));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn last_messages(
        &self,
        tenant: &str,
        context_id: &str,
        n: usize,
    ) -> Result<Vec<StoredMessage>> {
        self.with_newest_before(tenant, context_id, None, n, |records, refs, _| {
            let mut messages = Vec::with_capacity(refs.len());
            for r in refs {
                messages.push(records.message(r.loc(), |view, raw| StoredMessage {
                    seq: view.seq,
                    timestamp_ms: view.timestamp_ms,
                    raw: raw.to_vec(),
                })?);
            }
            Ok(messages)
        })
    }

    /// Hands `f` the context's records, up to `max` of the newest message
    /// refs before seq `before`, and how many messages lie before it. `f`
    /// runs under the context's read lock, so a compaction cannot move the
    /// records between the copy of their locations and their reads (it
    /// remaps under the write lock).
    fn with_newest_before<T>(
        &self,
        tenant: &str,
        context_id: &str,
        before: Option<u64>,
        max: usize,
        f: impl FnOnce(&mut ContextRecords, &[MessageRef], u64) -> Result<T>,
    ) -> Result<T> {
        let slot = self.visible_slot(tenant, context_id)?;
        let state = slot.state.read();
        let (refs, total) = state.newest_before(before, max);
        let mut records = self.context_records(&slot.key);
        records.reading.prefetch(refs.iter().map(MessageRef::loc));
        f(&mut records, &refs, total)
    }

    /// Like [`with_newest_before`](Self::with_newest_before), for history
    /// items: the messages and, if `budget.include_artifacts`, one item per
    /// artifact at the place of its latest chunk, in the context's order.
    fn with_history<T>(
        &self,
        tenant: &str,
        context_id: &str,
        before: Option<u64>,
        budget: &Budget,
        f: impl FnOnce(&mut ContextRecords, &[HistoryItem], u64) -> Result<T>,
    ) -> Result<T> {
        let slot = self.visible_slot(tenant, context_id)?;
        let state = slot.state.read();
        // The newest `max` items hold at most the newest `max` messages, so
        // older messages are never copied, even with artifacts to merge in.
        let (refs, messages) = state.newest_before(before, budget.max_messages);
        let mut items: Vec<HistoryItem> = refs.iter().map(|r| HistoryItem::message(*r)).collect();
        let mut total = messages;
        if budget.include_artifacts {
            for (seq, loc, chunks) in state.latest_chunks() {
                if before.is_none_or(|b| seq < b) {
                    total += 1;
                    items.push(HistoryItem { seq, loc, chunks });
                }
            }
            items.sort_unstable_by_key(|i| i.seq);
            items.drain(..items.len().saturating_sub(budget.max_messages));
        }
        let mut records = self.context_records(&slot.key);
        records.reading.prefetch(items.iter().map(|i| i.loc));
        f(&mut records, &items, total)
    }

    /// The context's history before the message of seq `before` (the one
    /// being processed, which is never part of its own history; `None`: the
    /// whole history), in the structured form: role and text per turn, within
    /// `budget` (bytes of text, and messages). The oldest whole messages are
    /// dropped first; the newest is kept even when it alone is too large, cut
    /// from its start.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::render::{Budget, Role};
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// # let m1 = store.receive_message("acme", br#"{"messageId":"m1","role":"ROLE_USER","contextId":"case-42","parts":[{"text":"Refund order 123"}]}"#)?;
    /// # let m2 = store.receive_message("acme", br#"{"messageId":"m2","role":"ROLE_USER","contextId":"case-42","parts":[{"text":"Any news?"}]}"#)?;
    /// // Two messages in context "case-42"; the turn processes the second (m2).
    /// let history = store.history("acme", "case-42", Some(m2.seq), Budget::default())?;
    /// assert_eq!(history.turns.len(), 1);
    /// assert_eq!(history.turns[0].role, Role::User);
    /// assert_eq!(history.turns[0].text, "Refund order 123");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn history(
        &self,
        tenant: &str,
        context_id: &str,
        before: Option<u64>,
        budget: Budget,
    ) -> Result<History> {
        budget.check()?;
        let room = budget.max_bytes;
        let cost = |t: &Turn| t.text.len();
        let (turns, omitted) = self.with_history(
            tenant,
            context_id,
            before,
            &budget,
            |records, refs, total| {
                render::choose(
                    turns(records, refs),
                    total,
                    budget.max_messages,
                    room,
                    cost,
                    |t| render::cut_to_fit(t, room, cost),
                )
            },
        )?;
        Ok(History { turns, omitted })
    }

    /// The same history rendered for a prompt inside an injection-guard
    /// frame (see DESIGN.md): at most `budget.max_bytes` bytes in all.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::render::{self, Budget};
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// # let m1 = store.receive_message("acme", br#"{"messageId":"m1","role":"ROLE_USER","contextId":"case-42","parts":[{"text":"Refund order 123"}]}"#)?;
    /// # let m2 = store.receive_message("acme", br#"{"messageId":"m2","role":"ROLE_USER","contextId":"case-42","parts":[{"text":"Any news?"}]}"#)?;
    /// // Two messages in context "case-42"; the turn processes the second (m2).
    /// let framed = store.render_history("acme", "case-42", Some(m2.seq), Budget::default())?;
    /// assert!(framed.text.contains("| Refund order 123"));
    /// // The frame parses back: stored text can neither close it nor forge a turn.
    /// assert_eq!(render::parse(&framed.text)?.turns.len(), 1);
    /// // Before the context's first message there is nothing to show.
    /// assert!(store.render_history("acme", "case-42", Some(m1.seq), Budget::default())?.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn render_history(
        &self,
        tenant: &str,
        context_id: &str,
        before: Option<u64>,
        budget: Budget,
    ) -> Result<Rendered> {
        budget.check()?;
        let nonce = render::new_nonce()?;
        let room = budget
            .max_bytes
            .saturating_sub(render::frame_overhead(&nonce));
        let (turns, omitted) = self.with_history(
            tenant,
            context_id,
            before,
            &budget,
            |records, refs, total| {
                // Each turn is rendered once, as it is read; its length is its cost.
                let rendered = turns(records, refs).map(|t| {
                    t.map(|t| {
                        let text = render::turn_text(&nonce, &t);
                        (t, text)
                    })
                });
                render::choose(
                    rendered,
                    total,
                    budget.max_messages,
                    room,
                    |(_, text)| text.len(),
                    |(turn, _)| {
                        let cost = |t: &Turn| render::turn_cost(&nonce, t);
                        let turn = render::cut_task_to_fit(turn, room, cost);
                        let turn = render::cut_to_fit(turn, room, cost);
                        let text = render::turn_text(&nonce, &turn);
                        (turn, text)
                    },
                )
            },
        )?;
        let texts: Vec<String> = turns.into_iter().map(|(_, text)| text).collect();
        Ok(render::frame(&texts, omitted, &nonce))
    }

    /// What the store knows of one context.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// store.append_message("acme", "case-42", b"hello")?;
    /// let info = store.context_info("acme", "case-42")?;
    /// assert_eq!((info.context_id.as_str(), info.messages), ("case-42", 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn context_info(&self, tenant: &str, context_id: &str) -> Result<ContextInfo> {
        let slot = self.visible_slot(tenant, context_id)?;
        info_of(&slot, self.options.retention).ok_or(Error::ContextNotFound)
    }

    /// One page of the tenant's contexts, oldest first activity first.
    ///
    /// `page_size` is 1 to [`MAX_PAGE_SIZE`]; `page_token` is `None` for the
    /// first page, then the previous page's `next_page_token`.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// for id in ["a", "b", "c"] {
    ///     store.append_message("acme", id, b"hello")?;
    /// }
    /// let first = store.list_contexts("acme", 2, None)?;
    /// assert_eq!(first.contexts.len(), 2);
    /// let rest = store.list_contexts("acme", 2, first.next_page_token.as_deref())?;
    /// assert_eq!((rest.contexts.len(), rest.next_page_token), (1, None));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn list_contexts(
        &self,
        tenant: &str,
        page_size: usize,
        page_token: Option<&str>,
    ) -> Result<ContextPage> {
        check_page_size(page_size, "page_size")?;
        let mut cursor = page_token.map(decode_page_token).transpose()?;
        // Listed contexts that expired are passed over: a page is filled
        // with live ones, and is empty only when the listing is over.
        let mut page: Vec<(u64, ContextKey, ContextInfo)> = Vec::new();
        while page.len() <= page_size {
            let batch = self.index.tenant_page(tenant, cursor, page_size + 1);
            let Some((ms, slot)) = batch.last() else {
                break;
            };
            cursor = Some((*ms, slot.key));
            page.extend(batch.iter().filter_map(|(ms, slot)| {
                info_of(slot, self.options.retention).map(|info| (*ms, slot.key, info))
            }));
        }
        let more = page.len() > page_size;
        page.truncate(page_size);
        let next_page_token = match page.last() {
            Some((ms, key, _)) if more => Some(encode_page_token(*ms, key)),
            _ => None,
        };
        Ok(ContextPage {
            contexts: page.into_iter().map(|(_, _, info)| info).collect(),
            next_page_token,
        })
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
    pub fn replication(&self) -> Option<crate::replicate::ReplicationStatus> {
        self.replicator
            .as_ref()
            .map(|r| r.status(self.synced_position()))
    }

    /// Ships everything synced so far and publishes a restore point now,
    /// waiting up to `timeout` (the thread otherwise does so every
    /// [`Replicate::interval`](crate::replicate::Replicate::interval)).
    /// Fails if the store does not replicate, the round fails (its error
    /// says why; the thread retries), or it does not end in time.
    #[cfg(feature = "replicate")]
    pub fn ship_replica(
        &self,
        timeout: std::time::Duration,
    ) -> Result<crate::replicate::ReplicationStatus> {
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

/// Turns of `items`, newest first, each read only when asked for.
fn turns<'a, 'r>(
    records: &'a mut ContextRecords<'r>,
    items: &'a [HistoryItem],
) -> impl Iterator<Item = Result<Turn>> + use<'a, 'r> {
    items.iter().rev().map(move |item| {
        if item.chunks > 0 {
            return artifact_turn(records, item);
        }
        records.message(item.loc, |view, blob| {
            let mut turn = render::turn_from_message(view.seq, blob);
            // The task the store put the message in, which a client's
            // first message cannot name itself.
            if let Some(task) = view.kind.task_id() {
                turn.task_id = Some(task.to_string());
            }
            turn
        })
    })
}

/// The short line of an artifact: its name or id, and its chunk count.
fn artifact_turn(records: &mut ContextRecords, item: &HistoryItem) -> Result<Turn> {
    records.record(item.loc, |body, blob| {
        let artifact: Option<crate::a2a::Artifact> = serde_json::from_slice(blob).ok();
        let label = match &artifact {
            Some(a) => match &a.name {
                Some(name) => format!("artifact {name:?} ({})", a.artifact_id),
                None => format!("artifact {}", a.artifact_id),
            },
            None => "artifact".to_string(),
        };
        Turn {
            position: body.seq,
            role: render::Role::Agent,
            artifact: true,
            task_id: body.kind.task_id().map(str::to_string),
            task_cut: 0,
            speaker: None,
            text: format!("{label}, {} chunk(s)", item.chunks),
            cut: 0,
        }
    })
}

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

fn info_of(slot: &ContextSlot, retention: Option<std::time::Duration>) -> Option<ContextInfo> {
    let state = slot.state.read();
    if state.life(now_ms(), retention) != Life::Live {
        return None;
    }
    let meta = state.meta.as_ref()?;
    Some(ContextInfo {
        context_id: meta.context_id().to_string(),
        key: slot.key,
        first_activity_ms: meta.first_ms,
        last_activity_ms: state.last_ms,
        messages: state.history_len(),
        tasks: state.task_count() as u64,
    })
}

/// Reads the log into `index` (from the checkpoint's position, if given).
/// With a checkpoint `loaded`, what [`recovery::look`] found meanwhile, if
/// it ran.
fn scan_log(
    dir: &Path,
    options: &Options,
    index: &Index,
    segments: &Segments,
    loaded: Option<(checkpoint::Loaded, Option<Result<Layout>>)>,
) -> Result<(crate::log::recovery::Recovered, OpenReport)> {
    let (loaded, looked) = match loaded {
        Some((loaded, looked)) => (Some(loaded), looked),
        None => (None, None),
    };
    // Of the output of a merge that switched the log after the checkpoint
    // was written (`recover` reads it whole, `rewritten`), the records the
    // checkpoint holds are re-pointed there, the others replayed.
    let mut moved = Moved::default();
    let mut report = OpenReport::default();
    let resumed = loaded.is_some();
    let mut served = loaded.as_ref().map_or(0, |l| l.records);
    let mut foreign = 0u64;
    let recovered = recover(
        dir,
        options,
        loaded.as_ref().map(|l| l.resume),
        looked,
        segments,
        &mut report,
        |loc, payload, rewritten| {
            // Viewed, not decoded: most of a merge's output is held already.
            if rewritten && record::view(payload).is_ok_and(|v| moved.held(index, &v, loc)) {
                return Ok(());
            }
            match record::decode(payload).map_err(|e| e.0)? {
                Decoded::ForeignNamespace(_) => foreign += 1,
                Decoded::Current { key, body, blob } => {
                    let hints = Hints::of(&body, blob);
                    apply_recovered(index, key, body, loc, options.recovery, resumed, hints)?;
                    served += 1;
                }
            }
            Ok(())
        },
    )?;
    if recovered.after_switch {
        // A mismatch sets the checkpoint aside: the open reads everything.
        match moved.repoint(index, segments, recovered.active.id) {
            Ok(count) => report.repointed = count,
            Err(why) => report.checkpoint_ignored = Some(why),
        }
    }
    report.replayed = served - loaded.as_ref().map_or(0, |l| l.records);
    report.records = served;
    report.foreign_namespace_records = foreign;
    report.contexts = index.visible_contexts();
    report.from_checkpoint = loaded.is_some();
    Ok((recovered, report))
}

/// The records of a merge's output (one that switched the log after the
/// checkpoint was written) that the loaded index holds already, at their
/// places in the merge's inputs: per context, in the output's order, the
/// seq and new place of each. A merge writes each context's records
/// together, so a context's come in one group.
#[derive(Default)]
struct Moved {
    groups: Vec<(Arc<ContextSlot>, Vec<SeqAt>)>,
}

/// A record's seq and place.
type SeqAt = (u64, RecordLoc);

impl Moved {
    /// Whether the record `view`, at `loc` in the merge's output, is one
    /// the index holds already (of a context it holds live, with a seq
    /// below the context's next): then it is noted, to be re-pointed.
    fn held(&mut self, index: &Index, view: &record::View<'_>, loc: RecordLoc) -> bool {
        if view.kind == record::ViewKind::Gone {
            return false;
        }
        let slot = match self.groups.last() {
            Some((slot, _)) if slot.key == view.key => slot.clone(),
            _ => match index.get(&view.key) {
                Some(slot) => slot,
                None => return false,
            },
        };
        {
            let state = slot.state.read();
            if state.meta.is_none() || state.gone.is_some() || view.seq >= state.next_seq {
                return false;
            }
        }
        match self.groups.last_mut() {
            Some((last, moved)) if Arc::ptr_eq(last, &slot) => moved.push((view.seq, loc)),
            _ => self.groups.push((slot, vec![(view.seq, loc)])),
        }
        true
    }

    /// Points each context's records that lie in segments no longer in the
    /// log (a merge's inputs) at their noted places in its output; returns
    /// how many. Why not (the open then reads the whole log) if they do not
    /// match one for one, or if any record the index holds is still in a
    /// segment the log no longer has.
    fn repoint(
        &self,
        index: &Index,
        segments: &Segments,
        active: u64,
    ) -> std::result::Result<u64, String> {
        // The sealed segments `recover` found, and the one it hands the
        // writer.
        let mut present = segments.ids();
        present.push(active);
        present.sort_unstable();
        let gone = |segment: u64| present.binary_search(&segment).is_err();
        let mismatch = |reason: String| {
            format!("the checkpoint describes the log before a merge switched it, and {reason}")
        };
        let mut count = 0;
        let mut matched = Vec::with_capacity(self.groups.len());
        for (slot, moved) in &self.groups {
            let mut state = slot.state.write();
            // Deleted after the switch (in the tail): nothing to re-point.
            if state.gone.is_some() {
                continue;
            }
            if !state.repoint(&gone, moved) {
                return Err(mismatch(format!(
                    "context {} has other records in the merge's inputs than its output holds",
                    slot.key
                )));
            }
            count += moved.len() as u64;
            matched.push(slot.number);
        }
        // The contexts just re-pointed hold nothing in the inputs any more;
        // every other must hold nothing there either.
        matched.sort_unstable();
        for slot in index.all_slots() {
            if matched.binary_search(&slot.number).is_ok() {
                continue;
            }
            let state = slot.state.read();
            if state.gone.is_none() {
                if let Some(loc) = state.record_locs().find(|loc| gone(loc.segment)) {
                    return Err(mismatch(format!(
                        "a record it holds at offset {} of segment {} is not in the merge's output",
                        loc.offset, loc.segment
                    )));
                }
            }
        }
        Ok(count)
    }
}

/// Rebuilds the index from one recovered record; a refusal names what is wrong.
fn apply_recovered(
    index: &Index,
    key: ContextKey,
    body: RecordBody,
    loc: RecordLoc,
    mode: RecoveryMode,
    from_checkpoint: bool,
    hints: Hints,
) -> std::result::Result<(), String> {
    let slot = index.get_or_insert(&key);
    let mut state = slot.state.write();
    // Once a context is gone its later records are skipped. A merge writes
    // a tombstone for a gone context's records in the segments it merges,
    // and its records in later segments (up to its delete record, if it was
    // deleted) stay there until a later merge drops them; a tombstone after
    // a tombstone changes nothing.
    if state.gone.is_some() {
        return Ok(());
    }
    // A merge's tombstone (it names its context) stands at the seq of the
    // last record it replaced: it opens and closes a context none of whose
    // records came before it, or closes one whose earlier records lie in
    // runs before the merged segments.
    if matches!(body.kind, RecordKind::Gone { .. }) && body.opens.is_some() {
        check_owner(&body, key)?;
        if state.meta.is_none() {
            apply(index, &slot, &mut state, &body, loc, hints);
            return Ok(());
        }
        // Below the seq expected: in a log read whole, damage; after a
        // checkpoint, the tombstone of a merge that switched the log after
        // it was written, of records it holds (DESIGN.md §4): it closes the
        // context all the same.
        if body.seq < state.next_seq && !from_checkpoint {
            return Err(format!(
                "a tombstone at seq {} where the context expects {} or later",
                body.seq, state.next_seq
            ));
        }
        let closes = RecordBody {
            seq: body.seq.max(state.next_seq),
            opens: None,
            ..body
        };
        apply(index, &slot, &mut state, &closes, loc, hints);
        return Ok(());
    }
    // A checkpoint taken while appends were in flight resumes from the
    // earliest of them: records after it that it already holds come again.
    if from_checkpoint && state.meta.is_some() && body.seq < state.next_seq {
        return Ok(());
    }
    if body.seq > MAX_SEQ {
        return Err(format!(
            "record seq {} is past {MAX_SEQ}, the most a context holds",
            body.seq
        ));
    }
    // When damaged records are being skipped, a gap in a context's order is
    // expected; going backwards never is.
    let gap_ok = mode == RecoveryMode::SkipCorrupt && body.seq > state.next_seq;
    if body.seq != state.next_seq && !gap_ok {
        return Err(format!(
            "record seq {} where the context expects {}",
            body.seq, state.next_seq
        ));
    }
    check_owner(&body, key)?;
    match &body.opens {
        Some(_) if state.meta.is_some() => return Err("a context opened twice".into()),
        None if state.meta.is_none() => {
            return Err("a record of a context with no opening record".into())
        }
        _ => {}
    }
    check_recovered(&state, &body)?;
    apply(index, &slot, &mut state, &body, loc, hints);
    Ok(())
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

/// A record that names its context's owner must hash to the record's key:
/// a context's ownership is proven by its own bytes.
fn check_owner(body: &RecordBody, key: ContextKey) -> std::result::Result<(), String> {
    match &body.opens {
        Some(name) if ContextKey::derive_unchecked(&name.tenant, &name.context_id) != key => {
            Err("the opening record's key does not match its tenant and contextId".into())
        }
        _ => Ok(()),
    }
}

/// Checks a recovered record against its context's state, as the live path
/// checked it before appending: the task it names exists (or, for one that
/// opens a task, does not yet), and the lifecycle allows it.
fn check_recovered(state: &ContextState, body: &RecordBody) -> std::result::Result<(), String> {
    let (task_id, op) = match &body.kind {
        RecordKind::Message { task: None } | RecordKind::Gone { .. } => return Ok(()),
        RecordKind::Hide { from_seq, to_seq } => {
            return if state.task_count() > 0 {
                Err("a hide record in a context with tasks".into())
            } else if from_seq > to_seq || *to_seq > body.seq {
                Err(format!(
                    "a hide record at seq {} of seqs {from_seq}..{to_seq}",
                    body.seq
                ))
            } else {
                Ok(())
            };
        }
        RecordKind::Message { task: Some(link) } if link.opens_task => {
            return match state.task(&link.task_id) {
                Some(_) => Err(format!("task {:?} opened twice", link.task_id)),
                None => Ok(()),
            };
        }
        RecordKind::Push { task_id, .. } => {
            // A config names a task of its context, in any state (its
            // delivery outlives the task's end).
            return match state.task(task_id) {
                Some(_) => Ok(()),
                None => Err(format!("a push record of unknown task {task_id:?}")),
            };
        }
        RecordKind::Message { task: Some(link) } => (&link.task_id, Op::Message),
        RecordKind::Status { task_id, state, .. } => (task_id, Op::Status(*state)),
        RecordKind::Artifact {
            task_id,
            artifact_id,
            append,
            ..
        } => (
            task_id,
            Op::Artifact {
                artifact_id,
                append: *append,
            },
        ),
    };
    let task = state
        .task(task_id)
        .ok_or_else(|| format!("an event of unknown task {task_id:?}"))?;
    task.check(op).map_err(|e| e.to_string())
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

fn encode_page_token(first_ms: u64, key: &ContextKey) -> String {
    let mut tail = vec![key.version()];
    tail.extend_from_slice(key.digest());
    encode_cursor(first_ms, &tail)
}

fn decode_page_token(token: &str) -> Result<(u64, ContextKey)> {
    let (ms, tail) = decode_cursor(token, "page_token")?;
    match tail.split_first() {
        Some((&version, digest)) => match <[u8; 32]>::try_from(digest) {
            Ok(digest) => Ok((ms, ContextKey::from_parts(version, digest))),
            Err(_) => Err(bad_cursor("page_token")),
        },
        None => Err(bad_cursor("page_token")),
    }
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

fn check_options(o: &Options) -> Result<()> {
    if !(4096..=(1 << 31)).contains(&o.segment_bytes) {
        return Err(Error::InvalidParams {
            field: "segment_bytes",
            reason: format!("{} is not between 4 KiB and 2 GiB", o.segment_bytes),
        });
    }
    if !(64..=MAX_RECORD_BYTES).contains(&o.max_record_bytes) {
        return Err(Error::InvalidParams {
            field: "max_record_bytes",
            reason: format!(
                "{} is not between 64 and {MAX_RECORD_BYTES}",
                o.max_record_bytes
            ),
        });
    }
    Ok(())
}

/// How many times a read-only open looks again at a directory a writer
/// changed under it.
const READ_ONLY_TRIES: u64 = 40;

/// Whether a read-only open's error may come from a writer's change in the
/// middle of it (a file gone, files that do not match each other yet).
fn moved_under(e: &Error) -> bool {
    match e {
        Error::Io { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
        Error::MissingRecords { .. } | Error::Corrupt { .. } => true,
        _ => false,
    }
}

/// Whether `dir` holds a store (an identity file or a segment). A path that
/// is missing is no store; one that cannot be listed (a file, a directory
/// without permission) is an error with its cause.
fn holds_store(fs: &dyn Fs, dir: &Path) -> Result<bool> {
    match fs.list(dir) {
        Ok(names) => Ok(names.iter().any(|(name, _)| {
            name == crate::log::identity::IDENTITY
                || crate::log::segments::segment_id_of(name).is_some()
        })),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        // Not "no store here": the path cannot hold one, say why.
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => Err(Error::io(
            "open the store directory (the path, or a part of it, is a file)",
            dir,
            e,
        )),
        Err(e) => Err(Error::io("list the store directory", dir, e)),
    }
}

fn create_dir(fs: &dyn Fs, dir: &Path) -> Result<()> {
    if fs.exists(dir) {
        return Ok(());
    }
    fs.create_dir_all(dir)
        .map_err(|e| Error::io("create the store directory", dir, e))?;
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        crate::log::segments::sync_dir(fs, parent)?;
    }
    Ok(())
}

/// Takes the store's lock, retrying a held one for up to `wait` (see
/// [`Options::lock_wait`]): 1 ms between tries at first, doubling up to
/// 32 ms.
fn lock_dir(fs: &dyn Fs, dir: &Path, wait: std::time::Duration) -> Result<Box<dyn Send + Sync>> {
    let path: PathBuf = dir.join(LOCK_FILE);
    let deadline = std::time::Instant::now() + wait;
    let mut pause = std::time::Duration::from_millis(1);
    loop {
        match fs.lock(&path) {
            Ok(guard) => return Ok(guard),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let now = std::time::Instant::now();
                if now >= deadline {
                    tracing::warn!(path = %path.display(), ?wait, "the store is locked by another opener");
                    return Err(Error::Locked { path });
                }
                if pause == std::time::Duration::from_millis(1) {
                    tracing::debug!(path = %path.display(), ?wait, "the store's lock is held; waiting");
                }
                std::thread::sleep(pause.min(deadline - now));
                pause = (pause * 2).min(std::time::Duration::from_millis(32));
            }
            Err(e) => return Err(Error::io("lock the store", &path, e)),
        }
    }
}

/// Tells a tracing subscriber (if there is one) what an open found and
/// decided: the same facts as the [`OpenReport`], as they happen.
fn trace_open(dir: &Path, report: &OpenReport) {
    let dir = dir.display();
    tracing::debug!(
        %dir,
        records = report.records,
        contexts = report.contexts,
        from_checkpoint = report.from_checkpoint,
        replayed = report.replayed,
        repointed = report.repointed,
        "store opened"
    );
    if let Some(t) = &report.torn_tail {
        tracing::info!(%dir, segment = t.segment, offset = t.offset, bytes = t.bytes, "cut a torn tail (bytes never acknowledged)");
    }
    if let Some(why) = &report.checkpoint_ignored {
        tracing::warn!(%dir, reason = %why, "checkpoint not used; the whole log was read");
    }
    if report.identity_restored {
        tracing::warn!(%dir, store = %report.store_id, "IDENTITY was missing or damaged; written again from the store's files");
    }
    for s in &report.skipped {
        tracing::warn!(%dir, segment = s.segment, offset = s.offset, reason = %s.reason, "skipped damaged bytes");
    }
    for l in &report.lost {
        tracing::warn!(%dir, segment = l.segment, expected = l.expected, actual = l.actual, reason = %l.reason, "acknowledged records are missing");
    }
    for f in &report.foreign {
        tracing::warn!(%dir, path = %f.path.display(), reason = %f.reason, "left another store's file unread");
    }
    if !report.removed_segments.is_empty() {
        tracing::info!(%dir, segments = ?report.removed_segments, "removed segments left by a crash or an interrupted compaction");
    }
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
