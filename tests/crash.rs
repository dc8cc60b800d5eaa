//! Whole-store crash simulation: a workload of appends, received A2A
//! messages, rotations, checkpoints, a deletion, a compaction and reopens runs
//! on the in-memory file system, and a power loss is simulated before each of
//! its file calls in turn, with the unsynced bytes and names lost, kept, or
//! torn. The disk that survives must open, and hold exactly what the steps
//! acknowledged before the crash (the step in progress may or may not have
//! happened), and take new writes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ctxlog::fs::{Crash, Fault, FaultPlan, FaultyFs, FileOp, MemFs};
use ctxlog::{Durability, Error, Options, Store};

/// What every context holds: its messages' raw bytes, or `None` once deleted.
type Model = BTreeMap<String, Option<Vec<Vec<u8>>>>;

/// Takes the power-loss snapshot just before file call number `at`, and
/// notes which workload step was running then.
struct CrashAt {
    at: usize,
    how: fn(usize) -> Crash,
    calls: AtomicUsize,
    step: AtomicUsize,
    disk: MemFs,
    taken: Mutex<Option<(MemFs, usize)>>,
}

impl FaultPlan for CrashAt {
    fn before(&self, _op: FileOp, _path: &Path) -> Fault {
        if self.calls.fetch_add(1, Ordering::SeqCst) == self.at {
            let survivor = self.disk.crash((self.how)(self.at));
            *self.taken.lock().unwrap() = Some((survivor, self.step.load(Ordering::SeqCst)));
        }
        Fault::Pass
    }
}

fn dir() -> PathBuf {
    PathBuf::from("/crash/store")
}

fn options(fs: Arc<dyn ctxlog::fs::Fs>) -> Options {
    Options::default()
        .durability(Durability::Sync)
        .segment_bytes(4096)
        .checkpoint_interval(Some(3000))
        .fs(fs)
}

fn message(i: usize) -> Vec<u8> {
    format!(
        r#"{{"messageId":"m{i}","contextId":"c0","role":"ROLE_USER","parts":[{{"text":"{}"}}]}}"#,
        "r".repeat(i * 7 % 90)
    )
    .into_bytes()
}

/// Runs the workload, calling `plan.step` before each step; returns the model
/// after each step (index 0: before the first).
fn workload(plan: &Arc<CrashAt>) -> Vec<Model> {
    let mut models = vec![Model::new()];
    let mut model = Model::new();
    let fs = Arc::new(FaultyFs::new(Arc::new(plan.disk.clone()), plan.clone()));
    let begin = |n: usize| plan.step.store(n, Ordering::SeqCst);
    begin(1);
    let mut store = Some(Store::open(dir(), options(fs.clone())).unwrap());
    models.push(model.clone());
    for i in 0..60 {
        begin(models.len());
        let s = store.as_ref().unwrap();
        match i {
            12 => {
                s.delete_context("t", "c1").unwrap();
                model.insert("c1".into(), None);
            }
            20 | 45 => {
                s.compact().unwrap();
            }
            27 => {
                store.take().unwrap().close().unwrap();
                store = Some(Store::open(dir(), options(fs.clone())).unwrap());
            }
            _ if i % 4 == 3 => {
                let raw = message(i);
                s.receive_message("t", &raw).unwrap();
                push(&mut model, "c0", raw);
            }
            _ => {
                let context = format!("c{}", i % 3);
                if model.get(&context) == Some(&None) {
                    continue;
                }
                let body = vec![b'a' + (i % 26) as u8; 100 + i * 37 % 500];
                s.append_message("t", &context, &body).unwrap();
                push(&mut model, &context, body);
            }
        }
        models.push(model.clone());
    }
    begin(models.len());
    store.take().unwrap().close().unwrap();
    models.push(model.clone());
    models
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

fn plan(at: usize, how: fn(usize) -> Crash) -> Arc<CrashAt> {
    Arc::new(CrashAt {
        at,
        how,
        calls: AtomicUsize::new(0),
        step: AtomicUsize::new(0),
        disk: MemFs::new(),
        taken: Mutex::new(None),
    })
}

/// Crashes before every file call of the workload in turn, the unsynced
/// state fared as `how` says, and checks each survivor.
fn crash_everywhere(how: fn(usize) -> Crash) {
    let dry = plan(usize::MAX, how);
    let models = workload(&dry);
    let total = dry.calls.load(Ordering::SeqCst);
    assert!(total > 150, "the workload makes {total} file calls");
    let mut checked_mid_step = 0;
    for at in 0..total {
        let run = plan(at, how);
        assert_eq!(workload(&run), models, "the workload is deterministic");
        let (survivor, step) = run.taken.lock().unwrap().take().expect("crashed");
        let store = Store::open(dir(), options(Arc::new(survivor.clone())))
            .unwrap_or_else(|e| panic!("call {at} (step {step}): the survivor does not open: {e}"));
        let got = holds(&store, &models[step]);
        let before = holds_model(&models[step - 1], &models[step]);
        assert!(
            got == models[step] || got == before,
            "call {at}, crash during step {step}: {got:?}\n  want {:?}\n  or {before:?}",
            models[step]
        );
        checked_mid_step += usize::from(got != models[step]);
        // The survivor takes writes, and keeps them across another reopen.
        store
            .append_message("t", "after", b"after the crash")
            .unwrap();
        drop(store);
        let store = Store::open(dir(), options(Arc::new(survivor))).unwrap();
        assert_eq!(store.last_messages("t", "after", 5).unwrap().len(), 1);
        assert_eq!(
            holds(&store, &models[step]),
            got,
            "call {at}: changed by a reopen"
        );
    }
    assert!(
        checked_mid_step > 0,
        "no crash ever caught a step half done"
    );
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
    crash_everywhere(|_| Crash::LoseUnsynced);
}

#[test]
fn a_crash_before_any_file_call_that_keeps_everything_unsynced() {
    crash_everywhere(|_| Crash::KeepUnsynced);
}

#[test]
fn a_crash_before_any_file_call_that_tears_what_was_unsynced() {
    crash_everywhere(|at| Crash::Torn(at as u64));
}
