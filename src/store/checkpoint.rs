//! The index checkpoint: written at a clean close, it lets the next open load
//! the index instead of reading the whole log, then read only what was
//! appended after it. A checkpoint that is damaged or does not match the log
//! is ignored (the open falls back to a full scan), so it can never make an
//! open fail or serve wrong data.
//!
//! ```text
//! magic "CTXLCKP\0" | version:u32 = 8 | crc32 of the rest:u32 | bincode(Header)
//! | len:u64 | every context's records (len bytes, 16 per record)
//! | len:u64 | every context's tasks (len bytes, 26 per task)
//! | count:u64 | count × bincode(Entry) | 64 × (n:u64 | n × idem entry (24 bytes))
//! ```
//!
//! The store keeps the checkpoint it loaded or last wrote mapped: the index
//! reads the messageId entries, and the records and tasks of every context
//! that has not changed since, where they lie (see `idem_run` and
//! `entries`).

use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::index::context::RECORD_BYTES;
use crate::index::entries::{all_decode, Section, Span};
use crate::index::idem_run::{check_run, put_entry, IdemRun, Numbers, ENTRY_BYTES};
use crate::index::tasks::{TaskEntry, TASK_BYTES};
use crate::index::{task_prefix, ContextState, Index, SHARDS};
use crate::log::recovery::Resume;
use crate::namespace::ContextKey;

pub use crate::log::recovery::CHECKPOINT;
const MAGIC: [u8; 8] = *b"CTXLCKP\0";
const VERSION: u32 = 9;
/// The bytes before the body: magic, version, checksum.
const PREAMBLE: usize = 16;

#[derive(Serialize, Deserialize)]
struct Header {
    /// The store that wrote it.
    store: [u8; 16],
    resume: (u64, u64, u64),
    records: u64,
}

/// One context: its key (version, digest), its index entry, and where its
/// records and its tasks are in their sections (byte offset, count). The messageId
/// entries that follow are `idem_run`'s, shard by shard of the index's
/// messageId map.
type Entry = (u8, [u8; 32], ContextState, ((u64, u64), (u64, u64)));

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

impl super::Shared {
    /// Writes the checkpoint of the whole index if enough was appended since
    /// the last one (see `Options::checkpoint_interval`); never while a
    /// compaction runs. Failures are left for the close to report.
    pub(crate) fn maybe_checkpoint(&self, appended: u64) {
        use std::sync::atomic::Ordering;
        let Some(interval) = self.options.checkpoint_interval else {
            return;
        };
        let since = self.since_checkpoint.fetch_add(appended, Ordering::AcqRel) + appended;
        let due = interval.max(self.checkpoint_size.load(Ordering::Acquire));
        if since < due || self.checkpointing.swap(true, Ordering::AcqRel) {
            return;
        }
        self.since_checkpoint.store(0, Ordering::Release);
        if let Some(manifest) = self.manifest.try_lock() {
            if !self.no_checkpoint.load(Ordering::Acquire) {
                if let Err(e) = self.write_checkpoint_under(manifest.generation) {
                    // Nothing is lost: the next is due as the log grows,
                    // and a reopen reads the log after the last good one.
                    tracing::warn!(error = %e, "a periodic checkpoint failed; it will be retried");
                }
            }
        }
        self.checkpointing.store(false, Ordering::Release);
    }

    /// Writes the checkpoint of the whole index.
    pub(crate) fn write_checkpoint(&self) -> Result<()> {
        // Held throughout: one checkpoint is written at a time.
        let manifest = self.manifest.lock();
        self.write_checkpoint_under(manifest.generation)
    }

