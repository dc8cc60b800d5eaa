//! Whole-store fault simulation: a workload of appends, received A2A
//! messages, rotations, checkpoints, a deletion, two compactions and a reopen
//! runs on the in-memory file system, and a fault is injected at each of its
//! file calls in turn: a power loss just before it (the unsynced bytes and
//! names lost, kept, or torn), or its failure. The disk afterwards must open
//! and hold exactly what the steps acknowledged (the step in progress may or
//! may not have happened), and take new writes; a failure must surface as an
//! error of the step it hit, or be absorbed with nothing lost.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ctxlog::fs::{Crash, Fault, FaultPlan, FaultyFs, FileOp, Fs, MemFs};
use ctxlog::{Durability, Error, Maintenance, Options, Store};

/// What every context holds: its messages' raw bytes, or `None` once deleted.
type Model = BTreeMap<String, Option<Vec<Vec<u8>>>>;

/// What happens at file call number `at`.
#[derive(Clone, Copy)]
enum Action {
    /// A power loss just before it: the disk that survives is kept.
    Crash(fn(usize) -> Crash),
    /// The call fails (a write or a whole-file write is cut short instead).
    Fail,
}

/// Counts file calls and acts at call number `at`, noting which workload
/// step was running then.
struct CrashAt {
    at: usize,
    action: Action,
    calls: AtomicUsize,
    step: AtomicUsize,
    disk: MemFs,
    /// The workload's durability.
    durability: Durability,
    /// The survivor of a crash, and the step it interrupted.
    taken: Mutex<Option<(MemFs, usize)>>,
}

impl FaultPlan for CrashAt {
    fn before(&self, op: FileOp, _path: &Path) -> Fault {
        if self.calls.fetch_add(1, Ordering::SeqCst) != self.at {
            return Fault::Pass;
        }
        let step = self.step.load(Ordering::SeqCst);
        match self.action {
            Action::Crash(how) => {
                let survivor = self.disk.crash(how(self.at));
                *self.taken.lock().unwrap() = Some((survivor, step));
                Fault::Pass
            }
            Action::Fail => {
                *self.taken.lock().unwrap() = Some((self.disk.clone(), step));
                let e = std::io::Error::other("injected failure");
                match op {
                    FileOp::Write | FileOp::Replace => Fault::Short(self.at % 50, e),
                    _ => Fault::Fail(e),
                }
            }
        }
    }
}

fn dir() -> PathBuf {
    PathBuf::from("/crash/store")
}

fn options(fs: Arc<dyn Fs>, durability: Durability) -> Options {
    Options::default()
        .durability(durability)
        .segment_bytes(4096)
        .checkpoint_interval(Some(3000))
        .maintenance(Some(
            Maintenance::default().background(false).tail_segments(2),
        ))
        .fs(fs)
}

fn message(i: usize) -> Vec<u8> {
    format!(
        r#"{{"messageId":"m{i}","contextId":"c0","role":"ROLE_USER","parts":[{{"text":"{}"}}]}}"#,
        "r".repeat(i * 7 % 90)
    )
    .into_bytes()
}

/// Runs the workload up to its first error; returns the model after each
/// step (index 0: before the first) and that error.
fn workload(plan: &Arc<CrashAt>) -> (Vec<Model>, Option<Error>) {
    let mut models = vec![Model::new()];
    let mut model = Model::new();
    let fs = Arc::new(FaultyFs::new(Arc::new(plan.disk.clone()), plan.clone()));
    let begin = |n: usize| plan.step.store(n, Ordering::SeqCst);
    begin(1);
    let options = |fs: &Arc<FaultyFs>| options(fs.clone(), plan.durability);
    let mut store = match Store::open(dir(), options(&fs)) {
        Ok(s) => Some(s),
        Err(e) => return (models, Some(e)),
    };
    models.push(model.clone());
    for i in 0..61 {
        begin(models.len());
        let s = store.as_ref().unwrap();
        let done = match i {
            12 => s.delete_context("t", "c1").map(|()| {
                model.insert("c1".into(), None);
            }),
            20 | 45 => s.compact().map(drop),
            // Every merge maintenance picks now: the sealed tail, then
            // runs of similar size.
            35 | 52 | 57 => (|| {
                while s.maintain()?.is_some() {}
                Ok(())
            })(),
            27 => store.take().unwrap().close().and_then(|()| {
                store = Some(Store::open(dir(), options(&fs))?);
                Ok(())
            }),
            60 => store.take().unwrap().close(),
            _ if i % 4 == 3 => {
                let raw = message(i);
                s.receive_message("t", &raw)
                    .map(|_| push(&mut model, "c0", raw))
            }
            _ => {
                let context = format!("c{}", i % 3);
                if model.get(&context) == Some(&None) {
                    continue;
                }
                let body = vec![b'a' + (i % 26) as u8; 100 + i * 37 % 500];
                s.append_message("t", &context, &body)
                    .map(|_| push(&mut model, &context, body))
            }
        };
        if let Err(e) = done {
            return (models, Some(e));
        }
        models.push(model.clone());
    }
    (models, None)
}

