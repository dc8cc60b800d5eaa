//! The same workloads on ctxlog, SQLite (WAL, synchronous=FULL), redb
//! (Durability::Immediate) and fjall (PersistMode::SyncData), each in its own
//! directory, printing one table per workload with every engine's figure and
//! its ratio to ctxlog, next to the machine's floors measured in the same run.
//!
//! `cargo run --release -p ctxlog-bench-compare -- quick` (seconds) or `full`.

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use ctxlog::{Durability, Maintenance, MessageBuf, Options, Store};

/// How big a run is.
#[derive(Clone, Copy)]
struct Scale {
    contexts: u64,
    per_context: u64,
    reads: usize,
    reopen_bytes: u64,
}

const QUICK: Scale = Scale {
    contexts: 500,
    per_context: 20,
    reads: 2_000,
    reopen_bytes: 64 << 20,
};

const FULL: Scale = Scale {
    contexts: 10_000,
    per_context: 20,
    reads: 20_000,
    reopen_bytes: 1 << 30,
};

const BODY: usize = 1024;

/// A 1 KiB body of incompressible bytes, different for every (context, seq).
fn body(ctx: u64, seq: u64) -> Vec<u8> {
    let mut x = (ctx << 20 ^ seq).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..BODY)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// One storage engine under test.
trait Engine: Send + Sync {
    /// Appends one message durably (committed before returning).
    fn append(&self, ctx: u64, seq: u64, body: &[u8]);
    /// Appends a batch in one durable commit.
    fn append_batch(&self, items: &[(u64, u64, Vec<u8>)]);
    /// Reads the last `n` messages of a context, returning their bytes.
    fn last(&self, ctx: u64, n: usize) -> usize;
}

const ENGINES: [&str; 4] = ["ctxlog", "sqlite", "redb", "fjall"];

fn open(name: &str, dir: &Path, threads: usize) -> Box<dyn Engine> {
    match name {
        "ctxlog" => Box::new(CtxLog::open(dir, threads)),
        "sqlite" => Box::new(Sqlite::open(dir)),
        "redb" => Box::new(Redb::open(dir)),
        _ => Box::new(Fjall::open(dir)),
    }
}

/// An engine for bulk loading: batch commits (for ctxlog, Buffered appends
/// and one sync per batch).
fn open_bulk(name: &str, dir: &Path) -> Box<dyn Engine> {
    if name == "ctxlog" {
        let options = Options::default().durability(Durability::Buffered);
        Box::new(CtxLogBatch(Store::open(dir, options).unwrap()))
    } else {
        open(name, dir, 1)
    }
}

/// ctxlog's history read: the last `n` messages, copied into a buffer the
/// thread reuses (`last_messages_into`), as a server reading histories
/// over and over would. (redb's read borrows its values without a copy.)
fn ctxlog_last(store: &Store, ctx: u64, n: usize) -> usize {
    thread_local! {
        static BUF: std::cell::RefCell<MessageBuf> = std::cell::RefCell::default();
    }
    BUF.with_borrow_mut(|buf| {
        store
            .last_messages_into("bench", &format!("ctx-{ctx}"), n, buf)
            .unwrap();
        buf.iter().map(|m| m.raw.len()).sum()
    })
}

/// ctxlog's history read through `last_messages`: a `Vec` per message.
struct CtxLogOwned<'a>(&'a Store);

impl Engine for CtxLogOwned<'_> {
    fn append(&self, _: u64, _: u64, _: &[u8]) {
        unreachable!("only read through")
    }

    fn append_batch(&self, _: &[(u64, u64, Vec<u8>)]) {
        unreachable!("only read through")
    }

    fn last(&self, ctx: u64, n: usize) -> usize {
        let msgs = self
            .0
            .last_messages("bench", &format!("ctx-{ctx}"), n)
            .unwrap();
        msgs.iter().map(|m| m.raw.len()).sum()
    }
}

struct CtxLog(Store);

impl CtxLog {
    fn open(dir: &Path, threads: usize) -> Self {
        let durability = if threads > 1 {
            Durability::GroupCommit
        } else {
            Durability::Sync
        };
        CtxLog(Store::open(dir, Options::default().durability(durability)).unwrap())
    }
}

impl Engine for CtxLog {
    fn append(&self, ctx: u64, _seq: u64, body: &[u8]) {
        self.0
            .append_message("bench", &format!("ctx-{ctx}"), body)
            .unwrap();
    }

    fn append_batch(&self, items: &[(u64, u64, Vec<u8>)]) {
        // Opened with Sync: each append is its own durable commit. (Batched
        // commits use `CtxLogBatch`.)
        for (ctx, seq, body) in items {
            self.append(*ctx, *seq, body);
        }
    }

    fn last(&self, ctx: u64, n: usize) -> usize {
        ctxlog_last(&self.0, ctx, n)
    }
}

/// ctxlog with Buffered appends and one sync per batch: its batch commit.
struct CtxLogBatch(Store);

impl Engine for CtxLogBatch {
    fn append(&self, ctx: u64, _seq: u64, body: &[u8]) {
        self.0
            .append_message("bench", &format!("ctx-{ctx}"), body)
            .unwrap();
        self.0.sync().unwrap();
    }

    fn append_batch(&self, items: &[(u64, u64, Vec<u8>)]) {
        for (ctx, _, body) in items {
            self.0
                .append_message("bench", &format!("ctx-{ctx}"), body)
                .unwrap();
        }
        self.0.sync().unwrap();
    }

    fn last(&self, ctx: u64, n: usize) -> usize {
        ctxlog_last(&self.0, ctx, n)
    }
}

struct Sqlite(std::sync::Mutex<rusqlite::Connection>);

impl Sqlite {
    fn open(dir: &Path) -> Self {
        let conn = rusqlite::Connection::open(dir.join("bench.sqlite")).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;
             CREATE TABLE IF NOT EXISTS msgs(id INTEGER PRIMARY KEY, ctx INTEGER NOT NULL, seq INTEGER NOT NULL, body BLOB NOT NULL);
             CREATE INDEX IF NOT EXISTS by_ctx ON msgs(ctx, seq);",
        )
        .unwrap();
        Sqlite(std::sync::Mutex::new(conn))
    }
}

