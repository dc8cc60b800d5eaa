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

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::index::checkpoint_config as config;
use crate::index::context::RECORD_BYTES;
use crate::index::entries::{all_decode, Section, Span};
use crate::index::idem_run::{put_entry, IdemRun, Numbers, ENTRY_BYTES};
use crate::index::tasks::{TaskEntry, TASK_BYTES};
use crate::index::{listed, task_prefix, ContextSlot, ContextState, Index, Listed, SHARDS};
use crate::log::record::{take, take_u64};
use crate::log::recovery::Resume;
use crate::namespace::ContextKey;

pub use crate::log::recovery::CHECKPOINT;
const MAGIC: [u8; 8] = *b"CTXLCKP\0";
const VERSION: u32 = 12;
/// The version before the `hidden` flag of a record entry (DESIGN.md §2):
/// read as this one (it has no such flag), never written. A build that
/// knows only it ignores a version 12 checkpoint and reads the log.
const UNHIDDEN_VERSION: u32 = 11;
/// The bytes before the body: magic, version, checksum.
const PREAMBLE: usize = 16;

#[derive(Serialize, Deserialize)]
struct Header {
    /// The store that wrote it.
    store: [u8; 16],
    resume: (u64, u64, u64),
    records: u64,
    /// For each shard of the key map: its contexts' entries (bytes,
    /// count), and their records' and tasks' bytes. Each section lies shard
    /// after shard, so an open loads shards on several threads, each
    /// checksumming and decoding a shard's bytes in turn.
    shards: Vec<ShardSizes>,
}

/// One shard's part of a checkpoint: its entries' bytes, its contexts, its
/// records' bytes, its tasks' bytes.
type ShardSizes = (u64, u64, u64, u64);

impl Header {
    /// What it says of where the log must still be read from.
    fn loaded(&self) -> Loaded {
        let (generation, segment, offset) = self.resume;
        Loaded {
            resume: Resume {
                store: crate::log::frame::StoreId(self.store),
                generation,
                segment,
                offset,
            },
            records: self.records,
        }
    }
}

