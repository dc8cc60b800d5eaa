//! Replication's cost and lag, and restore's speed, each against a
//! baseline measured in the same run (docs/benchmarks/archive.md, "Replication").
//!
//! `cargo bench --features replicate --bench replicate`;
//! `CTXLOG_BENCH_QUICK=1` for a short run. With `CTXLOG_BENCH_S3=BUCKET`
//! (and the `AWS_*` variables, `--features replicate-s3`) the lag is
//! measured against that S3 endpoint too.
//!
//! - W1a (one writer, `Sync`) and W1c (16 threads, `GroupCommit`) appends
//!   of 1 KiB, with replication to a local directory on and off, in
//!   turns: the throughput ratio (target: at least 0.9 in asynchronous
//!   mode).
//! - The replication lag during W1c: the status's `lag_ms` sampled every
//!   5 ms (p50, p99), with a 100 ms interval.
//! - Synchronous replication (to a local directory): one writer's append
//!   p50/p99 against the same without replication, and W1c's throughput
//!   against asynchronous replication.
//! - Restore of a store of `CTXLOG_BENCH_RESTORE_MIB` MiB (default 1024;
//!   256 quick) from a local directory, against copying the replica's
//!   objects (and syncing them) into a directory: the ratio (target: at
//!   most 2).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use ctxlog::{Durability, Options, Replicate, Store};

const ROUNDS: usize = 3;

#[path = "common/figures.rs"]
mod figures;

fn record(figure: &str, value: f64, unit: &str) {
    figures::record("replicate", figure, value, unit, quick());
}

fn quick() -> bool {
    std::env::var_os("CTXLOG_BENCH_QUICK").is_some()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v.get(i).copied().unwrap_or(0.0)
}

/// Appends per second of `threads` threads, `per_thread` 1 KiB appends
/// each on distinct contexts; with `replicate`, the store replicates there,
/// and the lag is sampled meanwhile (ms).
fn run(threads: usize, per_thread: usize, replicate: Option<Replicate>) -> (f64, Vec<f64>) {
    let dir = tempfile::tempdir().unwrap();
    let durability = if threads == 1 {
        Durability::Sync
    } else {
        Durability::GroupCommit
    };
    let mut options = Options::default().durability(durability);
    if let Some(r) = replicate {
        options = options.replicate(r);
    }
    let store = Arc::new(Store::open(dir.path(), options).unwrap());
    let body = vec![b'x'; 1024];
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (store, barrier, body) = (store.clone(), barrier.clone(), body.clone());
            std::thread::spawn(move || {
                barrier.wait();
                for i in 0..per_thread {
                    store
                        .append_message("bench", &format!("c{t}-{}", i % 50), &body)
                        .unwrap();
                }
            })
        })
        .collect();
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (store, done) = (store.clone(), done.clone());
        std::thread::spawn(move || {
            let mut lags = Vec::new();
            while !done.load(Ordering::Acquire) {
                if let Some(status) = store.replication() {
                    lags.push(status.lag_ms as f64);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            lags
        })
    };
    barrier.wait();
    let start = Instant::now();
    for h in handles {
        h.join().unwrap();
    }
    let rate = (threads * per_thread) as f64 / start.elapsed().as_secs_f64();
    done.store(true, Ordering::Release);
    let lags = sampler.join().unwrap();
    if let Some(status) = store.replication() {
        assert!(status.last_error.is_none(), "{status:?}");
    }
    drop(store);
    (rate, lags)
}

fn throughput(label: &str, threads: usize, per_thread: usize) {
    let (mut off, mut on, mut lags) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        off.push(run(threads, per_thread, None).0);
        let bucket = tempfile::tempdir().unwrap();
        let replicate =
            Replicate::to(bucket.path().to_str().unwrap()).interval(Duration::from_millis(100));
        let (rate, mut l) = run(threads, per_thread, Some(replicate));
        on.push(rate);
        lags.append(&mut l);
    }
    let (off, on) = (median(off), median(on));
    println!(
        "{label}: {off:.0} appends/s without replication, {on:.0} with it: {:.2}x (target at least 0.90)",
        on / off
    );
    println!(
        "{label}: lag (ms, sampled every 5 ms, interval 100 ms): p50 {:.0}, p99 {:.0}, max {:.0}",
        percentile(&mut lags, 0.5),
        percentile(&mut lags, 0.99),
        percentile(&mut lags, 1.0)
    );
    record(&format!("{label} / on over off"), on / off, "x");
    record(
        &format!("{label} / lag p99, local directory"),
        percentile(&mut lags, 0.99),
        "ms",
    );
}

#[cfg(feature = "replicate-s3")]
fn s3_lag(per_thread: usize) {
    let Ok(bucket) = std::env::var("CTXLOG_BENCH_S3") else {
        return;
    };
    let url = format!("s3://{bucket}/bench-{}", std::process::id());
    let replicate = Replicate::to(&url).interval(Duration::from_millis(100));
    let (rate, mut lags) = run(16, per_thread, Some(replicate));
    println!(
        "W1c 16 threads to {url}: {rate:.0} appends/s; lag (ms): p50 {:.0}, p99 {:.0}, max {:.0}",
        percentile(&mut lags, 0.5),
        percentile(&mut lags, 0.99),
        percentile(&mut lags, 1.0)
    );
}

