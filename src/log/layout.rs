//! What the files of a store directory say about its log, before a record
//! is read: which store it is, which segments make up the log and in what
//! order, which files belong to another store, and where the log is
//! shorter than its own files say it reached. The open acts on it (and
//! refuses or reports); `verify` only reports it. Nothing here writes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::frame::{
    decode_header, HeaderError, SegmentHeader, StoreId, HEADER_LEN, LEGACY_HEADER_LEN,
};
use super::identity;
use super::manifest::{self, Manifest, MANIFEST};
use super::segments::{segment_id_of, segment_path, MAX_SEGMENT_ID};
use crate::error::{Error, Result};
use crate::fs::Fs;

/// Acknowledged records that are missing: a file of the store says the
/// log reached further than the segment now does.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Lost {
    /// The segment.
    pub segment: u64,
    /// How long it was (at least) when the store last knew it.
    pub expected: u64,
    /// How long it is (0: the file is missing).
    pub actual: u64,
    /// Which file knew, and what it said.
    pub reason: String,
}

impl Lost {
    /// The error an open in `Strict` mode refuses with.
    pub fn error(&self) -> Error {
        Error::MissingRecords {
            segment: self.segment,
            expected: self.expected,
            actual: self.actual,
            reason: self.reason.clone(),
        }
    }
}

/// A file of another store, found in this store's directory and left alone.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Foreign {
    /// The file.
    #[serde(serialize_with = "path_text")]
    pub path: PathBuf,
    /// Why it is another store's.
    pub reason: String,
}

impl Foreign {
    /// The error an open in `Strict` mode refuses with.
    pub fn error(&self) -> Error {
        Error::ForeignFile {
            path: self.path.clone(),
            reason: self.reason.clone(),
        }
    }
}

/// How the store's identity was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity {
    /// In `IDENTITY`.
    Found,
    /// `IDENTITY` is missing or damaged; the segments and the manifest
    /// name the store (the one most of them name, if they disagree).
    FromSegments,
    /// Neither says: a new store, or one written before identities.
    New,
}

/// The log as the directory lays it out.
#[derive(Debug)]
pub struct Layout {
    /// The store's identity.
    pub store: StoreId,
    /// Where it came from.
    pub identity: Identity,
    /// The manifest in force (the empty one if there is none, or if it is
    /// another store's).
    pub manifest: Manifest,
    /// The manifest is another store's: nothing is removed as left over,
    /// and every segment of this store is read, compacted ones first.
    pub salvage: bool,
    /// Compacted segments, in replay order (present ones only).
    pub compacted: Vec<u64>,
    /// Tail segments, in id order: the last is the one appends continue in.
    pub tail: Vec<u64>,
    /// Segments left over from an interrupted or superseded compaction.
    pub leftovers: Vec<u64>,
    /// Files of another store.
    pub foreign: Vec<Foreign>,
    /// Where acknowledged records are missing.
    pub lost: Vec<Lost>,
    /// Every segment file's length, by id.
    pub lens: BTreeMap<u64, u64>,
    /// Every segment header that validates, by id.
    pub headers: BTreeMap<u64, SegmentHeader>,
    /// Why each other segment header does not, by id.
    pub bad_headers: BTreeMap<u64, HeaderError>,
    /// The lowest segment id no file has.
    pub next_id: u64,
}

impl Layout {
    /// Segment `id`'s header as the survey read it.
    pub fn header(&self, id: u64) -> std::result::Result<SegmentHeader, HeaderError> {
        match self.headers.get(&id) {
            Some(header) => Ok(*header),
            // (A segment the survey did not read is past the largest id,
            // which an open refuses first.)
            None => Err(self
                .bad_headers
                .get(&id)
                .cloned()
                .unwrap_or(HeaderError::Short)),
        }
    }

    /// A segment file named past the largest id a store uses (which no
    /// store of this format wrote; an open refuses it), if there is one.
    pub fn past_max(&self) -> Option<Error> {
        let (&id, _) = self.lens.iter().next_back()?;
        (id > MAX_SEGMENT_ID).then(|| {
            Error::corrupt(
                id,
                0,
                format!("a segment id past {MAX_SEGMENT_ID}, the largest a store uses"),
            )
        })
    }
}

