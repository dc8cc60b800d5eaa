//! Where the lifecycle rule is: what each operation may do to a task in each
//! state, and the per-task state the index rebuilds from records.

use crate::a2a::TaskState;
use crate::error::{Error, Result};
use crate::log::segments::{PackedLoc, RecordLoc};

/// An operation on an existing task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op<'a> {
    /// A client message joins the task.
    Message,
    /// The agent sets a new status.
    Status(TaskState),
    /// The agent sends an artifact chunk.
    Artifact {
        /// The artifact's id.
        artifact_id: &'a str,
        /// Whether the chunk extends the artifact.
        append: bool,
    },
    /// The client cancels the task.
    Cancel,
}

/// What the index knows of one artifact.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct ArtifactEntry {
    /// Its id, unique within the task.
    pub id: String,
    /// Its chunks since it was last created or replaced, as indices into the
    /// task's events.
    pub chunks: Vec<u32>,
    /// Whether its last chunk has arrived.
    pub closed: bool,
}

/// A task id as the index keeps it: a store-made id (32 lowercase hex
/// digits) as its 16 bytes, any other id as it is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TaskId {
    /// 32 lowercase hex digits, decoded.
    Made([u8; 16]),
    /// Anything else (not made by this store), byte for byte.
    Other(Box<str>),
}

impl TaskId {
    /// The index's form of `id`.
    pub fn new(id: &str) -> Self {
        match made(id) {
            Some(bytes) => TaskId::Made(bytes),
            None => TaskId::Other(id.into()),
        }
    }

    /// Whether this is `id`.
    pub fn is(&self, id: &str) -> bool {
        match self {
            TaskId::Made(bytes) => made(id).is_some_and(|b| &b == bytes),
            TaskId::Other(other) => &**other == id,
        }
    }

    /// A 64-bit hash of the id, equal to [`TaskId::hash_of`] its text.
    pub fn hash64(&self) -> u64 {
        match self {
            TaskId::Made(bytes) => hash64(bytes),
            TaskId::Other(other) => hash64(other.as_bytes()),
        }
    }

    /// A 64-bit hash of the task id `id`.
    pub fn hash_of(id: &str) -> u64 {
        match made(id) {
            Some(bytes) => hash64(&bytes),
            None => hash64(id.as_bytes()),
        }
    }

    /// Calls `f` with the id's text (without allocating).
    pub fn with_text<R>(&self, f: impl FnOnce(&str) -> R) -> R {
        match self {
            TaskId::Made(bytes) => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                let mut text = [0u8; 32];
                for (pair, b) in text.chunks_exact_mut(2).zip(bytes) {
                    pair.copy_from_slice(&[HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
                }
                // Hex digits are ASCII, so this never fails.
                f(std::str::from_utf8(&text).unwrap_or_default())
            }
            TaskId::Other(other) => f(other),
        }
    }

    /// Bytes on the heap.
    pub fn heap_bytes(&self) -> usize {
        match self {
            TaskId::Made(_) => 0,
            TaskId::Other(other) => other.len(),
        }
    }
}

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TaskId::Made(bytes) => bytes.iter().try_for_each(|b| write!(f, "{b:02x}")),
            TaskId::Other(other) => f.write_str(other),
        }
    }
}

/// The 16 bytes of a store-made id: exactly 32 lowercase hex digits.
fn made(id: &str) -> Option<[u8; 16]> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let text = id.as_bytes();
    if text.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (byte, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        let (&[hi, lo], _) = pair.split_first_chunk::<2>()?;
        *byte = digit(hi)? << 4 | digit(lo)?;
    }
    Some(out)
}

fn hash64(bytes: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// One event of a task: where its record is, and whether it carries a
/// message (the task's history is its events that do). 12 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Event {
    /// Where the record is, with [`MESSAGE`] set in its length for a
    /// message-carrying event (a payload is at most 16 MiB, so the bit is
    /// free).
    loc: PackedLoc,
}

const MESSAGE: u32 = 1 << 31;

