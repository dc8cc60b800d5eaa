//! Replication under the crash it exists for (DESIGN.md §13, docs/
//! replication.md "The loss window"): a writer under concurrent load,
//! SIGKILLed at random moments and restarted on its directory each time,
//! in both modes. After each kill the replica is restored into a fresh
//! directory (the machine lost) and must hold every write acknowledged
//! before the loss window (every one, synchronously); after each restart
//! the writer acknowledges again at once and replicates; at the end every
//! restore point ever published checks out against its objects
//! (`replicate::check_points`), and a sample of them restores whole.
//!
//! The short form runs in `.ci/run` (on a directory here; on moto's S3
//! with `--ignored`); `CTXLOG_KILLS=200` makes the long run whose figures
//! docs/replication.md records.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::process::{self, Process};
use common::user;
use ctxlog::{Options, Replicate, Store};
use serde_json::{json, Value};

/// The replication interval of the harness's writer.
const INTERVAL: Duration = Duration::from_millis(200);
/// What an asynchronous writer may lose at a kill: the interval and one
/// round (the round that was under way), a round taken as up to a second
/// on a loaded machine against moto (the defect this guards against lost
/// writes 10-23 s old).
const ASYNC_WINDOW: Duration = Duration::from_millis(INTERVAL.as_millis() as u64 * 2 + 1000);
/// Concurrent clients.
const CLIENTS: usize = 4;

fn kills() -> usize {
    std::env::var("CTXLOG_KILLS")
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(20)
}

fn start(dir: &Path, url: &str, sync: bool) -> Process {
    let interval = INTERVAL.as_millis().to_string();
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "--dir".as_ref(),
        dir.as_os_str(),
        "--replicate-to".as_ref(),
        url.as_ref(),
        "--replicate-interval-ms".as_ref(),
        interval.as_ref(),
    ];
    if sync {
        args.push("--replicate-sync".as_ref());
    }
    Process::ctxlog_server(env!("CARGO_BIN_EXE_ctxlog-server"), &args, "info")
}

/// A draw in `0..n` from the clock (no seed to keep: each run differs, and
/// a failure prints what it found).
fn below(n: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::UNIX_EPOCH.elapsed().unwrap().as_nanos());
    h.finish() % n
}

/// One acknowledged send: its task, and when the answer came.
struct Acked {
    message: String,
    task: String,
    at: Instant,
}

/// The task a SendMessage of `message` was answered with (`None`: an
/// error, or no answer).
async fn send(http: &reqwest::Client, url: &str, message: &str) -> Result<String, Value> {
    let params = json!({ "message": user(message, &format!("text of {message}")) });
    let answer = process::try_rpc(http, url, "SendMessage", params)
        .await
        .unwrap_or(Value::Null);
    match answer["result"]["task"]["id"].as_str() {
        Some(task) => Ok(task.to_string()),
        None => Err(answer),
    }
}

/// Sends until the server stops answering (it was killed): each answer
/// with a task is recorded, and `first` told of it.
async fn load(
    url: String,
    tag: String,
    acked: Arc<Mutex<Vec<Acked>>>,
    first: Arc<tokio::sync::Notify>,
) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    for i in 0..100_000 {
        let message = format!("{tag}-{i}");
        match send(&http, &url, &message).await {
            Ok(task) => {
                acked.lock().unwrap().push(Acked {
                    message,
                    task,
                    at: Instant::now(),
                });
                first.notify_one();
            }
            Err(Value::Null) => return,
            Err(answer) => eprintln!("{message}: {answer}"),
        }
    }
}

