//! Self-maintenance: merging the log's sealed segments into runs that keep
//! each context's records together, by a policy, on a thread of the
//! store's own (or when the program calls [`Store::maintain`]). The merge
//! itself is `compact.rs`'s; DESIGN.md §10 says why runs, and §4 what a
//! crash during one leaves.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::compact::{CompactReport, CompactStep, Job};
use super::{now_ms, Shared, Store};
use crate::error::{Error, Result};
use crate::index::Life;
use crate::log::frame::{FRAME_HEADER_LEN, HEADER_LEN};
use crate::log::manifest::Manifest;
use crate::log::segments::SegmentData;
use crate::options::Maintenance;

/// What maintenance did since the open.
#[derive(Default)]
pub(crate) struct Counters {
    /// Merges done.
    pub merges: AtomicU64,
    /// Bytes they wrote.
    pub bytes_written: AtomicU64,
    /// The shape (manifest generation, sealed tail, idle) in which the last look
    /// found work the budget did not allow: the same shape is not weighed
    /// again (that walks the whole index) until it changes.
    pub weighed: Mutex<Option<(u64, Vec<u64>, bool)>>,
}

impl Store {
    /// Runs one step of the store's self-maintenance now, in the calling
    /// thread, whatever the store's activity: the merge the policy of
    /// [`Options::maintenance`](crate::Options::maintenance) (or, if that
    /// is `None`, [`Maintenance::default`]) picks first, at full speed.
    /// Returns what it merged, or `None` when the layout needs nothing (or
    /// another merge or a compaction is running).
    ///
    /// A merge rewrites a few adjacent pieces of the log (the segments
    /// sealed since the last merge, or two runs of similar size, or a run
    /// that holds many records of deleted or expired contexts) into one
    /// *run*, in which each context's records lie next to each other, with
    /// the records of gone contexts dropped. Runs are merged by size tiers,
    /// so a context's records live in a few places however long the store
    /// runs. Readers and writers go on meanwhile; see DESIGN.md §10.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::{Maintenance, Options, Store};
    /// # let dir = tempfile::tempdir()?;
    /// let options = Options::default()
    ///     .segment_bytes(4096)
    ///     .maintenance(Some(Maintenance::default().background(false)));
    /// let store = Store::open(dir.path(), options)?;
    /// for i in 0..40 {
    ///     store.append_message("acme", &format!("case-{}", i % 4), &[b'x'; 500])?;
    /// }
    /// store.delete_context("acme", "case-0")?;
    /// let before = store.stats().disk_bytes;
    /// let mut merged = 0;
    /// while let Some(report) = store.maintain()? {
    ///     merged += report.input_segments;
    /// }
    /// assert!(merged >= 4);
    /// // case-0's records are gone from the disk; the others read as before.
    /// assert!(store.stats().disk_bytes < before);
    /// assert_eq!(store.last_messages("acme", "case-1", 20)?.len(), 10);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn maintain(&self) -> Result<Option<CompactReport>> {
        self.maintain_until(CompactStep::Done)
    }

    /// [`maintain`](Self::maintain), its merge stopped after `step` as if
    /// the process died there (for crash tests).
    #[doc(hidden)]
    pub fn maintain_until(&self, step: CompactStep) -> Result<Option<CompactReport>> {
        let policy = self.options.maintenance.clone().unwrap_or_default();
        self.maintain_step(&policy, true, true, step, &mut |_, _| true)
    }
}

/// A run of the manifest: its place in the compacted list and its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    from: usize,
    to: usize,
    bytes: u64,
}

/// What a policy decision looks at.
#[derive(Debug, Default)]
struct Shape {
    /// The runs, in log order.
    runs: Vec<Run>,
    /// The compacted segments, in log order (the tail follows them).
    compacted: Vec<u64>,
    /// Sealed tail segments, ascending: (id, bytes).
    tail: Vec<(u64, u64)>,
}

/// Where the live records lie.
#[derive(Debug, Default)]
struct Usage {
    /// Bytes of the live records (payloads).
    live: u64,
    /// Bytes of live frames, per segment.
    per_segment: HashMap<u64, u64>,
    /// At most what the tombstones of gone contexts take in one run.
    tombstones: u64,
}