    /// Writes the checkpoint, for manifest `generation` (whose lock the
    /// caller holds or which no compaction can change). Appends may run
    /// meanwhile: the resume point is taken first, at the earliest append not
    /// yet published, so every record before it is in the index read after;
    /// records after it that the index already holds are skipped on replay.
    pub(super) fn write_checkpoint_under(&self, generation: u64) -> Result<()> {
        let (segment, offset) = self.writer.resume_point();
        // Every record before the resume point must be durable before a
        // checkpoint says the log reached it: an open that finds the log
        // shorter then knows acknowledged records are missing. (With `Sync`
        // and `GroupCommit`, a published record already is.)
        if self.options.durability == crate::Durability::Buffered {
            self.writer.sync_all()?;
        }
        let header = Header {
            store: self.writer.store().0,
            resume: (generation, segment, offset),
            records: self.records(),
        };
        let slots = self.index.all_slots();
        // A context's place among the entries, by its number.
        let numbers: Vec<u32> = slots.iter().map(|s| s.number).collect();
        let mut place = vec![
            u32::MAX;
            slots
                .iter()
                .map(|s| s.number as usize + 1)
                .max()
                .unwrap_or(0)
        ];
        // The records and tasks of every context, and the entries that say
        // where in them each context's are.
        let (mut recs, mut tasks, mut entries) = (Vec::new(), Vec::new(), Vec::new());
        let mut spans = Vec::with_capacity(slots.len());
        for (i, slot) in slots.iter().enumerate() {
            let key = &slot.key;
            let state = slot.state.read();
            let span = (
                (recs.len() as u64, state.record_count() as u64),
                (tasks.len() as u64, state.task_count() as u64),
            );
            state.put_entries(&mut recs, &mut tasks);
            encode(&(key.version(), *key.digest(), &*state, span), &mut entries)?;
            spans.push(span);
            if let Some(p) = place.get_mut(slot.number as usize) {
                // Fits: the index numbers its contexts in a u32.
                *p = i as u32;
            }
        }
        let mut file = MAGIC.to_vec();
        file.extend_from_slice(&VERSION.to_le_bytes());
        file.extend_from_slice(&[0; 4]);
        encode(&header, &mut file)?;
        let recs_at = put_section(&mut file, recs);
        let tasks_at = put_section(&mut file, tasks);
        file.extend_from_slice(&(slots.len() as u64).to_le_bytes());
        file.extend_from_slice(&entries);
        drop(entries);
        // Where each shard's run lies in the file.
        let mut runs = Vec::with_capacity(SHARDS);
        for shard in self.index.idem_shards() {
            let entries: Vec<_> = shard
                .into_iter()
                .filter_map(|(key, at)| {
                    let &p = place.get(at.context as usize).filter(|&&p| p != u32::MAX)?;
                    Some((key, p, at.seq))
                })
                .collect();
            file.extend_from_slice(&(entries.len() as u64).to_le_bytes());
            runs.push((file.len(), entries.len()));
            for (key, p, seq) in entries {
                put_entry(&mut file, &key, p, seq);
            }
        }
        let crc = crc32fast::hash(file.get(PREAMBLE..).unwrap_or_default());
        if let Some(at) = file.get_mut(PREAMBLE - 4..PREAMBLE) {
            at.copy_from_slice(&crc.to_le_bytes());
        }
        let (fs, dir) = (self.writer.fs(), self.writer.dir());
        let tmp = dir.join("CHECKPOINT.tmp");
        fs.write_file(&tmp, &file)
            .map_err(|e| Error::io("write the checkpoint", &tmp, e))?;
        // Mapped before the rename, so the map is of the file just written;
        // it is used only once the rename has made that file the
        // checkpoint, which is then never changed in place.
        let map = fs.map(&tmp).ok().map(Arc::new);
        fs.rename(&tmp, &dir.join(CHECKPOINT))
            .map_err(|e| Error::io("switch to the new checkpoint", &tmp, e))?;
        // The next is due after at least this one's size of log, so
        // checkpoints never write more than the log does.
        self.checkpoint_size
            .store(file.len() as u64, std::sync::atomic::Ordering::Release);
        if let Some(map) = map.filter(|m| m.bytes().len() == file.len()) {
            // The index now reads from the new file what it read from the
            // one before (unlinked by the rename), which is then let go:
            // the messageIds, and the records and tasks that have not changed
            // since that one was loaded.
            let numbers: Numbers = numbers.into();
            let runs = runs
                .into_iter()
                .map(|(start, count)| IdemRun::in_map(&map, start, count, numbers.clone()));
            if let Some(runs) = runs.collect() {
                self.index.idem_rebase(runs);
            }
            let sections = Section::new(map.clone(), recs_at.0, recs_at.1).zip(Section::new(
                map.clone(),
                tasks_at.0,
                tasks_at.1,
            ));
            if let Some((rec_section, task_section)) = sections {
                for (slot, (rec_span, task_span)) in slots.iter().zip(spans) {
                    let recs = span_in(&rec_section, rec_span, RECORD_BYTES);
                    let tasks = span_in(&task_section, task_span, TASK_BYTES);
                    if let Some((recs, tasks)) = recs.zip(tasks) {
                        slot.state.write().remap_entries(recs, tasks);
                    }
                }
            }
        }
        self.writer.sync_dir()
    }
}

