//! The server over time, not requests: memory that returns to what is live
//! after every kind of traffic, and latency that stays flat.
//!
//! `cargo test -p ctxlog-server --bench soak` (the short form, in CI):
//! against the server binary on loopback (the scripted soak agent),
//! 100,000 messages from 8 clients (new tasks, follow-ups to tasks that
//! asked a question, streaming sends), then 10,000 streams opened and
//! dropped (resumes from the start, subscriptions to unknown tasks, sends
//! whose stream is dropped after its first event), then 300 subscribers
//! of one task holding a 3.9 MB event that read nothing. It samples the
//! server's anonymous resident memory (`RssAnon`: the file pages of the
//! mapped log are the page cache's, not the server's) and asserts that,
//! once the traffic is over, it is back within [`SLACK`] of where it
//! started, plus what the store's own index grew by (the data kept, read
//! from a read-only open beside the server); and that the 300 slow readers
//! held at most [`SLOW_READERS_BOUND`] while they were open. Last it starts
//! a fresh server on the store the traffic left and prints its memory
//! beside the idle level (RssAnon and VmRSS). `CTXLOG_SOAK_SENDS` sets the
//! units of traffic (100,000 by default; a million takes about 7.5
//! minutes on 2 cores, BENCHMARKS.md's figure).
//!
//! `cargo bench -p ctxlog-server --bench soak [-- MINUTES]` (the long form,
//! 30 minutes by default): mixed traffic from 8 clients at a steady rate
//! (`CTXLOG_SOAK_RATE` units a second, 300 by default: sends, follow-ups,
//! streams, resumes, listings, cancels) with the store's maintenance on,
//! and the server restarted twice on the same store, at a third of the run
//! (SIGTERM) and at two thirds (SIGKILL), with the traffic held meanwhile;
//! every 10 s it prints the units done, the SendMessage p99, RssAnon, the
//! store's index and RssAnon beyond it, and at the end the first and last
//! fifths of the rate, the p99 and the memory beyond the index. Last, with
//! the server stopped, it reads every message a SendMessage acknowledged
//! from its task's history in the store, and fails if one is missing.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

#[path = "../tests/it/common/process.rs"]
mod process;

#[path = "../../benches/common/figures.rs"]
mod figures;

use process::{rss_anon, rss_total, Process};

/// How far above its starting level (plus the index's growth) the
/// server's memory may be once the traffic is over: the active segment's
/// mirror (up to 16 MiB, what it holds of the log since the last rotation)
/// and the runtime's own.
const SLACK: u64 = 32 << 20;
/// How much the 300 readers of one large event may add while they are
/// open (one shared copy of the event, and the buffers of 300 connections).
const SLOW_READERS_BOUND: u64 = 64 << 20;
/// Clients sending at once.
const CLIENTS: usize = 8;
/// Contexts the traffic spreads over (so the index grows by messages, as
/// a deployment's does, not by a new context per message).
const CONTEXTS: usize = 1000;

fn script(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("soak.json");
    let script = json!({ "name": "soak", "rules": [
        { "text": "question", "steps": [
            { "status": "TASK_STATE_INPUT_REQUIRED", "text": "which one?" } ] },
        { "text": "answer", "steps": [
            { "status": "TASK_STATE_WORKING", "text": "on it" },
            { "artifact": { "artifactId": "r", "parts": [{ "text": "result for {text}" }] },
              "lastChunk": true },
            { "status": "TASK_STATE_COMPLETED", "text": "done: {text}" } ] },
        { "text": "stream", "steps": [
            { "status": "TASK_STATE_WORKING" },
            { "artifact": { "artifactId": "s", "parts": [{ "text": "one" }] } },
            { "artifact": { "artifactId": "s", "parts": [{ "text": "two" }] }, "append": true,
              "lastChunk": true },
            { "status": "TASK_STATE_COMPLETED", "text": "streamed" } ] },
        { "text": "slow", "steps": [
            { "status": "TASK_STATE_WORKING" }, { "pauseMs": 20 },
            { "status": "TASK_STATE_COMPLETED" } ] }
    ], "default": [ { "status": "TASK_STATE_COMPLETED", "text": "{text}" } ] });
    std::fs::write(&path, script.to_string()).unwrap();
    path
}

