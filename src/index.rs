//! The in-memory index: context key to that context's records.
//!
//! The map from key to context is split into [`SHARDS`] independently locked
//! shards, so looking up one context never waits on a write to another's shard
//! entry for long. Each context then has its own slot with its own locks.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex, RwLock};
use serde::{Deserialize, Serialize};

use crate::log::segments::{PackedLoc, RecordLoc};
use crate::namespace::ContextKey;
use crate::tasks::TaskEntry;

/// Number of shards of the key map.
pub const SHARDS: usize = 64;

/// Who owns a context and what it is called; set by its opening record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ContextMeta {
    /// The tenant, byte for byte.
    pub tenant: Box<str>,
    /// The original contextId, byte for byte.
    pub context_id: Box<str>,
    /// Where the opening record is.
    pub opened: RecordLoc,
    /// When the context was opened (ms since the epoch).
    pub first_ms: u64,
}

/// What the index knows of one context.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ContextState {
    /// `None` until the opening record is durable: such a context is invisible.
    pub meta: Option<ContextMeta>,
    /// Time of the latest record (ms since the epoch).
    pub last_ms: u64,
    /// The seq the next record of this context gets.
    pub next_seq: u64,
    /// The records that carry a message (inbound messages, and statuses with
    /// a message), in the context's order: the context's history.
    #[serde(with = "message_refs")]
    pub messages: Vec<MessageRef>,
    /// The context's tasks, in the order they were opened.
    pub tasks: Vec<TaskEntry>,
    /// Once the context has more than [`SCAN_TASKS`] tasks: a 64-bit hash
    /// of a task id to its position in `tasks` (rebuilt, not checkpointed).
    /// Ids whose hash another task took first are found by a scan, so a
    /// collision costs time, never a wrong answer.
    #[serde(skip)]
    pub task_pos: Option<Box<HashMap<u64, u32>>>,
    /// Set once the context is deleted or expired: it keeps only its name.
    pub gone: Option<Gone>,
}

/// A context with at most this many tasks finds one by scanning them.
const SCAN_TASKS: usize = 16;

/// Why a context is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Gone {
    /// Deleted by `delete_context`.
    Deleted,
    /// Expired under the retention policy.
    Expired,
}

/// Whether a context can be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Life {
    /// No context of that key (or its first record is not yet durable).
    Missing,
    /// In use.
    Live,
    /// Deleted or expired: answers as missing, its id is refused.
    Gone(Gone),
}

/// The most records one context holds: seqs fit in 4 bytes in the index.
pub const MAX_SEQ: u64 = u32::MAX as u64;

/// Where a message is, and its seq: 16 bytes per stored message (seq,
/// segment id, offset and length, each in 4 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageRef {
    seq: u32,
    loc: PackedLoc,
}

impl MessageRef {
    /// Record `seq` of its context, at `loc`.
    pub fn new(seq: u64, loc: RecordLoc) -> Self {
        MessageRef {
            // In range: appends refuse a seq past MAX_SEQ, and an open
            // refuses such a record.
            seq: u32::try_from(seq).unwrap_or(u32::MAX),
            loc: loc.into(),
        }
    }

    /// The message's seq in its context.
    pub fn seq(&self) -> u64 {
        u64::from(self.seq)
    }

    /// Where its record is.
    pub fn loc(&self) -> RecordLoc {
        self.loc.into()
    }
}

/// `Vec<MessageRef>` in the checkpoint as one byte string of 16-byte
/// little-endian entries (seq, segment, offset, len, u32 each): loading a
/// checkpoint is then one pass over bytes instead of a decoder call per field.
mod message_refs {
    use serde::de::{Error, Visitor};
    use serde::{Deserializer, Serializer};

    use super::MessageRef;
    use crate::log::segments::PackedLoc;

    const ENTRY: usize = 16;

    pub fn serialize<S: Serializer>(refs: &[MessageRef], s: S) -> Result<S::Ok, S::Error> {
        let mut bytes = Vec::with_capacity(refs.len() * ENTRY);
        for r in refs {
            for field in [r.seq, r.loc.segment, r.loc.offset, r.loc.len] {
                bytes.extend_from_slice(&field.to_le_bytes());
            }
        }
        s.serialize_bytes(&bytes)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<MessageRef>, D::Error> {
        d.deserialize_bytes(RefsVisitor)
    }

    struct RefsVisitor;

    impl Visitor<'_> for RefsVisitor {
        type Value = Vec<MessageRef>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("16-byte message refs")
        }