/// Reads the directory's identity, manifest and segment headers.
pub fn survey(fs: &dyn Fs, dir: &Path) -> Result<Layout> {
    survey_listed(fs, dir, list(fs, dir)?)
}

/// The directory's files and their lengths.
pub fn list(fs: &dyn Fs, dir: &Path) -> Result<Vec<(String, u64)>> {
    fs.list(dir)
        .map_err(|e| Error::io("list the store directory", dir, e))
}

/// [`survey`], given the directory's `files` (as [`list`] gives them).
pub fn survey_listed(fs: &dyn Fs, dir: &Path, files: Vec<(String, u64)>) -> Result<Layout> {
    let lens = segment_lens(files);
    let mut read = BTreeMap::new();
    for &id in lens.keys().filter(|&&id| id <= MAX_SEGMENT_ID) {
        let path = segment_path(dir, id);
        let prefix = fs
            .read_prefix(&path, HEADER_LEN as usize)
            .map_err(|e| Error::io("read a segment header", &path, e))?;
        read.insert(id, decode_header(&prefix));
    }
    let headers: BTreeMap<u64, SegmentHeader> = read
        .iter()
        .filter_map(|(&id, h)| h.as_ref().ok().map(|h| (id, *h)))
        .collect();
    let bad_headers = read
        .iter()
        .filter_map(|(&id, h)| h.as_ref().err().map(|e| (id, e.clone())))
        .collect();
    let manifest = Manifest::read(fs, dir)?;
    let manifest_store = match &manifest {
        manifest::Read::Found(m) => m.store,
        _ => None,
    };
    let (store, identity) = identify(fs, dir, &headers, manifest_store)?;
    let mut layout = Layout {
        store,
        identity,
        manifest: Manifest::default(),
        salvage: false,
        compacted: Vec::new(),
        tail: Vec::new(),
        leftovers: Vec::new(),
        foreign: Vec::new(),
        lost: Vec::new(),
        next_id: lens.keys().next_back().map_or(1, |&id| id + 1),
        lens,
        headers,
        bad_headers,
    };
    for (&id, h) in &layout.headers {
        if let Some(other) = h.store.filter(|&s| s != store) {
            layout.foreign.push(Foreign {
                path: segment_path(dir, id),
                reason: format!("its header names store {other}; this store is {store}"),
            });
        }
    }
    match manifest {
        manifest::Read::Missing => {}
        manifest::Read::Damaged => {
            return Err(Error::corrupt(
                0,
                0,
                "the MANIFEST fails its checksum or format; restore it from a backup",
            ))
        }
        manifest::Read::Found(m) => match m.store.filter(|&s| s != store) {
            Some(other) => {
                layout.foreign.push(Foreign {
                    path: dir.join(MANIFEST),
                    reason: format!("it names store {other}; this store is {store}"),
                });
                layout.salvage = true;
            }
            None => layout.manifest = m,
        },
    }
    layout.classify(&read);
    layout.find_lost();
    Ok(layout)
}

/// The store's identity: `IDENTITY`'s, or else the one most of its
/// segments and its manifest name (among as many, the newest segment's:
/// the one that was being written). Most, not the newest alone: one stray
/// file of another store must not make every file of this one foreign.
fn identify(
    fs: &dyn Fs,
    dir: &Path,
    headers: &BTreeMap<u64, SegmentHeader>,
    manifest: Option<StoreId>,
) -> Result<(StoreId, Identity)> {
    if let identity::Read::Found(id) = identity::read(fs, dir)? {
        return Ok((id, Identity::Found));
    }
    // Per store named: (files naming it, its newest segment's id + 1).
    let mut named: Vec<(StoreId, (usize, u64))> = Vec::new();
    let named_by = headers
        .iter()
        .filter_map(|(&id, h)| Some((h.store?, id + 1)))
        .chain(manifest.map(|s| (s, 0)));
    for (store, newest) in named_by {
        match named.iter_mut().find(|(s, _)| *s == store) {
            Some((_, (files, n))) => {
                *files += 1;
                *n = (*n).max(newest);
            }
            None => named.push((store, (1, newest))),
        }
    }
    match named.into_iter().max_by_key(|&(_, rank)| rank) {
        Some((id, _)) => Ok((id, Identity::FromSegments)),
        None => Ok((identity::fresh()?, Identity::New)),
    }
}

