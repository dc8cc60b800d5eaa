//! A read-only checksum scan of a store directory: every segment header,
//! every frame, every record's decoding. It changes nothing on disk, so it
//! can tell an operator exactly what an open would cut or refuse.

use std::path::{Path, PathBuf};

use super::frame::{
    decode_frame, decode_header, find_next_frame, is_preallocated, FORMAT_VERSION, HEADER_LEN,
};
use super::manifest::Manifest;
use super::segments::{list_segment_ids, segment_path, MAX_SEGMENT_ID};
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::record;
use crate::MAX_RECORD_BYTES;

/// One damaged place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The segment id.
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
    /// Damage anywhere (including bytes after the newest segment's last
    /// valid record, which an open would cut as a torn tail, unless they are
    /// all zeros: the writer's preallocated space).
    pub damage: Vec<Damage>,
}

impl VerifyReport {
    /// Whether nothing is damaged.
    pub fn is_clean(&self) -> bool {
        self.damage.is_empty()
    }
}

/// Scans every segment of the log in `dir` (the caller holds the store's
/// lock, or knows nothing writes it), reporting progress as (segments done,
/// segments in all).
pub fn verify_dir(
    fs: &dyn Fs,
    dir: &Path,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<VerifyReport> {
    let manifest = Manifest::read(fs, dir)?;
    let ids = list_segment_ids(fs, dir)?;
    // The segment an open would append to.
    let newest = ids
        .iter()
        .rev()
        .copied()
        .find(|&id| super::recovery::in_tail(fs, dir, &manifest, id));
    let mut report = VerifyReport::default();
    for (i, &id) in ids.iter().enumerate() {
        progress(i, ids.len());
        let path: PathBuf = segment_path(dir, id);
        let bytes = fs
            .read(&path)
            .map_err(|e| Error::io("read a segment", &path, e))?;
        report.bytes += bytes.len() as u64;
        report.segments += 1;
        if id > MAX_SEGMENT_ID {
            let reason = format!("a segment id past {MAX_SEGMENT_ID}, which an open refuses");
            report.damage.push(damage(id, 0, &reason));
            continue;
        }
        let header = match decode_header(&bytes) {
            Ok(h) => h,
            Err(_) => {
                report
                    .damage
                    .push(damage(id, 0, "the segment header is invalid or cut short"));
                continue;
            }
        };
        if header.version != FORMAT_VERSION {
            return Err(Error::UnsupportedFormat {
                path,
                found: header.version,
                supported: FORMAT_VERSION,
            });
        }
        if !manifest.is_live(id, header.flags & super::frame::FLAG_COMPACTED != 0) {
            continue;
        }
        scan_frames(id, &bytes, newest == Some(id), &mut report);
    }
    progress(ids.len(), ids.len());
    Ok(report)
}

fn scan_frames(id: u64, bytes: &[u8], newest: bool, report: &mut VerifyReport) {
    let end = bytes.len() as u64;
    let mut at = HEADER_LEN;
    while at < end {
        match decode_frame(bytes, id, at, MAX_RECORD_BYTES) {
            Ok(frame) => {
                match record::decode(frame.payload(bytes)) {
                    Ok(_) => report.records += 1,
                    Err(e) => report.damage.push(damage(id, at, &e.0)),
                }
                at = frame.end();
            }
            Err(_) if newest && is_preallocated(bytes, at) => break,
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