impl Shared {
    /// One step of maintenance: the merge `policy` picks first, if any.
    /// `idle`: no append for a while (the tail is then merged however
    /// short, and a well-filled active segment sealed first); `garbage`:
    /// look for runs with records of gone contexts to drop; the merge
    /// stops after `step` (`Done` but in crash tests).
    pub(crate) fn maintain_step(
        &self,
        policy: &Maintenance,
        idle: bool,
        garbage: bool,
        step: CompactStep,
        pace: &mut dyn FnMut(u64, bool) -> bool,
    ) -> Result<Option<CompactReport>> {
        if self.options.read_only {
            return Err(Error::ReadOnly);
        }
        let Some(_merging) = self.merging.try_lock() else {
            return Ok(None);
        };
        if idle {
            let (_, len) = self.writer.resume_point();
            if len >= self.options.segment_bytes / 4 {
                self.writer.rotate_now()?;
            }
        }
        let manifest = self.manifest.lock().clone();
        let shape = self.shape(&manifest);
        let seen = (
            manifest.generation,
            shape.tail.iter().map(|(id, _)| *id).collect::<Vec<u64>>(),
            idle,
        );
        if !garbage
            && (choose(&shape, None, u64::MAX, idle, policy).is_none()
                || self.maintained.weighed.lock().as_ref() == Some(&seen))
        {
            return Ok(None);
        }
        let usage = self.usage();
        let disk = self.disk_bytes();
        // With the merge's output beside its inputs and a new checkpoint
        // beside the old, the store stays within `max_space` of the live
        // bytes; a store too small for that merges a segment's worth.
        let bound = (usage.live as f64 * policy.max_space) as u64;
        let checkpoint = self
            .checkpoint_size
            .load(std::sync::atomic::Ordering::Acquire);
        let budget = bound
            .saturating_sub(disk)
            .saturating_sub(checkpoint)
            .max(self.options.segment_bytes);
        let usage = garbage.then_some(&usage);
        let Some(job) = choose(&shape, usage, budget, idle, policy) else {
            *self.maintained.weighed.lock() = Some(seen);
            return Ok(None);
        };
        let report = self.merge(&job, step, &mut |_, _| {}, pace)?;
        if let Some(r) = &report {
            self.maintained.merges.fetch_add(1, Ordering::Relaxed);
            self.maintained
                .bytes_written
                .fetch_add(r.output_bytes, Ordering::Relaxed);
        }
        Ok(report)
    }

    /// The runs and the sealed tail segments of `manifest`.
    fn shape(&self, manifest: &Manifest) -> Shape {
        let mut runs: Vec<Run> = Vec::new();
        for (i, len) in manifest.lens.iter().enumerate() {
            let run = manifest.runs.get(i);
            match runs.last_mut() {
                Some(last) if manifest.runs.get(last.from) == run => {
                    last.to = i + 1;
                    last.bytes += len;
                }
                _ => runs.push(Run {
                    from: i,
                    to: i + 1,
                    bytes: *len,
                }),
            }
        }
        let (active, _) = self.writer.resume_point();
        let tail = self
            .segments
            .ids()
            .into_iter()
            .filter(|id| {
                *id >= manifest.tail_from && *id < active && !manifest.compacted.contains(id)
            })
            .map(|id| match self.segments.get(id) {
                Some(SegmentData::Sealed(sealed)) => (id, sealed.len()),
                _ => (id, 0),
            })
            .collect();
        Shape {
            runs,
            compacted: manifest.compacted.clone(),
            tail,
        }
    }

    /// Where the live records lie, from the index.
    fn usage(&self) -> Usage {
        let mut usage = Usage::default();
        let now = now_ms();
        for (i, slot) in self.index.all_slots().iter().enumerate() {
            super::compact::breathe(i);
            let state = slot.state.read();
            match state.life(now, self.options.retention) {
                Life::Live => {
                    for loc in state.record_locs() {
                        usage.live += u64::from(loc.len);
                        *usage.per_segment.entry(loc.segment).or_default() +=
                            u64::from(loc.len) + FRAME_HEADER_LEN;
                    }
                }
                Life::Gone(_) => {
                    // A tombstone: the key, the names, a few numbers.
                    let names = state
                        .meta
                        .as_ref()
                        .map_or(0, |m| m.tenant().len() + m.context_id().len());
                    usage.tombstones += names as u64 + 128;
                }
                Life::Missing => {}
            }
        }
        usage
    }
}

