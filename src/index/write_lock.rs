//! A context's write lock: held for a write's whole critical section
//! (validate, append, wait for the sync, publish), either by a borrowed
//! guard for the length of a call, or by an owned hold that a deferred
//! write keeps while its caller awaits the sync (and that may be released
//! on another thread, which a `parking_lot` guard may not be).
//!
//! One byte per context, as the mutex it replaces: the lock is a state
//! byte taken with one compare-and-swap when free; a writer that finds it
//! held queues on one of a few wait lists shared by address and parks, as
//! `parking_lot` itself parks threads. A release wakes the first writer
//! queued for that lock alone: with many writers on one hot context,
//! waking them all (a condition variable's `notify_all`) cost about a
//! sixth of its appends on 2 cores (`cargo bench --bench concurrency`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::Thread;

use parking_lot::Mutex;

use super::ContextSlot;

/// Held by a writer.
const HELD: u8 = 1;
/// Some writer may be queued for it: its release wakes the first.
const WAITED: u8 = 2;

/// A writer parked until the lock at `lock` (its address) is let go.
struct Sleeper {
    lock: usize,
    thread: Thread,
}

const STRIPES: usize = 64;

/// The writers waiting, in the order they came, in one list per stripe of
/// lock addresses.
static SLEEPERS: [Mutex<VecDeque<Sleeper>>; STRIPES] =
    [const { Mutex::new(VecDeque::new()) }; STRIPES];

/// The lock.
#[derive(Debug, Default)]
pub struct WriteLock {
    state: AtomicU8,
}

impl WriteLock {
    /// Takes the lock, waiting while another writer holds it.
    pub fn lock(&self) -> WriteGuard<'_> {
        if !self.try_lock() {
            self.lock_slow();
        }
        WriteGuard { lock: self }
    }

    /// Takes the lock only if nobody holds it.
    fn try_lock(&self) -> bool {
        let now = self.state.load(Ordering::Relaxed);
        now & HELD == 0
            && self
                .state
                .compare_exchange(now, now | HELD, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    fn lock_slow(&self) {
        let (at, me) = (self.address(), std::thread::current());
        loop {
            let mut queue = self.sleepers().lock();
            // Woken early (a park may return for no reason): out of the
            // queue before looking again.
            queue.retain(|s| s.thread.id() != me.id());
            let now = self.state.load(Ordering::Relaxed);
            if now & HELD == 0 {
                if self
                    .state
                    .compare_exchange(now, now | HELD, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return;
                }
                continue;
            }
            // Marked and queued under the list's mutex, which the release
            // takes to wake: it cannot look before this writer is queued.
            if now & WAITED == 0
                && self
                    .state
                    .compare_exchange(now, now | WAITED, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            queue.push_back(Sleeper {
                lock: at,
                thread: me.clone(),
            });
            drop(queue);
            std::thread::park();
        }
    }

    fn release(&self) {
        if self.state.swap(0, Ordering::Release) & WAITED == 0 {
            return;
        }
        let at = self.address();
        let mut queue = self.sleepers().lock();
        let Some(first) = queue.iter().position(|s| s.lock == at) else {
            return;
        };
        let woken = queue.remove(first);
        if queue.iter().any(|s| s.lock == at) {
            // The next release wakes the next (whoever holds the lock by
            // then, or nobody).
            self.state.fetch_or(WAITED, Ordering::Relaxed);
        }
        drop(queue);
        if let Some(woken) = woken {
            woken.thread.unpark();
        }
    }

    fn address(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    fn sleepers(&self) -> &'static Mutex<VecDeque<Sleeper>> {
        // A slot is larger than 64 bytes: its address over 64 spreads
        // neighbouring slots over the stripes.
        &SLEEPERS[(self.address() / 64) % STRIPES]
    }
}

/// The lock held for as long as it lives.
#[must_use]
pub struct WriteGuard<'a> {
    lock: &'a WriteLock,
}

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        self.lock.release();
    }
}

/// The lock of a context's slot, held by whoever owns this (it keeps the
/// slot alive), until it is dropped, on whichever thread.
#[must_use]
pub struct WriteHold {
    slot: Arc<ContextSlot>,
}

impl WriteHold {
    /// Takes `slot`'s write lock if nobody holds it.
    pub fn try_take(slot: &Arc<ContextSlot>) -> Option<Self> {
        slot.write
            .try_lock()
            .then(|| WriteHold { slot: slot.clone() })
    }

    /// The slot whose lock this holds.
    pub fn slot(&self) -> &Arc<ContextSlot> {
        &self.slot
    }
}

impl Drop for WriteHold {
    fn drop(&mut self) {
        self.slot.write.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Writers on a few locks at once (some sharing a stripe), each
    /// counting who is inside its lock: never two.
    #[test]
    fn one_holder_at_a_time_whether_borrowed_or_held() {
        let locks: Arc<Vec<(WriteLock, AtomicUsize)>> =
            Arc::new((0..3).map(|_| Default::default()).collect());
        assert!(locks[0].0.try_lock());
        assert!(!locks[0].0.try_lock(), "held: a second try fails");
        locks[0].0.release();
        let most = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..6)
            .map(|t| {
                let (locks, most) = (locks.clone(), most.clone());
                std::thread::spawn(move || {
                    for i in 0..3_000 {
                        let (lock, inside) = &locks[(t + i) % locks.len()];
                        let _guard = lock.lock();
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        if i % 7 == 0 {
                            std::thread::yield_now();
                        }
                        inside.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(most.load(Ordering::SeqCst), 1);
        for (lock, _) in locks.iter() {
            assert!(lock.try_lock(), "every guard released its lock");
        }
    }

    /// A hold released on another thread wakes a writer asleep on it.
    #[test]
    fn a_hold_let_go_on_another_thread_wakes_the_writer_behind_it() {
        let slot = Arc::new(ContextSlot {
            key: crate::namespace::ContextKey::derive("t", "c").unwrap(),
            number: 0,
            write: WriteLock::default(),
            state: parking_lot::RwLock::new(Default::default()),
        });
        let hold = WriteHold::try_take(&slot).unwrap();
        assert!(WriteHold::try_take(&slot).is_none());
        let behind = {
            let slot = slot.clone();
            std::thread::spawn(move || drop(slot.write.lock()))
        };
        std::thread::spawn(move || drop(hold)).join().unwrap();
        behind.join().unwrap();
        assert!(WriteHold::try_take(&slot).is_some());
    }
}