/// One context: its key (version, digest), its index entry, and where its
/// records and its tasks are in their sections (byte offset, count). The messageId
/// entries that follow are `idem_run`'s, shard by shard of the index's
/// messageId map.
type Entry = (u8, [u8; 32], ContextState, ((u64, u64), (u64, u64)));

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
        if self.count_appended(appended) {
            self.write_due_checkpoint();
        }
    }

    /// Counts `appended` bytes towards the next checkpoint; whether one is
    /// due.
    pub(crate) fn count_appended(&self, appended: u64) -> bool {
        use std::sync::atomic::Ordering;
        let Some(interval) = self.options.checkpoint_interval else {
            return false;
        };
        let since = self.since_checkpoint.fetch_add(appended, Ordering::AcqRel) + appended;
        since >= interval.max(self.checkpoint_size.load(Ordering::Acquire))
    }

    /// Writes the periodic checkpoint if one is due (see
    /// [`maybe_checkpoint`](Self::maybe_checkpoint)).
    pub(crate) fn write_due_checkpoint(&self) {
        use std::sync::atomic::Ordering;
        if !self.count_appended(0) || self.checkpointing.swap(true, Ordering::AcqRel) {
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
        if self.options.durability == crate::options::Durability::Buffered {
            self.writer.sync_all()?;
        }
        // Shard by shard of the key map, in each in the order it holds them.
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
        // Sized once (appends meanwhile may add a few): a vector that
        // doubled its way there would hold up to twice the index.
        let (n_recs, n_tasks) = slots.iter().fold((0, 0), |(r, t), slot| {
            let state = slot.state.read();
            (r + state.record_count(), t + state.task_count())
        });
        let mut recs = Vec::with_capacity(n_recs * RECORD_BYTES);
        let mut tasks = Vec::with_capacity(n_tasks * TASK_BYTES);
        let mut entries = Vec::new();
        let mut spans = Vec::with_capacity(slots.len());
        let mut shards: Vec<ShardSizes> = vec![(0, 0, 0, 0); SHARDS];
        for (i, slot) in slots.iter().enumerate() {
            super::compact::breathe(i);
            let before = (entries.len(), recs.len(), tasks.len());
            let key = &slot.key;
            let state = slot.state.read();
            let span = (
                (recs.len() as u64, state.record_count() as u64),
                (tasks.len() as u64, state.task_count() as u64),
            );
            state.put_entries(&mut recs, &mut tasks);
            encode(&(key.version(), *key.digest(), &*state, span), &mut entries)?;
            spans.push(span);
            if let Some(shard) = shards.get_mut(slot.number as usize % SHARDS) {
                shard.0 += (entries.len() - before.0) as u64;
                shard.1 += 1;
                shard.2 += (recs.len() - before.1) as u64;
                shard.3 += (tasks.len() - before.2) as u64;
            }
            if let Some(p) = place.get_mut(slot.number as usize) {
                // Fits: the index numbers its contexts in a u32.
                *p = i as u32;
            }
        }
        let header = Header {
            store: self.writer.store().0,
            resume: (generation, segment, offset),
            records: self.records(),
            shards,
        };
        let mut head = MAGIC.to_vec();
        head.extend_from_slice(&VERSION.to_le_bytes());
        head.extend_from_slice(&[0; 4]);
        encode(&header, &mut head)?;
        // The file is written part by part, never joined in memory (that
        // copy, and the vector growing to hold it, were up to three times
        // the index at once). Where each part starts:
        let recs_len = (recs.len() as u64).to_le_bytes();
        let recs_at = (head.len() + 8, recs.len());
        let tasks_len = (tasks.len() as u64).to_le_bytes();
        let tasks_at = (recs_at.0 + recs.len() + 8, tasks.len());
        let count = (slots.len() as u64).to_le_bytes();
        let idem_at = tasks_at.0 + tasks.len() + 8 + entries.len();
        // Each shard's run, and where it lies in the file.
        let mut idem = Vec::new();
        let mut runs = Vec::with_capacity(SHARDS);
        for shard in self.index.idem_shards() {
            let shard_entries: Vec<_> = shard
                .into_iter()
                .filter_map(|(key, at)| {
                    let &p = place.get(at.context as usize).filter(|&&p| p != u32::MAX)?;
                    Some((key, p, at.seq))
                })
                .collect();
            idem.extend_from_slice(&(shard_entries.len() as u64).to_le_bytes());
            runs.push((idem_at + idem.len(), shard_entries.len()));
            for (key, p, seq) in shard_entries {
                put_entry(&mut idem, &key, p, seq);
            }
        }
        // After the head, in order; the CRC (in the head) covers the rest.
        let body: [&[u8]; 7] = [
            &recs_len, &recs, &tasks_len, &tasks, &count, &entries, &idem,
        ];
        let mut crc = crc32fast::Hasher::new();
        crc.update(head.get(PREAMBLE..).unwrap_or_default());
        body.iter().for_each(|part| crc.update(part));
        if let Some(at) = head.get_mut(PREAMBLE - 4..PREAMBLE) {
            at.copy_from_slice(&crc.finalize().to_le_bytes());
        }
        let mut parts = vec![&head[..]];
        parts.extend(body);
        let file_len: usize = parts.iter().map(|p| p.len()).sum();
        let (fs, dir) = (self.writer.fs(), self.writer.dir());
        let tmp = dir.join("CHECKPOINT.tmp");
        fs.write_file_parts(&tmp, &parts)
            .map_err(|e| Error::io("write the checkpoint", &tmp, e))?;
        drop((recs, tasks, entries, idem));
        // Mapped before the rename, so the map is of the file just written;
        // it is used only once the rename has made that file the
        // checkpoint, which is then never changed in place.
        let map = fs.map(&tmp).ok().map(Arc::new);
        fs.rename(&tmp, &dir.join(CHECKPOINT))
            .map_err(|e| Error::io("switch to the new checkpoint", &tmp, e))?;
        // The next is due after at least this one's size of log, so
        // checkpoints never write more than the log does.
        self.checkpoint_size
            .store(file_len as u64, std::sync::atomic::Ordering::Release);
        if let Some(map) = map.filter(|m| m.bytes().len() == file_len) {
            // The index now reads from the new file what it read from the
            // one before (unlinked by the rename), which is then let go:
            // the messageIds, and the records and tasks that have not changed
            // since that one was loaded.
            let numbers: Numbers = numbers.into();
            let runs = runs.into_iter().enumerate().map(|(shard, (start, count))| {
                IdemRun::in_map(&map, start, count, numbers.clone(), shard)
            });
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

/// Reads a checkpoint's body front to back.
struct Reader<'a> {
    rest: &'a [u8],
    /// The whole file's length: where the rest starts is its offset.
    file_len: usize,
}

impl<'a> Reader<'a> {
    /// Takes `n` bytes.
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        take(&mut self.rest, n)
    }

    fn u64(&mut self) -> Option<u64> {
        take_u64(&mut self.rest)
    }

    /// Where the rest starts in the file.
    fn offset(&self) -> usize {
        self.file_len - self.rest.len()
    }

    /// Decodes the header.
    fn header(&mut self) -> Option<Header> {
        decode_from(&mut self.rest)
    }

    /// Takes a section (a u64 length, then that many bytes): where it
    /// starts in the file, and its bytes.
    fn section(&mut self) -> Option<(usize, &'a [u8])> {
        let len = usize::try_from(self.u64()?).ok()?;
        let at = self.offset();
        Some((at, self.take(len)?))
    }
}

/// Decodes one value from the front of `bytes`, which it advances.
fn decode_from<T: serde::de::DeserializeOwned>(bytes: &mut &[u8]) -> Option<T> {
    let (value, used) = bincode::serde::decode_from_slice(bytes, config()).ok()?;
    take(bytes, used)?;
    Some(value)
}

/// Decodes one context's [`Entry`] from the front of `bytes`, which it
/// advances: the same bytes `bincode` reads, by hand, as an open decodes
/// one per context and the generic decoder takes a digest byte by byte.
fn decode_entry(bytes: &mut &[u8]) -> Option<Entry> {
    let version = *take(bytes, 1)?.first()?;
    let digest = *take(bytes, 32)?.first_chunk()?;
    let state = ContextState::decode_checkpoint(bytes, decode_from)?;
    let mut n = || take_u64(bytes);
    let spans = ((n()?, n()?), (n()?, n()?));
    Some((version, digest, state, spans))
}

/// A body shorter than this is loaded on one thread: more are not worth
/// starting.
const PARALLEL_FROM: usize = 1 << 20;

/// At most this many threads load a checkpoint.
const MAX_LOAD_THREADS: usize = 4;

/// The `count` entries of `size` bytes at byte `offset` of `section`;
/// `None` unless they lie inside it, starting at an entry's first byte.
fn span_in(section: &Arc<Section>, (offset, count): (u64, u64), size: usize) -> Option<Span> {
    let offset = usize::try_from(offset).ok()?;
    if size == 0 || !offset.is_multiple_of(size) {
        return None;
    }
    Span::new(section, offset / size, usize::try_from(count).ok()?, size)
}

/// Loads the checkpoint of `dir` into `index`, if there is a sound one:
/// what it says. `None` when there is none or it is damaged; `index` may
/// then hold part of it, and must be dropped for a fresh one.
///
/// A large checkpoint is loaded on several threads (up to the machine's
/// cores, at most [`MAX_LOAD_THREADS`]), each taking the next shard of the
/// key map not yet taken. Shard by shard, a thread checksums the shard's
/// part of every section and then decodes it while its bytes are in the
/// cache: its contexts (in the order the shard held them, so that each gets
/// the same place in its shard) and their tasks (its messageId run and the
/// contexts' task orders are checked on first use, see `IdemRun` and
/// `ContextState::order_sound`). What needs every context in place (the
/// task map) is done after, on one thread, and the parts' checksums are
/// joined in file order; the tenants' listings are handed over as the
/// threads gathered them, to be built on first use. `beside` runs on the
/// calling thread while the others load, if the file is a checkpoint of
/// this version (an open looks at the directory then).
pub fn load(fs: &dyn Fs, dir: &Path, index: &Index, beside: impl FnOnce()) -> Option<Loaded> {
    load_on(fs, dir, index, None, beside)
}

/// A checkpoint's checksum and body (after its magic, version and
/// checksum), if it is of a version this build reads.
fn split(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let body = bytes.strip_prefix(&MAGIC)?;
    let (version, body) = body.split_at_checked(4)?;
    let (crc, body) = body.split_at_checked(4)?;
    let readable = [VERSION, UNHIDDEN_VERSION].map(u32::to_le_bytes);
    readable
        .contains(&version.try_into().ok()?)
        .then_some((crc, body))
}

/// [`load`] on `threads` threads (`None`: as many as it picks), `beside`
/// run on the calling thread once the others have started.
fn load_on(
    fs: &dyn Fs,
    dir: &Path,
    index: &Index,
    threads: Option<usize>,
    beside: impl FnOnce(),
) -> Option<Loaded> {
    // Mapped, not read: a large checkpoint then costs no fresh memory.
    // The file is only ever replaced by a rename, never changed in
    // place, which is the map's contract (see `mmap`).
    let map = &Arc::new(fs.map(&dir.join(CHECKPOINT)).ok()?);
    let bytes = map.bytes();
    let (crc, body) = split(bytes)?;
    // Until the checksum is compared, at the end, nothing decoded is
    // trusted beyond the decoder's own bounds.
    let plan = Plan::read(body, bytes.len(), map)?;
    let threads = threads.unwrap_or(if body.len() < PARALLEL_FROM {
        1
    } else {
        std::thread::available_parallelism()
            .map_or(1, usize::from)
            .clamp(1, MAX_LOAD_THREADS)
    });
    // Each thread takes the next shard not yet taken until none is left,
    // so one that starts late (a spawned thread, with a fresh heap arena)
    // or runs slow takes fewer.
    let next = &AtomicUsize::new(0);
    let done: Vec<Option<Done>> = std::thread::scope(|s| {
        let others: Vec<_> = (1..threads)
            .map(|_| s.spawn(|| load_shards(&plan, index, next)))
            .collect();
        beside();
        let mut done = vec![load_shards(&plan, index, next)];
        // A thread that panicked (nothing in a load is expected to) fails
        // the load.
        done.extend(others.into_iter().map(|h| h.join().ok().flatten()));
        done
    });
    let mut shards: Vec<Option<ShardDone>> = vec![None; SHARDS];
    let mut lists: HashMap<String, Vec<Vec<Listed>>> = HashMap::new();
    for done in done {
        let done = done?;
        for (shard, shard_done) in done.shards {
            *shards.get_mut(shard)? = Some(shard_done);
        }
        for (tenant, entries) in done.lists {
            lists.entry(tenant).or_default().push(entries);
        }
    }
    // Shard by shard: the checksums in file order, the contexts with tasks
    // in place order.
    let (sums, with_tasks): (Vec<ShardSums>, Vec<_>) = shards
        .into_iter()
        .collect::<Option<Vec<_>>>()?
        .into_iter()
        .unzip();
    let with_tasks = with_tasks.into_iter().flatten();
    if crc != plan.checksum(&sums).to_le_bytes() {
        return None;
    }
    for (tenant, entries) in lists {
        index.list_many_in_tenant(&tenant, entries);
    }
    // The task map, once every context is in: whether a task's id leads to
    // its context by its prefix depends on which context holds that prefix
    // first.
    for slot in with_tasks {
        let state = slot.state.read();
        if let Some(meta) = &state.meta {
            index.enter_tasks(meta.tenant(), slot.number, &state);
        }
    }
    let numbers: Numbers = plan.numbers.into_inner().into();
    let runs = plan
        .shards
        .iter()
        .enumerate()
        .map(|(shard, p)| {
            let entries = p.run.len().saturating_sub(8) / ENTRY_BYTES;
            IdemRun::in_map(map, p.run_at, entries, numbers.clone(), shard)
        })
        .collect::<Option<Vec<_>>>()?;
    index.idem_rebase(runs);
    Some(plan.header.loaded())
}

/// A checkpoint's body cut into its parts, before any context is decoded.
struct Plan<'a> {
    header: Header,
    map: Arc<crate::fs::Mapped>,
    /// Where the records and the tasks lie in the file: start, length.
    records: (usize, usize),
    tasks: (usize, usize),
    /// Each shard's parts.
    shards: Vec<ShardParts<'a>>,
    /// The bytes around the parts, in file order: before the records (the
    /// header, the records' length), before the tasks (their length),
    /// before the entries (their count).
    glue: [&'a [u8]; 3],
    /// Each context's number in the index, by its place among the entries;
    /// each shard's thread fills the shard's places.
    numbers: parking_lot::Mutex<Vec<u32>>,
    /// The place of each shard's first context among the entries.
    first_places: Vec<usize>,
}

/// One shard's part of each section of a checkpoint.
struct ShardParts<'a> {
    records: &'a [u8],
    tasks: &'a [u8],
    entries: &'a [u8],
    /// How many contexts its entries hold.
    contexts: usize,
    /// Its messageId run, after its count (8 bytes), both here.
    run: &'a [u8],
    /// Where the run starts in the file.
    run_at: usize,
}

