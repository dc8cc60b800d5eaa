//! The index checkpoint: written at a clean close, it lets the next open load
//! the index instead of reading the whole log, then read only what was
//! appended after it. A checkpoint that is damaged or does not match the log
//! is ignored (the open falls back to a full scan), so it can never make an
//! open fail or serve wrong data.
//!
//! ```text
//! magic "CTXLCKP\0" | version:u32 = 6 | crc32 of the rest:u32 | bincode(Header)
//! | count:u64 | count × bincode(Entry) | 64 × (n:u64 | n × idem entry (24 bytes))
//! ```

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::Store;
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::index::{task_prefix, ContextState, IdemAt, Index, SHARDS};
use crate::log::frame::u32_at;
use crate::log::recovery::Resume;
use crate::namespace::ContextKey;

/// The checkpoint's file name.
pub const CHECKPOINT: &str = "CHECKPOINT";
const MAGIC: [u8; 8] = *b"CTXLCKP\0";
const VERSION: u32 = 6;

#[derive(Serialize, Deserialize)]
struct Header {
    resume: (u64, u64, u64),
    records: u64,
}

/// One context: its key (version, digest) and its index entry.
type Entry = (u8, [u8; 32], ContextState);
/// One received messageId: its short key (16 bytes), the position of its
/// context among the checkpoint's entries and its seq (u32 each,
/// little-endian). Written shard by shard of the index's messageId map,
/// ascending by short key within a shard.
const IDEM_BYTES: usize = 24;

fn config() -> impl bincode::config::Config {
    bincode::config::standard()
        .with_little_endian()
        .with_fixed_int_encoding()
        .with_limit::<{ 1 << 30 }>()
}

/// What a loaded checkpoint gives the open.
pub struct Loaded {
    /// Where the log must still be read from.
    pub resume: Resume,
    /// Records the checkpoint accounts for.
    pub records: u64,
}

impl Store {
    /// Writes the checkpoint of the whole index if enough was appended since
    /// the last one (see `Options::checkpoint_interval`); never while a
    /// compaction runs. Failures are left for the close to report.
    pub(crate) fn maybe_checkpoint(&self, appended: u64) {
        use std::sync::atomic::Ordering;
        let Some(interval) = self.options.checkpoint_interval else {
            return;
        };
        let since = self.since_checkpoint.fetch_add(appended, Ordering::AcqRel) + appended;
        let due = interval.max(2 * self.checkpoint_size.load(Ordering::Acquire));
        if since < due || self.checkpointing.swap(true, Ordering::AcqRel) {
            return;
        }
        self.since_checkpoint.store(0, Ordering::Release);
        if let Some(manifest) = self.manifest.try_lock() {
            if !self.no_checkpoint.load(Ordering::Acquire) {
                let _ = self.write_checkpoint_under(manifest.generation);
            }
        }
        self.checkpointing.store(false, Ordering::Release);
    }

    /// Writes the checkpoint of the whole index.
    pub(crate) fn write_checkpoint(&self) -> Result<()> {
        let generation = self.manifest.lock().generation;
        self.write_checkpoint_under(generation)
    }

    /// Writes the checkpoint, for manifest `generation` (whose lock the
    /// caller holds or which no compaction can change). Appends may run
    /// meanwhile: the resume point is taken first, at the earliest append not
    /// yet published, so every record before it is in the index read after;
    /// records after it that the index already holds are skipped on replay.
    fn write_checkpoint_under(&self, generation: u64) -> Result<()> {
        let (segment, offset) = self.writer.resume_point();
        let mut body = Vec::new();
        let header = Header {
            resume: (generation, segment, offset),
            records: self.records(),
        };
        encode(&header, &mut body)?;
        let slots: Vec<_> = self
            .index
            .all_contexts()
            .into_iter()
            .filter_map(|key| Some((key, self.index.get(&key)?)))
            .collect();
        body.extend_from_slice(&(slots.len() as u64).to_le_bytes());
        // A context's place among the entries, by its number.
        let mut place = vec![
            u32::MAX;
            slots
                .iter()
                .map(|(_, s)| s.number as usize + 1)
                .max()
                .unwrap_or(0)
        ];
        for (i, (key, slot)) in slots.iter().enumerate() {
            let state = slot.state.read();
            encode(&(key.version(), *key.digest(), &*state), &mut body)?;
            if let Some(p) = place.get_mut(slot.number as usize) {
                // Fits: the index numbers its contexts in a u32.
                *p = i as u32;
            }
        }
        for shard in self.index.idem_shards() {
            let entries: Vec<_> = shard
                .into_iter()
                .filter_map(|(key, at)| {
                    let &p = place.get(at.context as usize).filter(|&&p| p != u32::MAX)?;
                    Some((key, p, at.seq))
                })
                .collect();
            body.extend_from_slice(&(entries.len() as u64).to_le_bytes());
            for (key, p, seq) in entries {
                body.extend_from_slice(&key);
                body.extend_from_slice(&p.to_le_bytes());
                body.extend_from_slice(&seq.to_le_bytes());
            }
        }
        let mut file = MAGIC.to_vec();
        file.extend_from_slice(&VERSION.to_le_bytes());
        file.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        file.extend_from_slice(&body);
        let (fs, dir) = (self.writer.fs(), self.writer.dir());
        let tmp = dir.join("CHECKPOINT.tmp");
        fs.write_file(&tmp, &file)
            .map_err(|e| Error::io("write the checkpoint", &tmp, e))?;
        fs.rename(&tmp, &dir.join(CHECKPOINT))
            .map_err(|e| Error::io("switch to the new checkpoint", &tmp, e))?;
        self.writer.sync_dir()
    }
}

