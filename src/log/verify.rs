//! A read-only checksum scan of a store directory: every segment header,
//! every frame, every record's decoding. It changes nothing on disk, so it
//! can tell an operator exactly what an open would cut or refuse.

use std::path::{Path, PathBuf};

use super::frame::{
    decode_frame, decode_header, find_next_frame, vouched_for, FORMAT_VERSION, LEGACY_VERSION,
};
use super::layout::survey;
use super::recovery::{torn_tail, Resume, TornTail};
use super::segments::segment_path;
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::log::record;
use crate::options::MAX_RECORD_BYTES;

/// One damaged place.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Damage {
    /// The segment id (0 for a damaged file that is not a segment).
    pub segment: u64,
    /// The byte offset in it.
    pub offset: u64,
    /// What is wrong.
    pub reason: String,
}

/// What a verification found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifyReport {
    /// Segments scanned.
    pub segments: usize,
    /// Records whose frame and body check out.
    pub records: u64,
    /// Bytes scanned.
    pub bytes: u64,
    /// Damage anywhere, acknowledged records found missing, and files of
    /// another store: what an open refuses.
    pub damage: Vec<Damage>,
    /// The newest segment's torn tail, which an open cuts (reported the same
    /// way in its [`OpenReport`](crate::OpenReport)): bytes after its last
    /// valid record that no later record vouches for, so never synced and
    /// never acknowledged. Not damage: a crash or a failed write leaves one.
    pub torn_tail: Option<TornTail>,
}

impl VerifyReport {
    /// Whether nothing is damaged.
    pub fn is_clean(&self) -> bool {
        self.damage.is_empty()
    }
}

/// `{"clean", "segments", "records", "bytes", "damage", "tornTail"}`.
impl serde::Serialize for VerifyReport {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut out = s.serialize_struct("VerifyReport", 6)?;
        out.serialize_field("clean", &self.is_clean())?;
        out.serialize_field("segments", &self.segments)?;
        out.serialize_field("records", &self.records)?;
        out.serialize_field("bytes", &self.bytes)?;
        out.serialize_field("damage", &self.damage)?;
        out.serialize_field("tornTail", &self.torn_tail)?;
        out.end()
    }
}

/// Scans every segment of the log in `dir`, reporting progress as (bytes
/// read, bytes to read). The caller holds the store's lock, or knows
/// nothing writes it, or (`live`) lets a writer append meanwhile: then
/// bytes after the newest segment's last whole record are its unfinished
/// append, not damage. `checkpoint` is where the store's checkpoint says the
/// log reached, if it has a sound one.
pub fn verify_dir(
    fs: &dyn Fs,
    dir: &Path,
    checkpoint: Option<Resume>,
    live: bool,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<VerifyReport> {
    let layout = survey(fs, dir)?;
    let mut report = VerifyReport::default();
    if let Some(Error::Corrupt {
        segment,
        offset,
        reason,
    }) = layout.past_max()
    {
        report.damage.push(damage(segment, offset, &reason));
    }
    for f in &layout.foreign {
        let reason = format!(
            "{} belongs to another store: {}",
            f.path.display(),
            f.reason
        );
        report.damage.push(damage(0, 0, &reason));
    }
    for l in &layout.lost {
        report
            .damage
            .push(damage(l.segment, l.actual, &l.error().to_string()));
    }
    if checkpoint.is_some_and(|r| r.store != layout.store) {
        let reason = format!(
            "CHECKPOINT belongs to another store (this store is {}): an open ignores it",
            layout.store
        );
        report.damage.push(damage(0, 0, &reason));
    }
    let resume = checkpoint.filter(|r| {
        r.store == layout.store && r.generation == layout.manifest.generation && !layout.salvage
    });
    if let Some(r) = resume {
        let actual = if layout.tail.contains(&r.segment) {
            layout.lens.get(&r.segment).copied().unwrap_or(0)
        } else {
            0
        };
        if actual < r.offset {
            let lost = super::layout::Lost {
                segment: r.segment,
                expected: r.offset,
                actual,
                reason: format!(
                    "the checkpoint says the log reached offset {} of segment {}",
                    r.offset, r.segment
                ),
            };
            report
                .damage
                .push(damage(r.segment, actual, &lost.error().to_string()));
        }
    }
    // The segment an open would append to.
    let newest = layout.tail.last().copied();
    let segments: Vec<u64> = layout
        .compacted
        .iter()
        .chain(&layout.tail)
        .copied()
        .collect();
    let size = |id: &u64| usize::try_from(layout.lens.get(id).copied().unwrap_or(0)).unwrap_or(0);
    let total: usize = segments.iter().map(size).sum();
    let mut done = 0;
    for &id in &segments {
        progress(done.min(total), total);
        done += size(&id);
        let path: PathBuf = segment_path(dir, id);
        let bytes = fs
            .read(&path)
            .map_err(|e| Error::io("read a segment", &path, e))?;
        report.bytes += bytes.len() as u64;
        report.segments += 1;
        let header = match decode_header(&bytes) {
            Ok(h) => h,
            Err(_) => {
                report
                    .damage
                    .push(damage(id, 0, "the segment header is invalid or cut short"));
                continue;
            }
        };
        if header.version != FORMAT_VERSION && header.version != LEGACY_VERSION {
            return Err(Error::UnsupportedFormat {
                path,
                found: header.version,
                supported: FORMAT_VERSION,
            });
        }
        // What the checkpoint says the log reached is acknowledged: a bad
        // frame before it is damage, never a torn tail (an open does not
        // even scan it, and its read finds the damage).
        let tail_from = match (newest == Some(id), resume) {
            (false, _) => None,
            (true, Some(r)) if r.segment == id => Some(r.offset),
            (true, _) => Some(0),
        };
        scan_frames(
            id,
            &bytes,
            header.records_start(),
            tail_from,
            live,
            &mut report,
        );
    }
    progress(total, total);
    Ok(report)
}

/// Checks every frame of a segment from `from`. In the newest segment
/// (`tail_from`: where a torn tail may start), a bad frame that no later
/// frame vouches for ends the scan: preallocated zeros, or a torn tail
/// (reported as such, as an open cuts it), or with `unfinished` (a writer
/// may be appending) its unfinished append.
fn scan_frames(
    id: u64,
    bytes: &[u8],
    from: u64,
    tail_from: Option<u64>,
    unfinished: bool,
    report: &mut VerifyReport,
) {
    let end = bytes.len() as u64;
    let mut at = from;
    while at < end {
        match decode_frame(bytes, id, at, MAX_RECORD_BYTES) {
            Ok(frame) => {
                match record::decode(frame.payload(bytes)) {
                    Ok(_) => report.records += 1,
                    Err(e) => report.damage.push(damage(id, at, &e.0)),
                }
                at = frame.end();
            }
            Err(_)
                if tail_from.is_some_and(|t| at >= t)
                    && !vouched_for(bytes, id, at, MAX_RECORD_BYTES) =>
            {
                if !unfinished {
                    report.torn_tail = torn_tail(bytes, id, at, MAX_RECORD_BYTES);
                }
                break;
            }
            Err(e) => {
                report.damage.push(damage(id, at, &e.reason()));
                at = find_next_frame(bytes, id, at + 1, MAX_RECORD_BYTES).unwrap_or(end);
            }
        }
    }
}

fn damage(segment: u64, offset: u64, reason: &str) -> Damage {
    Damage {
        segment,
        offset,
        reason: reason.to_string(),
    }
}
