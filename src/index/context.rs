//! What the index knows of one context: every record in the context's order
//! (where it is, whether it carries a message or a status, which task it
//! belongs to), the tasks, and the rarer things set aside in a box of their
//! own (seq gaps, artifacts, task ids the store did not make).

use serde::{Deserialize, Serialize};

use crate::a2a::lifecycle::{check, Op};
use crate::a2a::TaskState;
use crate::error::Result;
use crate::index::artifacts::Artifacts;
use crate::index::entries::{Entries, Fixed, Span};
use crate::index::tasks::{join_id, split_id, ArtifactEntry, IdKey, TaskEntry, TASK_BYTES};
use crate::log::frame::u32_at;
use crate::log::record::{take_count, take_items, take_str, take_u32, take_u64, take_u8};
use crate::log::segments::{PackedLoc, RecordLoc};

/// The most records one context holds: seqs fit in 4 bytes in the index.
pub const MAX_SEQ: u64 = u32::MAX as u64;

/// Who owns a context and what it is called; set by its opening record.
/// The two names share one allocation. A checkpoint holds them as
/// [`MetaRepr`] does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextMeta {
    /// The tenant, then the contextId, byte for byte.
    names: Box<str>,
    /// Where the contextId begins in `names`.
    split: u32,
    /// When the context was opened (ms since the epoch).
    pub first_ms: u64,
}

impl ContextMeta {
    /// The names of a context opened at `first_ms`.
    pub fn new(tenant: &str, context_id: &str, first_ms: u64) -> Self {
        Self {
            names: [tenant, context_id].concat().into_boxed_str(),
            // Fits: a tenant is checked against 1 KiB when written, and a
            // name read back comes from a record of at most 16 MiB or a
            // checkpoint entry of at most 1 GiB.
            split: u32::try_from(tenant.len()).unwrap_or(u32::MAX),
            first_ms,
        }
    }

    /// The tenant, byte for byte.
    pub fn tenant(&self) -> &str {
        self.names.get(..self.split as usize).unwrap_or_default()
    }

    /// The original contextId, byte for byte.
    pub fn context_id(&self) -> &str {
        self.names.get(self.split as usize..).unwrap_or_default()
    }

    /// The bytes of the names.
    fn names_len(&self) -> usize {
        self.names.len()
    }
}

/// The checkpoint's form of a [`ContextMeta`]: the two names apart.
#[derive(Serialize, Deserialize)]
struct MetaRepr<'a> {
    #[serde(borrow)]
    tenant: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    context_id: std::borrow::Cow<'a, str>,
    first_ms: u64,
}

impl Serialize for ContextMeta {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        MetaRepr {
            tenant: self.tenant().into(),
            context_id: self.context_id().into(),
            first_ms: self.first_ms,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for ContextMeta {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let m = MetaRepr::deserialize(d)?;
        Ok(ContextMeta::new(&m.tenant, &m.context_id, m.first_ms))
    }
}

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

/// Where a message is, and its seq, as a history read is handed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageRef {
    seq: u64,
    loc: RecordLoc,
}

impl MessageRef {
    /// The message's seq in its context.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Where its record is.
    pub fn loc(&self) -> RecordLoc {
        self.loc
    }
}

/// What kind of record the index is told of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A message (raw, or received into a task): part of the history.
    Message,
    /// A task's status; part of the history if it carries a message.
    Status {
        /// The status carries a message.
        with_message: bool,
    },
    /// An artifact chunk.
    Artifact,
    /// A record that hides messages: never part of the history.
    Hide,
    /// A push-notification record: no task event, never part of the
    /// history.
    Push,
}

/// One record as the index keeps it: 16 bytes. Its seq is not kept: it is
/// its position in the context's records, give or take the gaps that
/// [`Extra::gaps`] lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rec {
    /// Where it is, with [`MESSAGE`], [`STATUS`] and [`HIDDEN`] in the top
    /// bits of the length (a payload is at most 16 MiB, so they are free).
    loc: PackedLoc,
    /// The task it belongs to, as a position in the context's tasks
    /// ([`NO_TASK`]: none).
    task: u32,
}

/// The record carries a message: it is part of the history.
const MESSAGE: u32 = 1 << 31;
/// The record is a task's status.
const STATUS: u32 = 1 << 30;
/// The record is out of the context's visible content: a message a `Hide`
/// record took out of the history, or that record itself. Such records
/// stay where they are (a compaction copies them, a read of the log
/// applies the `Hide` again) but exports pass them over.
const HIDDEN: u32 = 1 << 29;
const FLAGS: u32 = MESSAGE | STATUS | HIDDEN;
const NO_TASK: u32 = u32::MAX;

impl Rec {
    fn loc(self) -> RecordLoc {
        let mut loc = self.loc;
        loc.len &= !FLAGS;
        loc.into()
    }

    fn has(self, flag: u32) -> bool {
        self.loc.len & flag != 0
    }

    /// Points it at `loc`, keeping its flags.
    fn move_to(&mut self, loc: RecordLoc) {
        let flags = self.loc.len & FLAGS;
        self.loc = PackedLoc::from(loc);
        self.loc.len = (self.loc.len & !FLAGS) | flags;
    }
}

/// The rarer parts of a context's entry, boxed so that a context without
/// them pays 8 bytes.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Extra {
    /// (position, seq) wherever a record's seq is not its predecessor's plus
    /// one (or, at position 0, not 0): only where an open skipped damaged
    /// records. Ascending.
    gaps: Vec<(u32, u32)>,
    /// (task position, id) for each task whose id the store did not make in
    /// this context (a 32-hex-digit id that does not begin with the
    /// context's prefix included).
    /// Ascending by position.
    other_ids: Vec<(u32, Box<str>)>,
    /// Every artifact of the context's tasks, in the order they were first
    /// created (as a loaded checkpoint held them until first read).
    artifacts: Artifacts,
    /// Once the context has more than [`SCAN_TASKS`] tasks: their positions
    /// ordered by id, for a binary search. Checkpointed, and checked on its
    /// first use after a load ([`ContextState::order_sound`]).
    #[serde(with = "fixed_bytes")]
    order: Vec<u32>,
    /// Whether `order` is sound: set on its first use after a load, and
    /// by every change, which keeps it so.
    #[serde(skip)]
    order_checked: std::sync::OnceLock<bool>,
}

impl Extra {
    /// Decodes the checkpoint's form of the extras (their serde form in
    /// the checkpoint's fixed-width little-endian bincode) from the front
    /// of `bytes`, which it advances, by hand (an open decodes one per
    /// context past the scan limit or with artifacts), the artifacts
    /// checked and kept packed until first read. `None` wherever bincode
    /// would refuse the bytes.
    fn decode_checkpoint(bytes: &mut &[u8]) -> Option<Self> {
        let mut rest = *bytes;
        let gaps = take_items(&mut rest, 8)?
            .chunks_exact(8)
            .map(|g| (u32_at(g, 0), u32_at(g, 4)))
            .collect();
        let n = take_count(&mut rest, 4 + 8)?;
        let mut other_ids = Vec::with_capacity(n);
        for _ in 0..n {
            other_ids.push((take_u32(&mut rest)?, take_str(&mut rest)?.into()));
        }
        let artifacts = Artifacts::take_packed(&mut rest)?;
        // A byte string (its length, then its bytes), of whole entries.
        let order = take_items(&mut rest, 1)?;
        if order.len() % u32::SIZE != 0 {
            return None;
        }
        *bytes = rest;
        Some(Extra {
            gaps,
            other_ids,
            artifacts,
            order: order
                .chunks_exact(u32::SIZE)
                .map(|o| u32_at(o, 0))
                .collect(),
            ..Extra::default()
        })
    }
}

