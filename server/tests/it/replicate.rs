//! The server replicating its store (`--replicate-to`): killed (SIGKILL)
//! under load, its replica restores to a store that verifies clean, holds
//! every message acknowledged before a replication round that began after
//! it, and serves them from a new server.

use crate::common;

use std::time::{Duration, Instant};

use common::{health, probe, user, Client};
use serde_json::{json, Value};

use common::process;

use process::Process;

fn start(dir: &std::path::Path, bucket: &std::path::Path) -> Process {
    let args = [
        "--dir".as_ref(),
        dir.as_os_str(),
        "--replicate-to".as_ref(),
        bucket.as_os_str(),
        "--replicate-interval-ms".as_ref(),
        "20".as_ref(),
    ];
    Process::ctxlog_server(env!("CARGO_BIN_EXE_ctxlog-server"), &args, "info")
}

/// The replication part of `/healthz`.
async fn replication(url: &str) -> Value {
    let (status, body) = health(url).await;
    assert_eq!(status, 200, "{body}");
    body["replication"].clone()
}

/// Waits (bounded) until a replication round that began after this call
/// has ended: its restore point covers everything acknowledged before.
async fn caught_up(url: &str) -> Value {
    let start = replication(url).await["rounds"].as_u64().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = replication(url).await;
        if now["rounds"].as_u64().unwrap() >= start + 2 {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "no replication round ended: {now}"
        );
        tokio::task::yield_now().await;
    }
}

async fn send(c: &Client, id: &str) -> String {
    let (status, body) = c
        .rpc(
            "SendMessage",
            json!({ "message": user(id, &format!("text of {id}")) }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body["result"]["task"]["id"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_servers_replica_restores_everything_a_round_covered() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, bucket) = (tmp.path().join("store"), tmp.path().join("bucket"));
    let server = start(&dir, &bucket);
    let c = Client::new(&server.url, None);
    let mut covered = Vec::new();
    for i in 0..40 {
        covered.push((format!("m{i}"), send(&c, &format!("m{i}")).await));
    }
    let status = caught_up(&server.url).await;
    assert_eq!(status["lagBytes"], 0, "{status}");
    assert!(status["restorePoint"].as_u64().unwrap() >= 1, "{status}");
    assert!(status["lastError"].is_null(), "{status}");
    assert_eq!(status["target"], bucket.to_str().unwrap());

    // More writes, in flight while the server is killed.
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let c = Client::new(&server.url, None);
            tokio::spawn(async move {
                for i in 0..1000 {
                    let body = json!({ "message": user(&format!("w{w}-{i}"), "more") });
                    if c.rpc("SendMessage", body).await.0 != 200 {
                        return;
                    }
                }
            })
        })
        .collect();
    // Until a few more rounds ended under load.
    caught_up(&server.url).await;
    server.kill();
    for w in writers {
        let _ = w.await;
    }

    let restored = tmp.path().join("restored");
    let report = {
        let (bucket, restored) = (bucket.clone(), restored.clone());
        tokio::task::spawn_blocking(move || {
            ctxlog::replicate::restore(
                &ctxlog::Replicate::to(bucket.to_str().unwrap()),
                &restored,
                None,
            )
        })
        .await
        .unwrap()
        .unwrap()
    };
    assert!(report.records > 80, "{report:?}");
    let server = start(&restored, &tmp.path().join("bucket2"));
    let c = Client::new(&server.url, None);
    for (message, task) in &covered {
        let (_, got) = c.rpc("GetTask", json!({ "id": task })).await;
        assert_eq!(
            got["result"]["history"][0]["parts"][0]["text"],
            format!("text of {message}"),
            "{got}"
        );
    }
}

/// A standby of `bucket` in `dir`.
fn standby(dir: &std::path::Path, bucket: &std::path::Path) -> Process {
    let args = [
        "--dir".as_ref(),
        dir.as_os_str(),
        "--follow".as_ref(),
        bucket.as_os_str(),
        "--replicate-interval-ms".as_ref(),
        "20".as_ref(),
    ];
    Process::ctxlog_server(env!("CARGO_BIN_EXE_ctxlog-server"), &args, "info")
}

