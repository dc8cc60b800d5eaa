//! The task notifications: who follows a task, and what its streams share.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ctxlog::a2a::TaskState;
use tokio::sync::watch;

use crate::error::A2aError;
use crate::util::lock;

/// Tells whoever follows a task (a stream, a blocking send) that something
/// was written to it. The store is what they then read, so nobody can miss
/// or reorder events: a notification says "look again", with the state a
/// status set (so a waiter for the end of a turn can skip the other
/// events) and, when a turn ended while someone waited, the task as read
/// from the store right after that write (so the waiter need not read it
/// again).
///
/// A task has an entry exactly while someone follows it: the entry is made
/// by the first [`Follower`] and removed when the last one is dropped, so
/// what the hub holds is bounded by the streams and waits open now, never
/// by the tasks that ever were (a write to a task nobody follows costs a
/// lookup and nothing else).
#[derive(Default)]
pub(crate) struct Hub {
    tasks: Mutex<HashMap<(String, String), Arc<Followed>>>,
    /// Who only needs to know that a task was written to (a push
    /// delivery): woken by every write, holding nothing of what was
    /// written (a follower's channel keeps the latest news, a settled
    /// task among it, for as long as the task is followed). An entry
    /// lives while some [`Wake`] of it does.
    wakes: Mutex<HashMap<(String, String), Arc<tokio::sync::Notify>>>,
}

/// A wake-up on every write to one task (see [`Hub::wake_on`]).
pub(crate) struct Wake {
    hub: Arc<Hub>,
    key: (String, String),
    notify: Arc<tokio::sync::Notify>,
}

impl Wake {
    /// A future that ends at the next write told after it was enabled
    /// (`Notified::enable`): enable it, then read the store, then await
    /// it, and no write falls in between.
    pub(crate) fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }
}

impl Drop for Wake {
    fn drop(&mut self) {
        let mut wakes = lock(&self.hub.wakes);
        // The map's and this one's: the last wake of the task goes.
        if Arc::strong_count(&self.notify) <= 2 {
            wakes.remove(&self.key);
        }
    }
}

/// A followed task: its notifications, and what its streams share.
pub(crate) struct Followed {
    tx: watch::Sender<Written>,
    /// How many of its followers are streams (the others wait for a turn's
    /// end, and take no events): a writer reads its event back for them
    /// only.
    streams: AtomicUsize,
    /// Held by a stream while it reads the task's events from the store,
    /// so the task's other streams wait and then find a large event it
    /// read in `payloads` instead of reading (and holding) their own copy.
    pub(crate) reading: tokio::sync::Mutex<()>,
    /// Large payloads a stream of the task sent or is sending, by what
    /// they are (an event's number, or a snapshot's): each is alive while
    /// some stream holds it, and is freed with the last.
    pub(crate) payloads: Mutex<HashMap<PayloadKey, std::sync::Weak<Payload>>>,
    /// The numbers of the task's events that streams pass over (the
    /// client's messages) that a stream has found, so another walks past
    /// them to the payloads it shares without reading the store.
    passed: Mutex<std::collections::BTreeSet<u64>>,
}

/// What a shared payload is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum PayloadKey {
    /// The event of this number.
    Event(u64),
    /// The task's snapshot after this many events, with this much history.
    Snapshot(u64, Option<usize>),
}

/// An event or snapshot as a stream sends it: its JSON, ready to go in an
/// SSE `data` field, and the state it sets (a status).
#[derive(Debug)]
pub(crate) struct Payload {
    pub(crate) data: Vec<u8>,
    pub(crate) state: Option<TaskState>,
    /// A direct reply: the stream ends with it.
    pub(crate) reply: bool,
}

impl AsRef<[u8]> for Payload {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

impl Followed {
    /// The shared payload `key`, if a stream still holds it.
    pub(crate) fn payload(&self, key: PayloadKey) -> Option<Arc<Payload>> {
        lock(&self.payloads)
            .get(&key)
            .and_then(std::sync::Weak::upgrade)
    }

