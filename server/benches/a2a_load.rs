//! SendMessage under load: ctxlog-server (an agent that completes each task
//! with its text in one status, as an echo executor does; durable with
//! group commit) side by side, in one run, with its floor (the same HTTP
//! stack and envelope answering a canned task, `bench/floor.rs`), with the
//! a2a-sdk 1.3.0 reference
//! server (DefaultRequestHandler on starlette/uvicorn, an echo executor) on
//! its InMemoryTaskStore and on its DatabaseTaskStore over SQLite, and with
//! the library alone doing the same store work. 1 and 64 concurrent
//! clients on loopback, each request a fresh messageId, bounded in count
//! and time. Prints requests per second, p50 and p99, and the ratios the
//! server issue asks for.
//!
//! `cargo bench -p ctxlog-server --bench a2a_load` (the a2a-sdk servers run
//! from the venv `.ci/run` makes, `target/interop-venv`, or the Python named
//! by `CTXLOG_BENCH_PYTHON`). `CTXLOG_BENCH_QUICK=1` makes it short.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ctxlog::a2a::{TaskState, TaskStatus, TaskStatusUpdateEvent};
use ctxlog::{Durability, Options, Store};

/// One measured run.
struct Run {
    requests: usize,
    rps: f64,
    p50: Duration,
    p99: Duration,
    errors: usize,
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:>9.0} req/s  p50 {:>9.3} ms  p99 {:>9.3} ms{}",
            self.rps,
            self.p50.as_secs_f64() * 1e3,
            self.p99.as_secs_f64() * 1e3,
            if self.errors > 0 {
                format!("  ({} errors)", self.errors)
            } else {
                String::new()
            }
        )
    }
}

fn summarize(mut latencies: Vec<Duration>, errors: usize, elapsed: Duration) -> Run {
    latencies.sort_unstable();
    Run {
        requests: latencies.len(),
        rps: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50: quantile(&latencies, 0.50),
        p99: quantile(&latencies, 0.99),
        errors,
    }
}

#[path = "../tests/it/common/process.rs"]
mod process;

#[path = "../bench/floor.rs"]
mod floor;

#[path = "../../benches/common/figures.rs"]
mod figures;

use process::{cpu_time, quantile, Process};