impl Event {
    fn new(loc: RecordLoc, carries_message: bool) -> Self {
        let mut loc = PackedLoc::from(loc);
        loc.len = (loc.len & !MESSAGE) | if carries_message { MESSAGE } else { 0 };
        Event { loc }
    }

    fn loc(self) -> RecordLoc {
        let mut loc = self.loc;
        loc.len &= !MESSAGE;
        loc.into()
    }

    fn carries_message(self) -> bool {
        self.loc.len & MESSAGE != 0
    }
}

/// No status record yet (in [`TaskEntry`]'s `status`).
const NO_STATUS: u32 = u32::MAX;

/// What the index knows of one task: 72 bytes, plus 12 per event.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct TaskEntry {
    /// Made by the store.
    pub id: TaskId,
    /// When the current status was recorded (store clock, ms since the epoch).
    pub status_ms: u64,
    /// Every event of the task in order: its per-task seq is index + 1.
    events: Vec<Event>,
    /// The artifacts, in the order they were first created. Boxed: 8 bytes
    /// in every task instead of a `Vec`'s 24, as most tasks have none.
    #[allow(clippy::box_collection)]
    artifacts: Option<Box<Vec<ArtifactEntry>>>,
    /// The latest status record, as an index into `events`; [`NO_STATUS`]
    /// while the task is as it was submitted (SUBMITTED, at `status_ms`).
    status: u32,
    /// The current state.
    pub state: TaskState,
}

impl TaskEntry {
    /// A task opened by the message at `loc`.
    pub fn opened(id: &str, timestamp_ms: u64, loc: RecordLoc) -> Self {
        TaskEntry {
            id: TaskId::new(id),
            state: TaskState::Submitted,
            status_ms: timestamp_ms,
            status: NO_STATUS,
            events: vec![Event::new(loc, true)],
            artifacts: None,
        }
    }

    /// How many events the task has.
    pub fn event_count(&self) -> usize {
        self.events.len()
    }

    /// Where event `i` is (0-based: its per-task seq is `i + 1`).
    pub fn event(&self, i: usize) -> Option<RecordLoc> {
        self.events.get(i).map(|e| e.loc())
    }

