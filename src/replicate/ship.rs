//! The shipper: a background thread that copies the log to the object
//! store and publishes restore points (DESIGN.md §13, "Shipping").

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::ObjectStore;
use parking_lot::{Condvar, Mutex};

use super::objects::{self, Entry, Point};
use super::shipper::Shipper;
use super::{Replicate, ReplicationStatus};
use crate::error::{Error, Result};
use crate::store::now_ms;
use crate::store::Shared;

/// How often, at most, restore points and retired objects past the
/// retention window are deleted (or each round, with a shorter window).
pub(crate) const COLLECT_EVERY: Duration = Duration::from_secs(60);
/// The longest wait between two tries after failures.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// What a store's writes ask of its replication (see [`Replicator::link`]).
pub(crate) struct Link {
    control: Arc<Control>,
    synchronous: bool,
    /// The lease in force (asynchronous replication only).
    lease: Option<Duration>,
    timeout: Duration,
    batch: u64,
}

impl Link {
    /// Whether another writer has claimed the replica.
    pub fn fenced(&self) -> bool {
        self.control.fenced.load(Ordering::Acquire)
    }

    /// Whether a write waits for a restore point to cover it.
    pub fn synchronous(&self) -> bool {
        self.synchronous
    }

    /// After a write that left the log synced up to `end`: with
    /// synchronous replication, waits until a restore point covers it;
    /// otherwise checks the lease (a write before the store's first round
    /// has ended waits for it) and asks for a round at once when a batch
    /// of bytes waits.
    pub fn after_write(&self, end: u64) -> Result<()> {
        let control = &self.control;
        if self.synchronous {
            return control.wait_covered(end, self.timeout);
        }
        if let Some(lease) = self.lease {
            control.check_lease(lease, self.timeout)?;
        }
        let covered = control.covered_position.load(Ordering::Acquire);
        if end.saturating_sub(covered) >= self.batch && !control.nudged.swap(true, Ordering::AcqRel)
        {
            let mut rounds = control.rounds.lock();
            rounds.asked = rounds.asked.max(rounds.started + 1);
            control.wake.notify_all();
        }
        Ok(())
    }
}

/// The shipper's thread, stopped (after a last shipment) when the store
/// closes.
pub(crate) struct Replicator {
    shared: Arc<Control>,
    synchronous: bool,
    /// The lease in force (asynchronous replication only).
    lease: Option<Duration>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What the store and the thread share.
pub(crate) struct Control {
    rounds: Mutex<Rounds>,
    /// Wakes the thread (a stop, or a round asked for).
    wake: Condvar,
    /// Signalled as each round ends.
    done: Condvar,
    pub status: Mutex<ReplicationStatus>,
    /// What the newest restore point covers: the synced log position of
    /// its view (read by every write), and when the view was taken (ms
    /// since the Unix epoch).
    covered_position: AtomicU64,
    covered_ms: AtomicU64,
    /// A write has asked for a round since the last one began.
    nudged: AtomicBool,
    /// Another writer has claimed the replica: the store refuses writes.
    fenced: AtomicBool,
    /// Replication has ended for good (fenced, or the replica is gone):
    /// under a lease, writes are refused at once.
    stopped: AtomicBool,
    /// The last round failed: the shipper backs off before the next.
    failing: AtomicBool,
    /// The clock of `confirmed`.
    base: Instant,
    /// When the last round that found no later writer's claim began, in ms
    /// since `base`, plus one (0: never).
    confirmed: AtomicU64,
    /// When the round under way (or the last) began, in ms since `base`.
    round_began: AtomicU64,
}

/// The thread's rounds, counted.
#[derive(Default)]
struct Rounds {
    stop: bool,
    /// A caller waits for the round with this number to end.
    asked: u64,
    started: u64,
    finished: u64,
}

impl Replicator {
    /// Starts the thread for `store`, replicating as `config` says.
    pub fn start(store: &Arc<Shared>, config: Replicate) -> Result<Self> {
        let (target, root) = config.open()?;
        let control = Arc::new(Control {
            rounds: Mutex::new(Rounds::default()),
            wake: Condvar::new(),
            done: Condvar::new(),
            status: Mutex::new(ReplicationStatus {
                target: config.describe(),
                ..ReplicationStatus::default()
            }),
            covered_position: AtomicU64::new(0),
            // Until a round reads the replica: as of the last round this
            // store saw succeed, or else its open.
            covered_ms: AtomicU64::new(
                store
                    .covered_hint(&config.describe())
                    .map_or_else(now_ms, |ms| ms.min(now_ms())),
            ),
            nudged: AtomicBool::new(false),
            fenced: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            failing: AtomicBool::new(false),
            base: Instant::now(),
            confirmed: AtomicU64::new(0),
            round_began: AtomicU64::new(0),
        });
        // The first round starts at once: it claims the replica, and
        // writes under a lease wait for it.
        control.rounds.lock().asked = 1;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::io("start the replication runtime", config.describe(), e))?;
        let describe = config.describe();
        let describe_for_marker = describe.clone();
        let (synchronous, lease) = (config.synchronous, config.lease_in_force());
        let thread = std::thread::Builder::new()
            .name("ctxlog-replicate".into())
            .spawn({
                let (store, control) = (store.clone(), control.clone());
                move || {
                    let _ended = Ended(&control);
                    let shipper =
                        Shipper::new(target, root, store.writer_store(), describe_for_marker);
                    run(&runtime, shipper, &store, &config, &control);
                }
            })
            .map_err(|e| Error::io("start the replication thread", describe, e))?;
        Ok(Self {
            shared: control,
            synchronous,
            lease,
            thread: Some(thread),
        })
    }

