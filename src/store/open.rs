//! Opening a store: its directory and lock, recovery of the log (from
//! the checkpoint's position, if one is loaded), the recovered records'
//! checks, and what an open reports.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{apply, checkpoint, maintain, wait, Hints, Shared, Store, LOCK_FILE};
use crate::a2a::lifecycle::Op;
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::index::{ContextSlot, ContextState, Index, MAX_SEQ};
use crate::log::layout::Layout;
use crate::log::record::{self, Decoded, RecordBody, RecordKind};
use crate::log::recovery::{self, recover, OpenReport};
use crate::log::segments::{RecordLoc, Segments};
use crate::log::writer::LogWriter;
use crate::namespace::ContextKey;
use crate::options::MAX_RECORD_BYTES;
use crate::options::{Options, RecoveryMode};

#[cfg(feature = "replicate")]
use super::attach::Attach;

impl Store {
    /// Opens the store in `dir`, creating it if needed, and recovers the log.
    ///
    /// Fails with [`Error::Locked`] if another `Store` has it open, with
    /// [`Error::UnsupportedFormat`] for another format version, and with
    /// [`Error::Corrupt`] for damage before the torn tail (unless
    /// [`RecoveryMode::SkipCorrupt`](crate::RecoveryMode) is chosen).
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::{Durability, Options, Store};
    /// # let dir = tempfile::tempdir()?;
    /// let store = Store::open(dir.path(), Options::default().durability(Durability::GroupCommit))?;
    /// assert_eq!(store.open_report().records, 0); // a new store
    /// store.close()?;
    /// // Reopened, it reads its checkpoint instead of its log.
    /// let store = Store::open(dir.path(), Options::default())?;
    /// assert!(store.open_report().from_checkpoint);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        check_options(&options)?;
        let fs = options.fs.clone();
        if options.create {
            create_dir(fs.as_ref(), &dir)?;
        } else if !holds_store(fs.as_ref(), &dir)? {
            return Err(Error::StoreNotFound { path: dir });
        }
        let lock = lock_dir(fs.as_ref(), &dir, options.lock_wait)?;
        Self::open_locked(dir, options, lock)
    }

    /// Opens the store in `dir` to read it, even while another process
    /// writes it: no lock taken, nothing written (no cut tail, no
    /// checkpoint, no file created or removed). The store answers as of the
    /// open: every record whole in its files then, that is, a prefix of
    /// the log, even when a writer was appending, rotating or compacting
    /// meanwhile (bytes after the last whole record of the newest segment
    /// are taken for the writer's unfinished append, and not reported as a
    /// torn tail). A record a writer had written but not yet synced may be
    /// included: a crash of that writer may still cut it. Reopen to see
    /// what was written since. Every write answers [`Error::ReadOnly`]; a
    /// directory without a store answers [`Error::StoreNotFound`].
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::{Options, Store};
    /// # let dir = tempfile::tempdir()?;
    /// let writer = Store::open(dir.path(), Options::default())?;
    /// writer.append_message("acme", "case-42", b"hello")?;
    /// // Beside the writer, which holds the store's lock:
    /// let reader = Store::open_read_only(dir.path(), Options::default())?;
    /// assert_eq!(reader.last_messages("acme", "case-42", 1)?[0].raw, b"hello");
    /// assert!(matches!(
    ///     reader.append_message("acme", "case-42", b"no"),
    ///     Err(ctxlog::Error::ReadOnly)
    /// ));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_read_only(dir: impl AsRef<Path>, options: Options) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        let mut options = options.durability(crate::options::Durability::Buffered);
        options.read_only = true;
        check_options(&options)?;
        if !holds_store(options.fs.as_ref(), &dir)? {
            return Err(Error::StoreNotFound { path: dir });
        }
        // A writer may change the directory while this reads it: a
        // compaction removes segments (a file listed is gone when read),
        // renames new ones in and switches the manifest (which then names
        // files the listing did not see), a checkpoint may reach past the
        // listing. Each such view fails to open and a later look sees a
        // consistent one: look again, a bounded number of times, with a
        // short pause for the writer's step to finish. Damage that stays
        // is reported as it is after the last look.
        let mut tries = 0u64;
        loop {
            match Self::open_locked(dir.clone(), options.clone(), Box::new(())) {
                Err(e) if tries < READ_ONLY_TRIES && moved_under(&e) => {
                    tries += 1;
                    tracing::debug!(dir = %dir.display(), tries, error = %e, "the store changed while opening read-only; again");
                    std::thread::sleep(std::time::Duration::from_millis(tries.min(10)));
                }
                other => return other,
            }
        }
    }

    /// The rest of [`open`](Self::open) (and of a read-only open), once the
    /// lock (or, read-only, nothing) is held.
    fn open_locked(dir: PathBuf, options: Options, lock: Box<dyn Send + Sync>) -> Result<Self> {
        let fs = options.fs.clone();
        // With a sound checkpoint, load the index and read only the log
        // after it; if the log does not match it, read everything instead.
        let first = Index::default();
        // The directory is looked at on this thread while the checkpoint's
        // other threads load it.
        let mut looked = None;
        let look = || looked = Some(recovery::look(fs.as_ref(), &dir, options.read_only));
        // A checkpoint written before the last two switches of the log (or
        // more) is set aside with its reason; one switch behind, it is
        // re-pointed (`scan_log`).
        let mut stale = None;
        let attempt = checkpoint::load(fs.as_ref(), &dir, &first, look).and_then(|loaded| {
            if let Some(Ok(layout)) = &looked {
                stale = recovery::stale(&loaded.resume, layout);
                if stale.is_some() {
                    return None;
                }
            }
            let segments = Arc::new(Segments::default());
            Some((
                scan_log(
                    &dir,
                    &options,
                    &first,
                    &segments,
                    Some((loaded, looked.take())),
                ),
                segments,
            ))
        });
        let (index, segments, recovered, report) = match attempt {
            Some((Ok((recovered, report)), segments))
                if options.recovery == RecoveryMode::Strict
                    && report.checkpoint_ignored.is_none() =>
            {
                (first, segments, recovered, report)
            }
            // Read everything again if the checkpoint did not match a
            // merge's output (see `repoint`), or to skip damage: that needs
            // every record read (a checkpoint indexes records it does not
            // read, so a damaged one would fail each read of its context
            // instead of being skipped). The checkpoint was still checked
            // against the log (what it says was acknowledged and is gone is
            // reported as lost, below).
            Some((Ok((_, first_report)), _)) => {
                let index = Index::default();
                let segments = Arc::new(Segments::default());
                let (recovered, mut report) = scan_log(&dir, &options, &index, &segments, None)?;
                // What the first scan repaired, the second finds whole: keep
                // its word for it.
                report.identity_restored |= first_report.identity_restored;
                report.torn_tail = report.torn_tail.or(first_report.torn_tail);
                report
                    .removed_segments
                    .extend(first_report.removed_segments);
                report.removed_segments.sort_unstable();
                report.removed_segments.dedup();
                report.checkpoint_ignored =
                    Some(first_report.checkpoint_ignored.unwrap_or_else(|| {
                        "recovery skip-corrupt reads every record rather than trust the checkpoint"
                            .into()
                    }));
                (index, segments, recovered, report)
            }
            other => {
                let mut lost = None;
                let ignored = match other {
                    // The checkpoint knew the log reached further than it
                    // does: a scan without it could not tell.
                    Some((Err(e @ Error::MissingRecords { .. }), _))
                        if options.recovery == RecoveryMode::Strict =>
                    {
                        return Err(e)
                    }
                    Some((Err(e), _)) => {
                        if let Error::MissingRecords {
                            segment,
                            expected,
                            actual,
                            reason,
                        } = &e
                        {
                            lost = Some(crate::log::layout::Lost {
                                segment: *segment,
                                expected: *expected,
                                actual: *actual,
                                reason: reason.clone(),
                            });
                        }
                        Some(format!("{e}"))
                    }
                    _ if stale.is_some() => stale,
                    _ if fs.exists(&dir.join(checkpoint::CHECKPOINT)) => {
                        Some("the checkpoint is damaged or of another version".to_string())
                    }
                    _ => None,
                };
                let index = Index::default();
                let segments = Arc::new(Segments::default());
                let (recovered, mut report) = scan_log(&dir, &options, &index, &segments, None)?;
                report.checkpoint_ignored = ignored;
                report.lost.extend(lost);
                (index, segments, recovered, report)
            }
        };
        trace_open(&dir, &report);
        let writer = LogWriter::resume(
            dir,
            &options,
            segments.clone(),
            recovered.active,
            recovered.next_id,
            recovered.store,
        );
        let stale_at_open =
            u64::from(!report.from_checkpoint || report.replayed > 0 || report.repointed > 0);
        let shared = Arc::new(Shared {
            options,
            segments,
            writer,
            index,
            records: std::sync::atomic::AtomicU64::new(report.records),
            report,
            manifest: parking_lot::Mutex::new(recovered.manifest),
            merging: parking_lot::Mutex::new(()),
            // A checkpoint that holds everything read at open makes a new
            // one at close needless until something changes.
            since_checkpoint: std::sync::atomic::AtomicU64::new(stale_at_open),
            checkpoint_size: std::sync::atomic::AtomicU64::new(0),
            checkpointing: std::sync::atomic::AtomicBool::new(false),
            no_checkpoint: std::sync::atomic::AtomicBool::new(false),
            waits: wait::EventWaits::default(),
            maintained: maintain::Counters::default(),
            #[cfg(feature = "replicate")]
            replica: std::sync::OnceLock::new(),
            _lock: lock,
        });
        let maintainer = maintain::Maintainer::start(&shared);
        #[cfg(feature = "replicate")]
        let replicator = match shared.options.replicate.clone() {
            Some(config) if !shared.options.read_only => {
                if config.synchronous
                    && shared.options.durability == crate::options::Durability::Buffered
                {
                    return Err(Error::InvalidParams {
                        field: "replicate",
                        reason: "synchronous replication ships only synced bytes, which \
                                 Durability::Buffered leaves unsynced; use Sync or GroupCommit"
                            .into(),
                    });
                }
                let (replicator, gate) = config.attach(&shared)?;
                let _ = shared.replica.set(gate);
                Some(replicator)
            }
            _ => None,
        };
        Ok(Self {
            shared,
            maintainer,
            #[cfg(feature = "replicate")]
            replicator,
            closed: false,
        })
    }
}

