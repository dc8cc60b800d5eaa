//! The in-memory index: context key to that context's records.
//!
//! The map from key to context is split into [`SHARDS`] independently locked
//! shards, so looking up one context never waits on a write to another's shard
//! entry for long. Each context then has its own slot with its own locks.

mod artifacts;
pub mod context;
pub mod entries;
pub mod idem_run;
mod packed_map;
#[cfg(test)]
mod task_rules;
pub mod tasks;
pub mod write_lock;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use hashbrown::HashTable;
use parking_lot::{Condvar, Mutex, RwLock};

pub use crate::index::context::{ContextMeta, ContextState, Gone, Life, MessageRef, MAX_SEQ};
use crate::index::idem_run::IdemRun;
pub use crate::index::idem_run::{short_key, IdemAt, ShortKey};
use crate::index::packed_map::PackedMap;
use crate::index::tasks::IdKey;
use crate::namespace::{task_key, ContextKey};

/// Number of shards of the key map.
pub const SHARDS: usize = 64;

/// The checkpoint's bincode: fixed-width little-endian, at most 1 GiB.
/// The index owns it: it reads the checkpoint's sections in place (the
/// store writes them with it).
pub(crate) fn checkpoint_config() -> impl bincode::config::Config {
    bincode::config::standard()
        .with_little_endian()
        .with_fixed_int_encoding()
        .with_limit::<{ 1 << 30 }>()
}

/// An estimate of the bytes one context's slot holds: the slot, its
/// reference counts, and what its state keeps on the heap.
pub fn slot_bytes(state: &ContextState) -> u64 {
    (std::mem::size_of::<ContextSlot>() + 2 * std::mem::size_of::<usize>() + state.heap_bytes())
        as u64
}

/// One context's slot.
#[derive(Debug)]
pub struct ContextSlot {
    /// The context's key.
    pub key: ContextKey,
    /// The context's number in this index (the messageId and task maps and
    /// the tenants' listings refer to contexts by it): its place in its
    /// key-map shard times [`SHARDS`], plus the shard.
    pub number: u32,
    /// Held for a write's whole critical section (validate, append, publish):
    /// this is the per-context lock that orders a context's records.
    pub write: write_lock::WriteLock,
    /// What readers see; write-locked only briefly, to publish.
    pub state: RwLock<ContextState>,
}

/// The active turn of each context that holds one under
/// [`TurnPolicy::SingleActive`](crate::TurnPolicy), by context number: in
/// memory only (a lease does not outlive the process), and aside from the
/// slots, as most contexts never hold one.
pub struct Leases([Mutex<HashMap<u32, Lease>>; SHARDS]);

impl Default for Leases {
    fn default() -> Self {
        Self(std::array::from_fn(|_| Mutex::default()))
    }
}

impl Leases {
    /// The shard of the leases that holds context number `number`'s.
    pub fn of(&self, number: u32) -> &Mutex<HashMap<u32, Lease>> {
        // In range: reduced modulo the array's length.
        &self.0[number as usize % SHARDS]
    }
}

/// Who holds a context's turn, and since when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The task whose handler holds it.
    pub task_id: String,
    /// When it was taken (ms since the epoch).
    pub since_ms: u64,
    /// Tells this lease from a later one of the same task.
    pub token: u64,
}

/// One shard of the key map: the slots of the contexts whose key falls in
/// it, in the order the shard first saw them, and a hash table of their
/// places in that vector. The table holds 4 bytes per context; the key it
/// is looked up by is the one in the slot. It hashes a key by its
/// [`TaskPrefix`] alone, so that it also finds the contexts a store-made
/// task id leads to.
#[derive(Default)]
struct KeyShard {
    table: HashTable<u32>,
    slots: Vec<Arc<ContextSlot>>,
}

type Shard = RwLock<KeyShard>;