fn push(model: &mut Model, context: &str, raw: Vec<u8>) {
    if let Some(msgs) = model
        .entry(context.to_string())
        .or_insert_with(|| Some(Vec::new()))
    {
        msgs.push(raw);
    }
}

/// What the survivor holds, per context of `model`.
fn holds(store: &Store, model: &Model) -> Model {
    model
        .keys()
        .map(|c| {
            let got = match store.last_messages("t", c, usize::MAX) {
                Ok(m) => Some(m.into_iter().map(|m| m.raw).collect()),
                Err(Error::ContextNotFound) => None,
                Err(e) => panic!("{c}: {e}"),
            };
            (c.clone(), got)
        })
        .collect()
}

fn plan(at: usize, action: Action, durability: Durability) -> Arc<CrashAt> {
    Arc::new(CrashAt {
        at,
        action,
        calls: AtomicUsize::new(0),
        step: AtomicUsize::new(0),
        disk: MemFs::new(),
        durability,
        taken: Mutex::new(None),
    })
}

/// Acts before every file call of the workload in turn and checks each
/// outcome: after a crash, the survivor; after a failure, the same disk
/// reopened once the failing store is gone.
fn act_everywhere(action: Action, durability: Durability) {
    let dry = plan(usize::MAX, action, durability);
    let (models, error) = workload(&dry);
    assert!(error.is_none(), "{error:?}");
    let total = dry.calls.load(Ordering::SeqCst);
    assert!(total > 150, "the workload makes {total} file calls");
    let mut caught_mid_step = 0;
    for at in 0..total {
        let run = plan(at, action, durability);
        let (seen, error) = workload(&run);
        let (disk, step) = run.taken.lock().unwrap().take().expect("acted");
        match action {
            Action::Crash(_) => assert!(error.is_none(), "call {at}: {error:?}"),
            Action::Fail => {
                // The failure either surfaced as an error of the step it hit,
                // or was absorbed (a periodic checkpoint) and the run went on.
                if let Some(e) = &error {
                    assert_eq!(seen.len(), step, "call {at}: {e} surfaced in another step");
                    assert!(!e.to_string().is_empty());
                }
            }
        }
        assert_eq!(
            seen[..],
            models[..seen.len()],
            "call {at}: the steps before the fault did the same"
        );
        let store = Store::open(dir(), options(Arc::new(disk.clone()), durability))
            .unwrap_or_else(|e| panic!("call {at} (step {step}): the disk does not open: {e}"));
        let (want, or) = match (&action, &error) {
            // A failure that did not stop the run must have lost nothing.
            (Action::Fail, None) => (models.last().unwrap(), models.last().unwrap()),
            _ => (&models[step], &models[step - 1]),
        };
        let got = holds(&store, want);
        let before = holds_model(or, want);
        assert!(
            got == *want || got == before,
            "call {at}, step {step}: {got:?}\n  want {want:?}\n  or {before:?}"
        );
        caught_mid_step += usize::from(got != *want);
        // The disk takes writes, and keeps them across another reopen.
        store
            .append_message("t", "after", b"after the fault")
            .unwrap();
        drop(store);
        let store = Store::open(dir(), options(Arc::new(disk), durability)).unwrap();
        assert_eq!(store.last_messages("t", "after", 5).unwrap().len(), 1);
        assert_eq!(holds(&store, want), got, "call {at}: changed by a reopen");
    }
    assert!(caught_mid_step > 0, "no fault ever caught a step half done");
}

/// `earlier` with every context of `later` present (as missing if new).
fn holds_model(earlier: &Model, later: &Model) -> Model {
    later
        .keys()
        .map(|c| (c.clone(), earlier.get(c).cloned().flatten()))
        .collect()
}

