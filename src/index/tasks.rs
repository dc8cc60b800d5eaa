//! The per-task state the index rebuilds from records (the rule it checks
//! operations against is [`crate::a2a::lifecycle`]).

use crate::a2a::TaskState;
use crate::log::frame::u32_at;

/// What the index knows of one artifact.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct ArtifactEntry {
    /// The task it belongs to (its position in the context's tasks).
    pub task: u32,
    /// Its id, unique within the task.
    pub id: String,
    /// Its chunks since it was last created or replaced, as positions in
    /// the context's records.
    pub chunks: Vec<u32>,
    /// Whether its last chunk has arrived.
    pub closed: bool,
}

/// A task id as a lookup compares it: a store-made id (32 lowercase hex
/// digits) as its 16 bytes, any other id as its text. Store-made ids sort
/// before the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum IdKey<'a> {
    /// 32 lowercase hex digits, decoded.
    Made([u8; 16]),
    /// Anything else (not made by this store), byte for byte.
    Other(&'a str),
}

impl<'a> IdKey<'a> {
    /// The key of the id `id`.
    pub fn of(id: &'a str) -> Self {
        match made(id) {
            Some(bytes) => IdKey::Made(bytes),
            None => IdKey::Other(id),
        }
    }
}

impl std::fmt::Display for IdKey<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IdKey::Made(bytes) => {
                // Neither step fails: the buffer is twice the bytes, and
                // hex digits are ASCII.
                let mut text = [0u8; 32];
                hex::encode_to_slice(bytes, &mut text).map_err(|_| std::fmt::Error)?;
                f.write_str(std::str::from_utf8(&text).map_err(|_| std::fmt::Error)?)
            }
            IdKey::Other(other) => f.write_str(other),
        }
    }
}

/// A store-made id's 16 bytes from its halves: the context's prefix, then
/// the random tail.
pub fn join_id(prefix: [u8; 8], tail: [u8; 8]) -> [u8; 16] {
    let [a, b, c, d, e, f, g, h] = prefix;
    let [i, j, k, l, m, n, o, p] = tail;
    [a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p]
}

/// A store-made id's halves: the prefix, then the tail.
pub fn split_id(id: [u8; 16]) -> ([u8; 8], [u8; 8]) {
    let [a, b, c, d, e, f, g, h, tail @ ..] = id;
    ([a, b, c, d, e, f, g, h], tail)
}

/// The value of each byte as a lowercase hex digit; 0xFF for any other.
const NIBBLE: [u8; 256] = {
    let mut table = [0xFF; 256];
    let mut i = 0;
    while i < 10 {
        table[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        table[b'a' as usize + i] = 10 + i as u8;
        i += 1;
    }
    table
};

/// The 16 bytes of a store-made id: exactly 32 lowercase hex digits. Every
/// lookup of a task parses its id, so this runs without a branch per digit.
pub(super) fn made(id: &str) -> Option<[u8; 16]> {
    let text = id.as_bytes();
    if text.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    let mut bad = 0u8;
    for (byte, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        if let [hi, lo] = pair {
            // In range: a u8 indexes a table of 256.
            let (hi, lo) = (NIBBLE[usize::from(*hi)], NIBBLE[usize::from(*lo)]);
            bad |= hi | lo;
            *byte = hi << 4 | lo;
        }
    }
    (bad & 0xF0 == 0).then_some(out)
}

/// How many bytes a task entry takes in the checkpoint.
pub const TASK_BYTES: usize = 26;

/// The latest status time a task entry holds: 2⁴⁸ − 1 ms, in the year
/// 10889. A later one (only a record written with a clock that far off
/// has one) counts as this.
pub const MAX_STATUS_MS: u64 = (1 << 48) - 1;

/// What the index keeps of one task: 24 bytes. Its events are the records
/// of its context that name it: the last `events` of them up to `last`;
/// its history is those of them that carry a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskEntry {
    /// The random half of an id the store made in this context (whose first
    /// half is the context's task prefix); zeros for any other id, whose
    /// text the context keeps aside (`other` is set).
    tail: [u8; 8],
    /// When the current status was recorded (store clock, ms since the
    /// epoch, at most [`MAX_STATUS_MS`]): its low 32 bits, and the 16
    /// above them, which keeps the entry 4-aligned and at 24 bytes.
    status_lo: u32,
    status_hi: u16,
    /// How many records it has (its events).
    pub events: u32,
    /// The position of its latest record in the context's records.
    pub last: u32,
    /// The current state.
    pub state: TaskState,
    /// [`OTHER`] (the id was not made by this store) and [`REPLY`] (its
    /// turn ended in a direct reply: the client got a message, no task).
    flags: u8,
}

