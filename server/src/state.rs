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
use crate::turns::Turns;

/// The server's shared state.
pub(crate) struct Shared {
    pub(crate) store: Arc<Store>,
    pub(crate) agent: Arc<dyn AgentExecutor>,
    pub(crate) config: Config,
    pub(crate) hub: Hub,
    pub(crate) turns: Turns,
    pub(crate) cards: Cards,
    pub(crate) tokens: Option<Tokens>,
    /// Set once the server is shutting down: streams end.
    pub(crate) shutdown: watch::Receiver<bool>,
    /// Under the single-active-turn policy, serialises the check of a
    /// context's turn with the receive that takes it.
    pub(crate) context_locks: ContextLocks,
}

impl Shared {
    /// Runs a store call on the blocking pool (never on the async workers).
    pub(crate) async fn blocking_raw<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Store) -> ctxlog::Result<T> + Send + 'static,
    ) -> ctxlog::Result<T> {
        let store = self.store.clone();
        match tokio::task::spawn_blocking(move || f(&store)).await {
            Ok(result) => result,
            Err(_) => Err(ctxlog::Error::InvalidParams {
                field: "store",
                reason: "a store call panicked".into(),
            }),
        }
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
#[derive(Default)]
pub(crate) struct Hub {
    tasks: Mutex<HashMap<(String, String), watch::Sender<Written>>>,
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
}

/// A task read right after the status that ended its turn.
#[derive(Debug)]
pub(crate) struct Settled {
    /// The task, with its whole history and its artifacts.
    pub(crate) task: ctxlog::a2a::Task,
    /// Its events then.
    pub(crate) count: u64,
}

impl Hub {
    /// Follows the task: the receiver changes after each write to it.
    /// Subscribe before reading the store, so no write falls in between.
    pub(crate) fn subscribe(&self, tenant: &str, task_id: &str) -> watch::Receiver<Written> {
        let mut tasks = lock(&self.tasks);
        let key = (tenant.to_string(), task_id.to_string());
        tasks
            .entry(key)
            .or_insert_with(|| watch::channel(Written::default()).0)
            .subscribe()
    }

    /// Something was written to the task (`state`: the status it set).
    pub(crate) fn notify(&self, tenant: &str, task_id: &str, state: Option<TaskState>) {
        self.notify_with(tenant, task_id, state, None);
    }

    /// Whether anyone follows the task now.
    pub(crate) fn is_followed(&self, tenant: &str, task_id: &str) -> bool {
        let tasks = lock(&self.tasks);
        let key = (tenant.to_string(), task_id.to_string());
        tasks.get(&key).is_some_and(|tx| tx.receiver_count() > 0)
    }

    /// [`notify`](Self::notify), with the task as read after the write.
    pub(crate) fn notify_with(
        &self,
        tenant: &str,
        task_id: &str,
        state: Option<TaskState>,
        settled: Option<Arc<Settled>>,
    ) {
        let mut tasks = lock(&self.tasks);
        let key = (tenant.to_string(), task_id.to_string());
        if let Some(tx) = tasks.get(&key) {
            tx.send_modify(|w| {
                w.count += 1;
                w.state = state.or(w.state);
                w.settled = settled;
            });
            if tx.receiver_count() == 0 {
                tasks.remove(&key);
            }
        }
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