/// The merge the policy picks for `shape`, first, whose output (the live
/// records of its inputs, by `usage`; without it, all their bytes) fits
/// `budget`:
/// 1. the sealed tail segments, once there are `tail_segments` of them, or
///    any when the store is idle (the oldest ones that fit, at least one);
/// 2. two adjacent runs of similar size (the older at most twice the
///    newer), the newest such pair first: size tiers, so a context's
///    records live in few runs;
/// 3. with `usage`, a run in which the records of gone contexts (more than
///    their tombstones can take) exceed `max_garbage` of its bytes, whatever
///    the budget: deletions, not maintenance, put the store over its
///    bound, and this (whose output is smaller than its input) brings it
///    back.
fn choose(
    shape: &Shape,
    usage: Option<&Usage>,
    budget: u64,
    idle: bool,
    policy: &Maintenance,
) -> Option<Job> {
    let output = |ids: &[u64], bytes: u64| match usage {
        Some(u) => ids
            .iter()
            .filter_map(|id| u.per_segment.get(id))
            .sum::<u64>()
            .saturating_add(u.tombstones)
            .min(bytes),
        None => bytes,
    };
    let due = shape.tail.len() >= policy.tail_segments.max(1) || (idle && !shape.tail.is_empty());
    if due {
        let mut through = None;
        let mut out = 0u64;
        for &(id, len) in &shape.tail {
            let more = output(&[id], len);
            if through.is_some() && out + more > budget {
                break;
            }
            out += more;
            through = Some(id);
        }
        let end = shape.compacted.len();
        return Some(Job {
            from: end,
            to: end,
            through,
        });
    }
    let ids = |run: &Run| shape.compacted.get(run.from..run.to).unwrap_or_default();
    for pair in shape.runs.windows(2).rev() {
        let [older, newer] = pair else { continue };
        let out = output(ids(older), older.bytes) + output(ids(newer), newer.bytes);
        if older.bytes <= newer.bytes.saturating_mul(2) && out <= budget {
            return Some(Job {
                from: older.from,
                to: newer.to,
                through: None,
            });
        }
    }
    let usage = usage?;
    shape.runs.iter().find_map(|run| {
        let ids = ids(run);
        let live: u64 = ids.iter().filter_map(|id| usage.per_segment.get(id)).sum();
        let headers = ids.len() as u64 * HEADER_LEN;
        let dead = run
            .bytes
            .saturating_sub(live + headers)
            .saturating_sub(usage.tombstones);
        let worth = dead as f64 > policy.max_garbage * run.bytes as f64;
        worth.then_some(Job {
            from: run.from,
            to: run.to,
            through: None,
        })
    })
}

/// The background thread, stopped and joined when the store closes.
pub(crate) struct Maintainer {
    stop: Arc<Stop>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// A stop request, which wakes the thread from any sleep.
#[derive(Default)]
struct Stop {
    stopped: Mutex<bool>,
    wake: Condvar,
}

impl Stop {
    /// Sleeps for `d` unless asked to stop; `true` to go on.
    fn sleep(&self, d: Duration) -> bool {
        let mut stopped = self.stopped.lock();
        if !*stopped && !d.is_zero() {
            self.wake.wait_for(&mut stopped, d);
        }
        !*stopped
    }
}

/// How often the thread looks for runs with records of gone contexts, at
/// most (it walks the whole index to learn it).
const GARBAGE_EVERY: Duration = Duration::from_secs(30);

impl Maintainer {
    /// Starts the thread, if the options ask for one (never for a read-only
    /// store).
    pub fn start(shared: &Arc<Shared>) -> Option<Maintainer> {
        let policy = shared.options.maintenance.clone()?;
        if !policy.background || shared.options.read_only {
            return None;
        }
        let stop = Arc::new(Stop::default());
        let thread = std::thread::Builder::new()
            .name("ctxlog-maintenance".into())
            .spawn({
                let (shared, stop) = (shared.clone(), stop.clone());
                move || run(&shared, &policy, &stop)
            });
        match thread {
            Ok(thread) => Some(Maintainer {
                stop,
                thread: Some(thread),
            }),
            Err(e) => {
                tracing::warn!(error = %e, "no maintenance thread could be started; the store runs without one");
                None
            }
        }
    }

