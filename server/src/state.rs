//! What every request and turn shares: the store, the agent, the
//! configuration, the task notifications, the running turns.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ctxlog::a2a::TaskState;
use ctxlog::Store;
use tokio::sync::watch;

use crate::agent::AgentExecutor;
use crate::auth::Tokens;
use crate::card::Cards;
use crate::config::Config;
use crate::error::{from_store, A2aError};
use crate::health::StoreCell;
use crate::turns::Turns;

/// The server's shared state.
pub(crate) struct Shared {
    /// Itself, for what must outlive a call (a reopen of the store).
    pub(crate) me: std::sync::Weak<Shared>,
    pub(crate) store: StoreCell,
    pub(crate) agent: Arc<dyn AgentExecutor>,
    pub(crate) config: Config,
    pub(crate) hub: Arc<Hub>,
    pub(crate) turns: Turns,
    pub(crate) cards: Cards,
    pub(crate) tokens: Option<Tokens>,
    /// Set once the server is shutting down: streams end.
    pub(crate) shutdown: watch::Receiver<bool>,
    /// Under the single-active-turn policy, serialises the check of a
    /// context's turn with the receive that takes it.
    pub(crate) context_locks: ContextLocks,
    /// Connections open now.
    pub(crate) connections: std::sync::atomic::AtomicUsize,
    /// The `Idempotency-Key`s seen.
    pub(crate) keys: crate::keys::Keys,
    /// The media types the agent takes (its card's `defaultInputModes`).
    pub(crate) input_modes: Vec<String>,
}

impl Shared {
    /// Runs a store call on the blocking pool (never on the async workers).
    /// A store that is being reopened (after a failed write or sync)
    /// answers `Poisoned` at once; a call that finds the store poisoned
    /// starts its reopen.
    pub(crate) async fn blocking_raw<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Store) -> ctxlog::Result<T> + Send + 'static,
    ) -> ctxlog::Result<T> {
        let Some(store) = self.store.get() else {
            return Err(ctxlog::Error::Poisoned);
        };
        let held = store.clone();
        let result = match tokio::task::spawn_blocking(move || f(&held)).await {
            Ok(result) => result,
            Err(_) => Err(ctxlog::Error::InvalidParams {
                field: "store",
                reason: "a store call panicked".into(),
            }),
        };
        if let Err(e) = &result {
            crate::health::check(self, &store, e);
        }
        result
    }

    /// [`blocking_raw`](Self::blocking_raw), its error as the caller sees it.
    pub(crate) async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Store) -> ctxlog::Result<T> + Send + 'static,
    ) -> Result<T, A2aError> {
        self.blocking_raw(f).await.map_err(from_store)
    }
}

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
}

/// A followed task: its notifications, and what its streams share.
pub(crate) struct Followed {
    tx: watch::Sender<Written>,
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
    /// Writes told, so far.
    pub(crate) count: u64,
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
}

impl Follower {
    /// The task followed: what its streams share.
    pub(crate) fn task(&self) -> Arc<Followed> {
        self.followed.clone()
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
        }
    }

    /// Something was written to the task (`state`: the status it set).
    pub(crate) fn notify(&self, tenant: &str, task_id: &str, state: Option<TaskState>) {
        self.tell(tenant, task_id, |w| {
            w.state = state.or(w.state);
            w.settled = None;
            w.failed = None;
        });
    }

    /// Whether anyone follows the task now.
    pub(crate) fn is_followed(&self, tenant: &str, task_id: &str) -> bool {
        let key = (tenant.to_string(), task_id.to_string());
        lock(&self.tasks).contains_key(&key)
    }

    /// [`notify`](Self::notify), with the task as read after the write.
    pub(crate) fn notify_settled(
        &self,
        tenant: &str,
        task_id: &str,
        state: Option<TaskState>,
        settled: Option<Arc<Settled>>,
    ) {
        self.tell(tenant, task_id, |w| {
            w.state = state.or(w.state);
            w.settled = settled;
            w.failed = None;
        });
    }

    /// The turn's write failed: its waiters answer with `error`.
    pub(crate) fn notify_failed(&self, tenant: &str, task_id: &str, error: A2aError) {
        self.tell(tenant, task_id, |w| w.failed = Some(error));
    }

    fn tell(&self, tenant: &str, task_id: &str, change: impl FnOnce(&mut Written)) {
        let tasks = lock(&self.tasks);
        let key = (tenant.to_string(), task_id.to_string());
        if let Some(followed) = tasks.get(&key) {
            followed.tx.send_modify(|w| {
                w.count += 1;
                change(w);
            });
        }
    }

    /// Tasks followed now (for tests and the soak bench).
    pub(crate) fn len(&self) -> usize {
        lock(&self.tasks).len()
    }
}

/// Mutexes a context's key hashes to (a fixed number, shared by contexts
/// whose keys collide, which only makes them wait for each other).
pub(crate) struct ContextLocks(Vec<Mutex<()>>);

impl Default for ContextLocks {
    fn default() -> Self {
        ContextLocks((0..64).map(|_| Mutex::new(())).collect())
    }
}

impl ContextLocks {
    /// Runs `f` holding the lock of (tenant, context).
    pub(crate) fn with<T>(&self, tenant: &str, context_id: &str, f: impl FnOnce() -> T) -> T {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (tenant, context_id).hash(&mut h);
        let n = self.0.len();
        // Fits: the index is reduced modulo the (non-zero) count.
        let at = usize::try_from(h.finish() % n as u64).unwrap_or(0);
        match self.0.get(at) {
            Some(m) => {
                let _held = lock(m);
                f()
            }
            None => f(),
        }
    }
}

/// A poisoned std mutex only means a panic elsewhere while it was held.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// 128 random bits as 32 hex digits (messageIds of the server's own
/// messages).
pub(crate) fn random_id() -> String {
    let mut bytes = [0u8; 16];
    // Without the OS's randomness (which does not fail on Linux), a time
    // and a counter still make the id unique in this process.
    if getrandom::fill(&mut bytes).is_err() {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        bytes[..8].copy_from_slice(&crate::error::now_ms().to_le_bytes());
        bytes[8..].copy_from_slice(&n.to_le_bytes());
    }
    hex::encode(bytes)
}