/// The checksums of one shard's parts: records, tasks, entries, run.
type ShardSums = [crc32fast::Hasher; 4];

impl<'a> Plan<'a> {
    fn read(body: &'a [u8], file_len: usize, map: &Arc<crate::fs::Mapped>) -> Option<Self> {
        let mut r = Reader {
            rest: body,
            file_len,
        };
        let header = r.header()?;
        if header.shards.len() != SHARDS {
            return None;
        }
        // Every context's records and tasks, left where they lie: each
        // context reads its own spans of them in place until it next
        // changes. Every task must decode (records always do).
        let glue0 = body.get(..body.len() - r.rest.len() + 8)?;
        let (recs_at, recs) = r.section()?;
        let glue1 = r.rest.get(..8)?;
        let (tasks_at, tasks) = r.section()?;
        let glue2 = r.rest.get(..8)?;
        let contexts = usize::try_from(r.u64()?).ok()?;
        let (mut recs_rest, mut tasks_rest) = (recs, tasks);
        let mut shards = Vec::with_capacity(SHARDS);
        for &(entries, count, rec_bytes, task_bytes) in &header.shards {
            let (records, rest) = recs_rest.split_at_checked(usize::try_from(rec_bytes).ok()?)?;
            recs_rest = rest;
            let (task_part, rest) =
                tasks_rest.split_at_checked(usize::try_from(task_bytes).ok()?)?;
            tasks_rest = rest;
            shards.push(ShardParts {
                records,
                tasks: task_part,
                entries: r.take(usize::try_from(entries).ok()?)?,
                contexts: usize::try_from(count).ok()?,
                run: &[],
                run_at: 0,
            });
        }
        let mut first_places = Vec::with_capacity(SHARDS);
        let mut total = 0usize;
        for shard in &shards {
            first_places.push(total);
            total = total.checked_add(shard.contexts)?;
        }
        if !recs_rest.is_empty() || !tasks_rest.is_empty() || total != contexts {
            return None;
        }
        for shard in &mut shards {
            let whole = r.rest;
            let n = usize::try_from(r.u64()?).ok()?;
            let len = n.checked_mul(ENTRY_BYTES)?;
            shard.run_at = r.offset();
            r.take(len)?;
            shard.run = whole.get(..8 + len)?;
        }
        if !r.rest.is_empty() {
            return None;
        }
        Some(Plan {
            header,
            map: map.clone(),
            records: (recs_at, recs.len()),
            tasks: (tasks_at, tasks.len()),
            shards,
            glue: [glue0, glue1, glue2],
            numbers: parking_lot::Mutex::new(vec![u32::MAX; contexts]),
            first_places,
        })
    }