    /// Whether event `seq` is one streams pass over (a client's message).
    pub(crate) fn is_passed(&self, seq: u64) -> bool {
        lock(&self.passed).contains(&seq)
    }

    /// Events `from..to` are passed over.
    pub(crate) fn pass(&self, from: u64, to: u64) {
        if from < to {
            lock(&self.passed).extend(from..to);
        }
    }

    /// Shares `payload` as `key` with the task's other streams.
    pub(crate) fn share(&self, key: PayloadKey, payload: &Arc<Payload>) {
        let mut payloads = lock(&self.payloads);
        if payloads.len() >= 64 {
            payloads.retain(|_, p| p.strong_count() > 0);
        }
        payloads.insert(key, Arc::downgrade(payload));
    }
}

/// The latest write to a task that this process told the hub of.
#[derive(Debug, Clone, Default)]
pub(crate) struct Written {
    /// The state the latest status told of set (writes that set none,
    /// such as artifact chunks, leave it).
    pub(crate) state: Option<TaskState>,
    /// The task as read right after the status that ended a turn (when a
    /// send was waiting for it), so the waiter need not read it again.
    pub(crate) settled: Option<Arc<Settled>>,
    /// Why the turn's last write failed (the store refused it: a full
    /// disk, a failed sync), so a waiting send answers at once with the
    /// error instead of waiting for an end that cannot be written.
    pub(crate) failed: Option<A2aError>,
    /// The highest event number a write told so far carried (0: none
    /// yet): every write told is among the task's first `events` events,
    /// so a stream that has read the store to its end once and sent up to
    /// here has nothing more to read until it is told again.
    pub(crate) events: u64,
    /// The latest event told, ready to send, when its writer made it (it
    /// had just read it back): the task's streams send it from here
    /// without reading the store. Held until the next write is told.
    pub(crate) latest: Option<(u64, Arc<Payload>)>,
}

/// A task read right after the status that ended its turn.
#[derive(Debug)]
pub(crate) struct Settled {
    /// The task, with its whole history and its artifacts.
    pub(crate) task: ctxlog::a2a::Task,
    /// Its events then.
    pub(crate) count: u64,
}

/// One follower of a task: its receiver, and its share of the task's hub
/// entry (the last follower dropped removes the entry).
pub(crate) struct Follower {
    hub: Arc<Hub>,
    key: (String, String),
    followed: Arc<Followed>,
    // `None` only inside `drop`.
    rx: Option<watch::Receiver<Written>>,
    /// Counted among the task's streams.
    stream: bool,
}

impl Follower {
    /// The task followed: what its streams share.
    pub(crate) fn task(&self) -> Arc<Followed> {
        self.followed.clone()
    }

