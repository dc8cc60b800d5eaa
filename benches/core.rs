//! Micro-benchmarks of the core engine's hot paths, and a ratio report.
//!
//! `cargo bench --bench core` runs the criterion groups, then prints each
//! figure as a ratio to a floor measured in the same run (the machines are
//! shared and noisy, so absolute times drift; ratios travel).
//! `CTXLOG_BENCH_QUICK=1` shortens every measurement.

use std::fs::OpenOptions;
use std::hint::black_box;
use std::io::Write;
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion};
use ctxlog::internals::record::{self, ContextName, RecordBody, RecordKind};
use ctxlog::render::Budget;
use ctxlog::{ContextKey, Durability, Options, Receipt, Store};

const KIB: usize = 1024;

fn message(i: usize) -> Vec<u8> {
    // Incompressible-looking bytes, different per message.
    let mut x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..KIB)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// An empty store with `Buffered` durability in a fresh temporary directory.
fn buffered_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let options = Options::default().durability(Durability::Buffered);
    let store = Store::open(dir.path(), options).unwrap();
    (dir, store)
}

/// A store of `contexts` × `per_context` messages of 1 KiB, written round-robin.
fn filled_store(contexts: usize, per_context: usize) -> (tempfile::TempDir, Store) {
    let (dir, store) = buffered_store();
    for i in 0..per_context {
        for c in 0..contexts {
            store
                .append_message("bench", &format!("ctx-{c}"), &message(i * contexts + c))
                .unwrap();
        }
    }
    store.sync().unwrap();
    (dir, store)
}

fn bench_codec(c: &mut Criterion) {
    let key = ContextKey::derive("bench", "ctx-0").unwrap();
    let body = RecordBody {
        seq: 7,
        timestamp_ms: 1_800_000_000_000,
        opens: None,
        kind: RecordKind::Message { task: None },
    };
    let blob = message(0);
    let encoded = record::encode(&key, &body, &blob).unwrap();
    c.bench_function("record/encode 1KiB", |b| {
        b.iter(|| record::encode(black_box(&key), black_box(&body), black_box(&blob)).unwrap())
    });
    c.bench_function("record/decode 1KiB", |b| {
        b.iter(|| record::decode(black_box(&encoded)).unwrap())
    });
    let _ = ContextName {
        tenant: String::new(),
        context_id: String::new(),
    };
    c.bench_function("namespace/derive", |b| {
        b.iter(|| {
            ContextKey::derive(black_box("tenant-a"), black_box("ctx_refund_ord123")).unwrap()
        })
    });
}

fn bench_reads(c: &mut Criterion) {
    let (_dir, store) = filled_store(200, 200);
    let mut i = 0usize;
    for n in [20usize, 200] {
        c.bench_function(&format!("history/last {n} of 1KiB"), |b| {
            b.iter(|| {
                i = (i + 1) % 200;
                store
                    .last_messages("bench", &format!("ctx-{i}"), n)
                    .unwrap()
            })
        });
    }
}

/// Receives user message `m{n}` saying `text` in context `ctx-{ctx}`,
/// joining `task` if given.
fn receive(store: &Store, n: usize, ctx: usize, task: Option<&str>, text: &str) -> Receipt {
    let mut m = serde_json::json!({"messageId": format!("m{n}"), "role": "ROLE_USER",
        "contextId": format!("ctx-{ctx}"), "parts": [{"text": text}]});
    if let Some(task) = task {
        m["taskId"] = task.into();
    }
    store
        .receive_message("bench", m.to_string().as_bytes())
        .unwrap()
}

/// The agent completes `task` of context `ctx-{ctx}`, replying `text` in a
/// message `reply_id` carried by the COMPLETED status.
fn complete(store: &Store, task: &str, ctx: usize, reply_id: &str, text: &str) {
    let status = serde_json::json!({ "statusUpdate": { "taskId": task,
        "contextId": format!("ctx-{ctx}"), "status": { "state": "TASK_STATE_COMPLETED",
        "message": { "messageId": reply_id, "role": "ROLE_AGENT", "parts": [{ "text": text }] } } } });
    store
        .apply_event("bench", status.to_string().as_bytes())
        .unwrap();
}

