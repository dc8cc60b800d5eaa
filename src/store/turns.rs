//! Turn leases: one active turn per context, as a policy.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{now_ms, Store};
use crate::error::{Error, Result};
use crate::index::{Lease, Leases};
use crate::namespace::ContextKey;
use crate::options::TurnPolicy;

/// Tells leases apart, so an expired guard never releases a later lease.
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

/// A context's turn, held until dropped (also when a panic unwinds through
/// it). Under [`TurnPolicy::Parallel`] it holds nothing.
#[must_use = "the turn is released when the guard is dropped"]
pub struct TurnGuard {
    /// The leases, the context's number and the lease's token.
    held: Option<(Arc<Leases>, u32, u64)>,
}

impl Drop for TurnGuard {
    fn drop(&mut self) {
        if let Some((leases, number, token)) = self.held.take() {
            let mut leases = leases.of(number).lock();
            if leases.get(&number).is_some_and(|l| l.token == token) {
                leases.remove(&number);
            }
        }
    }
}

impl Store {
    /// Who holds the context's turn and since when (ms), if anyone does.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::{Options, Store, TurnPolicy};
    /// # let dir = tempfile::tempdir()?;
    /// let single = Options::default().turns(TurnPolicy::SingleActive { lease: None });
    /// let store = Store::open(dir.path(), single)?;
    /// let turn = store.begin_turn("acme", "case-42", "task-1")?;
    /// let holder = store.turn_holder("acme", "case-42")?.map(|(task, _since)| task);
    /// assert_eq!(holder.as_deref(), Some("task-1"));
    /// drop(turn);
    /// assert_eq!(store.turn_holder("acme", "case-42")?, None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn turn_holder(&self, tenant: &str, context_id: &str) -> Result<Option<(String, u64)>> {
        let key = ContextKey::derive(tenant, context_id)?;
        Ok(self.index.get(&key).and_then(|slot| {
            let leases = self.index.leases.of(slot.number).lock();
            leases
                .get(&slot.number)
                .map(|l| (l.task_id.clone(), l.since_ms))
        }))
    }

    /// Begins a turn of `task_id` in a context. Under
    /// [`TurnPolicy::SingleActive`], fails at once with
    /// [`Error::ContextBusy`] (naming the holder and since when) while another
    /// unexpired turn is held; never queues.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::{Options, Store, TurnPolicy};
    /// # let dir = tempfile::tempdir()?;
    /// let single = Options::default().turns(TurnPolicy::SingleActive { lease: None });
    /// let store = Store::open(dir.path(), single)?;
    /// let _turn = store.begin_turn("acme", "case-42", "task-1")?;
    /// assert!(matches!(
    ///     store.begin_turn("acme", "case-42", "task-2"),
    ///     Err(ctxlog::Error::ContextBusy { .. })
    /// ));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn begin_turn(&self, tenant: &str, context_id: &str, task_id: &str) -> Result<TurnGuard> {
        if self.options.read_only {
            return Err(Error::ReadOnly);
        }
        let key = ContextKey::derive(tenant, context_id)?;
        let TurnPolicy::SingleActive { lease } = self.options.turns else {
            return Ok(TurnGuard { held: None });
        };
        let slot = self.index.get_or_insert(&key);
        let now = now_ms();
        let token = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
        {
            let mut leases = self.index.leases.of(slot.number).lock();
            if let Some(held) = leases.get(&slot.number) {
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
            leases.insert(
                slot.number,
                Lease {
                    task_id: task_id.to_string(),
                    since_ms: now,
                    token,
                },
            );
        }
        Ok(TurnGuard {
            held: Some((self.index.leases.clone(), slot.number, token)),
        })
    }
}
