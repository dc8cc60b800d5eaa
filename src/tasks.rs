//! Where the lifecycle rule is: what each operation may do to a task in each
//! state, and the per-task state the index rebuilds from records.

use crate::a2a::TaskState;
use crate::error::{Error, Result};
use crate::log::segments::RecordLoc;

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

/// What the index knows of one artifact.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct ArtifactEntry {
    /// Its id, unique within the task.
    pub id: String,
    /// Its chunks since it was last created or replaced, as indices into the
    /// task's events.
    pub chunks: Vec<u32>,
    /// Whether its last chunk has arrived.
    pub closed: bool,
}

/// What the index knows of one task.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct TaskEntry {
    /// Made by the store.
    pub id: String,
    /// The current state.
    pub state: TaskState,
    /// When the current status was recorded (store clock, ms since the epoch).
    pub status_ms: u64,
    /// The latest status record, as an index into `events`; `None` while
    /// the task is as it was submitted (SUBMITTED, at `status_ms`).
    pub status: Option<u32>,
    /// Every event of the task in order: its per-task seq is index + 1.
    pub events: Vec<RecordLoc>,
    /// The events that carry a message (the task's history), as indices.
    pub history: Vec<u32>,
    /// The artifacts, in the order they were first created.
    pub artifacts: Vec<ArtifactEntry>,
}

impl TaskEntry {
    /// A task opened by the message at `loc`.
    pub fn opened(id: String, timestamp_ms: u64, loc: RecordLoc) -> Self {
        TaskEntry {
            id,
            state: TaskState::Submitted,
            status_ms: timestamp_ms,
            status: None,
            events: vec![loc],
            history: vec![0],
            artifacts: Vec::new(),
        }
    }

    /// Whether `op` is allowed now; the error says why not.
    pub fn check(&self, op: Op<'_>) -> Result<()> {
        let terminal = || Error::UnsupportedOperation {
            reason: format!(
                "task {} is {} and terminal states are final; send a new message with \
                 referenceTaskIds to follow it up",
                self.id,
                self.state.name()
            ),
        };
        match op {
            Op::Cancel if self.state.is_terminal() => Err(Error::TaskNotCancelable {
                state: self.state.name(),
            }),
            Op::Cancel => Ok(()),
            _ if self.state.is_terminal() => Err(terminal()),
            Op::Message => Ok(()),
            Op::Status(TaskState::Unspecified) => Err(Error::InvalidParams {
                field: "status.state",
                reason: "TASK_STATE_UNSPECIFIED is not a state a task can be put in".into(),
            }),
            Op::Status(_) => Ok(()),
            Op::Artifact {
                artifact_id,
                append,
            } => self.check_artifact(artifact_id, append),
        }
    }

    fn check_artifact(&self, artifact_id: &str, append: bool) -> Result<()> {
        match self.artifacts.iter().find(|a| a.id == artifact_id) {
            Some(a) if a.closed => Err(Error::InvalidParams {
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
        }
    }

    /// Records an event at `loc` (already checked and durable).
    pub fn push_event(&mut self, loc: RecordLoc, carries_message: bool) -> u32 {
        let index = self.events.len() as u32;
        self.events.push(loc);
        if carries_message {
            self.history.push(index);
        }
        index
    }

    /// Records a status event.
    pub fn set_status(
        &mut self,
        state: TaskState,
        at_ms: u64,
        loc: RecordLoc,
        carries_message: bool,
    ) {
        let index = self.push_event(loc, carries_message);
        self.state = state;
        self.status_ms = at_ms;
        self.status = Some(index);
    }

    /// Records an artifact chunk.
    pub fn add_chunk(&mut self, loc: RecordLoc, artifact_id: &str, append: bool, last_chunk: bool) {
        let index = self.push_event(loc, false);
        let entry = match self.artifacts.iter_mut().position(|a| a.id == artifact_id) {
            Some(i) => self.artifacts.get_mut(i),
            None => {
                self.artifacts.push(ArtifactEntry {
                    id: artifact_id.to_string(),
                    ..ArtifactEntry::default()
                });
                self.artifacts.last_mut()
            }
        };
        if let Some(entry) = entry {
            if !append {
                entry.chunks.clear();
            }
            entry.chunks.push(index);
            entry.closed = last_chunk;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOC: RecordLoc = RecordLoc {
        segment: 1,
        offset: 32,
        len: 1,
    };

    fn task_in(state: TaskState) -> TaskEntry {
        let mut t = TaskEntry::opened("t".into(), 0, LOC);
        if state != TaskState::Submitted {
            t.set_status(state, 1, LOC, false);
        }
        t
    }

    fn kind(r: Result<()>) -> &'static str {
        match r {
            Ok(()) => "ok",
            Err(e) => e.kind_name(),
        }
    }

    /// Every (state × operation) pair against its expected outcome.
    #[test]
    fn the_lifecycle_table() {
        use TaskState::*;
        let ops: [(&str, Op<'static>); 7] = [
            ("message", Op::Message),
            ("status working", Op::Status(Working)),
            ("status completed", Op::Status(Completed)),
            ("status unspecified", Op::Status(Unspecified)),
            (
                "new artifact",
                Op::Artifact {
                    artifact_id: "a",
                    append: false,
                },
            ),
            (
                "append unknown",
                Op::Artifact {
                    artifact_id: "zz",
                    append: true,
                },
            ),
            ("cancel", Op::Cancel),
        ];
        let expected = |state: TaskState, op: &str| -> &'static str {
            match (state.is_terminal(), op) {
                (true, "cancel") => "TaskNotCancelable",
                (true, _) => "UnsupportedOperation",
                (false, "status unspecified") | (false, "append unknown") => "InvalidParams",
                (false, _) => "ok",
            }
        };
        for state in TaskState::ALL.into_iter().filter(|s| *s != Unspecified) {
            let task = task_in(state);
            for (name, op) in ops {
                assert_eq!(
                    kind(task.check(op)),
                    expected(state, name),
                    "{} × {name}",
                    state.name()
                );
            }
        }
    }

    #[test]
    fn artifact_chunks_follow_their_rules() {
        let mut t = task_in(TaskState::Working);
        let chunk = |id, append| Op::Artifact {
            artifact_id: id,
            append,
        };
        assert_eq!(kind(t.check(chunk("a", true))), "InvalidParams");
        t.add_chunk(LOC, "a", false, false);
        assert_eq!(kind(t.check(chunk("a", true))), "ok");
        t.add_chunk(LOC, "a", true, false);
        assert_eq!(t.artifacts[0].chunks.len(), 2);
        // Replacing starts the artifact over.
        t.add_chunk(LOC, "a", false, false);
        assert_eq!(t.artifacts[0].chunks.len(), 1);
        t.add_chunk(LOC, "a", true, true);
        assert_eq!(kind(t.check(chunk("a", true))), "InvalidParams");
        assert_eq!(kind(t.check(chunk("a", false))), "InvalidParams");
        assert_eq!(kind(t.check(chunk("b", false))), "ok");
        assert_eq!(
            t.events.len(),
            6,
            "the opening message, one status, four chunks"
        );
        assert_eq!(t.history, vec![0]);
    }
}
