//! The append path: the active segment, rotation, and the three durabilities.
//!
//! Lock order (see DESIGN.md): `active` may be held while taking `sync`, never
//! the other way round; no file is synced while `sync` is held.
//!
//! Group commit uses one syncer thread per store: appenders copy their frames
//! to the active segment's mirror, ask for a sync up to their end and wait;
//! the syncer, while anything appended is not yet synced, writes it all to the
//! file in one `pwrite` (the flush) and runs `fdatasync`, back to back, each
//! sync covering everything appended before its flush, so syncs follow each
//! other without waiting for the woken appenders. While more appenders wait
//! than there are CPUs, a waiter yields a bounded number of times before it
//! sleeps on the condvar (see [`Options::commit_yields`]). A sync that
//! would start right after the one before (appends came in during it) may
//! first wait a little for more appends to join it (see
//! [`Options::commit_linger`]).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::{Condvar, Mutex, RwLock};

use super::frame::{encode_frame, encode_header, Link, StoreId, FRAME_HEADER_LEN, HEADER_LEN};
use super::segments::{
    segment_path, sync_dir, Mirror, MirrorBytes, RecordLoc, Sealed, SegmentData, Segments,
    MAX_SEGMENT_ID,
};
use crate::error::{Error, Result};
use crate::fs::{Fs, SegmentFile};
use crate::options::{Durability, Options};

/// The segment the writer continues with, after recovery.
pub struct ActiveSegment {
    /// Its id.
    pub id: u64,
    /// The file, open for writing.
    pub file: Arc<dyn SegmentFile>,
    /// Its valid bytes as the open found them, mapped (`None` for a new
    /// segment).
    pub found: Option<crate::fs::Mapped>,
    /// Its valid bytes after those (from offset 0 without them).
    pub bytes: Vec<u8>,
    /// Where its first record starts (its header's length).
    pub header_len: u64,
}

struct Active {
    id: u64,
    file: Arc<dyn SegmentFile>,
    mirror: Mirror,
    /// Where the segment's first record starts (its header's length: a
    /// segment recovery continues may be of the first format version).
    header_len: u64,
    /// Bytes in the active segment (the next frame's offset).
    len: u64,
    /// The file is zero-filled up to here (at least `len`): frames written
    /// below it overwrite allocated blocks, so their sync changes no
    /// metadata. See [`Options::preallocate`].
    prepared: u64,
    /// The file holds the mirror's bytes up to here. With `GroupCommit`,
    /// appends only copy their frames to the mirror, and whoever syncs next
    /// writes everything after this in one `pwrite` first; otherwise each
    /// append writes its own frame and this is `len`.
    flushed: u64,
    /// The log position just past the last byte written: a byte count that
    /// only grows, over all segments, starting at the active segment's length
    /// at open.
    written: u64,
    /// The log position of the active segment's offset 0.
    base: u64,
}

#[derive(Default)]
struct SyncState {
    /// The furthest log position an appender waits to see synced.
    requested: u64,
    /// The writer is closing: the syncer stops.
    shutdown: bool,
    /// How many times `requested` was raised since the syncer last looked
    /// (see [`Log::run_syncer`]).
    asked: u32,
}

/// Appends framed records to the log; owns the group-commit syncer thread.
pub struct LogWriter {
    log: Arc<Log>,
    syncer: Option<std::thread::JoinHandle<()>>,
}

impl LogWriter {
    /// The log, shared (for a [`Durable`] that outlives a borrow).
    pub fn log(&self) -> &Arc<Log> {
        &self.log
    }
}

impl std::ops::Deref for LogWriter {
    type Target = Log;

    fn deref(&self) -> &Log {
        &self.log
    }
}

impl Drop for LogWriter {
    fn drop(&mut self) {
        self.log.sync.lock().shutdown = true;
        self.log.work.notify_all();
        if let Some(syncer) = self.syncer.take() {
            let _ = syncer.join();
        }
    }
}

