//! Opening the log: scan every segment, truncate only a torn tail of the
//! newest one, and refuse (or, when asked, skip and report) damage elsewhere.

use std::path::Path;
use std::sync::Arc;

use super::frame::{
    decode_frame, decode_header, encode_header, find_next_frame, is_preallocated, u32_at,
    HeaderError, FLAG_COMPACTED, FORMAT_VERSION, FRAME_HEADER_LEN, HEADER_LEN,
};
use super::manifest::Manifest;
use super::segments::{
    list_segment_ids, segment_path, RecordLoc, SegmentData, Segments, MAX_SEGMENT_ID,
};
use super::writer::{create_segment, sync_dir};
use crate::error::{Error, Result};
use crate::fs::{Fs, SegmentFile};
use crate::options::{Options, RecoveryMode};

/// What opening found and did. Nothing in it is an error: an open that had
/// to refuse returns an [`Error`] instead.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpenReport {
    /// Segment files read.
    pub segments: usize,
    /// Records served after the open (of the current namespace).
    pub records: u64,
    /// Contexts served after the open.
    pub contexts: usize,
    /// The torn tail cut from the newest segment, if there was one.
    pub torn_tail: Option<TornTail>,
    /// Damaged byte ranges skipped under [`RecoveryMode::SkipCorrupt`].
    pub skipped: Vec<Skipped>,
    /// Records of a namespace version this build does not serve: kept on disk,
    /// never served or listed.
    pub foreign_namespace_records: u64,
    /// Segments removed because a crash left them holding less than a header,
    /// or because an interrupted compaction left them behind.
    pub removed_segments: Vec<u64>,
    /// The index came from the checkpoint; only the log after it was read.
    pub from_checkpoint: bool,
    /// Records read from the log (after the checkpoint's point, if one was used).
    pub replayed: u64,
    /// Why a checkpoint there was not used (the whole log was read instead).
    pub checkpoint_ignored: Option<String>,
}

/// A torn tail that recovery cut off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// The newest segment's id.
    pub segment: u64,
    /// Where the segment now ends.
    pub offset: u64,
    /// Bytes dropped (with any preallocated zeros after them).
    pub bytes: u64,
    /// Records that had started in those bytes but were not complete
    /// (frame starts found by following length fields; at least 1).
    pub records: u64,
}

/// A damaged range skipped under [`RecoveryMode::SkipCorrupt`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The segment id.
    pub segment: u64,
    /// Where the damage starts.
    pub offset: u64,
    /// Bytes skipped.
    pub bytes: u64,
    /// What was wrong.
    pub reason: String,
}

/// The segment the writer continues with, after recovery.
pub struct ActiveSegment {
    /// Its id.
    pub id: u64,
    /// The file, open for writing.
    pub file: Arc<dyn SegmentFile>,
    /// Its valid bytes, from offset 0 (the writer mirrors them in memory).
    pub bytes: Vec<u8>,
}

/// What recovery hands the writer: the segment to continue with, the
/// manifest in force, and the next free segment id.
pub struct Recovered {
    /// The segment to continue appending to.
    pub active: ActiveSegment,
    /// The manifest in force.
    pub manifest: Manifest,
    /// The lowest segment id not in use.
    pub next_id: u64,
}

/// Scans the log under `dir` in replay order (see [`Manifest`]), registering
/// every segment in `segments` and handing each valid record to `on_record`,
/// which may refuse one (a reason string) as damaged. Leftovers of an
/// interrupted compaction are removed.
pub fn recover(
    dir: &Path,
    options: &Options,
    resume: Option<Resume>,
    segments: &Segments,
    report: &mut OpenReport,
    mut on_record: impl FnMut(RecordLoc, &[u8]) -> std::result::Result<(), String>,
) -> Result<Recovered> {
    let fs = options.fs.as_ref();
    let (mode, max_record) = (options.recovery, options.max_record_bytes);
    remove_temporaries(fs, dir)?;
    let manifest = Manifest::read(fs, dir)?;
    let ids = list_segment_ids(fs, dir)?;
    if let Some(&id) = ids.last().filter(|&&id| id > MAX_SEGMENT_ID) {
        return Err(Error::corrupt(
            id,
            0,
            format!("a segment id past {MAX_SEGMENT_ID}, the largest a store uses"),
        ));
    }
    let next_id = ids.last().map_or(1, |&id| id + 1);
    for &id in &manifest.compacted {
        if !ids.contains(&id) {
            return Err(Error::corrupt(
                id,
                0,
                "the MANIFEST lists this segment but it is missing",
            ));
        }
    }
    let mut tail = Vec::new();
    for &id in ids.iter().filter(|id| !manifest.compacted.contains(id)) {
        if in_tail(fs, dir, &manifest, id) {
            tail.push(id);
        } else {
            let path = segment_path(dir, id);
            fs.remove_file(&path)
                .map_err(|e| Error::io("remove a segment left over from compaction", &path, e))?;
            report.removed_segments.push(id);
        }
    }
    if !report.removed_segments.is_empty() {
        sync_dir(fs, dir)?;
    }
    if let Some(r) = resume {
        if r.generation != manifest.generation || !tail.contains(&r.segment) {
            return Err(Error::corrupt(
                r.segment,
                r.offset,
                "the checkpoint does not match the log",
            ));
        }
    }
    let mut scan = Scan {
        mode,
        max_record,
        report,
        on_record: &mut on_record,
        resume,
        reached: resume.is_none(),
    };
    let sealed: Vec<u64> = manifest
        .compacted
        .iter()
        .copied()
        .chain(tail.iter().copied().take(tail.len().saturating_sub(1)))
        .collect();
    for id in sealed {
        let path = segment_path(dir, id);
        let map = fs
            .map(&path)
            .map_err(|e| Error::io("map a segment", &path, e))?;
        scan.check_header(&path, id, map.bytes())?;
        let from = scan.start_of(id, map.bytes().len() as u64)?;
        if let Some(from) = from {
            scan.frames(id, map.bytes(), false, from)?;
        }
        segments.insert(id, SegmentData::Sealed(Arc::new(map)));
        scan.report.segments += 1;
    }
    let active = match tail.last() {
        Some(&newest) => scan.newest(fs, dir, newest, next_id)?,
        None => fresh_segment(fs, dir, next_id)?,
    };
    if !scan.reached {
        return Err(Error::corrupt(
            0,
            0,
            "the checkpoint's segment was not found",
        ));
    }
    let next_id = next_id.max(active.id + 1);
    Ok(Recovered {
        active,
        manifest,
        next_id,
    })
}