impl Engine for Sqlite {
    fn append(&self, ctx: u64, seq: u64, body: &[u8]) {
        let conn = self.0.lock().unwrap();
        conn.prepare_cached("INSERT INTO msgs(ctx, seq, body) VALUES (?1, ?2, ?3)")
            .unwrap()
            .execute(rusqlite::params![ctx as i64, seq as i64, body])
            .unwrap();
    }

    fn append_batch(&self, items: &[(u64, u64, Vec<u8>)]) {
        let mut conn = self.0.lock().unwrap();
        let tx = conn.transaction().unwrap();
        {
            let mut st = tx
                .prepare_cached("INSERT INTO msgs(ctx, seq, body) VALUES (?1, ?2, ?3)")
                .unwrap();
            for (ctx, seq, body) in items {
                st.execute(rusqlite::params![*ctx as i64, *seq as i64, body])
                    .unwrap();
            }
        }
        tx.commit().unwrap();
    }

    fn last(&self, ctx: u64, n: usize) -> usize {
        let conn = self.0.lock().unwrap();
        let mut st = conn
            .prepare_cached("SELECT body FROM msgs WHERE ctx = ?1 ORDER BY seq DESC LIMIT ?2")
            .unwrap();
        let rows = st
            .query_map(rusqlite::params![ctx as i64, n as i64], |r| {
                r.get::<_, Vec<u8>>(0)
            })
            .unwrap();
        rows.map(|r| r.unwrap().len()).sum()
    }
}

const REDB_TABLE: redb::TableDefinition<(u64, u64), &[u8]> = redb::TableDefinition::new("msgs");

struct Redb(redb::Database);

impl Redb {
    fn open(dir: &Path) -> Self {
        let db = redb::Database::create(dir.join("bench.redb")).unwrap();
        let tx = db.begin_write().unwrap();
        tx.open_table(REDB_TABLE).unwrap();
        tx.commit().unwrap();
        Redb(db)
    }
}

impl Engine for Redb {
    fn append(&self, ctx: u64, seq: u64, body: &[u8]) {
        self.append_batch(&[(ctx, seq, body.to_vec())]);
    }

    fn append_batch(&self, items: &[(u64, u64, Vec<u8>)]) {
        let tx = self.0.begin_write().unwrap();
        {
            let mut t = tx.open_table(REDB_TABLE).unwrap();
            for (ctx, seq, body) in items {
                t.insert((*ctx, *seq), body.as_slice()).unwrap();
            }
        }
        tx.commit().unwrap();
    }

    fn last(&self, ctx: u64, n: usize) -> usize {
        let tx = self.0.begin_read().unwrap();
        let t = tx.open_table(REDB_TABLE).unwrap();
        let range = t.range((ctx, 0)..=(ctx, u64::MAX)).unwrap();
        range
            .rev()
            .take(n)
            .map(|r| r.unwrap().1.value().len())
            .sum()
    }
}

struct Fjall {
    keyspace: fjall::Keyspace,
    msgs: fjall::PartitionHandle,
}

impl Fjall {
    fn open(dir: &Path) -> Self {
        let keyspace = fjall::Config::new(dir.join("fjall")).open().unwrap();
        let msgs = keyspace
            .open_partition("msgs", fjall::PartitionCreateOptions::default())
            .unwrap();
        Fjall { keyspace, msgs }
    }

    fn key(ctx: u64, seq: u64) -> [u8; 16] {
        let mut k = [0u8; 16];
        k[..8].copy_from_slice(&ctx.to_be_bytes());
        k[8..].copy_from_slice(&seq.to_be_bytes());
        k
    }
}

impl Engine for Fjall {
    fn append(&self, ctx: u64, seq: u64, body: &[u8]) {
        self.msgs.insert(Self::key(ctx, seq), body).unwrap();
        self.keyspace.persist(fjall::PersistMode::SyncData).unwrap();
    }

    fn append_batch(&self, items: &[(u64, u64, Vec<u8>)]) {
        let mut batch = self.keyspace.batch();
        for (ctx, seq, body) in items {
            batch.insert(&self.msgs, Self::key(*ctx, *seq), body.as_slice());
        }
        batch.commit().unwrap();
        self.keyspace.persist(fjall::PersistMode::SyncData).unwrap();
    }

    fn last(&self, ctx: u64, n: usize) -> usize {
        self.msgs
            .prefix(ctx.to_be_bytes())
            .rev()
            .take(n)
            .map(|kv| kv.unwrap().1.to_vec().len())
            .sum()
    }
}

/// A table row: a measure's name and each engine's figure.
type Row = (String, Vec<f64>);

/// Percentile of sorted durations.
fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Bytes of the files under `dir`. A file removed while it is listed (a
/// merge finishing) counts as nothing.
fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let Ok(meta) = entry.metadata() else {
            continue;
        };
        total += if meta.is_dir() {
            dir_bytes(&entry.path())
        } else {
            meta.len()
        };
    }
    total
}

#[path = "../../benches/common/figures.rs"]
mod figures;