/// What the key map's tables hash a key by: its prefix (the first 8 bytes
/// of its SHA-256 digest, uniform already) read big-endian, so that the low
/// bits, which pick a bucket, come from byte 7 and not from byte 0, which
/// picks the shard; then multiplied by an odd constant, so that the high
/// bits, which tell a bucket's entries apart, mix every byte.
fn prefix_hash(prefix: &TaskPrefix) -> u64 {
    u64::from_be_bytes(*prefix).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

impl KeyShard {
    fn slot(&self, place: u32) -> Option<&Arc<ContextSlot>> {
        self.slots.get(place as usize)
    }

    fn get(&self, key: &ContextKey) -> Option<&Arc<ContextSlot>> {
        let hash = prefix_hash(&task_prefix(key));
        let place = self
            .table
            .find(hash, |&p| self.slot(p).is_some_and(|s| s.key == *key))?;
        self.slot(*place)
    }

    /// The first context the shard saw whose key begins with `prefix`.
    fn prefix_owner(&self, prefix: &TaskPrefix) -> Option<&Arc<ContextSlot>> {
        let place = self
            .table
            .iter_hash(prefix_hash(prefix))
            .filter(|&&p| self.slot(p).is_some_and(|s| task_prefix(&s.key) == *prefix))
            .min()?;
        self.slot(*place)
    }

    /// Adds the slot of a key the shard does not hold.
    fn push(&mut self, slot: Arc<ContextSlot>) {
        let hash = prefix_hash(&task_prefix(&slot.key));
        // Fits: a shard's places times 64 fit a context number (see
        // `Index::get_or_insert`).
        let place = self.slots.len() as u32;
        self.slots.push(slot);
        let slots = &self.slots;
        // Every place in the table is one of `slots`.
        self.table.insert_unique(hash, place, |&p| {
            slots
                .get(p as usize)
                .map_or(0, |s| prefix_hash(&task_prefix(&s.key)))
        });
    }

    fn bytes(&self) -> usize {
        self.table.allocation_size() + self.slots.capacity() * std::mem::size_of::<usize>()
    }
}

/// A context's place in its tenant's listing: its first activity, the
/// first 8 bytes of its key's digest (big-endian, so they order as the
/// key's bytes do), and its number (which only two contexts opened in the
/// same millisecond with the same 8 bytes ever need).
pub type Listed = (u64, u64, u32);

/// The first 8 bytes of a key's digest as a listing orders them.
fn listing_head(key: &ContextKey) -> u64 {
    u64::from_be_bytes(task_prefix(key))
}

/// The listing entry of the context of `slot`, first active at `first_ms`.
pub fn listed(first_ms: u64, slot: &ContextSlot) -> Listed {
    (first_ms, listing_head(&slot.key), slot.number)
}

/// The first 8 bytes of a context key's digest. A task id the store makes
/// in a context is these 8 bytes and 8 random ones, as 32 hex digits: the id
/// itself then leads to its context, with no task-map entry, and the task
/// keeps only its random half.
pub type TaskPrefix = [u8; 8];

/// The prefix of `key`.
pub fn task_prefix(key: &ContextKey) -> TaskPrefix {
    // A 32-byte digest always has a first 8-byte chunk.
    key.digest().first_chunk().copied().unwrap_or_default()
}

/// The prefix of a store-made task id's 16 bytes.
pub fn prefix_of_id(id: &[u8; 16]) -> TaskPrefix {
    crate::index::tasks::split_id(*id).0
}

/// What `IdemShard::done` holds for a removed entry of the mapped run.
const GONE: IdemAt = IdemAt {
    context: u32::MAX,
    seq: u32::MAX,
};

/// One shard of the idempotency map.
#[derive(Default)]
struct IdemShard {
    /// Received messageIds newer than `base`, in front of it: an entry here
    /// hides `base`'s of the same key, and [`GONE`] hides it altogether.
    done: PackedMap<ShortKey, IdemAt>,
    /// Those the loaded (or last written) checkpoint holds, read in place.
    base: Option<IdemRun>,
    /// messageIds whose receive is under way.
    pending: HashMap<ShortKey, Arc<Gate>>,
}

impl IdemShard {
    fn get(&self, key: &ShortKey) -> Option<IdemAt> {
        match self.done.get(key) {
            Some(GONE) => None,
            Some(at) => Some(at),
            None => self.base.as_ref()?.get(key),
        }
    }

    fn remove(&mut self, key: &ShortKey) {
        if self.base.as_ref().is_some_and(|b| b.get(key).is_some()) {
            self.done.insert(*key, GONE);
        } else {
            self.done.remove(key);
        }
    }

    /// The entries in front of the run, ascending by key.
    fn newer(&self) -> Vec<(ShortKey, IdemAt)> {
        let mut newer: Vec<_> = self.done.entries().collect();
        newer.sort_unstable_by_key(|e| e.0);
        newer
    }

    /// Every entry, ascending by key: the run's, with those in front of it
    /// put over them.
    fn entries(&self) -> Vec<(ShortKey, IdemAt)> {
        let newer = self.newer();
        let mut out =
            Vec::with_capacity(newer.len() + self.base.as_ref().map_or(0, IdemRun::count));
        let mut old = self.base.iter().flat_map(IdemRun::iter).peekable();
        for (key, at) in newer {
            while let Some(entry) = old.next_if(|(k, _)| *k < key) {
                out.push(entry);
            }
            old.next_if(|(k, _)| *k == key);
            if at != GONE {
                out.push((key, at));
            }
        }
        out.extend(old);
        out
    }

    /// Puts `run` (a checkpoint's, written from this index) behind the
    /// entries in front: those it holds as they are leave the heap.
    fn rebase(&mut self, run: IdemRun) {
        let kept: Vec<_> = self
            .newer()
            .into_iter()
            .filter(|(key, at)| match run.get(key) {
                Some(was) => was != *at,
                None => *at != GONE,
            })
            .collect();
        self.done = PackedMap::default();
        self.done.extend_sorted(kept);
        self.base = Some(run);
    }
}

/// A one-shot gate: waiters block until it is opened.
#[derive(Debug, Default)]
pub struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
}

