//! When a turn has answered: the states a send stops waiting at, and the
//! direct reply (a message instead of a task) as the client gets it. Used
//! by the request core, the streams and the turns alike.

use ctxlog::a2a::{Message, SpecForm, Task, TaskState, DIRECT_REPLY};
use serde_json::Value;

/// Terminal or interrupted: where a turn ends.
pub(crate) fn settled(state: TaskState) -> bool {
    state.is_terminal() || matches!(state, TaskState::InputRequired | TaskState::AuthRequired)
}

/// Whether the task's turn ended in a direct reply: the client got a
/// message, and no A2A view shows the task.
pub(crate) fn is_direct_reply(task: &Task) -> bool {
    task.status.extra.get(DIRECT_REPLY) == Some(&Value::Bool(true))
}

/// The agent's direct reply, if the task's turn ended in one: its status's
/// message in the spec's form, without the task it was stored in (the
/// client got no task).
pub(crate) fn direct_reply(task: &Task) -> Option<Message> {
    if !is_direct_reply(task) {
        return None;
    }
    let mut message = task.status.message.clone()?;
    message.drop_unknown();
    message.task_id = None;
    Some(message)
}