/// Whether this run is a short one (its figures are marked so).
static QUICK_RUN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Records a figure of this harness for the headline (see
/// `benches/common/figures.rs`).
fn record(figure: &str, value: f64, unit: &str) {
    let quick = QUICK_RUN.load(std::sync::atomic::Ordering::Relaxed);
    figures::record("compare", figure, value, unit, quick);
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// A table row: each engine's figure, with its ratio to ctxlog's.
fn table(title: &str, unit: &str, lower_is_better: bool, rows: &[Row]) {
    println!("\n### {title}\n");
    print!("| measure |");
    for e in ENGINES {
        print!(" {e} |");
    }
    println!();
    println!("|---|{}", "---|".repeat(ENGINES.len()));
    for (name, values) in rows {
        print!("| {name} ({unit}) |");
        let base = values[0];
        // A row of a table of mixed units names its own ("..., ms").
        let row_unit = ["ms", "us", "MiB"]
            .into_iter()
            .find(|u| name.ends_with(&format!(", {u}")))
            .unwrap_or(unit);
        for (engine, v) in ENGINES.iter().zip(values) {
            record(&format!("{title} / {name} / {engine}"), *v, row_unit);
        }
        for (i, v) in values.iter().enumerate() {
            if i == 0 {
                print!(" {v:.1} |");
            } else {
                let ratio = if lower_is_better { v / base } else { base / v };
                print!(" {v:.1} ({ratio:.2}x ctxlog's cost) |");
            }
        }
        println!();
    }
}

/// W1a: one writer, one durable commit per append, round-robin over contexts.
fn w1a(scale: Scale, root: &Path) -> Vec<Row> {
    let mut p50 = Vec::new();
    let mut p99 = Vec::new();
    let mut rate = Vec::new();
    let n = (scale.contexts * scale.per_context).min(if scale.contexts > 1000 {
        20_000
    } else {
        2_000
    });
    for name in ENGINES {
        let dir = root.join(format!("w1a-{name}"));
        std::fs::create_dir_all(&dir).unwrap();
        let engine = open(name, &dir, 1);
        let mut lat = Vec::with_capacity(n as usize);
        let start = Instant::now();
        for i in 0..n {
            let (ctx, seq) = (i % scale.contexts, i / scale.contexts);
            let b = body(ctx, seq);
            let t = Instant::now();
            engine.append(ctx, seq, &b);
            lat.push(t.elapsed());
        }
        let total = start.elapsed();
        lat.sort();
        p50.push(us(pct(&lat, 0.5)));
        p99.push(us(pct(&lat, 0.99)));
        rate.push(n as f64 / total.as_secs_f64());
    }
    vec![
        ("p50 latency".into(), p50),
        ("p99 latency".into(), p99),
        ("appends per second, higher is better; ratio".into(), rate),
    ]
}

/// W1b: batches of 100 appends per durable commit.
fn w1b(scale: Scale, root: &Path) -> Vec<Row> {
    let mut rate = Vec::new();
    let n = scale.contexts * scale.per_context;
    for name in ENGINES {
        let dir = root.join(format!("w1b-{name}"));
        std::fs::create_dir_all(&dir).unwrap();
        let engine = open_bulk(name, &dir);
        let start = Instant::now();
        let mut i = 0;
        while i < n {
            let batch: Vec<_> = (i..(i + 100).min(n))
                .map(|j| {
                    (
                        j % scale.contexts,
                        j / scale.contexts,
                        body(j % scale.contexts, j / scale.contexts),
                    )
                })
                .collect();
            engine.append_batch(&batch);
            i += 100;
        }
        rate.push(n as f64 / start.elapsed().as_secs_f64());
    }
    vec![("appends per second, higher is better; ratio".into(), rate)]
}

/// W1c: 4 and 16 writer threads, durable per append, distinct contexts.
fn w1c(scale: Scale, root: &Path) -> Vec<Row> {
    let mut rows = Vec::new();
    for threads in [4usize, 16] {
        let mut rate = Vec::new();
        let per = (if scale.contexts > 1000 { 4_000 } else { 800 }) / threads as u64;
        for name in ENGINES {
            let dir = root.join(format!("w1c-{threads}-{name}"));
            std::fs::create_dir_all(&dir).unwrap();
            rate.push(appenders(
                Arc::from(open(name, &dir, threads)),
                threads,
                per,
            ));
        }
        rows.push((
            format!("{threads} threads: appends per second, higher is better; ratio"),
            rate,
        ));
    }
    rows
}

/// W1c's load: `threads` threads, each appending `per` messages durably
/// to its own 50 contexts, started together; appends per second.
fn appenders(engine: Arc<dyn Engine>, threads: usize, per: u64) -> f64 {
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads as u64)
        .map(|t| {
            let (engine, barrier) = (engine.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                for i in 0..per {
                    let ctx = t * 1_000_000 + i % 50;
                    engine.append(ctx, i, &body(ctx, i));
                }
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    for h in handles {
        h.join().unwrap();
    }
    (per * threads as u64) as f64 / start.elapsed().as_secs_f64()
}

/// Fills a store of `contexts` × `per_context` messages with large commits.
fn fill(engine: &dyn Engine, contexts: u64, per_context: u64) {
    let mut batch = Vec::with_capacity(1000);
    for seq in 0..per_context {
        for ctx in 0..contexts {
            batch.push((ctx, seq, body(ctx, seq)));
            if batch.len() == 1000 {
                engine.append_batch(&batch);
                batch.clear();
            }
        }
    }
    if !batch.is_empty() {
        engine.append_batch(&batch);
    }
}

/// Zipf(1.0)-ish pick of a context: low ids far more often.
fn zipf(state: &mut u64, n: u64) -> u64 {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let u = ((*state >> 11) as f64 / (1u64 << 53) as f64).max(1e-12);
    ((n as f64).powf(u) as u64).saturating_sub(1).min(n - 1)
}

fn uniform(state: &mut u64, n: u64) -> u64 {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (*state >> 33) % n
}

/// Latencies of `n` reads of a full history (the last 20 messages) of
/// contexts picked by `pick`, sorted; each read's bytes checked.
fn read_latencies(
    engine: &dyn Engine,
    scale: Scale,
    pick: fn(&mut u64, u64) -> u64,
    n: usize,
) -> Vec<Duration> {
    let mut state = 42u64;
    let mut lat: Vec<Duration> = (0..n)
        .map(|_| {
            let ctx = pick(&mut state, scale.contexts);
            let t = Instant::now();
            let bytes = engine.last(ctx, 20);
            let d = t.elapsed();
            assert_eq!(bytes, BODY * scale.per_context.min(20) as usize);
            d
        })
        .collect();
    lat.sort();
    lat
}

/// W2: reads of the full 20-message history, warm and right after reopening.
fn w2(scale: Scale, root: &Path) -> (Vec<Row>, Vec<Row>) {
    let mut rows: Vec<Row> = [
        "uniform warm p50",
        "uniform warm p99",
        "zipf warm p50",
        "uniform after reopen p50",
        "uniform after reopen p99",
        "uniform warm mean (1e6 / contexts per second)",
    ]
    .iter()
    .map(|n| (n.to_string(), Vec::new()))
    .collect();
    let mut space = vec![
        ("bytes on disk / raw payload".to_string(), Vec::new()),
        ("resident memory after reads, MiB".to_string(), Vec::new()),
    ];
    let raw = (scale.contexts * scale.per_context) as f64 * BODY as f64;
    for name in ENGINES {
        let dir = root.join(format!("w2-{name}"));
        std::fs::create_dir_all(&dir).unwrap();
        {
            let engine = open_bulk(name, &dir);
            fill(engine.as_ref(), scale.contexts, scale.per_context);
        }
        let measure = |engine: &dyn Engine, pick, reads| read_latencies(engine, scale, pick, reads);
        // Right after reopening: the first reads after open.
        let engine = open(name, &dir, 1);
        let cold = measure(engine.as_ref(), uniform, scale.reads / 10);
        let warm = measure(engine.as_ref(), uniform, scale.reads);
        let hot = measure(engine.as_ref(), zipf, scale.reads);
        rows[0].1.push(us(pct(&warm, 0.5)));
        rows[1].1.push(us(pct(&warm, 0.99)));
        rows[2].1.push(us(pct(&hot, 0.5)));
        rows[3].1.push(us(pct(&cold, 0.5)));
        rows[4].1.push(us(pct(&cold, 0.99)));
        let total: Duration = warm.iter().sum();
        rows[5]
            .1
            .push(total.as_secs_f64() / warm.len() as f64 * 1e6);
        space[0].1.push(dir_bytes(&dir) as f64 / raw);
        space[1].1.push(rss_kib() as f64 / 1024.0);
        drop(engine);
        if name == "ctxlog" {
            // ctxlog's log spreads a context's records in write order until
            // a compaction puts them together: measure that layout too.
            let store = Store::open(&dir, Options::default()).unwrap();
            store.compact().unwrap();
            let compacted = CtxLog(store);
            let warm = measure(&compacted, uniform, scale.reads);
            let hot = measure(&compacted, zipf, scale.reads);
            println!(
                "\n(ctxlog after compact(): uniform warm p50 {:.1} us, p99 {:.1} us; zipf warm p50 {:.1} us)",
                us(pct(&warm, 0.5)),
                us(pct(&warm, 0.99)),
                us(pct(&hot, 0.5))
            );
        }
    }
    (rows, space)
}

/// W3 helper, run in a child process: fill `dir` with about `bytes` of
/// messages, print "committed" after the last durable commit, then wait to
/// be killed (or for stdin to close, for a clean close).
fn child_fill(name: &str, dir: &Path, bytes: u64) {
    let contexts = 10_000;
    let per = (bytes / BODY as u64 / contexts).max(1);
    let engine = open_bulk(name, dir);
    fill(engine.as_ref(), contexts, per);
    committed_then_wait();
}

/// The child's side of [`filler`]: says its last append is durable, then
/// waits to be killed, or for stdin to close (the parent's clean close).
fn committed_then_wait() {
    println!("committed");
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

/// The scratch directory the workloads run in: under `$CTXLOG_BENCH_DIR`,
/// or the current directory; removed on drop.
fn scratch_root() -> tempfile::TempDir {
    tempfile::tempdir_in(std::env::var_os("CTXLOG_BENCH_DIR").unwrap_or_else(|| ".".into()))
        .unwrap()
}

/// Runs this program as a child that fills a store (`args`), and returns
/// it once it says its last append is durable; it then waits for its stdin
/// to close (a clean close) or to be killed.
fn filler(args: &[&str]) -> std::process::Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "committed");
    child
}

/// W3: reopen of a store of about `reopen_bytes`, after a clean close and
/// after the writer was killed right after its last durable commit.
fn w3(scale: Scale, root: &Path) -> Vec<Row> {
    let mut clean = Vec::new();
    let mut crash = Vec::new();
    let mut first = Vec::new();
    for name in ENGINES {
        for killed in [false, true] {
            let dir = root.join(format!("w3-{name}-{killed}"));
            std::fs::create_dir_all(&dir).unwrap();
            let bytes = scale.reopen_bytes.to_string();
            let mut child = filler(&["fill", name, dir.to_str().unwrap(), &bytes]);
            if killed {
                child.kill().unwrap();
            } else {
                drop(child.stdin.take());
            }
            child.wait().unwrap();
            let t = Instant::now();
            let engine = open(name, &dir, 1);
            let opened = t.elapsed();
            let t = Instant::now();
            engine.last(7, 20);
            let read = t.elapsed();
            if killed {
                crash.push(opened.as_secs_f64() * 1e3);
                first.push(us(read));
            } else {
                clean.push(opened.as_secs_f64() * 1e3);
            }
            drop(engine);
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
    vec![
        ("reopen after clean close, ms".into(), clean),
        ("reopen after kill, ms".into(), crash),
        ("first read after kill, us".into(), first),
    ]
}

/// Opens the store in `dir` in a fresh process (`engine` as `open` takes
/// it) and returns how long the open took there.
fn open_in_child(engine: &str, dir: &Path) -> Duration {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["open", engine, dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Duration::from_nanos(
        String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .parse()
            .unwrap(),
    )
}

/// W3's clean reopens, many times: the stores of about `reopen_bytes` (raw
/// 1 KiB messages, for ctxlog and redb; and ctxlog's A2A exchanges, without
/// and with an artifact per task) filled
/// once and closed, then each opened in a fresh process, as a command or a
/// cold start opens it, by turns, `rounds` times: the medians and the
/// spread, and ctxlog's against redb's, the two measured in alternation.
fn w3_reopen(scale: Scale, root: &Path) {
    let rounds = if scale.reopen_bytes >= 1 << 30 { 21 } else { 7 };
    let bytes = scale.reopen_bytes.to_string();
    let mut dirs = Vec::new();
    for name in ["ctxlog", "redb", "ctxlog-exchanges", "ctxlog-artifacts"] {
        let dir = root.join(format!("reopen-{name}"));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.to_str().unwrap();
        let mut child = match name {
            "ctxlog-exchanges" => filler(&["fill-exchanges", path, &bytes]),
            "ctxlog-artifacts" => filler(&["fill-exchanges-artifacts", path, &bytes]),
            _ => filler(&["fill", name, path, &bytes]),
        };
        drop(child.stdin.take());
        child.wait().unwrap();
        // The first open after the fill may find work its close left
        // (a checkpoint of a store filled with maintenance on): not timed.
        open_in_child(name, &dir);
        dirs.push((name, dir));
    }
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); dirs.len()];
    for _ in 0..rounds {
        for ((name, dir), t) in dirs.iter().zip(&mut times) {
            t.push(open_in_child(name, dir));
        }
    }
    println!(
        "\n### W3, clean reopen in a fresh process ({} MiB stores; {rounds} rounds, by turns)\n",
        scale.reopen_bytes >> 20
    );
    println!("| store | p50 ms | min ms | max ms |");
    println!("| --- | --- | --- | --- |");
    let mut p50 = Vec::new();
    for ((name, _), t) in dirs.iter().zip(&mut times) {
        t.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        p50.push(ms(pct(t, 0.5)));
        println!(
            "| {name} | {:.2} | {:.2} | {:.2} |",
            ms(pct(t, 0.5)),
            ms(t[0]),
            ms(t[t.len() - 1])
        );
    }
    println!(
        "\n- ctxlog's raw store against redb's, p50: {:.2}x (target <= 2x); the exchanges store's p50: {:.2} ms (target <= 10 ms); with an artifact per task: {:.2} ms",
        p50[0] / p50[1],
        p50[2],
        p50[3]
    );
    for (_, dir) in dirs {
        std::fs::remove_dir_all(&dir).unwrap();
    }
    // After a kill right after the last durable commit, in this process
    // (as W3 measures it).
    let raw = reopen_after_kill(
        &root.join("reopen-killed"),
        &["fill", "ctxlog"],
        scale.reopen_bytes,
        Options::default(),
    );
    let exchanges = reopen_exchanges_after_kill(root, scale.reopen_bytes);
    println!("- after a kill: the raw store {raw}; the exchanges store {exchanges}");
}

/// The options of the exchanges store: appends are made durable in
/// batches, by `sync`.
fn exchanges_options() -> Options {
    Options::default().durability(Durability::Buffered)
}

/// Fills `dir` with about `bytes` of A2A exchanges (see [`w3_exchanges`])
/// and syncs them; with `artifacts`, each task's agent also streams it a
/// small artifact (one chunk) before its reply.
fn fill_exchanges(dir: &Path, bytes: u64, artifacts: bool) -> Store {
    let store = Store::open(dir, exchanges_options()).unwrap();
    let contexts: u64 = if bytes >= 1 << 30 { 10_000 } else { 50 };
    let text: String = "Please refund the duplicate charge. "
        .chars()
        .cycle()
        .take(BODY)
        .collect();
    let tasks = (bytes / (2 * BODY as u64) / contexts).max(1);
    let mut n = 0u64;
    for _ in 0..tasks {
        for c in 0..contexts {
            n += 1;
            let msg = format!(
                r#"{{"messageId":"m{n}","role":"ROLE_USER","contextId":"ctx-{c}","parts":[{{"text":"{text}"}}]}}"#
            );
            let r = store.receive_message("bench", msg.as_bytes()).unwrap();
            if artifacts {
                let artifact = format!(
                    r#"{{"artifactUpdate":{{"taskId":"{}","contextId":"ctx-{c}","artifact":{{"artifactId":"refund-{n}","parts":[{{"text":"refund issued"}}]}},"lastChunk":true}}}}"#,
                    r.task_id
                );
                store.apply_event("bench", artifact.as_bytes()).unwrap();
            }
            let reply = format!(
                r#"{{"statusUpdate":{{"taskId":"{}","contextId":"ctx-{c}","status":{{"state":"TASK_STATE_COMPLETED","message":{{"messageId":"a{n}","role":"ROLE_AGENT","parts":[{{"text":"{text}"}}]}}}}}}}}"#,
                r.task_id
            );
            store.apply_event("bench", reply.as_bytes()).unwrap();
        }
    }
    store.sync().unwrap();
    store
}

/// Fills a store of exchanges in a child process, kills it once its last
/// append is durable, and times the reopen (see [`reopen_after_kill`]).
fn reopen_exchanges_after_kill(root: &Path, bytes: u64) -> Killed {
    let dir = root.join("w3-exchanges-killed");
    reopen_after_kill(&dir, &["fill-exchanges"], bytes, exchanges_options())
}

/// A reopen after a kill: how long it took, how many records it replayed
/// after the checkpoint, how many it re-pointed at a merge's output (the
/// kill came between the merge's switch and its checkpoint), and why it
/// set the checkpoint aside, if it did (then it read the whole log).
struct Killed {
    opened: Duration,
    replayed: u64,
    repointed: u64,
    ignored: Option<String>,
}

impl std::fmt::Display for Killed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.1} ms ({} records replayed after the checkpoint",
            self.opened.as_secs_f64() * 1e3,
            self.replayed
        )?;
        if self.repointed > 0 {
            write!(f, ", {} re-pointed at a merge's output", self.repointed)?;
        }
        match &self.ignored {
            Some(why) => write!(f, "; the checkpoint was set aside: {why})"),
            None => write!(f, ")"),
        }
    }
}

/// Fills `dir` with about `bytes` in a child process (`fill`: the child's
/// subcommand and its arguments before the directory), kills it once its
/// last append is durable, and times the reopen with `options`.
fn reopen_after_kill(dir: &Path, fill: &[&str], bytes: u64, options: Options) -> Killed {
    std::fs::create_dir_all(dir).unwrap();
    let bytes = bytes.to_string();
    let args: Vec<&str> = fill
        .iter()
        .copied()
        .chain([dir.to_str().unwrap(), &bytes])
        .collect();
    let mut child = filler(&args);
    child.kill().unwrap();
    child.wait().unwrap();
    let t = Instant::now();
    let store = Store::open(dir, options).unwrap();
    let opened = t.elapsed();
    let report = store.open_report();
    let killed = Killed {
        opened,
        replayed: report.replayed,
        repointed: report.repointed,
        ignored: report.checkpoint_ignored.clone(),
    };
    drop(store);
    std::fs::remove_dir_all(dir).unwrap();
    killed
}

/// A store of about `reopen_bytes` of A2A exchanges (ctxlog only): per task
/// a received message and the agent's COMPLETED status carrying its reply,
/// 1 KiB of text each, over 10,000 contexts (50 in quick mode). Prints its
/// reopen time, index bytes per stored message, and space on disk against
/// the live payload before and after half its contexts are deleted and
/// `compact()` runs.
fn w3_exchanges(scale: Scale, root: &Path) {
    let dir = root.join("w3-exchanges");
    let t = Instant::now();
    let store = fill_exchanges(&dir, scale.reopen_bytes, false);
    let filled = t.elapsed();
    store.close().unwrap();
    let t = Instant::now();
    let store = Store::open(&dir, exchanges_options()).unwrap();
    let reopened = t.elapsed();
    let killed = reopen_exchanges_after_kill(root, scale.reopen_bytes);
    let st = store.stats();
    println!(
        "\n### W3, A2A exchanges (ctxlog): {} contexts, {} tasks, {} messages, {} MiB on disk (filled in {:.1} s)\n",
        st.contexts,
        st.tasks,
        st.messages,
        st.disk_bytes >> 20,
        filled.as_secs_f64()
    );
    println!(
        "- reopen after clean close: {:.1} ms; after the writer was killed: {killed}",
        reopened.as_secs_f64() * 1e3,
    );
    record(
        "W3 exchanges / reopen after a clean close",
        reopened.as_secs_f64() * 1e3,
        "ms",
    );
    record(
        "W3 exchanges / reopen after a kill",
        killed.opened.as_secs_f64() * 1e3,
        "ms",
    );
    record(
        "W3 exchanges / index bytes per message",
        st.index_bytes as f64 / st.messages as f64,
        "B",
    );
    println!(
        "- index bytes per stored message: {:.1} (target <= 64)",
        st.index_bytes as f64 / st.messages as f64
    );
    let space = |store: &Store| {
        let st = store.stats();
        st.disk_bytes as f64 / st.live_bytes as f64
    };
    let full = space(&store);
    for c in (0..st.contexts).step_by(2) {
        store.delete_context("bench", &format!("ctx-{c}")).unwrap();
    }
    let half = space(&store);
    let t = Instant::now();
    store.compact().unwrap();
    let compacted = t.elapsed();
    println!(
        "- space on disk / live payload: {full:.2}x as written, {half:.2}x with half the contexts deleted, {:.2}x after compact() ({:.1} s; target <= 1.15x)",
        space(&store),
        compacted.as_secs_f64()
    );
    record(
        "W3 exchanges / space after compact, half deleted",
        space(&store),
        "x",
    );
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Samples the store's bytes on disk every 10 ms until told to stop;
/// returns the largest.
fn space_sampler(
    dir: PathBuf,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut most = 0;
        while !stop.load(std::sync::atomic::Ordering::Acquire) {
            most = most.max(dir_bytes(&dir));
            std::thread::sleep(Duration::from_millis(10));
        }
        most
    })
}

