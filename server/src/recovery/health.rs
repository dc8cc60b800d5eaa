//! The store's health: the store (in its cell, `state/storecell.rs`) taken out
//! and opened again when a failed write or sync has poisoned it, and
//! `/healthz`.
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
//!
//! Also the probes: `/livez` and `/readyz` (status only, for Kubernetes
//! and proxies), and `/healthz` (the detail).

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use ctxlog::Store;
use tracing::{info, warn};

use crate::state::storecell::backoff;
use crate::state::Shared;

/// How long a reopen waits for the calls under way to let go of the store.
const LET_GO: Duration = Duration::from_secs(30);

/// What a store cell calls when it finds its store poisoned: the reopen,
/// in the background, of the server `shared` names (while it lives).
pub(crate) fn reopener(shared: Weak<Shared>) -> Box<dyn Fn() + Send + Sync> {
    Box::new(move || {
        if let Some(shared) = shared.upgrade() {
            tokio::spawn(async move {
                reopen(&shared).await;
                shared.store.reopen_ended();
            });
        }
    })
}

/// Takes the store out, waits for it to be let go, and opens it again
/// (retrying with a growing delay), then resolves the interrupted turns.
async fn reopen(shared: &Arc<Shared>) {
    let cell = &shared.store;
    let delay = cell.reopen_delay();
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
                cell.reopen_failed(&e);
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
    cell.reopened();
    info!("the store is open again and takes writes");
    let resolved = crate::recovery::restart::recover(shared).await;
    if resolved > 0 {
        info!(
            tasks = resolved,
            "resolved turns interrupted by the failed write"
        );
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

/// Why the server takes no writes now, if it does not: the store is
/// being reopened or refuses writes, or its replication refuses them
/// (fenced, the replica gone, a lapsed lease, failing synchronous
/// rounds). A standby serving its read-only copy has none.
fn trouble(shared: &Shared, replica: Option<&ctxlog::ReplicationStatus>) -> Option<String> {
    shared.store.trouble().or_else(|| {
        replica.filter(|r| !r.acknowledging).map(|r| {
            format!(
                "replication refuses writes: {}",
                r.last_error
                    .as_deref()
                    .unwrap_or("its lease lapsed (the object store has not answered)")
            )
        })
    })
}

/// A probe's answer: `status` only, never a store's or a tenant's detail
/// (it answers without a token), not cached.
fn probe(status: StatusCode, word: &str) -> Response {
    (
        status,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
        serde_json::json!({ "status": word }).to_string(),
    )
        .into_response()
}

/// `/livez`, Kubernetes' liveness probe: the server answers requests (a
/// process whose runtime is wedged answers nothing, and is restarted).
pub(crate) async fn livez() -> Response {
    probe(StatusCode::OK, "ok")
}

/// `/readyz`, Kubernetes' readiness probe: 200 while the server takes
/// requests as it should (a writer: its store open and writable, its
/// replication acknowledging; a standby: serving its copy), else 503, so
/// that a proxy sends no traffic meanwhile. The reason is `/healthz`'s.
pub(crate) async fn readyz(State(shared): State<Arc<Shared>>) -> Response {
    let replica = shared.store.get().and_then(|s| s.replication());
    match trouble(&shared, replica.as_ref()) {
        None => probe(StatusCode::OK, "ready"),
        Some(_) => probe(StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
    }
}

/// What the server is doing, as JSON: 200 with `"status": "ok"` while
/// the store takes writes, 503 with `"status": "unavailable"` and the
/// reason while it does not (it is being reopened). The counts say what
/// the server holds now (each bounded by what is live), but
/// `syncedOnWorker`: the durable writes synced on an async worker since
/// the start, as a lone connection's are, and `groupSyncs` and
/// `lingeredSyncs`: the store's group-commit syncs since it was opened,
/// and those that waited for more writes first (`--commit-linger-us`).
pub(crate) async fn healthz(State(shared): State<Arc<Shared>>) -> Response {
    let replica = shared.store.get().and_then(|s| s.replication());
    let trouble = trouble(&shared, replica.as_ref());
    let mut body = serde_json::json!({
        "status": if trouble.is_some() { "unavailable" } else { "ok" },
        "store": if trouble.is_some() { "refusing writes" } else { "writable" },
        "turnsRunning": shared.turns.count(),
        "tasksFollowed": shared.hub.len(),
        "connections": shared.connections.load(std::sync::atomic::Ordering::Relaxed),
        "syncedOnWorker": shared.store.synced_here(),
    });
    if let Some(store) = shared.store.get() {
        let (syncs, lingered) = store.group_syncs();
        body["groupSyncs"] = syncs.into();
        body["lingeredSyncs"] = lingered.into();
    }
    if let Some(standby) = shared.standby.as_ref() {
        body["standby"] = standby.report();
    }
    if let Some(replica) = replica {
        body["replication"] = serde_json::json!({
            "target": replica.target,
            "lagBytes": replica.lag_bytes,
            "lagMs": replica.lag_ms,
            "restorePoint": replica.restore_point,
            "restorePointTime": ctxlog::time::iso8601_ms(replica.restore_point_ms),
            "shippedBytes": replica.shipped_bytes,
            "rounds": replica.rounds,
            "failures": replica.failures,
            "lastError": replica.last_error,
            "stopped": replica.stopped,
            "acknowledging": replica.acknowledging,
        });
    }
    if shared.config.push.enabled {
        // Without tokens the one tenant is the operator's; with them,
        // no tenant's configs show to whoever calls (counts only).
        body["push"] = shared.pushes.report(shared.tokens.is_none());
        body["push"]["tasksWatched"] = shared.hub.wakes().into();
    }
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