/// Task reads and receives on the A2A path (`Buffered`, so the index and
/// the codec are what is measured, not the disk): 50 contexts of 100 tasks,
/// each task a received message and the agent's COMPLETED reply, as
/// interleaved in its context as a busy case leaves them.
fn bench_tasks(c: &mut Criterion) {
    let (_dir, store) = buffered_store();
    let contexts = 50;
    let mut oldest = Vec::new();
    let mut newest = Vec::new();
    let mut n = 0usize;
    for t in 0..100 {
        for ctx in 0..contexts {
            n += 1;
            let r = receive(&store, n, ctx, None, "please refund order 123");
            complete(&store, &r.task_id, ctx, &format!("a{n}"), "refunded");
            match t {
                0 => oldest.push(r.task_id),
                99 => newest.push(r.task_id),
                _ => {}
            }
        }
    }
    for (name, ids) in [("oldest", &oldest), ("newest", &newest)] {
        let mut i = 0usize;
        c.bench_function(&format!("task/get the {name} of 100"), |b| {
            b.iter(|| {
                i = (i + 1) % ids.len();
                store.get_task("bench", &ids[i], None, false).unwrap()
            })
        });
    }
    // A task whose message came in v0.3's form, read back as v1.0's.
    let v03 = br#"{"kind":"message","messageId":"v03","role":"user","contextId":"ctx-0","parts":[{"kind":"text","text":"please refund order 123"}]}"#;
    let r = store
        .receive_v03_message("bench", v03, ctxlog::MessageIds::Idempotent)
        .unwrap();
    complete(&store, &r.task_id, 0, "a-v03", "refunded");
    c.bench_function("task/get one received in v0.3", |b| {
        b.iter(|| store.get_task("bench", &r.task_id, None, false).unwrap())
    });
    c.bench_function("task/receive a new task", |b| {
        b.iter(|| {
            n += 1;
            let msg = format!(
                r#"{{"messageId":"m{n}","role":"ROLE_USER","contextId":"ctx-{}","parts":[{{"text":"again"}}]}}"#,
                n % contexts
            );
            store.receive_message("bench", msg.as_bytes()).unwrap()
        })
    });
}

/// A 1 KiB A2A message of readable text.
fn a2a_message(i: usize) -> Vec<u8> {
    let text: String = "Please refund the duplicate charge on order 123. "
        .chars()
        .cycle()
        .take(KIB)
        .collect();
    let role = if i.is_multiple_of(2) {
        "ROLE_USER"
    } else {
        "ROLE_AGENT"
    };
    format!(
        r#"{{"messageId":"m-{i}","role":"{role}","taskId":"task-{}","parts":[{{"text":"{text}"}}]}}"#,
        i / 4
    )
    .into_bytes()
}

fn bench_render(c: &mut Criterion) {
    let (_dir, store) = buffered_store();
    for i in 0..400 {
        store
            .append_message("bench", "case", &a2a_message(i))
            .unwrap();
    }
    for n in [20usize, 200] {
        let budget = Budget::new(1 << 20, n);
        c.bench_function(&format!("render/last {n} of 1KiB"), |b| {
            b.iter(|| store.render_history("bench", "case", None, budget).unwrap())
        });
        // What an agent's turn is handed: the history and its rendering,
        // read apart and read once for both.
        c.bench_function(&format!("turn/history, then render, last {n}"), |b| {
            b.iter(|| {
                let history = store.history("bench", "case", None, budget).unwrap();
                let rendered = store.render_history("bench", "case", None, budget).unwrap();
                (history, rendered)
            })
        });
        c.bench_function(&format!("turn/history and rendering, last {n}"), |b| {
            b.iter(|| {
                store
                    .history_and_rendering("bench", "case", None, budget)
                    .unwrap()
            })
        });
    }
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_codec, bench_reads, bench_tasks, bench_render
}

fn config() -> Criterion {
    let c = Criterion::default();
    if quick() {
        c.warm_up_time(Duration::from_millis(200))
            .measurement_time(Duration::from_millis(500))
            .sample_size(10)
    } else {
        c
    }
}

fn quick() -> bool {
    std::env::var_os("CTXLOG_BENCH_QUICK").is_some()
}

/// Median time of `f` over `runs` runs.
fn median(runs: usize, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

/// Figures that only mean something next to the machine's own limits.
fn ratio_report() {
    let runs = if quick() { 200 } else { 2000 };
    println!("\nratio report ({runs} runs each, medians, same process):");

    // History read of 20 × 1 KiB of a random context among 2,000, against
    // copying 20 blocks of 1 KiB picked the same way from 40 MiB in memory.
    let (_dir, store) = filled_store(2000, 20);
    let src: Vec<Vec<u8>> = (0..2000 * 20).map(message).collect();
    let mut j = 0usize;
    let floor = median(runs, || {
        j = (j + 7919) % 2000;
        let copy: Vec<Vec<u8>> = (0..20).map(|k| src[k * 2000 + j].clone()).collect();
        black_box(copy);
    });
    let mut i = 0usize;
    let read = median(runs, || {
        i = (i + 7919) % 2000;
        black_box(
            store
                .last_messages("bench", &format!("ctx-{i}"), 20)
                .unwrap(),
        );
    });
    println!(
        "  history read, last 20 x 1 KiB (warm): {read:?} = {:.2}x the memory-copy floor ({floor:?}); target <= 3x",
        read.as_secs_f64() / floor.as_secs_f64()
    );
    drop(store);

    // Durable append against a raw 1 KiB write + fdatasync on the same disk.
    let dir = tempfile::tempdir().unwrap();
    let mut raw = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.path().join("floor"))
        .unwrap();
    let block = message(1);
    let sync_runs = runs / 4;
    let floor = median(sync_runs, || {
        raw.write_all(&block).unwrap();
        raw.sync_data().unwrap();
    });
    let store = Store::open(dir.path().join("store"), Options::default()).unwrap();
    let mut n = 0usize;
    let append = median(sync_runs, || {
        n += 1;
        store
            .append_message("bench", &format!("ctx-{}", n % 100), &block)
            .unwrap();
    });
    println!(
        "  durable append of 1 KiB (Sync): {append:?} = {:.2}x the write+fdatasync floor ({floor:?}); target <= 1.2x",
        append.as_secs_f64() / floor.as_secs_f64()
    );
}

