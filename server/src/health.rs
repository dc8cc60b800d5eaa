//! The store's health: the store every call uses, taken out and opened
//! again when a failed write or sync has poisoned it, and `/healthz`.
//!
//! A poisoned store refuses every write until it is reopened (its page
//! cache can no longer be trusted). The server does the reopen itself, as a
//! restart would: it stops handing the store out, waits for the calls
//! under way to let go of it, drops it, and opens the directory again
//! (recovery cuts the torn tail a failed write left). Meanwhile every call
//! is refused at once, as unavailable. If the open fails (the disk is still
//! unreadable), it is tried again with a growing delay; a store that
//! poisons again soon after a reopen (a disk still full) is reopened after
//! a growing delay too. Once open, the turns the failure interrupted are
//! resolved by the restart policy.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use ctxlog::Store;
use tracing::{info, warn};

use crate::state::{lock, Shared};

/// The longest delay between two reopens.
const MAX_DELAY: Duration = Duration::from_secs(30);
/// How long a reopen waits for the calls under way to let go of the store.
const LET_GO: Duration = Duration::from_secs(30);

/// The store, while it is in; why not, while it is out.
pub(crate) struct StoreCell {
    store: RwLock<Option<Arc<Store>>>,
    /// Why the store is out (or was last reopened).
    why: Mutex<String>,
    /// A reopen is under way.
    reopening: AtomicBool,
    /// The last reopen, and how many came each soon after the one before.
    last: Mutex<Option<(Instant, u32)>>,
    /// Bumped after each reopen (for a write that waits to try again).
    reopened: tokio::sync::watch::Sender<u64>,
}

impl StoreCell {
    pub(crate) fn new(store: Store) -> Self {
        StoreCell {
            store: RwLock::new(Some(Arc::new(store))),
            why: Mutex::new(String::new()),
            reopening: AtomicBool::new(false),
            last: Mutex::new(None),
            reopened: tokio::sync::watch::channel(0).0,
        }
    }

    /// Follows the reopens: the receiver changes after each.
    pub(crate) fn reopens(&self) -> tokio::sync::watch::Receiver<u64> {
        self.reopened.subscribe()
    }