/// Whether segment `id` is one of the log's tail segments (appended, not
/// listed as compacted in the manifest, nor left over from a compaction):
/// the last of them is the one appends continue in.
pub(crate) fn in_tail(fs: &dyn Fs, dir: &Path, manifest: &Manifest, id: u64) -> bool {
    !manifest.compacted.contains(&id) && manifest.is_live(id, has_compacted_flag(fs, dir, id))
}

/// Whether segment `id`'s header says compaction wrote it (an unreadable
/// header counts as no).
fn has_compacted_flag(fs: &dyn Fs, dir: &Path, id: u64) -> bool {
    fs.read_prefix(&segment_path(dir, id), HEADER_LEN as usize)
        .is_ok_and(|header| decode_header(&header).is_ok_and(|h| h.flags & FLAG_COMPACTED != 0))
}

/// Removes `*.tmp` files: segments or a manifest a crash left half made.
fn remove_temporaries(fs: &dyn Fs, dir: &Path) -> Result<()> {
    let entries = fs
        .list(dir)
        .map_err(|e| Error::io("list the store directory", dir, e))?;
    for (name, _) in entries {
        if name.ends_with(".tmp") {
            let path = dir.join(name);
            fs.remove_file(&path)
                .map_err(|e| Error::io("remove a temporary file", &path, e))?;
        }
    }
    Ok(())
}

/// Where a checkpoint says the log still needs reading: everything before
/// `offset` of `segment` (under manifest `generation`) is in the checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resume {
    /// The manifest generation the checkpoint was taken under.
    pub generation: u64,
    /// The segment that was active.
    pub segment: u64,
    /// Its length then.
    pub offset: u64,
}

struct Scan<'a, F> {
    mode: RecoveryMode,
    max_record: u32,
    report: &'a mut OpenReport,
    on_record: &'a mut F,
    resume: Option<Resume>,
    /// Whether the replay has passed the checkpoint's position.
    reached: bool,
}