    /// How far the replica trails a store whose synced log position is
    /// `synced`: the bytes synced since the newest restore point's view,
    /// and, if there are any, how long ago that view was taken (the oldest
    /// of them is younger).
    pub fn status(&self, synced: u64) -> ReplicationStatus {
        let mut status = self.shared.status.lock().clone();
        let control = &self.shared;
        let first_round = control.rounds.lock().finished == 0;
        status.acknowledging = !control.fenced.load(Ordering::Acquire)
            && match (self.synchronous, self.lease) {
                // Its writes wait for a round that succeeds.
                (true, _) => !status.stopped && status.last_error.is_none(),
                (false, Some(lease)) => {
                    !status.stopped && (first_round || control.confirmed_within(lease))
                }
                (false, None) => true,
            };
        let position = self.shared.covered_position.load(Ordering::Acquire);
        status.lag_bytes = synced.saturating_sub(position);
        status.lag_ms = match status.lag_bytes {
            0 => 0,
            _ => now_ms().saturating_sub(self.shared.covered_ms.load(Ordering::Acquire)),
        };
        status
    }

    /// What the store's writes ask of replication as `config` says.
    pub fn link(&self, config: &Replicate) -> Link {
        Link {
            control: self.shared.clone(),
            synchronous: config.synchronous,
            lease: config.lease_in_force(),
            timeout: config.sync_timeout,
            batch: config.batch_bytes,
        }
    }

    /// Runs a round now (one that starts after this call) and waits up to
    /// `timeout` for it to end: then every byte synced before the call is
    /// in a restore point, unless the round failed.
    pub fn ship_now(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut rounds = self.shared.rounds.lock();
        let want = rounds.started + 1;
        rounds.asked = rounds.asked.max(want);
        self.shared.wake.notify_all();
        while rounds.finished < want {
            if rounds.stop {
                drop(rounds);
                let why = self.shared.status.lock().last_error.clone();
                return Err(Error::replica(
                    "ship the log now",
                    why.unwrap_or_else(|| "replication has stopped".into()),
                ));
            }
            if self
                .shared
                .done
                .wait_until(&mut rounds, deadline)
                .timed_out()
            {
                return Err(Error::replica(
                    "ship the log now",
                    format!("no round ended within {timeout:?}; see the replication status"),
                ));
            }
        }
        drop(rounds);
        match &self.shared.status.lock().last_error {
            Some(e) => Err(Error::replica("ship the log now", e.clone())),
            None => Ok(()),
        }
    }

