//! One store shared by worker threads: each takes cases of its own, and
//! their durable writes share `fdatasync`s (group commit). A watcher thread
//! follows one task with `wait_for_events`, without polling.
//!
//! ```sh
//! cargo run --release --example threads
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use ctxlog::a2a::{Message, Role, TaskState, TaskStatus};
use ctxlog::{Durability, Options, Store};

const WORKERS: usize = 8;
const CASES_PER_WORKER: usize = 50;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("ctxlog-threads-{}", std::process::id()));
    let store = Arc::new(Store::open(
        &dir,
        Options::default().durability(Durability::GroupCommit),
    )?);

    // A task to watch, opened before the workers start.
    let watched = store.receive_message(
        "acme",
        br#"{"messageId":"watch-1","role":"ROLE_USER","parts":[{"text":"a long job"}]}"#,
    )?;
    let watcher = {
        let (store, task) = (store.clone(), watched.task_id.clone());
        std::thread::spawn(move || -> ctxlog::Result<Vec<String>> {
            let mut seen = Vec::new();
            let mut after = 1; // the message is event 1
            loop {
                let events =
                    store.wait_for_events("acme", &task, after, Duration::from_secs(30))?;
                if events.is_empty() {
                    return Ok(seen); // timed out
                }
                for (n, event) in events {
                    after = n;
                    if let Some(update) = event.status_update {
                        seen.push(update.status.state.name().to_string());
                        if update.status.state.is_terminal() {
                            return Ok(seen);
                        }
                    }
                }
            }
        })
    };

    let started = Instant::now();
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let store = store.clone();
            std::thread::spawn(move || -> ctxlog::Result<()> {
                for case in 0..CASES_PER_WORKER {
                    let inbound = format!(
                        r#"{{"messageId":"w{w}-c{case}","role":"ROLE_USER","parts":[{{"text":"case {case} of worker {w}"}}]}}"#
                    );
                    let r = store.receive_message("acme", inbound.as_bytes())?;
                    let reply = Message::new(format!("a-w{w}-c{case}"), Role::Agent, &["done"]);
                    let done = TaskStatus::new(TaskState::Completed).with_message(reply);
                    store.update_status("acme", &r.status_update(done))?;
                }
                Ok(())
            })
        })
        .collect();
    // Meanwhile, the watched job makes progress.
    for state in [TaskState::Working, TaskState::Completed] {
        store.update_status("acme", &watched.status_update(TaskStatus::new(state)))?;
    }
    for worker in workers {
        worker.join().map_err(|_| "a worker panicked")??;
    }
    let elapsed = started.elapsed();
    let seen = watcher.join().map_err(|_| "the watcher panicked")??;

    let cases = WORKERS * CASES_PER_WORKER;
    println!(
        "{cases} cases (a durable receive and a durable completion each) by {WORKERS} threads in {:.0} ms",
        elapsed.as_secs_f64() * 1e3
    );
    println!("the watcher saw: {}", seen.join(" -> "));
    assert_eq!(seen, ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]);
    let stats = store.stats();
    assert_eq!(stats.tasks as usize, cases + 1);
    println!(
        "the store holds {} contexts, {} tasks, {} messages",
        stats.contexts, stats.tasks, stats.messages
    );
    drop(store);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