/// Reads the log into `index` (from the checkpoint's position, if given).
/// With a checkpoint `loaded`, what [`recovery::look`] found meanwhile, if
/// it ran.
fn scan_log(
    dir: &Path,
    options: &Options,
    index: &Index,
    segments: &Segments,
    loaded: Option<(checkpoint::Loaded, Option<Result<Layout>>)>,
) -> Result<(crate::log::recovery::Recovered, OpenReport)> {
    let (loaded, looked) = match loaded {
        Some((loaded, looked)) => (Some(loaded), looked),
        None => (None, None),
    };
    // Of the output of a merge that switched the log after the checkpoint
    // was written (`recover` reads it whole, `rewritten`), the records the
    // checkpoint holds are re-pointed there, the others replayed.
    let mut moved = Moved::default();
    let mut report = OpenReport::default();
    let resumed = loaded.is_some();
    let mut served = loaded.as_ref().map_or(0, |l| l.records);
    let mut foreign = 0u64;
    let recovered = recover(
        dir,
        options,
        loaded.as_ref().map(|l| l.resume),
        looked,
        segments,
        &mut report,
        |loc, payload, rewritten| {
            // Viewed, not decoded: most of a merge's output is held already.
            if rewritten && record::view(payload).is_ok_and(|v| moved.held(index, &v, loc)) {
                return Ok(());
            }
            match record::decode(payload).map_err(|e| e.0)? {
                Decoded::ForeignNamespace(_) => foreign += 1,
                Decoded::Current { key, body, blob } => {
                    let hints = Hints::of(&body, blob);
                    apply_recovered(index, key, body, loc, options.recovery, resumed, hints)?;
                    served += 1;
                }
            }
            Ok(())
        },
    )?;
    if recovered.after_switch {
        // A mismatch sets the checkpoint aside: the open reads everything.
        match moved.repoint(index, segments, recovered.active.id) {
            Ok(count) => report.repointed = count,
            Err(why) => report.checkpoint_ignored = Some(why),
        }
    }
    report.replayed = served - loaded.as_ref().map_or(0, |l| l.records);
    report.records = served;
    report.foreign_namespace_records = foreign;
    report.contexts = index.visible_contexts();
    report.from_checkpoint = loaded.is_some();
    Ok((recovered, report))
}