        fn visit_bytes<E: Error>(self, bytes: &[u8]) -> Result<Self::Value, E> {
            if !bytes.len().is_multiple_of(ENTRY) {
                return Err(E::custom("message refs are not a whole number of entries"));
            }
            let u32_at = |c: &[u8], i: usize| {
                c.get(i..i + 4)
                    .and_then(|b| b.try_into().ok())
                    .map_or(0, u32::from_le_bytes)
            };
            Ok(bytes
                .chunks_exact(ENTRY)
                .map(|c| MessageRef {
                    seq: u32_at(c, 0),
                    loc: PackedLoc {
                        segment: u32_at(c, 4),
                        offset: u32_at(c, 8),
                        len: u32_at(c, 12),
                    },
                })
                .collect())
        }

        fn visit_byte_buf<E: Error>(self, bytes: Vec<u8>) -> Result<Self::Value, E> {
            self.visit_bytes(&bytes)
        }
    }
}

impl ContextState {
    /// An estimate of the bytes this entry holds (vectors at their capacity).
    pub fn approx_bytes(&self) -> u64 {
        use std::mem::size_of;
        let meta = self
            .meta
            .as_ref()
            .map_or(0, |m| m.tenant.len() + m.context_id.len());
        let tasks: usize = self.tasks.capacity() * size_of::<TaskEntry>()
            + self.tasks.iter().map(TaskEntry::heap_bytes).sum::<usize>();
        let task_pos = self.task_pos.as_ref().map_or(0, |m| {
            size_of::<HashMap<u64, u32>>() + m.capacity() * (size_of::<(u64, u32)>() + 1)
        });
        (size_of::<ContextSlot>()
            + meta
            + self.messages.capacity() * size_of::<MessageRef>()
            + tasks
            + task_pos) as u64
    }

    /// Whether the context can be used now, under `retention`.
    pub fn life(&self, now_ms: u64, retention: Option<std::time::Duration>) -> Life {
        if self.meta.is_none() {
            return Life::Missing;
        }
        if let Some(gone) = self.gone {
            return Life::Gone(gone);
        }
        let idle = now_ms.saturating_sub(self.last_ms);
        match retention {
            Some(r) if u128::from(idle) >= r.as_millis() => Life::Gone(Gone::Expired),
            _ => Life::Live,
        }
    }

    /// The position in `tasks` of the task of `id`.
    fn task_index(&self, id: &str) -> Option<usize> {
        let hinted = self.task_pos.as_ref().and_then(|pos| {
            pos.get(&crate::tasks::TaskId::hash_of(id))
                .map(|&i| i as usize)
        });
        match hinted {
            Some(i) if self.tasks.get(i).is_some_and(|t| t.id.is(id)) => Some(i),
            _ => self.tasks.iter().position(|t| t.id.is(id)),
        }
    }

    /// The task of `id`.
    pub fn task(&self, id: &str) -> Option<&TaskEntry> {
        self.task_index(id).and_then(|i| self.tasks.get(i))
    }

    /// The task of `id`, to change.
    pub fn task_mut(&mut self, id: &str) -> Option<&mut TaskEntry> {
        self.task_index(id).and_then(|i| self.tasks.get_mut(i))
    }

    /// Rebuilds `task_pos` from `tasks` (after loading a checkpoint).
    pub fn rebuild_task_pos(&mut self) {
        self.task_pos = None;
        if self.tasks.len() > SCAN_TASKS {
            let mut pos = HashMap::with_capacity(self.tasks.len());
            for (i, task) in self.tasks.iter().enumerate() {
                hint_task(&mut pos, task, i);
            }
            self.task_pos = Some(Box::new(pos));
        }
    }

    /// Adds a new task.
    pub fn add_task(&mut self, task: TaskEntry) {
        push(&mut self.tasks, task);
        match (&mut self.task_pos, self.tasks.last()) {
            (Some(pos), Some(task)) => hint_task(pos, task, self.tasks.len() - 1),
            (None, _) if self.tasks.len() > SCAN_TASKS => self.rebuild_task_pos(),
            _ => {}
        }
    }

    /// Up to `max` of the newest messages with seq below `before` (all, for
    /// `None`), oldest first, and how many messages lie below `before`.
    pub fn newest_before(&self, before: Option<u64>, max: usize) -> (&[MessageRef], u64) {
        let end = before.map_or(self.messages.len(), |b| {
            self.messages.partition_point(|m| m.seq() < b)
        });
        let below = self.messages.get(..end).unwrap_or_default();
        let start = below.len().saturating_sub(max);
        (below.get(start..).unwrap_or_default(), end as u64)
    }
}

/// Pushes `item`, growing a full vector by half its length (at least 2)
/// rather than doubling it: the index's vectors are many and mostly short,
/// so a doubling's spare half would be a third of their memory.
pub fn push<T>(v: &mut Vec<T>, item: T) {
    if v.len() == v.capacity() {
        v.reserve_exact((v.len() / 2).max(2));
    }
    v.push(item);
}

/// Records where task `i` is, unless another task has its hash.
fn hint_task(pos: &mut HashMap<u64, u32>, task: &TaskEntry, i: usize) {
    if let Ok(i) = u32::try_from(i) {
        pos.entry(task.id.hash64()).or_insert(i);
    }
}

