//! On start: the turns a process that died left running are resolved by
//! the configured policy, before any request is served, so a client
//! reconnecting to such a task sees the outcome. A turn is running from the
//! receive of its message until its task is terminal or interrupted: the
//! tasks that read as SUBMITTED or WORKING, which includes a task whose
//! client answered its question just before the crash (it reads as WORKING
//! until the agent writes for that answer).

use std::sync::Arc;

use ctxlog::a2a::TaskState;
use ctxlog::Receipt;
use tracing::warn;

use crate::config::OnRestart;
use crate::sends::turn;
use crate::state::Shared;

/// The message a task failed by a restart carries.
pub(crate) const INTERRUPTED: &str = "The turn was interrupted: the server stopped while it ran. \
                                      To retry, send it again as a new message (a new messageId, \
                                      with referenceTaskIds naming this task).";

/// Resolves every interrupted turn; returns how many there were.
pub(crate) async fn recover(shared: &Arc<Shared>) -> usize {
    let mid = match shared
        .store
        .blocking_raw(|store| Ok(store.tasks_in(&[TaskState::Submitted, TaskState::Working])))
        .await
    {
        Ok(mid) => mid,
        Err(e) => {
            warn!(error = %e, "could not list the interrupted turns");
            return 0;
        }
    };
    // After a reopen of the store (not at start), turns of this process
    // may still run: they resolve their own tasks.
    let mid: Vec<_> = mid
        .into_iter()
        .filter(|t| !shared.turns.runs(&t.tenant, &t.task_id))
        .collect();
    for task in &mid {
        match shared.config.on_restart {
            OnRestart::Fail => {
                turn::fail(shared, &task.tenant, &task.task_id, INTERRUPTED).await;
            }
            OnRestart::Resume => resume(shared, task).await,
        }
    }
    mid.len()
}

/// Calls the agent again with the task's latest message.
async fn resume(shared: &Arc<Shared>, task: &ctxlog::TaskRef) {
    let Some(permit) = shared.turns.permit() else {
        turn::fail(shared, &task.tenant, &task.task_id, INTERRUPTED).await;
        return;
    };
    let (tenant, context, id) = (
        task.tenant.clone(),
        task.context_id.clone(),
        task.task_id.clone(),
    );
    let lease = shared
        .store
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
        Ok(lease) => turn::start(shared, &task.tenant, &receipt, Some(lease), permit, None),
        Err(_) => turn::fail(shared, &task.tenant, &task.task_id, INTERRUPTED).await,
    }
}