/// How a memory-report store is filled: `contexts` contexts of `per_context`
/// history messages each.
#[derive(Clone, Copy)]
enum Mix {
    /// `append_message`: no tasks, no messageIds.
    Raw,
    /// Received A2A messages, `per_task` to a task (follow-ups name it).
    Received { per_task: usize },
    /// Per task: a received message and the agent's COMPLETED status with
    /// its reply (two history messages), as a plain A2A exchange leaves.
    Exchanges,
}

/// Index bytes per history message (`Store::stats`: the index's own
/// estimate, vectors at capacity, hash tables with their slack). Context
/// sizes are spread evenly from half to one and a half times `per_context`,
/// so that the figure is the average over where the vectors stand in their
/// growth, not the luck of one size.
fn index_bytes_per_message(mix: Mix, contexts: usize, per_context: usize) -> f64 {
    let (_dir, store) = buffered_store();
    let mut task_of = vec![String::new(); contexts];
    let mut n = 0usize;
    let mut receive_next = |c: usize, task: Option<&str>| {
        n += 1;
        receive(&store, n, c, task, "m").task_id
    };
    let size = |c: usize| per_context / 2 + per_context * c / contexts;
    // Round robin over the contexts, as the traffic of many cases arrives.
    for i in 0..size(contexts - 1) {
        for (c, task) in task_of.iter_mut().enumerate() {
            if i >= size(c) {
                continue;
            }
            match mix {
                Mix::Raw => {
                    store
                        .append_message("bench", &format!("ctx-{c}"), b"m")
                        .unwrap();
                }
                Mix::Received { per_task } => {
                    let follow_up = i % per_task != 0;
                    *task = receive_next(c, follow_up.then_some(task.as_str()));
                }
                Mix::Exchanges if i % 2 == 0 => *task = receive_next(c, None),
                Mix::Exchanges => complete(&store, task, c, &format!("a{i}-{c}"), "done"),
            }
        }
    }
    let stats = store.stats();
    assert_eq!(
        stats.messages as usize,
        (0..contexts).map(size).sum::<usize>()
    );
    stats.index_bytes as f64 / stats.messages as f64
}

fn memory_report() {
    let contexts = if quick() { 200 } else { 2000 };
    println!("  index memory, B per history message (target <= 64), {contexts} contexts:");
    // 20 per context is the mission's reference shape (§4).
    let opens = Mix::Received { per_task: 1 };
    let exchanges = Mix::Exchanges;
    let mixes = [
        ("raw appends", Mix::Raw, 10),
        ("raw appends", Mix::Raw, 20),
        ("raw appends", Mix::Raw, 100),
        ("received, each opens a task", opens, 10),
        ("received, each opens a task", opens, 20),
        ("received, each opens a task", opens, 100),
        ("received, 5 per task", Mix::Received { per_task: 5 }, 10),
        ("received, 5 per task", Mix::Received { per_task: 5 }, 20),
        ("received, 20 per task", Mix::Received { per_task: 20 }, 100),
        (
            "received, 100 per task",
            Mix::Received { per_task: 100 },
            100,
        ),
        ("exchanges (message + reply per task)", exchanges, 10),
        ("exchanges (message + reply per task)", exchanges, 20),
        ("exchanges (message + reply per task)", exchanges, 100),
    ];
    for (name, mix, per_context) in mixes {
        println!(
            "    {name}, {per_context} per context: {:.1}",
            index_bytes_per_message(mix, contexts, per_context)
        );
    }
}

/// Space on disk against the live payload: a store of 1 KiB messages with
/// half its contexts deleted, before and after a compaction.
fn space_report() {
    let contexts = if quick() { 200 } else { 2000 };
    let (_dir, store) = filled_store(contexts, 20);
    for c in (0..contexts).step_by(2) {
        store.delete_context("bench", &format!("ctx-{c}")).unwrap();
    }
    store.sync().unwrap();
    let before = store.stats();
    let report = store.compact().unwrap();
    let after = store.stats();
    println!(
        "  space: {} MiB on disk for {} MiB live = {:.2}x before compaction, {:.2}x after (target <= 1.15x); compaction kept {} records",
        before.disk_bytes >> 20,
        before.live_bytes >> 20,
        before.disk_bytes as f64 / before.live_bytes as f64,
        after.disk_bytes as f64 / after.live_bytes as f64,
        report.records_kept
    );
}

fn main() {
    benches();
    ratio_report();
    memory_report();
    space_report();
    Criterion::default().configure_from_args().final_summary();
}
