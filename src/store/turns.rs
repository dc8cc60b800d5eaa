//! Turn leases: one active turn per context, as a policy.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{now_ms, Store};
use crate::error::{Error, Result};
use crate::index::{ContextSlot, Lease};
use crate::namespace::ContextKey;
use crate::options::TurnPolicy;

/// Tells leases apart, so an expired guard never releases a later lease.
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

/// A context's turn, held until dropped (also when a panic unwinds through
/// it). Under [`TurnPolicy::Parallel`] it holds nothing.
#[must_use = "the turn is released when the guard is dropped"]
pub struct TurnGuard {
    held: Option<(Arc<ContextSlot>, u64)>,
}

impl Drop for TurnGuard {
    fn drop(&mut self) {
        if let Some((slot, token)) = self.held.take() {
            let mut lease = slot.lease.lock();
            if lease.as_ref().is_some_and(|l| l.token == token) {
                *lease = None;
            }
        }
    }
}

impl Store {
    /// Who holds the context's turn and since when (ms), if anyone does.
    pub fn turn_holder(&self, tenant: &str, context_id: &str) -> Result<Option<(String, u64)>> {
        let key = ContextKey::derive(tenant, context_id)?;
        Ok(self.index.get(&key).and_then(|slot| {
            slot.lease
                .lock()
                .as_ref()
                .map(|l| (l.task_id.clone(), l.since_ms))
        }))
    }

    /// Begins a turn of `task_id` in a context. Under
    /// [`TurnPolicy::SingleActive`], fails at once with
    /// [`Error::ContextBusy`] (naming the holder and since when) while another
    /// unexpired turn is held; never queues.
    pub fn begin_turn(&self, tenant: &str, context_id: &str, task_id: &str) -> Result<TurnGuard> {
        let key = ContextKey::derive(tenant, context_id)?;
        let TurnPolicy::SingleActive { lease } = self.options.turns else {
            return Ok(TurnGuard { held: None });
        };
        let slot = self.index.get_or_insert(&key);
        let now = now_ms();
        let token = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
        {
            let mut current = slot.lease.lock();
            if let Some(held) = current.as_ref() {
                let expired = lease.is_some_and(|d| {
                    now.saturating_sub(held.since_ms)
                        >= u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
                });
                if !expired {
                    return Err(Error::ContextBusy {
                        task_id: held.task_id.clone(),
                        since_ms: held.since_ms,
                    });
                }
            }
            *current = Some(Box::new(Lease {
                task_id: task_id.to_string(),
                since_ms: now,
                token,
            }));
        }
        Ok(TurnGuard {
            held: Some((slot, token)),
        })
    }
}