/// The log's shared state.
pub struct Log {
    fs: Arc<dyn Fs>,
    dir: PathBuf,
    /// The store's identity, written into every segment header.
    store: StoreId,
    segment_bytes: u64,
    /// See [`Options::preallocate`].
    preallocate: u64,
    durability: Durability,
    segments: Arc<Segments>,
    active: Mutex<Active>,
    sync: Mutex<SyncState>,
    /// Signalled when a sync completes (or the log is poisoned).
    synced_cv: Condvar,
    /// Signalled when an appender asks for a sync, or at shutdown.
    work: Condvar,
    poisoned: AtomicBool,
    /// What the failed write or sync that poisoned the log met.
    poison_cause: Mutex<Option<std::io::ErrorKind>>,
    /// Every byte before this log position is on disk. Read without a lock;
    /// advanced under `sync`, so that a waiter that checked it under `sync`
    /// cannot miss the wake-up.
    synced: AtomicU64,
    /// Appenders inside `wait_durable`.
    waiting: AtomicUsize,
    /// Syncs of appended bytes begun and ended (see [`Log::sync_activity`]).
    syncs_begun: AtomicU64,
    syncs_ended: AtomicU64,
    /// The CPUs this process may run on.
    cpus: usize,
    /// How many times a waiter yields before it sleeps, while more
    /// appenders wait than there are CPUs ([`Options::commit_yields`]).
    commit_yields: u32,
    /// How long, in nanoseconds, a sync that follows another back to back
    /// first waits for more appends ([`Options::commit_linger`]).
    linger_nanos: AtomicU64,
    /// Syncs the syncer ran, and how many of them lingered first.
    syncer_syncs: AtomicU64,
    lingered: AtomicU64,
    /// The next segment id to hand out (to a rotation or a compaction).
    next_id: AtomicU64,
    /// Where each append that is written but not yet published starts
    /// (segment, offset): a checkpoint taken while appends are
    /// in flight must resume from the earliest of them.
    in_flight: Mutex<std::collections::BTreeSet<(u64, u64)>>,
    /// Tasks awaiting a [`Durable`], with the position each waits for:
    /// woken by the sync that covers it, or when the log is poisoned.
    /// Registered and drained under this lock, which is taken after
    /// `synced` is advanced (or the log poisoned), so none is missed.
    wakers: Mutex<Vec<(u64, Waker)>>,
}

impl LogWriter {
    /// Continues appending to the segment recovery left active, for store
    /// `store`.
    pub fn resume(
        dir: PathBuf,
        options: &Options,
        segments: Arc<Segments>,
        active: ActiveSegment,
        next_id: u64,
        store: StoreId,
    ) -> Self {
        let ActiveSegment {
            id,
            file,
            found,
            bytes,
            header_len,
        } = active;
        let (segment_bytes, durability) = (options.segment_bytes, options.durability);
        let mirror = new_mirror(segment_bytes, found.map(Arc::new), bytes);
        let len = mirror.read().len() as u64;
        segments.insert(id, SegmentData::Active(mirror.clone()));
        let log = Arc::new(Log {
            fs: options.fs.clone(),
            dir,
            store,
            segment_bytes,
            preallocate: options.preallocate,
            durability,
            segments,
            active: Mutex::new(Active {
                id,
                file,
                mirror,
                header_len,
                len,
                prepared: len,
                flushed: len,
                written: len,
                base: 0,
            }),
            // Recovery synced the segment, so everything in it is durable.
            sync: Mutex::new(SyncState {
                requested: len,
                shutdown: false,
                asked: 0,
            }),
            synced_cv: Condvar::new(),
            work: Condvar::new(),
            poisoned: AtomicBool::new(false),
            poison_cause: Mutex::new(None),
            synced: AtomicU64::new(len),
            waiting: AtomicUsize::new(0),
            syncs_begun: AtomicU64::new(0),
            syncs_ended: AtomicU64::new(0),
            cpus: std::thread::available_parallelism().map_or(1, usize::from),
            commit_yields: options.commit_yields,
            linger_nanos: AtomicU64::new(linger_nanos(options.commit_linger)),
            syncer_syncs: AtomicU64::new(0),
            lingered: AtomicU64::new(0),
            next_id: AtomicU64::new(next_id.max(id + 1)),
            in_flight: Mutex::new(std::collections::BTreeSet::new()),
            wakers: Mutex::new(Vec::new()),
        });
        let syncer = (durability == Durability::GroupCommit).then(|| {
            let log = log.clone();
            std::thread::spawn(move || log.run_syncer())
        });
        Self { log, syncer }
    }
}