    /// The checksum of the whole body, from its parts' (`sums`, shard by
    /// shard) and the bytes around them.
    fn checksum(&self, sums: &[ShardSums]) -> u32 {
        let of = |bytes: &[u8]| {
            let mut sum = crc32fast::Hasher::new();
            sum.update(bytes);
            sum
        };
        let [glue0, glue1, glue2] = self.glue;
        let mut all = of(glue0);
        for (part, glue) in [(0, Some(glue1)), (1, Some(glue2)), (2, None), (3, None)] {
            for sum in sums.iter().filter_map(|s| s.get(part)) {
                all.combine(sum);
            }
            if let Some(glue) = glue {
                all.combine(&of(glue));
            }
        }
        all.finalize()
    }
}

/// What one thread of a load hands back.
struct Done {
    /// Each shard it took, by number.
    shards: Vec<(usize, ShardDone)>,
    /// Its contexts in their tenants' listings.
    lists: HashMap<String, Vec<Listed>>,
}

/// What a load found of one shard: its parts' checksums, and its visible
/// contexts that may have tasks to enter in the task map, in place order.
type ShardDone = (ShardSums, Vec<Arc<ContextSlot>>);

/// One thread's part of a load: the next shard not yet taken (`next`),
/// checksummed and then installed, until none is left.
fn load_shards(plan: &Plan, index: &Index, next: &AtomicUsize) -> Option<Done> {
    // The thread's own handles on the sections: every context's spans hold
    // one, and a count shared by threads that bump it once per context
    // would bounce between their caches.
    let section = |(start, len)| Section::new(plan.map.clone(), start, len);
    let (records, tasks) = (section(plan.records)?, section(plan.tasks)?);
    let mut done = Done {
        shards: Vec::new(),
        lists: HashMap::new(),
    };
    let mut numbers = Vec::new();
    loop {
        let shard = next.fetch_add(1, Ordering::Relaxed);
        let Some(parts) = plan.shards.get(shard) else {
            break;
        };
        // Checksummed first, then read while in the cache.
        let sums = [parts.records, parts.tasks, parts.entries, parts.run].map(|bytes| {
            let mut sum = crc32fast::Hasher::new();
            sum.update(bytes);
            sum
        });
        if !all_decode::<TaskEntry>(parts.tasks) {
            return None;
        }
        let mut bytes = parts.entries;
        // No more than the bytes could hold: the count is not yet vouched
        // for.
        index.reserve(shard, parts.contexts.min(bytes.len()));
        numbers.clear();
        let mut with_tasks = Vec::new();
        for _ in 0..parts.contexts {
            let (version, digest, mut state, (rec_span, task_span)) = decode_entry(&mut bytes)?;
            let key = ContextKey::from_parts(version, digest);
            if Index::shard_of(&key) != shard {
                return None;
            }
            state.map_entries(
                span_in(&records, rec_span, RECORD_BYTES)?,
                span_in(&tasks, task_span, TASK_BYTES)?,
            );
            // (Its task order is checked on its first use: see
            // `ContextState::order_sound`.)
            state.set_prefix(task_prefix(&key));
            let slot = index.insert_loaded(&key, state);
            numbers.push(slot.number);
            let state = slot.state.read();
            if let Some(meta) = state.meta.as_ref().filter(|_| state.gone.is_none()) {
                let entry = listed(meta.first_ms, &slot);
                match done.lists.get_mut(meta.tenant()) {
                    Some(list) => list.push(entry),
                    None => {
                        done.lists.insert(meta.tenant().to_string(), vec![entry]);
                    }
                }
                // Which context holds its own prefix first is known here (a
                // prefix's contexts are all of one shard); the rest waits
                // for every context.
                if index.has_mapped_tasks(slot.number, &state) {
                    with_tasks.push(slot.clone());
                }
            }
        }
        // (Its messageId run is checked on its first use: see `IdemRun`.)
        if !bytes.is_empty() {
            return None;
        }
        done.shards.push((shard, (sums, with_tasks)));
        let first = *plan.first_places.get(shard)?;
        plan.numbers
            .lock()
            .get_mut(first..)?
            .get_mut(..numbers.len())?
            .copy_from_slice(&numbers);
    }
    Some(done)
}