/// Loads the checkpoint of `dir` into `index`, if there is a sound one.
/// `None` (and an untouched index) when there is none or it is damaged.
pub fn load(fs: &dyn Fs, dir: &Path, index: &Index) -> Option<Loaded> {
    // Mapped, not read: a large checkpoint then costs no fresh memory. The
    // file is only ever replaced by a rename, never changed in place, which
    // is the map's contract (see `mmap`).
    let map = fs.map(&dir.join(CHECKPOINT)).ok()?;
    let bytes = map.bytes();
    let body = bytes.strip_prefix(&MAGIC)?;
    let (version, body) = body.split_at_checked(4)?;
    let (crc, body) = body.split_at_checked(4)?;
    if version != VERSION.to_le_bytes() || crc != crc32fast::hash(body).to_le_bytes() {
        return None;
    }
    let (header, used): (Header, usize) = bincode::serde::decode_from_slice(body, config()).ok()?;
    let mut rest = body.get(used..)?;
    let (count, tail) = rest.split_at_checked(8)?;
    let count = u64::from_le_bytes(count.try_into().ok()?);
    rest = tail;
    let mut entries = Vec::new();
    for _ in 0..count {
        let (entry, used): (Entry, usize) =
            bincode::serde::decode_from_slice(rest, config()).ok()?;
        entries.push(entry);
        rest = rest.get(used..)?;
    }
    let entries_len = entries.len();
    // The messageId map, shard by shard, checked (every entry names a
    // context of the checkpoint, and sits in its shard) before the index is
    // touched.
    let mut idem = Vec::with_capacity(SHARDS);
    for shard in 0..SHARDS {
        let (n, tail) = rest.split_at_checked(8)?;
        let n = usize::try_from(u64::from_le_bytes(n.try_into().ok()?)).ok()?;
        let (run, tail) = tail.split_at_checked(n.checked_mul(IDEM_BYTES)?)?;
        rest = tail;
        let mut entries = Vec::with_capacity(n);
        for e in run.chunks_exact(IDEM_BYTES) {
            let (key, words) = e.split_first_chunk::<16>()?;
            let (context, seq) = (u32_at(words, 0), u32_at(words, 4));
            if context as usize >= entries_len || Index::idem_shard_of(key) != shard {
                return None;
            }
            entries.push((*key, IdemAt { context, seq }));
        }
        idem.push(entries);
    }
    if !rest.is_empty() {
        return None;
    }
    // The number the index gives each context, by its place in the entries.
    let mut numbers = Vec::with_capacity(entries.len());
    for (version, digest, mut state) in entries {
        let key = ContextKey::from_parts(version, digest);
        state.set_prefix(task_prefix(&key));
        state.check_order();
        // The slot first: the task map refers to it by its number.
        let slot = index.get_or_insert(&key);
        numbers.push(slot.number);
        if let Some(meta) = &state.meta {
            if state.gone.is_none() {
                index.list_in_tenant(&meta.tenant, meta.first_ms, key);
                index.enter_tasks(&meta.tenant, slot.number, &state);
            }
        }
        *slot.state.write() = state;
    }
    for entry in idem.iter_mut().flatten() {
        // In range: checked above against the number of entries.
        entry.1.context = numbers
            .get(entry.1.context as usize)
            .copied()
            .unwrap_or(u32::MAX);
    }
    index.idem_load(idem);
    let (generation, segment, offset) = header.resume;
    Some(Loaded {
        resume: Resume {
            generation,
            segment,
            offset,
        },
        records: header.records,
    })
}

fn encode_error(e: bincode::error::EncodeError) -> Error {
    Error::InvalidParams {
        field: "checkpoint",
        reason: e.to_string(),
    }
}

/// Appends `value` in the checkpoint's encoding.
fn encode<T: Serialize>(value: &T, out: &mut Vec<u8>) -> Result<()> {
    bincode::serde::encode_into_std_write(value, out, config())
        .map(|_| ())
        .map_err(encode_error)
}
