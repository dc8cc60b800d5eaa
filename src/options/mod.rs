//! How a store is opened: durability, segment size, recovery.

#[cfg(feature = "replicate")]
mod replicate;
#[cfg(feature = "replicate")]
pub use replicate::Replicate;
#[cfg(feature = "replicate")]
pub(crate) use replicate::Target;

/// When an append is on disk relative to the moment its call returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Durability {
    /// Each append is written and `fdatasync`ed before its call returns.
    #[default]
    Sync,
    /// The same guarantee as `Sync`, but appenders that run at the same time
    /// share one `fdatasync`: one of them (the leader) syncs everything written
    /// so far, outside every lock, while the others keep appending.
    GroupCommit,
    /// Appends are written to the operating system but not synced. A crash of
    /// the machine (not of the process) may lose every append since the last
    /// [`Store::sync`](crate::Store::sync), segment rotation or clean close.
    Buffered,
}

/// The largest record payload the format allows (16 MiB).
pub const MAX_RECORD_BYTES: u32 = 16 << 20;

/// The longest [`Options::commit_linger`] a store takes (a longer one is
/// clamped to it): past it, a sync's wait would be felt as a stall.
pub const MAX_COMMIT_LINGER: std::time::Duration = std::time::Duration::from_millis(10);

/// What opening does with a damaged record before the torn tail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RecoveryMode {
    /// Refuse to open, naming the segment and offset (the default).
    #[default]
    Strict,
    /// Skip damaged byte ranges, serve every record that passes its checksum,
    /// and list what was skipped in the [`OpenReport`](crate::OpenReport).
    SkipCorrupt,
}

/// Whether a context may run several turns at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum TurnPolicy {
    /// Any number of turns at once (A2A allows parallel tasks in a context):
    /// [`Store::begin_turn`](crate::Store::begin_turn) always succeeds. The default.
    #[default]
    Parallel,
    /// One active turn per context: a second `begin_turn` while the first
    /// guard lives fails at once with `ContextBusy` instead of queueing.
    SingleActive {
        /// A lease older than this is treated as released, so a stuck
        /// handler cannot block its context forever (`None`: never expires).
        lease: Option<std::time::Duration>,
    },
}

