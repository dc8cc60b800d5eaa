//! How ctxlog-server's cost grows with its work, in three tables, each
//! against the server binary on loopback:
//!
//! - **history**: `GetTask` with `historyLength` 10 on tasks of 10, 1,000
//!   and 10,000 messages (p50, p99; flat is the aim);
//! - **contexts**: `SendMessage` (a new task in an existing context) on a
//!   store of 10^3, 10^5 and 10^6 contexts of 10 messages each (p50, p99,
//!   the server's anonymous resident memory and the store's index, each
//!   per context; latency within 1.5x from the smallest to the largest is
//!   the aim);
//! - **streams**: 1,000 tasks, 10 SSE subscribers each, every task sending
//!   a status every 500 ms: memory per stream, the delivery p99 (arrival
//!   less the status's timestamp), and `GetTask`'s p50 and p99 while they
//!   are open against idle (within 2x is the aim).
//!
//! The stores are filled through the library (durability `Buffered`, then
//! closed: the fill is setup, not what is measured), then served.
//!
//! `cargo bench -p ctxlog-server --bench scale`; `CTXLOG_BENCH_QUICK=1`
//! makes it short (10^3, 10^4 and 10^5 contexts; 200 tasks of 10
//! subscribers); `CTXLOG_BENCH_ONLY=history|contexts|streams` runs one
//! table.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ctxlog::a2a::{Message, Role, TaskState, TaskStatus, TaskStatusUpdateEvent};
use ctxlog::{Durability, Options, Store};
use futures_util::StreamExt;
use serde_json::{json, Value};

#[path = "../tests/it/common/process.rs"]
mod process;

use process::{cpu_time, quantile, rpc, rss_anon, Process};

const TENANT: &str = "default";

fn start(dir: &Path, script: &Path) -> Process {
    Process::scripted(
        dir,
        script,
        &["--max-turns", "4096", "--max-connections", "16000"],
    )
}

fn script(dir: &Path) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("scale.json");
    let ticks: Vec<Value> = (0..40)
        .flat_map(|_| {
            [
                json!({ "status": "TASK_STATE_WORKING", "text": "tick" }),
                json!({ "pauseMs": 500 }),
            ]
        })
        .collect();
    let mut steps = ticks;
    steps.push(json!({ "status": "TASK_STATE_COMPLETED", "text": "done" }));
    let script = json!({ "name": "scale", "rules": [ { "text": "ticks", "steps": steps } ],
        "default": [ { "status": "TASK_STATE_COMPLETED", "text": "{text}" } ] });
    std::fs::write(&path, script.to_string()).unwrap();
    path
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

fn quantiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort_unstable();
    (quantile(&samples, 0.50), quantile(&samples, 0.99))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn fill_options() -> Options {
    Options::default().durability(Durability::Buffered)
}

/// A completed status with the agent's reply, for a receipt's task.
fn completed(receipt: &ctxlog::Receipt, text: &str, state: TaskState) -> TaskStatusUpdateEvent {
    let reply = Message::new(format!("a-{}", receipt.seq), Role::Agent, &[text]);
    receipt.status_update(TaskStatus::new(state).with_message(reply))
}

/// `GetTask` of `id` `n` times from one client: p50, p99.
async fn get_task_latency(
    url: &str,
    id: &str,
    history: Option<u64>,
    n: usize,
) -> (Duration, Duration) {
    let http = reqwest::Client::new();
    let mut samples = Vec::with_capacity(n);
    let params = match history {
        Some(h) => json!({ "id": id, "historyLength": h }),
        None => json!({ "id": id }),
    };
    for _ in 0..n {
        let sent = Instant::now();
        let task = rpc(&http, url, "GetTask", params.clone()).await;
        samples.push(sent.elapsed());
        assert_eq!(task["id"], id);
    }
    quantiles(samples)
}