/// Reads a checkpoint's body front to back, checksumming each part as it
/// is taken (so each is read once, while it is in the cache).
struct Reader<'a> {
    rest: &'a [u8],
    /// The whole file's length: where the rest starts is its offset.
    file_len: usize,
    sum: crc32fast::Hasher,
}

impl<'a> Reader<'a> {
    /// Takes `n` bytes.
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (part, rest) = self.rest.split_at_checked(n)?;
        self.sum.update(part);
        self.rest = rest;
        Some(part)
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(*self.take(8)?.first_chunk()?))
    }

    /// Where the rest starts in the file.
    fn offset(&self) -> usize {
        self.file_len - self.rest.len()
    }

    /// Decodes one value.
    fn decode<T: serde::de::DeserializeOwned>(&mut self) -> Option<T> {
        let (value, used) = bincode::serde::decode_from_slice(self.rest, config()).ok()?;
        self.take(used)?;
        Some(value)
    }

    /// Takes a section (a u64 length, then that many bytes): where it
    /// starts in the file, and its bytes.
    fn section(&mut self) -> Option<(usize, &'a [u8])> {
        let len = usize::try_from(self.u64()?).ok()?;
        let at = self.offset();
        Some((at, self.take(len)?))
    }
}

/// The `count` entries of `size` bytes at byte `offset` of `section`;
/// `None` unless they lie inside it, starting at an entry's first byte.
fn span_in(section: &Arc<Section>, (offset, count): (u64, u64), size: usize) -> Option<Span> {
    let offset = usize::try_from(offset).ok()?;
    if size == 0 || !offset.is_multiple_of(size) {
        return None;
    }
    Span::new(section, offset / size, usize::try_from(count).ok()?, size)
}