    /// Counts this follower among the task's streams (while it lives).
    pub(crate) fn as_stream(&mut self) {
        if !self.stream {
            self.stream = true;
            self.followed.streams.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Marks the latest write seen; returns it.
    pub(crate) fn seen(&mut self) -> Written {
        self.rx
            .as_mut()
            .map(|rx| rx.borrow_and_update().clone())
            .unwrap_or_default()
    }

    /// Waits for a write after the last one seen. (The hub keeps the
    /// sender while this follower lives, so this only ends with a write.)
    pub(crate) async fn changed(&mut self) {
        let changed = match self.rx.as_mut() {
            Some(rx) => rx.changed().await.is_ok(),
            None => false,
        };
        if !changed {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        if self.stream {
            self.followed.streams.fetch_sub(1, Ordering::Relaxed);
        }
        let mut tasks = lock(&self.hub.tasks);
        // Dropped under the map's lock, so a `follow` of the same task
        // either comes first (and keeps the entry) or finds none.
        drop(self.rx.take());
        if tasks
            .get(&self.key)
            .is_some_and(|f| f.tx.receiver_count() == 0)
        {
            tasks.remove(&self.key);
        }
    }
}

impl Hub {
    /// Follows the task: the follower wakes after each write to it.
    /// Follow before reading the store, so no write falls in between.
    pub(crate) fn follow(self: &Arc<Self>, tenant: &str, task_id: &str) -> Follower {
        let key = (tenant.to_string(), task_id.to_string());
        let followed = lock(&self.tasks)
            .entry(key.clone())
            .or_insert_with(|| {
                Arc::new(Followed {
                    tx: watch::channel(Written::default()).0,
                    streams: AtomicUsize::new(0),
                    reading: tokio::sync::Mutex::new(()),
                    payloads: Mutex::default(),
                    passed: Mutex::default(),
                })
            })
            .clone();
        let rx = followed.tx.subscribe();
        Follower {
            hub: self.clone(),
            key,
            followed,
            rx: Some(rx),
            stream: false,
        }
    }

    /// Wakes on every write to the task, holding nothing of it.
    pub(crate) fn wake_on(self: &Arc<Self>, tenant: &str, task_id: &str) -> Wake {
        let key = (tenant.to_string(), task_id.to_string());
        let notify = lock(&self.wakes).entry(key.clone()).or_default().clone();
        Wake {
            hub: self.clone(),
            key,
            notify,
        }
    }

    /// Something was written to the task: event number `event` (`state`:
    /// the status it set).
    pub(crate) fn notify(&self, tenant: &str, task_id: &str, state: Option<TaskState>, event: u64) {
        self.notify_written(tenant, task_id, state, event, None, None);
    }

    /// A client's message was stored as event number `event`: streams
    /// pass over it (it is an input, not an update) without reading it.
    pub(crate) fn notify_received(&self, tenant: &str, task_id: &str, event: u64) {
        let pass = |f: &Followed| f.pass(event, event + 1);
        self.tell(tenant, task_id, Some(event), pass, |w| {
            w.settled = None;
            w.failed = None;
            w.latest = None;
        });
    }

    /// Whether anyone follows the task now, and whether a stream does.
    pub(crate) fn followers(&self, tenant: &str, task_id: &str) -> (bool, bool) {
        let key = (tenant.to_string(), task_id.to_string());
        match lock(&self.tasks).get(&key) {
            Some(f) => (true, f.streams.load(Ordering::Relaxed) > 0),
            None => (false, false),
        }
    }

    /// [`notify`](Self::notify), with the event ready to send (`payload`)
    /// and the task as read after the write (`settled`), when the writer
    /// made them.
    pub(crate) fn notify_written(
        &self,
        tenant: &str,
        task_id: &str,
        state: Option<TaskState>,
        event: u64,
        payload: Option<Arc<Payload>>,
        settled: Option<Arc<Settled>>,
    ) {
        let share = |f: &Followed| {
            if let Some(payload) = &payload {
                f.share(PayloadKey::Event(event), payload);
            }
        };
        self.tell(tenant, task_id, Some(event), share, |w| {
            w.state = state.or(w.state);
            w.settled = settled;
            w.failed = None;
            w.latest = payload.clone().map(|p| (event, p));
        });
    }

    /// The turn's write failed: its waiters answer with `error`.
    pub(crate) fn notify_failed(&self, tenant: &str, task_id: &str, error: A2aError) {
        self.tell(tenant, task_id, None, |_| (), |w| w.failed = Some(error));
    }

    /// Tells the task's followers and wakes: `before` is done to its entry
    /// first, `change` to the news (with `event`, the number of the event
    /// written, if one was).
    fn tell(
        &self,
        tenant: &str,
        task_id: &str,
        event: Option<u64>,
        before: impl FnOnce(&Followed),
        change: impl FnOnce(&mut Written),
    ) {
        let key = (tenant.to_string(), task_id.to_string());
        if let Some(followed) = lock(&self.tasks).get(&key) {
            before(followed);
            followed.tx.send_modify(|w| {
                if let Some(event) = event {
                    w.events = w.events.max(event);
                }
                change(w);
            });
        }
        if let Some(wake) = lock(&self.wakes).get(&key) {
            wake.notify_waiters();
        }
    }

    /// Tasks followed now (for tests and the soak bench).
    pub(crate) fn len(&self) -> usize {
        lock(&self.tasks).len()
    }

    /// Tasks with a wake now.
    pub(crate) fn wakes(&self) -> usize {
        lock(&self.wakes).len()
    }
}