impl Gate {
    /// Blocks until the gate is opened.
    pub fn wait(&self) {
        let mut open = self.open.lock();
        while !*open {
            self.opened.wait(&mut open);
        }
    }

    fn open(&self) {
        *self.open.lock() = true;
        self.opened.notify_all();
    }
}

/// What a receive finds for its messageId.
pub enum IdemStart<'a> {
    /// Already received: the context's slot and the message's seq.
    Done(Arc<ContextSlot>, u64),
    /// Another receive of it is under way: wait, then look again.
    Wait(Arc<Gate>),
    /// This receive owns the messageId until the guard drops.
    Owner(IdemGuard<'a>),
}

/// Owns a pending messageId; on drop, removes the pending mark if the receive
/// did not complete, and wakes every waiter.
pub struct IdemGuard<'a> {
    index: &'a Index,
    claim: Option<IdemClaim>,
}

impl IdemGuard<'_> {
    /// The claim without the index: whoever takes it must give it back
    /// with [`Index::idem_release`], or the messageId's waiters wait for
    /// good (a deferred receive's pending write does, when it publishes).
    pub fn into_claim(mut self) -> Option<IdemClaim> {
        self.claim.take()
    }
}

impl Drop for IdemGuard<'_> {
    fn drop(&mut self) {
        if let Some(claim) = self.claim.take() {
            self.index.idem_release(claim);
        }
    }
}

/// A pending messageId owned apart from the index (see
/// [`IdemGuard::into_claim`]).
pub struct IdemClaim {
    key: ShortKey,
    gate: Arc<Gate>,
}

/// The whole index.
pub struct Index {
    shards: [Shard; SHARDS],
    /// (tenant, task id) key to the number of the task's context.
    tasks: [RwLock<PackedMap<ShortKey, u32>>; SHARDS],
    /// Set by the first task-map entry (see [`Index::any_task_entry`]).
    any_task_entry: AtomicBool,
    /// (tenant, messageId) key to where the message went.
    idem: [Mutex<IdemShard>; SHARDS],
    /// Per tenant, its visible contexts in listing order.
    tenants: RwLock<Listings>,
    /// The contexts' turn leases (shared with the guards that release them).
    pub leases: Arc<Leases>,
}

impl Default for Index {
    fn default() -> Self {
        Self {
            shards: std::array::from_fn(|_| RwLock::default()),
            tasks: std::array::from_fn(|_| RwLock::default()),
            any_task_entry: AtomicBool::new(false),
            idem: std::array::from_fn(|_| Mutex::default()),
            tenants: RwLock::default(),
            leases: Arc::default(),
        }
    }
}

impl Index {
    /// Which shard of the key map holds `key`: by the first byte of its
    /// digest (and so of its prefix).
    pub fn shard_of(key: &ContextKey) -> usize {
        usize::from(key.digest()[0]) % SHARDS
    }

    fn shard(&self, key: &ContextKey) -> &Shard {
        self.shard_by_first_byte(key.digest()[0])
    }

    fn shard_by_first_byte(&self, byte: u8) -> &Shard {
        // In range: reduced modulo the array's length.
        &self.shards[usize::from(byte) % SHARDS]
    }

    fn idem_shard(&self, key: &ShortKey) -> &Mutex<IdemShard> {
        // In range: reduced modulo the array's length.
        &self.idem[Index::idem_shard_of(key)]
    }

    fn task_shard(&self, key: &ShortKey) -> &RwLock<PackedMap<ShortKey, u32>> {
        // In range: reduced modulo the array's length.
        &self.tasks[usize::from(key[0]) % SHARDS]
    }

    /// The context whose key begins a store-made task id: the first context
    /// the index saw with that prefix.
    pub fn prefix_context(&self, prefix: &TaskPrefix) -> Option<Arc<ContextSlot>> {
        let shard = self.shard_by_first_byte(prefix[0]).read();
        shard.prefix_owner(prefix).cloned()
    }