/// CPU time per request between two readings.
fn per_request(before: Option<Duration>, after: Option<Duration>, run: &Run) -> Option<Duration> {
    let done = (run.rps > 0.0).then_some(run.requests)?;
    Some(after?.checked_sub(before?)? / u32::try_from(done).ok()?)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The store's group-commit syncs and those that lingered, from
/// `/healthz` (`None` from a server that does not count them).
async fn group_syncs(url: &str) -> Option<(u64, u64)> {
    let (_, health) = process::health(url).await;
    Some((
        health["groupSyncs"].as_u64()?,
        health["lingeredSyncs"].as_u64()?,
    ))
}

/// Waits (bounded) until the server answers its agent card.
async fn ready(url: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let client = reqwest::Client::new();
    while Instant::now() < deadline {
        let probe = client
            .get(format!("{url}/.well-known/agent-card.json"))
            .send()
            .await;
        if probe.is_ok_and(|r| r.status().is_success()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{url} did not start within 60 s");
}

/// The server with an agent that does what the a2a-sdk echo executor
/// does: one COMPLETED status with the text (the bundled `echo` agent also
/// streams a WORKING status and chunks, which would not compare).
fn ctxlog_server(dir: &Path) -> Process {
    std::fs::create_dir_all(dir).unwrap();
    let script = dir.join("echo-once.json");
    let once = r#"{"default":[{"status":"TASK_STATE_COMPLETED","text":"{text}"}]}"#;
    std::fs::write(&script, once).unwrap();
    Process::scripted(&dir.join("store"), &script, &["--max-turns", "1024"])
}

/// The floor, as a process of its own: this binary started again with
/// [`floor::VARIABLE`] set.
fn floor_server() -> Process {
    let port = free_port();
    let child = Command::new(std::env::current_exe().unwrap())
        .env(floor::VARIABLE, port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Process::of(child, format!("http://127.0.0.1:{port}"))
}

fn python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CTXLOG_BENCH_PYTHON") {
        // `none`: measure ctxlog alone.
        return (p != "none").then(|| PathBuf::from(p));
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/interop-venv/bin/python");
    venv.exists().then_some(venv)
}

fn a2a_sdk_server(python: &Path, kind: &str, db: &Path) -> Process {
    let port = free_port();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/a2a_sdk_echo.py");
    let child = Command::new(python)
        .arg(script)
        .arg(port.to_string())
        .arg(kind)
        .arg(db)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Process::of(child, format!("http://127.0.0.1:{port}"))
}

/// How the load speaks: A2A v1.0 (`SendMessage`), or v0.3
/// (`message/send`, no `A2A-Version`) to ctxlog-server's v0.3 side.
#[derive(Clone, Copy, PartialEq)]
enum Speaks {
    V1,
    V03,
}

/// `clients` clients, each on its own connection, sending `total`
/// SendMessage requests in all (fewer if `limit` passes first).
async fn load(url: &str, clients: usize, total: usize, limit: Duration, tag: &str) -> Run {
    load_as(url, clients, total, limit, tag, Speaks::V1).await
}

/// [`load`] in the version `speaks`.
async fn load_as(
    url: &str,
    clients: usize,
    total: usize,
    limit: Duration,
    tag: &str,
    speaks: Speaks,
) -> Run {
    let start = Instant::now();
    let per = total.div_ceil(clients);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let url = format!("{url}/");
        let tag = format!("{tag}-{c}");
        tasks.push(tokio::spawn(async move {
            let http = reqwest::Client::builder()
                .pool_max_idle_per_host(1)
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap();
            let mut latencies = Vec::with_capacity(per);
            let mut errors = 0;
            for i in 0..per {
                if start.elapsed() > limit {
                    break;
                }
                let (body, done) = match speaks {
                    Speaks::V1 => (
                        format!(
                            r#"{{"jsonrpc":"2.0","id":{i},"method":"SendMessage","params":{{"message":{{"messageId":"{tag}-{i}","role":"ROLE_USER","parts":[{{"text":"hello {i}"}}]}}}}}}"#
                        ),
                        "TASK_STATE_COMPLETED",
                    ),
                    Speaks::V03 => (
                        format!(
                            r#"{{"jsonrpc":"2.0","id":{i},"method":"message/send","params":{{"message":{{"kind":"message","messageId":"{tag}-{i}","role":"user","parts":[{{"kind":"text","text":"hello {i}"}}]}}}}}}"#
                        ),
                        r#""state":"completed""#,
                    ),
                };
                let sent = Instant::now();
                let mut request = http.post(&url).header("content-type", "application/json");
                if speaks == Speaks::V1 {
                    request = request.header("A2A-Version", "1.0");
                }
                let response = request.body(body).send().await;
                let ok = match response {
                    Ok(r) => r.text().await.is_ok_and(|t| t.contains(done)),
                    Err(_) => false,
                };
                if ok {
                    latencies.push(sent.elapsed());
                } else {
                    errors += 1;
                }
            }
            (latencies, errors)
        }));
    }
    let mut latencies = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (l, e) = t.await.unwrap();
        latencies.extend(l);
        errors += e;
    }
    summarize(latencies, errors, start.elapsed())
}

/// The store work a turn of the echo agent does, through the library
/// alone: receive, then COMPLETED with a message (group commit).
fn library(dir: &Path, threads: usize, total: usize) -> Run {
    let store =
        Arc::new(Store::open(dir, Options::default().durability(Durability::GroupCommit)).unwrap());
    let per = total.div_ceil(threads);
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                let mut latencies = Vec::with_capacity(per);
                for i in 0..per {
                    let sent = Instant::now();
                    let raw = format!(
                        r#"{{"messageId":"lib-{t}-{i}","role":"ROLE_USER","parts":[{{"text":"hello {i}"}}]}}"#
                    );
                    let r = store.receive_message("default", raw.as_bytes()).unwrap();
                    let mut reply =
                        ctxlog::a2a::Message::new(format!("a-{t}-{i}"), ctxlog::a2a::Role::Agent, &["hello"]);
                    reply.task_id = Some(r.task_id.clone());
                    reply.context_id = Some(r.context_id.clone());
                    let event = TaskStatusUpdateEvent {
                        task_id: r.task_id.clone(),
                        context_id: r.context_id.clone(),
                        status: TaskStatus {
                            state: TaskState::Completed,
                            message: Some(reply),
                            timestamp: None,
                            extra: Default::default(),
                        }
                        .into(),
                        metadata: None,
                    };
                    store.update_status("default", &event).unwrap();
                    latencies.push(sent.elapsed());
                }
                latencies
            })
        })
        .collect();
    let latencies: Vec<Duration> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    summarize(latencies, 0, start.elapsed())
}

