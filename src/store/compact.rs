//! Compaction: rewrite the sealed segments without the records of deleted or
//! expired contexts, each context's records next to each other, while the
//! store keeps serving reads and writes. DESIGN.md §4 walks its crash cases.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use super::{apply, now_ms, Store};
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::index::{Gone, Life};
use crate::log::frame::{
    decode_frame, decode_header, encode_frame, encode_header, FLAG_COMPACTED, FRAME_HEADER_LEN,
    HEADER_LEN,
};
use crate::log::manifest::Manifest;
use crate::log::record::{self, ContextName, RecordBody, RecordKind};
use crate::log::segments::{segment_file_name, segment_path, RecordLoc, SegmentData};
use crate::namespace::{ContextKey, NAMESPACE_VERSION};
use crate::MAX_RECORD_BYTES;

/// What a compaction did.
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

/// One record to copy, or a tombstone to write for a gone context.
enum Out {
    Copy(RecordLoc),
    Tombstone(Vec<u8>),
}

/// Output segments being filled in memory.
struct Output {
    segments: Vec<(u64, Vec<u8>)>,
    limit: u64,
}

impl Output {
    fn push(&mut self, store: &Store, payload: &[u8]) -> Result<RecordLoc> {
        let need = FRAME_HEADER_LEN + payload.len() as u64;
        let full = self
            .segments
            .last()
            .is_none_or(|(_, b)| b.len() as u64 > HEADER_LEN && b.len() as u64 + need > self.limit);
        if full {
            let id = store.writer.allocate_segment_id()?;
            let header = encode_header(id, FLAG_COMPACTED, store.writer.store(), None);
            self.segments.push((id, header.to_vec()));
        }
        let Some((id, buf)) = self.segments.last_mut() else {
            // Unreachable: a segment was pushed just above when there was none.
            return Ok(RecordLoc {
                segment: 0,
                offset: 0,
                len: 0,
            });
        };
        let offset = buf.len() as u64;
        encode_frame(*id, offset, offset as u32, payload, buf);
        Ok(RecordLoc {
            segment: *id,
            offset: offset as u32,
            len: payload.len() as u32,
        })
    }
}