impl<F: FnMut(RecordLoc, &[u8]) -> std::result::Result<(), String>> Scan<'_, F> {
    /// Where to start reading segment `id` (`len` bytes), in replay order:
    /// `None` for a segment the checkpoint covers whole.
    fn start_of(&mut self, id: u64, len: u64) -> Result<Option<u64>> {
        if self.reached {
            return Ok(Some(HEADER_LEN));
        }
        match self.resume {
            Some(r) if r.segment == id => {
                self.reached = true;
                if len < r.offset {
                    return Err(Error::corrupt(
                        id,
                        len,
                        "the segment is shorter than the checkpoint says",
                    ));
                }
                Ok(Some(r.offset.max(HEADER_LEN)))
            }
            _ => Ok(None),
        }
    }

    fn check_header(&self, path: &Path, id: u64, bytes: &[u8]) -> Result<()> {
        let header = decode_header(bytes).map_err(|e| match e {
            HeaderError::Short => Error::corrupt(id, 0, "the segment header is cut short"),
            HeaderError::Invalid => Error::corrupt(id, 0, "the segment header is invalid"),
        })?;
        if header.version != FORMAT_VERSION {
            return Err(Error::UnsupportedFormat {
                path: path.to_path_buf(),
                found: header.version,
                supported: FORMAT_VERSION,
            });
        }
        if header.segment_id != id {
            return Err(Error::corrupt(
                id,
                0,
                format!("the header names segment {}", header.segment_id),
            ));
        }
        Ok(())
    }

    /// Walks the frames of one segment. In the newest segment, a bad frame
    /// with nothing valid after it is a torn tail: its offset is returned.
    fn frames(&mut self, id: u64, bytes: &[u8], newest: bool, from: u64) -> Result<Option<u64>> {
        let end = bytes.len() as u64;
        let mut at = from;
        while at < end {
            let reason = match decode_frame(bytes, id, at, self.max_record) {
                Ok(frame) => {
                    let loc = RecordLoc {
                        segment: id,
                        offset: at as u32,
                        len: frame.len,
                    };
                    match (self.on_record)(loc, frame.payload(bytes)) {
                        Ok(()) => {
                            at = frame.end();
                            continue;
                        }
                        Err(reason) => {
                            self.damage(id, at, frame.end(), reason)?;
                            at = frame.end();
                            continue;
                        }
                    }
                }
                Err(e) => e.reason(),
            };
            // In the newest segment, a bad frame that no later frame vouches
            // for (a watermark past it) lies in bytes that were never synced:
            // a torn tail.
            if newest && !self.vouched_for(bytes, id, at) {
                return Ok(Some(at));
            }
            let next = find_next_frame(bytes, id, at + 1, self.max_record).unwrap_or(end);
            self.damage(id, at, next, reason)?;
            at = next;
        }
        Ok(None)
    }

    /// Whether a valid frame after `at` carries a durable watermark past
    /// `at`, proving that the bytes at `at` had been synced before it was written.
    fn vouched_for(&self, bytes: &[u8], id: u64, at: u64) -> bool {
        let mut from = at + 1;
        while let Some(next) = find_next_frame(bytes, id, from, self.max_record) {
            match decode_frame(bytes, id, next, self.max_record) {
                Ok(frame) if u64::from(frame.durable) > at => return true,
                Ok(frame) => from = frame.end(),
                Err(_) => from = next + 1,
            }
        }
        false
    }

    fn damage(&mut self, segment: u64, offset: u64, until: u64, reason: String) -> Result<()> {
        match self.mode {
            RecoveryMode::Strict => Err(Error::corrupt(segment, offset, reason)),
            _ => {
                self.report.skipped.push(Skipped {
                    segment,
                    offset,
                    bytes: until - offset,
                    reason,
                });
                Ok(())
            }
        }
    }

    fn newest(&mut self, fs: &dyn Fs, dir: &Path, id: u64, fresh_id: u64) -> Result<ActiveSegment> {
        let path = segment_path(dir, id);
        let file = fs
            .open(&path)
            .map_err(|e| Error::io("open the newest segment", &path, e))?;
        let mut bytes = fs
            .read(&path)
            .map_err(|e| Error::io("read the newest segment", &path, e))?;
        if bytes.len() as u64 <= HEADER_LEN && decode_header(&bytes).is_err() {
            // A rotation crashed before the new header was durable.
            drop(file);
            fs.remove_file(&path)
                .map_err(|e| Error::io("remove a torn segment", &path, e))?;
            sync_dir(fs, dir)?;
            self.report.removed_segments.push(id);
            return fresh_segment(fs, dir, fresh_id);
        }
        self.check_header(&path, id, &bytes)?;
        let len = bytes.len() as u64;
        let from = self
            .start_of(id, bytes.len() as u64)?
            .unwrap_or(bytes.len() as u64);
        if let Some(cut) = self.frames(id, &bytes, true, from)? {
            file.set_len(cut)
                .and_then(|()| file.sync_data())
                .map_err(|e| Error::io("truncate the torn tail", &path, e))?;
            // Only zeros: preallocated space, where no record had started
            // (or none left a byte).
            if !is_preallocated(&bytes, cut) {
                self.report.torn_tail = Some(TornTail {
                    segment: id,
                    offset: cut,
                    bytes: len - cut,
                    records: count_started_frames(&bytes, cut, self.max_record),
                });
            }
            bytes.truncate(cut as usize);
        }
        // Whatever a crashed process left in the page cache is made durable
        // now, so the writer may start with the whole segment as its watermark.
        file.sync_data()
            .map_err(|e| Error::io("sync the newest segment", &path, e))?;
        self.report.segments += 1;
        Ok(ActiveSegment { id, file, bytes })
    }
}

fn fresh_segment(fs: &dyn Fs, dir: &Path, id: u64) -> Result<ActiveSegment> {
    Ok(ActiveSegment {
        id,
        file: create_segment(fs, dir, id)?,
        bytes: encode_header(id).to_vec(),
    })
}

/// Follows length fields from `from` to count the frames that had started in
/// a torn tail (at least one: there are bytes there).
fn count_started_frames(bytes: &[u8], from: u64, max_record: u32) -> u64 {
    let end = bytes.len() as u64;
    let mut at = from;
    let mut n = 0;
    while at < end {
        let len = u32_at(bytes, at as usize);
        // No frame starts here: zeros (preallocated space) or garbage.
        if len == 0 || len > max_record {
            break;
        }
        n += 1;
        at += FRAME_HEADER_LEN + u64::from(len);
    }
    n.max(1)
}