/// The records of a merge's output (one that switched the log after the
/// checkpoint was written) that the loaded index holds already, at their
/// places in the merge's inputs: per context, in the output's order, the
/// seq and new place of each. A merge writes each context's records
/// together, so a context's come in one group.
#[derive(Default)]
struct Moved {
    groups: Vec<(Arc<ContextSlot>, Vec<SeqAt>)>,
}

/// A record's seq and place.
type SeqAt = (u64, RecordLoc);

impl Moved {
    /// Whether the record `view`, at `loc` in the merge's output, is one
    /// the index holds already (of a context it holds live, with a seq
    /// below the context's next): then it is noted, to be re-pointed.
    fn held(&mut self, index: &Index, view: &record::View<'_>, loc: RecordLoc) -> bool {
        if view.kind == record::ViewKind::Gone {
            return false;
        }
        let slot = match self.groups.last() {
            Some((slot, _)) if slot.key == view.key => slot.clone(),
            _ => match index.get(&view.key) {
                Some(slot) => slot,
                None => return false,
            },
        };
        {
            let state = slot.state.read();
            if state.meta.is_none() || state.gone.is_some() || view.seq >= state.next_seq {
                return false;
            }
        }
        match self.groups.last_mut() {
            Some((last, moved)) if Arc::ptr_eq(last, &slot) => moved.push((view.seq, loc)),
            _ => self.groups.push((slot, vec![(view.seq, loc)])),
        }
        true
    }