    /// Stops the thread (a merge under way stops at its next chunk and
    /// leaves nothing behind) and waits for it.
    pub fn stop(mut self) {
        *self.stop.stopped.lock() = true;
        self.stop.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The thread's loop: look, merge what the policy picks, at its pace.
fn run(shared: &Shared, policy: &Maintenance, stop: &Stop) {
    let rate = policy.bytes_per_second.max(1) as f64;
    let mut seen = shared.writer.resume_point();
    let mut changed = Instant::now();
    let mut garbage_at = Instant::now();
    let mut wait = policy.interval;
    while stop.sleep(wait) {
        if shared.writer.is_poisoned() {
            return;
        }
        let now = shared.writer.resume_point();
        if now != seen {
            (seen, changed) = (now, Instant::now());
        }
        let idle = changed.elapsed() >= policy.idle_after;
        let garbage = garbage_at.elapsed() >= GARBAGE_EVERY;
        if garbage {
            garbage_at = Instant::now();
        }
        let started = Instant::now();
        let mut after = shared.writer.sync_activity();
        let mut pace = |written: u64, sync: bool| {
            let due = Duration::from_secs_f64(written as f64 / rate);
            let ahead = due.saturating_sub(started.elapsed());
            if ahead.is_zero() {
                // Between the sleeps, a thread woken on this CPU (an
                // appender whose sync landed) runs at once, not after the
                // merge's time slice.
                std::thread::yield_now();
            }
            stop.sleep(ahead)
                && (!sync || give_way(&|| shared.writer.sync_activity(), stop, &mut after))
        };
        wait = match shared.maintain_step(policy, idle, garbage, CompactStep::Done, &mut pace) {
            // More may be due at once.
            Ok(Some(_)) => Duration::ZERO,
            Ok(None) => policy.interval,
            Err(e) => {
                tracing::warn!(error = %e, "a maintenance step failed; it will be retried");
                policy.interval * 20
            }
        };
    }
}

/// A merge's next piece (8 MiB written, then synced) waits for this many
/// syncs of appended bytes to end after its last piece went, so that a
/// piece lands on about one append's sync in this many at most: far fewer
/// than the one in a hundred that would move an append's p99.
const SYNCS_PER_PIECE: u64 = 400;
/// ... or for no such sync to begin or end for this long: appends are idle.
const QUIET: Duration = Duration::from_millis(20);
/// ... or for this long at most, so that a merge beside appends that never
/// pause still goes on (a piece, 8 MiB, per this time at least).
const MOST_WAIT: Duration = Duration::from_millis(250);
/// How often a waiting piece looks at the appends' syncs.
const LOOK_EVERY: Duration = Duration::from_millis(2);

/// Waits until the merge's next piece may go to the disk (see
/// [`SYNCS_PER_PIECE`]). `activity` tells the appends' syncs begun and
/// ended so far (`Log::sync_activity`); `after` is what it told when the
/// last piece went (or the merge began), and is set to what it tells when
/// this one goes. `false` if the store is closing.
fn give_way(activity: &dyn Fn() -> (u64, u64), stop: &Stop, after: &mut (u64, u64)) -> bool {
    let started = Instant::now();
    let mut seen = activity();
    let mut quiet_since = started;
    loop {
        let (begun, ended) = seen;
        // Nothing in flight, and nothing synced since the last piece (or
        // for a while): no append waits on the disk.
        let idle = begun == ended && (seen == *after || quiet_since.elapsed() >= QUIET);
        if idle
            || ended.saturating_sub(after.1) >= SYNCS_PER_PIECE
            || started.elapsed() >= MOST_WAIT
        {
            *after = seen;
            return true;
        }
        if !stop.sleep(LOOK_EVERY) {
            return false;
        }
        let now = activity();
        if now != seen {
            quiet_since = Instant::now();
        }
        seen = now;
    }
}

impl Store {
    /// Stops the maintenance thread, if one runs.
    pub(super) fn stop_maintenance(&mut self) {
        if let Some(m) = self.maintainer.take() {
            m.stop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Options;

    fn run(from: usize, to: usize, bytes: u64) -> Run {
        Run { from, to, bytes }
    }

    fn shape(runs: Vec<Run>, tail: Vec<(u64, u64)>) -> Shape {
        let listed = runs.last().map_or(0, |r| r.to);
        Shape {
            runs,
            compacted: (100..100 + listed as u64).collect(),
            tail,
        }
    }

    #[test]
    fn every_durable_append_and_sync_counts_as_a_sync_begun_and_ended() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(dir.path(), Options::default()).unwrap();
        let activity = || store.shared.writer.sync_activity();
        assert_eq!(activity(), (0, 0));
        for i in 0..3 {
            store
                .append_message("t", "c", format!("m{i}").as_bytes())
                .unwrap();
        }
        assert_eq!(activity(), (3, 3));
        store.sync().unwrap();
        assert_eq!(activity(), (4, 4));
    }

    #[test]
    fn a_piece_goes_at_once_when_no_append_synced_since_the_last() {
        let stop = Stop::default();
        let mut after = (7, 7);
        assert!(give_way(&|| (7, 7), &stop, &mut after));
        assert_eq!(after, (7, 7));
    }

    #[test]
    fn a_piece_waits_for_enough_appends_syncs_to_end() {
        let stop = Stop::default();
        // Appends sync back to back: one in flight at every look, 100 more
        // ended by each.
        let looks = std::cell::Cell::new(0u64);
        let activity = || {
            looks.set(looks.get() + 1);
            (looks.get() * 100 + 1, looks.get() * 100)
        };
        let mut after = (0, 0);
        let started = Instant::now();
        assert!(give_way(&activity, &stop, &mut after));
        // Gone at the look that saw SYNCS_PER_PIECE ended, not before, and
        // not for the bound on its wait.
        assert_eq!(looks.get(), SYNCS_PER_PIECE / 100);
        assert_eq!(after, (SYNCS_PER_PIECE + 1, SYNCS_PER_PIECE));
        assert!(started.elapsed() < MOST_WAIT);
    }

    #[test]
    fn a_piece_beside_slow_appends_goes_after_the_longest_wait() {
        let stop = Stop::default();
        // One sync in flight all along, none ending: the disk is slow.
        let mut after = (4, 3);
        let started = Instant::now();
        assert!(give_way(&|| (4, 3), &stop, &mut after));
        assert!(started.elapsed() >= MOST_WAIT);
    }

    #[test]
    fn a_piece_goes_once_appends_have_been_quiet_for_a_while() {
        let stop = Stop::default();
        // A few syncs since the last piece, then none.
        let mut after = (0, 0);
        let started = Instant::now();
        assert!(give_way(&|| (5, 5), &stop, &mut after));
        let waited = started.elapsed();
        assert!(waited >= QUIET && waited < MOST_WAIT, "{waited:?}");
        assert_eq!(after, (5, 5));
    }

    #[test]
    fn a_waiting_piece_gives_up_when_the_store_closes() {
        let stop = Stop::default();
        *stop.stopped.lock() = true;
        let mut after = (0, 0);
        assert!(!give_way(&|| (1, 0), &stop, &mut after));
        assert_eq!(after, (0, 0));
    }

    #[test]
    fn the_tail_is_merged_when_long_enough_or_idle_and_as_far_as_the_budget_goes() {
        let policy = Maintenance::default().tail_segments(3);
        let two = shape(vec![], vec![(5, 10), (6, 10)]);
        assert_eq!(choose(&two, None, u64::MAX, false, &policy), None);
        let idle = choose(&two, None, u64::MAX, true, &policy);
        assert_eq!(idle.map(|j| j.through), Some(Some(6)));
        let three = shape(vec![run(0, 2, 50)], vec![(5, 10), (6, 10), (7, 10)]);
        let job = choose(&three, None, 25, false, &policy).unwrap();
        assert_eq!((job.from, job.to, job.through), (2, 2, Some(6)));
        // However small the budget, one segment goes.
        let job = choose(&three, None, 1, false, &policy).unwrap();
        assert_eq!(job.through, Some(5));
    }

    #[test]
    fn runs_of_similar_size_are_merged_newest_first_and_a_much_bigger_one_is_not() {
        let policy = Maintenance::default();
        let runs = shape(
            vec![run(0, 8, 800), run(8, 10, 200), run(10, 12, 150)],
            vec![],
        );
        let job = choose(&runs, None, u64::MAX, false, &policy).unwrap();
        assert_eq!((job.from, job.to, job.through), (8, 12, None));
        assert_eq!(choose(&runs, None, 300, false, &policy), None);
        let lopsided = shape(vec![run(0, 8, 800), run(8, 9, 100)], vec![]);
        assert_eq!(choose(&lopsided, None, u64::MAX, false, &policy), None);
    }

    #[test]
    fn a_run_is_rewritten_for_its_garbage_but_not_for_tombstones() {
        let policy = Maintenance::default();
        let s = shape(vec![run(0, 1, 10_000), run(1, 2, 100_000)], vec![]);
        let mut usage = Usage {
            live: 60_000,
            tombstones: 500,
            ..Usage::default()
        };
        usage.per_segment.insert(100, 9_000);
        usage.per_segment.insert(101, 60_000);
        let job = choose(&s, Some(&usage), 0, false, &policy).unwrap();
        assert_eq!((job.from, job.to), (1, 2));
        // Only tombstones' worth of dead bytes: nothing to gain.
        usage.per_segment.insert(101, 100_000 - HEADER_LEN - 400);
        assert_eq!(choose(&s, Some(&usage), 0, false, &policy), None);
    }

    #[test]
    fn merged_by_tiers_a_context_lives_in_few_places() {
        let fs = crate::fs::MemFs::new();
        let options = Options::default()
            .durability(crate::options::Durability::Buffered)
            .segment_bytes(4096)
            .maintenance(Some(Maintenance::default().background(false)))
            .fs(Arc::new(fs));
        let store = Store::open("/m", options).unwrap();
        for i in 0..3000 {
            let body = vec![b'a' + (i % 20) as u8; 200];
            store
                .append_message("t", &format!("c{}", i % 20), &body)
                .unwrap();
            if i % 50 == 49 {
                while store.maintain().unwrap().is_some() {}
            }
        }
        let written = store.stats().merged_bytes;
        let manifest = store.manifest.lock().clone();
        let run_of: HashMap<u64, u64> = manifest
            .compacted
            .iter()
            .copied()
            .zip(manifest.runs.iter().copied())
            .collect();
        // 780 KB of records, which the space bound (1.3x the live bytes,
        // and the store is at 1.14x) lets merge about 60 KB at a time: runs
        // of that size, and a few smaller ones of the newest records.
        let runs = store.shape(&manifest).runs.len();
        assert!(runs <= 20, "{runs} runs: {:?}", store.shape(&manifest).runs);
        for c in 0..20 {
            let key = crate::namespace::ContextKey::derive("t", &format!("c{c}")).unwrap();
            let slot = store.index.get(&key).unwrap();
            let places: std::collections::HashSet<u64> = slot
                .state
                .read()
                .record_locs()
                .map(|l| {
                    run_of
                        .get(&l.segment)
                        .copied()
                        .unwrap_or(u64::MAX - l.segment)
                })
                .collect();
            // As written, its 150 records were in 150 segments.
            assert!(places.len() <= runs + 2, "c{c} in {} places", places.len());
            assert!(places.len() <= 22, "c{c} in {} places", places.len());
        }
        // Size tiers rewrite each byte a few times, not once per merge.
        assert!(written < 8 * 780_000, "{written} bytes written");
    }
}
