//! Waiting for a task's next event without polling.
//!
//! Waiters sleep on one of [`SHARDS`] condition variables, picked by their
//! context's number; every append to a context in that shard wakes them,
//! and each looks again at its own task. Sharing the condition variables
//! keeps the index free of a per-context waiter structure; an append pays
//! only a load of the shard's waiter count when nobody waits.

use std::sync::atomic::{fence, AtomicUsize, Ordering};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::error::Result;

/// Condition variables waiters share.
const SHARDS: usize = 64;

#[derive(Default)]
struct Shard {
    /// Waiters on this shard now: an append that sees none skips the lock.
    waiters: AtomicUsize,
    lock: Mutex<()>,
    cv: Condvar,
}

/// The store's waiters, by shard.
pub(crate) struct EventWaits {
    shards: Box<[Shard]>,
}

impl Default for EventWaits {
    fn default() -> Self {
        EventWaits {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
        }
    }
}

/// Counts a waiter in its shard while it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl EventWaits {
    fn shard(&self, context: u32) -> Option<&Shard> {
        self.shards.get(context as usize % SHARDS)
    }

    /// Something was appended to context number `context` (and published:
    /// a reader now sees it).
    pub(crate) fn notify(&self, context: u32) {
        let Some(shard) = self.shard(context) else {
            return;
        };
        // Pairs with the waiter's increment: either this load sees the
        // waiter, or the waiter's check (after its increment) sees what was
        // published before this fence.
        fence(Ordering::SeqCst);
        if shard.waiters.load(Ordering::SeqCst) > 0 {
            let _held = shard.lock.lock();
            shard.cv.notify_all();
        }
    }

    /// Waits until `ready` says yes (checked under the shard's lock, so no
    /// append between a check and the sleep is missed) or `deadline`
    /// passes; `Ok(false)` if it passed first.
    pub(crate) fn wait(
        &self,
        context: u32,
        deadline: Instant,
        mut ready: impl FnMut() -> Result<bool>,
    ) -> Result<bool> {
        let Some(shard) = self.shard(context) else {
            return ready();
        };
        shard.waiters.fetch_add(1, Ordering::SeqCst);
        let _waiting = Waiting(&shard.waiters);
        fence(Ordering::SeqCst);
        let mut held = shard.lock.lock();
        loop {
            if ready()? {
                return Ok(true);
            }
            if shard.cv.wait_until(&mut held, deadline).timed_out() {
                return ready();
            }
        }
    }
}
