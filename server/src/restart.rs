//! On start: the turns a process that died left running (tasks SUBMITTED
//! or WORKING) are resolved by the configured policy, before any request
//! is served, so a client reconnecting to such a task sees the outcome.

use std::sync::Arc;

use ctxlog::a2a::TaskState;
use ctxlog::Receipt;
use tracing::warn;

use crate::config::OnRestart;
use crate::state::Shared;
use crate::turns;

/// The message a task failed by a restart carries.
pub(crate) const INTERRUPTED: &str = "The turn was interrupted: the server stopped while it ran. \
                                      Send the message again to retry.";

/// Resolves every interrupted turn; returns how many there were.
pub(crate) async fn recover(shared: &Arc<Shared>) -> usize {
    let mid = match shared
        .blocking_raw(|store| Ok(store.tasks_in(&[TaskState::Submitted, TaskState::Working])))
        .await
    {
        Ok(mid) => mid,
        Err(e) => {
            warn!(error = %e, "could not list the interrupted turns");
            return 0;
        }
    };
    for task in &mid {
        match shared.config.on_restart {
            OnRestart::Fail => {
                turns::fail(shared, &task.tenant, &task.task_id, INTERRUPTED).await;
            }
            OnRestart::Resume => resume(shared, task).await,
        }
    }
    mid.len()
}

/// Calls the agent again with the task's latest message.
async fn resume(shared: &Arc<Shared>, task: &ctxlog::TaskRef) {
    let Some(permit) = shared.turns.permit() else {
        turns::fail(shared, &task.tenant, &task.task_id, INTERRUPTED).await;
        return;
    };
    let (tenant, context, id) = (
        task.tenant.clone(),
        task.context_id.clone(),
        task.task_id.clone(),
    );
    let lease = shared
        .blocking_raw(move |store| store.begin_turn(&tenant, &context, &id))
        .await;
    let receipt = Receipt {
        context_id: task.context_id.clone(),
        task_id: task.task_id.clone(),
        seq: 0,
        duplicate: false,
        new_context: false,
        new_task: false,
        event: 0,
    };
    match lease {
        Ok(lease) => turns::start(shared, &task.tenant, &receipt, Some(lease), permit, None),
        Err(_) => turns::fail(shared, &task.tenant, &task.task_id, INTERRUPTED).await,
    }
}