/// Sends one message until it is acknowledged (bounded): how long that
/// took.
async fn first_ack(url: &str, message: &str) -> Duration {
    let http = reqwest::Client::new();
    let began = Instant::now();
    for _ in 0..200 {
        let answer = match send(&http, url, message).await {
            Ok(_) => return began.elapsed(),
            Err(answer) => answer,
        };
        assert!(
            began.elapsed() < Duration::from_secs(20),
            "the restarted writer acknowledged nothing in 20 s: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the restarted writer acknowledged nothing in 200 tries");
}

/// Restores the replica's newest point (or the one at `at`) into a fresh
/// directory under `scratch`, and gives the store opened on it.
async fn restored(url: &str, scratch: &Path, at: Option<u64>) -> (Store, PathBuf) {
    let dir = scratch.join(format!("restored-{}", below(u64::MAX)));
    let (url, into) = (url.to_string(), dir.clone());
    let store = tokio::task::spawn_blocking(move || {
        ctxlog::replicate::restore(&Replicate::to(&url), &into, at)
            .unwrap_or_else(|e| panic!("restore (point at {at:?}): {e}"));
        Store::open_read_only(&into, Options::default()).unwrap()
    })
    .await
    .unwrap();
    (store, dir)
}

/// What a run found, for the figures.
#[derive(Default, Debug)]
struct Figures {
    kills: usize,
    acked: usize,
    /// Acknowledged writes missing from the restore after their kill.
    lost: usize,
    /// The oldest of them, at its kill.
    oldest_lost: Duration,
    /// The slowest first acknowledgement after a restart.
    slowest_restart: Duration,
    points: usize,
}

async fn kill_and_restore(url: &str, sync: bool) -> Figures {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let mut figures = Figures::default();
    for kill in 0..kills() {
        let server = start(&dir, url, sync);
        let restart = first_ack(&server.url, &format!("k{kill}-first")).await;
        figures.slowest_restart = figures.slowest_restart.max(restart);
        let acked = Arc::new(Mutex::new(Vec::new()));
        let first = Arc::new(tokio::sync::Notify::new());
        let clients: Vec<_> = (0..CLIENTS)
            .map(|c| {
                let tag = format!("k{kill}-c{c}");
                tokio::spawn(load(server.url.clone(), tag, acked.clone(), first.clone()))
            })
            .collect();
        // Once the load is answered, at a random moment of it: not a
        // synchronisation, the fault.
        let answered = tokio::time::timeout(Duration::from_secs(20), first.notified()).await;
        assert!(
            answered.is_ok(),
            "kill {kill}: the load got no answer in 20 s"
        );
        tokio::time::sleep(Duration::from_millis(below(450))).await;
        let killed_at = Instant::now();
        let log = server.log();
        server.kill();
        for c in clients {
            c.await.unwrap();
        }
        let acked = std::mem::take(&mut *acked.lock().unwrap());
        assert!(
            !acked.is_empty(),
            "kill {kill}: no write was acknowledged (the first after the restart in {} ms); \
             the server's log: {log:#?}",
            restart.as_millis()
        );
        figures.acked += acked.len();
        let (store, restored_dir) = restored(url, tmp.path(), None).await;
        let mut missing = Vec::new();
        for a in &acked {
            if store.get_task("default", &a.task, Some(0), false).is_err() {
                let age = killed_at.saturating_duration_since(a.at);
                figures.lost += 1;
                figures.oldest_lost = figures.oldest_lost.max(age);
                if sync || age > ASYNC_WINDOW {
                    missing.push(format!(
                        "{} ({} ms before the kill)",
                        a.message,
                        age.as_millis()
                    ));
                }
            }
        }
        assert!(
            missing.is_empty(),
            "kill {kill} ({}): the replica lacks acknowledged writes: {missing:?}",
            if sync { "synchronous" } else { "asynchronous" }
        );
        drop(store);
        std::fs::remove_dir_all(restored_dir).unwrap();
        figures.kills += 1;
    }
    // The last restart ships what the last kill left; then every point
    // ever published restores (each at its own time: the newest of its
    // millisecond).
    let server = start(&dir, url, sync);
    first_ack(&server.url, "last").await;
    drop(server);
    let points = {
        let url = url.to_string();
        tokio::task::spawn_blocking(move || {
            ctxlog::replicate::restore_points(&Replicate::to(&url)).unwrap()
        })
        .await
        .unwrap()
    };
    // Every point's objects match what it records (each object read
    // once); a sample of them (the first, nine between, the newest) is
    // restored whole, record by record.
    let checked = {
        let url = url.to_string();
        tokio::task::spawn_blocking(move || {
            ctxlog::replicate::check_points(&Replicate::to(&url))
                .unwrap_or_else(|e| panic!("a published point cannot be restored: {e}"))
        })
        .await
        .unwrap()
    };
    assert_eq!(checked, points.len());
    assert!(points.len() > kills(), "{} points", points.len());
    let step = (points.len() / 10).max(1);
    let sample = points
        .iter()
        .step_by(step)
        .chain(points.last())
        .map(|p| p.time_ms);
    for t in sample {
        let (store, restored_dir) = restored(url, tmp.path(), Some(t)).await;
        drop(store);
        std::fs::remove_dir_all(restored_dir).unwrap();
    }
    figures.points = points.len();
    eprintln!(
        "{} mode, {kills} kills: {figures:?}",
        if sync { "synchronous" } else { "asynchronous" },
        kills = kills()
    );
    figures
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_asynchronous_writer_killed_and_restarted_loses_only_its_window() {
    let bucket = tempfile::tempdir().unwrap();
    kill_and_restore(bucket.path().to_str().unwrap(), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synchronous_writer_killed_and_restarted_loses_nothing_acknowledged() {
    let bucket = tempfile::tempdir().unwrap();
    let figures = kill_and_restore(bucket.path().to_str().unwrap(), true).await;
    assert_eq!(figures.lost, 0, "{figures:?}");
}

/// A fresh prefix of the bucket `CTXLOG_TEST_S3` names (`.ci/run` starts
/// moto's server and sets it with the `AWS_*` variables).
fn s3() -> String {
    let bucket = std::env::var("CTXLOG_TEST_S3")
        .expect("CTXLOG_TEST_S3 names the bucket of an S3 endpoint; .ci/run starts one");
    format!(
        "s3://{bucket}/kills-{}-{:x}",
        std::process::id(),
        below(u64::MAX)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs an S3 endpoint: .ci/run starts moto's server and runs these"]
async fn an_asynchronous_writer_on_s3_killed_and_restarted_loses_only_its_window() {
    kill_and_restore(&s3(), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs an S3 endpoint: .ci/run starts moto's server and runs these"]
async fn a_synchronous_writer_on_s3_killed_and_restarted_loses_nothing_acknowledged() {
    let figures = kill_and_restore(&s3(), true).await;
    assert_eq!(figures.lost, 0, "{figures:?}");
}

/// A TCP forwarder on 127.0.0.1 to `to` that a test can cut: from then
/// on it drops every connection, open or new (a network cut), until it is
/// mended.
struct Forwarder {
    url: String,
    cut: tokio::sync::watch::Sender<bool>,
}

impl Forwarder {
    async fn start(to: String) -> Forwarder {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (cut, watch) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let (mut watch, to) = (watch.clone(), to.clone());
                tokio::spawn(async move {
                    if *watch.borrow() {
                        return;
                    }
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(&to).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = watch.wait_for(|cut| *cut) => {}
                    }
                });
            }
        });
        Forwarder { url, cut }
    }

    fn set_cut(&self, cut: bool) {
        self.cut.send_replace(cut);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs an S3 endpoint: .ci/run starts moto's server and runs these"]
async fn a_writer_cut_off_from_s3_stops_acknowledging_within_its_lease() {
    // The writer reaches S3 through a forwarder that the test cuts; its
    // standby reaches S3 directly and takes over once the writer's
    // heartbeat is 3 s old. With a 1 s lease the writer acknowledges
    // nothing from about a second after the cut on, so nothing once the
    // standby writes; without a lease it would go on for the whole cut.
    let url = s3();
    let endpoint = std::env::var("AWS_ENDPOINT_URL").unwrap();
    let forwarder = Forwarder::start(endpoint.trim_start_matches("http://").to_string()).await;
    let tmp = tempfile::tempdir().unwrap();
    let (writer_dir, standby_dir) = (tmp.path().join("writer"), tmp.path().join("standby"));
    let lease = [
        "--replicate-interval-ms",
        "50",
        "--replicate-lease-ms",
        "1000",
    ];
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "--dir".as_ref(),
        writer_dir.as_os_str(),
        "--replicate-to".as_ref(),
        url.as_ref(),
    ];
    args.extend(lease.iter().map(std::ffi::OsStr::new));
    let writer = Process::with_env(
        env!("CARGO_BIN_EXE_ctxlog-server"),
        &args,
        "info",
        &[("AWS_ENDPOINT_URL", &forwarder.url)],
    );
    first_ack(&writer.url, "before").await;
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "--dir".as_ref(),
        standby_dir.as_os_str(),
        "--follow".as_ref(),
        url.as_ref(),
        "--takeover-after".as_ref(),
        "3".as_ref(),
    ];
    args.extend(lease.iter().map(std::ffi::OsStr::new));
    let standby = Process::ctxlog_server(env!("CARGO_BIN_EXE_ctxlog-server"), &args, "info");

    forwarder.set_cut(true);
    let cut_at = Instant::now();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let mut acked_after = Vec::new();
    let mut promoted_after = None;
    for i in 0..100_000 {
        if send(&http, &writer.url, &format!("cut-{i}")).await.is_ok() {
            acked_after.push(cut_at.elapsed());
        }
        let (_, health) = process::health(&standby.url).await;
        if health["standby"]["promoted"] == true {
            promoted_after = Some(cut_at.elapsed());
            break;
        }
        assert!(cut_at.elapsed() < Duration::from_secs(60), "no takeover");
    }
    let promoted_after = promoted_after.unwrap();
    let last = acked_after.last().copied().unwrap_or_default();
    eprintln!(
        "cut off: {} writes acknowledged after the cut, the last {} ms after it; the standby \
         took over {} ms after it",
        acked_after.len(),
        last.as_millis(),
        promoted_after.as_millis()
    );
    assert!(last < promoted_after, "acknowledged beside the new writer");
    assert!(
        last < Duration::from_millis(2000),
        "acknowledged {} ms after the cut (lease 1 s)",
        last.as_millis()
    );
    // Mended, the old writer learns it was fenced.
    forwarder.set_cut(false);
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (_, health) = process::health(&writer.url).await;
        if health["replication"]["stopped"] == true {
            let why = health["replication"]["lastError"].as_str().unwrap();
            assert!(why.contains("claimed the replica"), "{health}");
            break;
        }
        assert!(Instant::now() < deadline, "never fenced: {health}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