/// A context with at most this many tasks finds one by scanning them.
const SCAN_TASKS: usize = 16;

/// What the index knows of one context.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ContextState {
    /// The first 8 bytes of the context key's digest: the first half of
    /// every task id the store makes in this context. Not checkpointed: the
    /// key is, and a load sets it from there.
    #[serde(skip)]
    prefix: [u8; 8],
    /// `None` until the opening record is durable: such a context is invisible.
    pub meta: Option<ContextMeta>,
    /// Time of the latest record (ms since the epoch).
    pub last_ms: u64,
    /// The seq the next record of this context gets.
    pub next_seq: u64,
    /// Every record of the context, in its order. The checkpoint keeps them
    /// in a section of their own (see `store::checkpoint`).
    #[serde(skip)]
    recs: Entries<Rec>,
    /// How many of them carry a message: the history's length.
    history: u64,
    /// The context's tasks, in the order they were opened. The checkpoint
    /// keeps them in a section of their own too.
    #[serde(skip)]
    tasks: Entries<TaskEntry>,
    /// Seq gaps, artifacts, other task ids, the task order.
    #[allow(clippy::box_collection)]
    extra: Option<Box<Extra>>,
    /// Set once the context is deleted or expired: it keeps only its name.
    pub gone: Option<Gone>,
}

/// A record: segment, offset, length with flags, task (u32 each).
impl Fixed for Rec {
    const SIZE: usize = 16;
    const PLACEHOLDER: Self = Rec {
        loc: PackedLoc {
            segment: 0,
            offset: 0,
            len: 0,
        },
        task: NO_TASK,
    };

    fn put(&self, out: &mut Vec<u8>) {
        for field in [self.loc.segment, self.loc.offset, self.loc.len, self.task] {
            out.extend_from_slice(&field.to_le_bytes());
        }
    }

    fn get(b: &[u8]) -> Option<Self> {
        let loc = PackedLoc {
            segment: u32_at(b, 0),
            offset: u32_at(b, 4),
            len: u32_at(b, 8),
        };
        Some(Rec {
            loc,
            task: u32_at(b, 12),
        })
    }
}

/// The bytes of one record in the checkpoint.
pub const RECORD_BYTES: usize = Rec::SIZE;

/// A task's position (in the task order).
impl Fixed for u32 {
    const SIZE: usize = 4;
    const PLACEHOLDER: Self = 0;

    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }

    fn get(b: &[u8]) -> Option<Self> {
        Some(u32_at(b, 0))
    }
}

/// A task entry (see [`TaskEntry::to_bytes`]).
impl Fixed for TaskEntry {
    const SIZE: usize = TASK_BYTES;
    const PLACEHOLDER: Self = TaskEntry::PLACEHOLDER;

    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bytes());
    }

    fn get(b: &[u8]) -> Option<Self> {
        b.try_into().ok().and_then(TaskEntry::from_bytes)
    }

    fn check(b: &[u8]) -> bool {
        TaskEntry::sound_bytes(b)
    }
}

/// A vector of [`Fixed`] entries in the checkpoint as one byte string:
/// loading a checkpoint is then one pass over bytes per vector instead of a
/// decoder call per field, and the vector is allocated at its exact length.
mod fixed_bytes {
    use std::marker::PhantomData;

    use serde::de::{Error, Visitor};
    use serde::{Deserializer, Serializer};

    use super::Fixed;
    use crate::index::entries::{all_decode, decode};

    pub fn serialize<T: Fixed, S: Serializer>(items: &[T], s: S) -> Result<S::Ok, S::Error> {
        let mut bytes = Vec::with_capacity(items.len() * T::SIZE);
        for item in items {
            item.put(&mut bytes);
        }
        s.serialize_bytes(&bytes)
    }

    pub fn deserialize<'de, T: Fixed, D: Deserializer<'de>>(d: D) -> Result<Vec<T>, D::Error> {
        d.deserialize_bytes(FixedVisitor(PhantomData))
    }

    struct FixedVisitor<T>(PhantomData<T>);

    impl<T: Fixed> Visitor<'_> for FixedVisitor<T> {
        type Value = Vec<T>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "a byte string of {}-byte entries", T::SIZE)
        }

        fn visit_bytes<E: Error>(self, bytes: &[u8]) -> Result<Self::Value, E> {
            if !all_decode::<T>(bytes) {
                return Err(E::custom("not a whole number of entries that decode"));
            }
            // An exact-size map collects in one tight loop into a vector of
            // exactly the right length.
            Ok(bytes.chunks_exact(T::SIZE).map(decode).collect())
        }

        fn visit_byte_buf<E: Error>(self, bytes: Vec<u8>) -> Result<Self::Value, E> {
            self.visit_bytes(&bytes)
        }
    }
}

/// Pushes `item`, growing a full vector by a quarter of its length (at
/// least 2) rather than doubling it: the index's vectors hold most of its
/// memory, and their spare capacity averages about a tenth of their length
/// this way, against a third when doubling. Each push copies about four
/// entries on average, against two.
pub fn push<T>(v: &mut Vec<T>, item: T) {
    insert(v, v.len(), item);
}

/// Inserts `item` at `at` (at most the length), growing the vector as
/// [`push`] does.
fn insert<T>(v: &mut Vec<T>, at: usize, item: T) {
    if v.len() == v.capacity() {
        v.reserve_exact((v.len() / 4).max(2));
    }
    v.insert(at.min(v.len()), item);
}

/// A position as the index keeps it. In range: a context holds at most
/// 2³² records (seqs are refused past [`MAX_SEQ`]), and fewer tasks.
fn pos32(pos: usize) -> u32 {
    u32::try_from(pos).unwrap_or(u32::MAX)
}

impl ContextState {
    /// The first 8 bytes of the context key's digest.
    pub fn prefix(&self) -> [u8; 8] {
        self.prefix
    }

    /// Sets the prefix (after loading the state from a checkpoint).
    pub fn set_prefix(&mut self, prefix: [u8; 8]) {
        self.prefix = prefix;
    }

    /// Decodes the checkpoint's form of a state (its serde form in the
    /// checkpoint's fixed-width little-endian bincode) from the front of
    /// `bytes`, which it advances: the common fields by hand, as an open
    /// decodes one per context, and why it is gone, if it is, through
    /// `gone`.
    /// `None` if it does not decode.
    pub fn decode_checkpoint(
        bytes: &mut &[u8],
        gone: fn(&mut &[u8]) -> Option<Gone>,
    ) -> Option<Self> {
        let meta = match take_u8(bytes)? {
            0 => None,
            1 => {
                let tenant = take_str(bytes)?;
                let context_id = take_str(bytes)?;
                Some(ContextMeta::new(tenant, context_id, take_u64(bytes)?))
            }
            _ => return None,
        };
        let last_ms = take_u64(bytes)?;
        let next_seq = take_u64(bytes)?;
        let history = take_u64(bytes)?;
        let extra = match take_u8(bytes)? {
            0 => None,
            1 => Some(Box::new(Extra::decode_checkpoint(bytes)?)),
            _ => return None,
        };
        let gone = match take_u8(bytes)? {
            0 => None,
            1 => Some(gone(bytes)?),
            _ => return None,
        };
        Some(ContextState {
            meta,
            last_ms,
            next_seq,
            history,
            extra,
            gone,
            ..ContextState::default()
        })
    }

