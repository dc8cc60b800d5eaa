//! Durable appends from 1 to 16 threads, on distinct contexts and on one hot
//! context, against the raw write+fdatasync floor measured in the same run.
//!
//! `cargo bench --bench concurrency`; `CTXLOG_BENCH_QUICK=1` for a short run.
//! Prints throughputs and their ratios (absolute figures drift on a shared
//! machine; ratios from one run travel).

use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};
use std::sync::{Arc, Barrier};
use std::time::Instant;

use ctxlog::{Durability, Options, Store};

/// Rounds of the thread-count table (medians are reported).
const ROUNDS: usize = 3;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn quick() -> bool {
    std::env::var_os("CTXLOG_BENCH_QUICK").is_some()
}

/// Appends per second of `threads` threads doing `per_thread` durable appends
/// of 1 KiB each; `hot` puts them all on one context.
fn run(durability: Durability, threads: usize, per_thread: usize, hot: bool) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let store =
        Arc::new(Store::open(dir.path(), Options::default().durability(durability)).unwrap());
    let body = vec![b'x'; 1024];
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (store, barrier, body) = (store.clone(), barrier.clone(), body.clone());
            std::thread::spawn(move || {
                barrier.wait();
                for i in 0..per_thread {
                    let context = if hot {
                        "hot".to_string()
                    } else {
                        format!("c{t}-{}", i % 50)
                    };
                    store.append_message("bench", &context, &body).unwrap();
                }
            })
        })
        .collect();
    // Timed from just before the barrier lets the threads go: taken after
    // it, the clock could start once a fast run (Buffered, one thread)
    // had done most of its appends, and print a rate of billions a second.
    let start = Instant::now();
    barrier.wait();
    for h in handles {
        h.join().unwrap();
    }
    (threads * per_thread) as f64 / start.elapsed().as_secs_f64()
}

/// Raw 1 KiB appends with an fdatasync each, per second: the disk's floor.
/// With `zero_filled`, the file is first written full of zeros and synced,
/// and the records overwrite them (what the store's preallocation does).
fn floor(n: usize, zero_filled: bool) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("floor");
    let mut f = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    if zero_filled {
        f.write_all(&vec![0; n * 1024]).unwrap();
        f.sync_data().unwrap();
        f.seek(SeekFrom::Start(0)).unwrap();
    }
    let body = vec![b'x'; 1024];
    let start = Instant::now();
    for _ in 0..n {
        f.write_all(&body).unwrap();
        f.sync_data().unwrap();
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let total = if quick() { 800 } else { 8_000 };
    let floor_rate = floor(total / 4, false);
    let overwrite_rate = floor(total / 4, true);
    let one = run(Durability::Sync, 1, total / 4, false);
    println!(
        "durable appends of 1 KiB, {total} appends per configuration, median of {ROUNDS} rounds"
    );
    println!("floor (write + fdatasync, 1 thread): {floor_rate:.0}/s");
    println!(
        "the same, overwriting a zero-filled file: {overwrite_rate:.0}/s = {:.2}x the floor's time",
        floor_rate / overwrite_rate
    );
    println!(
        "Sync, 1 thread: {one:.0}/s = {:.2}x the floor's time per append (target <= 1.2x)",
        floor_rate / one
    );
    println!(
        "\n{:>8} {:>14} {:>10} {:>14} {:>10}",
        "threads", "distinct /s", "x 1 thr", "hot ctx /s", "x 1 thr"
    );
    // Every configuration runs in each of ROUNDS rounds, and the median is
    // kept: the disk's sync speed drifts over seconds, and rounds spread
    // that drift over all configurations alike.
    const COUNTS: [usize; 5] = [1, 2, 4, 8, 16];
    let mut rates = vec![(Vec::new(), Vec::new()); COUNTS.len()];
    for _ in 0..ROUNDS {
        for (i, &threads) in COUNTS.iter().enumerate() {
            let per = (total / threads).max(1);
            rates[i]
                .0
                .push(run(Durability::GroupCommit, threads, per, false));
            rates[i]
                .1
                .push(run(Durability::GroupCommit, threads, per, true));
        }
    }
    let medians: Vec<(f64, f64)> = rates
        .into_iter()
        .map(|(d, h)| (median(d), median(h)))
        .collect();
    let base = medians[0];
    for (&threads, &(distinct, hot)) in COUNTS.iter().zip(&medians) {
        println!(
            "{threads:>8} {distinct:>14.0} {:>10.2} {hot:>14.0} {:>10.2}",
            distinct / base.0,
            hot / base.1
        );
    }
    println!("(GroupCommit; target: 16 threads on distinct contexts >= 8x one thread)");
    // For reference: each appender calling fdatasync itself, so that only
    // the file system batches concurrent syncs.
    for threads in [4, 16] {
        let own = run(Durability::Sync, threads, (total / threads).max(1), false);
        println!(
            "Sync (each appender syncs), {threads} threads on distinct contexts: {own:.0}/s = {:.2}x Sync with 1 thread",
            own / one
        );
    }
    let cpu1 = run(Durability::Buffered, 1, total, false);
    let cpu16 = run(Durability::Buffered, 16, total / 16, false);
    println!("\nCPU ceiling (Buffered, no sync): 1 thread {cpu1:.0}/s, 16 threads {cpu16:.0}/s");
}