    /// Points each context's records that lie in segments no longer in the
    /// log (a merge's inputs) at their noted places in its output; returns
    /// how many. Why not (the open then reads the whole log) if they do not
    /// match one for one, or if any record the index holds is still in a
    /// segment the log no longer has.
    fn repoint(
        &self,
        index: &Index,
        segments: &Segments,
        active: u64,
    ) -> std::result::Result<u64, String> {
        // The sealed segments `recover` found, and the one it hands the
        // writer.
        let mut present = segments.ids();
        present.push(active);
        present.sort_unstable();
        let gone = |segment: u64| present.binary_search(&segment).is_err();
        let mismatch = |reason: String| {
            format!("the checkpoint describes the log before a merge switched it, and {reason}")
        };
        let mut count = 0;
        let mut matched = Vec::with_capacity(self.groups.len());
        for (slot, moved) in &self.groups {
            let mut state = slot.state.write();
            // Deleted after the switch (in the tail): nothing to re-point.
            if state.gone.is_some() {
                continue;
            }
            if !state.repoint(&gone, moved) {
                return Err(mismatch(format!(
                    "context {} has other records in the merge's inputs than its output holds",
                    slot.key
                )));
            }
            count += moved.len() as u64;
            matched.push(slot.number);
        }
        // The contexts just re-pointed hold nothing in the inputs any more;
        // every other must hold nothing there either.
        matched.sort_unstable();
        for slot in index.all_slots() {
            if matched.binary_search(&slot.number).is_ok() {
                continue;
            }
            let state = slot.state.read();
            if state.gone.is_none() {
                if let Some(loc) = state.record_locs().find(|loc| gone(loc.segment)) {
                    return Err(mismatch(format!(
                        "a record it holds at offset {} of segment {} is not in the merge's output",
                        loc.offset, loc.segment
                    )));
                }
            }
        }
        Ok(count)
    }
}