#[test]
fn a_crash_before_any_file_call_that_loses_everything_unsynced() {
    act_everywhere(Action::Crash(|_| Crash::LoseUnsynced), Durability::Sync);
}

#[test]
fn a_crash_before_any_file_call_that_keeps_everything_unsynced() {
    act_everywhere(Action::Crash(|_| Crash::KeepUnsynced), Durability::Sync);
}

#[test]
fn a_crash_before_any_file_call_that_tears_what_was_unsynced() {
    act_everywhere(Action::Crash(|at| Crash::Torn(at as u64)), Durability::Sync);
}

// With group commit, appends only copy their frames to memory and the syncer
// thread writes and syncs them: the same faults, met on its thread.
#[test]
fn with_group_commit_a_crash_before_any_file_call_that_tears_what_was_unsynced() {
    act_everywhere(
        Action::Crash(|at| Crash::Torn(at as u64)),
        Durability::GroupCommit,
    );
}

#[test]
fn with_group_commit_a_failure_of_any_file_call_errors_cleanly() {
    act_everywhere(Action::Fail, Durability::GroupCommit);
}

#[test]
fn a_failure_of_any_file_call_errors_cleanly_and_loses_nothing_acknowledged() {
    act_everywhere(Action::Fail, Durability::Sync);
}

#[test]
fn verify_reads_the_disk_the_store_was_given() {
    let disk = MemFs::new();
    let store = Store::open(dir(), options(Arc::new(disk.clone()), Durability::Sync)).unwrap();
    for i in 0..30 {
        store.append_message("t", "c", &message(i)).unwrap();
    }
    store.close().unwrap();
    let clean = Store::verify_on(&disk, dir(), &mut |_, _| {}).unwrap();
    assert!(clean.is_clean() && clean.segments > 1, "{clean:?}");
    // Flip a byte inside the first segment's first record.
    let first = dir().join("0000000000000001.seg");
    let mut bytes = disk.read(&first).unwrap();
    bytes[60] ^= 0x40;
    disk.set_contents(&first, bytes).unwrap();
    let damaged = Store::verify_on(&disk, dir(), &mut |_, _| {}).unwrap();
    assert_eq!(damaged.damage.len(), 1, "{damaged:?}");
    assert_eq!(damaged.damage[0].segment, 1);
    // Nothing of that exists on the real disk.
    assert!(Store::verify(dir(), &mut |_, _| {}).is_err());
}

#[test]
fn preallocated_space_is_neither_damage_nor_a_torn_tail() {
    let disk = MemFs::new();
    let options = Options::default().fs(Arc::new(disk.clone()));
    let store = Store::open(dir(), options.clone()).unwrap();
    for i in 0..5 {
        store.append_message("t", "c", &message(i)).unwrap();
    }
    // While the store is open, its segment is zero-filled well past its records.
    let segment = dir().join("0000000000000001.seg");
    let open_len = disk.read(&segment).unwrap().len() as u64;
    assert!(open_len >= options.preallocate, "{open_len}");
    // A power loss now leaves those zeros behind, synced.
    let crashed = disk.crash(Crash::LoseUnsynced);
    assert_eq!(crashed.read(&segment).unwrap().len() as u64, open_len);
    let report = Store::verify_on(&crashed, dir(), &mut |_, _| {}).unwrap();
    assert!(report.is_clean() && report.records == 5, "{report:?}");
    let reopened = Store::open(dir(), options.clone().fs(Arc::new(crashed.clone()))).unwrap();
    assert_eq!(reopened.open_report().torn_tail, None);
    let raws: Vec<Vec<u8>> = reopened
        .last_messages("t", "c", 10)
        .unwrap()
        .into_iter()
        .map(|m| m.raw)
        .collect();
    assert_eq!(raws, (0..5).map(message).collect::<Vec<_>>());
    // The open cut the zeros; appends fill new ones, and a close cuts them.
    let data_end = crashed.read(&segment).unwrap().len() as u64;
    assert!(data_end < open_len);
    reopened.append_message("t", "c", &message(5)).unwrap();
    assert!(crashed.read(&segment).unwrap().len() as u64 > data_end + 1000);
    reopened.close().unwrap();
    let closed_len = crashed.read(&segment).unwrap().len() as u64;
    assert!(
        closed_len > data_end && closed_len < data_end + 1000,
        "{closed_len}"
    );
    let report = Store::verify_on(&crashed, dir(), &mut |_, _| {}).unwrap();
    assert!(report.is_clean() && report.records == 6, "{report:?}");
}
