//! The shipper: a background thread that copies the log to the object
//! store and publishes restore points (DESIGN.md §13, "Shipping").

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::control::{Control, Rounds};
use super::shipper::Shipper;
use super::{Replicate, ReplicationStatus};
use crate::error::{Error, Result};
use crate::store::now_ms;
use crate::store::{Attach, Attachment, Shared, WriteGate};

/// The longest wait between two tries after failures.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// What a store's writes ask of its replication (see [`Replicator::link`]).
/// The store holds it behind its seam, [`WriteGate`].
pub(crate) struct Link {
    control: Arc<Control>,
    synchronous: bool,
    /// The lease in force (asynchronous replication only).
    lease: Option<Duration>,
    timeout: Duration,
    batch: u64,
}

impl WriteGate for Link {
    /// Whether another writer has claimed the replica.
    fn fenced(&self) -> bool {
        self.control.fenced.load(Ordering::Acquire)
    }

    /// Whether a write waits for a restore point to cover it.
    fn synchronous(&self) -> bool {
        self.synchronous
    }

    /// After a write that left the log synced up to `end`: with
    /// synchronous replication, waits until a restore point covers it;
    /// otherwise checks the lease (a write before the store's first round
    /// has ended waits for it) and asks for a round at once when a batch
    /// of bytes waits.
    fn after_write(&self, end: u64) -> Result<()> {
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
/// closes. The store holds it behind its seam, [`Attachment`].
pub(crate) struct Replicator {
    shared: Arc<Control>,
    synchronous: bool,
    /// The lease in force (asynchronous replication only).
    lease: Option<Duration>,
    thread: Option<std::thread::JoinHandle<()>>,
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
}

impl Attach for Replicate {
    fn attach(&self, store: &Arc<Shared>) -> Result<(Box<dyn Attachment>, Box<dyn WriteGate>)> {
        let replicator = Replicator::start(store, self.clone())?;
        let link = replicator.link(self);
        Ok((Box::new(replicator), Box::new(link)))
    }
}

impl Attachment for Replicator {
    /// How far the replica trails a store whose synced log position is
    /// `synced`: the bytes synced since the newest restore point's view,
    /// and, if there are any, how long ago that view was taken (the oldest
    /// of them is younger).
    fn status(&self, synced: u64) -> ReplicationStatus {
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

    /// Runs a round now (one that starts after this call) and waits up to
    /// `timeout` for it to end: then every byte synced before the call is
    /// in a restore point, unless the round failed.
    fn ship_now(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut rounds = self.shared.rounds.lock();
        let want = rounds.started + 1;
        rounds.asked = rounds.asked.max(want);
        rounds.urgent = true;
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
    fn stop(mut self: Box<Self>) {
        self.shared.rounds.lock().stop = true;
        self.shared.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
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
            // failure, only a stop or a caller waiting on `ship_now` cuts
            // the backoff short.
            let until = Instant::now() + wait;
            while !rounds.stop
                && (rounds.asked <= rounds.started || (failed > 0 && !rounds.urgent))
                && !control.wake.wait_until(&mut rounds, until).timed_out()
            {}
            rounds.started += 1;
            rounds.urgent = false;
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