/// Rebuilds the index from one recovered record; a refusal names what is wrong.
fn apply_recovered(
    index: &Index,
    key: ContextKey,
    body: RecordBody,
    loc: RecordLoc,
    mode: RecoveryMode,
    from_checkpoint: bool,
    hints: Hints,
) -> std::result::Result<(), String> {
    let slot = index.get_or_insert(&key);
    let mut state = slot.state.write();
    // Once a context is gone its later records are skipped. A merge writes
    // a tombstone for a gone context's records in the segments it merges,
    // and its records in later segments (up to its delete record, if it was
    // deleted) stay there until a later merge drops them; a tombstone after
    // a tombstone changes nothing.
    if state.gone.is_some() {
        return Ok(());
    }
    // A merge's tombstone (it names its context) stands at the seq of the
    // last record it replaced: it opens and closes a context none of whose
    // records came before it, or closes one whose earlier records lie in
    // runs before the merged segments.
    if matches!(body.kind, RecordKind::Gone { .. }) && body.opens.is_some() {
        check_owner(&body, key)?;
        if state.meta.is_none() {
            apply(index, &slot, &mut state, &body, loc, hints);
            return Ok(());
        }
        // Below the seq expected: in a log read whole, damage; after a
        // checkpoint, the tombstone of a merge that switched the log after
        // it was written, of records it holds (DESIGN.md §4): it closes the
        // context all the same.
        if body.seq < state.next_seq && !from_checkpoint {
            return Err(format!(
                "a tombstone at seq {} where the context expects {} or later",
                body.seq, state.next_seq
            ));
        }
        let closes = RecordBody {
            seq: body.seq.max(state.next_seq),
            opens: None,
            ..body
        };
        apply(index, &slot, &mut state, &closes, loc, hints);
        return Ok(());
    }
    // A checkpoint taken while appends were in flight resumes from the
    // earliest of them: records after it that it already holds come again.
    if from_checkpoint && state.meta.is_some() && body.seq < state.next_seq {
        return Ok(());
    }
    if body.seq > MAX_SEQ {
        return Err(format!(
            "record seq {} is past {MAX_SEQ}, the most a context holds",
            body.seq
        ));
    }
    // When damaged records are being skipped, a gap in a context's order is
    // expected; going backwards never is.
    let gap_ok = mode == RecoveryMode::SkipCorrupt && body.seq > state.next_seq;
    if body.seq != state.next_seq && !gap_ok {
        return Err(format!(
            "record seq {} where the context expects {}",
            body.seq, state.next_seq
        ));
    }
    check_owner(&body, key)?;
    match &body.opens {
        Some(_) if state.meta.is_some() => return Err("a context opened twice".into()),
        None if state.meta.is_none() => {
            return Err("a record of a context with no opening record".into())
        }
        _ => {}
    }
    check_recovered(&state, &body)?;
    apply(index, &slot, &mut state, &body, loc, hints);
    Ok(())
}

/// A record that names its context's owner must hash to the record's key:
/// a context's ownership is proven by its own bytes.
fn check_owner(body: &RecordBody, key: ContextKey) -> std::result::Result<(), String> {
    match &body.opens {
        Some(name) if ContextKey::derive_unchecked(&name.tenant, &name.context_id) != key => {
            Err("the opening record's key does not match its tenant and contextId".into())
        }
        _ => Ok(()),
    }
}