/// Tasks of 10, 1,000 and 10,000 messages; `GetTask` with
/// `historyLength` 10 on each.
fn history_table(runtime: &tokio::runtime::Runtime, dir: &Path, script: &Path) {
    let store_dir = dir.join("history");
    let store = Store::open(&store_dir, fill_options()).unwrap();
    let mut ids = Vec::new();
    for messages in [10usize, 1_000, 10_000] {
        let first = json!({ "messageId": format!("h{messages}-0"), "role": "ROLE_USER",
            "parts": [{ "text": "question" }] });
        let mut receipt = store
            .receive_message(TENANT, first.to_string().as_bytes())
            .unwrap();
        for round in 1..=messages / 2 {
            let state = match round == messages / 2 {
                true => TaskState::Completed,
                false => TaskState::InputRequired,
            };
            store
                .update_status(TENANT, &completed(&receipt, "answer", state))
                .unwrap();
            if round < messages / 2 {
                let next = json!({ "messageId": format!("h{messages}-{round}"),
                    "role": "ROLE_USER", "taskId": receipt.task_id,
                    "contextId": receipt.context_id, "parts": [{ "text": "more" }] });
                receipt = store
                    .receive_message(TENANT, next.to_string().as_bytes())
                    .unwrap();
            }
        }
        ids.push((messages, receipt.task_id.clone()));
    }
    store.close().unwrap();
    let server = start(&store_dir, script);
    println!("\nhistory: GetTask with historyLength 10, 1 client, 500 calls each");
    println!("{:>10}  {:>10}  {:>10}", "messages", "p50 ms", "p99 ms");
    let mut p50s = Vec::new();
    for (messages, id) in &ids {
        let (p50, p99) = runtime.block_on(get_task_latency(&server.url, id, Some(10), 500));
        p50s.push(p50);
        println!("{messages:>10}  {:>10.3}  {:>10.3}", ms(p50), ms(p99));
    }
    if let (Some(first), Some(last)) = (p50s.first(), p50s.last()) {
        println!(
            "p50 at 10,000 messages / at 10: {:.2}x (aim: flat)",
            last.as_secs_f64() / first.as_secs_f64()
        );
    }
}

