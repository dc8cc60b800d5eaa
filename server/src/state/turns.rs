//! The registry of running turns: which task each works on, their
//! cancellation and abort handles, the tasks failed for breaking the
//! rules, and the bound on turns at once. The turns themselves run in
//! `sends/turn.rs`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use crate::util::lock;

/// The turns running now.
pub(crate) struct Turns {
    running: Mutex<HashMap<u64, Running>>,
    next: AtomicU64,
    /// Tasks failed because their agent broke the rules, with why: a
    /// blocking send that waited for one answers `InvalidAgentResponse`.
    invalid: Mutex<HashMap<(String, String), String>>,
    permits: Arc<Semaphore>,
    max: usize,
    /// Signalled whenever a turn ends.
    ended: tokio::sync::Notify,
}

struct Running {
    tenant: String,
    task_id: String,
    cancel: watch::Sender<bool>,
    abort: Option<tokio::task::AbortHandle>,
}

impl Turns {
    pub(crate) fn new(max: usize) -> Self {
        Turns {
            running: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            invalid: Mutex::new(HashMap::new()),
            permits: Arc::new(Semaphore::new(max)),
            max,
            ended: tokio::sync::Notify::new(),
        }
    }

    /// A place for one more turn, or `None` at the bound.
    pub(crate) fn permit(&self) -> Option<OwnedSemaphorePermit> {
        self.permits.clone().try_acquire_owned().ok()
    }

    /// The bound on turns at once.
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// Tells every running turn of the task to stop.
    pub(crate) fn cancel(&self, tenant: &str, task_id: &str) {
        for r in lock(&self.running).values() {
            if r.tenant == tenant && r.task_id == task_id {
                let _ = r.cancel.send(true);
            }
        }
    }

    /// How many turns are running.
    pub(crate) fn count(&self) -> usize {
        lock(&self.running).len()
    }

    /// Whether a turn of the task runs in this process.
    pub(crate) fn runs(&self, tenant: &str, task_id: &str) -> bool {
        lock(&self.running)
            .values()
            .any(|r| r.tenant == tenant && r.task_id == task_id)
    }

    /// Waits until no turn runs, or `grace` has passed; returns the turns
    /// still running then (tenant, task), told to stop and aborted.
    pub(crate) async fn drain(&self, grace: std::time::Duration) -> Vec<(String, String)> {
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            let ended = self.ended.notified();
            if self.count() == 0 {
                return Vec::new();
            }
            if tokio::time::timeout_at(deadline, ended).await.is_err() {
                break;
            }
        }
        let mut left = Vec::new();
        for (_, r) in lock(&self.running).drain() {
            let _ = r.cancel.send(true);
            if let Some(abort) = r.abort {
                abort.abort();
            }
            left.push((r.tenant, r.task_id));
        }
        left
    }

    /// Why the task's agent was found breaking the rules, if it was.
    pub(crate) fn invalid_reason(&self, tenant: &str, task_id: &str) -> Option<String> {
        lock(&self.invalid)
            .get(&(tenant.to_string(), task_id.to_string()))
            .cloned()
    }

    pub(crate) fn mark_invalid(&self, tenant: &str, task_id: &str, why: &str) {
        let mut invalid = lock(&self.invalid);
        // Bounded: the reason only matters to requests waiting right now.
        if invalid.len() >= 4096 {
            invalid.clear();
        }
        invalid.insert((tenant.to_string(), task_id.to_string()), why.to_string());
    }

    pub(crate) fn register(&self, tenant: &str, task_id: &str) -> (u64, watch::Receiver<bool>) {
        let (tx, rx) = watch::channel(false);
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.running).insert(
            number,
            Running {
                tenant: tenant.to_string(),
                task_id: task_id.to_string(),
                cancel: tx,
                abort: None,
            },
        );
        (number, rx)
    }

    pub(crate) fn set_abort(&self, number: u64, abort: tokio::task::AbortHandle) {
        if let Some(r) = lock(&self.running).get_mut(&number) {
            r.abort = Some(abort);
        }
    }

    pub(crate) fn unregister(&self, number: u64) {
        lock(&self.running).remove(&number);
        self.ended.notify_waiters();
    }
}