/// Checks a recovered record against its context's state, as the live path
/// checked it before appending: the task it names exists (or, for one that
/// opens a task, does not yet), and the lifecycle allows it.
fn check_recovered(state: &ContextState, body: &RecordBody) -> std::result::Result<(), String> {
    let (task_id, op) = match &body.kind {
        RecordKind::Message { task: None } | RecordKind::Gone { .. } => return Ok(()),
        RecordKind::Hide { from_seq, to_seq } => {
            return if state.task_count() > 0 {
                Err("a hide record in a context with tasks".into())
            } else if from_seq > to_seq || *to_seq > body.seq {
                Err(format!(
                    "a hide record at seq {} of seqs {from_seq}..{to_seq}",
                    body.seq
                ))
            } else {
                Ok(())
            };
        }
        RecordKind::Message { task: Some(link) } if link.opens_task => {
            return match state.task(&link.task_id) {
                Some(_) => Err(format!("task {:?} opened twice", link.task_id)),
                None => Ok(()),
            };
        }
        RecordKind::Push { task_id, .. } => {
            // A config names a task of its context, in any state (its
            // delivery outlives the task's end).
            return match state.task(task_id) {
                Some(_) => Ok(()),
                None => Err(format!("a push record of unknown task {task_id:?}")),
            };
        }
        RecordKind::Message { task: Some(link) } => (&link.task_id, Op::Message),
        RecordKind::Status { task_id, state, .. } => (task_id, Op::Status(*state)),
        RecordKind::Artifact {
            task_id,
            artifact_id,
            append,
            ..
        } => (
            task_id,
            Op::Artifact {
                artifact_id,
                append: *append,
            },
        ),
    };
    let task = state
        .task(task_id)
        .ok_or_else(|| format!("an event of unknown task {task_id:?}"))?;
    task.check(op).map_err(|e| e.to_string())
}

fn check_options(o: &Options) -> Result<()> {
    if !(4096..=(1 << 31)).contains(&o.segment_bytes) {
        return Err(Error::InvalidParams {
            field: "segment_bytes",
            reason: format!("{} is not between 4 KiB and 2 GiB", o.segment_bytes),
        });
    }
    if !(64..=MAX_RECORD_BYTES).contains(&o.max_record_bytes) {
        return Err(Error::InvalidParams {
            field: "max_record_bytes",
            reason: format!(
                "{} is not between 64 and {MAX_RECORD_BYTES}",
                o.max_record_bytes
            ),
        });
    }
    Ok(())
}

/// How many times a read-only open looks again at a directory a writer
/// changed under it.
pub(super) const READ_ONLY_TRIES: u64 = 40;

/// Whether a read-only open's error may come from a writer's change in the
/// middle of it (a file gone, files that do not match each other yet).
pub(super) fn moved_under(e: &Error) -> bool {
    match e {
        Error::Io { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
        Error::MissingRecords { .. } | Error::Corrupt { .. } => true,
        _ => false,
    }
}

/// Whether `dir` holds a store (an identity file or a segment). A path that
/// is missing is no store; one that cannot be listed (a file, a directory
/// without permission) is an error with its cause.
pub(super) fn holds_store(fs: &dyn Fs, dir: &Path) -> Result<bool> {
    match fs.list(dir) {
        Ok(names) => Ok(names.iter().any(|(name, _)| {
            name == crate::log::identity::IDENTITY
                || crate::log::segments::segment_id_of(name).is_some()
        })),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        // Not "no store here": the path cannot hold one, say why.
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => Err(Error::io(
            "open the store directory (the path, or a part of it, is a file)",
            dir,
            e,
        )),
        Err(e) => Err(Error::io("list the store directory", dir, e)),
    }
}

/// Makes `dir` for a new store, or takes it as it is if it holds one, or
/// nothing but what a creation cut short leaves (its lock, a temporary
/// identity). A directory that holds anything else (a source checkout, a
/// home directory) is refused: a store never spreads its files among
/// another's.
fn create_dir(fs: &dyn Fs, dir: &Path) -> Result<()> {
    if fs.exists(dir) {
        if holds_store(fs, dir)? {
            return Ok(());
        }
        let names = fs
            .list(dir)
            .map_err(|e| Error::io("list the store directory", dir, e))?;
        let other = names
            .iter()
            .map(|(name, _)| name.as_str())
            .find(|name| *name != LOCK_FILE && *name != crate::log::identity::IDENTITY_TMP);
        if let Some(other) = other {
            return Err(Error::InvalidParams {
                field: "dir",
                reason: format!(
                    "{} holds files of its own ({other:?} among them) and no store: a store is \
                     made only in a new or empty directory, or opened in one that holds a \
                     store; give a new path",
                    dir.display()
                ),
            });
        }
        return Ok(());
    }
    fs.create_dir_all(dir)
        .map_err(|e| Error::io("create the store directory", dir, e))?;
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        crate::log::segments::sync_dir(fs, parent)?;
    }
    Ok(())
}