/// Where the checkpoint of `dir` says the log reached, if it is sound,
/// without loading it (for `verify`).
pub fn peek(fs: &dyn Fs, dir: &Path) -> Option<Resume> {
    let bytes = fs.read(&dir.join(CHECKPOINT)).ok()?;
    let (crc, body) = split(&bytes)?;
    if crc != crc32fast::hash(body).to_le_bytes() {
        return None;
    }
    let mut r = Reader {
        rest: body,
        file_len: bytes.len(),
    };
    Some(r.header()?.loaded().resume)
}

/// Appends a section (its length as a u64, then `bytes`): where its bytes
/// start in the file, and their length.
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
    fn receive(store: &Store, id: usize) -> crate::store::Receipt {
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
                let query = crate::store::ListTasksQuery {
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

    /// A store on a fresh in-memory disk holding every kind of context a
    /// checkpoint keeps: several tenants, received messages, contexts with
    /// few and with many tasks (which keep a task order), artifacts, and a
    /// deleted context; closed, so its checkpoint is written.
    fn varied_store(dir: &Path) -> Options {
        let options = options();
        let store = Store::open(dir, options.clone()).unwrap();
        for id in 0..300 {
            let tenant = ["t", "u", "w"][id % 3];
            let msg = format!(
                r#"{{"messageId":"m{id}","role":"ROLE_USER","contextId":"c{}","parts":[{{"text":"hi"}}]}}"#,
                id % 11
            );
            let receipt = store.receive_message(tenant, msg.as_bytes()).unwrap();
            if id % 5 == 0 {
                let artifact = format!(
                    r#"{{"artifactUpdate":{{"taskId":"{}","contextId":"c{}","artifact":{{"artifactId":"a{id}","parts":[{{"text":"x"}}]}}}}}}"#,
                    receipt.task_id,
                    id % 11
                );
                store.apply_event(tenant, artifact.as_bytes()).unwrap();
            }
        }
        // Tasks past the scan limit and no artifact.
        for id in 0..20 {
            let msg = format!(
                r#"{{"messageId":"n{id}","role":"ROLE_USER","contextId":"many","parts":[{{"text":"hi"}}]}}"#
            );
            store.receive_message("w", msg.as_bytes()).unwrap();
        }
        store.append_message("t", "raw", b"{}").unwrap();
        store.delete_context("u", "c4").unwrap();
        store.close().unwrap();
        options
    }

    /// What an index holds, in a form to compare: each context's number,
    /// key and entry, each tenant's listing, every messageId, and the task
    /// map's answer for every task.
    fn holdings(index: &Index) -> Vec<String> {
        let mut slots = index.all_slots();
        slots.sort_by_key(|s| s.number);
        let mut out = Vec::new();
        for slot in &slots {
            let state = slot.state.read();
            let (mut recs, mut tasks, mut entry) = (Vec::new(), Vec::new(), Vec::new());
            state.put_entries(&mut recs, &mut tasks);
            encode(&*state, &mut entry).unwrap();
            out.push(format!(
                "{} {:?} {entry:?} {recs:?} {tasks:?}",
                slot.number, slot.key
            ));
            if let Some(meta) = &state.meta {
                for task in state.tasks() {
                    let key = crate::namespace::task_key(meta.tenant(), &task.id().to_string());
                    let found = index.task_context(&key).map(|s| s.number);
                    out.push(format!("task {} {found:?}", task.id()));
                }
            }
        }
        for tenant in ["t", "u", "w"] {
            let page = index.tenant_page(tenant, None, usize::MAX);
            let page: Vec<_> = page.iter().map(|(ms, s)| (ms, s.number)).collect();
            out.push(format!("{tenant} {page:?}"));
        }
        out.push(format!("{:?}", index.idem_shards()));
        out
    }

    #[test]
    fn a_checkpoint_loads_the_same_on_any_number_of_threads() {
        let dir = Path::new("/s");
        let options = varied_store(dir);
        let fs = options.fs.as_ref();
        let one = Index::default();
        assert!(load_on(fs, dir, &one, Some(1), || ()).is_some());
        let want = holdings(&one);
        // Contexts, a tenant's listing, tasks (some past the scan limit,
        // some with artifacts), messageIds.
        assert!(one.all_slots().len() >= 12 && want.len() > 300);
        for threads in [2, 3, 5, 64, 65] {
            let index = Index::default();
            assert!(load_on(fs, dir, &index, Some(threads), || ()).is_some());
            assert_eq!(holdings(&index), want, "{threads} threads");
        }
    }

    #[test]
    fn any_damaged_byte_refuses_the_checkpoint_on_any_number_of_threads() {
        let dir = Path::new("/s");
        let options = varied_store(dir);
        let fs = options.fs.as_ref();
        let path = dir.join(CHECKPOINT);
        let good = fs.read(&path).unwrap();
        for at in (0..good.len()).step_by(7).chain([good.len() - 1]) {
            let mut bad = good.clone();
            bad[at] ^= 0x5a;
            fs.write_file(&path, &bad).unwrap();
            for threads in [1, 3] {
                let index = Index::default();
                let sound = load_on(fs, dir, &index, Some(threads), || ());
                assert!(sound.is_none(), "byte {at}");
            }
        }
        fs.write_file(&path, &good).unwrap();
        assert!(load_on(fs, dir, &Index::default(), Some(2), || ()).is_some());
    }

    #[test]
    fn an_entry_decodes_by_hand_as_bincode_decodes_it() {
        let dir = Path::new("/s");
        let options = varied_store(dir);
        let index = Index::default();
        assert!(load(options.fs.as_ref(), dir, &index, || ()).is_some());
        let mut kinds = (0, 0, 0);
        // Extras with artifacts, and with a task order alone.
        let mut extras = (0, 0);
        for slot in index.all_slots() {
            let state = slot.state.read();
            let mut bytes = Vec::new();
            let span = ((1u64, 2u64), (3u64, 4u64));
            let key = slot.key;
            encode(&(key.version(), *key.digest(), &*state, span), &mut bytes).unwrap();
            let mut rest = &bytes[..];
            let by_hand = decode_entry(&mut rest).unwrap();
            assert!(rest.is_empty());
            let (by_bincode, used): (Entry, usize) =
                bincode::serde::decode_from_slice(&bytes, config()).unwrap();
            assert_eq!(used, bytes.len());
            let (mut a, mut b) = (Vec::new(), Vec::new());
            encode(&by_hand, &mut a).unwrap();
            encode(&by_bincode, &mut b).unwrap();
            assert_eq!(a, bytes);
            assert_eq!(b, bytes);
            let artifacts = state.latest_chunks().next().is_some();
            extras.0 += usize::from(artifacts);
            extras.1 += usize::from(!artifacts && state.task_count() > 16);
            kinds.0 += usize::from(state.meta.is_none());
            kinds.1 += usize::from(state.gone.is_some());
            kinds.2 += usize::from(
                state.heap_bytes()
                    > state
                        .meta
                        .as_ref()
                        .map_or(0, |m| m.tenant().len() + m.context_id().len())
                        + 64,
            );
        }
        // Every branch of the hand decoder was taken.
        assert!(kinds.0 == 0 && kinds.1 == 1 && kinds.2 > 0, "{kinds:?}");
        assert!(extras.0 > 0 && extras.1 > 0, "{extras:?}");
        // And it refuses what does not decode, as bincode does.
        for cut in [0, 1, 33, 34, 40] {
            let slot = index.all_slots().pop().unwrap();
            let mut bytes = Vec::new();
            let key = slot.key;
            encode(
                &(
                    key.version(),
                    *key.digest(),
                    &*slot.state.read(),
                    ((0u64, 0u64), (0u64, 0u64)),
                ),
                &mut bytes,
            )
            .unwrap();
            bytes.truncate(cut);
            assert!(decode_entry(&mut &bytes[..]).is_none());
        }
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
        // The changed context's vectors, as the checkpoint wrote them, are
        // read from it too.
        assert_eq!(mapped(&store, 0), (true, true));
        // A compaction moves every record (copying them to the heap) and
        // ends with a checkpoint that takes them over again.
        store.compact().unwrap();
        assert!((0..7).all(|c| mapped(&store, c) == (true, true)));
        assert_eq!(contents(&store), want);
        store.close().unwrap();
        let store = Store::open(dir, options).unwrap();
        assert_eq!(contents(&store), want);
    }

    /// Every task of every context of the varied store, as `list_tasks`
    /// answers (artifacts included).
    fn every_task(store: &Store) -> Vec<String> {
        let mut out = Vec::new();
        for tenant in ["t", "u", "w"] {
            for c in (0..11).map(|c| format!("c{c}")).chain(["many".to_string()]) {
                let query = crate::store::ListTasksQuery {
                    context_id: Some(c),
                    include_artifacts: true,
                    ..Default::default()
                };
                out.push(match store.list_tasks(tenant, &query) {
                    Ok(page) => serde_json::to_string(&page.tasks).unwrap(),
                    Err(e) => e.to_string(),
                });
            }
        }
        out
    }

    #[test]
    fn artifacts_stay_packed_until_read_and_answer_as_a_scanned_store_does() {
        let dir = Path::new("/s");
        let options = varied_store(dir);
        // What the log alone says, read with the checkpoint set aside.
        let fs = options.fs.clone();
        let set_aside = dir.join("set-aside");
        fs.rename(&dir.join(CHECKPOINT), &set_aside).unwrap();
        let store = Store::open(dir, options.clone()).unwrap();
        assert!(!store.open_report().from_checkpoint);
        let want = every_task(&store);
        assert!(want.iter().any(|t| t.contains(r#""artifactId":"a5""#)));
        store.close().unwrap();
        fs.rename(&set_aside, &dir.join(CHECKPOINT)).unwrap();
        let packed = |store: &Store| {
            let slots = store.index.all_slots();
            let states: Vec<_> = slots
                .iter()
                .filter_map(|s| s.state.read().artifacts_packed())
                .collect();
            (states.len(), states.iter().filter(|read| **read).count())
        };
        let store = Store::open(dir, options.clone()).unwrap();
        assert!(store.open_report().from_checkpoint);
        let (with_artifacts, read) = packed(&store);
        assert!(with_artifacts > 0 && read == 0, "{with_artifacts} {read}");
        // A checkpoint written before any is read keeps their bytes.
        store.write_checkpoint().unwrap();
        store.close().unwrap();
        let store = Store::open(dir, options.clone()).unwrap();
        assert_eq!(packed(&store), (with_artifacts, 0));
        assert_eq!(every_task(&store), want);
        assert_eq!(packed(&store), (with_artifacts, with_artifacts));
        // A new artifact takes its context's off the packed bytes.
        let task = store
            .list_tasks(
                "t",
                &crate::store::ListTasksQuery {
                    context_id: Some("c0".into()),
                    ..Default::default()
                },
            )
            .unwrap()
            .tasks[0]
            .id
            .clone();
        let event = format!(
            r#"{{"artifactUpdate":{{"taskId":"{task}","contextId":"c0","artifact":{{"artifactId":"new","parts":[{{"text":"y"}}]}}}}}}"#
        );
        store.apply_event("t", event.as_bytes()).unwrap();
        assert_eq!(packed(&store).0, with_artifacts - 1);
        let want = every_task(&store);
        assert!(want.iter().any(|t| t.contains(r#""artifactId":"new""#)));
        store.close().unwrap();
        let store = Store::open(dir, options).unwrap();
        assert_eq!(every_task(&store), want);
    }
}
