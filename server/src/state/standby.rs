//! A standby's part (`--follow URL`): the follower of the writer's
//! replica, the local copy's directory, and what `/healthz` says of them
//! (DESIGN.md §12, "Replication and a standby"; the loop that follows and
//! promotes is `recovery/following.rs`).

use std::path::PathBuf;
use std::sync::Mutex;

use ctxlog::replicate::{Follower, RestorePoint};
use ctxlog::{Options, Store};
use serde_json::{json, Value};

use crate::error::now_ms;
use crate::util::lock;

/// What a standby keeps beside the store.
pub(crate) struct Standby {
    pub(crate) from: ctxlog::Replicate,
    pub(crate) dir: PathBuf,
    pub(crate) follower: Mutex<Option<Follower>>,
    /// Wakes the follow loop to promote the server.
    pub(crate) promote: tokio::sync::Notify,
    pub(crate) state: Mutex<FollowState>,
}

/// What the follower last did.
#[derive(Default)]
pub(crate) struct FollowState {
    pub(crate) point: Option<RestorePoint>,
    pub(crate) checked_ms: u64,
    pub(crate) last_error: Option<String>,
    /// Why the last promotion failed (kept until one succeeds: following
    /// again does not clear it).
    pub(crate) promotion_error: Option<String>,
    pub(crate) promoted: bool,
}

impl Standby {
    /// A standby of `from` in `dir`: restores the replica there if it holds
    /// no store, and brings the copy up to the newest restore point; the
    /// store to serve (read-only) with it.
    pub(crate) fn start(from: ctxlog::Replicate, dir: PathBuf) -> ctxlog::Result<(Self, Store)> {
        let mut follower = Follower::start(&from, &dir)?;
        follower.catch_up()?;
        let store = Store::open_read_only(&dir, Options::default())?;
        let state = FollowState {
            point: follower.point(),
            checked_ms: now_ms(),
            ..FollowState::default()
        };
        let standby = Standby {
            from,
            dir,
            follower: Mutex::new(Some(follower)),
            promote: tokio::sync::Notify::new(),
            state: Mutex::new(state),
        };
        Ok((standby, store))
    }

    /// For `/healthz`.
    pub(crate) fn report(&self) -> Value {
        let state = lock(&self.state);
        json!({
            "following": self.from.describe(),
            "promoted": state.promoted,
            "restorePoint": state.point.map(|p| p.number),
            "restorePointTime": state.point.map(|p| ctxlog::time::iso8601_ms(p.time_ms)),
            "checkedAt": ctxlog::time::iso8601_ms(state.checked_ms),
            "lastError": state.last_error,
            "promotionError": state.promotion_error,
        })
    }
}
