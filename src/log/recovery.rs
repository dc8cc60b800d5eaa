//! Opening the log: scan every segment, truncate only a torn tail of the
//! newest one, and refuse (or, when asked, skip and report) damage elsewhere.

use std::path::Path;
use std::sync::Arc;

use super::frame::{
    count_started_frames, decode_frame, decode_header, encode_header, find_next_frame,
    is_preallocated, vouched_for, HeaderError, Link, SegmentHeader, StoreId, FORMAT_VERSION,
    HEADER_LEN, LEGACY_VERSION,
};
use super::identity;
use super::layout::{list, survey_listed, Foreign, Identity, Layout, Lost};
use super::manifest::Manifest;
use super::segments::sync_dir;
use super::segments::{segment_path, RecordLoc, Sealed, SegmentData, Segments};
use super::writer::{create_segment, ActiveSegment};
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::options::{Options, RecoveryMode};

/// What opening found and did. Nothing in it is an error: an open that had
/// to refuse returns an [`Error`] instead.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
#[serde(rename_all = "camelCase")]
pub struct OpenReport {
    /// The store's identity (32 hex digits).
    pub store_id: String,
    /// `IDENTITY` was missing or damaged and was written again from the
    /// identity the segments carry.
    pub identity_restored: bool,
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
    /// Acknowledged records found missing and accepted as lost under
    /// [`RecoveryMode::SkipCorrupt`] (`Strict` refuses them with
    /// [`Error::MissingRecords`]).
    pub lost: Vec<Lost>,
    /// Files of another store found in the directory, left as they are and
    /// not read, under [`RecoveryMode::SkipCorrupt`] (`Strict` refuses a
    /// segment or manifest of another store with [`Error::ForeignFile`]; a
    /// checkpoint of another store is ignored in either mode, see
    /// `checkpoint_ignored`).
    pub foreign: Vec<Foreign>,
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
    /// Records the checkpoint placed in segments that a merge rewrote after
    /// it was written (a crash came between the merge's switch and its own
    /// checkpoint): found in the merge's output, which was read whole, and
    /// pointed at there.
    pub repointed: u64,
}

/// A torn tail that recovery cut off.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
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

/// The torn tail of the newest segment `id` (its `bytes`) from `cut`, the
/// first bad frame no later frame vouches for: `None` if only preallocated
/// zeros lie there (no record had started). An open cuts it; a verify
/// reports it, as the same thing.
pub fn torn_tail(bytes: &[u8], id: u64, cut: u64, max_record: u32) -> Option<TornTail> {
    (!is_preallocated(bytes, cut)).then(|| TornTail {
        segment: id,
        offset: cut,
        bytes: (bytes.len() as u64).saturating_sub(cut),
        records: count_started_frames(bytes, cut, max_record),
    })
}

/// A damaged range skipped under [`RecoveryMode::SkipCorrupt`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
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

/// What recovery hands the writer: the segment to continue with, the
/// manifest in force, the next free segment id, and the store's identity.
pub struct Recovered {
    /// The segment to continue appending to.
    pub active: ActiveSegment,
    /// The manifest in force.
    pub manifest: Manifest,
    /// The lowest segment id not in use.
    pub next_id: u64,
    /// The store's identity.
    pub store: StoreId,
    /// The checkpoint was written just before the last merge's switch: that
    /// merge's output was read whole (see [`LastSwitch`]).
    pub after_switch: bool,
}