    /// Ships what is left (within the close timeout) and stops the thread.
    pub fn stop(mut self) {
        self.shared.rounds.lock().stop = true;
        self.shared.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Control {
    /// A restore point now covers the synced log position `position` of a
    /// view taken at `taken_ms`.
    pub fn cover(&self, position: u64, taken_ms: u64) {
        self.covered_ms.store(taken_ms, Ordering::Release);
        self.covered_position.store(position, Ordering::Release);
    }

    /// A round that began at `began` found no later writer's claim.
    pub fn confirm(&self, began: Instant) {
        let ms = began.saturating_duration_since(self.base).as_millis();
        let ms = u64::try_from(ms).unwrap_or(u64::MAX - 1) + 1;
        self.confirmed.fetch_max(ms, Ordering::AcqRel);
    }

    /// How long the round under way (or the last one) has run.
    fn round_age(&self) -> Duration {
        let began = self.round_began.load(Ordering::Acquire);
        let now = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(now.saturating_sub(began))
    }

    /// Whether a round that began within `lease` found no later claim.
    fn confirmed_within(&self, lease: Duration) -> bool {
        match self.confirmed.load(Ordering::Acquire) {
            0 => false,
            at => {
                let now = self.base.elapsed().as_millis();
                now.saturating_sub(u128::from(at - 1)) <= lease.as_millis()
            }
        }
    }

    /// Fails unless a round that began within `lease` found no later
    /// writer's claim. Waits for a round to renew it while the shipper is
    /// sound: the store's first round (which claims the replica and, in a
    /// takeover, waits out the lease) up to `timeout` past the lease; a
    /// later one (after a quiet stretch) up to half the lease. Fails at
    /// once while the shipper backs off after a failure, or while a round
    /// has run longer than the lease (the object store hangs).
    fn check_lease(&self, lease: Duration, timeout: Duration) -> Result<()> {
        if self.stopped.load(Ordering::Acquire) {
            let why = self.status.lock().last_error.clone().unwrap_or_default();
            return Err(Error::replica(
                "acknowledge a write",
                format!(
                    "replication has stopped ({why}); the write is stored and durable on this \
                     disk, and no more is shipped"
                ),
            ));
        }
        if self.confirmed_within(lease) {
            return Ok(());
        }
        let mut rounds = self.rounds.lock();
        let want = rounds.started + 1;
        rounds.asked = rounds.asked.max(want);
        self.wake.notify_all();
        let hung = rounds.started > rounds.finished && self.round_age() > lease;
        if !hung && !self.failing.load(Ordering::Acquire) {
            let bound = match rounds.finished {
                0 => timeout.saturating_add(lease),
                _ => lease / 2,
            };
            let deadline = Instant::now() + bound;
            while !self.confirmed_within(lease)
                && !rounds.stop
                && rounds.finished < want
                && !self.failing.load(Ordering::Acquire)
                && !self.done.wait_until(&mut rounds, deadline).timed_out()
            {}
        }
        drop(rounds);
        if self.confirmed_within(lease) {
            return Ok(());
        }
        let why = self.status.lock().last_error.clone();
        Err(Error::replica(
            "acknowledge a write",
            format!(
                "this store has not confirmed within its lease ({lease:?}) that it is still its \
                 replica's writer{}; the write is stored and durable on this disk, and a \
                 resent A2A message is recognised: retry once the object store answers",
                why.map(|e| format!(" (last error: {e})"))
                    .unwrap_or_default()
            ),
        ))
    }

    /// The replica holds nothing of the store younger than `ms` (its
    /// newest point, found at a claim): the lag counts from then at most.
    pub fn trails_since(&self, ms: u64) {
        self.covered_ms.fetch_min(ms, Ordering::AcqRel);
    }

    fn covers(&self, end: u64) -> bool {
        self.covered_position.load(Ordering::Acquire) >= end
    }

    /// Returns once a restore point covers the synced log position `end`,
    /// asking for rounds until one does (appenders that wait together share
    /// them); fails past `timeout`, or if the thread has stopped.
    fn wait_covered(&self, end: u64, timeout: Duration) -> Result<()> {
        if self.covers(end) {
            return Ok(());
        }
        let deadline = Instant::now() + timeout;
        let mut rounds = self.rounds.lock();
        loop {
            if self.covers(end) {
                return Ok(());
            }
            if rounds.stop {
                return Err(Error::replica(
                    "confirm a write in the replica",
                    "replication has stopped (the store is closing, or its thread failed); the \
                     write is stored and durable on this disk",
                ));
            }
            rounds.asked = rounds.asked.max(rounds.started + 1);
            self.wake.notify_all();
            if self.done.wait_until(&mut rounds, deadline).timed_out() {
                if self.covers(end) {
                    return Ok(());
                }
                let why = self.status.lock().last_error.clone();
                return Err(Error::replica(
                    "confirm a write in the replica",
                    format!(
                        "no restore point covered it within {timeout:?}{}; the write is stored \
                         and durable on this disk but may be missing from the replica (a \
                         resent A2A message is recognised)",
                        why.map(|e| format!(" (last error: {e})"))
                            .unwrap_or_default()
                    ),
                ));
            }
        }
    }
}

/// Marks the thread ended however it ends (a panic in a dependency
/// included), so that no caller of `ship_now` waits for a round that will
/// never come.
struct Ended<'a>(&'a Control);

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        self.0.rounds.lock().stop = true;
        self.0.done.notify_all();
        if std::thread::panicking() {
            self.0.status.lock().last_error =
                Some("the replication thread stopped after a panic; reopen the store".into());
        }
    }
}