/// Takes the store's lock, retrying a held one for up to `wait` (see
/// [`Options::lock_wait`]): 1 ms between tries at first, doubling up to
/// 32 ms.
pub(super) fn lock_dir(
    fs: &dyn Fs,
    dir: &Path,
    wait: std::time::Duration,
) -> Result<Box<dyn Send + Sync>> {
    let path: PathBuf = dir.join(LOCK_FILE);
    let deadline = std::time::Instant::now() + wait;
    let mut pause = std::time::Duration::from_millis(1);
    loop {
        match fs.lock(&path) {
            Ok(guard) => return Ok(guard),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let now = std::time::Instant::now();
                if now >= deadline {
                    tracing::warn!(path = %path.display(), ?wait, "the store is locked by another opener");
                    return Err(Error::Locked { path });
                }
                if pause == std::time::Duration::from_millis(1) {
                    tracing::debug!(path = %path.display(), ?wait, "the store's lock is held; waiting");
                }
                std::thread::sleep(pause.min(deadline - now));
                pause = (pause * 2).min(std::time::Duration::from_millis(32));
            }
            Err(e) => return Err(Error::io("lock the store", &path, e)),
        }
    }
}

/// Tells a tracing subscriber (if there is one) what an open found and
/// decided: the same facts as the [`OpenReport`], as they happen.
fn trace_open(dir: &Path, report: &OpenReport) {
    let dir = dir.display();
    tracing::debug!(
        %dir,
        records = report.records,
        contexts = report.contexts,
        from_checkpoint = report.from_checkpoint,
        replayed = report.replayed,
        repointed = report.repointed,
        "store opened"
    );
    if let Some(t) = &report.torn_tail {
        tracing::info!(%dir, segment = t.segment, offset = t.offset, bytes = t.bytes, "cut a torn tail (bytes never acknowledged)");
    }
    if let Some(why) = &report.checkpoint_ignored {
        tracing::warn!(%dir, reason = %why, "checkpoint not used; the whole log was read");
    }
    if report.identity_restored {
        tracing::warn!(%dir, store = %report.store_id, "IDENTITY was missing or damaged; written again from the store's files");
    }
    for s in &report.skipped {
        tracing::warn!(%dir, segment = s.segment, offset = s.offset, reason = %s.reason, "skipped damaged bytes");
    }
    for l in &report.lost {
        tracing::warn!(%dir, segment = l.segment, expected = l.expected, actual = l.actual, reason = %l.reason, "acknowledged records are missing");
    }
    for f in &report.foreign {
        tracing::warn!(%dir, path = %f.path.display(), reason = %f.reason, "left another store's file unread");
    }
    if !report.removed_segments.is_empty() {
        tracing::info!(%dir, segments = ?report.removed_segments, "removed segments left by a crash or an interrupted compaction");
    }
}