    /// The number of the context a task id beginning with `prefix` leads
    /// to: the first context the index saw with that prefix.
    pub fn prefix_owner(&self, prefix: &TaskPrefix) -> Option<u32> {
        let shard = self.shard_by_first_byte(prefix[0]).read();
        shard.prefix_owner(prefix).map(|s| s.number)
    }

    /// Whether task `id` of context number `context` is found through the
    /// prefix of its id, so that the task map needs no entry for it.
    fn routes_to(&self, id: &str, context: u32) -> bool {
        match IdKey::of(id) {
            IdKey::Made(bytes) => self.prefix_owner(&prefix_of_id(&bytes)) == Some(context),
            IdKey::Other(_) => false,
        }
    }

    /// The slot of context number `number`.
    fn slot_of(&self, number: u32) -> Option<Arc<ContextSlot>> {
        // In range: reduced modulo the array's length.
        let shard = self.shards[number as usize % SHARDS].read();
        shard.slots.get(number as usize / SHARDS).cloned()
    }

    /// The context of the task with this (tenant, task id) key.
    pub fn task_context(&self, task_key: &[u8; 32]) -> Option<Arc<ContextSlot>> {
        let short = short_key(task_key);
        let number = self.task_shard(&short).read().get(&short)?;
        self.slot_of(number)
    }

    /// Enters task `id` of `tenant`'s context number `context` in the task
    /// map, unless its id's prefix leads there.
    pub fn enter_task(&self, tenant: &str, context: u32, id: &str) {
        if self.routes_to(id, context) {
            return;
        }
        let short = short_key(&task_key(tenant, id));
        self.any_task_entry.store(true, Ordering::Release);
        self.task_shard(&short).write().insert(short, context);
    }

    /// Enters every task of `state` (`tenant`'s context number `context`)
    /// that its id's prefix does not lead to (after loading the state).
    pub fn enter_tasks(&self, tenant: &str, context: u32, state: &ContextState) {
        self.for_mapped_tasks(context, state, |id| self.enter_task(tenant, context, id));
    }

    /// Takes every task of `state` out of the task map (its context is gone).
    pub fn leave_tasks(&self, tenant: &str, context: u32, state: &ContextState) {
        self.for_mapped_tasks(context, state, |id| {
            if !self.routes_to(id, context) {
                let short = short_key(&task_key(tenant, id));
                self.task_shard(&short).write().remove(&short);
            }
        });
    }

    /// Whether [`enter_tasks`](Self::enter_tasks) has any task of `state`
    /// (context number `context`) to enter: not when the context holds
    /// the prefix of its id and every task's id was made in it.
    pub fn has_mapped_tasks(&self, context: u32, state: &ContextState) -> bool {
        state.task_count() > 0
            && (!self.owns_prefix(context, state) || state.other_task_ids().next().is_some())
    }

    /// Whether context number `context` (of `state`) holds the prefix of
    /// its own id: the ids it makes then lead to it without an entry.
    fn owns_prefix(&self, context: u32, state: &ContextState) -> bool {
        self.prefix_owner(&state.prefix()) == Some(context)
    }

    /// Calls `f` with the id of each task of `state` that may have a
    /// task-map entry: all but those the store made in the context, when
    /// the context owns its prefix (their ids lead to it without one).
    fn for_mapped_tasks(&self, context: u32, state: &ContextState, mut f: impl FnMut(&str)) {
        let owns = state.task_count() > 0 && self.owns_prefix(context, state);
        if owns {
            // Only those not made here, which the context lists aside: no
            // walk over its tasks.
            state.other_task_ids().for_each(f);
        } else {
            state.tasks().for_each(|t| f(&t.id().to_string()));
        }
    }

    /// Whether the task map has ever held an entry: until it has, every
    /// task is found through its id's prefix.
    pub fn any_task_entry(&self) -> bool {
        self.any_task_entry.load(Ordering::Acquire)
    }

