//! Push delivery across a SIGKILL: events stored but not yet acknowledged
//! are delivered after the restart, in order; events acknowledged before
//! the kill are sent again at most within the documented window (the
//! acknowledgements after the last position record: at most 16 per
//! config).

use crate::common;
use crate::hook;
use common::process;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{user, Client};
use hook::{Answer, Hook};
use process::Process;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(30);
/// The most acknowledged events a crash may have delivered again, per
/// config (DESIGN.md §12, "Push notifications").
const WINDOW: usize = 16;

fn start(dir: &std::path::Path, script: &std::path::Path) -> Process {
    Process::scripted(
        dir,
        script,
        &[
            "--push",
            "--allow-private-webhooks",
            "--push-retry-ms",
            "5",
            "--push-retry-max",
            "1",
        ],
    )
}

fn script(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("script.json");
    let script = json!({ "rules": [
        { "text": "work", "steps": [
            { "status": "TASK_STATE_WORKING" },
            { "artifact": { "artifactId": "a1", "parts": [{ "text": "part 0" }] } },
            { "artifact": { "artifactId": "a1", "parts": [{ "text": "part 1" }] }, "append": true },
            { "status": "TASK_STATE_COMPLETED", "text": "done" } ] }
    ]});
    std::fs::write(&path, script.to_string()).unwrap();
    path
}

/// Sends "work" with a push config to `url`; waits for the task's end.
async fn work(c: &Client, id: &str, url: &str) -> String {
    let (_, body) = c
        .rpc(
            "SendMessage",
            json!({ "message": user(id, "work"),
                "configuration": { "taskPushNotificationConfig": { "url": url } } }),
        )
        .await;
    let task = &body["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{body}");
    task["id"].as_str().unwrap().to_string()
}

/// Waits (bounded) until no delivery is under way: each has sent
/// everything and written its position, or none is left to resume.
async fn settled(url: &str) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let (_, health) = common::health(url).await;
        if health["push"]["deliveries"] == 0 || Instant::now() > deadline {
            return health;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn seqs(hook: &Hook, path: &str) -> Vec<u64> {
    hook.accepted(path).iter().map(hook::Got::seq).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_loses_no_push_and_repeats_at_most_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let script = script(dir.path());
    let store = dir.path().join("store");
    let (hook, base) = Hook::start(Answer::Ok).await;

    let server = start(&store, &script);
    let c = Client::new(&server.url, None);
    // Task A: delivered and acknowledged before the kill.
    let a_url = format!("{base}/a");
    work(&c, "m1", &a_url).await;
    assert!(
        hook.wait_for_state("/a", "TASK_STATE_COMPLETED", WAIT)
            .await
    );
    let before = seqs(&hook, "/a");
    assert_eq!(before.len(), 4);
    // Task B: stored, never acknowledged (its receiver fails every try).
    hook.fail_first.store(usize::MAX, Ordering::SeqCst);
    let b_url = format!("{base}/b");
    work(&c, "m2", &b_url).await;
    assert!(
        hook.wait(WAIT, |got| got.iter().any(|g| g.path == "/b"))
            .await
    );
    server.kill();

    assert!(hook.accepted("/b").is_empty());
    hook.fail_first.store(0, Ordering::SeqCst);
    let server = start(&store, &script);
    assert!(
        hook.wait_for_state("/b", "TASK_STATE_COMPLETED", WAIT)
            .await,
        "{:?}",
        hook.got()
    );
    let health = settled(&server.url).await;
    assert_eq!(health["push"]["deliveries"], 0, "{health}");
    // B: everything, once, in order.
    let b = seqs(&hook, "/b");
    assert_eq!(b.len(), 4, "{b:?}");
    assert!(b.windows(2).all(|w| w[0] < w[1]), "{b:?}");
    // A: what was acknowledged comes again at most within the window, and
    // in order after its last position.
    let after = seqs(&hook, "/a");
    assert!(after.len() - before.len() <= WINDOW, "{after:?}");
    assert!(after[before.len()..].windows(2).all(|w| w[0] < w[1]));
    // Once settled, every position is durable: a kill and a restart
    // resend nothing.
    server.kill();
    let counted = hook.got().len();
    let server = start(&store, &script);
    let health = settled(&server.url).await;
    assert_eq!(health["push"]["deliveries"], 0, "{health}");
    assert_eq!(hook.got().len(), counted);
}
