//! What an agent sees of the server: the executor trait it implements, the
//! turn it is called with, and the sink it answers through.
//!
//! The server calls [`AgentExecutor::execute`] once per turn, after the
//! inbound message is durable. The agent answers only through the
//! [`EventSink`]: every event is checked against the task lifecycle and the
//! artifact rules and made durable in the store before any stream or
//! response sees it; an event the store refuses fails the turn (the client
//! sees `InvalidAgentResponse`, the task is left FAILED).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use ctxlog::a2a::{Artifact, Message, Stored, Task, TaskState};
use ctxlog::render::History;
use tokio::sync::watch;

/// A boxed future, as the executor returns one.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// An agent behind the server.
pub trait AgentExecutor: Send + Sync + 'static {
    /// What the agent card says of the agent.
    fn describe(&self) -> AgentDescription {
        AgentDescription::default()
    }

    /// Runs one turn: the task's latest message (in `turn`) is processed,
    /// and the answer given through `events`. The turn should end in a
    /// terminal state (COMPLETED, FAILED, REJECTED), an interrupted one
    /// (INPUT_REQUIRED, AUTH_REQUIRED), or a direct reply; a turn that ends
    /// with the task still SUBMITTED or WORKING is failed by the server. An
    /// `Err` fails the task with its text as the agent's message. The
    /// event that sets such a state ends the turn: later events are
    /// refused ([`SinkError::Ended`]), and the context takes its next
    /// message at once, even while this future is still running.
    fn execute(&self, turn: TurnContext, events: EventSink) -> BoxFuture<Result<(), AgentError>>;
}

/// A skill the agent card lists.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Skill {
    /// Its id.
    pub id: String,
    /// A human-readable name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Keywords.
    pub tags: Vec<String>,
    /// Example requests.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<String>,
}

/// The agent as its card describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentDescription {
    /// A human-readable name.
    pub name: String,
    /// What the agent does.
    pub description: String,
    /// The agent's version.
    pub version: String,
    /// Its skills.
    pub skills: Vec<Skill>,
    /// Media types it takes.
    pub input_modes: Vec<String>,
    /// Media types it answers with.
    pub output_modes: Vec<String>,
}

impl Default for AgentDescription {
    fn default() -> Self {
        AgentDescription {
            name: "ctxlog agent".into(),
            description: "An agent served by ctxlog-server".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            skills: Vec::new(),
            input_modes: vec!["text/plain".into(), "application/json".into()],
            output_modes: vec!["text/plain".into(), "application/json".into()],
        }
    }
}

/// Why an agent's turn failed; its text becomes the FAILED status's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentError(pub String);

impl std::fmt::Display for AgentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AgentError {}

impl From<SinkError> for AgentError {
    fn from(e: SinkError) -> Self {
        AgentError(e.to_string())
    }
}

/// One turn of a task, as the agent is called with it.
#[derive(Debug, Clone)]
pub struct TurnContext {
    /// The caller's tenant.
    pub tenant: String,
    /// The task as stored when the turn began (its whole history).
    pub task: Task,
    /// The message being processed, exactly as the client sent it.
    pub message: Stored<Message>,
    /// The context's earlier conversation, before this message, within the
    /// default budget (structured, for chat APIs that take turns).
    pub history: History,
    /// The same history rendered inside the injection-guard frame, for a
    /// prompt: stored text can neither close it nor pose as instructions.
    pub rendered_history: String,
    /// Signalled when the task is canceled, or the server shuts down.
    pub cancel: Cancellation,
}

/// Tells a turn it should stop: the task was canceled, or the server is
/// shutting down.
#[derive(Debug, Clone)]
pub struct Cancellation(pub(crate) watch::Receiver<bool>);

impl Cancellation {
    /// Whether the turn has been told to stop.
    pub fn is_canceled(&self) -> bool {
        *self.0.borrow()
    }

    /// Waits until the turn is told to stop.
    pub async fn canceled(&mut self) {
        while !*self.0.borrow_and_update() {
            if self.0.changed().await.is_err() {
                // The server dropped the turn's handle: nothing will come.
                std::future::pending::<()>().await;
            }
        }
    }
}

/// Why an event was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkError {
    /// The task was canceled: stop.
    Canceled,
    /// The event breaks the task model's rules; the turn has been failed.
    Invalid(String),
    /// The turn is over (an earlier event ended it, or the task is gone).
    Ended,
    /// The store could not take it (the server is failing).
    Store(String),
}

impl std::fmt::Display for SinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SinkError::Canceled => f.write_str("the task was canceled"),
            SinkError::Invalid(why) => write!(f, "the event was refused: {why}"),
            SinkError::Ended => f.write_str("the turn is over"),
            SinkError::Store(why) => write!(f, "the store failed: {why}"),
        }
    }
}

impl std::error::Error for SinkError {}

/// A future a sink's write returns.
pub(crate) type SinkFuture<'a> = Pin<Box<dyn Future<Output = Result<(), SinkError>> + Send + 'a>>;

/// What an [`EventSink`] writes through: the server's running turn. A
/// trait, so that this module (the agent's view of the server) depends on
/// nothing else of the server; `sends/turn.rs` implements it.
pub(crate) trait TurnEvents: Send + Sync {
    /// The task the turn works on.
    fn task_id(&self) -> &str;
    /// Its context.
    fn context_id(&self) -> &str;
    /// See [`EventSink::status`].
    fn status(&self, state: TaskState, message: Option<Message>) -> SinkFuture<'_>;
    /// See [`EventSink::artifact`].
    fn artifact(&self, artifact: Artifact, append: bool, last_chunk: bool) -> SinkFuture<'_>;
    /// See [`EventSink::reply`].
    fn reply(&self, message: Message) -> SinkFuture<'_>;
}

/// Where an agent sends its answer. Each call returns once the event is
/// durable (and then visible to every stream of the task).
#[derive(Clone)]
pub struct EventSink(pub(crate) Arc<dyn TurnEvents>);

impl EventSink {
    /// The task this turn works on.
    pub fn task_id(&self) -> &str {
        self.0.task_id()
    }

    /// Its context.
    pub fn context_id(&self) -> &str {
        self.0.context_id()
    }

    /// A new status, with an optional agent message (which joins the
    /// task's history). The message's role is set to `ROLE_AGENT`, its
    /// task and context filled in, and a messageId made if it has none.
    pub async fn status(
        &self,
        state: TaskState,
        message: Option<Message>,
    ) -> Result<(), SinkError> {
        self.0.status(state, message).await
    }

    /// An artifact chunk: `append: false` creates or replaces the artifact
    /// of its id, `append: true` extends it; nothing may follow
    /// `last_chunk`.
    pub async fn artifact(
        &self,
        artifact: Artifact,
        append: bool,
        last_chunk: bool,
    ) -> Result<(), SinkError> {
        self.0.artifact(artifact, append, last_chunk).await
    }

    /// A direct reply: the client gets this message instead of a task (A2A
    /// allows it for simple interactions), and the turn ends. The store
    /// keeps it as the task's COMPLETED status (marked, in a
    /// `ctxlogDirectReply` member of the status), so a resent message gets
    /// the same reply. After other events of the turn, or in a turn of a
    /// task that existed before, it is that COMPLETED status only.
    pub async fn reply(&self, message: Message) -> Result<(), SinkError> {
        self.0.reply(message).await
    }
}
