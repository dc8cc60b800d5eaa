//! A standby's loop (`--follow URL`): it follows the writer's replica,
//! serves a read-only copy swapped in after each change, and takes over
//! when asked or when the writer's heartbeat stops (DESIGN.md §12,
//! "Replication and a standby").

use std::sync::Arc;
use std::time::Duration;

use ctxlog::replicate::RestorePoint;
use ctxlog::{Durability, Options, Store};
use tracing::{error, info, warn};

use crate::error::now_ms;
use crate::state::Shared;
use crate::util::lock;

/// Records a read-only open of the copy may replay after its checkpoint
/// before a new checkpoint is written.
const REPLAY_BEFORE_CHECKPOINT: u64 = 100_000;

/// The follow loop: a catch-up every interval, until the server shuts
/// down or is promoted.
pub(crate) async fn run(shared: Arc<Shared>) {
    let Some(standby) = shared.standby.as_ref() else {
        return;
    };
    let interval = standby.from.interval;
    let mut shutdown = shared.shutdown.clone();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {
                catch_up(&shared).await;
                if writer_gone(&shared).await && promote(&shared).await {
                    return;
                }
            }
            _ = standby.promote.notified() => {
                if promote(&shared).await {
                    return;
                }
            }
            _ = shutdown.changed() => return,
        }
    }
}

/// Whether the writer's heartbeat is older than `--takeover-after` (never
/// without it, or before any writer beat).
async fn writer_gone(shared: &Arc<Shared>) -> bool {
    let Some(lease) = shared.config.takeover_after else {
        return false;
    };
    let looked = {
        let shared = shared.clone();
        tokio::task::spawn_blocking(move || {
            let standby = shared.standby.as_ref()?;
            let follower = lock(&standby.follower);
            follower.as_ref()?.heartbeat().ok().flatten()
        })
        .await
    };
    let Ok(Some(beat)) = looked else {
        return false;
    };
    let age = now_ms().saturating_sub(beat.time_ms);
    let gone = u128::from(age) > lease.as_millis();
    if gone {
        warn!(
            writer = beat.epoch,
            silent_ms = age,
            "the writer's heartbeat is older than --takeover-after: taking over"
        );
    }
    gone
}

/// Brings the copy up to the newest restore point and, if it changed,
/// serves a store opened on it now.
async fn catch_up(shared: &Arc<Shared>) {
    let Some(standby) = shared.standby.as_ref() else {
        return;
    };
    let done = {
        let shared = shared.clone();
        tokio::task::spawn_blocking(
            move || -> Result<Option<(Option<RestorePoint>, Store)>, String> {
                let Some(standby) = shared.standby.as_ref() else {
                    return Ok(None);
                };
                let mut held = lock(&standby.follower);
                // Gone after a promotion that failed and could not open
                // the copy again: started again here, so following goes on.
                if held.is_none() {
                    *held = Some(
                        ctxlog::replicate::Follower::start(&standby.from, &standby.dir)
                            .map_err(|e| e.to_string())?,
                    );
                }
                let Some(follower) = held.as_mut() else {
                    return Ok(None);
                };
                let served = shared.store.get().is_some();
                // A copy not served (a promotion failed) is opened again
                // even when no newer point came.
                if !follower.catch_up().map_err(|e| e.to_string())? && served {
                    return Ok(None);
                }
                let mut store = Store::open_read_only(&standby.dir, Options::default())
                    .map_err(|e| e.to_string())?;
                // Read-only opens write no checkpoint: once they replay
                // much, one is written (the copy opened to write and
                // closed), and the next open reads only what follows it.
                if store.open_report().replayed > REPLAY_BEFORE_CHECKPOINT {
                    drop(store);
                    follower.checkpoint().map_err(|e| e.to_string())?;
                    store = Store::open_read_only(&standby.dir, Options::default())
                        .map_err(|e| e.to_string())?;
                }
                Ok(Some((follower.point(), store)))
            },
        )
        .await
    };
    let mut state = lock(&standby.state);
    state.checked_ms = now_ms();
    match done {
        Ok(Ok(Some((point, store)))) => {
            shared.store.set(Some(Arc::new(store)));
            state.point = point;
            state.last_error = None;
        }
        Ok(Ok(None)) => state.last_error = None,
        Ok(Err(e)) => {
            warn!(error = %e, "following the replica failed; retrying");
            state.last_error = Some(e);
        }
        Err(e) => state.last_error = Some(e.to_string()),
    }
}

/// Takes over: a last catch-up, then the copy opened to write, replicating
/// to the same place; its first round claims the replica (fencing the old
/// writer) before any request can write. Whether it did; if not, the
/// server goes on following.
async fn promote(shared: &Arc<Shared>) -> bool {
    let Some(standby) = shared.standby.as_ref() else {
        return false;
    };
    info!(replica = %standby.from.describe(), "promoting: taking over the replica");
    catch_up(shared).await;
    shared
        .store
        .set_why("the standby is being promoted: retry shortly".into());
    drop(shared.store.take());
    drop(lock(&standby.follower).take());
    let options = crate::config::store_options(
        Options::default()
            .durability(Durability::GroupCommit)
            .commit_yields(0),
        &shared.config,
    );
    // The first round claims the replica and, taken from a writer that
    // may still run, waits out its lease.
    let (dir, wait) = (
        standby.dir.clone(),
        standby
            .from
            .close_timeout
            .max(Duration::from_secs(10))
            .saturating_add(standby.from.lease.unwrap_or_default()),
    );
    let opened = tokio::task::spawn_blocking(move || -> ctxlog::Result<Store> {
        let store = Store::open(&dir, options)?;
        store.ship_replica(wait)?;
        Ok(store)
    })
    .await;
    let why = match opened {
        Ok(Ok(store)) => {
            shared.store.set(Some(Arc::new(store)));
            shared.store.reopened();
            {
                let mut state = lock(&standby.state);
                state.promoted = true;
                state.promotion_error = None;
            }
            info!("promoted: this server now writes, and the replica is its");
            let resolved = crate::recovery::restart::recover(shared).await;
            if resolved > 0 {
                info!(
                    tasks = resolved,
                    "resolved turns the old writer left running"
                );
            }
            return true;
        }
        Ok(Err(e)) => e.to_string(),
        Err(e) => e.to_string(),
    };
    {
        {
            error!(error = %why, "the promotion failed; following the replica again");
            {
                let mut state = lock(&standby.state);
                state.last_error = Some(format!("promotion failed: {why}"));
                state.promotion_error = Some(why.clone());
            }
            // The copy as it was before the promotion, served again and
            // followed on from there; no catch-up is needed first (the one
            // that failed may fail again until a damaged object is whole):
            // the follow loop goes on with it.
            let (from, dir) = (standby.from.clone(), standby.dir.clone());
            let again = tokio::task::spawn_blocking(move || {
                let follower = ctxlog::replicate::Follower::start(&from, &dir)?;
                let store = Store::open_read_only(&dir, Options::default())?;
                Ok::<_, ctxlog::Error>((follower, store))
            })
            .await;
            match again {
                Ok(Ok((follower, store))) => {
                    *lock(&standby.follower) = Some(follower);
                    shared.store.set(Some(Arc::new(store)));
                }
                Ok(Err(e)) => error!(error = %e, "the copy could not be opened again; retrying"),
                Err(e) => error!(error = %e, "the copy could not be opened again; retrying"),
            }
            false
        }
    }
}