impl Log {
    /// Appends one record and returns once it is as durable as the store's
    /// durability promises. The caller must call [`Log::published`] with its
    /// location once the record is visible in the index (on failure this
    /// does it).
    pub fn append(&self, payload: &[u8]) -> Result<RecordLoc> {
        let (loc, file, end) = self.write(payload)?;
        let durable = self.make_durable(file.as_ref(), loc.segment, end);
        if durable.is_err() {
            self.published(loc);
        }
        durable.map(|()| loc)
    }

    /// Returns once the active segment `segment` (`file`) is durable up to
    /// `end` as the store's durability promises.
    fn make_durable(&self, file: &dyn SegmentFile, segment: u64, end: u64) -> Result<()> {
        match self.durability {
            Durability::Sync => self.sync_file(file, segment, end),
            Durability::GroupCommit => self.wait_durable(end),
            Durability::Buffered => Ok(()),
        }
    }

    /// Appends records back to back and returns once all of them are as
    /// durable as the store's durability promises, with one sync for all
    /// (a rotation between two of them syncs the sealed segment as it
    /// always does). The caller publishes each location as
    /// [`Log::append`]'s caller does (on failure this does it). A crash
    /// before the sync returns can keep a prefix of them, as it can of
    /// appends made one by one.
    pub fn append_all(&self, payloads: &[Vec<u8>]) -> Result<Vec<RecordLoc>> {
        let mut locs = Vec::with_capacity(payloads.len());
        let mut last = None;
        for payload in payloads {
            match self.write(payload) {
                Ok((loc, file, end)) => {
                    locs.push(loc);
                    last = Some((loc.segment, file, end));
                }
                Err(e) => {
                    locs.iter().for_each(|&loc| self.published(loc));
                    return Err(e);
                }
            }
        }
        let durable = match &last {
            Some((segment, file, end)) => self.make_durable(file.as_ref(), *segment, *end),
            None => Ok(()),
        };
        if durable.is_err() {
            locs.iter().for_each(|&loc| self.published(loc));
        }
        durable.map(|()| locs)
    }

    /// Appends one record without waiting for it to be durable (with
    /// `Sync`, the append syncs its file before it returns, as
    /// [`Log::append`] does); returns where it went and the log position
    /// just past it, for [`Log::durable`] or [`Log::wait_until`]. The
    /// caller publishes it as [`Log::append`]'s caller does, once durable
    /// (on failure this does it).
    pub fn append_deferred(&self, payload: &[u8]) -> Result<(RecordLoc, u64)> {
        let (loc, file, end) = self.write(payload)?;
        if self.durability == Durability::Sync {
            if let Err(e) = self.sync_file(file.as_ref(), loc.segment, end) {
                self.published(loc);
                return Err(e);
            }
        }
        Ok((loc, end))
    }

    /// Returns once every byte before log position `end` is as durable as
    /// the store's durability promises (a thread's wait: see
    /// [`Log::durable`] for a task's).
    pub fn wait_until(&self, end: u64) -> Result<()> {
        match self.durability {
            Durability::GroupCommit => self.wait_durable(end),
            Durability::Sync | Durability::Buffered => Ok(()),
        }
    }

    /// The record at `loc` is published (or abandoned).
    pub fn published(&self, loc: RecordLoc) {
        self.in_flight
            .lock()
            .remove(&(loc.segment, u64::from(loc.offset)));
    }

    /// Where a checkpoint taken now must resume reading: the start of the
    /// earliest append not yet published, or the end of the log.
    pub fn resume_point(&self) -> (u64, u64) {
        let active = self.active.lock();
        let in_flight = self.in_flight.lock();
        in_flight
            .first()
            .copied()
            .unwrap_or((active.id, active.len))
    }