/// Every segment file's length, by id. Other files are ignored.
fn segment_lens(files: Vec<(String, u64)>) -> BTreeMap<u64, u64> {
    files
        .into_iter()
        .filter_map(|(name, len)| Some((segment_id_of(&name)?, len)))
        .collect()
}

impl Layout {
    /// Whether segment `id` is another store's.
    fn is_foreign(&self, id: u64) -> bool {
        self.headers
            .get(&id)
            .and_then(|h| h.store)
            .is_some_and(|s| s != self.store)
    }

    /// Sorts this store's segments into compacted, tail and left over.
    fn classify(&mut self, read: &BTreeMap<u64, std::result::Result<SegmentHeader, HeaderError>>) {
        let ours: Vec<u64> = read
            .keys()
            .copied()
            .filter(|&id| !self.is_foreign(id))
            .collect();
        let flagged = |id: u64| {
            read.get(&id)
                .is_some_and(|h| h.as_ref().is_ok_and(|h| h.compacted()))
        };
        if self.salvage {
            self.compacted = ours.iter().copied().filter(|&id| flagged(id)).collect();
            self.tail = ours.into_iter().filter(|&id| !flagged(id)).collect();
            return;
        }
        self.compacted = self
            .manifest
            .compacted
            .iter()
            .copied()
            .filter(|id| ours.contains(id))
            .collect();
        for id in ours {
            if self.manifest.compacted.contains(&id) {
                continue;
            }
            if self.manifest.is_live(id, flagged(id)) {
                self.tail.push(id);
            } else {
                self.leftovers.push(id);
            }
        }
    }

    /// Compares the log with what its own files say it reached: the
    /// manifest's compacted segments and their lengths, its first tail
    /// segment, and each tail segment's link to the one before.
    fn find_lost(&mut self) {
        let m = &self.manifest;
        for (i, &id) in m.compacted.iter().enumerate() {
            // (A version 1 manifest did not record lengths: at least a header.)
            let expected = m.lens.get(i).copied().unwrap_or(LEGACY_HEADER_LEN);
            let actual = match self.is_foreign(id) {
                true => 0,
                false => self.lens.get(&id).copied().unwrap_or(0),
            };
            if actual < expected {
                self.lost.push(Lost {
                    segment: id,
                    expected,
                    actual,
                    reason: format!(
                        "the MANIFEST lists segment {id} as a compacted segment of {expected} bytes"
                    ),
                });
            }
        }
        if m.store.is_some() && m.tail_from > 0 && !self.lens.contains_key(&m.tail_from) {
            self.lost.push(Lost {
                segment: m.tail_from,
                expected: HEADER_LEN,
                actual: 0,
                reason: "the MANIFEST names it as the first segment after the compacted ones"
                    .into(),
            });
        }
        let mut before: Option<u64> = None;
        for &id in &self.tail {
            let link = self.headers.get(&id).and_then(|h| h.prev);
            if let Some(link) = link {
                let reason = || {
                    format!(
                        "segment {id} was started after segment {} was sealed at {} bytes",
                        link.segment, link.len
                    )
                };
                // The first tail segment may follow one a compaction
                // rewrote (or, in salvage, one the manifest would say).
                let compacted_away =
                    before.is_none() && (self.salvage || link.segment < m.tail_from);
                let actual = match self.is_foreign(link.segment) {
                    true => None,
                    false => self.lens.get(&link.segment).copied(),
                };
                match actual {
                    Some(actual) if before == Some(link.segment) && actual < link.len => {
                        self.lost.push(Lost {
                            segment: link.segment,
                            expected: link.len,
                            actual,
                            reason: reason(),
                        })
                    }
                    None if !compacted_away => self.lost.push(Lost {
                        segment: link.segment,
                        expected: link.len,
                        actual: 0,
                        reason: reason(),
                    }),
                    _ => {}
                }
            }
            before = Some(id);
        }
    }
}

/// A path as its text (invalid UTF-8 replaced), for the JSON of reports.
pub(crate) fn path_text<S: serde::Serializer>(
    path: &std::path::Path,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.serialize_str(&path.to_string_lossy())
}