/// Options for [`Store::open`](crate::Store::open).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Options {
    /// Durability of appends. Default: [`Durability::Sync`].
    pub durability: Durability,
    /// A segment is sealed and a new one started once it reaches this many
    /// bytes. Default: 16 MiB; at least 4 KiB.
    pub segment_bytes: u64,
    /// How far ahead of the last record the active segment's file is
    /// zero-filled, in bytes (0: not at all). A sync after an append that
    /// grew the file must also commit the file's new size (a journal commit
    /// on ext4); an append that overwrites blocks already written syncs its
    /// data only: 30-45 % less time per durable append, measured on ext4.
    /// Zero-filling costs one larger sync per this many bytes appended, and
    /// until the store closes the newest segment ends in up to this many
    /// zeros. Default: 1 MiB.
    pub preallocate: u64,
    /// The largest record payload accepted, in bytes. Default and maximum:
    /// [`MAX_RECORD_BYTES`](crate::MAX_RECORD_BYTES) (16 MiB).
    pub max_record_bytes: u32,
    /// What to do with damaged records found on open. Default: `Strict`.
    pub recovery: RecoveryMode,
    /// One turn per context, or several. Default: [`TurnPolicy::Parallel`].
    pub turns: TurnPolicy,
    /// A message joins a task only while the task waits for one
    /// (`TASK_STATE_INPUT_REQUIRED` or `TASK_STATE_AUTH_REQUIRED`): one
    /// sent while its turn is due or running (SUBMITTED, WORKING) is refused
    /// with [`Error::UnsupportedOperation`](crate::Error::UnsupportedOperation)
    /// and nothing is stored. The join moves the task to WORKING in the same
    /// critical section, so of two answers sent at once only one joins: a
    /// task's turns never interleave (what `ctxlog-server` needs, and sets).
    /// Default: `false` (a message joins any task that is not terminal).
    pub one_turn_per_task: bool,
    /// Contexts idle (no record appended) for at least this long expire: they
    /// answer as missing ones, are never listed, and their ids are refused
    /// (`ContextRejected`, reason: expired). Default: `None`, nothing expires.
    pub retention: Option<std::time::Duration>,
    /// While the store runs, write the index checkpoint again once this many
    /// bytes were appended since the last one (and at least the last
    /// checkpoint's size, so that checkpoints never write more than the log
    /// does), so that a reopen after a crash reads only the log after it.
    /// Default: 64 MiB; `None`: only at a clean close.
    pub checkpoint_interval: Option<u64>,
    /// How long an open waits for the store's lock before it reports
    /// [`Error::Locked`](crate::Error::Locked). A lock another process
    /// holds is held as long as it runs; but a store this process just
    /// closed stays locked for a moment while a child process that another
    /// thread is starting (between its fork and its exec) still shares the
    /// lock file, and an open retrying for a short while sees that end.
    /// Default: 500 ms.
    pub lock_wait: std::time::Duration,
    /// With [`Durability::GroupCommit`], while more appenders wait for a
    /// sync than there are CPUs, how many times each yields its CPU (to the
    /// others, and to the syncer) before it sleeps until the sync lands. A
    /// yielder sees the sync land without a wake-up and a context switch,
    /// which pays when the waiting appenders are most of what runs (many
    /// threads calling the store); a program whose other work needs the
    /// CPU meanwhile (a server parsing requests on the same cores) loses
    /// by it and sets 0. Default: 64 (see `cargo bench --bench concurrency`).
    pub commit_yields: u32,
    /// With [`Durability::GroupCommit`], how long a sync waits before it
    /// starts when it follows the one before back to back (appends came
    /// in while that one ran, so more are likely on their way): the
    /// appends that come in meanwhile share its `fdatasync`. Each sync
    /// costs CPU beyond the disk's time (on a virtual machine, two exits
    /// to the host), so under many concurrent writers fewer, larger syncs
    /// leave more CPU for the writers' own work; with a few, the wait is
    /// added to each write's latency and nothing is gained. A sync after
    /// the syncer was idle never waits, nor one asked for by a single
    /// appender (so a lone appender never does). Clamped to
    /// [`MAX_COMMIT_LINGER`]; changed on an open store with
    /// [`Store::set_commit_linger`](crate::Store::set_commit_linger).
    /// Default: zero (never wait).
    pub commit_linger: std::time::Duration,
    /// Whether [`Store::open`](crate::Store::open) may create the store:
    /// `true` (the default) makes the directory and a new store in it when
    /// there is none; `false` opens an existing store only and fails with
    /// [`Error::StoreNotFound`](crate::Error::StoreNotFound) otherwise (a
    /// mistyped path then never becomes a new, empty store).
    pub create: bool,
    /// The file system the store reads and writes. Default: the operating
    /// system's ([`OsFs`](crate::fs::OsFs)); tests and fuzzers can pass an
    /// in-memory one that simulates crashes ([`MemFs`](crate::fs::MemFs)),
    /// or wrap either to fail any call ([`FaultyFs`](crate::fs::FaultyFs)).
    pub fs: std::sync::Arc<dyn crate::fs::Fs>,
    /// How the store keeps its log's layout: merging sealed segments into
    /// runs that hold each context's records together, so history reads
    /// stay fast with no one calling [`compact`](crate::Store::compact)
    /// (see [`Store::maintain`](crate::Store::maintain)). Default:
    /// [`Maintenance::default`], on a background thread; `None`: never
    /// (only `compact` rewrites the log).
    pub maintenance: Option<Maintenance>,
    /// Where the store replicates its log, continuously, on a background
    /// thread (feature `replicate`; see [`crate::replicate`]). Default:
    /// `None`. A read-only open never replicates.
    #[cfg(feature = "replicate")]
    pub replicate: Option<Replicate>,
    /// Set only by [`Store::open_read_only`](crate::Store::open_read_only):
    /// recovery then changes nothing on disk.
    pub(crate) read_only: bool,
}