/// Scans the log under `dir` in replay order (see [`Manifest`]), registering
/// every segment in `segments` and handing each valid record to `on_record`
/// (with whether it lies in the output of a merge that switched the log
/// after the checkpoint was written), which may refuse one (a reason
/// string) as damaged. Leftovers of an
/// interrupted compaction are removed. Files of another store, and
/// acknowledged records found missing, are refused under `Strict`, and
/// reported and left alone under `SkipCorrupt`. `looked`: what [`look`]
/// found, if the caller already looked (while a checkpoint loaded).
pub fn recover(
    dir: &Path,
    options: &Options,
    resume: Option<Resume>,
    looked: Option<Result<Layout>>,
    segments: &Segments,
    report: &mut OpenReport,
    mut on_record: impl FnMut(RecordLoc, &[u8], bool) -> std::result::Result<(), String>,
) -> Result<Recovered> {
    let fs = options.fs.as_ref();
    let (mode, max_record) = (options.recovery, options.max_record_bytes);
    let read_only = options.read_only;
    // A read-only open changes nothing: temporaries, leftovers and a lost
    // IDENTITY stay as they are (the survey passes over the first two; a
    // writer's open deals with them), and the newest segment is read, not
    // cut.
    let layout = match looked {
        Some(layout) => layout?,
        None => look(fs, dir, read_only)?,
    };
    if let Some(e) = layout.past_max() {
        return Err(e);
    }
    if mode == RecoveryMode::Strict {
        if let Some(foreign) = layout.foreign.first() {
            return Err(foreign.error());
        }
        if let Some(lost) = layout.lost.first() {
            return Err(lost.error());
        }
    }
    report.store_id = layout.store.to_string();
    report.foreign.clone_from(&layout.foreign);
    report.lost.clone_from(&layout.lost);
    // After one switch since the checkpoint, its output is read whole, and
    // all of the tail if the checkpoint's resume segment was merged.
    let switch = resume.and_then(|r| last_switch(&r, &layout));
    let after_switch = switch.is_some();
    let resume_merged = switch.as_ref().is_some_and(|s| s.resume_merged);
    if let Some(r) = resume {
        check_resume(dir, &r, &layout, resume_merged)?;
    }
    if layout.identity != Identity::Found && !read_only {
        identity::write(fs, dir, layout.store)?;
        report.identity_restored = layout.identity == Identity::FromSegments;
    }
    for &id in layout.leftovers.iter().filter(|_| !read_only) {
        let path = segment_path(dir, id);
        fs.remove_file(&path)
            .map_err(|e| Error::io("remove a segment left over from compaction", &path, e))?;
        report.removed_segments.push(id);
    }
    if !layout.leftovers.is_empty() && !read_only {
        sync_dir(fs, dir)?;
    }
    let mut scan = Scan {
        mode,
        read_only,
        max_record,
        report,
        on_record: &mut on_record,
        resume,
        reached: resume.is_none(),
        whole: switch.map(|s| s.output).unwrap_or_default(),
    };
    let (tail, compacted) = (&layout.tail, &layout.compacted);
    let sealed: Vec<u64> = compacted
        .iter()
        .copied()
        .chain(tail.iter().copied().take(tail.len().saturating_sub(1)))
        .collect();
    let mut last = None;
    for (i, &id) in sealed.iter().enumerate() {
        scan.reached |= resume_merged && i >= compacted.len();
        let path = segment_path(dir, id);
        let len = layout.lens.get(&id).copied().unwrap_or(0);
        // Its header as the survey read it.
        let header = scan.check_header(&path, id, layout.header(id))?;
        // A segment the checkpoint covers whole is not read: it is mapped
        // when a record in it is first read. (Not so beside a writer in
        // another process, whose next merge may remove it: a read-only
        // open maps it now, and the map outlives the file.)
        let from = scan.start_of(id, len, header.records_start())?;
        let sealed = if from.is_none() && !read_only {
            Sealed::unmapped(options.fs.clone(), path, len)
        } else {
            let map = fs
                .map(&path)
                .map_err(|e| Error::io("map a segment", &path, e))?;
            if let Some(from) = from {
                scan.frames(id, map.bytes(), false, from)?;
            }
            Sealed::mapped(map)
        };
        segments.insert(id, SegmentData::Sealed(Arc::new(sealed)));
        scan.report.segments += 1;
        last = Some(Link { segment: id, len });
    }
    let fresh = Fresh {
        id: layout.next_id,
        store: layout.store,
        prev: last,
    };
    scan.reached |= resume_merged;
    let active = match tail.last() {
        Some(&newest) => scan.newest(fs, dir, newest, fresh)?,
        None if read_only => unwritable(fresh),
        None => fresh_segment(fs, dir, fresh)?,
    };
    if !scan.reached {
        return Err(Error::corrupt(
            0,
            0,
            "the checkpoint's segment was not found",
        ));
    }
    let next_id = layout.next_id.max(active.id + 1);
    Ok(Recovered {
        active,
        manifest: layout.manifest,
        next_id,
        store: layout.store,
        after_switch,
    })
}