    /// The store, unless it is being reopened.
    pub(crate) fn get(&self) -> Option<Arc<Store>> {
        self.store
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn set(&self, store: Option<Arc<Store>>) -> Option<Arc<Store>> {
        let mut cell = self
            .store
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        std::mem::replace(&mut *cell, store)
    }

    /// Takes the store for good (at shutdown).
    pub(crate) fn take(&self) -> Option<Arc<Store>> {
        self.set(None)
    }

    /// What the store's state is, for `/healthz` and the errors calls get:
    /// `None` while it takes writes.
    pub(crate) fn trouble(&self) -> Option<String> {
        match self.get() {
            Some(store) if !store.is_poisoned() => None,
            Some(_) => Some("the store refuses writes after a failed write or sync".into()),
            None => Some(format!(
                "the store is being reopened after a failed write or sync ({})",
                lock(&self.why)
            )),
        }
    }
}

/// After a store call failed: if the store is now poisoned, reopens it in
/// the background (once; a reopen under way is not started again).
pub(crate) fn check(shared: &Shared, store: &Store, error: &ctxlog::Error) {
    if !store.is_poisoned() || shared.store.reopening.swap(true, Ordering::AcqRel) {
        return;
    }
    *lock(&shared.store.why) = error.to_string();
    warn!(error = %error, "the store refuses writes; reopening it");
    let Some(shared) = shared.me.upgrade() else {
        return;
    };
    tokio::spawn(async move {
        reopen(&shared).await;
        shared.store.reopening.store(false, Ordering::Release);
    });
}

/// Takes the store out, waits for it to be let go, and opens it again
/// (retrying with a growing delay), then resolves the interrupted turns.
async fn reopen(shared: &Arc<Shared>) {
    let cell = &shared.store;
    let delay = {
        let mut last = lock(&cell.last);
        let streak = match *last {
            Some((at, streak)) if at.elapsed() < Duration::from_secs(60) => streak + 1,
            _ => 0,
        };
        *last = Some((Instant::now(), streak));
        backoff(streak)
    };
    let Some(old) = cell.take() else { return };
    let (dir, options) = (old.dir().to_path_buf(), old.options().clone());
    // A store poisoned again soon after a reopen (a disk still full) waits
    // before it is opened again; calls are refused meanwhile.
    tokio::time::sleep(delay).await;
    let old = match let_go(old).await {
        Ok(old) => old,
        Err(still) => {
            // Put back: the next call that finds it poisoned tries again.
            warn!("the store is still in use after 30 s; its reopen is tried again later");
            cell.set(Some(still));
            return;
        }
    };
    drop(old);
    let mut attempt = 0;
    let store = loop {
        if *shared.shutdown.borrow() {
            return;
        }
        let (d, o) = (dir.clone(), options.clone());
        match tokio::task::spawn_blocking(move || Store::open(d, o)).await {
            Ok(Ok(store)) => break store,
            Ok(Err(e)) => {
                warn!(error = %e, "reopening the store failed; trying again");
                *lock(&cell.why) = e.to_string();
            }
            Err(e) => warn!(error = %e, "reopening the store failed; trying again"),
        }
        attempt += 1;
        tokio::time::sleep(backoff(attempt)).await;
    };
    if let Some(torn) = &store.open_report().torn_tail {
        info!(
            bytes = torn.bytes,
            records = torn.records,
            "cut the torn tail the failure left (never acknowledged)"
        );
    }
    cell.set(Some(Arc::new(store)));
    cell.reopened.send_modify(|n| *n += 1);
    info!("the store is open again and takes writes");
    let resolved = crate::restart::recover(shared).await;
    if resolved > 0 {
        info!(
            tasks = resolved,
            "resolved turns interrupted by the failed write"
        );
    }
}

/// 250 ms, doubled for each attempt, at most [`MAX_DELAY`] (none for the
/// first).
fn backoff(attempt: u32) -> Duration {
    match attempt {
        0 => Duration::ZERO,
        n => Duration::from_millis(250u64 << n.min(10)).min(MAX_DELAY),
    }
}

/// The store once nothing else holds it, or the store back if something
/// still does after [`LET_GO`].
async fn let_go(store: Arc<Store>) -> Result<Store, Arc<Store>> {
    let deadline = Instant::now() + LET_GO;
    let mut store = store;
    loop {
        match Arc::try_unwrap(store) {
            Ok(store) => return Ok(store),
            Err(still) if Instant::now() < deadline => {
                store = still;
                // The calls that hold it are short store calls on the
                // blocking pool; a poisoned store answers them at once.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(still) => return Err(still),
        }
    }
}

/// What the server is doing, as JSON: 200 with `"status": "ok"` while
/// the store takes writes, 503 with `"status": "unavailable"` and the
/// reason while it does not (it is being reopened). The counts say what
/// the server holds now (each bounded by what is live).
pub(crate) async fn healthz(State(shared): State<Arc<Shared>>) -> Response {
    let trouble = shared.store.trouble();
    let mut body = serde_json::json!({
        "status": if trouble.is_some() { "unavailable" } else { "ok" },
        "store": if trouble.is_some() { "refusing writes" } else { "writable" },
        "turnsRunning": shared.turns.count(),
        "tasksFollowed": shared.hub.len(),
        "connections": shared.connections.load(std::sync::atomic::Ordering::Relaxed),
    });
    let status = match trouble {
        Some(why) => {
            body["reason"] = why.into();
            StatusCode::SERVICE_UNAVAILABLE
        }
        None => StatusCode::OK,
    };
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body.to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_grows_from_nothing_to_its_bound() {
        let delays: Vec<Duration> = (0..14).map(backoff).collect();
        assert_eq!(delays[0], Duration::ZERO);
        assert_eq!(delays[1], Duration::from_millis(500));
        assert!(delays.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(delays[13], MAX_DELAY);
    }
}
