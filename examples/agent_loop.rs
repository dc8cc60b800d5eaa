//! An A2A agent's loop over one support case, turn by turn: each turn saves
//! the client's message first, renders the context's earlier conversation
//! for the prompt, and stores what the agent does as it does it.
//!
//! ```sh
//! cargo run --example agent_loop            # in a temporary directory
//! cargo run --example agent_loop -- ./data  # or in a store of your own
//! ```

use ctxlog::a2a::{Artifact, Message, Part, Role, TaskState, TaskStatus};
use ctxlog::render::Budget;
use ctxlog::{Durability, ListTasksQuery, Options, Receipt, Store};

/// The agent: what it answers to each message of the case.
fn think(message: &str, history: &str) -> (TaskState, &'static str) {
    if message.contains("refund") && !history.contains("card") {
        (TaskState::InputRequired, "Which card was charged?")
    } else if message.contains("Visa") {
        (
            TaskState::Completed,
            "Refunded $42.00 to the Visa ending 4242.",
        )
    } else {
        (TaskState::Completed, "The shipping fee is refunded too.")
    }
}

/// One turn: receive, render, think, store the outcome.
fn turn(store: &Store, tenant: &str, inbound: &str) -> ctxlog::Result<Receipt> {
    let receipt = store.receive_message(tenant, inbound.as_bytes())?;
    if receipt.duplicate {
        println!("(a resend of a message already received: no work done)");
        return Ok(receipt);
    }
    let prompt_history = store.render_history(
        tenant,
        &receipt.context_id,
        Some(receipt.seq),
        Budget::default(),
    )?;
    println!(
        "turn on task {}: {} earlier message(s) in the prompt{}",
        receipt.task_id,
        prompt_history.included,
        if prompt_history.is_empty() {
            ""
        } else {
            ", framed"
        }
    );
    let (_, message) = store
        .latest_received(tenant, &receipt.task_id)?
        .ok_or(ctxlog::Error::TaskNotFound)?;
    let said: String = message
        .parts
        .iter()
        .filter_map(|p| p.text.clone())
        .collect();
    store.update_status(
        tenant,
        &receipt.status_update(TaskStatus::new(TaskState::Working)),
    )?;
    let (state, answer) = think(&said, &prompt_history.text);
    if state == TaskState::Completed && said.contains("Visa") {
        let receipt_doc = Artifact::new("receipt", vec![Part::text("Refund: $42.00, Visa 4242")])
            .with_name("Refund receipt");
        store.add_artifact(tenant, &receipt.artifact_update(receipt_doc).last())?;
    }
    let reply = Message::new(format!("agent-{}", receipt.seq), Role::Agent, &[answer]);
    store.update_status(
        tenant,
        &receipt.status_update(TaskStatus::new(state).with_message(reply)),
    )?;
    println!("  agent: {answer} ({})", state.name());
    Ok(receipt)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (dir, temporary) = match std::env::args_os().nth(1) {
        Some(dir) => (std::path::PathBuf::from(dir), false),
        None => (
            std::env::temp_dir().join(format!("ctxlog-agent-loop-{}", std::process::id())),
            true,
        ),
    };
    let store = Store::open(&dir, Options::default().durability(Durability::GroupCommit))?;
    let tenant = "acme";

    // The client opens the case; the agent asks a question.
    let first = turn(
        &store,
        tenant,
        r#"{"messageId":"c1","role":"ROLE_USER","parts":[{"text":"Please refund the duplicate charge on order 123."}]}"#,
    )?;
    // The same message again (a client retry): recognised, nothing redone.
    turn(
        &store,
        tenant,
        r#"{"messageId":"c1","role":"ROLE_USER","parts":[{"text":"Please refund the duplicate charge on order 123."}]}"#,
    )?;
    // The answer joins the waiting task.
    let answer = format!(
        r#"{{"messageId":"c2","role":"ROLE_USER","taskId":"{}","parts":[{{"text":"The Visa ending 4242."}}]}}"#,
        first.task_id
    );
    turn(&store, tenant, &answer)?;
    // A refinement after the task finished: a new task pointing back.
    let follow_up = format!(
        r#"{{"messageId":"c3","role":"ROLE_USER","contextId":"{}","referenceTaskIds":["{}"],"parts":[{{"text":"Also the $6.90 shipping fee."}}]}}"#,
        first.context_id, first.task_id
    );
    turn(&store, tenant, &follow_up)?;

    let listed = store.list_tasks(
        tenant,
        &ListTasksQuery {
            context_id: Some(first.context_id.clone()),
            history_length: Some(0),
            ..Default::default()
        },
    )?;
    assert_eq!(
        listed.tasks.len(),
        2,
        "the case holds its task and the follow-up"
    );
    assert!(listed
        .tasks
        .iter()
        .all(|t| t.status.state == TaskState::Completed));
    println!("\nthe case's tasks, newest first:");
    for task in &listed.tasks {
        println!("  {} {}", task.id, task.status.state.name());
    }
    let history = store.render_history(tenant, &first.context_id, None, Budget::default())?;
    println!(
        "\nthe whole case, as the next prompt would see it:\n{}",
        history.text
    );

    store.close()?;
    if temporary {
        std::fs::remove_dir_all(&dir)?;
    }
    Ok(())
}
