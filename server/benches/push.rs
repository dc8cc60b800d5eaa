//! What push notifications cost, against the server binary on loopback,
//! in three tables:
//!
//! - **deliveries**: 1,000 tasks of 5 updates each (WORKING, three
//!   artifact chunks, COMPLETED), sent by 16 clients with blocking
//!   `SendMessage`, on a server without `--push` and on one with it, each
//!   send carrying a config whose receiver (in this process) answers 204:
//!   flat out, the sends' p50 and p99, the server's CPU per send and the
//!   deliveries per second (from the first send to the last delivery).
//!   The two servers run one after the other, twice, in alternation
//!   (plain, push, plain, push); each figure is the better run;
//! - **paced**: the same sends at 200 a second (an open loop), to both
//!   servers up at once, in blocks that alternate between them, the
//!   samples of all blocks pooled: the added p99 under 10% is the aim;
//! - **dead receiver**: 2,000 tasks with a config at a port where nothing
//!   listens, then 25 follow-ups to each that add 2 updates each: a
//!   backlog of 100,000 updates. The follow-ups' throughput and the
//!   server's anonymous resident memory at each fifth of the backlog,
//!   against the same work on a server without `--push` (throughput
//!   within noise and memory flat beyond the store's own growth are the
//!   aims), the two servers alternating as in the first table.
//!
//! `cargo bench -p ctxlog-server --bench push`; `CTXLOG_BENCH_QUICK=1`
//! makes it short (300 tasks; 4 paced blocks of 250; a backlog of 20,000
//! over 400 tasks); `CTXLOG_BENCH_ONLY=deliveries|paced|dead` runs one.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::Notify;

#[path = "../tests/it/common/process.rs"]
mod process;

#[path = "../../benches/common/figures.rs"]
mod figures;

use process::{cpu_time, quantile, rpc, rss_anon, Process};

const CLIENTS: usize = 16;
/// The rate of the paced sends, a second: well under what either server
/// keeps up with here.
const PACE: f64 = 200.0;

fn script(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("push.json");
    let chunk = |n: u32, append: bool| {
        json!({ "artifact": { "artifactId": "a1", "parts": [{ "text": format!("chunk {n}") }] },
            "append": append })
    };
    let script = json!({ "name": "push", "rules": [
        { "text": "five", "steps": [
            { "status": "TASK_STATE_WORKING" },
            chunk(0, false), chunk(1, true), chunk(2, true),
            { "status": "TASK_STATE_COMPLETED", "text": "done" } ] },
        { "text": "tick", "steps": [
            { "status": "TASK_STATE_WORKING" },
            { "status": "TASK_STATE_INPUT_REQUIRED", "text": "more?" } ] } ] });
    std::fs::write(&path, script.to_string()).unwrap();
    path
}

fn start(dir: &Path, script: &Path, push: bool) -> Process {
    let mut args = vec!["--max-turns", "4096"];
    if push {
        args.extend(["--push", "--allow-private-webhooks"]);
    }
    Process::scripted(dir, script, &args)
}

/// A receiver that counts what it accepts.
struct Receiver {
    count: AtomicUsize,
    arrived: Notify,
}

async fn receiver() -> (Arc<Receiver>, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let state = Arc::new(Receiver {
        count: AtomicUsize::new(0),
        arrived: Notify::new(),
    });
    let app = axum::Router::new()
        .fallback(
            |axum::extract::State(r): axum::extract::State<Arc<Receiver>>| async move {
                r.count.fetch_add(1, Ordering::SeqCst);
                r.arrived.notify_waiters();
                axum::http::StatusCode::NO_CONTENT
            },
        )
        .with_state(state.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (state, url)
}

/// Waits (at most 120 s) until the receiver has accepted `n`.
async fn received(r: &Receiver, n: usize) -> bool {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let notified = r.arrived.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if r.count.load(Ordering::SeqCst) >= n {
            return true;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || tokio::time::timeout(left, notified).await.is_err() {
            return r.count.load(Ordering::SeqCst) >= n;
        }
    }
}

/// `n` blocking sends of "five" from [`CLIENTS`] clients (each with a
/// push config to `hook`, if given): their latencies, sorted.
async fn sends(url: &str, n: usize, hook: Option<&str>, round: usize) -> Vec<Duration> {
    let next = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let (url, next, hook) = (url.to_string(), next.clone(), hook.map(str::to_string));
        clients.push(tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut samples = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= n {
                    return samples;
                }
                let mut params = json!({ "message": { "messageId": format!("r{round}-m{i}"),
                    "role": "ROLE_USER", "parts": [{ "text": "five" }] } });
                if let Some(hook) = &hook {
                    params["configuration"] =
                        json!({ "taskPushNotificationConfig": { "url": hook } });
                }
                let sent = Instant::now();
                let result = rpc(&http, &url, "SendMessage", params).await;
                samples.push(sent.elapsed());
                assert_eq!(
                    result["task"]["status"]["state"], "TASK_STATE_COMPLETED",
                    "{result}"
                );
            }
        }));
    }
    let mut all = Vec::new();
    for c in clients {
        all.extend(c.await.unwrap());
    }
    all.sort_unstable();
    all
}