/// Whether a checkpoint's resume point fits the log: of this store, under
/// the manifest in force (or the one before it), in a tail segment that is
/// still as long (or that the last merge took: `resume_merged`). Every
/// record before it was durable when the checkpoint was written, so a
/// segment shorter than that has lost acknowledged records.
fn check_resume(
    dir: &Path,
    r: &Resume,
    layout: &super::layout::Layout,
    resume_merged: bool,
) -> Result<()> {
    if r.store != layout.store {
        return Err(Error::ForeignFile {
            path: dir.join(CHECKPOINT),
            reason: format!("it names store {}; this store is {}", r.store, layout.store),
        });
    }
    // (Of this store, checked above: `stale` says whether the generation
    // differs.)
    if stale(r, layout).is_some() || layout.salvage || !layout.lost.is_empty() {
        return Err(Error::corrupt(
            r.segment,
            r.offset,
            "the checkpoint does not match the log",
        ));
    }
    if !layout.tail.contains(&r.segment) && !resume_merged {
        return Err(Lost {
            segment: r.segment,
            expected: r.offset,
            actual: 0,
            reason: format!(
                "the checkpoint says the log reached offset {} of segment {}",
                r.offset, r.segment
            ),
        }
        .error());
    }
    Ok(())
}

/// Why a checkpoint of this store cannot be used with the manifest in
/// force, if it cannot: compactions or merges switched the log more than
/// once since it was written (a crash came before the checkpoint that
/// follows every switch, and that one failed too; see DESIGN.md §4), or
/// the manifest is older than it. Its index then points into segments the
/// log no longer has, so the whole log is read instead. (One switch since
/// is [`last_switch`]'s; a checkpoint of another store is `check_resume`'s
/// to name.)
pub fn stale(r: &Resume, layout: &super::layout::Layout) -> Option<String> {
    let behind = r.generation != layout.manifest.generation;
    (r.store == layout.store && behind && !one_switch_behind(r, layout)).then(|| {
        format!(
            "the checkpoint describes the log before a compaction or merge switched it \
             (manifest generation {}, the log's is {}), and the store stopped before the \
             checkpoint that follows the switch was written",
            r.generation, layout.manifest.generation
        )
    })
}

/// A checkpoint written under the manifest generation just before the one
/// in force: one merge (or compaction) switched the log since, and a crash
/// came before the checkpoint that follows it. Its index points into that
/// merge's inputs, whose records (of contexts still live then) are in its
/// output, in the same order, byte for byte: the open reads the output
/// whole and re-points the index at it (DESIGN.md §4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastSwitch {
    /// The merge's output segments, in log order: the compacted segments
    /// whose run is the manifest's generation.
    pub output: Vec<u64>,
    /// The checkpoint's resume segment was one of the merge's inputs (a
    /// tail segment below the new `tail_from`): everything after the
    /// merge's output is read.
    pub resume_merged: bool,
}

/// The switch since checkpoint `r` was written, if exactly one merge of
/// this store's log came since (see [`LastSwitch`]).
pub fn last_switch(r: &Resume, layout: &super::layout::Layout) -> Option<LastSwitch> {
    if !one_switch_behind(r, layout) {
        return None;
    }
    let m = &layout.manifest;
    let output = m
        .compacted
        .iter()
        .zip(&m.runs)
        .filter(|(_, run)| **run == m.generation)
        .map(|(id, _)| *id)
        .collect();
    Some(LastSwitch {
        output,
        resume_merged: r.segment < m.tail_from && !layout.tail.contains(&r.segment),
    })
}

/// Whether checkpoint `r` is of this store and exactly one merge switched
/// its log since.
fn one_switch_behind(r: &Resume, layout: &super::layout::Layout) -> bool {
    r.store == layout.store && r.generation.checked_add(1) == Some(layout.manifest.generation)
}