fn start_server(dir: &Path, script: &Path) -> Process {
    Process::scripted(
        dir,
        script,
        &["--max-turns", "1024", "--body-limit", "8388608"],
    )
}

/// The store's index bytes, from a read-only open beside the server.
fn index_bytes(dir: &Path) -> u64 {
    ctxlog::Store::open_read_only(dir, ctxlog::Options::default())
        .unwrap()
        .stats()
        .index_bytes
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// A client of the server: JSON-RPC calls, bounded in time. Its clones
/// share the server's address, which a restart changes.
#[derive(Clone)]
struct Client {
    at: Arc<std::sync::RwLock<String>>,
    http: reqwest::Client,
}

impl Client {
    fn new(url: &str) -> Self {
        Client {
            at: Arc::new(std::sync::RwLock::new(url.to_string())),
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(4)
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap(),
        }
    }

    /// The server's address now.
    fn url(&self) -> String {
        self.at.read().unwrap().clone()
    }

    async fn call(&self, method: &str, params: Value) -> Value {
        process::rpc(&self.http, &self.url(), method, params).await
    }

    /// A stream's whole body (it ends with its task), or its first chunk
    /// only (then dropped) if `drop_early`.
    async fn stream(&self, method: &str, params: Value, last: Option<u64>, drop_early: bool) {
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
        let mut request = self
            .http
            .post(format!("{}/", self.url()))
            .header("A2A-Version", "1.0")
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(last) = last {
            request = request.header("last-event-id", last.to_string());
        }
        let mut response = request.send().await.unwrap();
        assert_eq!(response.status(), 200);
        while let Some(chunk) = response.chunk().await.unwrap() {
            if drop_early && !chunk.is_empty() {
                return;
            }
        }
    }

    async fn health(&self) -> Value {
        let text = self
            .http
            .get(format!("{}/healthz", self.url()))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        serde_json::from_str(&text).unwrap()
    }
}

fn message(id: &str, context: usize, text: &str) -> Value {
    json!({ "messageId": id, "role": "ROLE_USER", "contextId": format!("soak-{context}"),
            "parts": [{ "text": text }] })
}

/// What a unit of traffic measured: its SendMessage latencies, and the
/// (task, messageId) of every message a SendMessage acknowledged.
#[derive(Default)]
struct Unit {
    took: Vec<Duration>,
    acked: Vec<(String, String)>,
}

/// The id of the task a SendMessage answered with.
fn task_id(answer: &Value) -> String {
    answer["task"]["id"].as_str().unwrap().to_string()
}

/// One unit of traffic, number `n` of client `c`: mostly plain sends, a
/// question and its follow-up, a streaming send.
async fn traffic(client: &Client, c: usize, n: usize, mixed: bool) -> Unit {
    // Spread over the contexts (an odd multiplier reaches every one).
    let context = n.wrapping_mul(2_654_435_761) % CONTEXTS;
    let id = format!("c{c}-{n}");
    let mut unit = Unit::default();
    let send = |m: Value| {
        let client = client.clone();
        async move {
            let at = Instant::now();
            let task = client.call("SendMessage", json!({ "message": m })).await;
            (task, at.elapsed())
        }
    };
    match n % 20 {
        0 => {
            let (asked, t) = send(message(&id, context, "a question")).await;
            unit.took.push(t);
            let task = task_id(&asked);
            unit.acked.push((task.clone(), id.clone()));
            let mut answer = message(&format!("{id}-a"), context, "the answer");
            answer["taskId"] = json!(task);
            let (done, t) = send(answer).await;
            unit.took.push(t);
            assert_eq!(done["task"]["status"]["state"], "TASK_STATE_COMPLETED");
            unit.acked.push((task, format!("{id}-a")));
        }
        1 => {
            let m = message(&id, context, "stream it");
            client
                .stream("SendStreamingMessage", json!({ "message": m }), None, false)
                .await;
        }
        2 if mixed => {
            let page = client
                .call(
                    "ListTasks",
                    json!({ "contextId": format!("soak-{context}"), "pageSize": 10 }),
                )
                .await;
            assert!(page["tasks"].is_array());
        }
        3 if mixed => {
            let m = message(&id, context, "slow one");
            let task = client
                .call(
                    "SendMessage",
                    json!({ "message": m, "configuration": { "returnImmediately": true } }),
                )
                .await;
            let slow = task_id(&task);
            unit.acked.push((slow.clone(), id.clone()));
            let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "CancelTask", "params": { "id": slow } });
            // It may have finished first: either answer is fine.
            let _ = client
                .http
                .post(format!("{}/", client.url()))
                .header("A2A-Version", "1.0")
                .body(body.to_string())
                .send()
                .await;
        }
        4 if mixed => {
            let (done, t) = send(message(&id, context, "resume me")).await;
            unit.took.push(t);
            let task = task_id(&done);
            unit.acked.push((task.clone(), id.clone()));
            client
                .stream("SubscribeToTask", json!({ "id": task }), Some(0), false)
                .await;
        }
        _ => {
            let (done, t) = send(message(&id, context, "hello")).await;
            unit.took.push(t);
            assert_eq!(done["task"]["status"]["state"], "TASK_STATE_COMPLETED");
            unit.acked.push((task_id(&done), id));
        }
    }
    unit
}