    /// Looks up a messageId, claiming it if it is unknown.
    pub fn idem_start(&self, key: [u8; 32]) -> IdemStart<'_> {
        let key = short_key(&key);
        let mut shard = self.idem_shard(&key).lock();
        if let Some(at) = shard.get(&key) {
            if let Some(context) = self.slot_of(at.context) {
                return IdemStart::Done(context, at.seq());
            }
        }
        if let Some(gate) = shard.pending.get(&key) {
            return IdemStart::Wait(gate.clone());
        }
        let gate = Arc::new(Gate::default());
        shard.pending.insert(key, gate.clone());
        IdemStart::Owner(IdemGuard {
            index: self,
            claim: Some(IdemClaim { key, gate }),
        })
    }

    /// Lets a claimed messageId go: its pending mark is removed if the
    /// receive did not complete (a completed one left its entry), and
    /// every waiter wakes to look again.
    pub fn idem_release(&self, claim: IdemClaim) {
        let mut shard = self.idem_shard(&claim.key).lock();
        if shard
            .pending
            .get(&claim.key)
            .is_some_and(|g| Arc::ptr_eq(g, &claim.gate))
        {
            shard.pending.remove(&claim.key);
        }
        drop(shard);
        claim.gate.open();
    }

    /// Where a received messageId went (its context and seq), without
    /// claiming it if it is unknown.
    pub fn idem_lookup(&self, key: [u8; 32]) -> Option<(Arc<ContextSlot>, u64)> {
        let key = short_key(&key);
        let shard = self.idem_shard(&key).lock();
        let at = shard.get(&key)?;
        Some((self.slot_of(at.context)?, at.seq()))
    }

    /// Every received messageId, shard by shard: its short key, its
    /// context's number and its seq, ascending by short key in each shard.
    pub fn idem_shards(&self) -> Vec<Vec<(ShortKey, IdemAt)>> {
        self.idem
            .iter()
            .map(|shard| shard.lock().entries())
            .collect()
    }

    /// Puts each shard's run of a checkpoint (loaded, or just written from
    /// this index) behind its entries, which then keep only what the run
    /// does not hold as they are.
    pub fn idem_rebase(&self, runs: Vec<IdemRun>) {
        for (shard, run) in self.idem.iter().zip(runs) {
            shard.lock().rebase(run);
        }
    }

    /// How many messageId entries sit in front of the mapped runs, on the
    /// heap.
    #[cfg(test)]
    pub fn idem_in_front(&self) -> usize {
        self.idem
            .iter()
            .map(|s| s.lock().done.entries().count())
            .sum()
    }

    /// Which shard of the messageId map holds `key`.
    pub fn idem_shard_of(key: &ShortKey) -> usize {
        usize::from(key[0]) % SHARDS
    }

    /// Records where a received messageId went: record `seq` of the context
    /// whose slot has number `context`.
    pub fn idem_done(&self, key: ShortKey, context: u32, seq: u64) {
        self.idem_shard(&key)
            .lock()
            .done
            .insert(key, IdemAt::new(context, seq));
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
        let mut shard = self.shard(key).write();
        if let Some(slot) = shard.get(key) {
            return slot.clone();
        }
        let state = ContextState::with_prefix(task_prefix(key));
        Index::add_slot(&mut shard, key, state)
    }

    /// Installs a context read from a checkpoint, with its state, and
    /// returns its slot (a key seen twice keeps the later state).
    pub fn insert_loaded(&self, key: &ContextKey, state: ContextState) -> Arc<ContextSlot> {
        let mut shard = self.shard(key).write();
        if let Some(slot) = shard.get(key) {
            *slot.state.write() = state;
            return slot.clone();
        }
        Index::add_slot(&mut shard, key, state)
    }

    /// Adds the slot of `key`, which `shard` (its shard) does not hold.
    fn add_slot(shard: &mut KeyShard, key: &ContextKey, state: ContextState) -> Arc<ContextSlot> {
        // Fits: 2³² contexts, at hundreds of bytes each, would take
        // terabytes of index.
        let place = shard.slots.len() * SHARDS + Index::shard_of(key);
        let slot = Arc::new(ContextSlot {
            key: *key,
            number: u32::try_from(place).unwrap_or(u32::MAX),
            write: write_lock::WriteLock::default(),
            state: RwLock::new(state),
        });
        shard.push(slot.clone());
        slot
    }

    /// Makes room in shard `shard` of the key map for `more` contexts.
    pub fn reserve(&self, shard: usize, more: usize) {
        if let Some(shard) = self.shards.get(shard) {
            let mut shard = shard.write();
            let KeyShard { table, slots } = &mut *shard;
            slots.reserve(more);
            table.reserve(more, |&p| {
                slots
                    .get(p as usize)
                    .map_or(0, |s| prefix_hash(&task_prefix(&s.key)))
            });
        }
    }

    /// Makes a context visible in its tenant's listing.
    pub fn list_in_tenant(&self, tenant: &str, first_ms: u64, slot: &ContextSlot) {
        let entry = listed(first_ms, slot);
        let mut tenants = self.tenants.write();
        match tenants.set_mut(tenant) {
            Some(set) => {
                set.insert(entry);
            }
            None => {
                tenants
                    .sets
                    .insert(tenant.to_string(), BTreeSet::from([entry]));
            }
        }
    }

    /// Makes many contexts of one tenant visible at once, as an open loads
    /// them: `runs`, in any order, become the tenant's listing on its first
    /// use (see [`Listings`]).
    pub fn list_many_in_tenant(&self, tenant: &str, runs: Vec<Vec<Listed>>) {
        self.tenants
            .write()
            .loaded
            .entry(tenant.to_string())
            .or_default()
            .extend(runs);
    }

    /// Removes a context from its tenant's listing.
    pub fn unlist_in_tenant(&self, tenant: &str, first_ms: u64, slot: &ContextSlot) {
        if let Some(set) = self.tenants.write().set_mut(tenant) {
            set.remove(&listed(first_ms, slot));
        }
    }

    /// Forgets where a messageId went (its context is gone).
    pub fn idem_forget(&self, key: [u8; 32]) {
        let key = short_key(&key);
        self.idem_shard(&key).lock().remove(&key);
    }

    /// Up to `limit` of the tenant's contexts after the one first active at
    /// `after`'s time with `after`'s key, in listing order (see [`Listed`]),
    /// each with its first activity.
    pub fn tenant_page(
        &self,
        tenant: &str,
        after: Option<(u64, ContextKey)>,
        limit: usize,
    ) -> Vec<(u64, Arc<ContextSlot>)> {
        use std::ops::Bound::{Excluded, Unbounded};
        // A context the index does not hold (a page token of another
        // store) resumes after every one with its time and head.
        let from = after.map_or(Unbounded, |(ms, key)| {
            let number = self.get(&key).map_or(u32::MAX, |s| s.number);
            Excluded((ms, listing_head(&key), number))
        });
        let page = |set: Option<&BTreeSet<Listed>>| -> Vec<Listed> {
            set.map_or_else(Vec::new, |set| {
                set.range((from, Unbounded)).take(limit).copied().collect()
            })
        };
        let listed = {
            let tenants = self.tenants.read();
            if tenants.loaded.contains_key(tenant) {
                // Its first use since a load: built under the write lock.
                drop(tenants);
                page(self.tenants.write().set_mut(tenant).map(|set| &*set))
            } else {
                page(tenants.sets.get(tenant))
            }
        };
        listed
            .into_iter()
            .filter_map(|(ms, _, number)| Some((ms, self.slot_of(number)?)))
            .collect()
    }

    /// An estimate of the bytes of the maps themselves (key → slot, task id
    /// and messageId maps, the tenants' listings), counting each entry and
    /// a hash table's slack.
    pub fn approx_map_bytes(&self) -> u64 {
        use std::mem::size_of;
        let contexts: usize = self.shards.iter().map(|s| s.read().bytes()).sum();
        let tasks: usize = self.tasks.iter().map(|s| s.read().approx_bytes()).sum();
        // The mapped runs count as the index's: they are in memory while
        // the map's pages are.
        let idem: usize = self
            .idem
            .iter()
            .map(|s| {
                let s = s.lock();
                s.done.approx_bytes() + s.base.as_ref().map_or(0, IdemRun::bytes)
            })
            .sum();
        // The listing's B-tree nodes hold 11 entries and are about two
        // thirds full.
        let listed = self.visible_contexts() * size_of::<Listed>() * 3 / 2;
        (contexts + tasks + idem + listed) as u64
    }

    /// The slot of every context the index holds.
    pub fn all_slots(&self) -> Vec<Arc<ContextSlot>> {
        self.shards
            .iter()
            .flat_map(|s| s.read().slots.clone())
            .collect()
    }

    /// Number of visible contexts.
    pub fn visible_contexts(&self) -> usize {
        let tenants = self.tenants.read();
        let built: usize = tenants.sets.values().map(BTreeSet::len).sum();
        let loaded: usize = tenants.loaded.values().flatten().map(Vec::len).sum();
        built + loaded
    }
}