    /// The state of a context not yet opened, whose key begins with `prefix`.
    pub fn with_prefix(prefix: [u8; 8]) -> Self {
        ContextState {
            prefix,
            ..ContextState::default()
        }
    }

    /// A task id for a new task: this context's prefix and 8 random bytes,
    /// as 32 hex digits.
    pub fn task_id_with(&self, random: [u8; 8]) -> String {
        IdKey::Made(join_id(self.prefix, random)).to_string()
    }

    /// An estimate of the heap bytes this entry holds (vectors at their
    /// capacity), without the slot around it.
    pub fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        let meta = self.meta.as_ref().map_or(0, ContextMeta::names_len);
        let extra = self.extra.as_ref().map_or(0, |x| {
            size_of::<Extra>()
                + x.gaps.capacity() * 8
                + x.order.capacity() * 4
                + x.other_ids.capacity() * size_of::<(u32, Box<str>)>()
                + x.other_ids.iter().map(|(_, id)| id.len()).sum::<usize>()
                + x.artifacts.heap_bytes()
        });
        meta + self.recs.bytes() + self.tasks.bytes() + extra
    }

    /// How many records the context holds.
    pub fn record_count(&self) -> usize {
        self.recs.len()
    }

    /// Appends the records' bytes, [`RECORD_BYTES`] each, and the tasks',
    /// `TASK_BYTES` each (as a checkpoint holds them).
    pub fn put_entries(&self, recs: &mut Vec<u8>, tasks: &mut Vec<u8>) {
        self.recs.put(recs);
        self.tasks.put(tasks);
    }

    /// Reads the records and tasks from `recs` and `tasks` (as a checkpoint
    /// load finds them).
    pub fn map_entries(&mut self, recs: Span, tasks: Span) {
        self.recs = Entries::Mapped(recs);
        self.tasks = Entries::Mapped(tasks);
    }

    /// After a checkpoint is written: records or tasks still read in place
    /// (not changed since the checkpoint they come from was loaded) are read
    /// from `recs` or `tasks`, the same entries in the new one, instead.
    pub fn remap_entries(&mut self, recs: Span, tasks: Span) {
        self.recs.remap(recs);
        self.tasks.remap(tasks);
    }

    /// Whether its records and its tasks are read in place.
    #[cfg(test)]
    pub fn is_mapped(&self) -> (bool, bool) {
        (
            matches!(self.recs, Entries::Mapped(_)),
            matches!(self.tasks, Entries::Mapped(_)),
        )
    }

    /// Whether its artifacts are still packed as a checkpoint held them,
    /// and whether they were read since.
    #[cfg(test)]
    pub fn artifacts_packed(&self) -> Option<bool> {
        match self.extra.as_deref().map(|x| &x.artifacts) {
            Some(Artifacts::Packed(p)) => Some(p.is_read()),
            _ => None,
        }
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

    /// How many messages the history holds.
    pub fn history_len(&self) -> u64 {
        self.history
    }

    /// How many tasks the context holds.
    pub fn task_count(&self) -> usize {
        self.tasks.len()
    }

    /// Where every record is.
    pub fn record_locs(&self) -> impl Iterator<Item = RecordLoc> + '_ {
        self.recs.iter().map(Rec::loc)
    }

    /// Where every record is that a `Hide` record did not take out (nor is
    /// one itself): what an export gives.
    pub fn visible_record_locs(&self) -> impl Iterator<Item = RecordLoc> + '_ {
        self.recs.iter().filter(|r| !r.has(HIDDEN)).map(Rec::loc)
    }

    /// Where the records that belong to no task and carry no message are:
    /// the push-notification records (§7, "Push notifications"), oldest
    /// first. A walk over the 16-byte entries, reading nothing.
    pub fn taskless_record_locs(&self) -> impl DoubleEndedIterator<Item = RecordLoc> + '_ {
        self.recs
            .iter()
            .filter(|r| r.task == NO_TASK && !r.has(FLAGS))
            .map(Rec::loc)
    }

    /// Takes every message of seq `from_seq` up to (not including) `to_seq`
    /// out of the history (a `Hide` record, already pushed, says so);
    /// returns how many were in it. Applying the same range again changes
    /// nothing.
    pub fn hide(&mut self, from_seq: u64, to_seq: u64) -> u64 {
        let (from, to) = (self.pos_of_seq(from_seq), self.pos_of_seq(to_seq));
        if from >= to {
            return 0;
        }
        let mut hidden = 0;
        for rec in self.recs.owned().get_mut(from..to).into_iter().flatten() {
            if rec.has(MESSAGE) {
                rec.loc.len = (rec.loc.len & !MESSAGE) | HIDDEN;
                hidden += 1;
            }
        }
        self.history = self.history.saturating_sub(hidden);
        hidden
    }

    fn gaps(&self) -> &[(u32, u32)] {
        self.extra.as_deref().map_or(&[], |x| &x.gaps)
    }

    /// The seq of the record at `pos`.
    fn seq_at(&self, pos: usize) -> u64 {
        let gaps = self.gaps();
        let i = gaps.partition_point(|&(p, _)| p as usize <= pos);
        match i.checked_sub(1).and_then(|i| gaps.get(i)) {
            Some(&(p, seq)) => u64::from(seq) + (pos - p as usize) as u64,
            None => pos as u64,
        }
    }

    /// The position of the first record whose seq is at least `seq` (seqs
    /// ascend with position).
    fn pos_of_seq(&self, seq: u64) -> usize {
        let len = self.recs.len();
        if self.gaps().is_empty() {
            return usize::try_from(seq).map_or(len, |s| s.min(len));
        }
        let (mut lo, mut hi) = (0, len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.seq_at(mid) < seq {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Where the message of seq `seq` is, if the history has one.
    pub fn message_at(&self, seq: u64) -> Option<RecordLoc> {
        let pos = self.pos_of_seq(seq);
        self.recs
            .get(pos)
            .filter(|r| r.has(MESSAGE) && self.seq_at(pos) == seq)
            .map(|r| r.loc())
    }

    /// Up to `max` of the newest messages with seq below `before` (all, for
    /// `None`), oldest first, and how many messages lie below `before`.
    pub fn newest_before(&self, before: Option<u64>, max: usize) -> (Vec<MessageRef>, u64) {
        let len = self.recs.len();
        let end = before.map_or(len, |b| self.pos_of_seq(b)).min(len);
        let later = self.recs.range(end..len).filter(|r| r.has(MESSAGE)).count() as u64;
        let count = self.history.saturating_sub(later);
        let mut refs = Vec::with_capacity(max.min(count as usize));
        for (pos, rec) in self.recs.range(0..end).enumerate().rev() {
            if refs.len() == max {
                break;
            }
            if rec.has(MESSAGE) {
                refs.push(MessageRef {
                    seq: self.seq_at(pos),
                    loc: rec.loc(),
                });
            }
        }
        refs.reverse();
        (refs, count)
    }

    /// Adds the record of seq `seq` at `loc`, of `kind`, belonging to task
    /// `task` (a position in the tasks); returns its position.
    pub fn push_record(&mut self, seq: u64, loc: RecordLoc, kind: Kind, task: Option<u32>) -> u32 {
        let pos = self.recs.len();
        if seq != self.seq_at(pos) {
            // In range: an append or an open refuses a seq past MAX_SEQ.
            let seq = u32::try_from(seq).unwrap_or(u32::MAX);
            push(&mut self.extra_mut().gaps, (pos32(pos), seq));
        }
        let mut loc = PackedLoc::from(loc);
        loc.len &= !FLAGS;
        let message = matches!(kind, Kind::Message | Kind::Status { with_message: true });
        if message {
            loc.len |= MESSAGE;
            self.history += 1;
        }
        if matches!(kind, Kind::Status { .. }) {
            loc.len |= STATUS;
        }
        if kind == Kind::Hide {
            loc.len |= HIDDEN;
        }
        let task = task.filter(|&t| (t as usize) < self.tasks.len());
        push(
            self.recs.owned(),
            Rec {
                loc,
                task: task.unwrap_or(NO_TASK),
            },
        );
        if let Some(entry) = task.and_then(|t| self.tasks.owned().get_mut(t as usize)) {
            entry.last = pos32(pos);
            // Saturates rather than wraps: a context holds at most 2³²
            // records.
            entry.events = entry.events.saturating_add(1);
        }
        pos32(pos)
    }

    /// Opens task `id` with the message of seq `seq` at `loc`, recorded at
    /// `timestamp_ms`.
    pub fn open_task(&mut self, id: &str, seq: u64, timestamp_ms: u64, loc: RecordLoc) {
        let key = IdKey::of(id);
        let task = pos32(self.tasks.len());
        let tail = self.tail_of(key);
        push(self.tasks.owned(), TaskEntry::opened(tail, timestamp_ms));
        if tail.is_none() {
            push(&mut self.extra_mut().other_ids, (task, id.into()));
        }
        self.push_record(seq, loc, Kind::Message, Some(task));
        if self.tasks.len() > SCAN_TASKS {
            if self.order().is_empty() || !self.order_sound() {
                self.rebuild_order();
            } else {
                let at = self.order_search(key).unwrap_or_else(|i| i);
                insert(&mut self.extra_mut().order, at, task);
            }
        }
    }

    /// Records a status of task `task` (the record is already pushed).
    pub fn set_status(&mut self, task: u32, state: TaskState, at_ms: u64) {
        if let Some(entry) = self.tasks.owned().get_mut(task as usize) {
            entry.set_status(state, at_ms);
        }
    }

    /// Marks task `task`'s turn as ended in a direct reply.
    pub fn mark_direct_reply(&mut self, task: u32) {
        if let Some(entry) = self.tasks.owned().get_mut(task as usize) {
            entry.mark_reply();
        }
    }

    /// Records a client's message that joined task `task` at `at_ms` (the
    /// record is already pushed): an interrupted task works on the answer
    /// (WORKING), and the task's status time moves to the message.
    pub fn message_joined(&mut self, task: u32, at_ms: u64) {
        if let Some(entry) = self.tasks.owned().get_mut(task as usize) {
            let state = match entry.state {
                TaskState::InputRequired | TaskState::AuthRequired => TaskState::Working,
                state => state,
            };
            entry.set_status(state, at_ms);
        }
    }

    /// Records the artifact chunk at position `pos` of task `task`.
    pub fn add_chunk(&mut self, task: u32, pos: u32, artifact_id: &str, append: bool, last: bool) {
        let artifacts = self.extra_mut().artifacts.get_mut();
        let at = artifacts
            .iter()
            .position(|a| a.task == task && a.id == artifact_id);
        let entry = match at {
            Some(i) => artifacts.get_mut(i),
            None => {
                artifacts.push(ArtifactEntry {
                    task,
                    id: artifact_id.to_string(),
                    ..ArtifactEntry::default()
                });
                artifacts.last_mut()
            }
        };
        if let Some(entry) = entry {
            if !append {
                entry.chunks.clear();
            }
            entry.chunks.push(pos);
            entry.closed = last;
        }
    }

    /// Every artifact with at least one chunk: the position of its latest
    /// chunk, that chunk's seq and where it is, and how many chunks it has.
    pub fn latest_chunks(&self) -> impl Iterator<Item = (u64, RecordLoc, u32)> + '_ {
        self.artifacts().iter().filter_map(|a| {
            let &pos = a.chunks.last()?;
            let rec = self.recs.get(pos as usize)?;
            Some((self.seq_at(pos as usize), rec.loc(), pos32(a.chunks.len())))
        })
    }

    fn artifacts(&self) -> &[ArtifactEntry] {
        self.extra.as_deref().map_or(&[], |x| x.artifacts.get())
    }

    fn other_ids(&self) -> &[(u32, Box<str>)] {
        self.extra.as_deref().map_or(&[], |x| &x.other_ids)
    }

    fn order(&self) -> &[u32] {
        self.extra.as_deref().map_or(&[], |x| &x.order)
    }

    fn extra_mut(&mut self) -> &mut Extra {
        self.extra.get_or_insert_with(Box::default)
    }

    /// Forgets every record and task: the context is gone, and keeps only
    /// its name.
    pub fn clear(&mut self) {
        self.recs = Entries::default();
        self.tasks = Entries::default();
        self.extra = None;
        self.history = 0;
    }

    /// Moves every record to where `to` says (after a compaction).
    pub fn remap(&mut self, to: &impl Fn(&mut RecordLoc)) {
        for rec in self.recs.owned().iter_mut() {
            let mut loc = rec.loc();
            to(&mut loc);
            rec.move_to(loc);
        }
    }

    /// Moves the records that lie in segments a merge rewrote (`gone`
    /// says which) to `moved`, (seq, new place) of each of them in the
    /// same order, as the merge's output holds them. Changes nothing and
    /// returns `false` unless the two match one for one, by seq and length.
    pub fn repoint(&mut self, gone: &impl Fn(u64) -> bool, moved: &[(u64, RecordLoc)]) -> bool {
        let mut next = moved.iter();
        let mut to = Vec::with_capacity(moved.len());
        for (pos, rec) in self.recs.iter().enumerate() {
            let loc = rec.loc();
            if !gone(loc.segment) {
                continue;
            }
            match next.next() {
                Some(&(seq, new)) if seq == self.seq_at(pos) && new.len == loc.len => {
                    to.push((pos, new));
                }
                _ => return false,
            }
        }
        if next.next().is_some() {
            return false;
        }
        let recs = self.recs.owned();
        for (pos, new) in to {
            if let Some(rec) = recs.get_mut(pos) {
                rec.move_to(new);
            }
        }
        true
    }

    /// The id of task `task`, as a lookup compares it.
    fn id_key(&self, task: usize) -> IdKey<'_> {
        let Some(entry) = self.tasks.get(task) else {
            return IdKey::Other("");
        };
        match entry.tail() {
            Some(tail) => IdKey::Made(join_id(self.prefix, tail)),
            None => {
                let others = self.other_ids();
                let at = others.partition_point(|(t, _)| (*t as usize) < task);
                IdKey::of(others.get(at).map_or("", |(_, id)| id))
            }
        }
    }

    /// Where `key` is, or would go, in the task order.
    fn order_search(&self, key: IdKey<'_>) -> std::result::Result<usize, usize> {
        let tail = self.tail_of(key);
        self.order()
            .binary_search_by(|&t| self.cmp_id(t as usize, key, tail))
    }

    /// The random half of `key`, if the store made it in this context.
    fn tail_of(&self, key: IdKey<'_>) -> Option<[u8; 8]> {
        match key {
            IdKey::Made(bytes) => match split_id(bytes) {
                (prefix, tail) if prefix == self.prefix => Some(tail),
                _ => None,
            },
            IdKey::Other(_) => None,
        }
    }

    /// How task `t`'s id compares with `key`, whose random half is `tail`
    /// if the store made it here: two such ids share their first half, so
    /// their random halves decide without building either id.
    fn cmp_id(&self, t: usize, key: IdKey<'_>, tail: Option<[u8; 8]>) -> std::cmp::Ordering {
        match (self.tasks.get(t).and_then(|e| e.tail()), tail) {
            (Some(mine), Some(theirs)) => mine.cmp(&theirs),
            _ => self.id_key(t).cmp(&key),
        }
    }

    /// Checks the task order a checkpoint gave, and rebuilds it if it is
    /// not the order of this context's tasks (one pass, against a sort).
    #[cfg(test)]
    pub fn check_order(&mut self) {
        if !self.order_sound() {
            self.rebuild_order();
        }
    }

    /// Whether the task order is sound: checked once, on its first use
    /// after a load (not by the open), and kept so by every change after.
    /// The checkpoint's checksum has vouched for its bytes; only a faulty
    /// writer makes an order that fails, which lookups then pass over for a
    /// scan of the tasks, and the next new task rebuilds.
    fn order_sound(&self) -> bool {
        match self.extra.as_deref() {
            None => true,
            Some(x) => *x.order_checked.get_or_init(|| self.order_is_sound()),
        }
    }

    /// Whether the task order is the order of this context's tasks.
    fn order_is_sound(&self) -> bool {
        let order = self.order();
        let n = self.tasks.len();
        if n <= SCAN_TASKS {
            order.is_empty()
        } else {
            // Of length n, every position below n, strictly ascending by
            // id (so no position twice): a permutation in id order. Two
            // store-made ids of one context share their prefix, so their
            // random halves, read in one pass over the tasks, decide.
            // Read where they lie while the tasks are (as a load finds
            // them): no entry decoded, each once.
            let raw = self
                .tasks
                .mapped_bytes()
                .map(|b| b.as_chunks::<TASK_BYTES>().0);
            let tail = |i: usize| match raw {
                Some(chunks) => chunks.get(i).and_then(|c| TaskEntry::tail_in(c)),
                None => self.tasks.get(i).and_then(|t| t.tail()),
            };
            let mut before: Option<(usize, Option<[u8; 8]>)> = None;
            order.len() == n
                && order.iter().all(|&t| {
                    let t = t as usize;
                    let this = tail(t);
                    let above = match (before, this) {
                        (None, _) => true,
                        (Some((_, Some(x))), Some(y)) => x < y,
                        (Some((b, _)), _) => self.id_key(b) < self.id_key(t),
                    };
                    before = Some((t, this));
                    t < n && above
                })
        }
    }

    /// The ids of the tasks whose ids the store did not make in this
    /// context (every other task's id begins with its prefix).
    pub fn other_task_ids(&self) -> impl Iterator<Item = &str> {
        self.other_ids().iter().map(|(_, id)| &**id)
    }

    /// Rebuilds the task order (once the context passes [`SCAN_TASKS`]
    /// tasks, or when a loaded one does not check out).
    pub fn rebuild_order(&mut self) {
        if self.tasks.len() <= SCAN_TASKS {
            if let Some(x) = self.extra.as_mut() {
                x.order = Vec::new();
            }
            return;
        }
        let mut order: Vec<u32> = (0..pos32(self.tasks.len())).collect();
        order.sort_by_cached_key(|&t| self.id_key(t as usize));
        let extra = self.extra_mut();
        extra.order = order;
        extra.order_checked = std::sync::OnceLock::from(true);
    }

    /// The position of the task of `id`.
    pub fn task_pos(&self, id: &str) -> Option<u32> {
        let key = IdKey::of(id);
        let tail = self.tail_of(key);
        let is = |t: usize| self.cmp_id(t, key, tail).is_eq();
        // The newest task first: a reply or status most often names the
        // task just opened.
        let newest = self.tasks.len().checked_sub(1);
        if let Some(t) = newest.filter(|&t| is(t)) {
            return Some(pos32(t));
        }
        if self.tasks.len() <= SCAN_TASKS || !self.order_sound() {
            return (0..self.tasks.len()).find(|&t| is(t)).map(pos32);
        }
        let at = self.order_search(key).ok()?;
        self.order().get(at).copied()
    }

    /// The task of `id`.
    pub fn task(&self, id: &str) -> Option<TaskView<'_>> {
        self.task_pos(id).and_then(|t| self.task_at(t))
    }

    /// The task at position `task`.
    pub fn task_at(&self, task: u32) -> Option<TaskView<'_>> {
        self.tasks.get(task as usize).map(|entry| TaskView {
            context: self,
            task,
            entry,
        })
    }

    /// Every task, in the order they were opened.
    pub fn tasks(&self) -> impl Iterator<Item = TaskView<'_>> {
        (0..pos32(self.tasks.len())).filter_map(|t| self.task_at(t))
    }
}

