//! A full disk: a write that fails answers at once with the error, never a
//! stale success; `/healthz` says the store cannot write, and recovers by
//! itself once it can (the server reopens its store); the turn the failure
//! cut is failed, and nothing acknowledged is lost.
//!
//! What broke: a write refused by the store its failure poisoned answered
//! 503 STORE_UNAVAILABLE, naming no cause, where the disk was full (507
//! STORAGE_FULL): the poison now carries what the failed write met.
//! Before: a blocking send whose turn could not write its end waited
//! for the whole request timeout (300 s by default), then answered 200 with
//! TASK_STATE_SUBMITTED although the turn had failed; `/healthz` stayed 503
//! until a restart, even after space was freed.

use crate::common;

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ctxlog::fs::{Fault, FaultPlan, FaultyFs, FileOp, OsFs};
use ctxlog::{Durability, Options, Store};
use serde_json::json;

use common::{health, probe, reason, user, Client, Gated, GatedAgent, TestServer};

/// A disk that is full while `full` is set: every write, new file and
/// whole-file replace fails with `StorageFull`; reads, syncs and cuts work.
#[derive(Default)]
struct Disk {
    full: AtomicBool,
}

impl FaultPlan for Disk {
    fn before(&self, op: FileOp, _path: &Path) -> Fault {
        let writes = matches!(op, FileOp::Write | FileOp::Create | FileOp::Replace);
        if writes && self.full.load(Ordering::SeqCst) {
            // Part of the bytes reach the file first, as on a real disk.
            Fault::Short(5, io::ErrorKind::StorageFull.into())
        } else {
            Fault::Pass
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_answers_at_once_and_the_server_recovers_when_space_is_freed() {
    let disk = Arc::new(Disk::default());
    let dir = tempfile::tempdir().unwrap();
    let options = Options::default()
        .durability(Durability::GroupCommit)
        .fs(Arc::new(FaultyFs::new(Arc::new(OsFs), disk.clone())));
    let store = Store::open(dir.path(), options).unwrap();
    let gated = Gated::new(0);
    let server = TestServer::start_on(dir, store, Arc::new(GatedAgent(gated.clone())), |c| {
        c.request_timeout = Duration::from_secs(600)
    })
    .await;
    let c = Client::new(&server.url, None);

    // Acknowledged before the disk fills.
    gated.open();
    let (_, kept) = c
        .rpc("SendMessage", json!({ "message": user("m0", "kept") }))
        .await;
    assert_eq!(
        kept["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );

    // A turn is running (WORKING stored) when the disk fills; its end
    // cannot be written.
    let waiting = {
        let c = c.clone();
        tokio::spawn(async move {
            c.rpc("SendMessage", json!({ "message": user("m1", "cut") }))
                .await
        })
    };
    let (_, working) = c
        .rest("GET", "/tasks?status=TASK_STATE_WORKING", None)
        .await;
    let mut listed = working;
    let deadline = Instant::now() + Duration::from_secs(10);
    while listed["totalSize"] != 1 {
        assert!(Instant::now() < deadline, "the turn never became WORKING");
        listed = c
            .rest("GET", "/tasks?status=TASK_STATE_WORKING", None)
            .await
            .1;
    }
    let cut_task = listed["tasks"][0]["id"].as_str().unwrap().to_string();
    disk.full.store(true, Ordering::SeqCst);
    let started = Instant::now();
    gated.open();
    let (status, answer) = waiting.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    // The answer names the cause, whether the write met the full disk or
    // the store it poisoned.
    assert_eq!(reason(&answer), "STORAGE_FULL", "{answer}");
    // Its message was stored before the disk filled: the answer says so,
    // and names the task (a refused write's says nothing was stored).
    let text = answer["error"]["message"].as_str().unwrap();
    assert!(
        text.contains("received and stored") && text.contains(&cut_task),
        "{text}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "answered at once"
    );

    // While the disk is full, a send is refused at once, never a success.
    for i in 0..3 {
        let body = json!({ "message": user(&format!("f{i}"), "full") });
        let (status, refused) = c.rest("POST", "/message:send", Some(body)).await;
        assert_eq!(status, 507, "{refused}");
        assert_eq!(reason(&refused), "STORAGE_FULL", "{refused}");
    }

    // Space is freed: the server takes writes again by itself.
    disk.full.store(false, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = health(&server.url).await;
        if status == 200 {
            assert_eq!(body["store"], "writable");
            break;
        }
        assert_eq!(body["status"], "unavailable");
        // The probes meanwhile: alive, and ready or not with no detail.
        assert_eq!(probe(&server.url, "/livez").await.0, 200);
        let (ready, said) = probe(&server.url, "/readyz").await;
        let word = if ready == 200 { "ready" } else { "unavailable" };
        assert_eq!(said, json!({ "status": word }), "{ready}");
        assert!(
            Instant::now() < deadline,
            "/healthz never recovered: {body}"
        );
        // A write is what tells the server the disk has room again (it
        // does not wait for its turn: the agent's gate is closed).
        let body = json!({ "message": user("probe", "probe"),
                           "configuration": { "returnImmediately": true } });
        c.rest("POST", "/message:send", Some(body)).await;
    }
    // Writable again: ready again.
    let ready = probe(&server.url, "/readyz").await;
    assert_eq!(ready, (200, json!({ "status": "ready" })));
    // Enough turns let through for every probe that got to run, and this.
    for _ in 0..100 {
        gated.open();
    }
    let (_, after) = c
        .rpc("SendMessage", json!({ "message": user("m2", "after") }))
        .await;
    assert_eq!(
        after["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{after}"
    );

    // The cut turn's task is FAILED (never left WORKING), and what was
    // acknowledged is all there.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, got) = c.rpc("GetTask", json!({ "id": cut_task })).await;
        let state = got["result"]["status"]["state"].clone();
        if state == "TASK_STATE_FAILED" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the cut turn was never resolved: {got}"
        );
        tokio::task::yield_now().await;
    }
    let id = kept["result"]["task"]["id"].as_str().unwrap();
    let (_, kept_now) = c.rpc("GetTask", json!({ "id": id })).await;
    assert_eq!(
        kept_now["result"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    server.stop().await;
}

/// A script that mounts a tmpfs of `size` at `$1`, fills `$1/ballast`
/// with 1 MiB (freed later, from the outside), and `exec`s the server at
/// `$2` on `$1/store`: in a mount namespace of its own (`unshare -m`), so
/// the mount goes with the process, whatever ends it.
const ON_TMPFS: &str = r#"mount -t tmpfs -o size=4m ctxlog-test "$1" \
    && head -c 1048576 /dev/zero > "$1/ballast" \
    && exec "$2" --listen 127.0.0.1:0 --dir "$1/store" --agent echo"#;

/// A full tmpfs: the server answers every write 507 and lives on (it died
/// of SIGBUS: a failed write on a full tmpfs can leave a range of the
/// segment unbacked, and the reopen's recovery read it through a map,
/// which a full tmpfs cannot back), then takes writes again once space is
/// freed, nothing acknowledged lost. The test mounts the tmpfs (as root,
/// in a mount namespace of the server's own); where mounting is refused
/// (no root), the engine's fault-injecting file system stands in for it
/// (`tests/it/faults.rs`, a hole a map must not read), and this says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_tmpfs_never_kills_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let mountable = std::process::Command::new("unshare")
        .args([
            "-m",
            "mount",
            "-t",
            "tmpfs",
            "-o",
            "size=1m",
            "ctxlog-probe",
        ])
        .arg(dir.path())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !mountable {
        eprintln!(
            "mounting a tmpfs is refused here (it needs root): the hole a full tmpfs leaves \
             is tested on the engine's fault-injecting file system only (tests/it/faults.rs)"
        );
        return;
    }
    let mut command = std::process::Command::new("unshare");
    command
        .args(["-m", "sh", "-c", ON_TMPFS, "sh"])
        .arg(dir.path())
        .arg(env!("CARGO_BIN_EXE_ctxlog-server"));
    let mut server = common::process::Process::spawn(command, "warn,ctxlog_server=info");
    let c = Client::new(&server.url, None);
    let text = "x".repeat(30_000);
    let send = |i: usize| {
        let c = c.clone();
        let message = user(&format!("m{i}"), &format!("{i} {text}"));
        async move {
            c.rest("POST", "/message:send", Some(json!({ "message": message })))
                .await
        }
    };

    // Fill the disk: every send is acknowledged until one meets it full.
    let mut acknowledged = Vec::new();
    let mut i = 0;
    loop {
        assert!(i < 400, "the 4 MiB disk never filled");
        let (status, body) = send(i).await;
        i += 1;
        if status != 200 {
            assert_eq!((status, reason(&body)), (507, "STORAGE_FULL".into()));
            break;
        }
        acknowledged.push(body["task"]["id"].as_str().unwrap().to_string());
    }
    // Writes on the full disk (each poisons the store, which is reopened,
    // and recovery reads what the failed write left; one may fit in what
    // a cut freed): refused or taken, never a crash.
    let mut refused = 0;
    for _ in 0..40 {
        let (status, body) = send(i).await;
        i += 1;
        assert!(
            server.child.try_wait().unwrap().is_none(),
            "the server died"
        );
        if status == 200 {
            acknowledged.push(body["task"]["id"].as_str().unwrap().to_string());
            continue;
        }
        assert_eq!((status, reason(&body)), (507, "STORAGE_FULL".into()));
        refused += 1;
    }
    assert!(
        refused >= 20,
        "the disk was not full: {refused} of 40 refused"
    );

    // Space is freed (in the server's mount namespace): it takes writes
    // again by itself.
    let freed = std::process::Command::new("nsenter")
        .args(["-t", &server.child.id().to_string(), "-m", "rm"])
        .arg(dir.path().join("ballast"))
        .status()
        .unwrap();
    assert!(freed.success(), "nsenter rm failed");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = send(i).await;
        i += 1;
        if status == 200 {
            acknowledged.push(body["task"]["id"].as_str().unwrap().to_string());
            break;
        }
        assert!([503, 507].contains(&status), "{status} {}", reason(&body));
        assert!(
            Instant::now() < deadline,
            "no write taken after space was freed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for id in &acknowledged {
        let (status, got) = c.rest("GET", &format!("/tasks/{id}"), None).await;
        assert_eq!(status, 200, "task {id}: {}", reason(&got));
        assert_eq!(got["status"]["state"], "TASK_STATE_COMPLETED", "task {id}");
    }
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "the server died"
    );
}