    /// The active segment and how far its bytes are on disk: every byte of
    /// it before the offset is synced (at least its header, which its
    /// creation synced). Segments before it are sealed, so synced whole.
    /// Last, the synced log position (see [`Log::synced_position`]).
    #[cfg_attr(not(feature = "replicate"), allow(dead_code))]
    pub fn durable_point(&self) -> (u64, u64, u64) {
        let active = self.active.lock();
        let synced = self.synced.load(Ordering::Acquire);
        let offset = synced
            .saturating_sub(active.base)
            .clamp(active.header_len.min(active.len), active.len);
        (active.id, offset, synced)
    }

    /// Every byte before this log position is on disk: a count of bytes
    /// that only grows while the store is open (over all segments, from the
    /// active segment's length at open).
    #[cfg_attr(not(feature = "replicate"), allow(dead_code))]
    pub fn synced_position(&self) -> u64 {
        self.synced.load(Ordering::Acquire)
    }

    /// How many syncs of appended bytes (a `Sync` append's, the group-commit
    /// syncer's, `Store::sync`'s) have begun and how many have ended: a
    /// merge writes its next piece only once enough of them ended since its
    /// last, or none began for a while (see `store/maintain.rs`).
    pub fn sync_activity(&self) -> (u64, u64) {
        let ended = self.syncs_ended.load(Ordering::Acquire);
        (self.syncs_begun.load(Ordering::Relaxed).max(ended), ended)
    }

    /// Writes one framed record to the active segment; returns where it went,
    /// the file, and the log position just past it.
    fn write(&self, payload: &[u8]) -> Result<(RecordLoc, Arc<dyn SegmentFile>, u64)> {
        let size = FRAME_HEADER_LEN + payload.len() as u64;
        let mut active = self.active.lock();
        self.check_poison()?;
        if active.len > active.header_len && active.len + size > self.segment_bytes {
            self.rotate(&mut active)?;
        }
        // The durable watermark stored in the frame.
        let durable = self
            .synced
            .load(Ordering::Acquire)
            .saturating_sub(active.base)
            .clamp(active.header_len, active.len);
        let durable = u32::try_from(durable).map_err(|_| self.too_big(active.id))?;
        let loc = RecordLoc {
            segment: active.id,
            offset: u32::try_from(active.len).map_err(|_| self.too_big(active.id))?,
            len: u32::try_from(payload.len()).map_err(|_| self.too_big(active.id))?,
        };
        encode_frame(
            active.id,
            active.len,
            durable,
            payload,
            active.mirror.write().appended(),
        );
        // With `GroupCommit` the next flush writes it, before the sync that
        // acknowledges it; otherwise it is written now.
        if self.durability != Durability::GroupCommit {
            let end = active.len + size;
            if let Err(e) = self.flush(&mut active, end) {
                // Remove whatever part of the frame reached the file and the
                // mirror, so that the next append starts from clean bytes; if
                // even that fails, the file's contents are unknown and the
                // store must stop writing.
                if active.file.set_len(active.len).is_err() {
                    self.poison(e.kind());
                }
                active.prepared = active.len;
                let len = usize::try_from(active.len).unwrap_or(usize::MAX);
                active.mirror.write().truncate(len);
                return Err(Error::io(
                    "append to the active segment",
                    self.path(active.id),
                    e,
                ));
            }
        }
        self.in_flight
            .lock()
            .insert((loc.segment, u64::from(loc.offset)));
        active.len += size;
        active.written += size;
        if active.len > active.prepared {
            self.preallocate(&mut active);
        }
        Ok((loc, active.file.clone(), active.written))
    }

    fn too_big(&self, id: u64) -> Error {
        Error::InvalidParams {
            field: "segment_bytes",
            reason: format!("segment {id} would pass 4 GiB; use a smaller segment size"),
        }
    }

