//! Compaction and merges: rewrite sealed segments without the records of
//! deleted or expired contexts, each context's records of the rewritten
//! segments next to each other (a *run*), while the store keeps serving
//! reads and writes. [`Store::compact`] rewrites every sealed segment into
//! one run; maintenance (`maintain.rs`) merges a few at a time. The output
//! is streamed to its files, never held whole in memory. DESIGN.md §4 walks
//! the crash cases, §10 the choice of runs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{apply, now_ms, Shared, Store};
use crate::error::{Error, Result};
use crate::fs::SegmentFile;
use crate::index::{Gone, Life};
use crate::log::frame::{
    decode_frame, decode_header, encode_frame, encode_header, FLAG_COMPACTED, FRAME_HEADER_LEN,
    HEADER_LEN, LEGACY_HEADER_LEN,
};
use crate::log::manifest::Manifest;
use crate::log::record::{self, ContextName, RecordBody, RecordKind};
use crate::log::segments::{segment_file_name, segment_path, RecordLoc, Sealed, SegmentData};
use crate::namespace::{ContextKey, NAMESPACE_VERSION};
use crate::options::MAX_RECORD_BYTES;

/// What a compaction (or one merge) did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
#[serde(rename_all = "camelCase")]
pub struct CompactReport {
    /// Segments rewritten.
    pub input_segments: usize,
    /// Their bytes.
    pub input_bytes: u64,
    /// Segments written.
    pub output_segments: usize,
    /// Their bytes.
    pub output_bytes: u64,
    /// Records copied.
    pub records_kept: u64,
    /// Records dropped (of deleted or expired contexts).
    pub records_dropped: u64,
    /// Bytes of the records copied (payloads), to compare with `output_bytes`.
    pub live_payload_bytes: u64,
}

/// Where a compaction can be stopped to test what a crash there leaves.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CompactStep {
    /// New segments written and synced under temporary names.
    Written,
    /// New segments renamed to their final names.
    Renamed,
    /// The manifest switched to the new segments.
    Switched,
    /// Everything, including removing the old segments.
    Done,
}

/// Which segments a merge rewrites, in log order: the compacted segments
/// `from..to` of the manifest's list and, if `through` is set, every tail
/// segment up to that id (which then must follow the window: `to` is the
/// list's end). The output takes their place in the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Job {
    pub from: usize,
    pub to: usize,
    pub through: Option<u64>,
}

/// What to do with one context's records of the inputs.
enum Group {
    /// Copy them, in order.
    Copy(Vec<RecordLoc>),
    /// The context is gone: write this tombstone instead.
    Tombstone(Vec<u8>),
}

/// Bytes an output segment gathers in memory before they are written.
const CHUNK: usize = 128 << 10;
/// Bytes written to an output segment between two syncs of it: a piece of
/// the merge's disk work, which the pace may hold back until it disturbs
/// fewest appends. Each piece delays the few appends whose syncs it lands
/// on, so fewer, larger pieces move an append's p99 least; small enough
/// that an append's `fdatasync` never waits behind a long write-back.
const PIECE: u64 = 8 << 20;
/// Bytes of a merge's CPU work (inputs read while planning, records
/// copied) between two calls of its pace, which lets a thread waiting for
/// this CPU run (an appender woken by its `fdatasync` would otherwise wait
/// out the merge's time slice: about half a millisecond).
const BREATHE: u64 = 64 << 10;

/// The output segment being written.
struct Current {
    id: u64,
    file: Arc<dyn SegmentFile>,
    /// Bytes written to the file.
    flushed: u64,
    /// Bytes written since its last sync.
    unsynced: u64,
    /// Bytes after `flushed`, not yet written.
    buf: Vec<u8>,
}

/// Output segments, streamed to temporary files.
struct Output<'a> {
    shared: &'a Shared,
    dir: &'a Path,
    limit: u64,
    /// Segments written in full and synced: (id, length).
    done: Vec<(u64, u64)>,
    current: Option<Current>,
    /// Bytes written so far, for the pace.
    written: u64,
    /// Bytes framed since the pace was last called.
    unpaced: u64,
}

/// Where an output segment is written before it is renamed into place.
fn tmp_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{}.tmp", segment_file_name(id)))
}