/// `n` blocking sends of "five" at `rate` a second, each on its own
/// (an open loop: a slow answer does not hold back the next send), with a
/// push config to `hook` if given: their latencies, in the order sent.
async fn paced(url: &str, n: usize, rate: f64, hook: Option<&str>, round: usize) -> Vec<Duration> {
    let http = reqwest::Client::new();
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    let mut sends = Vec::with_capacity(n);
    for i in 0..n {
        ticks.tick().await;
        let (http, url) = (http.clone(), url.to_string());
        let mut params = json!({ "message": { "messageId": format!("p{round}-m{i}"),
            "role": "ROLE_USER", "parts": [{ "text": "five" }] } });
        if let Some(hook) = hook {
            params["configuration"] = json!({ "taskPushNotificationConfig": { "url": hook } });
        }
        sends.push(tokio::spawn(async move {
            let sent = Instant::now();
            rpc(&http, &url, "SendMessage", params).await;
            sent.elapsed()
        }));
    }
    let mut all = Vec::with_capacity(n);
    for s in sends {
        all.push(s.await.unwrap());
    }
    all
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// (p50, p99, sends/s, deliveries/s, server CPU µs per send) of one run.
fn delivery_run(
    runtime: &tokio::runtime::Runtime,
    dir: &Path,
    script: &Path,
    push: bool,
    tasks: usize,
    round: usize,
) -> Run {
    let server = start(dir, script, push);
    let pid = server.child.id();
    let cpu_before = cpu_time(pid).unwrap_or_default();
    runtime.block_on(async {
        let (hook, hook_url) = receiver().await;
        let began = Instant::now();
        let samples = sends(&server.url, tasks, push.then_some(hook_url.as_str()), round).await;
        let sent = began.elapsed();
        let deliveries = match push {
            true => {
                assert!(received(&hook, tasks * 5).await, "every update delivered");
                (tasks * 5) as f64 / began.elapsed().as_secs_f64()
            }
            false => 0.0,
        };
        // What the sends and their deliveries took.
        let cpu = cpu_time(pid).unwrap_or_default() - cpu_before;
        Run {
            p50: quantile(&samples, 0.50),
            p99: quantile(&samples, 0.99),
            sends: tasks as f64 / sent.as_secs_f64(),
            deliveries,
            cpu_us: cpu.as_secs_f64() * 1e6 / tasks as f64,
        }
    })
}

/// One run of the deliveries table.
#[derive(Clone, Copy)]
struct Run {
    p50: Duration,
    p99: Duration,
    sends: f64,
    deliveries: f64,
    cpu_us: f64,
}

impl Run {
    /// The better of two runs, figure by figure.
    fn best(self, other: Run) -> Run {
        Run {
            p50: self.p50.min(other.p50),
            p99: self.p99.min(other.p99),
            sends: self.sends.max(other.sends),
            deliveries: self.deliveries.max(other.deliveries),
            cpu_us: self.cpu_us.min(other.cpu_us),
        }
    }
}

fn deliveries_table(runtime: &tokio::runtime::Runtime, dir: &Path, script: &Path, tasks: usize) {
    println!(
        "\ndeliveries: {tasks} tasks of 5 updates, blocking SendMessage from {CLIENTS} clients \
         as fast as they go"
    );
    println!(
        "{:>6}  {:>8}  {:>8}  {:>8}  {:>12}  {:>11}",
        "server", "p50 ms", "p99 ms", "sends/s", "deliveries/s", "CPU µs/send"
    );
    let mut best: [Option<Run>; 2] = [None, None];
    for round in 0..2 {
        for push in [false, true] {
            let store = dir.join(format!("deliveries-{round}-{push}"));
            let run = delivery_run(runtime, &store, script, push, tasks, round);
            let name = if push { "push" } else { "plain" };
            println!(
                "{name:>6}  {:>8.3}  {:>8.3}  {:>8.0}  {:>12.0}  {:>11.0}",
                ms(run.p50),
                ms(run.p99),
                run.sends,
                run.deliveries,
                run.cpu_us,
            );
            let slot = &mut best[usize::from(push)];
            *slot = Some(slot.map_or(run, |b| b.best(run)));
        }
    }
    if let [Some(plain), Some(push)] = best {
        let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
        println!(
            "push / plain, best of 2: p50 {:.2}x, p99 {:.2}x, sends/s {:.2}x; server CPU per \
             send {:.2}x ({:.0} µs more: {:.0} per delivery); {:.0} deliveries/s",
            ratio(push.p50, plain.p50),
            ratio(push.p99, plain.p99),
            push.sends / plain.sends,
            push.cpu_us / plain.cpu_us,
            push.cpu_us - plain.cpu_us,
            (push.cpu_us - plain.cpu_us) / 5.0,
            push.deliveries
        );
        let quick = process::quick();
        let record = |figure: &str, value: f64, unit: &str| {
            figures::record("push", figure, value, unit, quick);
        };
        record(
            "64 clients, best of 2 / sends with push",
            push.sends,
            "sends/s",
        );
        record(
            "64 clients, best of 2 / deliveries",
            push.deliveries,
            "deliveries/s",
        );
        record(
            "64 clients, best of 2 / sends without push",
            plain.sends,
            "sends/s",
        );
    }
}

/// The sends at [`PACE`] a second (an open loop, where neither server is
/// short of CPU), to a server without `--push` and one with it, both up
/// at once and driven in turn: `blocks` blocks of `per_block` sends to
/// each, the order alternating, each push block's deliveries drained
/// before the next block. The samples of all blocks are pooled, so that
/// both servers meet the machine's slow and quick minutes alike.
fn paced_table(
    runtime: &tokio::runtime::Runtime,
    dir: &Path,
    script: &Path,
    blocks: usize,
    per_block: usize,
) {
    println!(
        "\npaced: blocking SendMessage of 5 updates at {PACE} a second, {blocks} blocks of \
         {per_block} to each server in turn, samples pooled"
    );
    let plain = start(&dir.join("paced-plain"), script, false);
    let push = start(&dir.join("paced-push"), script, true);
    let mut pooled = runtime.block_on(async {
        let (hook, hook_url) = receiver().await;
        let mut pooled = [Vec::new(), Vec::new()];
        for block in 0..blocks {
            let order = match block % 2 {
                0 => [false, true],
                _ => [true, false],
            };
            for with_push in order {
                let (url, config) = match with_push {
                    true => (&push.url, Some(hook_url.as_str())),
                    false => (&plain.url, None),
                };
                let got = paced(url, per_block, PACE, config, block).await;
                pooled[usize::from(with_push)].extend(got);
                if with_push {
                    let all = (block + 1) * per_block * 5;
                    assert!(received(&hook, all).await, "every update delivered");
                }
            }
        }
        pooled
    });
    println!(
        "{:>6}  {:>8}  {:>8}  {:>8}  {:>9}",
        "server", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms"
    );
    for (name, samples) in ["plain", "push"].iter().zip(pooled.iter_mut()) {
        samples.sort_unstable();
        println!(
            "{name:>6}  {:>8.3}  {:>8.3}  {:>8.3}  {:>9.3}",
            ms(quantile(samples, 0.50)),
            ms(quantile(samples, 0.90)),
            ms(quantile(samples, 0.99)),
            ms(quantile(samples, 0.999))
        );
    }
    let ratio =
        |q: f64| quantile(&pooled[1], q).as_secs_f64() / quantile(&pooled[0], q).as_secs_f64();
    println!(
        "push / plain at {PACE}/s: p50 {:.2}x, p90 {:.2}x, p99 {:.2}x (aim: p99 under 1.10x)",
        ratio(0.50),
        ratio(0.90),
        ratio(0.99)
    );
}

/// Follow-ups to `tasks` input-required tasks until `backlog` updates:
/// (follow-ups/s, RssAnon MiB) at each fifth of the way.
async fn backlog_run(url: &str, pid: u32, tasks: &[String], backlog: usize) -> Vec<(f64, f64)> {
    let rounds = backlog / 2 / tasks.len();
    let per_sample = rounds.div_ceil(5);
    let mut samples = Vec::new();
    let mut round = 0;
    while round < rounds {
        let began = Instant::now();
        let upto = (round + per_sample).min(rounds);
        let next = Arc::new(AtomicUsize::new(0));
        let jobs: Arc<Vec<(usize, String)>> = Arc::new(
            (round..upto)
                .flat_map(|r| tasks.iter().map(move |t| (r, t.clone())))
                .collect(),
        );
        let mut clients = Vec::new();
        for _ in 0..CLIENTS {
            let (url, next, jobs) = (url.to_string(), next.clone(), jobs.clone());
            clients.push(tokio::spawn(async move {
                let http = reqwest::Client::new();
                loop {
                    let Some((r, task)) = jobs.get(next.fetch_add(1, Ordering::SeqCst)) else {
                        return;
                    };
                    let params = json!({ "message": { "messageId": format!("{task}-{r}"),
                        "role": "ROLE_USER", "taskId": task, "parts": [{ "text": "tick" }] } });
                    let result = rpc(&http, &url, "SendMessage", params).await;
                    assert_eq!(
                        result["task"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
                        "{result}"
                    );
                }
            }));
        }
        for c in clients {
            c.await.unwrap();
        }
        let rate = jobs.len() as f64 / began.elapsed().as_secs_f64();
        samples.push((rate, rss_anon(pid) as f64 / (1u64 << 20) as f64));
        round = upto;
    }
    samples
}

fn dead_receiver_table(
    runtime: &tokio::runtime::Runtime,
    dir: &Path,
    script: &Path,
    backlog: usize,
) {
    // Short histories (25 follow-ups each): what grows is the backlog, not
    // the tasks' histories, whose reads would cost more and more.
    let tasks = backlog / 50;
    println!(
        "\ndead receiver: {tasks} tasks, follow-ups of 2 updates each up to a backlog of \
         {backlog} undelivered updates"
    );
    // A port nothing listens on.
    let parked = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}/hook", parked.local_addr().unwrap());
    drop(parked);
    let mut best: [Option<Vec<(f64, f64)>>; 2] = [None, None];
    for round in 0..2 {
        for push in [false, true] {
            let store = dir.join(format!("dead-{round}-{push}"));
            let server = start(&store, script, push);
            let samples = runtime.block_on(async {
                let http = reqwest::Client::new();
                let mut ids = Vec::new();
                for i in 0..tasks {
                    let mut params = json!({ "message": { "messageId": format!("open-{i}"),
                        "role": "ROLE_USER", "parts": [{ "text": "tick" }] } });
                    if push {
                        params["configuration"] =
                            json!({ "taskPushNotificationConfig": { "url": dead } });
                    }
                    let result: Value = rpc(&http, &server.url, "SendMessage", params).await;
                    ids.push(result["task"]["id"].as_str().unwrap().to_string());
                }
                backlog_run(&server.url, server.child.id(), &ids, backlog).await
            });
            let name = if push { "push" } else { "plain" };
            let shown: Vec<String> = samples
                .iter()
                .map(|(rate, mib)| format!("{rate:.0}/s {mib:.1} MiB"))
                .collect();
            println!("{name:>6} round {round}: {}", shown.join(", "));
            let slot = &mut best[usize::from(push)];
            let better = slot.as_ref().is_none_or(|b| {
                b.iter().map(|s| s.0).sum::<f64>() < samples.iter().map(|s| s.0).sum::<f64>()
            });
            if better {
                *slot = Some(samples);
            }
        }
    }
    if let [Some(plain), Some(push)] = best {
        let rate = |s: &[(f64, f64)]| s.iter().map(|x| x.0).sum::<f64>() / s.len() as f64;
        let first = push.first().map_or(0.0, |s| s.1);
        let last = push.last().map_or(0.0, |s| s.1);
        println!(
            "push / plain follow-ups/s, best of 2: {:.2}x (aim: within noise); push server \
             memory from the first fifth of the backlog to the last: {first:.1} -> {last:.1} MiB \
             (plain: {:.1} -> {:.1})",
            rate(&push) / rate(&plain),
            plain.first().map_or(0.0, |s| s.1),
            plain.last().map_or(0.0, |s| s.1),
        );
    }
}

fn main() {
    let quick = process::quick();
    let runtime = process::bench_runtime();
    let tmp = tempfile::tempdir().unwrap();
    let script = script(tmp.path());
    if process::runs("deliveries") {
        deliveries_table(
            &runtime,
            tmp.path(),
            &script,
            if quick { 300 } else { 1_000 },
        );
    }
    if process::runs("paced") {
        let (blocks, per_block) = if quick { (4, 250) } else { (10, 800) };
        paced_table(&runtime, tmp.path(), &script, blocks, per_block);
    }
    if process::runs("dead") {
        dead_receiver_table(
            &runtime,
            tmp.path(),
            &script,
            if quick { 20_000 } else { 100_000 },
        );
    }
}