/// What an open finds in `dir`: the `*.tmp` files (segments or a manifest
/// a crash left half made) removed first, except by a read-only open, then
/// the survey ([`survey`](super::layout::survey)), from one listing of the
/// directory.
pub fn look(fs: &dyn Fs, dir: &Path, read_only: bool) -> Result<Layout> {
    let mut files = list(fs, dir)?;
    if !read_only {
        for (name, _) in files.iter().filter(|(name, _)| name.ends_with(".tmp")) {
            let path = dir.join(name);
            fs.remove_file(&path)
                .map_err(|e| Error::io("remove a temporary file", &path, e))?;
        }
        files.retain(|(name, _)| !name.ends_with(".tmp"));
    }
    survey_listed(fs, dir, files)
}

/// The checkpoint's file name.
pub const CHECKPOINT: &str = "CHECKPOINT";

/// Where a checkpoint says the log still needs reading: everything before
/// `offset` of `segment` (under manifest `generation`) is in the checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resume {
    /// The store the checkpoint was written by.
    pub store: StoreId,
    /// The manifest generation the checkpoint was taken under.
    pub generation: u64,
    /// The segment that was active.
    pub segment: u64,
    /// Its length then.
    pub offset: u64,
}

struct Scan<'a, F> {
    mode: RecoveryMode,
    /// Read the newest segment as it is: a tail that does not decode is
    /// the writer's unfinished append, left alone and not reported.
    read_only: bool,
    max_record: u32,
    report: &'a mut OpenReport,
    on_record: &'a mut F,
    resume: Option<Resume>,
    /// Whether the replay has passed the checkpoint's position.
    reached: bool,
    /// Segments read whole wherever they lie: the output of a merge that
    /// switched the log after the checkpoint was written.
    whole: Vec<u64>,
}

