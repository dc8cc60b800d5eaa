//! What every request and turn shares: the store, the agent, the
//! configuration, the task notifications, the running turns. Each is a
//! module of its own below this one; what works over the whole (a
//! request, a turn) is above it.

pub(crate) mod hub;
pub(crate) mod keys;
pub(crate) mod pushes;
pub(crate) mod standby;
pub(crate) mod storecell;
pub(crate) mod turns;

use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::agent::AgentExecutor;
use crate::auth::Tokens;
use crate::card::Cards;
use crate::config::Config;
use crate::state::hub::Hub;
use crate::state::keys::Keys;
use crate::state::pushes::Pushes;
use crate::state::storecell::StoreCell;
use crate::state::turns::Turns;
use crate::util::lock;

/// The server's shared state.
pub(crate) struct Shared {
    pub(crate) store: StoreCell,
    pub(crate) agent: Arc<dyn AgentExecutor>,
    pub(crate) config: Config,
    pub(crate) hub: Arc<Hub>,
    pub(crate) turns: Turns,
    /// The push deliveries under way.
    pub(crate) pushes: Pushes,
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
    pub(crate) keys: Keys,
    /// The media types the agent takes (its card's `defaultInputModes`).
    pub(crate) input_modes: Vec<String>,
    /// A standby's follower (`--follow`), if this server is one.
    pub(crate) standby: Option<crate::state::standby::Standby>,
}

impl Shared {
    /// Whether one connection is open (the caller's): its durable writes
    /// are then synced on the async worker (`StoreCell::deferred`).
    pub(crate) fn alone(&self) -> bool {
        self.connections.load(std::sync::atomic::Ordering::Relaxed) <= 1
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