/// One task of a context, with the context's records at hand.
#[derive(Clone, Copy)]
pub struct TaskView<'a> {
    context: &'a ContextState,
    task: u32,
    entry: TaskEntry,
}

impl<'a> TaskView<'a> {
    /// The task's id, as a lookup compares it (it shows as its text).
    pub fn id(&self) -> IdKey<'a> {
        self.context.id_key(self.task as usize)
    }

    /// The current state: the latest status's, or WORKING once the client
    /// answered an interrupted task (set when the answer joins it; derived
    /// here too for an entry a checkpoint written before that rule holds).
    pub fn state(&self) -> TaskState {
        match self.entry.state {
            TaskState::InputRequired | TaskState::AuthRequired if self.awaits_turn() => {
                TaskState::Working
            }
            state => state,
        }
    }

    /// Where the status record that says the task's state is: its latest
    /// status, unless a message the client sent came after it (or it has
    /// none yet): then no record says it (the state is SUBMITTED, or the
    /// WORKING the answer put it in) and this is `None`.
    pub fn status_record(&self) -> Option<RecordLoc> {
        self.newest()
            .find(|r| r.has(STATUS) || r.has(MESSAGE))
            .filter(|r| r.has(STATUS))
            .map(Rec::loc)
    }

    /// Whether the task's turn ended in a direct reply: the client got a
    /// message, not this task, and no A2A view shows it.
    pub fn is_direct_reply(&self) -> bool {
        self.entry.is_reply()
    }

    /// Whether the task's latest event is a message the client sent: its
    /// turn is due, and the agent has written nothing for it yet (a crash
    /// there leaves the turn to the restart policy).
    pub fn awaits_turn(&self) -> bool {
        self.context
            .recs
            .get(self.entry.last as usize)
            .is_some_and(|r| r.task == self.task && r.has(MESSAGE) && !r.has(STATUS))
    }

    /// When the current status was recorded (ms since the epoch).
    pub fn status_ms(&self) -> u64 {
        self.entry.status_ms()
    }

    /// The task's records, newest first: a walk back from its latest one
    /// that stops at its first (other tasks' records in between are
    /// stepped over).
    fn newest(&self) -> impl Iterator<Item = Rec> + 'a {
        let task = self.task;
        self.context
            .recs
            .range(0..self.entry.last as usize + 1)
            .rev()
            .filter(move |r| r.task == task)
            .take(self.entry.events as usize)
    }

    /// Where every event is, in order (its per-task seq is its index + 1).
    pub fn events(&self) -> Vec<RecordLoc> {
        let mut events: Vec<RecordLoc> = self.newest().map(Rec::loc).collect();
        events.reverse();
        events
    }

    /// [`events`](Self::events), each with whether it is a message the
    /// client sent (not the agent's status or artifact chunk).
    pub fn events_with_kind(&self) -> Vec<(RecordLoc, bool)> {
        let mut events: Vec<(RecordLoc, bool)> = self
            .newest()
            .map(|r| (r.loc(), r.has(MESSAGE) && !r.has(STATUS)))
            .collect();
        events.reverse();
        events
    }

    /// How many events the task has.
    pub fn event_count(&self) -> usize {
        self.entry.events as usize
    }

    /// The events that carry a message (the task's history), newest first.
    pub fn history_newest(&self) -> impl Iterator<Item = RecordLoc> + 'a {
        self.newest().filter(|r| r.has(MESSAGE)).map(Rec::loc)
    }

    /// The task's artifacts, in the order they were first created, each
    /// with where its chunks are.
    pub fn artifacts(&self) -> impl Iterator<Item = Vec<RecordLoc>> + 'a {
        let (task, recs) = (self.task, &self.context.recs);
        self.context
            .artifacts()
            .iter()
            .filter(move |a| a.task == task && !a.chunks.is_empty())
            .map(move |a| {
                a.chunks
                    .iter()
                    .filter_map(|&p| recs.get(p as usize).map(|r| r.loc()))
                    .collect()
            })
    }

    /// Whether `op` is allowed now; the error says why not.
    pub fn check(&self, op: Op<'_>) -> Result<()> {
        let task = self.task;
        let artifacts = self.context.artifacts();
        let artifact = |id: &str| {
            artifacts
                .iter()
                .find(|a| a.task == task && a.id == id)
                .map(|a| a.closed)
        };
        check(&self.id(), self.entry.state, artifact, op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::entries::Section;
    use proptest::prelude::*;

    fn at(offset: u32) -> RecordLoc {
        RecordLoc {
            segment: crate::log::segments::MAX_SEGMENT_ID,
            offset,
            len: crate::options::MAX_RECORD_BYTES,
        }
    }

    #[test]
    fn records_keep_their_place_seq_and_kind() {
        assert_eq!(std::mem::size_of::<Rec>(), 16);
        assert_eq!(std::mem::size_of::<TaskEntry>(), 24);
        let mut s = ContextState::default();
        s.push_record(0, at(0), Kind::Message, None);
        s.open_task("t", 1, 5, at(1));
        let t = s.task_pos("t").unwrap();
        s.push_record(2, at(2), Kind::Status { with_message: true }, Some(t));
        s.set_status(t, TaskState::Working, 6);
        let chunk = s.push_record(3, at(3), Kind::Artifact, Some(t));
        s.add_chunk(t, chunk, "a", false, true);
        s.push_record(4, at(4), Kind::Message, None);
        s.push_record(
            5,
            at(5),
            Kind::Status {
                with_message: false,
            },
            Some(t),
        );
        s.set_status(t, TaskState::Completed, 7);
        let task = s.task("t").unwrap();
        assert_eq!(task.events(), vec![at(1), at(2), at(3), at(5)]);
        assert_eq!(task.event_count(), 4);
        assert_eq!(
            task.history_newest().collect::<Vec<_>>(),
            vec![at(2), at(1)]
        );
        assert_eq!(task.status_record(), Some(at(5)));
        assert_eq!((task.state(), task.status_ms()), (TaskState::Completed, 7));
        assert_eq!(task.artifacts().collect::<Vec<_>>(), vec![vec![at(3)]]);
        assert_eq!(s.history_len(), 4);
        let (refs, below) = s.newest_before(None, 3);
        let seqs: Vec<u64> = refs.iter().map(MessageRef::seq).collect();
        assert_eq!((seqs, below), (vec![1, 2, 4], 4));
        let (refs, below) = s.newest_before(Some(2), 10);
        assert_eq!((refs.len(), below), (2, 2));
        assert_eq!(s.message_at(4), Some(at(4)));
        assert_eq!(s.message_at(3), None, "an artifact is not a message");
        assert_eq!(s.latest_chunks().collect::<Vec<_>>(), vec![(3, at(3), 1)]);
        s.remap(&|loc: &mut RecordLoc| loc.offset += 10);
        let task = s.task("t").unwrap();
        assert_eq!(
            task.history_newest().collect::<Vec<_>>(),
            vec![at(12), at(11)]
        );
        assert_eq!(task.status_record(), Some(at(15)));
    }

    #[test]
    fn an_answer_puts_an_interrupted_task_to_work_until_its_next_status() {
        let mut s = ContextState::default();
        s.open_task("t", 1, 1, at(1));
        let t = s.task_pos("t").unwrap();
        s.push_record(2, at(2), Kind::Status { with_message: true }, Some(t));
        s.set_status(t, TaskState::InputRequired, 2);
        let view = s.task("t").unwrap();
        assert_eq!(
            (view.state(), view.status_record()),
            (TaskState::InputRequired, Some(at(2)))
        );
        // The client's answer joins: WORKING, and no record says so.
        s.push_record(3, at(3), Kind::Message, Some(t));
        s.message_joined(t, 3);
        let view = s.task("t").unwrap();
        assert_eq!((view.state(), view.status_ms()), (TaskState::Working, 3));
        assert!(view.awaits_turn());
        assert_eq!(view.status_record(), None);
        // An artifact of the turn: still WORKING on the answer.
        s.push_record(4, at(4), Kind::Artifact, Some(t));
        let view = s.task("t").unwrap();
        assert!(!view.awaits_turn());
        assert_eq!(
            (view.state(), view.status_record()),
            (TaskState::Working, None)
        );
        // The turn's status says the state again.
        s.push_record(
            5,
            at(5),
            Kind::Status {
                with_message: false,
            },
            Some(t),
        );
        s.set_status(t, TaskState::Completed, 5);
        let view = s.task("t").unwrap();
        assert_eq!(
            (view.state(), view.status_record()),
            (TaskState::Completed, Some(at(5)))
        );
    }

    #[test]
    fn repoint_moves_exactly_the_records_of_the_rewritten_segments_or_nothing() {
        let place = |segment: u64, offset: u32, len: u32| RecordLoc {
            segment,
            offset,
            len,
        };
        // Seqs 0-5 (a gap after 1: records skipped as damaged), in
        // segments 1, 2, 2, 3, 4, 4; segments 2 and 3 were a merge's inputs.
        let mut s = ContextState::default();
        let old = [(0, 1), (1, 2), (4, 2), (5, 3), (6, 4), (7, 4)];
        for (i, (seq, segment)) in old.into_iter().enumerate() {
            let kind = if i == 2 {
                Kind::Artifact
            } else {
                Kind::Message
            };
            s.push_record(
                seq,
                place(segment, i as u32 * 100, 10 + i as u32),
                kind,
                None,
            );
        }
        let gone = |segment: u64| segment == 2 || segment == 3;
        let moved = [
            (1, place(9, 64, 11)),
            (4, place(9, 99, 12)),
            (5, place(9, 140, 13)),
        ];
        let before: Vec<RecordLoc> = s.record_locs().collect();
        // One too few, one too many, a seq or a length that differs: no.
        for wrong in [
            &moved[..2],
            &[moved[0], moved[1], moved[2], (6, place(9, 200, 14))][..],
            &[moved[0], (3, moved[1].1), moved[2]][..],
            &[moved[0], moved[1], (5, place(9, 140, 99))][..],
        ] {
            assert!(!s.repoint(&gone, wrong));
            assert_eq!(s.record_locs().collect::<Vec<_>>(), before);
        }
        assert!(s.repoint(&gone, &moved));
        let after: Vec<RecordLoc> = s.record_locs().collect();
        assert_eq!(after[0], before[0]);
        assert_eq!(&after[1..4], &moved.map(|(_, loc)| loc));
        assert_eq!(&after[4..], &before[4..]);
        // The record kinds (kept in the length's top bits) stay.
        assert_eq!(s.history_len(), 5);
        assert_eq!(s.message_at(4), None, "an artifact is not a message");
        assert_eq!(s.message_at(5), Some(moved[2].1));
    }

    #[test]
    fn seqs_past_a_gap_are_found_by_seq() {
        let mut s = ContextState::default();
        for (seq, offset) in [(0, 0), (1, 1), (5, 2), (6, 3), (9, 4)] {
            s.push_record(seq, at(offset), Kind::Message, None);
        }
        let seqs: Vec<u64> = s
            .newest_before(None, 10)
            .0
            .iter()
            .map(MessageRef::seq)
            .collect();
        assert_eq!(seqs, vec![0, 1, 5, 6, 9]);
        assert_eq!(s.message_at(6), Some(at(3)));
        assert_eq!(s.message_at(4), None);
        let (refs, below) = s.newest_before(Some(6), 10);
        assert_eq!((refs.len(), below), (3, 3));
        let (refs, below) = s.newest_before(Some(4), 10);
        assert_eq!((refs.len(), below), (2, 2));
        // A context whose first record is not seq 0.
        let mut s = ContextState::default();
        s.push_record(7, at(0), Kind::Message, None);
        assert_eq!(s.message_at(7), Some(at(0)));
    }

    /// `s`'s records and tasks, as a checkpoint load maps them (after 3
    /// other bytes).
    fn mapped(s: &ContextState) -> (Span, Span) {
        use crate::index::tasks::TASK_BYTES;
        let (mut bytes, mut tasks) = (b"pre".to_vec(), Vec::new());
        s.put_entries(&mut bytes, &mut tasks);
        let tasks_at = bytes.len();
        bytes.extend(tasks);
        let map = crate::index::entries::mapped(&bytes);
        let n = s.task_count();
        let recs = Section::new(map.clone(), 3, tasks_at - 3).unwrap();
        let tasks = Section::new(map, tasks_at, n * TASK_BYTES).unwrap();
        assert!(Span::new(&tasks, 0, n + 1, TASK_BYTES).is_none());
        assert!(Span::new(&tasks, 1, n, TASK_BYTES).is_none());
        (
            Span::new(&recs, 0, s.record_count(), RECORD_BYTES).unwrap(),
            Span::new(&tasks, 0, n, TASK_BYTES).unwrap(),
        )
    }

    #[test]
    fn mapped_entries_read_as_owned_ones_until_a_change_copies_them() {
        let mut s = ContextState::with_prefix(*b"prefix!!");
        for i in 0..20u32 {
            s.open_task(
                &s.task_id_with([i as u8; 8]),
                u64::from(2 * i),
                0,
                at(2 * i),
            );
            let with_message = i % 2 == 0;
            s.push_record(
                u64::from(2 * i + 1),
                at(2 * i + 1),
                Kind::Status { with_message },
                Some(i),
            );
            s.set_status(i, TaskState::Working, u64::from(i));
        }
        let load = |s: &ContextState| {
            let mut back = ContextState::with_prefix(*b"prefix!!");
            back.history = s.history;
            back.extra = Some(Box::new(Extra {
                order: s.extra.as_ref().unwrap().order.clone(),
                ..Extra::default()
            }));
            let (recs, tasks) = mapped(s);
            back.map_entries(recs, tasks);
            back
        };
        let read = |c: &ContextState| {
            let tasks: Vec<_> = c
                .tasks()
                .map(|view| {
                    let id = view.id().to_string();
                    (
                        c.task_pos(&id),
                        view.state(),
                        view.status_ms(),
                        view.events(),
                        view.status_record(),
                        view.history_newest().collect::<Vec<_>>(),
                    )
                })
                .collect();
            (
                c.newest_before(None, 4),
                c.newest_before(Some(7), 2),
                c.message_at(4),
                c.record_locs().collect::<Vec<_>>(),
                tasks,
            )
        };
        let mut back = load(&s);
        assert_eq!(back.is_mapped(), (true, true));
        assert_eq!(read(&back), read(&s));
        // A status copies the tasks to the heap, a record the records; reads
        // go on the same.
        for c in [&mut s, &mut back] {
            c.set_status(3, TaskState::Completed, 99);
        }
        assert_eq!(back.is_mapped(), (true, false));
        assert_eq!(read(&back), read(&s));
        for c in [&mut s, &mut back] {
            c.push_record(40, at(40), Kind::Message, None);
        }
        assert_eq!(back.is_mapped(), (false, false));
        assert_eq!(read(&back), read(&s));
        // So does a move of every record (a compaction's remap).
        let mut back = load(&s);
        for c in [&mut s, &mut back] {
            c.remap(&|loc: &mut RecordLoc| loc.offset += 1000);
        }
        assert_eq!(back.is_mapped(), (false, true));
        assert_eq!(read(&back), read(&s));
        // A written checkpoint takes over mapped entries of the same count,
        // and a vector's that holds what the checkpoint wrote (the vector is
        // freed).
        let (recs, tasks) = mapped(&s);
        back.remap_entries(recs, tasks);
        assert_eq!(back.is_mapped(), (true, true));
        assert_eq!(read(&back), read(&s));
        // Never one that changed since it was written: a status, with as
        // many tasks as before.
        back.set_status(3, TaskState::Failed, 100);
        let (recs, tasks) = mapped(&s);
        back.remap_entries(recs, tasks);
        assert_eq!(back.is_mapped(), (true, false));
        assert_eq!(
            back.tasks().nth(3).map(|t| t.state()),
            Some(TaskState::Failed)
        );
        let mut owned = ContextState::default();
        let (recs, tasks) = mapped(&s);
        owned.remap_entries(recs, tasks);
        assert_eq!(owned.is_mapped(), (false, false));
        assert_eq!(owned.record_count(), 0);
    }

    #[test]
    fn tasks_are_found_by_id_past_the_scan_limit() {
        let mut s = ContextState::with_prefix(*b"prefix!!");
        // Ids the store made here, 32 hex digits it did not make here, and
        // other text.
        let ids: Vec<String> = (0..40u32)
            .map(|i| match i % 4 {
                0 => format!("{:032x}", u128::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
                1 => format!("other-{i}"),
                2 => format!("{:032X}", i),
                _ => s.task_id_with(u64::from(i).wrapping_mul(0x9e37_79b9).to_le_bytes()),
            })
            .collect();
        assert!(ids[3].starts_with(&hex::encode(b"prefix!!")));
        for (i, id) in ids.iter().enumerate() {
            s.open_task(id, i as u64, 0, at(i as u32));
            for (j, seen) in ids.iter().take(i + 1).enumerate() {
                assert_eq!(s.task_pos(seen), Some(j as u32), "{seen} after {i} tasks");
                assert_eq!(s.task_at(j as u32).unwrap().id().to_string(), *seen);
            }
            assert_eq!(s.task_pos("missing"), None);
        }
        s.rebuild_order();
        assert!(ids
            .iter()
            .enumerate()
            .all(|(j, id)| s.task_pos(id) == Some(j as u32)));
        let config = bincode::config::standard();
        let bytes = bincode::serde::encode_to_vec(&s, config).unwrap();
        let (mut back, _): (ContextState, usize) =
            bincode::serde::decode_from_slice(&bytes, config).unwrap();
        back.set_prefix(s.prefix());
        let (recs, tasks) = mapped(&s);
        back.map_entries(recs, tasks);
        let order = back.extra.as_ref().unwrap().order.clone();
        // Loaded vectors hold no spare capacity; records and tasks none at all.
        assert_eq!(back.is_mapped(), (true, true));
        assert_eq!(back.extra.as_ref().unwrap().order.capacity(), order.len());
        back.check_order();
        assert_eq!(back.extra.as_ref().unwrap().order, order, "kept as loaded");
        for damage in [vec![0; 40], order[..39].to_vec(), {
            let mut o = order.clone();
            o.swap(3, 4);
            o
        }] {
            let extra = back.extra.as_mut().unwrap();
            extra.order = damage;
            extra.order_checked = std::sync::OnceLock::new();
            // Until it is rebuilt, every task is found by a scan.
            assert!(ids
                .iter()
                .enumerate()
                .all(|(j, id)| back.task_pos(id) == Some(j as u32)));
            assert!(!back.order_sound());
            back.check_order();
            assert_eq!(back.extra.as_ref().unwrap().order, order, "rebuilt");
            assert!(back.order_sound());
        }
        assert!(back.recs.iter().eq(s.recs.iter()));
        assert!(back.tasks.iter().eq(s.tasks.iter()));
        assert!(ids
            .iter()
            .enumerate()
            .all(|(j, id)| back.task_pos(id) == Some(j as u32)));
        // Only the ids not made here are kept aside as text.
        assert_eq!(s.extra.as_ref().unwrap().other_ids.len(), 30);
        // A new task on an order found unsound rebuilds it, with the task.
        let extra = back.extra.as_mut().unwrap();
        extra.order.swap(3, 4);
        extra.order_checked = std::sync::OnceLock::new();
        let n = ids.len() as u32;
        back.open_task("one-more", u64::from(n), 0, at(n));
        assert!(back.order_sound());
        let mut rebuilt = back.extra.as_ref().unwrap().order.clone();
        back.rebuild_order();
        assert_eq!(back.extra.as_ref().unwrap().order, rebuilt);
        rebuilt.sort_unstable();
        assert_eq!(rebuilt, (0..=n).collect::<Vec<_>>());
        assert_eq!(back.task_pos("one-more"), Some(n));
    }

    use crate::index::checkpoint_config as config;

    fn any_extra() -> impl Strategy<Value = Extra> {
        use proptest::collection::vec;
        let artifact = (
            any::<u32>(),
            ".{0,6}",
            vec(any::<u32>(), 0..4),
            any::<bool>(),
        )
            .prop_map(|(task, id, chunks, closed)| ArtifactEntry {
                task,
                id,
                chunks,
                closed,
            });
        (
            vec((any::<u32>(), any::<u32>()), 0..3),
            vec((any::<u32>(), ".{0,6}"), 0..3),
            vec(artifact, 0..3),
            vec(any::<u32>(), 0..5),
        )
            .prop_map(|(gaps, other_ids, artifacts, order)| Extra {
                gaps,
                other_ids: other_ids
                    .into_iter()
                    .map(|(p, id)| (p, id.into()))
                    .collect(),
                artifacts: Artifacts::Owned(artifacts),
                order,
                ..Extra::default()
            })
    }

    /// Whether the hand decoder and bincode agree on `bytes`: both refuse
    /// them, or both read the same extras from the same number of bytes.
    fn extras_agree(bytes: &[u8]) -> bool {
        let mut rest = bytes;
        let by_hand = Extra::decode_checkpoint(&mut rest);
        let by_bincode = bincode::serde::decode_from_slice::<Extra, _>(bytes, config());
        match (by_hand, by_bincode) {
            (None, Err(_)) => true,
            (Some(a), Ok((b, used))) => {
                let encode = |x: &Extra| bincode::serde::encode_to_vec(x, config()).unwrap();
                used == bytes.len() - rest.len() && encode(&a) == encode(&b)
            }
            _ => false,
        }
    }

    proptest! {
        #[test]
        fn extras_decode_by_hand_as_bincode_decodes_them(extra in any_extra()) {
            let bytes = bincode::serde::encode_to_vec(&extra, config()).unwrap();
            prop_assert!(extras_agree(&bytes));
            let mut rest = &bytes[..];
            let back = Extra::decode_checkpoint(&mut rest).unwrap();
            prop_assert!(rest.is_empty());
            prop_assert_eq!(back.artifacts.get().len(), extra.artifacts.get().len());
        }

        /// Any byte changed, or the bytes cut short: the hand decoder
        /// refuses exactly what bincode refuses.
        #[test]
        fn extras_refused_by_hand_as_bincode_refuses_them(
            extra in any_extra(),
            at in any::<prop::sample::Index>(),
            byte: u8,
            cut in any::<prop::sample::Index>(),
        ) {
            let mut bytes = bincode::serde::encode_to_vec(&extra, config()).unwrap();
            let i = at.index(bytes.len());
            bytes[i] = byte;
            prop_assert!(extras_agree(&bytes));
            bytes.truncate(cut.index(bytes.len()));
            prop_assert!(extras_agree(&bytes));
        }
    }
}