impl<F: FnMut(RecordLoc, &[u8], bool) -> std::result::Result<(), String>> Scan<'_, F> {
    /// Where to start reading segment `id` (`len` bytes, its records
    /// starting at `first`), in replay order: `None` for a segment the
    /// checkpoint covers whole. A segment shorter than the checkpoint says
    /// has lost acknowledged records: every record before its resume point
    /// was durable when it was written.
    fn start_of(&mut self, id: u64, len: u64, first: u64) -> Result<Option<u64>> {
        if self.reached || self.whole.contains(&id) {
            return Ok(Some(first));
        }
        match self.resume {
            Some(r) if r.segment == id => {
                self.reached = true;
                if len < r.offset {
                    return Err(Lost {
                        segment: id,
                        expected: r.offset,
                        actual: len,
                        reason: format!(
                            "the checkpoint says the log reached offset {} of segment {id}",
                            r.offset
                        ),
                    }
                    .error());
                }
                Ok(Some(r.offset.max(first)))
            }
            _ => Ok(None),
        }
    }

    /// Whether the checkpoint's resume point lies in segment `id`, whose
    /// file is `len` bytes, too short to hold even its header: records of it
    /// were durable, so the file was cut.
    fn lost_below_checkpoint(&self, id: u64, len: u64) -> Result<()> {
        match self.resume {
            Some(r) if r.segment == id && r.offset > len => Err(Lost {
                segment: id,
                expected: r.offset,
                actual: len,
                reason: format!(
                    "the checkpoint says the log reached offset {} of segment {id}, \
                     whose file is {len} bytes, shorter than its header",
                    r.offset
                ),
            }
            .error()),
            _ => Ok(()),
        }
    }

    /// Checks segment `id`'s header as it `decoded`: a version this build
    /// reads, naming segment `id`.
    fn check_header(
        &self,
        path: &Path,
        id: u64,
        decoded: std::result::Result<SegmentHeader, HeaderError>,
    ) -> Result<SegmentHeader> {
        let header = decoded.map_err(|e| match e {
            HeaderError::Short => Error::corrupt(id, 0, "the segment header is cut short"),
            HeaderError::Invalid => Error::corrupt(id, 0, "the segment header is invalid"),
        })?;
        if header.version != FORMAT_VERSION && header.version != LEGACY_VERSION {
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
        Ok(header)
    }

    /// Walks the frames of one segment. In the newest segment, a bad frame
    /// with nothing valid after it is a torn tail: its offset is returned.
    fn frames(&mut self, id: u64, bytes: &[u8], newest: bool, from: u64) -> Result<Option<u64>> {
        let end = bytes.len() as u64;
        let rewritten = self.whole.contains(&id);
        let mut at = from;
        while at < end {
            let reason = match decode_frame(bytes, id, at, self.max_record) {
                Ok(frame) => {
                    let loc = RecordLoc {
                        segment: id,
                        offset: at as u32,
                        len: frame.len,
                    };
                    match (self.on_record)(loc, frame.payload(bytes), rewritten) {
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
            if newest && !vouched_for(bytes, id, at, self.max_record) {
                return Ok(Some(at));
            }
            let next = find_next_frame(bytes, id, at + 1, self.max_record).unwrap_or(end);
            self.damage(id, at, next, reason)?;
            at = next;
        }
        Ok(None)
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

    /// Continues the newest segment, `id`: cuts a torn tail, makes what is
    /// left durable, and hands it to the writer. The part after the
    /// checkpoint's point is read (a clean close left none), the rest
    /// never; once the torn tail is cut the segment is mapped, and the
    /// writer's mirror reads what is there through the map.
    fn newest(&mut self, fs: &dyn Fs, dir: &Path, id: u64, fresh: Fresh) -> Result<ActiveSegment> {
        if self.read_only {
            return self.newest_read_only(fs, dir, id, fresh);
        }
        let path = segment_path(dir, id);
        let file = fs
            .open(&path)
            .map_err(|e| Error::io("open the newest segment", &path, e))?;
        let read = |e| Error::io("read the newest segment", &path, e);
        let len = file.file_len().map_err(read)?;
        // What the scan reads is read, not mapped: a range a failed write
        // left unbacked (a full tmpfs does) reads as zeros here, where a
        // map's read of it would kill the process (SIGBUS). The bytes
        // before `from` are not read: zeroed pages nothing touches.
        let mut bytes = vec![0u8; usize::try_from(len).map_err(|_| read(too_long()))?];
        let head = bytes.len().min(HEADER_LEN as usize);
        file.read_range(bytes.get_mut(..head).unwrap_or_default(), 0)
            .map_err(read)?;
        if len <= HEADER_LEN && decode_header(&bytes).is_err() {
            // A rotation crashed before the new header was durable, unless
            // the checkpoint says records of this segment were durable: then
            // the file was cut (nothing is removed; skip-corrupt keeps what
            // the other segments hold).
            self.lost_below_checkpoint(id, len)?;
            drop(file);
            fs.remove_file(&path)
                .map_err(|e| Error::io("remove a torn segment", &path, e))?;
            sync_dir(fs, dir)?;
            self.report.removed_segments.push(id);
            return fresh_segment(fs, dir, fresh);
        }
        let header_len = self
            .check_header(&path, id, decode_header(&bytes))?
            .records_start();
        let from = self.start_of(id, len, header_len)?.unwrap_or(len);
        let from = from.max(head as u64);
        // `from` is within the file: `start_of` gives at most `len`.
        if let Some(rest) = bytes.get_mut(from as usize..) {
            file.read_range(rest, from).map_err(read)?;
        }
        if let Some(cut) = self.frames(id, &bytes, true, from)? {
            // Only zeros: preallocated space, where no record had started
            // (or none left a byte).
            self.report.torn_tail = torn_tail(&bytes, id, cut, self.max_record);
            file.set_len(cut)
                .and_then(|()| file.sync_data())
                .map_err(|e| Error::io("truncate the torn tail", &path, e))?;
        }
        drop(bytes);
        // Whatever a crashed process left in the page cache is made durable
        // now, so the writer may start with the whole segment as its watermark.
        file.sync_data()
            .map_err(|e| Error::io("sync the newest segment", &path, e))?;
        self.report.segments += 1;
        // Every byte below the file's end now holds checked frames, so the
        // map never reads an unbacked range.
        let map = fs
            .map(&path)
            .map_err(|e| Error::io("map the newest segment", &path, e))?;
        // Not copied: the writer's mirror reads these bytes through the map
        // (nothing cuts or writes the file below its length now again) and
        // keeps only what it appends after them.
        Ok(ActiveSegment {
            id,
            file,
            found: Some(map),
            bytes: Vec::new(),
            header_len,
        })
    }
}

impl<F: FnMut(RecordLoc, &[u8], bool) -> std::result::Result<(), String>> Scan<'_, F> {
    /// [`newest`](Self::newest) for a read-only open: the segment's bytes
    /// up to its last whole record, nothing written. A writer may be
    /// appending to it: what follows the last record that decodes is its
    /// unfinished work (or preallocated zeros), not damage.
    fn newest_read_only(
        &mut self,
        fs: &dyn Fs,
        dir: &Path,
        id: u64,
        fresh: Fresh,
    ) -> Result<ActiveSegment> {
        let path = segment_path(dir, id);
        let mut bytes = fs
            .read(&path)
            .map_err(|e| Error::io("read the newest segment", &path, e))?;
        if decode_header(&bytes).is_err() && bytes.len() as u64 <= HEADER_LEN {
            // A segment whose header is not written yet: nothing in it
            // (unless the checkpoint says otherwise, as above).
            self.lost_below_checkpoint(id, bytes.len() as u64)?;
            return Ok(unwritable(Fresh { id, ..fresh }));
        }
        let header_len = self
            .check_header(&path, id, decode_header(&bytes))?
            .records_start();
        let len = bytes.len() as u64;
        let from = self.start_of(id, len, header_len)?.unwrap_or(len);
        if let Some(cut) = self.frames(id, &bytes, true, from)? {
            bytes.truncate(cut as usize);
        }
        self.report.segments += 1;
        Ok(ActiveSegment {
            id,
            file: Arc::new(Unwritable),
            found: None,
            bytes,
            header_len,
        })
    }
}

/// A newest segment too long for this platform's memory.
fn too_long() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::FileTooLarge,
        "the segment is longer than this platform can address",
    )
}

/// The file of a read-only store's newest segment: every write fails.
struct Unwritable;

impl crate::fs::SegmentFile for Unwritable {
    fn write_at(&self, _: &[u8], _: u64) -> std::io::Result<()> {
        Err(read_only())
    }

    fn set_len(&self, _: u64) -> std::io::Result<()> {
        Err(read_only())
    }

    fn sync_data(&self) -> std::io::Result<()> {
        Err(read_only())
    }

    fn map(&self) -> std::io::Result<crate::fs::Mapped> {
        Err(read_only())
    }

    fn file_len(&self) -> std::io::Result<u64> {
        Err(read_only())
    }

    fn read_range(&self, _: &mut [u8], _: u64) -> std::io::Result<()> {
        Err(read_only())
    }
}

fn read_only() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        "the store was opened read-only",
    )
}

/// A read-only open's stand-in for a segment it cannot create: its header,
/// in memory only.
fn unwritable(fresh: Fresh) -> ActiveSegment {
    ActiveSegment {
        id: fresh.id,
        file: Arc::new(Unwritable),
        found: None,
        bytes: encode_header(fresh.id, 0, fresh.store, fresh.prev).to_vec(),
        header_len: HEADER_LEN,
    }
}

/// The segment an open starts when the log has none to continue.
#[derive(Clone, Copy)]
struct Fresh {
    id: u64,
    store: StoreId,
    /// The log's last segment, if it has one.
    prev: Option<Link>,
}

fn fresh_segment(fs: &dyn Fs, dir: &Path, fresh: Fresh) -> Result<ActiveSegment> {
    let header = encode_header(fresh.id, 0, fresh.store, fresh.prev);
    Ok(ActiveSegment {
        id: fresh.id,
        file: create_segment(fs, dir, fresh.id, &header)?,
        found: None,
        bytes: header.to_vec(),
        header_len: HEADER_LEN,
    })
}