fn main() {
    if let Some(port) = std::env::var(floor::VARIABLE)
        .ok()
        .and_then(|p| p.parse().ok())
    {
        floor::serve(port);
        return;
    }
    let quick = process::quick();
    let (one, many) = if quick { (300, 3000) } else { (2000, 20000) };
    let limit = Duration::from_secs(if quick { 20 } else { 90 });
    let runtime = process::bench_runtime();
    let tmp = tempfile::tempdir().unwrap();
    println!(
        "SendMessage, echo agent: {one} requests from 1 client, {many} from 64 (at most {} s each)",
        limit.as_secs()
    );
    let mut table: Vec<(String, Run, Run)> = Vec::new();

    let lib1 = library(&tmp.path().join("lib1"), 1, one);
    let before = cpu_time(std::process::id());
    let lib64 = library(&tmp.path().join("lib64"), 64, many);
    let lib_cpu = per_request(before, cpu_time(std::process::id()), &lib64);
    table.push(("library alone (receive + complete)".into(), lib1, lib64));

    let floor = floor_server();
    let url = floor.url.clone();
    runtime.block_on(ready(&url));
    let fl1 = runtime.block_on(load(&url, 1, one, limit, "f1"));
    let before = cpu_time(floor.child.id());
    let fl64 = runtime.block_on(load(&url, 64, many, limit, "f64"));
    let floor_cpu = per_request(before, cpu_time(floor.child.id()), &fl64);
    drop(floor);

    let server = ctxlog_server(&tmp.path().join("server"));
    let url = server.url.clone();
    runtime.block_on(ready(&url));
    let c1 = runtime.block_on(load(&url, 1, one, limit, "c1"));
    let syncs_before = runtime.block_on(group_syncs(&url));
    let before = cpu_time(server.child.id());
    let c64 = runtime.block_on(load(&url, 64, many, limit, "c64"));
    let server_cpu = per_request(before, cpu_time(server.child.id()), &c64);
    let sync_line = match (syncs_before, runtime.block_on(group_syncs(&url))) {
        (Some((s0, l0)), Some((s1, l1))) => format!(
            "store syncs at 64 clients: {:.2} a request, {:.0}% of them lingered (--commit-linger-us)",
            (s1 - s0) as f64 / many as f64,
            100.0 * (l1 - l0) as f64 / (s1 - s0).max(1) as f64
        ),
        _ => "store syncs at 64 clients: not counted by this server".to_string(),
    };
    // The same server, spoken to in A2A v0.3 (translated at its edge).
    let o1 = runtime.block_on(load_as(&url, 1, one, limit, "o1", Speaks::V03));
    let before = cpu_time(server.child.id());
    let o64 = runtime.block_on(load_as(&url, 64, many, limit, "o64", Speaks::V03));
    let v03_cpu = per_request(before, cpu_time(server.child.id()), &o64);
    drop(server);
    let v03_line = format!(
        "ctxlog-server spoken to in A2A v0.3: 1 client {o1}, 64 clients {o64}\n\
         v0.3 / v1.0 on the same server: throughput 1 client {:.2}x, 64 clients {:.2}x; \
         CPU per request at 64 clients {}",
        o1.rps / c1.rps,
        o64.rps / c64.rps,
        match (v03_cpu, server_cpu) {
            (Some(v03), Some(v1)) => format!("{:.2}x", v03.as_secs_f64() / v1.as_secs_f64()),
            _ => "(not measured)".into(),
        }
    );
    table.push(("ctxlog-server (durable, group commit)".into(), c1, c64));
    table.push(("floor (same HTTP stack, canned task)".into(), fl1, fl64));

    match python() {
        Some(py) => {
            for (kind, name) in [
                ("memory", "a2a-sdk, InMemoryTaskStore"),
                ("sqlite", "a2a-sdk, DatabaseTaskStore on SQLite"),
            ] {
                let db = tmp.path().join(format!("{kind}.db"));
                let server = a2a_sdk_server(&py, kind, &db);
                let url = server.url.clone();
                runtime.block_on(ready(&url));
                let c1 = runtime.block_on(load(&url, 1, one / 4, limit, "p1"));
                let c64 = runtime.block_on(load(&url, 64, many / 4, limit, "p64"));
                drop(server);
                table.push((name.into(), c1, c64));
            }
        }
        None => println!(
            "(no a2a-sdk venv: run .ci/run once, or set CTXLOG_BENCH_PYTHON; only ctxlog measured)"
        ),
    }
    println!("\n{:<40} {:<62} 64 clients", "", "1 client");
    for (name, a, b) in &table {
        println!("{name:<40} {a}   {b}");
        for (clients, run) in [("1 client", a), ("64 clients", b)] {
            let figure = |what: &str| format!("{name} / {clients} / {what}");
            figures::record("a2a_load", &figure("throughput"), run.rps, "req/s", quick);
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            figures::record("a2a_load", &figure("p50"), ms(run.p50), "ms", quick);
            figures::record("a2a_load", &figure("p99"), ms(run.p99), "ms", quick);
        }
    }
    println!("\n{v03_line}");
    println!("{sync_line}");
    let row = |n: usize| table.get(n).map(|(_, a, b)| (a, b));
    if let (Some((l1, l64)), Some((s1, s64))) = (row(0), row(1)) {
        println!(
            "\nserver / library throughput: 1 client {:.2}x, 64 clients {:.2}x (aim: >= 0.4 at 64)",
            s1.rps / l1.rps,
            s64.rps / l64.rps
        );
        if let (Some(lib), Some(server)) = (lib_cpu, server_cpu) {
            println!(
                "CPU per request at 64 clients: library {:.1} us, server process {:.1} us ({:.1}x; the load client runs on the same CPUs, outside both)",
                lib.as_secs_f64() * 1e6,
                server.as_secs_f64() * 1e6,
                server.as_secs_f64() / lib.as_secs_f64()
            );
        }
        if let Some((fl1, fl64)) = row(2) {
            println!(
                "server / floor throughput:   1 client {:.2}x, 64 clients {:.2}x",
                s1.rps / fl1.rps,
                s64.rps / fl64.rps
            );
        }
        if let (Some(floor), Some(server)) = (floor_cpu, server_cpu) {
            println!(
                "CPU per request at 64 clients: floor {:.1} us, server process {:.1} us ({:.1}x the floor; aim: <= 3)",
                floor.as_secs_f64() * 1e6,
                server.as_secs_f64() * 1e6,
                server.as_secs_f64() / floor.as_secs_f64()
            );
        }
        if let (Some((m1, m64)), Some((_, q64))) = (row(3), row(4)) {
            println!(
                "64 clients, ctxlog / a2a-sdk InMemory throughput: {:.1}x (aim: >= 10)",
                s64.rps / m64.rps
            );
            println!(
                "64 clients, ctxlog / a2a-sdk SQLite throughput:   {:.1}x (aim: >= 40)",
                s64.rps / q64.rps
            );
            println!(
                "64 clients, ctxlog p99 / a2a-sdk InMemory p99:    {:.3} (aim: <= 0.1)",
                s64.p99.as_secs_f64() / m64.p99.as_secs_f64()
            );
            println!(
                "1 client,  ctxlog p50 / a2a-sdk InMemory p50:    {:.3} (aim: <= 0.2)",
                s1.p50.as_secs_f64() / m1.p50.as_secs_f64()
            );
        }
    }
}
