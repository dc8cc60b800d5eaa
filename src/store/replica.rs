//! What replication reads of a running store: the log as it stands, taken
//! in one consistent view (DESIGN.md §13).

use crate::error::{Error, Result};
use crate::log::frame::{decode_header, StoreId};
use crate::log::segments::{segment_path, Sealed, SegmentData};

use super::Shared;

/// The live log at one moment: the manifest in force and every segment it
/// replays, each as far as it is on disk.
pub(crate) struct LogView {
    /// The synced log position it covers ([`Log::synced_position`](crate::log::writer::Log::synced_position)).
    pub position: u64,
    /// When it was taken, in ms since the Unix epoch.
    pub taken_ms: u64,
    /// The manifest's generation and bytes (`None`: the store was never
    /// compacted, so it has none).
    pub manifest: Option<(u64, Vec<u8>)>,
    /// The segments in replay order.
    pub segments: Vec<SegmentView>,
}

/// One segment of a [`LogView`].
pub(crate) struct SegmentView {
    /// Its id.
    pub id: u64,
    /// How many of its bytes are part of the view: the whole of a sealed
    /// segment, the synced part of the active one.
    pub len: u64,
    /// Whether it is sealed: its bytes never change again.
    pub sealed: bool,
    data: SegmentData,
}

impl SegmentView {
    /// Bytes `from..to` of the segment (within its view).
    pub fn read(&self, from: u64, to: u64) -> Result<Vec<u8>> {
        let short = || Error::corrupt(self.id, from, "a segment is shorter than the log says");
        let (from_at, to_at) = (
            usize::try_from(from).map_err(|_| short())?,
            usize::try_from(to.min(self.len)).map_err(|_| short())?,
        );
        match &self.data {
            SegmentData::Sealed(sealed) => sealed
                .bytes()?
                .get(from_at..to_at)
                .map(<[u8]>::to_vec)
                .ok_or_else(short),
            SegmentData::Active(mirror) => mirror.read().copy(from_at..to_at).ok_or_else(short),
        }
    }
}

impl Shared {
    /// The log as it stands: the segments of the manifest in force, read
    /// under its lock so that no merge switches the log meanwhile, and the
    /// active segment up to where it is synced. A segment newer than the
    /// synced point (a rotation after it was read) is left to the next view.
    pub(crate) fn log_view(&self) -> Result<LogView> {
        let taken_ms = super::now_ms();
        let (active, durable, position) = self.writer.durable_point();
        let store = self.writer.store();
        let manifest = self.manifest.lock();
        let mut segments = Vec::new();
        for (i, &id) in manifest.compacted.iter().enumerate() {
            let data = self.segment_data(id)?;
            let len = match &data {
                SegmentData::Sealed(s) => s.len(),
                SegmentData::Active(_) => return Err(not_sealed(id)),
            };
            if manifest.lens.get(i).is_some_and(|&l| l != len) {
                return Err(Error::corrupt(
                    id,
                    len,
                    "a compacted segment's length is not the manifest's",
                ));
            }
            segments.push(SegmentView {
                id,
                len,
                sealed: true,
                data,
            });
        }
        let mut tail: Vec<u64> = self
            .segments
            .ids()
            .into_iter()
            .filter(|&id| {
                id >= manifest.tail_from && id <= active && !manifest.compacted.contains(&id)
            })
            .collect();
        tail.sort_unstable();
        for id in tail {
            let data = self.segment_data(id)?;
            let (len, sealed) = match &data {
                SegmentData::Sealed(s) => {
                    let bytes = s.bytes()?;
                    // A merge's output not yet switched in carries the
                    // compacted flag: not part of the log (yet).
                    if decode_header(bytes).is_ok_and(|h| h.compacted()) {
                        continue;
                    }
                    (s.len(), true)
                }
                SegmentData::Active(mirror) if id == active => {
                    (durable.min(mirror.read().len() as u64), false)
                }
                SegmentData::Active(_) => return Err(not_sealed(id)),
            };
            segments.push(SegmentView {
                id,
                len,
                sealed,
                data,
            });
        }
        let manifest = (manifest.generation > 0 || !manifest.compacted.is_empty()).then(|| {
            let mut m = manifest.clone();
            m.store = Some(store);
            m.lens = segments
                .iter()
                .take(m.compacted.len())
                .map(|s| s.len)
                .collect();
            (m.generation, m.encode())
        });
        Ok(LogView {
            position,
            taken_ms,
            manifest,
            segments,
        })
    }

    /// The store's identity.
    pub(crate) fn writer_store(&self) -> StoreId {
        self.writer.store()
    }