/// A task entry's flag: its id was not made by this store.
const OTHER: u8 = 1;
/// A task entry's flag: its turn ended in a direct reply.
const REPLY: u8 = 2;

impl TaskEntry {
    /// An entry that stands for none (while a checkpoint is refused).
    pub const PLACEHOLDER: TaskEntry = TaskEntry {
        tail: [0; 8],
        status_lo: 0,
        status_hi: 0,
        events: 0,
        last: 0,
        state: TaskState::Unspecified,
        flags: OTHER,
    };

    /// A task opened at `timestamp_ms`, with no record yet (the opening
    /// message is pushed next), whose id is the context's prefix and `tail`
    /// (`None`: any other id, kept aside by the context).
    pub fn opened(tail: Option<[u8; 8]>, timestamp_ms: u64) -> Self {
        let mut entry = TaskEntry {
            tail: tail.unwrap_or_default(),
            status_lo: 0,
            status_hi: 0,
            events: 0,
            last: 0,
            state: TaskState::Submitted,
            flags: if tail.is_none() { OTHER } else { 0 },
        };
        entry.set_status_ms(timestamp_ms);
        entry
    }

    /// The entry's bytes in the checkpoint: tail (8), status time's halves,
    /// event count and latest position (u32 each, little-endian), the
    /// state's place in [`TaskState::ALL`], and its flags (bit 0: the id is
    /// kept aside; bit 1: a direct reply).
    pub fn to_bytes(self) -> [u8; TASK_BYTES] {
        let mut out = [0u8; TASK_BYTES];
        let (lo, hi) = (self.status_lo, u32::from(self.status_hi));
        let state = TaskState::ALL.iter().position(|s| *s == self.state);
        let words = [lo, hi, self.events, self.last].map(u32::to_le_bytes);
        // The place is at most 8: ALL has 9 states.
        let flags = [state.map_or(u8::MAX, |i| i as u8), self.flags];
        let fields = self.tail.iter().chain(words.iter().flatten()).chain(&flags);
        for (b, f) in out.iter_mut().zip(fields) {
            *b = *f;
        }
        out
    }

    /// An entry from its checkpoint bytes; `None` if they are not one.
    pub fn from_bytes(bytes: &[u8; TASK_BYTES]) -> Option<Self> {
        let (tail, rest) = bytes.split_first_chunk::<8>()?;
        let (words, rest) = rest.split_first_chunk::<16>()?;
        let [state, flags] = *rest else { return None };
        if flags & !(OTHER | REPLY) != 0 {
            return None;
        }
        let mut entry = TaskEntry {
            tail: *tail,
            status_lo: 0,
            status_hi: 0,
            events: u32_at(words, 8),
            last: u32_at(words, 12),
            state: *TaskState::ALL.get(usize::from(state))?,
            flags,
        };
        entry.set_status_ms(u64::from(u32_at(words, 4)) << 32 | u64::from(u32_at(words, 0)));
        Some(entry)
    }

    /// Whether `bytes` are an entry ([`from_bytes`](Self::from_bytes)
    /// would take them), told from its two flag bytes.
    pub fn sound_bytes(bytes: &[u8]) -> bool {
        matches!(bytes, &[.., state, flags] if bytes.len() == TASK_BYTES
            && usize::from(state) < TaskState::ALL.len() && flags <= 3)
    }

    /// [`tail`](Self::tail) of the entry in `bytes`, read where it lies.
    pub fn tail_in(bytes: &[u8]) -> Option<[u8; 8]> {
        match bytes {
            &[.., flags] if flags & 1 == 0 => bytes.first_chunk().copied(),
            _ => None,
        }
    }

    /// The random half of a store-made id.
    pub fn tail(&self) -> Option<[u8; 8]> {
        (self.flags & OTHER == 0).then_some(self.tail)
    }

    /// Whether its turn ended in a direct reply.
    pub fn is_reply(&self) -> bool {
        self.flags & REPLY != 0
    }

    /// Marks its turn as ended in a direct reply.
    pub fn mark_reply(&mut self) {
        self.flags |= REPLY;
    }

    /// When the current status was recorded.
    pub fn status_ms(&self) -> u64 {
        u64::from(self.status_hi) << 32 | u64::from(self.status_lo)
    }

    /// Records a new status, set at `at_ms`.
    pub fn set_status(&mut self, state: TaskState, at_ms: u64) {
        self.state = state;
        self.set_status_ms(at_ms);
    }

    fn set_status_ms(&mut self, ms: u64) {
        let ms = ms.min(MAX_STATUS_MS);
        // Both parts fit by construction (a mask, and a shift of at most
        // 48 bits).
        self.status_lo = (ms & 0xffff_ffff) as u32;
        self.status_hi = (ms >> 32) as u16;
    }
}