    /// Seals the active segment and starts the next one.
    ///
    /// Order: write and sync the old segment without its zero-filled rest,
    /// create the new one with its header (which names the old one and its
    /// sealed length), sync it and the directory, then switch. A crash
    /// before the switch leaves a new segment holding only a header (or
    /// less), which recovery removes.
    fn rotate(&self, active: &mut Active) -> Result<()> {
        let old_path = self.path(active.id);
        self.seal(active, "sync the segment being sealed")?;
        let id = self.allocate_segment_id()?;
        let prev = Link {
            segment: active.id,
            len: active.len,
        };
        let header = encode_header(id, 0, self.store, Some(prev));
        let file = create_segment(self.fs.as_ref(), &self.dir, id, &header)?;
        let sealed = active
            .file
            .map()
            .map_err(|e| Error::io("map the sealed segment", &old_path, e))?;
        self.segments.insert(
            active.id,
            SegmentData::Sealed(Arc::new(Sealed::mapped(sealed))),
        );
        let mirror = new_mirror(self.segment_bytes, None, header.to_vec());
        self.segments
            .insert(id, SegmentData::Active(mirror.clone()));
        active.id = id;
        active.file = file;
        active.mirror = mirror;
        active.header_len = HEADER_LEN;
        active.len = HEADER_LEN;
        active.prepared = HEADER_LEN;
        active.flushed = HEADER_LEN;
        active.base = active.written - HEADER_LEN;
        Ok(())
    }

    /// After a frame that grew the file: zero-fills it from the frame's end
    /// to [`Options::preallocate`] bytes further (within the segment's size), so that
    /// the next frames overwrite. Only an optimisation: if the write fails,
    /// appends extend the file themselves, as they would without it, and
    /// this segment tries no more.
    fn preallocate(&self, active: &mut Active) {
        let target = active
            .len
            .saturating_add(self.preallocate)
            .min(self.segment_bytes);
        if target <= active.len {
            active.prepared = active.len;
            return;
        }
        let zeros = vec![0u8; usize::try_from(target - active.len).unwrap_or(0)];
        active.prepared = match active.file.write_at(&zeros, active.len) {
            Ok(()) => target,
            Err(_) => u64::MAX,
        };
    }

    /// Writes the mirror's bytes from `flushed` up to segment offset `end`
    /// to the file, in one `pwrite`: one append's frame, or with
    /// `GroupCommit` every frame appended since the last flush. Called with
    /// `active` locked, so that no rotation or other flush runs in between.
    fn flush(&self, active: &mut Active, end: u64) -> std::io::Result<()> {
        if active.flushed >= end {
            return Ok(());
        }
        let from = active.flushed;
        let range = usize::try_from(from).ok().zip(usize::try_from(end).ok());
        {
            let mirror = active.mirror.read();
            match range.and_then(|(a, b)| mirror.get(a..b)) {
                Some(bytes) => active.file.write_at(bytes, from)?,
                // Unreachable: the mirror holds every byte up to `end`.
                None => return Err(std::io::ErrorKind::InvalidData.into()),
            }
        }
        active.flushed = end;
        Ok(())
    }

    /// Flushes everything appended (a failure poisons the log: the frames
    /// were several appenders', and the file past `flushed` is unknown).
    fn flush_all(&self, active: &mut Active) -> Result<()> {
        self.flush(active, active.len).map_err(|e| {
            self.poison(e.kind());
            Error::io(
                "write appended records to the active segment",
                self.path(active.id),
                e,
            )
        })
    }

    /// Flushes, cuts the zero-filled rest and syncs the active segment, so
    /// that it ends at its last frame and all of it is durable (before a
    /// rotation seals it, or at close); a failure poisons the log.
    fn seal(&self, active: &mut Active, doing: &'static str) -> Result<()> {
        self.flush_all(active)?;
        let cut = if active.prepared > active.len {
            active.file.set_len(active.len)
        } else {
            Ok(())
        };
        if let Err(e) = cut.and_then(|()| active.file.sync_data()) {
            self.poison(e.kind());
            return Err(Error::io(doing, self.path(active.id), e));
        }
        active.prepared = active.len;
        self.advance_synced(active.written);
        Ok(())
    }

    /// Makes everything appended durable and cuts the active segment's
    /// zero-filled rest, with one `fdatasync` (at close).
    pub fn finish(&self) -> Result<()> {
        let mut active = self.active.lock();
        self.check_poison()?;
        self.seal(&mut active, "sync the active segment")
    }

    /// A segment id no segment has or will have.
    pub fn allocate_segment_id(&self) -> Result<u64> {
        let id = self.next_id.fetch_add(1, Ordering::AcqRel);
        if id > MAX_SEGMENT_ID {
            return Err(Error::InvalidParams {
                field: "segment_bytes",
                reason: format!(
                    "the store has used every segment id up to {MAX_SEGMENT_ID} and can \
                     start no new segment; copy its contexts into a new store"
                ),
            });
        }
        Ok(id)
    }