impl Store {
    /// Compacts the log: seals the active segment, rewrites every sealed
    /// segment without the records of deleted or expired contexts (each gone
    /// context keeps one tombstone that keeps its id refused), with each
    /// context's records contiguous, then switches to the new segments.
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
        let mut manifest = self.manifest.lock();
        let _span = tracing::info_span!("compact", generation = manifest.generation + 1).entered();
        // The checkpoint describes the segments this replaces: drop it, and
        // write none until the index matches the new manifest again.
        self.no_checkpoint
            .store(true, std::sync::atomic::Ordering::Release);
        let stale = self.writer.dir().join(super::checkpoint::CHECKPOINT);
        let fs = self.writer.fs();
        match fs.remove_file(&stale) {
            Ok(()) => self.writer.sync_dir()?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("remove the old checkpoint", stale, e)),
        }
        let tail_from = self.writer.rotate_now()?;
        let inputs: Vec<u64> = manifest
            .compacted
            .iter()
            .copied()
            .chain(
                self.segments
                    .ids()
                    .into_iter()
                    .filter(|id| *id < tail_from && !manifest.compacted.contains(id)),
            )
            .collect();
        let mut report = CompactReport {
            input_segments: inputs.len(),
            ..CompactReport::default()
        };
        tracing::debug!(inputs = inputs.len(), tail_from, "compaction started");
        let plan = self.plan(&inputs, &mut report, progress)?;
        let mut out = Output {
            segments: Vec::new(),
            limit: self.options.segment_bytes,
        };
        let mut moved: HashMap<(u64, u32), RecordLoc> = HashMap::new();
        for item in plan {
            match item {
                Out::Copy(loc) => {
                    let new = self
                        .segments
                        .with_payload(loc, |payload| out.push(self, payload))??;
                    report.live_payload_bytes += u64::from(loc.len);
                    moved.insert((loc.segment, loc.offset), new);
                    report.records_kept += 1;
                }
                Out::Tombstone(payload) => {
                    out.push(self, &payload)?;
                }
            }
        }
        let dir = self.writer.dir().to_path_buf();
        report.output_segments = out.segments.len();
        report.output_bytes = out.segments.iter().map(|(_, b)| b.len() as u64).sum();
        for (id, bytes) in &out.segments {
            write_temporary(fs, &dir, *id, bytes)?;
        }
        if step == CompactStep::Written {
            return Ok(report);
        }
        for (id, _) in &out.segments {
            let tmp = dir.join(format!("{}.tmp", segment_file_name(*id)));
            fs.rename(&tmp, &segment_path(&dir, *id))
                .map_err(|e| Error::io("name a compacted segment", &tmp, e))?;
        }
        self.writer.sync_dir()?;
        if step == CompactStep::Renamed {
            return Ok(report);
        }
        let next = Manifest {
            store: Some(self.writer.store()),
            generation: manifest.generation + 1,
            compacted: out.segments.iter().map(|(id, _)| *id).collect(),
            lens: out.segments.iter().map(|(_, b)| b.len() as u64).collect(),
            tail_from,
        };
        next.write(fs, &dir)?;
        tracing::debug!(
            segments = report.output_segments,
            "manifest switched to the compacted segments"
        );
        *manifest = next;
        if step == CompactStep::Switched {
            return Ok(report);
        }
        for (id, _) in &out.segments {
            let path = segment_path(&dir, *id);
            let map = fs
                .map(&path)
                .map_err(|e| Error::io("map a compacted segment", &path, e))?;
            self.segments
                .insert(*id, SegmentData::Sealed(Arc::new(map)));
        }
        self.remap(&moved);
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
        // written again, and one is written now, so that a reopen need not
        // scan the compacted log and the removed checkpoint, which the index
        // may still read messageIds from, is let go. If it fails, the next
        // is due at once (at the latest at close).
        self.no_checkpoint
            .store(false, std::sync::atomic::Ordering::Release);
        self.since_checkpoint
            .store(0, std::sync::atomic::Ordering::Release);
        if let Err(e) = self.write_checkpoint_under(manifest.generation) {
            tracing::warn!(error = %e, "the checkpoint after compaction failed; the next is due at once");
            self.since_checkpoint
                .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        }
        tracing::info!(
            input_segments = report.input_segments,
            input_bytes = report.input_bytes,
            output_bytes = report.output_bytes,
            records_kept = report.records_kept,
            records_dropped = report.records_dropped,
            "compaction done"
        );
        Ok(report)
    }

    /// Walks the inputs and decides, per context (in order of first
    /// appearance), which records to copy and which tombstones to write.
    fn plan(
        &self,
        inputs: &[u64],
        report: &mut CompactReport,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Vec<Out>> {
        let mut order: Vec<ContextKey> = Vec::new();
        let mut groups: HashMap<ContextKey, Vec<RecordLoc>> = HashMap::new();
        let sizes: Vec<usize> = inputs
            .iter()
            .map(|&id| match self.segments.get(id) {
                Some(SegmentData::Sealed(map)) => map.bytes().len(),
                _ => 0,
            })
            .collect();
        let total: usize = sizes.iter().sum();
        let mut done = 0;
        for (&id, size) in inputs.iter().zip(&sizes) {
            progress(done, total);
            done += size;
            let Some(SegmentData::Sealed(map)) = self.segments.get(id) else {
                return Err(Error::corrupt(
                    id,
                    0,
                    "a segment to compact is not readable",
                ));
            };
            let bytes = map.bytes();
            report.input_bytes += bytes.len() as u64;
            // A segment of the first format version has a shorter header.
            let mut at = decode_header(bytes).map_or(HEADER_LEN, |h| h.records_start());
            while at < bytes.len() as u64 {
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
        let mut plan = Vec::new();
        for key in order {
            let locs = groups.remove(&key).unwrap_or_default();
            match self.tombstone_for(&key, &locs)? {
                Some(tombstone) => {
                    report.records_dropped += locs.len() as u64;
                    plan.push(Out::Tombstone(tombstone));
                }
                None => plan.extend(locs.into_iter().map(Out::Copy)),
            }
        }
        Ok(plan)
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
            );
        }
        Ok(Some(payload))
    }

    /// Points every index entry at the records' new places.
    fn remap(&self, moved: &HashMap<(u64, u32), RecordLoc>) {
        if moved.is_empty() {
            return;
        }
        let to = |loc: &mut RecordLoc| {
            if let Some(new) = moved.get(&(loc.segment, loc.offset)) {
                *loc = *new;
            }
        };
        for slot in self.index.all_slots() {
            let _turn = slot.write.lock();
            let mut state = slot.state.write();
            state.remap(&to);
        }
    }
}

/// Writes a compacted segment under a temporary name, synced.
fn write_temporary(fs: &dyn Fs, dir: &Path, id: u64, bytes: &[u8]) -> Result<()> {
    let tmp = dir.join(format!("{}.tmp", segment_file_name(id)));
    let file = fs
        .create_new(&tmp)
        .map_err(|e| Error::io("create a compacted segment", &tmp, e))?;
    file.write_at(bytes, 0)
        .and_then(|()| file.sync_data())
        .map_err(|e| Error::io("write a compacted segment", &tmp, e))
}