/// Adds contexts `from..to` of 10 messages each (5 tasks of a question
/// and an answer) to the store at `dir`.
fn fill_contexts(dir: &Path, from: usize, to: usize) {
    let store = Arc::new(Store::open(dir, fill_options()).unwrap());
    let threads = 2;
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                for c in (from + t..to).step_by(threads) {
                    for k in 0..5 {
                        let raw = json!({ "messageId": format!("f{c}-{k}"), "role": "ROLE_USER",
                            "contextId": format!("ctx-{c}"), "parts": [{ "text": "fill" }] });
                        let receipt = store
                            .receive_message(TENANT, raw.to_string().as_bytes())
                            .unwrap();
                        store
                            .update_status(
                                TENANT,
                                &completed(&receipt, "filled", TaskState::Completed),
                            )
                            .unwrap();
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    match Arc::try_unwrap(store) {
        Ok(store) => store.close().unwrap(),
        Err(_) => panic!("the fill's threads hold the store"),
    }
}

/// `SendMessage` (a new task in a random existing context of `contexts`)
/// from 8 clients, `total` in all: p50, p99.
async fn send_to_contexts(
    url: &str,
    contexts: usize,
    total: usize,
    tag: &str,
) -> (Duration, Duration) {
    let clients = 8;
    let samples = Arc::new(Mutex::new(Vec::with_capacity(total)));
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (url, tag, samples) = (url.to_string(), format!("{tag}-{c}"), samples.clone());
        tasks.push(tokio::spawn(async move {
            let http = reqwest::Client::new();
            // A fixed stride through the contexts: spread, and the same in
            // every run.
            let mut at = (c * 7919) % contexts;
            for i in 0..total / clients {
                at = (at + 104_729) % contexts;
                let params = json!({ "message": { "messageId": format!("{tag}-{i}"),
                    "role": "ROLE_USER", "contextId": format!("ctx-{at}"),
                    "parts": [{ "text": "hello" }] } });
                let sent = Instant::now();
                let result = rpc(&http, &url, "SendMessage", params).await;
                let took = sent.elapsed();
                assert_eq!(result["task"]["status"]["state"], "TASK_STATE_COMPLETED");
                samples.lock().unwrap().push(took);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let samples = std::mem::take(&mut *samples.lock().unwrap());
    quantiles(samples)
}

fn contexts_table(runtime: &tokio::runtime::Runtime, dir: &Path, script: &Path, sizes: &[usize]) {
    let store_dir = dir.join("contexts");
    println!("\ncontexts: SendMessage (a new task in an existing context), 8 clients, 4,000 sends");
    println!(
        "{:>10}  {:>8}  {:>8}  {:>11}  {:>9}  {:>15}  {:>13}  {:>7}",
        "contexts",
        "p50 ms",
        "p99 ms",
        "RssAnon MiB",
        "index MiB",
        "RssAnon/context",
        "index/context",
        "fill s"
    );
    let mut filled = 0;
    let mut p50s = Vec::new();
    for &size in sizes {
        let started = Instant::now();
        fill_contexts(&store_dir, filled, size);
        let fill = started.elapsed();
        filled = size;
        let server = start(&store_dir, script);
        runtime.block_on(send_to_contexts(
            &server.url,
            size,
            400,
            &format!("warm{size}"),
        ));
        let (p50, p99) = runtime.block_on(send_to_contexts(
            &server.url,
            size,
            4000,
            &format!("s{size}"),
        ));
        let rss = rss_anon(server.child.id());
        drop(server);
        let index = Store::open_read_only(&store_dir, Options::default())
            .unwrap()
            .stats()
            .index_bytes;
        p50s.push(p50);
        println!(
            "{size:>10}  {:>8.3}  {:>8.3}  {:>11.1}  {:>9.1}  {:>13.0} B  {:>11.0} B  {:>7.1}",
            ms(p50),
            ms(p99),
            mib(rss),
            mib(index),
            rss as f64 / size as f64,
            index as f64 / size as f64,
            fill.as_secs_f64()
        );
    }
    if let (Some(first), Some(last)) = (p50s.first(), p50s.last()) {
        println!(
            "p50 at the largest / at the smallest: {:.2}x (aim: <= 1.5)",
            last.as_secs_f64() / first.as_secs_f64()
        );
    }
}

/// Statuses received by the subscribers, and their delivery latencies.
#[derive(Default)]
struct Delivered {
    latencies: Mutex<Vec<Duration>>,
    open: AtomicUsize,
}

/// One SSE subscriber of task `id`: reads until the stream ends or
/// `until`, noting each status's delivery latency. (`http` is shared: a
/// client of its own would load the system's root certificates again,
/// milliseconds of CPU each, which for ten thousand subscribers held the
/// client's CPUs for longer than the tasks ran.)
async fn subscriber(
    http: reqwest::Client,
    url: String,
    id: String,
    delivered: Arc<Delivered>,
    until: Instant,
) {
    let response = http
        .get(format!("{url}/tasks/{id}:subscribe"))
        .header("A2A-Version", "1.0")
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    delivered.open.fetch_add(1, Ordering::Relaxed);
    let mut body = response.bytes_stream();
    let mut buffer = Vec::new();
    let deadline = tokio::time::Instant::from_std(until);
    loop {
        let chunk = tokio::select! {
            chunk = body.next() => chunk,
            _ = tokio::time::sleep_until(deadline) => None,
        };
        let Some(Ok(chunk)) = chunk else { break };
        buffer.extend_from_slice(&chunk);
        while let Some(end) = buffer.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = buffer.drain(..end + 2).collect();
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            for line in String::from_utf8_lossy(&event).lines() {
                let Some(data) = line.strip_prefix("data:") else {
                    continue;
                };
                let Ok(v) = serde_json::from_str::<Value>(data.trim()) else {
                    continue;
                };
                let stamp = v["statusUpdate"]["status"]["timestamp"].as_str();
                if let Some(at) = stamp.and_then(ctxlog::time::parse_iso8601_ms) {
                    let late = Duration::from_millis(now.saturating_sub(at));
                    delivered.latencies.lock().unwrap().push(late);
                }
            }
        }
    }
    delivered.open.fetch_sub(1, Ordering::Relaxed);
}

fn streams_table(runtime: &tokio::runtime::Runtime, dir: &Path, script: &Path, tasks: usize) {
    let per_task = 10;
    let server = start(&dir.join("streams"), script);
    let url = server.url.clone();
    let pid = server.child.id();
    runtime.block_on(async {
        let http = reqwest::Client::new();
        // An idle reference: a completed task read with nothing else going on.
        let done = rpc(&http, &url, "SendMessage", json!({ "message": { "messageId": "ref",
            "role": "ROLE_USER", "parts": [{ "text": "reference" }] } })).await;
        let reference = done["task"]["id"].as_str().unwrap().to_string();
        let idle = get_task_latency(&url, &reference, Some(10), 300).await;
        let before = rss_anon(pid);
        let mut ids = Vec::new();
        for i in 0..tasks {
            let result = rpc(&http, &url, "SendMessage", json!({ "message": {
                "messageId": format!("t{i}"), "role": "ROLE_USER", "parts": [{ "text": "ticks" }] },
                "configuration": { "returnImmediately": true } })).await;
            ids.push(result["task"]["id"].as_str().unwrap().to_string());
        }
        let delivered = Arc::new(Delivered::default());
        let until = Instant::now() + Duration::from_secs(25);
        let mut readers = Vec::new();
        // Each subscriber's request takes a connection of its own (a
        // stream holds it); none is kept idle after.
        let streams = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
        for id in &ids {
            for _ in 0..per_task {
                let (http, url, id) = (streams.clone(), url.clone(), id.clone());
                readers.push(tokio::spawn(subscriber(http, url, id, delivered.clone(), until)));
            }
        }
        // Bounded: every subscriber answered, or 20 s.
        let wait = Instant::now() + Duration::from_secs(20);
        while delivered.open.load(Ordering::Relaxed) < tasks * per_task && Instant::now() < wait {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let open = delivered.open.load(Ordering::Relaxed);
        // Let the statuses flow a while, then measure with them open.
        delivered.latencies.lock().unwrap().clear();
        let (cpu_before, window) = (cpu_time(pid), Instant::now());
        tokio::time::sleep(Duration::from_secs(3)).await;
        let latencies = std::mem::take(&mut *delivered.latencies.lock().unwrap());
        let seconds = window.elapsed().as_secs_f64();
        let server_cpu = cpu_time(pid)
            .zip(cpu_before)
            .map(|(after, before)| after.saturating_sub(before).as_secs_f64() / seconds);
        let held = rss_anon(pid);
        let during = get_task_latency(&url, &reference, Some(10), 300).await;
        let received = latencies.len();
        let (d50, d99) = quantiles(latencies);
        for r in readers {
            r.abort();
        }
        println!("\nstreams: {tasks} tasks x {per_task} subscribers, a status every 500 ms per task");
        println!(
            "subscribers open: {open}; memory per stream: {:.1} KiB (RssAnon {:.1} -> {:.1} MiB)",
            held.saturating_sub(before) as f64 / 1024.0 / open.max(1) as f64,
            mib(before),
            mib(held)
        );
        println!(
            "delivery over {seconds:.1} s: {received} statuses ({:.0}/s), p50 {:.1} ms, p99 {:.1} ms (timestamps are in ms); the server used {:.2} of the 2 CPUs ({:.0} us per status delivered), the load client the rest",
            received as f64 / seconds,
            ms(d50),
            ms(d99),
            server_cpu.unwrap_or(f64::NAN),
            server_cpu.unwrap_or(f64::NAN) * seconds * 1e6 / received.max(1) as f64
        );
        println!(
            "GetTask idle p50 {:.3} / p99 {:.3} ms; with the streams open p50 {:.3} / p99 {:.3} ms ({:.2}x at p50; aim: <= 2)",
            ms(idle.0),
            ms(idle.1),
            ms(during.0),
            ms(during.1),
            during.0.as_secs_f64() / idle.0.as_secs_f64()
        );
    });
    drop(server);
}

fn main() {
    let quick = process::quick();
    let runtime = process::bench_runtime();
    let tmp = tempfile::tempdir().unwrap();
    let script = script(&tmp.path().join("script"));
    if process::runs("history") {
        history_table(&runtime, tmp.path(), &script);
    }
    let sizes: &[usize] = match quick {
        true => &[1_000, 10_000, 100_000],
        false => &[1_000, 100_000, 1_000_000],
    };
    if process::runs("contexts") {
        contexts_table(&runtime, tmp.path(), &script, sizes);
    }
    if process::runs("streams") {
        let tasks = if quick { 200 } else { 1_000 };
        streams_table(&runtime, tmp.path(), &script, tasks);
    }
}