/// One context's slot.
#[derive(Debug, Default)]
pub struct ContextSlot {
    /// The context's number in this index (the messageId and task maps
    /// refer to contexts by it).
    pub number: u32,
    /// Held for a write's whole critical section (validate, append, publish):
    /// this is the per-context lock that orders a context's records.
    pub write: Mutex<()>,
    /// What readers see; write-locked only briefly, to publish.
    pub state: RwLock<ContextState>,
    /// The active turn under [`TurnPolicy::SingleActive`](crate::TurnPolicy);
    /// in memory only (a lease does not outlive the process). Boxed: 8 bytes
    /// in every context instead of 40, as most contexts never hold one.
    pub lease: Mutex<Option<Box<Lease>>>,
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

type Shard = RwLock<HashMap<ContextKey, Arc<ContextSlot>>>;

/// The first 16 bytes of a (tenant, messageId) or (tenant, task id) key:
/// what the idempotency and task maps hold, to keep them small. Two distinct
/// ids share one only with probability about n²/2¹²⁹ for n ids (a birthday
/// bound of 2⁶⁴ ids), which no store reaches.
pub type ShortKey = [u8; 16];

/// The short form of a full key.
pub fn short_key(key: &[u8; 32]) -> ShortKey {
    let mut short = [0u8; 16];
    short.copy_from_slice(key.split_at(16).0);
    short
}

/// Where a received message went: 8 bytes (context number, seq).
#[derive(Debug, Clone, Copy)]
struct IdemAt {
    context: u32,
    seq: u32,
}

impl IdemAt {
    fn new(context: u32, seq: u64) -> Self {
        // In range: no record has a seq past MAX_SEQ (see MessageRef::new).
        Self {
            context,
            seq: u32::try_from(seq).unwrap_or(u32::MAX),
        }
    }

    fn seq(&self) -> u64 {
        u64::from(self.seq)
    }
}

/// One shard of the idempotency map.
#[derive(Default)]
struct IdemShard {
    /// Received messageIds.
    done: HashMap<ShortKey, IdemAt>,
    /// messageIds whose receive is under way.
    pending: HashMap<ShortKey, Arc<Gate>>,
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
    /// Already received.
    Done(ContextKey, u64),
    /// Another receive of it is under way: wait, then look again.
    Wait(Arc<Gate>),
    /// This receive owns the messageId until the guard drops.
    Owner(IdemGuard<'a>),
}

/// Owns a pending messageId; on drop, removes the pending mark if the receive
/// did not complete, and wakes every waiter.
pub struct IdemGuard<'a> {
    index: &'a Index,
    key: ShortKey,
    gate: Arc<Gate>,
}

impl Drop for IdemGuard<'_> {
    fn drop(&mut self) {
        let mut shard = self.index.idem_shard(&self.key).lock();
        if shard
            .pending
            .get(&self.key)
            .is_some_and(|g| Arc::ptr_eq(g, &self.gate))
        {
            shard.pending.remove(&self.key);
        }
        drop(shard);
        self.gate.open();
    }
}

/// The whole index.
pub struct Index {
    shards: [Shard; SHARDS],
    /// (tenant, task id) key to the number of the task's context.
    tasks: [RwLock<HashMap<ShortKey, u32>>; SHARDS],
    /// (tenant, messageId) key to where the message went.
    idem: [Mutex<IdemShard>; SHARDS],
    /// Context number to key: every context the index has held, in the
    /// order it first saw them (a leaf lock: nothing is taken under it).
    numbers: RwLock<Vec<ContextKey>>,
    /// Per tenant, its visible contexts ordered by (first activity, key).
    tenants: RwLock<HashMap<String, BTreeSet<(u64, ContextKey)>>>,
}

impl Default for Index {
    fn default() -> Self {
        Self {
            shards: std::array::from_fn(|_| RwLock::default()),
            tasks: std::array::from_fn(|_| RwLock::default()),
            idem: std::array::from_fn(|_| Mutex::default()),
            numbers: RwLock::default(),
            tenants: RwLock::default(),
        }
    }
}

impl Index {
    fn shard(&self, key: &ContextKey) -> &Shard {
        // In range: the index is reduced modulo the array's length.
        &self.shards[usize::from(key.digest()[0]) % SHARDS]
    }

    fn idem_shard(&self, key: &ShortKey) -> &Mutex<IdemShard> {
        // In range: reduced modulo the array's length.
        &self.idem[usize::from(key[0]) % SHARDS]
    }

    fn task_shard(&self, key: &ShortKey) -> &RwLock<HashMap<ShortKey, u32>> {
        // In range: reduced modulo the array's length.
        &self.tasks[usize::from(key[0]) % SHARDS]
    }