    /// Seals the active segment now (if it holds any record) and starts the
    /// next; returns the new active segment's id.
    pub fn rotate_now(&self) -> Result<u64> {
        let mut active = self.active.lock();
        self.check_poison()?;
        if active.len > active.header_len {
            self.rotate(&mut active)?;
        }
        Ok(active.id)
    }

    /// The store's identity.
    pub fn store(&self) -> StoreId {
        self.store
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file system the store uses.
    pub fn fs(&self) -> &dyn Fs {
        self.fs.as_ref()
    }

    /// Syncs the store's directory, making the names in it durable.
    pub fn sync_dir(&self) -> Result<()> {
        sync_dir(self.fs.as_ref(), &self.dir)
    }

    /// `Sync`: sync the file this append went to.
    fn sync_file(&self, file: &dyn SegmentFile, segment: u64, end: u64) -> Result<()> {
        self.syncs_begun.fetch_add(1, Ordering::Relaxed);
        let synced = file.sync_data();
        self.syncs_ended.fetch_add(1, Ordering::Release);
        if let Err(e) = synced {
            self.poison(e.kind());
            return Err(Error::io("sync the active segment", self.path(segment), e));
        }
        self.advance_synced(end);
        Ok(())
    }

    /// Everything before log position `to` is on disk: wakes whoever waits
    /// for it.
    fn advance_synced(&self, to: u64) {
        let guard = self.sync.lock();
        self.synced.fetch_max(to, Ordering::AcqRel);
        drop(guard);
        self.synced_cv.notify_all();
        self.wake(|end| end <= to);
    }

    /// Wakes (and forgets) every [`Durable`] whose position `covered` says
    /// is now settled.
    fn wake(&self, covered: impl Fn(u64) -> bool) {
        let woken: Vec<Waker> = {
            let mut wakers = self.wakers.lock();
            if wakers.is_empty() {
                return;
            }
            let mut woken = Vec::new();
            wakers.retain(|(end, waker)| {
                let settled = covered(*end);
                if settled {
                    woken.push(waker.clone());
                }
                !settled
            });
            woken
        };
        woken.into_iter().for_each(Waker::wake);
    }

    /// A future that resolves once every byte before log position `end`
    /// is as durable as the store's durability promises (at once with
    /// `Sync`, whose append synced itself, and with `Buffered`), or with
    /// `Poisoned` if a sync failed first. With `GroupCommit` it asks the
    /// syncer for a sync covering `end` and is woken by it: the awaiting
    /// task parks no thread.
    pub fn durable(self: &Arc<Self>, end: u64) -> Durable {
        Durable {
            log: self.clone(),
            end,
        }
    }

    /// `GroupCommit`: ask the syncer for a sync covering `end`, and wait.
    fn wait_durable(&self, end: u64) -> Result<()> {
        // Already synced (by `sync_all` on the appender's own thread, or by
        // the syncer while it wrote): asking would wake the syncer for
        // nothing, a futex wake and a thread that sleeps again.
        if self.synced.load(Ordering::Acquire) >= end {
            return Ok(());
        }
        let mut state = self.sync.lock();
        if state.requested < end {
            state.requested = end;
            state.asked = state.asked.saturating_add(1);
            self.work.notify_one();
        }
        if self.synced.load(Ordering::Acquire) >= end {
            return Ok(());
        }
        drop(state);
        let waiting = Waiting::enter(&self.waiting);
        // More appenders waiting than CPUs: others are runnable, so yielding
        // runs them instead of sleeping. A woken sleeper costs a futex wake
        // and a context switch (on a virtual machine, an interrupt between
        // CPUs); a yielder sees the sync land without either. Bounded, so a
        // yielder that keeps finding nobody else to run soon sleeps.
        if waiting.count > self.cpus {
            for _ in 0..self.commit_yields {
                if self.synced.load(Ordering::Acquire) >= end {
                    return Ok(());
                }
                self.check_poison()?;
                std::thread::yield_now();
            }
        }
        let mut state = self.sync.lock();
        while self.synced.load(Ordering::Acquire) < end {
            self.check_poison()?;
            self.synced_cv.wait(&mut state);
        }
        Ok(())
    }

    /// Sets how long a sync that follows another back to back first
    /// waits for more appends (see [`Options::commit_linger`]).
    pub fn set_commit_linger(&self, linger: std::time::Duration) {
        self.linger_nanos
            .store(linger_nanos(linger), Ordering::Relaxed);
    }

    /// How long a sync that follows another back to back first waits.
    pub fn commit_linger(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.linger_nanos.load(Ordering::Relaxed))
    }

