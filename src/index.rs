//! The in-memory index: context key to that context's records.
//!
//! The map from key to context is split into [`SHARDS`] independently locked
//! shards, so looking up one context never waits on a write to another's shard
//! entry for long. Each context then has its own slot with its own locks.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::log::segments::RecordLoc;
use crate::namespace::ContextKey;

/// Number of shards of the key map.
pub const SHARDS: usize = 64;

/// Who owns a context and what it is called; set by its opening record.
#[derive(Debug, Clone)]
pub struct ContextMeta {
    /// The tenant, byte for byte.
    pub tenant: String,
    /// The original contextId, byte for byte.
    pub context_id: String,
    /// Where the opening record is.
    pub opened: RecordLoc,
    /// When the context was opened (ms since the epoch).
    pub first_ms: u64,
}

/// What the index knows of one context.
#[derive(Debug, Default)]
pub struct ContextState {
    /// `None` until the opening record is durable: such a context is invisible.
    pub meta: Option<ContextMeta>,
    /// Time of the latest record (ms since the epoch).
    pub last_ms: u64,
    /// The seq the next record of this context gets.
    pub next_seq: u64,
    /// The message records, in the context's order.
    pub messages: Vec<MessageRef>,
}

/// Where a message is, and its seq: 24 bytes per stored message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageRef {
    /// The message's seq in its context.
    pub seq: u64,
    /// Where its record is.
    pub loc: RecordLoc,
}

impl ContextState {
    /// Up to `max` of the newest messages with seq below `before` (all, for
    /// `None`), oldest first, and how many messages lie below `before`.
    pub fn newest_before(&self, before: Option<u64>, max: usize) -> (&[MessageRef], u64) {
        let end = before.map_or(self.messages.len(), |b| {
            self.messages.partition_point(|m| m.seq < b)
        });
        let below = self.messages.get(..end).unwrap_or_default();
        let start = below.len().saturating_sub(max);
        (below.get(start..).unwrap_or_default(), end as u64)
    }
}

/// One context's slot.
#[derive(Debug, Default)]
pub struct ContextSlot {
    /// Held for a write's whole critical section (validate, append, publish):
    /// this is the per-context lock that orders a context's records.
    pub write: Mutex<()>,
    /// What readers see; write-locked only briefly, to publish.
    pub state: RwLock<ContextState>,
}

type Shard = RwLock<HashMap<ContextKey, Arc<ContextSlot>>>;

/// The whole index.
pub struct Index {
    shards: [Shard; SHARDS],
    /// Per tenant, its visible contexts ordered by (first activity, key).
    tenants: RwLock<HashMap<String, BTreeSet<(u64, ContextKey)>>>,
}

impl Default for Index {
    fn default() -> Self {
        Self {
            shards: std::array::from_fn(|_| RwLock::default()),
            tenants: RwLock::default(),
        }
    }
}

impl Index {
    fn shard(&self, key: &ContextKey) -> &Shard {
        // In range: the index is reduced modulo the array's length.
        &self.shards[usize::from(key.digest()[0]) % SHARDS]
    }

    /// The slot of `key`, if the index has one.
    pub fn get(&self, key: &ContextKey) -> Option<Arc<ContextSlot>> {
        self.shard(key).read().get(key).cloned()
    }

    /// The slot of `key`, made empty (invisible) if there was none.
    pub fn get_or_insert(&self, key: &ContextKey) -> Arc<ContextSlot> {
        if let Some(slot) = self.get(key) {
            return slot;
        }
        self.shard(key).write().entry(*key).or_default().clone()
    }

    /// Makes a context visible in its tenant's listing.
    pub fn list_in_tenant(&self, tenant: &str, first_ms: u64, key: ContextKey) {
        let mut tenants = self.tenants.write();
        match tenants.get_mut(tenant) {
            Some(set) => {
                set.insert((first_ms, key));
            }
            None => {
                tenants.insert(tenant.to_string(), BTreeSet::from([(first_ms, key)]));
            }
        }
    }

    /// Up to `limit` of the tenant's contexts after `after`, in listing order.
    pub fn tenant_page(
        &self,
        tenant: &str,
        after: Option<(u64, ContextKey)>,
        limit: usize,
    ) -> Vec<(u64, ContextKey)> {
        let tenants = self.tenants.read();
        let Some(set) = tenants.get(tenant) else {
            return Vec::new();
        };
        let iter: Box<dyn Iterator<Item = &(u64, ContextKey)>> = match after {
            Some(pos) => {
                Box::new(set.range((std::ops::Bound::Excluded(pos), std::ops::Bound::Unbounded)))
            }
            None => Box::new(set.iter()),
        };
        iter.take(limit).copied().collect()
    }

    /// Number of visible contexts.
    pub fn visible_contexts(&self) -> usize {
        self.tenants.read().values().map(BTreeSet::len).sum()
    }
}