/// Waits until the store's maintenance has made no merge for three looks
/// in a row, 500 ms apart, after its idle time (at most `limit`); returns
/// how long that took.
fn settle(store: &Store, limit: Duration) -> Duration {
    let start = Instant::now();
    let mut last = store.stats().merges;
    let mut quiet = 0;
    while start.elapsed() < limit && quiet < 3 {
        std::thread::sleep(Duration::from_millis(500));
        let now = store.stats().merges;
        quiet = if now == last && start.elapsed() > Duration::from_secs(2) {
            quiet + 1
        } else {
            0
        };
        last = now;
    }
    start.elapsed()
}

/// W1a (one writer, durable per append) on a store with a backlog of sealed
/// segments to merge, with maintenance running and, on a copy, off; prints
/// the line (the p99 with maintenance over the p99 without last).
fn w1a_beside_a_merge(scale: Scale, root: &Path) {
    let p = |l: &[Duration], q: f64| us(pct(l, q));
    // W1a with a backlog to merge: the same store twice, one with
    // maintenance off, one with it on. The store without maintenance is
    // appended to for half its appends before the other and half after,
    // so that its p99 brackets the maintained run's time and a drift of
    // the disk's speed over the minutes of the run weighs on both alike.
    let backlog = |name: &str| {
        let dir = root.join(name);
        let store = Store::open(
            &dir,
            Options::default()
                .durability(Durability::Buffered)
                .maintenance(None),
        )
        .unwrap();
        fill(&CtxLogBatch(store), scale.contexts, scale.per_context);
        dir
    };
    let (off_dir, on_dir) = (backlog("m-w1a-off"), backlog("m-w1a-on"));
    let n = if scale.contexts > 1000 { 20_000 } else { 2_000 };
    // Appends `appends` (the `i`s of a run of n) and keeps their latencies.
    let w1a = |store: &Store, appends: std::ops::Range<u64>, lat: &mut Vec<Duration>| {
        for i in appends {
            let ctx = i % scale.contexts;
            let b = body(ctx, 1000 + i);
            let t = Instant::now();
            store
                .append_message("bench", &format!("ctx-{ctx}"), &b)
                .unwrap();
            lat.push(t.elapsed());
        }
    };
    let (mut off, mut on) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let off_store = Store::open(&off_dir, Options::default().maintenance(None)).unwrap();
    let half = n as u64 / 2;
    w1a(&off_store, 0..half, &mut off);
    let on_store = Store::open(&on_dir, Options::default()).unwrap();
    w1a(&on_store, 0..n as u64, &mut on);
    let st = on_store.stats();
    let (merges, merged) = (st.merges, st.merged_bytes);
    drop(on_store);
    w1a(&off_store, half..n as u64, &mut off);
    drop(off_store);
    off.sort();
    on.sort();
    println!(
        "- W1a ({n} durable appends) on a store with {} MiB of sealed segments to merge: p50 {:.1} us, p99 {:.1} us with maintenance running ({merges} merges, {} MiB written meanwhile) against p50 {:.1} us, p99 {:.1} us with it off: p99 {:.2}x (target <= 1.5x)",
        (scale.contexts * scale.per_context * BODY as u64) >> 20,
        p(&on, 0.5),
        p(&on, 0.99),
        merged >> 20,
        p(&off, 0.5),
        p(&off, 0.99),
        p(&on, 0.99) / p(&off, 0.99)
    );
    std::fs::remove_dir_all(&off_dir).unwrap();
    std::fs::remove_dir_all(&on_dir).unwrap();
}