/// Loads the checkpoint of `dir` into `index`, if there is a sound one.
/// `None` when there is none or it is damaged; `index` may then hold part
/// of it, and must be dropped for a fresh one.
pub fn load(fs: &dyn Fs, dir: &Path, index: &Index) -> Option<Loaded> {
    // Mapped, not read: a large checkpoint then costs no fresh memory. The
    // file is only ever replaced by a rename, never changed in place, which
    // is the map's contract (see `mmap`).
    let map = Arc::new(fs.map(&dir.join(CHECKPOINT)).ok()?);
    let bytes = map.bytes();
    let body = bytes.strip_prefix(&MAGIC)?;
    let (version, body) = body.split_at_checked(4)?;
    let (crc, body) = body.split_at_checked(4)?;
    if version != VERSION.to_le_bytes() {
        return None;
    }
    // The body is read once: each part is checksummed right after it is
    // decoded, while its bytes are still in the cache, and its context
    // installed and its task order checked in the same pass. The checksum
    // is compared at the end; until then nothing decoded is trusted beyond
    // the decoder's own bounds. A failure anywhere leaves a half-filled
    // index, which the open drops for a fresh one and a full scan.
    let mut r = Reader {
        rest: body,
        file_len: bytes.len(),
        sum: crc32fast::Hasher::new(),
    };
    let header: Header = r.decode()?;
    // Every context's records and tasks, left where they lie: each context
    // reads its own spans of them in place until it next changes. Every
    // task must decode (records always do).
    let (recs_at, recs) = r.section()?;
    let (tasks_at, tasks) = r.section()?;
    if !all_decode::<TaskEntry>(tasks) {
        return None;
    }
    let rec_section = Section::new(map.clone(), recs_at, recs.len())?;
    let task_section = Section::new(map.clone(), tasks_at, tasks.len())?;
    let count = r.u64()?;
    let mut numbers = Vec::with_capacity(usize::try_from(count).ok()?.min(1 << 20));
    for _ in 0..count {
        let (version, digest, mut state, (rec_span, task_span)): Entry = r.decode()?;
        state.map_entries(
            span_in(&rec_section, rec_span, RECORD_BYTES)?,
            span_in(&task_section, task_span, TASK_BYTES)?,
        );
        let key = ContextKey::from_parts(version, digest);
        state.set_prefix(task_prefix(&key));
        state.check_order();
        // The slot first: the task map refers to it by its number.
        let slot = index.get_or_insert(&key);
        numbers.push(slot.number);
        if let Some(meta) = &state.meta {
            if state.gone.is_none() {
                index.list_in_tenant(meta.tenant(), meta.first_ms, &slot);
                index.enter_tasks(meta.tenant(), slot.number, &state);
            }
        }
        *slot.state.write() = state;
    }
    // The messageId map, shard by shard, read in place: each run is checked
    // (see `check_run`) and left where it lies.
    let numbers: Numbers = numbers.into();
    let mut runs = Vec::with_capacity(SHARDS);
    for shard in 0..SHARDS {
        let n = usize::try_from(r.u64()?).ok()?;
        let start = r.offset();
        let run = r.take(n.checked_mul(ENTRY_BYTES)?)?;
        let in_shard = |key: &_| Index::idem_shard_of(key) == shard;
        if !check_run(run, numbers.len(), in_shard) {
            return None;
        }
        runs.push(IdemRun::in_map(&map, start, n, numbers.clone())?);
    }
    if !r.rest.is_empty() || crc != r.sum.finalize().to_le_bytes() {
        return None;
    }
    index.idem_rebase(runs);
    let (generation, segment, offset) = header.resume;
    Some(Loaded {
        resume: Resume {
            store: crate::log::frame::StoreId(header.store),
            generation,
            segment,
            offset,
        },
        records: header.records,
    })
}

/// Where the checkpoint of `dir` says the log reached, if it is sound,
/// without loading it (for `verify`).
pub fn peek(fs: &dyn Fs, dir: &Path) -> Option<Resume> {
    let bytes = fs.read(&dir.join(CHECKPOINT)).ok()?;
    let body = bytes.strip_prefix(&MAGIC)?;
    let (version, body) = body.split_at_checked(4)?;
    let (crc, body) = body.split_at_checked(4)?;
    if version != VERSION.to_le_bytes() || crc != crc32fast::hash(body).to_le_bytes() {
        return None;
    }
    let (header, _): (Header, usize) = bincode::serde::decode_from_slice(body, config()).ok()?;
    let (generation, segment, offset) = header.resume;
    Some(Resume {
        store: crate::log::frame::StoreId(header.store),
        generation,
        segment,
        offset,
    })
}