    /// The key of context number `number`.
    fn key_of(&self, number: u32) -> Option<ContextKey> {
        self.numbers.read().get(number as usize).copied()
    }

    /// The context of the task with this (tenant, task id) key.
    pub fn task_context(&self, task_key: &[u8; 32]) -> Option<ContextKey> {
        let short = short_key(task_key);
        let number = self.task_shard(&short).read().get(&short).copied()?;
        self.key_of(number)
    }

    /// Records which context (by its slot's number) a task is in.
    pub fn set_task_context(&self, task_key: [u8; 32], context: u32) {
        let short = short_key(&task_key);
        self.task_shard(&short).write().insert(short, context);
    }

    /// Looks up a messageId, claiming it if it is unknown.
    pub fn idem_start(&self, key: [u8; 32]) -> IdemStart<'_> {
        let key = short_key(&key);
        let mut shard = self.idem_shard(&key).lock();
        if let Some(at) = shard.done.get(&key).copied() {
            if let Some(context) = self.key_of(at.context) {
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
            key,
            gate,
        })
    }

    /// Every received messageId: its short key, context and seq.
    pub fn idem_entries(&self) -> Vec<(ShortKey, ContextKey, u64)> {
        let mut out = Vec::new();
        for shard in &self.idem {
            for (k, at) in &shard.lock().done {
                if let Some(context) = self.key_of(at.context) {
                    out.push((*k, context, at.seq()));
                }
            }
        }
        out
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
        shard
            .entry(*key)
            .or_insert_with(|| {
                let mut numbers = self.numbers.write();
                // Fits: 2³² contexts, at hundreds of bytes each, would
                // take terabytes of index.
                let number = u32::try_from(numbers.len()).unwrap_or(u32::MAX);
                numbers.push(*key);
                Arc::new(ContextSlot {
                    number,
                    ..ContextSlot::default()
                })
            })
            .clone()
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

    /// Removes a context from its tenant's listing.
    pub fn unlist_in_tenant(&self, tenant: &str, first_ms: u64, key: ContextKey) {
        if let Some(set) = self.tenants.write().get_mut(tenant) {
            set.remove(&(first_ms, key));
        }
    }

    /// Forgets where a messageId went (its context is gone).
    pub fn idem_forget(&self, key: [u8; 32]) {
        let key = short_key(&key);
        self.idem_shard(&key).lock().done.remove(&key);
    }

    /// Forgets a task's context (its context is gone).
    pub fn forget_task(&self, task_key: &[u8; 32]) {
        let short = short_key(task_key);
        self.task_shard(&short).write().remove(&short);
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
        let from = after.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded);
        set.range((from, std::ops::Bound::Unbounded))
            .take(limit)
            .copied()
            .collect()
    }

    /// An estimate of the bytes of the maps themselves (key → slot, task id
    /// and messageId maps), counting each entry and a hash table's slack.
    pub fn approx_map_bytes(&self) -> u64 {
        use std::mem::size_of;
        let contexts: usize = self.shards.iter().map(|s| s.read().capacity()).sum();
        let tasks: usize = self.tasks.iter().map(|s| s.read().capacity()).sum();
        let idem: usize = self.idem.iter().map(|s| s.lock().done.capacity()).sum();
        let numbers = self.numbers.read().capacity();
        (contexts * (size_of::<ContextKey>() + 8 + 1)
            + tasks * (size_of::<(ShortKey, u32)>() + 1)
            + idem * (size_of::<(ShortKey, IdemAt)>() + 1)
            + numbers * size_of::<ContextKey>()) as u64
    }

    /// Every context key the index holds.
    pub fn all_contexts(&self) -> Vec<ContextKey> {
        self.shards
            .iter()
            .flat_map(|s| s.read().keys().copied().collect::<Vec<_>>())
            .collect()
    }

    /// Number of visible contexts.
    pub fn visible_contexts(&self) -> usize {
        self.tenants.read().values().map(BTreeSet::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_ref_is_16_bytes_and_gives_back_what_it_was_given() {
        assert_eq!(std::mem::size_of::<MessageRef>(), 16);
        let loc = RecordLoc {
            segment: crate::log::segments::MAX_SEGMENT_ID,
            offset: u32::MAX,
            len: 7,
        };
        let r = MessageRef::new(MAX_SEQ, loc);
        assert_eq!((r.seq(), r.loc()), (MAX_SEQ, loc));
        let state = ContextState {
            messages: vec![r, MessageRef::new(3, loc)],
            ..ContextState::default()
        };
        let config = bincode::config::standard();
        let bytes = bincode::serde::encode_to_vec(&state, config).unwrap();
        let (back, _): (ContextState, usize) =
            bincode::serde::decode_from_slice(&bytes, config).unwrap();
        assert_eq!(back.messages, state.messages);
    }
}