/// The store's self-maintenance (issue: a log that keeps its own layout),
/// ctxlog against redb in one run:
/// - W2 on the store as W1 writes it (round robin, bulk commits) with
///   maintenance on from the first append and no `compact()`: reads right
///   after the reopen while maintenance still works, and once it has
///   settled (and how long that took); redb's on the same data;
/// - W1a (one writer, durable per append) on a store with a backlog of
///   sealed segments to merge, with maintenance running and with it off;
/// - W1c, 16 threads, with maintenance on and off;
/// - space: the most on disk while maintenance ran, and after, over the
///   live records' bytes;
/// - reopen of the maintained W2 store, after a clean close, against redb's.
fn w_maintenance(scale: Scale, root: &Path) {
    let reads = scale.reads;
    let measure = |engine: &dyn Engine, pick, n| read_latencies(engine, scale, pick, n);
    println!(
        "\n### Self-maintenance (ctxlog, default `Maintenance`) against redb: {} contexts x {} messages of 1 KiB\n",
        scale.contexts, scale.per_context
    );
    // redb, as W2 measures it.
    let dir = root.join("m-redb");
    std::fs::create_dir_all(&dir).unwrap();
    {
        let engine = open_bulk("redb", &dir);
        fill(engine.as_ref(), scale.contexts, scale.per_context);
    }
    let t = Instant::now();
    let redb = open("redb", &dir, 1);
    let redb_reopen = t.elapsed();
    let r_warm = measure(redb.as_ref(), uniform, reads);
    let r_hot = measure(redb.as_ref(), zipf, reads);
    drop(redb);
    let t = Instant::now();
    let redb = open("redb", &dir, 1);
    let redb_reopen2 = t.elapsed();
    drop(redb);
    std::fs::remove_dir_all(&dir).unwrap();

    // ctxlog, maintenance on from the first append.
    let dir = root.join("m-ctxlog");
    let fill_start = Instant::now();
    {
        let store = Store::open(&dir, Options::default().durability(Durability::Buffered)).unwrap();
        let bulk = CtxLogBatch(store);
        fill(&bulk, scale.contexts, scale.per_context);
    }
    let filled = fill_start.elapsed();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = space_sampler(dir.clone(), stop.clone());
    let store = Store::open(&dir, Options::default()).unwrap();
    let before = store.stats().merges;
    // Reads "during" start once a merge is writing (after the idle time).
    let merging = |dir: &Path| {
        std::fs::read_dir(dir)
            .map(|mut e| {
                e.any(|f| f.is_ok_and(|f| f.file_name().to_string_lossy().ends_with(".seg.tmp")))
            })
            .unwrap_or(false)
    };
    let waited = Instant::now();
    while !merging(&dir) && waited.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(2));
    }
    let engine = CtxLog(store);
    let d_warm = measure(&engine, uniform, reads);
    let d_hot = measure(&engine, zipf, reads);
    let during_merges = engine.0.stats().merges - before;
    let settled = settle(&engine.0, Duration::from_secs(120));
    stop.store(true, std::sync::atomic::Ordering::Release);
    let most = sampler.join().unwrap();
    let a_warm = measure(&engine, uniform, reads);
    let a_hot = measure(&engine, zipf, reads);
    let o_warm = measure(&CtxLogOwned(&engine.0), uniform, reads);
    let o_hot = measure(&CtxLogOwned(&engine.0), zipf, reads);
    let st = engine.0.stats();
    let live = st.live_bytes as f64;
    drop(engine);
    let t = Instant::now();
    let store = Store::open(&dir, Options::default()).unwrap();
    let reopen = t.elapsed();
    drop(store);
    let t = Instant::now();
    let store = Store::open(&dir, Options::default()).unwrap();
    let reopen2 = t.elapsed();
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();

    let p = |l: &[Duration], q: f64| us(pct(l, q));
    println!("| measure | ctxlog | redb | ctxlog / redb |");
    println!("|---|---|---|---|");
    for (name, c, r) in [
        (
            "W2 uniform warm p50, during maintenance (us)",
            p(&d_warm, 0.5),
            p(&r_warm, 0.5),
        ),
        (
            "W2 uniform warm p99, during maintenance (us)",
            p(&d_warm, 0.99),
            p(&r_warm, 0.99),
        ),
        (
            "W2 zipf warm p50, during maintenance (us)",
            p(&d_hot, 0.5),
            p(&r_hot, 0.5),
        ),
        (
            "W2 uniform warm p50, maintained (us)",
            p(&a_warm, 0.5),
            p(&r_warm, 0.5),
        ),
        (
            "W2 uniform warm p99, maintained (us)",
            p(&a_warm, 0.99),
            p(&r_warm, 0.99),
        ),
        (
            "W2 zipf warm p50, maintained (us)",
            p(&a_hot, 0.5),
            p(&r_hot, 0.5),
        ),
        (
            "reopen after clean close, maintained store (ms; best of two)",
            reopen.min(reopen2).as_secs_f64() * 1e3,
            redb_reopen.min(redb_reopen2).as_secs_f64() * 1e3,
        ),
    ] {
        println!("| {name} | {c:.1} | {r:.1} | {:.2} |", c / r);
    }
    println!(
        "\n- filled in {:.1} s with maintenance on; the reads \"during\" began once a merge was writing, after the reopen ({} merges ended while they ran); maintenance settled {:.1} s after the reopen ({} merges, {} MiB written since the open)",
        filled.as_secs_f64(),
        during_merges,
        settled.as_secs_f64(),
        st.merges,
        st.merged_bytes >> 20
    );
    println!(
        "- ctxlog reads into a reused buffer (`last_messages_into`); through `last_messages` (a `Vec` per message), maintained: uniform warm p50 {:.1} us ({:.2}x redb), p99 {:.1} us ({:.2}x), zipf p50 {:.1} us ({:.2}x)",
        p(&o_warm, 0.5),
        p(&o_warm, 0.5) / p(&r_warm, 0.5),
        p(&o_warm, 0.99),
        p(&o_warm, 0.99) / p(&r_warm, 0.99),
        p(&o_hot, 0.5),
        p(&o_hot, 0.5) / p(&r_hot, 0.5)
    );
    println!(
        "- space: at most {:.2}x the live bytes on disk while maintenance ran, {:.2}x after (target <= 1.3x and <= 1.15x)",
        most as f64 / live,
        st.disk_bytes as f64 / live
    );

    w1a_beside_a_merge(scale, root);

    // W1c, 16 threads, maintenance on and off, in turns.
    let w1c16 = |maintenance: Option<Maintenance>, round: usize| {
        let dir = root.join(format!("m-w1c-{round}"));
        let options = Options::default()
            .durability(Durability::GroupCommit)
            .maintenance(maintenance);
        let store = CtxLog(Store::open(&dir, options).unwrap());
        let per = (if scale.contexts > 1000 { 4_000 } else { 800 }) / 16;
        let rate = appenders(Arc::new(store), 16, per);
        std::fs::remove_dir_all(&dir).unwrap();
        rate
    };
    let mut on = Vec::new();
    let mut off = Vec::new();
    for round in 0..3 {
        off.push(w1c16(None, round * 2));
        on.push(w1c16(Some(Maintenance::default()), round * 2 + 1));
    }
    on.sort_by(f64::total_cmp);
    off.sort_by(f64::total_cmp);
    println!(
        "- W1c, 16 threads (median of 3 rounds, in turns): {:.0} appends/s with maintenance on, {:.0} with it off: {:.2}x (target within 10%)",
        on[1],
        off[1],
        on[1] / off[1]
    );
}