impl Output<'_> {
    /// Makes room for a record of `len` payload bytes, before it is read:
    /// writes out the chunk gathered so far once it is full (after asking
    /// `pace`, which may sleep, and is told whether a sync follows), and
    /// starts a new segment when the record does not fit the current one.
    /// Every write, sync and wait of a merge happens here, never under the
    /// segment set's lock that [`Output::add`] runs under (a rotation
    /// waits for that lock with every appender behind it). Between chunks
    /// it calls `pace` every [`BREATHE`] bytes too. `false` when `pace`
    /// asked to stop.
    fn room(&mut self, len: u32, pace: &mut dyn FnMut(u64, bool) -> bool) -> Result<bool> {
        if let Some(c) = self.current.as_ref().filter(|c| c.buf.len() >= CHUNK) {
            let sync = c.unsynced + c.buf.len() as u64 >= PIECE;
            self.unpaced = 0;
            if !pace(self.written, sync) {
                return Ok(false);
            }
            self.flush(sync)?;
        } else if self.unpaced >= BREATHE {
            self.unpaced = 0;
            if !pace(self.written, false) {
                return Ok(false);
            }
        }
        let need = FRAME_HEADER_LEN + u64::from(len);
        let full = self.current.as_ref().is_none_or(|c| {
            let len = c.flushed + c.buf.len() as u64;
            len > HEADER_LEN && len + need > self.limit
        });
        if full {
            self.finish()?;
            let id = self.shared.writer.allocate_segment_id()?;
            let tmp = tmp_path(self.dir, id);
            let file = self
                .shared
                .writer
                .fs()
                .create_new(&tmp)
                .map_err(|e| Error::io("create a compacted segment", &tmp, e))?;
            let mut buf = Vec::with_capacity(CHUNK + need as usize);
            buf.extend_from_slice(&encode_header(
                id,
                FLAG_COMPACTED,
                self.shared.writer.store(),
                None,
            ));
            self.current = Some(Current {
                id,
                file,
                flushed: 0,
                unsynced: 0,
                buf,
            });
        }
        Ok(true)
    }

    /// Frames a record into the current segment's chunk, for which
    /// [`Output::room`] made room; no I/O.
    fn add(&mut self, payload: &[u8]) -> Result<RecordLoc> {
        let Some(c) = self.current.as_mut() else {
            // Unreachable: `room` started a segment before every record.
            return Err(Error::corrupt(0, 0, "no output segment to write to"));
        };
        let offset = c.flushed + c.buf.len() as u64;
        encode_frame(c.id, offset, offset as u32, payload, &mut c.buf);
        self.unpaced += FRAME_HEADER_LEN + payload.len() as u64;
        Ok(RecordLoc {
            segment: c.id,
            offset: offset as u32,
            len: payload.len() as u32,
        })
    }

    /// Writes what the current segment has gathered; syncs it if `sync`.
    fn flush(&mut self, sync: bool) -> Result<()> {
        let Some(c) = self.current.as_mut() else {
            return Ok(());
        };
        let tmp = tmp_path(self.dir, c.id);
        if !c.buf.is_empty() {
            c.file
                .write_at(&c.buf, c.flushed)
                .map_err(|e| Error::io("write a compacted segment", &tmp, e))?;
            c.flushed += c.buf.len() as u64;
            c.unsynced += c.buf.len() as u64;
            self.written += c.buf.len() as u64;
            c.buf.clear();
        }
        if sync && c.unsynced > 0 {
            c.file
                .sync_data()
                .map_err(|e| Error::io("write a compacted segment", &tmp, e))?;
            c.unsynced = 0;
        }
        Ok(())
    }

    /// Writes out and syncs the current segment.
    fn finish(&mut self) -> Result<()> {
        self.flush(true)?;
        if let Some(c) = self.current.take() {
            self.done.push((c.id, c.flushed));
        }
        Ok(())
    }

    /// Removes every temporary file written (a merge that stops or fails).
    fn discard(&mut self) {
        let fs = self.shared.writer.fs();
        let ids: Vec<u64> = self
            .done
            .iter()
            .map(|(id, _)| *id)
            .chain(self.current.take().map(|c| c.id))
            .collect();
        for id in ids {
            // Best effort: an open removes whatever `.tmp` is left.
            let _ = fs.remove_file(&tmp_path(self.dir, id));
        }
        self.done.clear();
    }
}