/// The policy of the store's self-maintenance (see
/// [`Store::maintain`](crate::Store::maintain)).
///
/// # Examples
///
/// ```
/// use ctxlog::{Maintenance, Options};
/// // Maintenance at most 16 MiB/s, and never on its own thread: the
/// // program calls `Store::maintain` when it has time.
/// let options = Options::default().maintenance(Some(
///     Maintenance::default().background(false).bytes_per_second(16 << 20),
/// ));
/// assert!(!options.maintenance.unwrap().background);
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Maintenance {
    /// Run it on a thread of the store's own, from open to close. Default:
    /// `true`; `false`: only when the program calls
    /// [`Store::maintain`](crate::Store::maintain).
    pub background: bool,
    /// The most bytes a merge writes per second (it sleeps between chunks
    /// of 128 KiB to keep to it), so that appends and reads keep their
    /// latency. Beside it, the thread's merges give way to durable appends
    /// on their own: each 8 MiB synced waits until a few hundred appends'
    /// syncs have ended or appends pause (250 ms at most), and the thread
    /// yields its CPU every 64 KiB of work. Default: 64 MiB/s.
    pub bytes_per_second: u64,
    /// Merge the sealed segments written since the last merge once there
    /// are this many of them. Default: 4.
    pub tail_segments: usize,
    /// A store that has seen no append for this long is idle: the segments
    /// written since the last merge are then merged however few they are
    /// (a segment being written is sealed for it once it holds a quarter of
    /// [`Options::segment_bytes`]). Default: 1 s.
    pub idle_after: std::time::Duration,
    /// A merge starts only if, with its output written beside its inputs,
    /// the store's files stay within this many times the live records'
    /// bytes (or it merges one segment's worth at most). Default: 1.3.
    pub max_space: f64,
    /// A run in which more than this share of the bytes belong to deleted
    /// or expired contexts is rewritten without them. Default: 0.1.
    pub max_garbage: f64,
    /// How often the thread looks for work when it found none. Default:
    /// 250 ms.
    pub interval: std::time::Duration,
}

impl Maintenance {
    /// Sets [`background`](Self::background).
    pub fn background(mut self, on: bool) -> Self {
        self.background = on;
        self
    }

    /// Sets [`bytes_per_second`](Self::bytes_per_second).
    pub fn bytes_per_second(mut self, bytes: u64) -> Self {
        self.bytes_per_second = bytes;
        self
    }

    /// Sets [`tail_segments`](Self::tail_segments).
    pub fn tail_segments(mut self, segments: usize) -> Self {
        self.tail_segments = segments;
        self
    }

    /// Sets [`idle_after`](Self::idle_after).
    pub fn idle_after(mut self, idle: std::time::Duration) -> Self {
        self.idle_after = idle;
        self
    }

    /// Sets [`max_space`](Self::max_space).
    pub fn max_space(mut self, times_live: f64) -> Self {
        self.max_space = times_live;
        self
    }

    /// Sets [`max_garbage`](Self::max_garbage).
    pub fn max_garbage(mut self, share: f64) -> Self {
        self.max_garbage = share;
        self
    }

    /// Sets [`interval`](Self::interval).
    pub fn interval(mut self, every: std::time::Duration) -> Self {
        self.interval = every;
        self
    }
}