    /// Every byte before this log position is synced.
    pub(crate) fn synced_position(&self) -> u64 {
        self.writer.synced_position()
    }

    /// The epoch this store last claimed the replica `target` with, from
    /// its `REPLICA` file (DESIGN.md §13); `None` if it has none for that
    /// replica, or the file does not check out.
    pub(crate) fn replica_marker(&self, target: &str) -> Option<u64> {
        let bytes = self
            .options
            .fs
            .read(&self.writer.dir().join(REPLICA))
            .ok()?;
        let (body, crc) = bytes.split_at_checked(bytes.len().checked_sub(4)?)?;
        if crc32fast::hash(body).to_le_bytes() != crc || body.get(..8)? != REPLICA_MAGIC {
            return None;
        }
        let epoch = u64::from_le_bytes(body.get(8..16)?.try_into().ok()?);
        (body.get(16..)? == target.as_bytes()).then_some(epoch)
    }

    /// Records, durably, that this store claimed the replica `target` with
    /// `epoch`.
    pub(crate) fn set_replica_marker(&self, target: &str, epoch: u64) -> Result<()> {
        let mut bytes = REPLICA_MAGIC.to_vec();
        bytes.extend_from_slice(&epoch.to_le_bytes());
        bytes.extend_from_slice(target.as_bytes());
        let crc = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        let (fs, dir) = (self.options.fs.as_ref(), self.writer.dir());
        let tmp = dir.join("REPLICA.tmp");
        fs.write_file(&tmp, &bytes)
            .map_err(|e| Error::io("write the replica marker", &tmp, e))?;
        fs.rename(&tmp, &dir.join(REPLICA))
            .map_err(|e| Error::io("write the replica marker", &tmp, e))?;
        self.writer.sync_dir()
    }

    /// When, as this store last saw it, the replica `target` held its log
    /// as of (ms since the Unix epoch), from its `REPLICA.covered` hint;
    /// `None` if there is none for that replica.
    pub(crate) fn covered_hint(&self, target: &str) -> Option<u64> {
        let bytes = self
            .options
            .fs
            .read(&self.writer.dir().join(COVERED))
            .ok()?;
        let (body, crc) = bytes.split_at_checked(bytes.len().checked_sub(4)?)?;
        if crc32fast::hash(body).to_le_bytes() != crc {
            return None;
        }
        let ms = u64::from_le_bytes(body.get(..8)?.try_into().ok()?);
        (body.get(8..)? == target.as_bytes()).then_some(ms)
    }

    /// Records, unsynced (a hint: a power loss may leave an older one,
    /// which only makes the lag read longer), that the replica `target`
    /// holds the log as of `ms`.
    pub(crate) fn set_covered_hint(&self, target: &str, ms: u64) {
        let mut bytes = ms.to_le_bytes().to_vec();
        bytes.extend_from_slice(target.as_bytes());
        let crc = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        let (fs, dir) = (self.options.fs.as_ref(), self.writer.dir());
        let tmp = dir.join("REPLICA.covered.tmp");
        if fs.write_file(&tmp, &bytes).is_ok() {
            let _ = fs.rename(&tmp, &dir.join(COVERED));
        }
    }

    /// Whether a failed write stopped the log.
    pub(crate) fn writer_poisoned(&self) -> bool {
        self.writer.is_poisoned()
    }

    /// Segment `id` as readers see it, or mapped from its file (a merge
    /// that failed after its switch may not have handed it to readers).
    fn segment_data(&self, id: u64) -> Result<SegmentData> {
        if let Some(data) = self.segments.get(id) {
            return Ok(data);
        }
        let fs = self.options.fs.clone();
        let path = segment_path(self.writer.dir(), id);
        let len = fs
            .list(self.writer.dir())
            .map_err(|e| Error::io("list the store's directory", self.writer.dir(), e))?
            .into_iter()
            .find(|(name, _)| path.file_name().is_some_and(|n| n == name.as_str()))
            .map(|(_, len)| len)
            .ok_or_else(|| Error::corrupt(id, 0, "a segment of the log is missing"))?;
        Ok(SegmentData::Sealed(std::sync::Arc::new(Sealed::unmapped(
            fs, path, len,
        ))))
    }
}

/// The file that says which epoch the store last claimed its replica with.
const REPLICA: &str = "REPLICA";
/// The hint of how far the replica held the log (see `covered_hint`).
const COVERED: &str = "REPLICA.covered";
const REPLICA_MAGIC: [u8; 8] = *b"CTXLRPM\0";

fn not_sealed(id: u64) -> Error {
    Error::corrupt(id, 0, "a segment before the active one is not sealed")
}