/// Waits (at most 60 s) until the server follows no task and holds no
/// connection but the health check's.
async fn settled(client: &Client) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let health = client.health().await;
        if health["tasksFollowed"] == 0 && health["connections"].as_u64() <= Some(2) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the server never settled: {health}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn p99(mut latencies: Vec<Duration>) -> Duration {
    latencies.sort_unstable();
    latencies
        .get((latencies.len() * 99 / 100).min(latencies.len().saturating_sub(1)))
        .copied()
        .unwrap_or_default()
}

/// The short form: fixed amounts of each kind of traffic, then the bound.
async fn short(server: &Process, dir: &Path) -> Checks {
    let pid = server.child.id();
    let client = Client::new(&server.url);
    let sends = soak_sends();
    let streams = 10_000;
    // Warm up (the runtime's threads, the allocator's arenas, the first
    // segments), then take the starting level.
    run_sends(&client, 2_000, 0).await;
    settled(&client).await;
    let (rss_start, index_start) = (rss_anon(pid), index_bytes(dir));
    println!(
        "start: RssAnon {:.1} MiB, index {:.1} MiB",
        mib(rss_start),
        mib(index_start)
    );

    let at = Instant::now();
    let latencies = run_sends(&client, sends, 1_000_000).await;
    println!(
        "{sends} units of traffic in {:.1} s (SendMessage p99 {:.2} ms): RssAnon {:.1} MiB",
        at.elapsed().as_secs_f64(),
        p99(latencies).as_secs_f64() * 1e3,
        mib(rss_anon(pid))
    );

    let at = Instant::now();
    let tasks: Vec<String> = client
        .call(
            "ListTasks",
            json!({ "contextId": "soak-1", "pageSize": 100 }),
        )
        .await["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect();
    let mut workers = Vec::new();
    for w in 0..CLIENTS {
        let (client, tasks) = (client.clone(), tasks.clone());
        workers.push(tokio::spawn(async move {
            for i in (w..streams).step_by(CLIENTS) {
                match i % 3 {
                    0 => {
                        let task = &tasks[i % tasks.len()];
                        client
                            .stream("SubscribeToTask", json!({ "id": task }), Some(0), false)
                            .await;
                    }
                    1 => {
                        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask",
                                           "params": { "id": format!("nope-{i}") } });
                        let r = client
                            .http
                            .post(format!("{}/", client.url()))
                            .header("A2A-Version", "1.0")
                            .body(body.to_string())
                            .send()
                            .await
                            .unwrap();
                        assert!(r.text().await.unwrap().contains("-32001"));
                    }
                    _ => {
                        let m = message(&format!("st-{i}"), i % CONTEXTS, "stream it");
                        client
                            .stream("SendStreamingMessage", json!({ "message": m }), None, true)
                            .await;
                    }
                }
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    println!(
        "{streams} streams opened and dropped in {:.1} s: RssAnon {:.1} MiB",
        at.elapsed().as_secs_f64(),
        mib(rss_anon(pid))
    );

    let before_slow = rss_anon(pid);
    let held = slow_readers(&client, &server.url).await;
    let during = rss_anon(pid);
    println!(
        "300 readers of a 3.9 MB event that read nothing: RssAnon {:.1} MiB (+{:.1})",
        mib(during),
        mib(during.saturating_sub(before_slow))
    );
    drop(held);

    settled(&client).await;
    let (rss_end, index_end) = (rss_anon(pid), index_bytes(dir));
    let grown = index_end.saturating_sub(index_start);
    let bound = rss_start + grown + SLACK;
    println!(
        "end: RssAnon {:.1} MiB (start {:.1}, index grew {:.1} MiB; bound {:.1} MiB)",
        mib(rss_end),
        mib(rss_start),
        mib(grown),
        mib(bound)
    );
    Checks {
        slow_readers: during.saturating_sub(before_slow),
        rss_end,
        total_end: rss_total(pid),
        bound,
    }
}

/// What the short form measured, checked once everything is printed.
struct Checks {
    slow_readers: u64,
    rss_end: u64,
    total_end: u64,
    bound: u64,
}

impl Checks {
    fn assert(&self) {
        assert!(
            self.slow_readers <= SLOW_READERS_BOUND,
            "300 slow readers held {:.1} MiB",
            mib(self.slow_readers)
        );
        assert!(
            self.rss_end <= self.bound,
            "memory did not return: {:.1} MiB > {:.1} MiB",
            mib(self.rss_end),
            mib(self.bound)
        );
    }
}

/// A fresh server on the store the traffic left, once settled: its
/// RssAnon and VmRSS, against which the idle level after the traffic is
/// compared.
async fn fresh(mut server: Process, dir: &Path, script: &Path) -> (u64, u64) {
    server.signal("TERM");
    assert!(server.exited_within(Duration::from_secs(60)), "no exit");
    let server = start_server(dir, script);
    let client = Client::new(&server.url);
    settled(&client).await;
    let pid = server.child.id();
    (rss_anon(pid), rss_total(pid))
}

/// `total` units of traffic from [`CLIENTS`] clients; their SendMessage
/// latencies. Units are numbered from `first` (each number is a
/// messageId of its own).
async fn run_sends(client: &Client, total: usize, first: usize) -> Vec<Duration> {
    let mut workers = Vec::new();
    for c in 0..CLIENTS {
        let client = client.clone();
        workers.push(tokio::spawn(async move {
            let mut took = Vec::new();
            for n in (first + c..first + total).step_by(CLIENTS) {
                took.extend(traffic(&client, c, n, false).await.took);
            }
            took
        }));
    }
    let mut took = Vec::new();
    for w in workers {
        took.extend(w.await.unwrap());
    }
    took
}

/// 300 connections subscribed from the start to a task whose agent
/// answered a 3.9 MB message with its text, each reading nothing (a tiny
/// receive buffer), held until the result is dropped.
async fn slow_readers(client: &Client, url: &str) -> Vec<tokio::net::TcpStream> {
    let big = "b".repeat(3_900_000);
    let m = message("big-one", 0, &big);
    let task = client.call("SendMessage", json!({ "message": m })).await;
    let id = task["task"]["id"].as_str().unwrap().to_string();
    let addr: std::net::SocketAddr = url.trim_start_matches("http://").parse().unwrap();
    let mut held = Vec::new();
    for _ in 0..300 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut stream = socket.connect(addr).await.unwrap();
        let head = format!(
            "GET /tasks/{id}:subscribe HTTP/1.1\r\nhost: x\r\na2a-version: 1.0\r\n\
             last-event-id: 0\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        held.push(stream);
    }
    // Until each stream has been served as far as its socket takes (the
    // server holds what remains): the followers show in /healthz.
    let deadline = Instant::now() + Duration::from_secs(30);
    while client.health().await["connections"].as_u64() < Some(300) {
        assert!(
            Instant::now() < deadline,
            "the 300 readers were not all served"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    held
}

/// Stops `server` for a restart: with SIGTERM (a clean shutdown, waited
/// for) or SIGKILL.
fn stop(mut server: Process, clean: bool) {
    if clean {
        server.signal("TERM");
        assert!(
            server.exited_within(Duration::from_secs(60)),
            "the server did not stop on SIGTERM"
        );
    } else {
        server.kill();
    }
}

/// The long form: mixed traffic for `minutes` at a steady `rate` (units a
/// second, all clients together), sampled every 10 s. The store keeps
/// everything it is sent, so its index grows with the traffic: each row
/// also gives the index (a read-only open beside the server) and what the
/// server holds beyond it, which is what must stay flat.
async fn long(mut server: Process, dir: &Path, script: &Path, minutes: u64, rate: u64) {
    let mut pid = server.child.id();
    let client = Client::new(&server.url);
    run_sends(&client, 2_000, 0).await;
    let stop_traffic = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let window: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let acked: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    // Held for reading by each unit of traffic, for writing by a restart:
    // a restart waits for the units under way, and units wait for it.
    let gate = Arc::new(tokio::sync::RwLock::new(()));
    let mut workers = Vec::new();
    // Each client's share of the rate, as a fixed spacing between starts.
    let spacing = Duration::from_secs_f64(CLIENTS as f64 / rate.max(1) as f64);
    for c in 0..CLIENTS {
        let (client, stop_traffic, done, window, acked, gate) = (
            client.clone(),
            stop_traffic.clone(),
            done.clone(),
            window.clone(),
            acked.clone(),
            gate.clone(),
        );
        workers.push(tokio::spawn(async move {
            let mut n = 10_000_000 * (c + 1);
            let mut next = tokio::time::Instant::now();
            while !stop_traffic.load(Ordering::Relaxed) {
                let unit = {
                    let _open = gate.read().await;
                    traffic(&client, c, n, true).await
                };
                window.lock().unwrap().extend(unit.took);
                acked.lock().unwrap().extend(unit.acked);
                done.fetch_add(1, Ordering::Relaxed);
                n += 1;
                next += spacing;
                // After a restart, start again from now, not in a burst.
                next = next.max(tokio::time::Instant::now() - spacing);
                tokio::time::sleep_until(next).await;
            }
        }));
    }
    let length = Duration::from_secs(minutes * 60);
    let end = Instant::now() + length;
    // Two restarts, at a third and two thirds of the run: a clean one
    // (SIGTERM), then a crash (SIGKILL).
    let mut restarts = vec![(length * 2 / 3, false), (length / 3, true)];
    let mut rows: VecDeque<Row> = VecDeque::new();
    println!(
        "{:>6}  {:>8}  {:>11}  {:>11}  {:>9}  {:>11}",
        "s", "units/s", "send p99 ms", "RssAnon MiB", "index MiB", "beyond MiB"
    );
    let start = Instant::now();
    let mut last_done = 0;
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_secs(10)).await;
        if let Some(&(at, clean)) = restarts.last() {
            if start.elapsed() >= at {
                restarts.pop();
                let _closed = gate.write().await;
                let took = Instant::now();
                stop(server, clean);
                server = start_server(dir, script);
                *client.at.write().unwrap() = server.url.clone();
                pid = server.child.id();
                println!(
                    "{:>6.0}  restarted after {} in {:.1} s",
                    start.elapsed().as_secs_f64(),
                    if clean { "SIGTERM" } else { "SIGKILL" },
                    took.elapsed().as_secs_f64()
                );
            }
        }
        let total = done.load(Ordering::Relaxed);
        let latencies = std::mem::take(&mut *window.lock().unwrap());
        let row = Row {
            at: start.elapsed().as_secs_f64(),
            rate: (total - last_done) / 10,
            p99: p99(latencies),
            rss: rss_anon(pid),
            index: index_bytes(dir),
        };
        last_done = total;
        println!(
            "{:>6.0}  {:>8}  {:>11.2}  {:>11.1}  {:>9.1}  {:>11.1}",
            row.at,
            row.rate,
            row.p99.as_secs_f64() * 1e3,
            mib(row.rss),
            mib(row.index),
            mib(row.beyond())
        );
        rows.push_back(row);
    }
    stop_traffic.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    // Flat: the last fifth of the samples against the first fifth.
    let fifth = (rows.len() / 5).max(1);
    let mean = |it: &mut dyn Iterator<Item = f64>| {
        let v: Vec<f64> = it.collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    };
    let first_p99 = mean(&mut rows.iter().take(fifth).map(|r| r.p99.as_secs_f64()));
    let last_p99 = mean(&mut rows.iter().rev().take(fifth).map(|r| r.p99.as_secs_f64()));
    let first_beyond = mean(&mut rows.iter().take(fifth).map(|r| r.beyond() as f64));
    let last_beyond = mean(&mut rows.iter().rev().take(fifth).map(|r| r.beyond() as f64));
    let first_rate = mean(&mut rows.iter().take(fifth).map(|r| r.rate as f64));
    let last_rate = mean(&mut rows.iter().rev().take(fifth).map(|r| r.rate as f64));
    println!(
        "units/s: first fifth {first_rate:.0}, last fifth {last_rate:.0}; p99: first fifth \
         {:.2} ms, last fifth {:.2} ms ({:.2}x); beyond the index: {:.1} MiB -> {:.1} MiB",
        first_p99 * 1e3,
        last_p99 * 1e3,
        last_p99 / first_p99.max(f64::MIN_POSITIVE),
        first_beyond / (1u64 << 20) as f64,
        last_beyond / (1u64 << 20) as f64
    );
    // Every message a SendMessage acknowledged, through both restarts, is
    // in its task's history, read from the store once the server is gone.
    stop(server, true);
    let acked = std::mem::take(&mut *acked.lock().unwrap());
    let store = ctxlog::Store::open_read_only(dir, ctxlog::Options::default()).unwrap();
    let mut missing = Vec::new();
    for (task, message) in &acked {
        let found = store
            .get_task("default", task, None, false)
            .is_ok_and(|t| t.history.iter().any(|m| m.message_id == *message));
        if !found {
            missing.push((task, message));
        }
    }
    println!(
        "acknowledged messages: {}, readable at the end: {}",
        acked.len(),
        acked.len() - missing.len()
    );
    assert!(
        missing.is_empty(),
        "acknowledged but not readable: {:?}",
        &missing[..missing.len().min(10)]
    );
}

/// One sample of the long form.
struct Row {
    at: f64,
    rate: u64,
    p99: Duration,
    rss: u64,
    index: u64,
}

impl Row {
    /// What the server holds beyond the store's index.
    fn beyond(&self) -> u64 {
        self.rss.saturating_sub(self.index)
    }
}

/// The units of traffic of the short form (`CTXLOG_SOAK_SENDS`).
fn soak_sends() -> usize {
    std::env::var("CTXLOG_SOAK_SENDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let benching = args.iter().any(|a| a == "--bench");
    let minutes = args
        .iter()
        .find_map(|a| a.parse::<u64>().ok())
        .unwrap_or(30);
    let rate = std::env::var("CTXLOG_SOAK_RATE")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(300);
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let script = script(tmp.path());
    let server = start_server(&store, &script);
    let runtime = process::bench_runtime();
    runtime.block_on(async {
        if benching {
            println!(
                "soak: {minutes} minutes of mixed traffic from {CLIENTS} clients, {rate} units/s"
            );
            long(server, &store, &script, minutes, rate).await;
        } else {
            let checks = short(&server, &store).await;
            let (fresh_anon, fresh_total) = fresh(server, &store, &script).await;
            println!(
                "idle after the traffic: RssAnon {:.1} MiB, VmRSS {:.1} MiB; a fresh process \
                 on the same store: RssAnon {:.1} MiB, VmRSS {:.1} MiB",
                mib(checks.rss_end),
                mib(checks.total_end),
                mib(fresh_anon),
                mib(fresh_total),
            );
            // The headline's figures are a million sends'; fewer are a
            // short run's.
            let sends = soak_sends();
            let quick = sends < 1_000_000;
            for (figure, bytes) in [
                ("idle RssAnon after the traffic", checks.rss_end),
                ("idle VmRSS after the traffic", checks.total_end),
                ("RssAnon of a fresh process on the same store", fresh_anon),
                ("VmRSS of a fresh process on the same store", fresh_total),
                ("RssAnon held by 300 slow readers", checks.slow_readers),
            ] {
                figures::record("soak", figure, mib(bytes), "MiB", quick);
            }
            checks.assert();
        }
    });
}