impl Default for Maintenance {
    fn default() -> Self {
        Self {
            background: true,
            bytes_per_second: 64 << 20,
            tail_segments: 4,
            idle_after: std::time::Duration::from_secs(1),
            max_space: 1.3,
            max_garbage: 0.1,
            interval: std::time::Duration::from_millis(250),
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Self {
            durability: Durability::Sync,
            segment_bytes: 16 << 20,
            preallocate: 1 << 20,
            max_record_bytes: MAX_RECORD_BYTES,
            recovery: RecoveryMode::Strict,
            turns: TurnPolicy::Parallel,
            retention: None,
            checkpoint_interval: Some(64 << 20),
            lock_wait: std::time::Duration::from_millis(500),
            commit_yields: 64,
            one_turn_per_task: false,
            commit_linger: std::time::Duration::ZERO,
            create: true,
            maintenance: Some(Maintenance::default()),
            fs: std::sync::Arc::new(crate::fs::OsFs),
            #[cfg(feature = "replicate")]
            replicate: None,
            read_only: false,
        }
    }
}

impl Options {
    /// Sets the file system (see [`Options::fs`]).
    pub fn fs(mut self, fs: std::sync::Arc<dyn crate::fs::Fs>) -> Self {
        self.fs = fs;
        self
    }

    /// Sets the durability.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// Sets the segment size at which the log rotates.
    pub fn segment_bytes(mut self, bytes: u64) -> Self {
        self.segment_bytes = bytes;
        self
    }

    /// Sets how far ahead the active segment is zero-filled (0: not at all).
    pub fn preallocate(mut self, bytes: u64) -> Self {
        self.preallocate = bytes;
        self
    }

    /// Sets the largest accepted record payload.
    pub fn max_record_bytes(mut self, bytes: u32) -> Self {
        self.max_record_bytes = bytes;
        self
    }

    /// Sets the retention policy (`None`: keep every context).
    pub fn retention(mut self, idle: Option<std::time::Duration>) -> Self {
        self.retention = idle;
        self
    }

    /// Sets the checkpoint interval (`None`: checkpoint only at close).
    pub fn checkpoint_interval(mut self, bytes: Option<u64>) -> Self {
        self.checkpoint_interval = bytes;
        self
    }

    /// Sets how long an open waits for a held lock (see [`Options::lock_wait`]).
    pub fn lock_wait(mut self, wait: std::time::Duration) -> Self {
        self.lock_wait = wait;
        self
    }

    /// Sets whether a message joins only a task that waits for one (see
    /// [`Options::one_turn_per_task`]).
    pub fn one_turn_per_task(mut self, on: bool) -> Self {
        self.one_turn_per_task = on;
        self
    }

    /// Sets how often a group-commit waiter yields before it sleeps (see
    /// [`Options::commit_yields`]).
    pub fn commit_yields(mut self, yields: u32) -> Self {
        self.commit_yields = yields;
        self
    }

    /// Sets how long a back-to-back group-commit sync waits for more
    /// appends (see [`Options::commit_linger`]).
    pub fn commit_linger(mut self, linger: std::time::Duration) -> Self {
        self.commit_linger = linger;
        self
    }

    /// Sets whether an open may create the store (see [`Options::create`]).
    pub fn create(mut self, create: bool) -> Self {
        self.create = create;
        self
    }

    /// Sets the turn policy.
    pub fn turns(mut self, turns: TurnPolicy) -> Self {
        self.turns = turns;
        self
    }

    /// Sets the maintenance policy (see [`Options::maintenance`]).
    pub fn maintenance(mut self, maintenance: Option<Maintenance>) -> Self {
        self.maintenance = maintenance;
        self
    }

    /// Sets the recovery mode.
    pub fn recovery(mut self, recovery: RecoveryMode) -> Self {
        self.recovery = recovery;
        self
    }

    /// Replicates to `url` with the default settings (see
    /// [`Replicate::to`](crate::replicate::Replicate::to)).
    #[cfg(feature = "replicate")]
    pub fn replicate_to(self, url: &str) -> Self {
        self.replicate(Replicate::to(url))
    }

    /// Sets where and how the store replicates (see [`Options::replicate`]).
    #[cfg(feature = "replicate")]
    pub fn replicate(mut self, replicate: Replicate) -> Self {
        self.replicate = Some(replicate);
        self
    }
}