fn floors(scale: Scale, root: &Path) {
    let path: PathBuf = root.join("floor");
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap();
    for size in [1024usize, 4096] {
        let block = vec![7u8; size];
        let mut lat: Vec<Duration> = (0..500)
            .map(|_| {
                let t = Instant::now();
                f.write_all(&block).unwrap();
                f.sync_data().unwrap();
                t.elapsed()
            })
            .collect();
        lat.sort();
        println!(
            "- append of {size} B + fdatasync: p50 {:.1} us",
            us(pct(&lat, 0.5))
        );
        record(
            &format!("floors / append of {size} B + fdatasync, p50"),
            us(pct(&lat, 0.5)),
            "us",
        );
    }
    let src: Vec<Vec<u8>> = (0..20).map(|i| body(1, i)).collect();
    let mut lat: Vec<Duration> = (0..10_000)
        .map(|_| {
            let t = Instant::now();
            let copy = std::hint::black_box(&src).to_vec();
            std::hint::black_box(copy);
            t.elapsed()
        })
        .collect();
    lat.sort();
    println!(
        "- memory copy of 20 x 1 KiB (warm): p50 {:.2} us",
        us(pct(&lat, 0.5))
    );
    // The same copy, of the 20 blocks of a random context among all of W2's
    // (laid out round-robin as W2 writes them): what any store must at least
    // pay to hand back a history that is not in the CPU's caches.
    let blocks = (scale.contexts * scale.per_context) as usize;
    let all: Vec<u8> = (0..blocks * BODY).map(|i| (i * 31 % 251) as u8).collect();
    let mut state = 7u64;
    let mut lat: Vec<Duration> = (0..10_000)
        .map(|_| {
            let ctx = uniform(&mut state, scale.contexts) as usize;
            let t = Instant::now();
            let copy: Vec<Vec<u8>> = (0..scale.per_context as usize)
                .map(|seq| {
                    let at = (seq * scale.contexts as usize + ctx) * BODY;
                    all[at..at + BODY].to_vec()
                })
                .collect();
            std::hint::black_box(copy);
            t.elapsed()
        })
        .collect();
    lat.sort();
    println!(
        "- memory copy of a random context's 20 x 1 KiB out of {} MiB: p50 {:.2} us",
        all.len() >> 20,
        us(pct(&lat, 0.5))
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("fill") {
        child_fill(&args[1], Path::new(&args[2]), args[3].parse().unwrap());
        return;
    }
    if let Some(kind @ ("fill-exchanges" | "fill-exchanges-artifacts")) =
        args.first().map(String::as_str)
    {
        let artifacts = kind == "fill-exchanges-artifacts";
        let store = fill_exchanges(Path::new(&args[1]), args[2].parse().unwrap(), artifacts);
        committed_then_wait();
        drop(store);
        return;
    }
    if args.first().map(String::as_str) == Some("open") {
        // A child of `reopen`: `open <engine> <dir>` opens an existing store
        // once (ctxlog's exchanges store with `ctxlog-exchanges` or
        // `ctxlog-artifacts`) and prints how long that took, in ns.
        let dir = Path::new(&args[2]);
        let t = Instant::now();
        if args[1] == "ctxlog-exchanges" || args[1] == "ctxlog-artifacts" {
            let store = Store::open(dir, exchanges_options()).unwrap();
            println!("{}", t.elapsed().as_nanos());
            drop(store);
        } else {
            let engine = open(&args[1], dir, 1);
            println!("{}", t.elapsed().as_nanos());
            drop(engine);
        }
        return;
    }
    // Only some rows: `reopen [full]`, `maintenance [full]` (self-maintenance),
    // `maintenance-w1a [full]` (its W1a beside a merge alone), `exchanges
    // [full]` (the ctxlog store of A2A exchanges).
    let rows: Option<fn(Scale, &Path)> = match args.first().map(String::as_str) {
        Some("reopen") => Some(w3_reopen),
        Some("maintenance") => Some(w_maintenance),
        Some("maintenance-w1a") => Some(w1a_beside_a_merge),
        Some("exchanges") => Some(w3_exchanges),
        _ => None,
    };
    if let Some(rows) = rows {
        let full = args.get(1).map(String::as_str) == Some("full");
        QUICK_RUN.store(!full, std::sync::atomic::Ordering::Relaxed);
        let scale = if full { FULL } else { QUICK };
        rows(scale, scratch_root().path());
        return;
    }
    let full = args.first().map(String::as_str) == Some("full");
    QUICK_RUN.store(!full, std::sync::atomic::Ordering::Relaxed);
    let scale = if full { FULL } else { QUICK };
    let root = scratch_root();
    println!(
        "# ctxlog vs SQLite, redb, fjall ({} mode: {} contexts x {} messages of 1 KiB; reopen store {} MiB)",
        if full { "full" } else { "quick" },
        scale.contexts,
        scale.per_context,
        scale.reopen_bytes >> 20
    );
    println!("\nFloors measured in this run:");
    floors(scale, root.path());
    println!("\nFigures are per engine; in brackets, the engine's cost as a multiple of ctxlog's (above 1: ctxlog is faster).");
    let w1 = w1a(scale, root.path());
    table("W1a: durable append, one writer", "us", true, &w1[..2]);
    table("W1a: throughput", "ops/s", false, &w1[2..]);
    table(
        "W1b: batches of 100 per durable commit",
        "ops/s",
        false,
        &w1b(scale, root.path()),
    );
    table(
        "W1c: writer threads, durable per append",
        "ops/s",
        false,
        &w1c(scale, root.path()),
    );
    let (reads, space) = w2(scale, root.path());
    table("W2: read of a 20-message history", "us", true, &reads);
    table("Space and memory", "x or MiB", true, &space);
    table("W3: reopen", "ms or us", true, &w3(scale, root.path()));
    w3_exchanges(scale, root.path());
    w_maintenance(scale, root.path());
}