/// The tenants' listings. The listings a checkpoint's load hands over are
/// kept as it hands them (one run per loading thread, in the shards'
/// order), and each is sorted into a tenant's B-tree on its first use:
/// sorting, merging and building them at the load took 1.1-1.5 ms of a
/// reopen of 10,000 contexts on 2 cores, for listings that most runs of a
/// command never read.
#[derive(Default)]
struct Listings {
    /// Each tenant's listing.
    sets: HashMap<String, BTreeSet<Listed>>,
    /// Listings loaded and not yet used: each tenant's entries, in runs.
    loaded: HashMap<String, Vec<Vec<Listed>>>,
}

impl Listings {
    /// The listing of `tenant`, built first if it was loaded and not yet
    /// used.
    fn set_mut(&mut self, tenant: &str) -> Option<&mut BTreeSet<Listed>> {
        if let Some(runs) = self.loaded.remove(tenant) {
            // Built whole (sorted, then filled leaf by leaf), not entry by
            // entry.
            let loaded: BTreeSet<Listed> = runs.into_iter().flatten().collect();
            match self.sets.get_mut(tenant) {
                Some(set) => set.extend(loaded),
                None => {
                    self.sets.insert(tenant.to_string(), loaded);
                }
            }
        }
        self.sets.get_mut(tenant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::idem_run::tests::{key, run_of};

    fn at(context: u32, seq: u32) -> IdemAt {
        IdemAt { context, seq }
    }

    #[test]
    fn entries_in_front_of_the_mapped_run_hide_and_replace_its_own() {
        let mut shard = IdemShard::default();
        shard.rebase(run_of(&[(1, 0, 10), (3, 1, 11), (5, 0, 12)], &[7, 9]));
        assert_eq!(shard.get(&key(3)), Some(at(9, 11)));
        // Removing a mapped entry hides it; receiving it again puts the new
        // one over it.
        shard.remove(&key(3));
        assert_eq!(shard.get(&key(3)), None);
        shard.done.insert(key(3), at(2, 0));
        assert_eq!(shard.get(&key(3)), Some(at(2, 0)));
        shard.remove(&key(5));
        shard.done.insert(key(4), at(2, 1));
        // Removing an entry only the heap holds leaves nothing behind.
        shard.done.insert(key(6), at(2, 2));
        shard.remove(&key(6));
        assert_eq!(shard.get(&key(6)), None);
        let want = vec![(key(1), at(7, 10)), (key(3), at(2, 0)), (key(4), at(2, 1))];
        assert_eq!(shard.entries(), want);
        // A checkpoint of exactly these entries takes them all off the heap.
        shard.rebase(run_of(&[(1, 0, 10), (3, 1, 0), (4, 1, 1)], &[7, 2]));
        assert_eq!(shard.done.entries().count(), 0);
        assert_eq!(shard.entries(), want);
    }

    #[test]
    fn a_rebase_keeps_what_changed_after_the_checkpoint_was_taken() {
        let mut shard = IdemShard::default();
        shard.rebase(run_of(&[(1, 0, 10), (2, 0, 11)], &[7]));
        // Taken as the checkpoint is written: 3 received, 2 removed.
        shard.done.insert(key(3), at(7, 12));
        shard.remove(&key(2));
        // Meanwhile, before the switch: 4 received, 1 removed, 3 moved.
        shard.done.insert(key(4), at(7, 13));
        shard.remove(&key(1));
        shard.done.insert(key(3), at(8, 0));
        shard.rebase(run_of(&[(1, 0, 10), (3, 0, 12)], &[7]));
        let want = vec![(key(3), at(8, 0)), (key(4), at(7, 13))];
        assert_eq!(shard.entries(), want);
        assert_eq!(shard.get(&key(1)), None);
        assert_eq!(shard.get(&key(2)), None);
        // The heap holds the three changes: 1 hidden, 3 replaced, 4 new.
        assert_eq!(shard.done.entries().count(), 3);
    }

    fn context_key(n: u32) -> ContextKey {
        ContextKey::derive_unchecked("tenant", &format!("context-{n}"))
    }

    /// A key whose digest begins with `head`, then `n`.
    fn key_with_head(head: u64, n: u8) -> ContextKey {
        let mut digest = [n; 32];
        digest[..8].copy_from_slice(&head.to_be_bytes());
        ContextKey::from_parts(1, digest)
    }

    #[test]
    fn a_prefix_leads_to_the_first_context_seen_with_it() {
        let index = Index::default();
        let first = index.get_or_insert(&key_with_head(7, 2));
        let second = index.get_or_insert(&key_with_head(7, 1));
        let prefix = 7u64.to_be_bytes();
        assert_eq!(index.prefix_owner(&prefix), Some(first.number));
        // Still the first once the shard's table has grown many times over
        // (the whole shard 0, where both fall).
        for n in 0..5000 {
            index.get_or_insert(&context_key(n));
        }
        assert_eq!(index.prefix_owner(&prefix), Some(first.number));
        assert!(Arc::ptr_eq(&index.prefix_context(&prefix).unwrap(), &first));
        assert!(Arc::ptr_eq(&index.get(&second.key).unwrap(), &second));
        assert_eq!(index.prefix_owner(&8u64.to_be_bytes()), None);
        // Every other context leads from its own prefix.
        for n in 0..5000 {
            let key = context_key(n);
            let owner = index.prefix_owner(&task_prefix(&key));
            assert_eq!(owner, Some(index.get(&key).unwrap().number));
        }
    }

    #[test]
    fn contexts_are_found_by_key_and_by_number() {
        let index = Index::default();
        let keys: Vec<_> = (0..2000).map(context_key).collect();
        let slots: Vec<_> = keys.iter().map(|k| index.get_or_insert(k)).collect();
        let mut numbers = std::collections::HashSet::new();
        for (key, slot) in keys.iter().zip(&slots) {
            assert_eq!(slot.key, *key);
            assert!(numbers.insert(slot.number), "number {} twice", slot.number);
            assert!(Arc::ptr_eq(&index.get(key).unwrap(), slot));
            assert!(Arc::ptr_eq(&index.get_or_insert(key), slot));
            assert!(Arc::ptr_eq(&index.slot_of(slot.number).unwrap(), slot));
            // The number names the key-map shard the key falls in.
            assert_eq!(slot.number as usize % SHARDS, Index::shard_of(key));
        }
        assert!(index.get(&context_key(2000)).is_none());
        assert_eq!(index.all_slots().len(), keys.len());
        // Numbers are dense enough to index a table by.
        let max = numbers.iter().max().copied().unwrap() as usize;
        assert!(max < 2 * keys.len(), "largest number {max}");
    }

    #[test]
    fn a_listing_pages_by_first_activity_then_key() {
        let index = Index::default();
        // Many contexts in few milliseconds, two of them sharing the first
        // 8 bytes of their digest (the listing's head) as well.
        let mut keys: Vec<_> = (0..40).map(context_key).collect();
        keys.push(key_with_head(7, 1));
        keys.push(key_with_head(7, 2));
        let mut want = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            let ms = if i >= 40 { 1 } else { i as u64 % 3 };
            let slot = index.get_or_insert(key);
            index.list_in_tenant("tenant", ms, &slot);
            want.push((ms, *key));
        }
        // One that is unlisted again, and one of another tenant.
        let gone = index.get_or_insert(&context_key(99));
        index.list_in_tenant("tenant", 1, &gone);
        index.unlist_in_tenant("tenant", 1, &gone);
        index.list_in_tenant("other", 0, &index.get_or_insert(&context_key(98)));
        want.sort();
        let mut got = Vec::new();
        let mut after = None;
        loop {
            let page = index.tenant_page("tenant", after, 3);
            if page.is_empty() {
                break;
            }
            assert!(page.len() <= 3);
            got.extend(page.iter().map(|(ms, slot)| (*ms, slot.key)));
            after = got.last().copied();
        }
        assert_eq!(got, want);
        // A key the index does not hold resumes after every context of its
        // time and head.
        let page = index.tenant_page("tenant", Some((1, key_with_head(7, 0))), 100);
        let first = page.first().map(|(ms, slot)| (*ms, slot.key));
        let past_ties = want
            .iter()
            .position(|w| *w == (1, key_with_head(7, 2)))
            .unwrap()
            + 1;
        assert_eq!(first, want.get(past_ties).copied());
        assert_eq!(index.visible_contexts(), want.len() + 1);
    }

    #[test]
    fn a_loaded_listing_answers_as_one_listed_entry_by_entry() {
        let (listed_one_by_one, loaded) = (Index::default(), Index::default());
        let mut runs: [Vec<Listed>; 3] = Default::default();
        for (i, tenant) in ["a", "a", "b"].iter().cycle().take(60).enumerate() {
            let key = context_key(i as u32);
            let ms = (60 - i as u64) % 7;
            listed_one_by_one.list_in_tenant(tenant, ms, &listed_one_by_one.get_or_insert(&key));
            let slot = loaded.get_or_insert(&key);
            // Runs in no order, as loading threads hand them over.
            runs[i % 3].push(listed(ms, &slot));
        }
        let [a1, a2, b] = runs;
        loaded.list_many_in_tenant("a", vec![a2, a1]);
        loaded.list_many_in_tenant("b", vec![b]);
        let pages = |index: &Index, tenant| {
            let page = index.tenant_page(tenant, None, usize::MAX);
            page.iter().map(|(ms, s)| (*ms, s.key)).collect::<Vec<_>>()
        };
        for index in [&listed_one_by_one, &loaded] {
            assert_eq!(index.visible_contexts(), 60);
            // The first use of "a" changes it; "b" is first read.
            let slot = index.get(&context_key(3)).unwrap();
            index.unlist_in_tenant("a", (60 - 3) % 7, &slot);
            index.list_in_tenant("a", 100, &index.get_or_insert(&context_key(500)));
            assert_eq!(index.visible_contexts(), 60);
        }
        for tenant in ["a", "b"] {
            assert_eq!(pages(&loaded, tenant), pages(&listed_one_by_one, tenant));
        }
        assert_eq!(pages(&loaded, "b").len(), 20);
        let a = pages(&loaded, "a");
        assert_eq!((a.len(), a.last().map(|e| e.0)), (40, Some(100)));
        assert!(a.windows(2).all(|w| w[0] < w[1]));
    }
}