fn run(
    runtime: &tokio::runtime::Runtime,
    mut shipper: Shipper,
    store: &Shared,
    config: &Replicate,
    control: &Control,
) {
    let mut wait = config.interval;
    let mut failed = 0u32;
    loop {
        let (stopping, number) = {
            let mut rounds = control.rounds.lock();
            // Until the interval is up, or a round is asked for; after a
            // failure, only a stop cuts the backoff short.
            let until = Instant::now() + wait;
            while !rounds.stop
                && (rounds.asked <= rounds.started || failed > 0)
                && !control.wake.wait_until(&mut rounds, until).timed_out()
            {}
            rounds.started += 1;
            control.nudged.store(false, Ordering::Release);
            let began = u64::try_from(control.base.elapsed().as_millis()).unwrap_or(u64::MAX);
            control.round_began.store(began, Ordering::Release);
            (rounds.stop, rounds.started)
        };
        let end_round = || {
            control.rounds.lock().finished = number;
            control.done.notify_all();
        };
        if store.writer_poisoned() {
            control.status.lock().last_error =
                Some("the store's log is poisoned; nothing more is shipped".into());
            end_round();
            return;
        }
        // A takeover's first round waits out the lease besides.
        let timeout = match shipper.claimed() {
            true => config.round_timeout,
            false => config
                .round_timeout
                .saturating_add(config.lease_in_force().unwrap_or_default()),
        };
        let round = async {
            let view = store.log_view()?;
            shipper.round(view, store, config, control).await
        };
        let round = async {
            tokio::time::timeout(timeout, round)
                .await
                .unwrap_or_else(|_| {
                    Err(Error::replica(
                        "replicate",
                        format!(
                            "the object store did not finish a round within {timeout:?} (it \
                             hangs rather than answers)"
                        ),
                    ))
                })
        };
        let result = if stopping {
            runtime.block_on(async {
                tokio::time::timeout(config.close_timeout, round)
                    .await
                    .unwrap_or_else(|_| {
                        Err(Error::replica(
                            "ship the log's last bytes",
                            format!(
                                "the object store did not take them within {:?}; the replica \
                                 trails the store until it is opened again",
                                config.close_timeout
                            ),
                        ))
                    })
            })
        } else {
            runtime.block_on(round)
        };
        let mut status = control.status.lock();
        match result {
            Ok(()) => {
                control.failing.store(false, Ordering::Release);
                status.last_error = None;
                status.rounds += 1;
                failed = 0;
                wait = config.interval;
            }
            Err(e) => {
                tracing::warn!(error = %e, target = %status.target, "replication failed; retrying");
                status.failures += 1;
                control.failing.store(true, Ordering::Release);
                status.last_error = Some(e.to_string());
                failed = failed.saturating_add(1);
                wait = backoff(config.interval, failed, config.lease_in_force());
            }
        }
        if let Some(why) = &shipper.fenced {
            control.stopped.store(true, Ordering::Release);
            status.stopped = true;
            status.last_error = Some(why.clone());
            drop(status);
            tracing::error!(reason = %why, "another writer claimed the replica; this store stops writing");
            control.fenced.store(true, Ordering::Release);
            end_round();
            return;
        }
        if let Some(why) = &shipper.gone {
            control.stopped.store(true, Ordering::Release);
            status.stopped = true;
            status.last_error = Some(why.clone());
            drop(status);
            tracing::error!(reason = %why, "the replica is gone; replication stops");
            end_round();
            return;
        }
        drop(status);
        end_round();
        if stopping {
            return;
        }
    }
}