    /// The syncs the group-commit syncer ran since the open, and how many
    /// of them lingered first (see [`Options::commit_linger`]).
    pub fn group_syncs(&self) -> (u64, u64) {
        (
            self.syncer_syncs.load(Ordering::Relaxed),
            self.lingered.load(Ordering::Relaxed),
        )
    }

    /// The syncer thread: while an appender waits for bytes not yet synced,
    /// flush everything appended so far (under `active`) and sync it
    /// (outside every lock). A sync first lingers, if a linger is set, when
    /// it follows the one before back to back (the syncer did not sleep
    /// between them) and two or more appenders asked for it: the appends
    /// that come in meanwhile share it. A lone appender asks once per sync,
    /// so it never waits, even when its next append comes in before the
    /// syncer looks again.
    fn run_syncer(&self) {
        let mut back_to_back = false;
        loop {
            let mut state = self.sync.lock();
            if state.shutdown {
                return;
            }
            let synced = self.synced.load(Ordering::Acquire);
            if state.requested <= synced || self.poisoned.load(Ordering::Acquire) {
                self.work.wait(&mut state);
                back_to_back = false;
                continue;
            }
            let asked = std::mem::take(&mut state.asked);
            drop(state);
            let linger = self.linger_nanos.load(Ordering::Relaxed);
            if back_to_back && asked >= 2 && linger > 0 {
                self.lingered.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_nanos(linger));
            }
            back_to_back = true;
            self.syncer_syncs.fetch_add(1, Ordering::Relaxed);
            // A failed flush or sync poisons the log (which wakes the waiters).
            let _ = self
                .flushed_snapshot()
                .and_then(|(file, segment, target)| self.sync_file(file.as_ref(), segment, target));
        }
    }

    /// Syncs everything written so far (for `Buffered`, and on close).
    pub fn sync_all(&self) -> Result<()> {
        self.check_poison()?;
        let (file, segment, target) = self.flushed_snapshot()?;
        self.sync_file(file.as_ref(), segment, target)
    }

    /// Flushes, then returns the active file, its id, and the log position
    /// written so far (all of it now in the file).
    fn flushed_snapshot(&self) -> Result<(Arc<dyn SegmentFile>, u64, u64)> {
        let mut active = self.active.lock();
        self.flush_all(&mut active)?;
        Ok((active.file.clone(), active.id, active.written))
    }

    /// Whether a failed sync or flush poisoned the log.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    /// The error a write gets from a poisoned log: it names what the
    /// failed write or sync met.
    pub fn poisoned_error(&self) -> Error {
        Error::Poisoned {
            cause: self.poison_cause(),
        }
    }

    /// What the failed write or sync that poisoned the log met (`None`
    /// while it is not poisoned).
    pub fn poison_cause(&self) -> Option<std::io::ErrorKind> {
        *self.poison_cause.lock()
    }

    fn check_poison(&self) -> Result<()> {
        if self.poisoned.load(Ordering::Acquire) {
            Err(self.poisoned_error())
        } else {
            Ok(())
        }
    }

    /// Marks the log poisoned and wakes every appender waiting for a sync
    /// (it then fails). Takes the sync lock to make the wake-up impossible to
    /// miss, so it must not be called with that lock held.
    fn poison(&self, cause: std::io::ErrorKind) {
        // The cause is set before the flag, so whoever sees the flag finds it.
        self.poison_cause.lock().get_or_insert(cause);
        if !self.poisoned.swap(true, Ordering::AcqRel) {
            tracing::error!(
                dir = %self.dir.display(),
                "a write or sync of the log failed: the store refuses writes until it is reopened"
            );
        }
        drop(self.sync.lock());
        self.synced_cv.notify_all();
        self.wake(|_| true);
    }

    fn path(&self, id: u64) -> PathBuf {
        segment_path(&self.dir, id)
    }
}