impl Store {
    /// Compacts the log: seals the active segment, rewrites every sealed
    /// segment without the records of deleted or expired contexts (each gone
    /// context keeps one tombstone that keeps its id refused), with each
    /// context's records contiguous, then switches to the new segments.
    ///
    /// The store's own maintenance (see [`Store::maintain`]) keeps the
    /// layout without this; `compact` is for an operator who wants it all
    /// done now.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// store.append_message("acme", "old", b"bye")?;
    /// store.append_message("acme", "kept", b"hello")?;
    /// store.delete_context("acme", "old")?;
    /// let report = store.compact()?;
    /// assert!(report.records_dropped >= 1);
    /// assert_eq!(store.last_messages("acme", "kept", 1)?[0].raw, b"hello");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn compact(&self) -> Result<CompactReport> {
        self.compact_with(CompactStep::Done, &mut |_, _| {})
    }

    /// [`compact`](Self::compact), reporting progress as (bytes read, bytes
    /// to read) of the segments it rewrites.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// store.append_message("acme", "case-42", b"hello")?;
    /// let mut seen = (0, 0);
    /// store.compact_with_progress(&mut |read, of| seen = (read, of))?;
    /// assert_eq!(seen.0, seen.1); // every byte read
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn compact_with_progress(
        &self,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<CompactReport> {
        self.compact_with(CompactStep::Done, progress)
    }

    /// [`compact`](Self::compact), stopped after `step` as if the process
    /// died there (for crash tests).
    #[doc(hidden)]
    pub fn compact_until(&self, step: CompactStep) -> Result<CompactReport> {
        self.compact_with(step, &mut |_, _| {})
    }

    fn compact_with(
        &self,
        step: CompactStep,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<CompactReport> {
        if self.options.read_only {
            return Err(Error::ReadOnly);
        }
        let _merging = self.merging.lock();
        let active = self.writer.rotate_now()?;
        let job = Job {
            from: 0,
            to: self.manifest.lock().compacted.len(),
            through: active.checked_sub(1),
        };
        let report = self.merge(&job, step, progress, &mut |_, _| true)?;
        // Unreachable `None`: the pace above never stops it.
        Ok(report.unwrap_or_default())
    }
}

impl Shared {
    /// Runs merge `job` (the caller holds `merging`), stopping after `step`
    /// as if the process died there. `pace` is told the bytes written so
    /// far after each chunk, and may sleep; when it returns `false` the
    /// merge stops, removes what it wrote and returns `None`.
    pub(crate) fn merge(
        &self,
        job: &Job,
        step: CompactStep,
        progress: &mut dyn FnMut(usize, usize),
        pace: &mut dyn FnMut(u64, bool) -> bool,
    ) -> Result<Option<CompactReport>> {
        if self.options.read_only {
            return Err(Error::ReadOnly);
        }
        let (inputs, generation) = {
            let manifest = self.manifest.lock();
            (
                inputs_of(&manifest, job, &self.segments.ids())?,
                manifest.generation + 1,
            )
        };
        let _span = tracing::info_span!("merge", generation).entered();
        let mut report = CompactReport {
            input_segments: inputs.len(),
            ..CompactReport::default()
        };
        tracing::debug!(inputs = inputs.len(), ?job, "merge started");
        let Some(plan) = self.plan(&inputs, &mut report, progress, pace)? else {
            tracing::debug!("merge stopped while planning; nothing changed");
            return Ok(None);
        };
        let dir = self.writer.dir().to_path_buf();
        let mut out = Output {
            shared: self,
            dir: &dir,
            limit: self.options.segment_bytes,
            done: Vec::new(),
            current: None,
            written: 0,
            unpaced: 0,
        };
        let copied = match self.copy(&plan, &mut out, &mut report, pace) {
            Ok(Some(copied)) => copied,
            Ok(None) => {
                out.discard();
                tracing::debug!("merge stopped before its switch; nothing changed");
                return Ok(None);
            }
            Err(e) => {
                out.discard();
                return Err(e);
            }
        };
        let outputs = out.done;
        report.output_segments = outputs.len();
        report.output_bytes = outputs.iter().map(|(_, len)| len).sum();
        if step == CompactStep::Written {
            return Ok(Some(report));
        }
        let fs = self.writer.fs();
        for (id, _) in &outputs {
            let tmp = tmp_path(&dir, *id);
            fs.rename(&tmp, &segment_path(&dir, *id))
                .map_err(|e| Error::io("name a compacted segment", &tmp, e))?;
        }
        self.writer.sync_dir()?;
        if step == CompactStep::Renamed {
            return Ok(Some(report));
        }
        let mut manifest = self.manifest.lock();
        // From here until the index points at the new segments, it does
        // not match the manifest: no checkpoint may describe it.
        self.no_checkpoint
            .store(true, std::sync::atomic::Ordering::Release);
        let next = switched(
            &manifest,
            job,
            &outputs,
            &self.segments.ids(),
            self.writer.store(),
        );
        next.write(fs, &dir)?;
        tracing::debug!(
            segments = report.output_segments,
            "manifest switched to the merged segments"
        );
        *manifest = next;
        if step == CompactStep::Switched {
            return Ok(Some(report));
        }
        for (id, _) in &outputs {
            let path = segment_path(&dir, *id);
            let map = fs
                .map(&path)
                .map_err(|e| Error::io("map a compacted segment", &path, e))?;
            self.segments
                .insert(*id, SegmentData::Sealed(Arc::new(Sealed::mapped(map))));
        }
        self.remap(&copied);
        // Every reader that copied old locations did so under a context read
        // lock, which the remap waited for: nothing reads the inputs any more.
        for id in &inputs {
            self.segments.remove(*id);
            let path = segment_path(&dir, *id);
            fs.remove_file(&path)
                .map_err(|e| Error::io("remove a compacted-away segment", &path, e))?;
        }
        self.writer.sync_dir()?;
        // The index now points into the new segments: a checkpoint may be
        // written again, and one is written now, so that a reopen after a
        // crash need not read the whole log (the one on disk names the
        // manifest before this merge, which an open ignores). If it fails,
        // the next is due at once (at the latest at close).
        self.no_checkpoint
            .store(false, std::sync::atomic::Ordering::Release);
        self.since_checkpoint
            .store(0, std::sync::atomic::Ordering::Release);
        if let Err(e) = self.write_checkpoint_under(manifest.generation) {
            tracing::warn!(error = %e, "the checkpoint after a merge failed; the next is due at once");
            self.since_checkpoint
                .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        }
        tracing::info!(
            input_segments = report.input_segments,
            input_bytes = report.input_bytes,
            output_bytes = report.output_bytes,
            records_kept = report.records_kept,
            records_dropped = report.records_dropped,
            "merge done"
        );
        Ok(Some(report))
    }

    /// Writes the plan's records and tombstones to `out`; returns, per
    /// context copied, each record's old and new place (`None`: stopped).
    fn copy(
        &self,
        plan: &[(ContextKey, Group)],
        out: &mut Output<'_>,
        report: &mut CompactReport,
        pace: &mut dyn FnMut(u64, bool) -> bool,
    ) -> Result<Option<Copied>> {
        let mut copied = Copied::default();
        for (key, group) in plan {
            match group {
                Group::Copy(locs) => {
                    copied.keys.push(*key);
                    for &loc in locs {
                        if !out.room(loc.len, pace)? {
                            return Ok(None);
                        }
                        let new = self
                            .segments
                            .with_payload(loc, |payload| out.add(payload))??;
                        report.live_payload_bytes += u64::from(loc.len);
                        copied.moved.insert((loc.segment, loc.offset), new);
                        report.records_kept += 1;
                    }
                }
                Group::Tombstone(payload) => {
                    // Fits: a tombstone is a few dozen bytes.
                    if !out.room(payload.len() as u32, pace)? {
                        return Ok(None);
                    }
                    out.add(payload)?;
                }
            }
        }
        out.finish()?;
        Ok(Some(copied))
    }

    /// Walks the inputs and decides, per context (in order of first
    /// appearance), which records to copy and which tombstones to write
    /// (`None`: `pace` asked to stop).
    fn plan(
        &self,
        inputs: &[u64],
        report: &mut CompactReport,
        progress: &mut dyn FnMut(usize, usize),
        pace: &mut dyn FnMut(u64, bool) -> bool,
    ) -> Result<Option<Vec<(ContextKey, Group)>>> {
        let mut order: Vec<ContextKey> = Vec::new();
        let mut groups: HashMap<ContextKey, Vec<RecordLoc>> = HashMap::new();
        let sizes: Vec<usize> = inputs
            .iter()
            .map(|&id| match self.segments.get(id) {
                Some(SegmentData::Sealed(sealed)) => sealed.len() as usize,
                _ => 0,
            })
            .collect();
        let total: usize = sizes.iter().sum();
        let mut done = 0;
        for (&id, size) in inputs.iter().zip(&sizes) {
            progress(done, total);
            done += size;
            let Some(SegmentData::Sealed(sealed)) = self.segments.get(id) else {
                return Err(Error::corrupt(
                    id,
                    0,
                    "a segment to compact is not readable",
                ));
            };
            let bytes = sealed.bytes()?;
            report.input_bytes += bytes.len() as u64;
            // A segment of the first format version has a shorter header.
            let mut at = decode_header(bytes).map_or(HEADER_LEN, |h| h.records_start());
            let mut paced = at;
            while at < bytes.len() as u64 {
                if at - paced >= BREATHE {
                    paced = at;
                    if !pace(0, false) {
                        return Ok(None);
                    }
                }
                let frame = decode_frame(bytes, id, at, MAX_RECORD_BYTES)
                    .map_err(|e| Error::corrupt(id, at, e.reason()))?;
                let key =
                    record::key(frame.payload(bytes)).map_err(|e| Error::corrupt(id, at, e.0))?;
                let loc = RecordLoc {
                    segment: id,
                    offset: at as u32,
                    len: frame.len,
                };
                groups
                    .entry(key)
                    .or_insert_with(|| {
                        order.push(key);
                        Vec::new()
                    })
                    .push(loc);
                at = frame.end();
            }
        }
        progress(total, total);
        let mut plan = Vec::with_capacity(order.len());
        for key in order {
            let locs = groups.remove(&key).unwrap_or_default();
            match self.tombstone_for(&key, &locs)? {
                Some(tombstone) => {
                    report.records_dropped += locs.len() as u64;
                    plan.push((key, Group::Tombstone(tombstone)));
                }
                None => plan.push((key, Group::Copy(locs))),
            }
        }
        Ok(Some(plan))
    }

    /// The tombstone that replaces the records of a gone context (`None`: the
    /// context is live, or of another namespace, and keeps every record). An
    /// expired context that had no tombstone yet is marked gone in memory too.
    fn tombstone_for(&self, key: &ContextKey, locs: &[RecordLoc]) -> Result<Option<Vec<u8>>> {
        if key.version() != NAMESPACE_VERSION {
            return Ok(None);
        }
        let Some(slot) = self.index.get(key) else {
            return Ok(None);
        };
        let _turn = slot.write.lock();
        let mut state = slot.state.write();
        let gone = match state.life(now_ms(), self.options.retention) {
            Life::Gone(gone) => gone,
            Life::Live | Life::Missing => return Ok(None),
        };
        let Some(meta) = state.meta.clone() else {
            return Ok(None);
        };
        let last_seq = match locs.last() {
            Some(&loc) => self.with_record(key, loc, |body, _| body.seq)?,
            None => state.next_seq,
        };
        let body = RecordBody {
            seq: last_seq,
            timestamp_ms: state.last_ms,
            opens: Some(ContextName {
                tenant: meta.tenant().to_string(),
                context_id: meta.context_id().to_string(),
            }),
            kind: RecordKind::Gone {
                expired: gone == Gone::Expired,
            },
        };
        let payload = record::encode(key, &body, &[]).map_err(|e| Error::InvalidParams {
            field: "tombstone",
            reason: e.0,
        })?;
        if state.gone.is_none() {
            // Expired without a tombstone: gone from memory now, as on disk.
            let next = RecordBody {
                seq: state.next_seq,
                opens: None,
                ..body
            };
            apply(
                &self.index,
                &slot,
                &mut state,
                &next,
                // A tombstone's place is never read: any will do.
                locs.last().copied().unwrap_or_default(),
                super::Hints::default(),
            );
        }
        Ok(Some(payload))
    }

    /// Points the copied contexts' index entries at their records' new
    /// places (no other context has a record in a merge's inputs).
    fn remap(&self, copied: &Copied) {
        if copied.moved.is_empty() {
            return;
        }
        let to = |loc: &mut RecordLoc| {
            if let Some(new) = copied.moved.get(&(loc.segment, loc.offset)) {
                *loc = *new;
            }
        };
        for (i, key) in copied.keys.iter().enumerate() {
            breathe(i);
            let Some(slot) = self.index.get(key) else {
                continue;
            };
            let _turn = slot.write.lock();
            let mut state = slot.state.write();
            state.remap(&to);
        }
    }
}

/// Contexts remapped, weighed for the live bytes, or written into a
/// checkpoint, between two yields of the CPU.
const YIELD_EVERY: usize = 64;

/// Called with the number of each context of a walk over many (a remap,
/// the live bytes' weighing, a checkpoint): every [`YIELD_EVERY`] of them
/// the thread doing it (the maintenance thread, or an appender that writes
/// a checkpoint) yields its CPU, so that one woken on that CPU runs within
/// a few dozen microseconds instead of after its time slice.
pub(super) fn breathe(i: usize) {
    if i % YIELD_EVERY == YIELD_EVERY - 1 {
        std::thread::yield_now();
    }
}

/// The contexts a merge copied and where each record went.
#[derive(Default)]
struct Copied {
    keys: Vec<ContextKey>,
    moved: HashMap<(u64, u32), RecordLoc>,
}

/// The segments job `job` reads, in log order, of the segments `present`;
/// an error if the job does not fit the manifest.
fn inputs_of(manifest: &Manifest, job: &Job, present: &[u64]) -> Result<Vec<u64>> {
    let bad = |reason: &str| Error::InvalidParams {
        field: "merge",
        reason: reason.to_string(),
    };
    let Some(window) = manifest.compacted.get(job.from..job.to) else {
        return Err(bad("the window is not in the manifest"));
    };
    let mut inputs = window.to_vec();
    if let Some(through) = job.through {
        if job.to != manifest.compacted.len() {
            return Err(bad("tail segments can only follow the last run"));
        }
        inputs.extend(present.iter().copied().filter(|id| {
            (manifest.tail_from..=through).contains(id) && !manifest.compacted.contains(id)
        }));
    }
    Ok(inputs)
}

/// The manifest after job `job` wrote `outputs` (id, length) as run
/// `next.generation`, of the segments `present` (which do not include the
/// outputs yet).
fn switched(
    manifest: &Manifest,
    job: &Job,
    outputs: &[(u64, u64)],
    present: &[u64],
    store: crate::log::frame::StoreId,
) -> Manifest {
    let generation = manifest.generation + 1;
    let part = |v: &Vec<u64>, r: std::ops::Range<usize>| v.get(r).unwrap_or_default().to_vec();
    // A version 1 manifest had no lengths: at least a header, as it is read.
    let lens: Vec<u64> = (0..manifest.compacted.len())
        .map(|i| manifest.lens.get(i).copied().unwrap_or(LEGACY_HEADER_LEN))
        .collect();
    let (before, after) = (0..job.from, job.to..manifest.compacted.len());
    // The tail starts at the first tail segment after the inputs, which
    // exists (the active segment is one) as an open expects.
    let tail_from = match job.through {
        None => manifest.tail_from,
        Some(through) => present
            .iter()
            .copied()
            .find(|id| {
                *id > through && *id >= manifest.tail_from && !manifest.compacted.contains(id)
            })
            .unwrap_or(through + 1),
    };
    let mut next = Manifest {
        store: Some(store),
        generation,
        compacted: part(&manifest.compacted, before.clone()),
        lens: part(&lens, before.clone()),
        runs: part(&manifest.runs, before),
        tail_from,
    };
    for (id, len) in outputs {
        next.compacted.push(*id);
        next.lens.push(*len);
        next.runs.push(generation);
    }
    next.compacted
        .extend(part(&manifest.compacted, after.clone()));
    next.lens.extend(part(&lens, after.clone()));
    next.runs.extend(part(&manifest.runs, after));
    next
}