/// Polls `/healthz` (bounded) until `done` holds of its body.
async fn until(url: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, body) = health(url).await;
        if done(&body) {
            return body;
        }
        assert!(Instant::now() < deadline, "never {what}: {body}");
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_serves_reads_and_takes_over_with_every_acknowledged_message() {
    let tmp = tempfile::tempdir().unwrap();
    let bucket = tmp.path().join("bucket");
    let writer_dir = tmp.path().join("writer");
    let args = [
        "--dir".as_ref(),
        writer_dir.as_os_str(),
        "--replicate-to".as_ref(),
        bucket.as_os_str(),
        "--replicate-interval-ms".as_ref(),
        "20".as_ref(),
        "--replicate-sync".as_ref(),
    ];
    let writer = Process::ctxlog_server(env!("CARGO_BIN_EXE_ctxlog-server"), &args, "info");
    let w = Client::new(&writer.url, None);
    let first = send(&w, "first").await;
    let standby = standby(&tmp.path().join("standby"), &bucket);
    let s = Client::new(&standby.url, None);

    // Reads: what the writer acknowledged, once a catch-up brings it.
    let (_, got) = s.rpc("GetTask", json!({ "id": first })).await;
    assert_eq!(
        got["result"]["history"][0]["parts"][0]["text"], "text of first",
        "{got}"
    );
    let second = send(&w, "second").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, got) = s.rpc("GetTask", json!({ "id": second })).await;
        if got["result"]["id"] == json!(second) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the standby never caught up: {got}"
        );
        tokio::task::yield_now().await;
    }
    let (_, body) = health(&standby.url).await;
    assert_eq!(body["standby"]["promoted"], false, "{body}");
    assert!(
        body["standby"]["restorePoint"].as_u64().unwrap() >= 1,
        "{body}"
    );
    // Writes: refused, saying why.
    let (_, refused) = s
        .rpc(
            "SendMessage",
            json!({ "message": user("on-standby", "no") }),
        )
        .await;
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("standby"),
        "{refused}"
    );

    // Writers under load; the writer is killed mid-way.
    let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let writers: Vec<_> = (0..4)
        .map(|n| {
            let (c, acked) = (Client::new(&writer.url, None), acked.clone());
            tokio::spawn(async move {
                for i in 0..500 {
                    let id = format!("w{n}-{i}");
                    let body = json!({ "message": user(&id, &format!("text of {id}")) });
                    let (status, got) = c.rpc("SendMessage", body).await;
                    match got["result"]["task"]["id"].as_str() {
                        Some(task) if status == 200 => {
                            acked.lock().unwrap().push((id, task.to_string()))
                        }
                        _ => return,
                    }
                }
            })
        })
        .collect();
    // Killed once 100 writes were acknowledged, with more in flight.
    let deadline = Instant::now() + Duration::from_secs(60);
    while acked.lock().unwrap().len() < 100 {
        assert!(Instant::now() < deadline, "the writes stalled");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    writer.kill();
    for w in writers {
        let _ = w.await;
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 100, "{} acknowledged", acked.len());

    // Promoted by SIGUSR1: it claims the replica and writes.
    standby.signal("USR1");
    until(&standby.url, "promoted", |b| {
        b["standby"]["promoted"] == true
    })
    .await;
    // Every message the writer acknowledged (synchronous replication) is
    // on the new writer.
    for (message, task) in &acked {
        let (_, got) = s.rpc("GetTask", json!({ "id": task })).await;
        assert_eq!(
            got["result"]["history"][0]["parts"][0]["text"],
            format!("text of {message}"),
            "{got}"
        );
    }
    let after = send(&s, "after the takeover").await;
    let (_, got) = s.rpc("GetTask", json!({ "id": after })).await;
    assert_eq!(
        got["result"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{got}"
    );

    // The old writer, started again, is fenced: it writes nothing more.
    let writer = Process::ctxlog_server(env!("CARGO_BIN_EXE_ctxlog-server"), &args, "info");
    let w = Client::new(&writer.url, None);
    let (_, refused) = w
        .rpc(
            "SendMessage",
            json!({ "message": user("old-writer", "late") }),
        )
        .await;
    assert!(refused["error"].is_object(), "{refused}");
    let body = until(&writer.url, "fenced", |b| {
        !b["replication"]["lastError"].is_null()
    })
    .await;
    assert!(
        body["replication"]["lastError"]
            .as_str()
            .unwrap()
            .contains("another writer"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_by_itself_once_the_writers_heartbeat_stops() {
    let tmp = tempfile::tempdir().unwrap();
    let bucket = tmp.path().join("bucket");
    let writer = start(&tmp.path().join("writer"), &bucket);
    let w = Client::new(&writer.url, None);
    let task = send(&w, "before").await;
    caught_up(&writer.url).await;
    let standby_dir = tmp.path().join("standby");
    let args = [
        "--dir".as_ref(),
        standby_dir.as_os_str(),
        "--follow".as_ref(),
        bucket.as_os_str(),
        "--replicate-interval-ms".as_ref(),
        "20".as_ref(),
        "--takeover-after".as_ref(),
        "3".as_ref(),
    ];
    let standby = Process::ctxlog_server(env!("CARGO_BIN_EXE_ctxlog-server"), &args, "info");
    // While the writer beats (once a second), the standby stays one: for
    // as long as the lease, and a second more.
    let (_, first) = health(&standby.url).await;
    let looked = first["standby"]["checkedAt"].clone();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(4) {
        let (_, body) = health(&standby.url).await;
        assert_eq!(body["standby"]["promoted"], false, "{body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, body) = health(&standby.url).await;
    assert_ne!(
        body["standby"]["checkedAt"], looked,
        "it kept looking: {body}"
    );
    writer.kill();
    until(&standby.url, "promoted by itself", |b| {
        b["standby"]["promoted"] == true
    })
    .await;
    let s = Client::new(&standby.url, None);
    let (_, got) = s.rpc("GetTask", json!({ "id": task })).await;
    assert_eq!(
        got["result"]["history"][0]["parts"][0]["text"], "text of before",
        "{got}"
    );
    send(&s, "after").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_asynchronous_takeover_loses_only_what_the_lag_had_not_shipped() {
    let tmp = tempfile::tempdir().unwrap();
    let bucket = tmp.path().join("bucket");
    let writer = start(&tmp.path().join("writer"), &bucket);
    // A standby starts from a restore point: once the writer published one.
    send(&Client::new(&writer.url, None), "first").await;
    caught_up(&writer.url).await;
    let standby = standby(&tmp.path().join("standby"), &bucket);
    let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let writers: Vec<_> = (0..4)
        .map(|n| {
            let (c, acked) = (Client::new(&writer.url, None), acked.clone());
            tokio::spawn(async move {
                for i in 0..2000 {
                    let id = format!("a{n}-{i}");
                    let body = json!({ "message": user(&id, &format!("text of {id}")) });
                    let (status, got) = c.rpc("SendMessage", body).await;
                    match got["result"]["task"]["id"].as_str() {
                        Some(task) if status == 200 => {
                            acked.lock().unwrap().push((id, task.to_string()))
                        }
                        _ => return,
                    }
                }
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while acked.lock().unwrap().len() < 100 {
        assert!(Instant::now() < deadline, "the writes stalled");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Everything acknowledged before a round that began later is shipped.
    let shipped = acked.lock().unwrap().len();
    let status = caught_up(&writer.url).await;
    writer.kill();
    for w in writers {
        let _ = w.await;
    }
    let acked = acked.lock().unwrap().clone();
    standby.signal("USR1");
    until(&standby.url, "promoted", |b| {
        b["standby"]["promoted"] == true
    })
    .await;
    let s = Client::new(&standby.url, None);
    let mut lost = Vec::new();
    for (n, (message, task)) in acked.iter().enumerate() {
        let (_, got) = s.rpc("GetTask", json!({ "id": task })).await;
        if got["result"]["history"][0]["parts"][0]["text"] != format!("text of {message}") {
            assert!(
                n >= shipped,
                "{message}, acknowledged before a later round, is lost"
            );
            lost.push(message.clone());
        }
    }
    // What was lost came after the last round seen, within the lag.
    eprintln!(
        "{} of {} acknowledged messages lost; the lag at the last look: {} bytes, {} ms",
        lost.len(),
        acked.len(),
        status["lagBytes"],
        status["lagMs"]
    );
    assert!(lost.len() <= acked.len() - shipped);
}

/// A server with `args` after `--dir DIR`.
fn server_on(dir: &std::path::Path, args: &[&str]) -> Process {
    let mut all: Vec<&std::ffi::OsStr> = vec!["--dir".as_ref(), dir.as_os_str()];
    all.extend(args.iter().map(|a| std::ffi::OsStr::new(*a)));
    Process::ctxlog_server(env!("CARGO_BIN_EXE_ctxlog-server"), &all, "info")
}

/// A SendMessage: whether it was acknowledged (a task came back) and the
/// answer, or `None` if the server did not answer.
async fn try_send(http: &reqwest::Client, url: &str, id: &str) -> Option<(bool, Value)> {
    let params = json!({ "message": user(id, &format!("text of {id}")) });
    let answer = process::try_rpc(http, url, "SendMessage", params).await?;
    Some((answer["result"]["task"].is_object(), answer))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_writer_stops_acknowledging_before_its_standby_takes_over() {
    // Asynchronous replication with a 1 s lease: the writer is paused
    // (SIGSTOP) under load, its standby takes over by the heartbeat, and
    // the writer is resumed. New writes to it are refused; of those in
    // flight when it was paused, at most one per client (each past its
    // lease check already) is answered.
    let tmp = tempfile::tempdir().unwrap();
    let bucket = tmp.path().join("bucket");
    let url = bucket.to_str().unwrap();
    let lease = [
        "--replicate-interval-ms",
        "50",
        "--replicate-lease-ms",
        "1000",
    ];
    let mut args = vec!["--replicate-to", url];
    args.extend(lease);
    let writer = server_on(&tmp.path().join("writer"), &args);
    let w = Client::new(&writer.url, None);
    send(&w, "before").await;
    let mut args = vec!["--follow", url, "--takeover-after", "3"];
    args.extend(lease);
    let standby = server_on(&tmp.path().join("standby"), &args);
    until(&standby.url, "caught up", |b| {
        b["standby"]["restorePoint"].as_u64() >= Some(1)
    })
    .await;

    let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let first = std::sync::Arc::new(tokio::sync::Notify::new());
    let clients: Vec<_> = (0..2)
        .map(|n| {
            let (url, acked, first) = (writer.url.clone(), acked.clone(), first.clone());
            tokio::spawn(async move {
                let http = reqwest::Client::new();
                for i in 0..100_000 {
                    match try_send(&http, &url, &format!("c{n}-{i}")).await {
                        Some((true, _)) => {
                            acked.lock().unwrap().push(Instant::now());
                            first.notify_one();
                        }
                        _ => return,
                    }
                }
            })
        })
        .collect();
    tokio::time::timeout(Duration::from_secs(20), first.notified())
        .await
        .expect("the load was answered");
    writer.signal("STOP");
    let body = until(&standby.url, "promoted", |b| {
        b["standby"]["promoted"] == true
    })
    .await;
    assert!(body["standby"]["promotionError"].is_null(), "{body}");
    writer.signal("CONT");
    let resumed = Instant::now();
    let http = reqwest::Client::new();
    for i in 0..5 {
        let (acked, body) = try_send(&http, &writer.url, &format!("after-{i}"))
            .await
            .expect("the old writer answers");
        assert!(!acked, "the old writer acknowledged a new write: {body}");
    }
    for c in clients {
        c.await.unwrap();
    }
    let late = acked
        .lock()
        .unwrap()
        .iter()
        .filter(|&&at| at >= resumed)
        .count();
    assert!(late <= 2, "{late} writes acknowledged after the takeover");
    let (_, body) = health(&writer.url).await;
    assert!(
        body["replication"]["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("claimed the replica")),
        "{body}"
    );
    // The new writer writes.
    send(&Client::new(&standby.url, None), "on the new writer").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_bucket_stops_replication_and_the_writer_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let bucket = tmp.path().join("bucket");
    let args = [
        "--replicate-to",
        bucket.to_str().unwrap(),
        "--replicate-interval-ms",
        "20",
        "--replicate-lease-ms",
        "500",
    ];
    let writer = server_on(&tmp.path().join("writer"), &args);
    let w = Client::new(&writer.url, None);
    send(&w, "before").await;
    caught_up(&writer.url).await;
    std::fs::remove_dir_all(&bucket).unwrap();
    std::fs::create_dir_all(&bucket).unwrap();
    let body = until(&writer.url, "stopped", |b| {
        b["replication"]["stopped"] == true
    })
    .await;
    let why = body["replication"]["lastError"].as_str().unwrap();
    assert!(why.contains("is gone from"), "{body}");
    // It takes no more writes, and says so where a probe looks.
    let (status, body) = health(&writer.url).await;
    assert_eq!(
        (status, body["status"].as_str()),
        (503, Some("unavailable")),
        "{body}"
    );
    assert!(
        body["reason"].as_str().unwrap().contains("is gone from"),
        "{body}"
    );
    assert_eq!(body["replication"]["acknowledging"], false, "{body}");
    // Not ready (a proxy sends it nothing), yet alive (not restarted).
    let readyz = probe(&writer.url, "/readyz").await;
    assert_eq!(readyz, (503, json!({ "status": "unavailable" })));
    let livez = probe(&writer.url, "/livez").await;
    assert_eq!(livez, (200, json!({ "status": "ok" })));
    // Once its lease lapses, a write is refused with the reason.
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    for i in 0.. {
        let (acked, body) = try_send(&http, &writer.url, &format!("after-{i}"))
            .await
            .unwrap();
        if !acked {
            assert_eq!(
                body["error"]["data"][0]["reason"], "STORE_UNAVAILABLE",
                "{body}"
            );
            assert!(body.to_string().contains("is gone from"), "{body}");
            break;
        }
        assert!(Instant::now() < deadline, "writes never refused");
    }
    // Nothing was published into the emptied bucket.
    assert!(std::fs::read_dir(bucket.join("points")).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_whose_promotion_failed_follows_on_once_the_object_is_whole() {
    // The newest piece is damaged while the standby is paused; its
    // promotion (SIGUSR1) then fails on it. The standby serves its copy
    // again, says why in /healthz, and once the piece is whole follows on
    // and takes over at the next SIGUSR1.
    let tmp = tempfile::tempdir().unwrap();
    let bucket = tmp.path().join("bucket");
    let writer = start(&tmp.path().join("writer"), &bucket);
    let w = Client::new(&writer.url, None);
    let first = send(&w, "first").await;
    caught_up(&writer.url).await;
    let standby = standby(&tmp.path().join("standby"), &bucket);
    let s = Client::new(&standby.url, None);
    until(&standby.url, "caught up", |b| {
        b["standby"]["restorePoint"].as_u64() >= Some(1)
    })
    .await;
    standby.signal("STOP");
    let mut tasks = Vec::new();
    for i in 0..10 {
        tasks.push(send(&w, &format!("more-{i}")).await);
    }
    caught_up(&writer.url).await;
    drop(writer);
    // The newest piece, one byte flipped.
    let mut pieces: Vec<std::path::PathBuf> = Vec::new();
    for segment in std::fs::read_dir(bucket.join("pieces")).unwrap() {
        for piece in std::fs::read_dir(segment.unwrap().path()).unwrap() {
            pieces.push(piece.unwrap().path());
        }
    }
    pieces.sort_by_key(|p| p.file_name().unwrap().to_os_string());
    let newest = pieces.last().unwrap().clone();
    let good = std::fs::read(&newest).unwrap();
    let mut bad = good.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    std::fs::write(&newest, &bad).unwrap();
    standby.signal("CONT");
    standby.signal("USR1");
    let body = until(&standby.url, "the promotion failed", |b| {
        !b["standby"]["promotionError"].is_null()
    })
    .await;
    assert_eq!(body["standby"]["promoted"], false, "{body}");
    // It serves its copy again.
    let body = until(&standby.url, "serving again", |b| b["status"] == "ok").await;
    assert_eq!(body["standby"]["promoted"], false, "{body}");
    let (_, got) = s.rpc("GetTask", json!({ "id": first })).await;
    assert_eq!(got["result"]["id"], json!(first), "{got}");
    // Whole again: it follows on, and takes over.
    std::fs::write(&newest, &good).unwrap();
    let last = tasks.last().unwrap().clone();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, got) = s.rpc("GetTask", json!({ "id": last })).await;
        if got["result"]["id"] == json!(last) {
            break;
        }
        assert!(Instant::now() < deadline, "never caught up: {got}");
        tokio::task::yield_now().await;
    }
    standby.signal("USR1");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, b) = health(&standby.url).await;
        if b["standby"]["promoted"] == true {
            break;
        }
        if Instant::now() > deadline {
            panic!("never promoted: {b}\n{:#?}", standby.log());
        }
        tokio::task::yield_now().await;
    }
    for task in &tasks {
        let (_, got) = s.rpc("GetTask", json!({ "id": task })).await;
        assert_eq!(got["result"]["id"], json!(task), "{got}");
    }
}
