//! The task lifecycle: what each operation may do to a task in each state,
//! and the error that says why not.

use crate::a2a::TaskState;
use crate::error::{Error, Result};

/// An operation on an existing task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op<'a> {
    /// A client message joins the task.
    Message,
    /// The agent sets a new status.
    Status(TaskState),
    /// The agent sends an artifact chunk.
    Artifact {
        /// The artifact's id.
        artifact_id: &'a str,
        /// Whether the chunk extends the artifact.
        append: bool,
    },
    /// The client cancels the task.
    Cancel,
}

/// Whether `op` is allowed on a task of id `id` in `state`, whose artifact
/// of a given id is found by `artifact` (`Some(closed)`, or `None` if the
/// task has none of that id); the error says why not.
pub fn check(
    id: &dyn std::fmt::Display,
    state: TaskState,
    artifact: impl Fn(&str) -> Option<bool>,
    op: Op<'_>,
) -> Result<()> {
    let terminal = || Error::UnsupportedOperation {
        reason: format!(
            "task {id} is {} and terminal states are final; send a new message with \
             referenceTaskIds to follow it up",
            state.name()
        ),
    };
    match op {
        Op::Cancel if state.is_terminal() => Err(Error::TaskNotCancelable {
            state: state.name(),
        }),
        Op::Cancel => Ok(()),
        _ if state.is_terminal() => Err(terminal()),
        Op::Message => Ok(()),
        Op::Status(TaskState::Unspecified) => Err(Error::InvalidParams {
            field: "status.state",
            reason: "TASK_STATE_UNSPECIFIED is not a state a task can be put in".into(),
        }),
        Op::Status(_) => Ok(()),
        Op::Artifact {
            artifact_id,
            append,
        } => match artifact(artifact_id) {
            Some(true) => Err(Error::InvalidParams {
                field: "artifact.artifactId",
                reason: format!(
                    "artifact {artifact_id:?} already had its lastChunk; nothing may follow it"
                ),
            }),
            None if append => Err(Error::InvalidParams {
                field: "artifact.artifactId",
                reason: format!(
                    "append to unknown artifact {artifact_id:?}; send its first chunk with append: false"
                ),
            }),
            _ => Ok(()),
        },
    }
}