#[cfg(not(feature = "replicate-s3"))]
fn s3_lag(_per_thread: usize) {}

/// Copies every file under `from` into `to` (same layout), syncing each:
/// the least a restore must do.
fn copy_tree(from: &std::path::Path, to: &std::path::Path) -> u64 {
    std::fs::create_dir_all(to).unwrap();
    let mut bytes = 0;
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            bytes += copy_tree(&entry.path(), &target);
        } else {
            bytes += std::fs::copy(entry.path(), &target).unwrap();
            std::fs::File::open(&target).unwrap().sync_all().unwrap();
        }
    }
    bytes
}

fn restore_speed() {
    let mib: u64 = std::env::var("CTXLOG_BENCH_RESTORE_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick() { 256 } else { 1024 });
    let (dir, bucket, out) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let to = || Replicate::to(bucket.path().to_str().unwrap());
    let options = Options::default()
        .durability(Durability::Buffered)
        .maintenance(None)
        .replicate(to().close_timeout(Duration::from_secs(600)));
    let store = Store::open(dir.path(), options).unwrap();
    let body = vec![b'y'; 1024];
    for i in 0..mib * 1024 {
        store
            .append_message("bench", &format!("c{}", i % 10_000), &body)
            .unwrap();
    }
    store.close().unwrap();
    let (mut copies, mut restores) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let copy_to = out.path().join(format!("copy{round}"));
        let start = Instant::now();
        let bytes = copy_tree(bucket.path(), &copy_to);
        copies.push(start.elapsed().as_secs_f64());
        std::fs::remove_dir_all(&copy_to).unwrap();
        let restored = out.path().join(format!("restored{round}"));
        let start = Instant::now();
        let report = ctxlog::replicate::restore(&to(), &restored, None).unwrap();
        restores.push(start.elapsed().as_secs_f64());
        assert!(
            report.bytes <= bytes && report.records >= mib * 1024,
            "{report:?}"
        );
        std::fs::remove_dir_all(&restored).unwrap();
    }
    let (copy, restore) = (median(copies), median(restores));
    println!(
        "restore of {mib} MiB: {restore:.2} s ({:.0} MiB/s); copying the objects {copy:.2} s: {:.2}x (target at most 2)",
        mib as f64 / restore,
        restore / copy
    );
}

/// Append latencies (µs) of one writer (`Sync`), with synchronous
/// replication to a local directory or without replication.
fn latencies(n: usize, synchronous: bool) -> Vec<f64> {
    let (dir, bucket) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut options = Options::default().durability(Durability::Sync);
    if synchronous {
        options =
            options.replicate(Replicate::to(bucket.path().to_str().unwrap()).synchronous(true));
    }
    let store = Store::open(dir.path(), options).unwrap();
    let body = vec![b'x'; 1024];
    let mut took = Vec::with_capacity(n);
    for i in 0..n {
        let start = Instant::now();
        store
            .append_message("bench", &format!("c{}", i % 50), &body)
            .unwrap();
        took.push(start.elapsed().as_secs_f64() * 1e6);
    }
    took
}

fn synchronous(per_thread: usize) {
    let (mut local, mut replicated) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        local.append(&mut latencies(per_thread, false));
        replicated.append(&mut latencies(per_thread, true));
    }
    let (l50, l99) = (percentile(&mut local, 0.5), percentile(&mut local, 0.99));
    let (r50, r99) = (
        percentile(&mut replicated, 0.5),
        percentile(&mut replicated, 0.99),
    );
    println!(
        "synchronous replication, 1 writer: p50 {r50:.0} µs, p99 {r99:.0} µs; without replication p50 {l50:.0} µs, p99 {l99:.0} µs: {:.2}x, {:.2}x",
        r50 / l50,
        r99 / l99
    );
    record("synchronous, 1 writer / append p50", r50, "µs");
    record(
        "synchronous, 1 writer / append p50 without replication",
        l50,
        "µs",
    );
    let (mut asynchronous, mut sync) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let bucket = tempfile::tempdir().unwrap();
        let to = Replicate::to(bucket.path().to_str().unwrap());
        asynchronous.push(run(16, per_thread, Some(to.clone())).0);
        let bucket = tempfile::tempdir().unwrap();
        let to = Replicate::to(bucket.path().to_str().unwrap()).synchronous(true);
        sync.push(run(16, per_thread, Some(to)).0);
    }
    let (a, s) = (median(asynchronous), median(sync));
    println!(
        "W1c 16 threads: {s:.0} appends/s with synchronous replication, {a:.0} asynchronous: {:.2}x",
        s / a
    );
}

fn main() {
    let per = if quick() { 500 } else { 3000 };
    throughput("W1a (1 writer, Sync)", 1, per);
    throughput("W1c (16 threads, GroupCommit)", 16, per);
    synchronous(per);
    s3_lag(per);
    restore_speed();
}
