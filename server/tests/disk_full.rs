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

mod common;

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ctxlog::fs::{Fault, FaultPlan, FaultyFs, FileOp, OsFs};
use ctxlog::{Durability, Options, Store};
use serde_json::json;

use common::{health, reason, user, Client, Gated, GatedAgent, TestServer};

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
