//! What a store's writes and the shipper's thread share: the rounds asked
//! for and ended, what the newest restore point covers, the lease, and
//! whether replication was fenced or stopped (DESIGN.md §13, "Shipping"
//! and "The lease"). The shipper (`shipper.rs`) reports to it; the thread
//! and the store's writes (`ship.rs`) read it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::ReplicationStatus;
use crate::error::{Error, Result};

/// What the store and the thread share.
pub(crate) struct Control {
    pub(super) rounds: Mutex<Rounds>,
    /// Wakes the thread (a stop, or a round asked for).
    pub(super) wake: Condvar,
    /// Signalled as each round ends.
    pub(super) done: Condvar,
    pub(super) status: Mutex<ReplicationStatus>,
    /// What the newest restore point covers: the synced log position of
    /// its view (read by every write), and when the view was taken (ms
    /// since the Unix epoch).
    pub(super) covered_position: AtomicU64,
    pub(super) covered_ms: AtomicU64,
    /// A write has asked for a round since the last one began.
    pub(super) nudged: AtomicBool,
    /// Another writer has claimed the replica: the store refuses writes.
    pub(super) fenced: AtomicBool,
    /// Replication has ended for good (fenced, or the replica is gone):
    /// under a lease, writes are refused at once.
    pub(super) stopped: AtomicBool,
    /// The last round failed: the shipper backs off before the next.
    pub(super) failing: AtomicBool,
    /// The clock of `confirmed`.
    pub(super) base: Instant,
    /// When the last round that found no later writer's claim began, in ms
    /// since `base`, plus one (0: never).
    pub(super) confirmed: AtomicU64,
    /// When the round under way (or the last) began, in ms since `base`.
    pub(super) round_began: AtomicU64,
}

/// The thread's rounds, counted.
#[derive(Default)]
pub(super) struct Rounds {
    pub(super) stop: bool,
    /// A caller waits for the round with this number to end.
    pub(super) asked: u64,
    /// The round asked for is wanted now, after a failure too:
    /// [`ship_now`](crate::Store::ship_replica) cuts a failure's backoff
    /// short (a nudge for a batch of bytes does not).
    pub(super) urgent: bool,
    pub(super) started: u64,
    pub(super) finished: u64,
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
    pub(super) fn round_age(&self) -> Duration {
        let began = self.round_began.load(Ordering::Acquire);
        let now = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(now.saturating_sub(began))
    }

    /// Whether a round that began within `lease` found no later claim.
    pub(super) fn confirmed_within(&self, lease: Duration) -> bool {
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
    pub(super) fn check_lease(&self, lease: Duration, timeout: Duration) -> Result<()> {
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

    pub(super) fn covers(&self, end: u64) -> bool {
        self.covered_position.load(Ordering::Acquire) >= end
    }

    /// Returns once a restore point covers the synced log position `end`,
    /// asking for rounds until one does (appenders that wait together share
    /// them); fails past `timeout`, or if the thread has stopped.
    pub(super) fn wait_covered(&self, end: u64, timeout: Duration) -> Result<()> {
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