/// A linger as the log keeps it: in nanoseconds, at most
/// [`MAX_COMMIT_LINGER`](crate::options::MAX_COMMIT_LINGER).
fn linger_nanos(linger: std::time::Duration) -> u64 {
    let linger = linger.min(crate::options::MAX_COMMIT_LINGER);
    // At most 10 ms: fits in a u64 of nanoseconds.
    u64::try_from(linger.as_nanos()).unwrap_or(u64::MAX)
}

/// Counts an appender in `wait_durable` while it lives.
struct Waiting<'a> {
    counter: &'a AtomicUsize,
    /// Appenders waiting, this one included, when it entered.
    count: usize,
}

impl<'a> Waiting<'a> {
    fn enter(counter: &'a AtomicUsize) -> Self {
        let count = counter.fetch_add(1, Ordering::AcqRel) + 1;
        Waiting { counter, count }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.counter.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A wait for the store's log to be durable up to a position, as a
/// future: what [`PendingWrite::durable`](crate::PendingWrite::durable)
/// returns. It resolves with `Poisoned` if a sync failed first, and parks
/// no thread: the store's syncer wakes the task awaiting it.
pub struct Durable {
    log: Arc<Log>,
    end: u64,
}

impl Durable {
    /// Settled: `Some` once the position is durable or the log poisoned.
    fn settled(&self) -> Option<Result<()>> {
        if self.log.durability != Durability::GroupCommit
            || self.log.synced.load(Ordering::Acquire) >= self.end
        {
            Some(Ok(()))
        } else if self.log.poisoned.load(Ordering::Acquire) {
            Some(Err(self.log.poisoned_error()))
        } else {
            None
        }
    }
}

impl Future for Durable {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        if let Some(settled) = self.settled() {
            return Poll::Ready(settled);
        }
        {
            let mut state = self.log.sync.lock();
            if state.requested < self.end {
                state.requested = self.end;
                state.asked = state.asked.saturating_add(1);
                self.log.work.notify_one();
            }
        }
        let mut wakers = self.log.wakers.lock();
        // Checked again under the lock the syncer drains under: a sync
        // that landed since is seen here, or finds this waker there.
        if let Some(settled) = self.settled() {
            return Poll::Ready(settled);
        }
        if !wakers
            .iter()
            .any(|(end, w)| *end == self.end && w.will_wake(cx.waker()))
        {
            wakers.push((self.end, cx.waker().clone()));
        }
        Poll::Pending
    }
}

/// A mirror holding `found` (the bytes an open found), then `bytes`, with
/// room reserved for a whole segment so that appends do not reallocate
/// (pages are only touched as they fill).
fn new_mirror(
    segment_bytes: u64,
    found: Option<Arc<crate::fs::Mapped>>,
    mut bytes: Vec<u8>,
) -> Mirror {
    let found_len = found.as_ref().map_or(0, |m| m.bytes().len());
    bytes.reserve(
        usize::try_from(segment_bytes)
            .unwrap_or(0)
            .saturating_sub(found_len + bytes.len()),
    );
    Arc::new(RwLock::new(MirrorBytes::new(found, bytes)))
}

/// Creates segment `id` in `dir` with its `header`, synced, and syncs the
/// directory so that the new name is durable too.
pub fn create_segment(
    fs: &dyn Fs,
    dir: &Path,
    id: u64,
    header: &[u8],
) -> Result<Arc<dyn SegmentFile>> {
    let path = segment_path(dir, id);
    let file = fs
        .create_new(&path)
        .map_err(|e| Error::io("create a segment", &path, e))?;
    file.write_at(header, 0)
        .map_err(|e| Error::io("write a segment header", &path, e))?;
    file.sync_data()
        .map_err(|e| Error::io("sync a new segment", &path, e))?;
    sync_dir(fs, dir)?;
    Ok(file)
}