/// The wait after `failed` failures in a row: the interval doubled each
/// time up to [`MAX_BACKOFF`] (or half the lease, so that writes refused
/// for a lapsed lease are accepted again soon after the object store is
/// back), less up to a quarter at random so that stores failing together
/// do not retry together.
fn backoff(interval: Duration, failed: u32, lease: Option<Duration>) -> Duration {
    let most = lease.map_or(MAX_BACKOFF, |l| MAX_BACKOFF.min(l / 2));
    let full = interval
        .saturating_mul(1u32 << failed.min(16))
        .min(most)
        .max(interval);
    let jitter = crate::random::bytes::<2>("draw a backoff's jitter")
        .map_or(0, |b| u32::from(u16::from_le_bytes(b)) % 1024);
    full.saturating_sub(full / 4 * jitter / 1024)
}

/// The objects under `prefix`.
pub(crate) async fn list(
    target: &dyn ObjectStore,
    prefix: &Path,
) -> Result<Vec<object_store::ObjectMeta>> {
    target
        .list(Some(prefix))
        .try_collect()
        .await
        .map_err(|e| remote("list", prefix, e))
}

/// The object at `path`, whole.
pub(crate) async fn get(target: &dyn ObjectStore, path: &Path) -> Result<Bytes> {
    let found = target
        .get(path)
        .await
        .map_err(|e| remote("read", path, e))?;
    found.bytes().await.map_err(|e| remote("read", path, e))
}

/// The newest restore point under `root`, if there is one.
pub(crate) async fn newest_point(target: &dyn ObjectStore, root: &Path) -> Result<Option<Point>> {
    let newest = list(target, &objects::points(root))
        .await?
        .into_iter()
        .filter_map(|m| {
            let [number, _] = objects::parse_hexes::<2>(m.location.filename()?, "")?;
            Some((number, m.location))
        })
        .max_by_key(|p| p.0);
    match newest {
        Some((_, path)) => {
            let bytes = get(target, &path).await?;
            Point::decode(&bytes, path.as_ref()).map(Some)
        }
        None => Ok(None),
    }
}

/// Bytes `from..entry.len` of a segment: from its whole object, or from
/// the pieces that cover them (each starting where the one before ended,
/// from the segment's start). `doing` names the operation and adds a hint
/// to the error when they are not all there.
pub(crate) async fn segment_range(
    target: &dyn ObjectStore,
    root: &Path,
    entry: &Entry,
    from: u64,
    doing: (&'static str, &str),
) -> Result<Vec<u8>> {
    let missing = |at: u64| {
        Error::replica(
            doing.0,
            format!(
                "the replica lacks bytes {at}..{} of segment {} (an object is missing or cut \
                 short){}",
                entry.len, entry.id, doing.1
            ),
        )
    };
    let whole = objects::segment(root, entry.id, entry.epoch);
    match target.head(&whole).await {
        Ok(meta) if meta.size >= entry.len => {
            return target
                .get_range(&whole, from..entry.len)
                .await
                .map(|b| b.to_vec())
                .map_err(|e| remote("read", &whole, e));
        }
        Ok(_) => return Err(missing(from)),
        Err(object_store::Error::NotFound { .. }) => {}
        Err(e) => return Err(remote("read", &whole, e)),
    }
    let mut pieces: Vec<(u64, u64, Path)> =
        list(target, &objects::pieces(root, entry.id, entry.epoch))
            .await?
            .into_iter()
            .filter_map(|m| {
                let [start] = objects::parse_hexes::<1>(m.location.filename()?, "")?;
                Some((start, m.size, m.location))
            })
            .collect();
    pieces.sort_unstable_by_key(|p| p.0);
    // The pieces chain from the segment's start; those that overlap the
    // bytes wanted are read.
    let (mut at, mut bytes) = (0u64, Vec::new());
    for (start, size, path) in pieces {
        if start != at || at >= entry.len {
            continue;
        }
        let end = (start + size).min(entry.len);
        if end > from {
            let range = from.max(start) - start..end - start;
            let got = target
                .get_range(&path, range)
                .await
                .map_err(|e| remote("read", &path, e))?;
            bytes.extend_from_slice(&got);
        }
        at = start + size;
    }
    if at < entry.len || bytes.len() as u64 != entry.len - from {
        return Err(missing(from + bytes.len() as u64));
    }
    Ok(bytes)
}

/// An object store's failure, naming the object.
pub(crate) fn remote(doing: &str, path: &Path, e: object_store::Error) -> Error {
    Error::replica(
        "use the object store",
        format!("could not {doing} {path}: {e}; check that it is reachable and writable"),
    )
}