    /// Where every event is, in order.
    pub fn events(&self) -> impl DoubleEndedIterator<Item = RecordLoc> + '_ {
        self.events.iter().map(|e| e.loc())
    }

    /// The events that carry a message (the task's history), in order.
    pub fn history(&self) -> impl DoubleEndedIterator<Item = RecordLoc> + '_ {
        self.events
            .iter()
            .filter(|e| e.carries_message())
            .map(|e| e.loc())
    }

    /// Where the latest status record is (`None` while submitted).
    pub fn status_loc(&self) -> Option<RecordLoc> {
        self.event(self.status as usize)
            .filter(|_| self.status != NO_STATUS)
    }

    /// The artifacts, in the order they were first created.
    pub fn artifacts(&self) -> &[ArtifactEntry] {
        self.artifacts.as_deref().map_or(&[], Vec::as_slice)
    }

    /// Moves every event to where `to` says (after a compaction).
    pub fn remap(&mut self, to: &impl Fn(&mut RecordLoc)) {
        for event in &mut self.events {
            let mut loc = event.loc();
            to(&mut loc);
            *event = Event::new(loc, event.carries_message());
        }
    }

    /// Bytes on the heap (vectors at their capacity).
    pub fn heap_bytes(&self) -> usize {
        self.id.heap_bytes()
            + self.events.capacity() * std::mem::size_of::<Event>()
            + self.artifacts.as_ref().map_or(0, |a| {
                std::mem::size_of::<Vec<ArtifactEntry>>()
                    + a.capacity() * std::mem::size_of::<ArtifactEntry>()
                    + a.iter()
                        .map(|a| a.id.capacity() + a.chunks.capacity() * 4)
                        .sum::<usize>()
            })
    }

    /// Whether `op` is allowed now; the error says why not.
    pub fn check(&self, op: Op<'_>) -> Result<()> {
        let terminal = || Error::UnsupportedOperation {
            reason: format!(
                "task {} is {} and terminal states are final; send a new message with \
                 referenceTaskIds to follow it up",
                self.id,
                self.state.name()
            ),
        };
        match op {
            Op::Cancel if self.state.is_terminal() => Err(Error::TaskNotCancelable {
                state: self.state.name(),
            }),
            Op::Cancel => Ok(()),
            _ if self.state.is_terminal() => Err(terminal()),
            Op::Message => Ok(()),
            Op::Status(TaskState::Unspecified) => Err(Error::InvalidParams {
                field: "status.state",
                reason: "TASK_STATE_UNSPECIFIED is not a state a task can be put in".into(),
            }),
            Op::Status(_) => Ok(()),
            Op::Artifact {
                artifact_id,
                append,
            } => self.check_artifact(artifact_id, append),
        }
    }

    fn check_artifact(&self, artifact_id: &str, append: bool) -> Result<()> {
        match self.artifacts().iter().find(|a| a.id == artifact_id) {
            Some(a) if a.closed => Err(Error::InvalidParams {
                field: "artifact.artifactId",
                reason: format!(
                    "artifact {artifact_id:?} already had its lastChunk; nothing may follow it"
                ),
            }),
            None if append => Err(Error::InvalidParams {
                field: "artifact.artifactId",
                reason: format!(
                    "append to unknown artifact {artifact_id:?}; send its first chunk with append: false"
                ),
            }),
            _ => Ok(()),
        }
    }

    /// Records an event at `loc` (already checked and durable).
    pub fn push_event(&mut self, loc: RecordLoc, carries_message: bool) -> u32 {
        // Saturates rather than wraps past 2^32 - 2 events (at 12 bytes of
        // frame each, a task of over 48 GiB): no store gets there.
        let index = u32::try_from(self.events.len()).unwrap_or(NO_STATUS - 1);
        crate::index::push(&mut self.events, Event::new(loc, carries_message));
        index
    }

    /// Records a status event.
    pub fn set_status(
        &mut self,
        state: TaskState,
        at_ms: u64,
        loc: RecordLoc,
        carries_message: bool,
    ) {
        let index = self.push_event(loc, carries_message);
        self.state = state;
        self.status_ms = at_ms;
        self.status = index;
    }

    /// Records an artifact chunk.
    pub fn add_chunk(&mut self, loc: RecordLoc, artifact_id: &str, append: bool, last_chunk: bool) {
        let index = self.push_event(loc, false);
        let artifacts = self.artifacts.get_or_insert_with(Box::default);
        let entry = match artifacts.iter().position(|a| a.id == artifact_id) {
            Some(i) => artifacts.get_mut(i),
            None => {
                artifacts.push(ArtifactEntry {
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
            entry.chunks.push(index);
            entry.closed = last_chunk;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOC: RecordLoc = RecordLoc {
        segment: 1,
        offset: 32,
        len: 1,
    };

    fn task_in(state: TaskState) -> TaskEntry {
        let mut t = TaskEntry::opened("t", 0, LOC);
        if state != TaskState::Submitted {
            t.set_status(state, 1, LOC, false);
        }
        t
    }

    fn kind(r: Result<()>) -> &'static str {
        match r {
            Ok(()) => "ok",
            Err(e) => e.kind_name(),
        }
    }

    /// Every (state × operation) pair against its expected outcome.
    #[test]
    fn the_lifecycle_table() {
        use TaskState::*;
        let ops: [(&str, Op<'static>); 7] = [
            ("message", Op::Message),
            ("status working", Op::Status(Working)),
            ("status completed", Op::Status(Completed)),
            ("status unspecified", Op::Status(Unspecified)),
            (
                "new artifact",
                Op::Artifact {
                    artifact_id: "a",
                    append: false,
                },
            ),
            (
                "append unknown",
                Op::Artifact {
                    artifact_id: "zz",
                    append: true,
                },
            ),
            ("cancel", Op::Cancel),
        ];
        let expected = |state: TaskState, op: &str| -> &'static str {
            match (state.is_terminal(), op) {
                (true, "cancel") => "TaskNotCancelable",
                (true, _) => "UnsupportedOperation",
                (false, "status unspecified") | (false, "append unknown") => "InvalidParams",
                (false, _) => "ok",
            }
        };
        for state in TaskState::ALL.into_iter().filter(|s| *s != Unspecified) {
            let task = task_in(state);
            for (name, op) in ops {
                assert_eq!(
                    kind(task.check(op)),
                    expected(state, name),
                    "{} × {name}",
                    state.name()
                );
            }
        }
    }

    #[test]
    fn task_ids_keep_their_text_and_store_made_ones_take_16_bytes() {
        let made = "0123456789abcdef00ff7f80a0b0c0d0";
        for id in [made, "0123456789ABCDEF00FF7F80A0B0C0D0", "t-1", "", "é"] {
            let t = TaskId::new(id);
            assert_eq!(t.to_string(), id);
            assert_eq!(t.with_text(str::to_string), id);
            assert!(t.is(id));
            assert_eq!(t.hash64(), TaskId::hash_of(id));
            assert!(!t.is(&format!("{id}0")));
        }
        assert!(matches!(TaskId::new(made), TaskId::Made(_)));
        // Upper case is not what the store makes: kept as text, so that it
        // comes back byte for byte.
        assert!(matches!(
            TaskId::new(&made.to_uppercase()),
            TaskId::Other(_)
        ));
        assert!(!TaskId::new(made).is(&made.to_uppercase()));
        assert_eq!(std::mem::size_of::<TaskEntry>(), 72);
        assert_eq!(std::mem::size_of::<Event>(), 12);
    }

    #[test]
    fn events_keep_their_place_and_whether_they_carry_a_message() {
        let at = |offset| RecordLoc {
            segment: crate::log::segments::MAX_SEGMENT_ID,
            offset,
            len: crate::MAX_RECORD_BYTES,
        };
        let mut t = TaskEntry::opened("t", 0, at(1));
        t.set_status(TaskState::Working, 1, at(2), true);
        t.add_chunk(at(3), "a", false, true);
        t.set_status(TaskState::Completed, 2, at(4), false);
        assert_eq!(
            t.events().collect::<Vec<_>>(),
            (1..=4).map(at).collect::<Vec<_>>()
        );
        assert_eq!(t.history().collect::<Vec<_>>(), vec![at(1), at(2)]);
        assert_eq!(t.status_loc(), Some(at(4)));
        assert_eq!(TaskEntry::opened("u", 0, at(1)).status_loc(), None);
        t.remap(&|loc: &mut RecordLoc| loc.offset += 10);
        assert_eq!(t.history().collect::<Vec<_>>(), vec![at(11), at(12)]);
    }

    #[test]
    fn artifact_chunks_follow_their_rules() {
        let mut t = task_in(TaskState::Working);
        let chunk = |id, append| Op::Artifact {
            artifact_id: id,
            append,
        };
        assert_eq!(kind(t.check(chunk("a", true))), "InvalidParams");
        t.add_chunk(LOC, "a", false, false);
        assert_eq!(kind(t.check(chunk("a", true))), "ok");
        t.add_chunk(LOC, "a", true, false);
        assert_eq!(t.artifacts()[0].chunks.len(), 2);
        // Replacing starts the artifact over.
        t.add_chunk(LOC, "a", false, false);
        assert_eq!(t.artifacts()[0].chunks.len(), 1);
        t.add_chunk(LOC, "a", true, true);
        assert_eq!(kind(t.check(chunk("a", true))), "InvalidParams");
        assert_eq!(kind(t.check(chunk("a", false))), "InvalidParams");
        assert_eq!(kind(t.check(chunk("b", false))), "ok");
        assert_eq!(
            t.event_count(),
            6,
            "the opening message, one status, four chunks"
        );
        assert_eq!(t.history().collect::<Vec<_>>(), vec![LOC]);
    }
}