/// Appends a section (its length as a u64, then `bytes`): where its bytes
/// start in the file, and their length.
fn put_section(file: &mut Vec<u8>, bytes: Vec<u8>) -> (usize, usize) {
    file.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    let at = file.len();
    file.extend_from_slice(&bytes);
    (at, bytes.len())
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::fs::MemFs;
    use crate::options::{Durability, Options};
    use crate::store::Store;

    /// Receives message `id` into context `c{id % 7}`.
    fn receive(store: &Store, id: usize) -> crate::Receipt {
        let msg = format!(
            r#"{{"messageId":"m{id}","role":"ROLE_USER","contextId":"c{}","parts":[{{"text":"hi"}}]}}"#,
            id % 7
        );
        store.receive_message("t", msg.as_bytes()).unwrap()
    }

    /// Options for a store on a fresh in-memory disk that writes
    /// checkpoints only when told to.
    fn options() -> Options {
        Options::default()
            .durability(Durability::Buffered)
            .checkpoint_interval(None)
            .fs(Arc::new(MemFs::new()))
    }

    #[test]
    fn context_names_keep_the_checkpoint_form_of_two_strings() {
        use crate::index::ContextMeta;
        for (tenant, id) in [("acme", "ctx-\u{e9}"), ("", "c"), ("t", "")] {
            let meta = ContextMeta::new(tenant, id, 42);
            assert_eq!((meta.tenant(), meta.context_id()), (tenant, id));
            let mut bytes = Vec::new();
            encode(&meta, &mut bytes).unwrap();
            let mut want = Vec::new();
            encode(&(tenant.to_string(), id.to_string(), 42u64), &mut want).unwrap();
            assert_eq!(bytes, want);
            let (back, used): (ContextMeta, usize) =
                bincode::serde::decode_from_slice(&bytes, config()).unwrap();
            assert_eq!((back, used), (meta, bytes.len()));
        }
    }

    #[test]
    fn a_written_checkpoint_takes_the_message_ids_it_holds_off_the_heap() {
        let store = Store::open(Path::new("/s"), options()).unwrap();
        for id in 0..100 {
            receive(&store, id);
        }
        assert_eq!(store.index.idem_in_front(), 100);
        store.write_checkpoint().unwrap();
        // The index now reads all of them from the file, under the numbers
        // its contexts have here (not their places in the file): a resend
        // finds its first receipt, a new message goes in front.
        assert_eq!(store.index.idem_in_front(), 0);
        receive(&store, 100);
        for id in [0, 55, 99, 100] {
            let again = receive(&store, id);
            assert!(again.duplicate && again.context_id == format!("c{}", id % 7));
        }
        assert_eq!(store.index.idem_in_front(), 1);
    }

    /// Every context's history (raw messages) and tasks (as JSON).
    fn contents(store: &Store) -> Vec<(Vec<Vec<u8>>, String)> {
        (0..7)
            .map(|c| {
                let context = format!("c{c}");
                let raws = store.last_messages("t", &context, 100).unwrap();
                let query = crate::ListTasksQuery {
                    context_id: Some(context),
                    history_length: Some(100),
                    ..Default::default()
                };
                let tasks = store.list_tasks("t", &query).unwrap().tasks;
                (
                    raws.into_iter().map(|m| m.raw).collect(),
                    serde_json::to_string(&tasks).unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn contexts_read_in_place_move_to_each_new_checkpoint_unchanged() {
        let options = options();
        let dir = Path::new("/s");
        let store = Store::open(dir, options.clone()).unwrap();
        for id in 0..70 {
            receive(&store, id);
        }
        let want = contents(&store);
        store.close().unwrap();
        let store = Store::open(dir, options.clone()).unwrap();
        let mapped = |store: &Store, c: usize| {
            let key = ContextKey::derive("t", &format!("c{c}")).unwrap();
            store.index.get(&key).unwrap().state.read().is_mapped()
        };
        assert!((0..7).all(|c| mapped(&store, c) == (true, true)));
        assert_eq!(contents(&store), want);
        // One context changes; the next checkpoint moves the six others, still
        // read in place, onto the new file, where they read the same.
        let mut want = want;
        receive(&store, 70);
        want[0] = contents(&store).swap_remove(0);
        assert_eq!(mapped(&store, 0), (false, false));
        store.write_checkpoint().unwrap();
        assert!((1..7).all(|c| mapped(&store, c) == (true, true)));
        assert_eq!(contents(&store), want);
        // And once more, from a file that was itself written while running.
        receive(&store, 77);
        want[0] = contents(&store).swap_remove(0);
        store.write_checkpoint().unwrap();
        assert_eq!(contents(&store), want);
        // A compaction moves every record (copying them to the heap) and
        // ends with a checkpoint that takes over the tasks still in place.
        store.compact().unwrap();
        assert!((1..7).all(|c| mapped(&store, c) == (false, true)));
        assert_eq!(contents(&store), want);
        store.close().unwrap();
        let store = Store::open(dir, options).unwrap();
        assert_eq!(contents(&store), want);
    }
}
