//! A running turn: the agent called after the message is durable, each of
//! its events checked and made durable before anyone sees it, the turn's
//! end resolved (failed if the agent broke the rules or left the task
//! unfinished). The registry of turns (cancellation, the bound on turns
//! at once) is `state/turns.rs`.

use std::sync::{Arc, Mutex};

use ctxlog::a2a::{
    Artifact, Message, Object, Part, Role, Stored, Task, TaskArtifactUpdateEvent, TaskState,
    TaskStatus, TaskStatusUpdateEvent,
};
use ctxlog::render::Budget;
use ctxlog::{EventRecord, Receipt, TurnGuard};
use tokio::sync::OwnedSemaphorePermit;
use tracing::{info, warn, Instrument};

use crate::agent::{Cancellation, EventSink, SinkError, SinkFuture, TurnContext, TurnEvents};
use crate::state::hub::Settled;
use crate::state::Shared;

/// One running turn: what its sink writes to (through [`TurnEvents`]).
pub(crate) struct Turn {
    shared: Arc<Shared>,
    pub(crate) tenant: String,
    pub(crate) task_id: String,
    pub(crate) context_id: String,
    /// The turn's message opened the task: a direct reply can stand for it.
    new_task: bool,
    /// Serialises the turn's events, and knows whether the turn is over.
    progress: tokio::sync::Mutex<Progress>,
    /// The context's turn (under the single-active policy) and the turn's
    /// place under the bound on turns, released as soon as a status ends
    /// the turn: a client answered with that status may send its next
    /// message at once.
    lease: Mutex<Option<(Option<TurnGuard>, OwnedSemaphorePermit)>>,
}

#[derive(Default)]
struct Progress {
    ended: bool,
    /// Events the agent sent in this turn.
    events: u32,
}

impl TurnEvents for Turn {
    fn task_id(&self) -> &str {
        &self.task_id
    }

    fn context_id(&self) -> &str {
        &self.context_id
    }

    fn status(&self, state: TaskState, message: Option<Message>) -> SinkFuture<'_> {
        Box::pin(Turn::status(self, state, message))
    }

    fn artifact(&self, artifact: Artifact, append: bool, last_chunk: bool) -> SinkFuture<'_> {
        Box::pin(Turn::artifact(self, artifact, append, last_chunk))
    }

    fn reply(&self, message: Message) -> SinkFuture<'_> {
        Box::pin(Turn::reply(self, message))
    }
}

/// Starts a turn of the task `receipt` names (its message is durable),
/// holding `lease` (the context's turn, under the single-active policy)
/// and `permit` (a place under the bound) until a status ends the turn or
/// the agent returns.
pub(crate) fn start(
    shared: &Arc<Shared>,
    tenant: &str,
    receipt: &Receipt,
    lease: Option<TurnGuard>,
    permit: OwnedSemaphorePermit,
    prepared: Option<Prepared>,
) {
    let turn = Arc::new(Turn {
        shared: shared.clone(),
        tenant: tenant.to_string(),
        task_id: receipt.task_id.clone(),
        context_id: receipt.context_id.clone(),
        new_task: receipt.new_task,
        progress: tokio::sync::Mutex::new(Progress::default()),
        lease: Mutex::new(Some((lease, permit))),
    });
    let (number, cancel) = shared.turns.register(tenant, &receipt.task_id);
    let span = tracing::debug_span!("turn", tenant = %tenant, task = %receipt.task_id);
    let handle = tokio::spawn(
        async move {
            let outcome = run(&turn, Cancellation(cancel), prepared).await;
            turn.finish(outcome).await;
            turn.shared.turns.unregister(number);
            turn.release();
        }
        .instrument(span),
    );
    shared.turns.set_abort(number, handle.abort_handle());
}

/// What the agent is called with, read from the store: the task, the
/// message being processed, and the context's history before it.
pub(crate) struct Prepared {
    task: Task,
    message: Stored<Message>,
    history: ctxlog::render::History,
    rendered: String,
}

impl Prepared {
    /// Reads it (on the blocking pool, or on a worker right after the
    /// message's deferred receive, whose records are fresh in memory).
    pub(crate) fn read(
        store: &ctxlog::Store,
        tenant: &str,
        task_id: &str,
        context_id: &str,
    ) -> ctxlog::Result<Self> {
        let (task, latest) = store.task_and_latest_received(tenant, task_id)?;
        let Some((seq, message)) = latest else {
            return Err(ctxlog::Error::TaskNotFound);
        };
        let budget = Budget::default();
        let (history, rendered) =
            store.history_and_rendering(tenant, context_id, Some(seq), budget)?;
        Ok(Prepared {
            task,
            message,
            history,
            rendered: rendered.text,
        })
    }

    fn into_context(self, tenant: &str, cancel: Cancellation) -> TurnContext {
        TurnContext {
            tenant: tenant.to_string(),
            task: self.task,
            message: self.message,
            history: self.history,
            rendered_history: self.rendered,
            cancel,
        }
    }
}

/// How a turn's agent ended.
enum Outcome {
    Done,
    Failed(String),
    Panicked,
    NoContext(String),
}

/// Builds the turn's context and runs the agent (a panic is caught as a
/// failed turn; aborting the turn's task drops the agent's future too).
async fn run(turn: &Arc<Turn>, cancel: Cancellation, prepared: Option<Prepared>) -> Outcome {
    use futures_util::FutureExt;
    let prepared = match prepared {
        Some(p) => Ok(p),
        None => {
            let (tenant, task_id, context_id) = (
                turn.tenant.clone(),
                turn.task_id.clone(),
                turn.context_id.clone(),
            );
            turn.shared
                .store
                .blocking_raw(move |store| Prepared::read(store, &tenant, &task_id, &context_id))
                .await
                .map_err(|e| e.to_string())
        }
    };
    let context = match prepared {
        Ok(p) => p.into_context(&turn.tenant, cancel),
        Err(why) => return Outcome::NoContext(why),
    };
    let agent = turn.shared.agent.clone();
    let sink = EventSink(turn.clone());
    crate::crashpoint::point("agent-called");
    let execution = std::panic::AssertUnwindSafe(agent.execute(context, sink));
    match execution.catch_unwind().await {
        Ok(Ok(())) => Outcome::Done,
        Ok(Err(e)) => Outcome::Failed(e.0),
        Err(_) => Outcome::Panicked,
    }
}

impl Turn {
    pub(crate) async fn status(
        &self,
        state: TaskState,
        message: Option<Message>,
    ) -> Result<(), SinkError> {
        let mut progress = self.progress.lock().await;
        self.status_under(&mut progress, state, message, Object::new())
            .await
    }

    async fn status_under(
        &self,
        progress: &mut Progress,
        state: TaskState,
        message: Option<Message>,
        extra: Object,
    ) -> Result<(), SinkError> {
        if progress.ended {
            return Err(SinkError::Ended);
        }
        let message = match message.map(|m| self.agent_message(m)).transpose() {
            Ok(m) => m,
            Err(why) => return Err(self.invalidate(progress, &why).await),
        };
        let event = TaskStatusUpdateEvent {
            task_id: self.task_id.clone(),
            context_id: self.context_id.clone(),
            status: TaskStatus {
                state,
                message,
                timestamp: None,
                extra,
            }
            .into(),
            metadata: None,
        };
        self.write(progress, Some(state), Sunk::Status(event)).await
    }

    pub(crate) async fn artifact(
        &self,
        artifact: Artifact,
        append: bool,
        last_chunk: bool,
    ) -> Result<(), SinkError> {
        let mut progress = self.progress.lock().await;
        if progress.ended {
            return Err(SinkError::Ended);
        }
        if let Some(problem) = artifact.parts.iter().find_map(Part::problem) {
            let why = format!("an artifact: {problem}");
            return Err(self.invalidate(&mut progress, &why).await);
        }
        let event = TaskArtifactUpdateEvent {
            task_id: self.task_id.clone(),
            context_id: self.context_id.clone(),
            artifact: artifact.into(),
            append,
            last_chunk,
            metadata: None,
        };
        self.write(&mut progress, None, Sunk::Artifact(event)).await
    }

    pub(crate) async fn reply(&self, message: Message) -> Result<(), SinkError> {
        let mut progress = self.progress.lock().await;
        let mut extra = Object::new();
        if progress.events == 0 && self.new_task {
            // A resend of its message gets the message again, not the task.
            extra.insert(
                ctxlog::a2a::DIRECT_REPLY.into(),
                serde_json::Value::Bool(true),
            );
        }
        self.status_under(&mut progress, TaskState::Completed, Some(message), extra)
            .await?;
        progress.ended = true;
        Ok(())
    }

    /// An agent's message as the task keeps it: role agent, this task and
    /// context, a messageId.
    fn agent_message(&self, mut m: Message) -> Result<Message, String> {
        match m.role {
            Role::User => return Err("an agent's message has role ROLE_USER".into()),
            Role::Unspecified | Role::Agent => m.role = Role::Agent,
        }
        if m.task_id.as_deref().is_some_and(|t| t != self.task_id) {
            return Err("an agent's message names another task".into());
        }
        if m.context_id
            .as_deref()
            .is_some_and(|c| c != self.context_id)
        {
            return Err("an agent's message names another context".into());
        }
        if m.parts.is_empty() {
            return Err("an agent's message needs at least one part".into());
        }
        if let Some(problem) = m.parts.iter().find_map(Part::problem) {
            return Err(format!("an agent's message: {problem}"));
        }
        m.task_id = Some(self.task_id.clone());
        m.context_id = Some(self.context_id.clone());
        if m.message_id.is_empty() {
            m.message_id = crate::util::random_id();
        }
        Ok(m)
    }

    /// Releases the context's turn and the place under the bound (once;
    /// later calls do nothing).
    fn release(&self) {
        let lease = crate::util::lock(&self.lease).take();
        drop(lease);
    }

    /// Writes one event (a status setting `state`, or an artifact chunk);
    /// on success every stream of the task is told. A status that ends the
    /// turn while a send waits for it: the task is read in the same call,
    /// and handed to the waiter with the news.
    async fn write(
        &self,
        progress: &mut Progress,
        state: Option<TaskState>,
        sunk: Sunk,
    ) -> Result<(), SinkError> {
        let (followed, streamed) = self.shared.hub.followers(&self.tenant, &self.task_id);
        let back = || ReadBack {
            tenant: self.tenant.clone(),
            task_id: self.task_id.clone(),
            streamed,
            waited: followed && state.is_some_and(crate::streams::reply::settled),
        };
        let cell = &self.shared.store;
        let deferred = cell
            // A streamed task's events keep the syncer's pace: its stream
            // reads its first snapshot while the turn goes on, and a turn
            // whose syncs ran back to back on the worker could end first,
            // leaving the stream one final snapshot and no updates.
            .deferred(self.shared.alone() && !streamed, |store| {
                let pending = sunk.deferred(store, &self.tenant)?;
                Ok(pending.map(|pending| {
                    let back = back();
                    let then = move |store: &ctxlog::Store, record: EventRecord| {
                        Ok(back.read(store, record.seq))
                    };
                    (pending, then)
                }))
            })
            .await;
        let written = match deferred {
            Some(written) => written,
            None => {
                let back = back();
                cell.blocking_raw(move |store| {
                    let seq = sunk.blocking(store, &back.tenant)?.seq;
                    Ok(back.read(store, seq))
                })
                .await
            }
        };
        match written {
            Ok((seq, payload, snapshot)) => {
                if progress.events == 0 {
                    crate::crashpoint::point("first-event");
                }
                progress.events += 1;
                if state.is_some_and(crate::streams::reply::settled) {
                    // The turn is over: nothing more of it is taken, and
                    // the context is free before anyone hears of the end.
                    progress.ended = true;
                    self.release();
                }
                let settled = snapshot.map(|(task, count)| Arc::new(Settled { task, count }));
                self.shared.hub.notify_written(
                    &self.tenant,
                    &self.task_id,
                    state,
                    seq,
                    payload,
                    settled,
                );
                Ok(())
            }
            Err(e) => Err(self.refused(progress, e).await),
        }
    }

    /// What a refused event means for the turn.
    async fn refused(&self, progress: &mut Progress, e: ctxlog::Error) -> SinkError {
        use ctxlog::Error as E;
        match e {
            E::TaskNotFound | E::ContextNotFound | E::ContextRejected { .. } => {
                progress.ended = true;
                SinkError::Ended
            }
            E::UnsupportedOperation { .. } if self.state().await == Some(TaskState::Canceled) => {
                progress.ended = true;
                SinkError::Canceled
            }
            E::UnsupportedOperation { reason } => self.invalidate(progress, &reason).await,
            E::InvalidParams { field, reason } => {
                self.invalidate(progress, &format!("{field}: {reason}"))
                    .await
            }
            other => {
                progress.ended = true;
                warn!(error = %other, "the store refused an agent event");
                // A send waiting for the turn's end answers with this now:
                // the end cannot be stored either.
                let error = crate::error::turn_cut(crate::error::from_store(other), &self.task_id);
                let message = error.message();
                self.shared
                    .hub
                    .notify_failed(&self.tenant, &self.task_id, error);
                SinkError::Store(message)
            }
        }
    }

    /// The turn broke the rules: it is over, and the task FAILED.
    async fn invalidate(&self, progress: &mut Progress, why: &str) -> SinkError {
        progress.ended = true;
        warn!(reason = %why, "the agent sent an invalid event");
        self.shared
            .turns
            .mark_invalid(&self.tenant, &self.task_id, why);
        let text = format!("The agent's response was invalid, so the task failed: {why}");
        fail(&self.shared, &self.tenant, &self.task_id, &text).await;
        SinkError::Invalid(why.to_string())
    }

    /// The task's state now, if it can be read.
    async fn state(&self) -> Option<TaskState> {
        let (tenant, task_id) = (self.tenant.clone(), self.task_id.clone());
        self.shared
            .store
            .blocking_raw(move |store| store.get_task(&tenant, &task_id, Some(0), false))
            .await
            .ok()
            .map(|t| t.status.state)
    }

    /// Resolves the end of the turn.
    async fn finish(&self, outcome: Outcome) {
        let mut progress = self.progress.lock().await;
        let fail_with = match outcome {
            Outcome::Done => {
                if !progress.ended
                    && matches!(
                        self.state().await,
                        Some(TaskState::Submitted | TaskState::Working)
                    )
                {
                    self.invalidate(
                        &mut progress,
                        "the agent ended its turn without a final or interrupted state",
                    )
                    .await;
                }
                None
            }
            Outcome::Failed(why) => Some(why),
            Outcome::Panicked => Some("the agent failed unexpectedly".to_string()),
            Outcome::NoContext(why) => Some(format!("the turn could not start: {why}")),
        };
        progress.ended = true;
        if let Some(why) = fail_with {
            info!(reason = %why, "the turn failed");
            fail(&self.shared, &self.tenant, &self.task_id, &why).await;
        }
    }
}

/// Fails a task that is not final yet, with an agent message saying why,
/// and tells its streams. (A task already final is left as it is.) If the
/// store cannot write (it is being reopened after a failed write), the
/// waiters are told of that, and the failure is written once the store is
/// back (this turn resolves its own task: a reopen's scan passes over
/// tasks whose turns run), unless the server shuts down first (the restart
/// then resolves it).
pub(crate) async fn fail(shared: &Arc<Shared>, tenant: &str, task_id: &str, why: &str) {
    let mut reopens = shared.store.reopens();
    let mut shutdown = shared.shutdown.clone();
    for _ in 0..10 {
        reopens.borrow_and_update();
        match fail_once(shared, tenant, task_id, why).await {
            Ok(Some(event)) => {
                shared
                    .hub
                    .notify(tenant, task_id, Some(TaskState::Failed), event);
                return;
            }
            Ok(None) => return,
            Err(e) => {
                warn!(error = %e, task = %task_id, "could not fail the task");
                let unwritable =
                    matches!(e, ctxlog::Error::Poisoned { .. } | ctxlog::Error::Io { .. });
                shared.hub.notify_failed(
                    tenant,
                    task_id,
                    crate::error::turn_cut(crate::error::from_store(e), task_id),
                );
                if !unwritable || *shutdown.borrow() {
                    return;
                }
                tokio::select! {
                    _ = reopens.changed() => {}
                    _ = shutdown.changed() => return,
                }
            }
        }
    }
}

/// An event of the turn's sink, to store.
enum Sunk {
    Status(TaskStatusUpdateEvent),
    Artifact(TaskArtifactUpdateEvent),
}

impl Sunk {
    /// Written deferred (see `StoreCell::deferred`).
    fn deferred(
        &self,
        store: &Arc<ctxlog::Store>,
        tenant: &str,
    ) -> ctxlog::Result<Option<ctxlog::PendingWrite>> {
        match self {
            Sunk::Status(event) => store.update_status_deferred(tenant, event),
            Sunk::Artifact(event) => store.add_artifact_deferred(tenant, event),
        }
    }

    /// Written on the blocking pool.
    fn blocking(&self, store: &ctxlog::Store, tenant: &str) -> ctxlog::Result<EventRecord> {
        match self {
            Sunk::Status(event) => store.update_status(tenant, event),
            Sunk::Artifact(event) => store.add_artifact(tenant, event),
        }
    }
}

/// What is read back of a stored event, while its record is fresh, for
/// those who follow the task: its SSE payload for its streams, and the
/// task for a send that waits for the turn's end. They then answer
/// without a read of their own.
struct ReadBack {
    tenant: String,
    task_id: String,
    streamed: bool,
    waited: bool,
}

type Fresh = (
    u64,
    Option<Arc<crate::state::hub::Payload>>,
    Option<(Task, u64)>,
);

impl ReadBack {
    fn read(&self, store: &ctxlog::Store, seq: u64) -> Fresh {
        let (tenant, task_id) = (&self.tenant, &self.task_id);
        let payload = self
            .streamed
            .then(|| crate::streams::sse::written_payload(store, tenant, task_id, seq))
            .flatten();
        let snapshot = self
            .waited
            .then(|| store.task_snapshot(tenant, task_id, None, true).ok())
            .flatten();
        (seq, payload, snapshot)
    }
}

/// One try of [`fail`]: whether it stored FAILED.
async fn fail_once(
    shared: &Arc<Shared>,
    tenant: &str,
    task_id: &str,
    why: &str,
) -> ctxlog::Result<Option<u64>> {
    let (t, id) = (tenant.to_string(), task_id.to_string());
    let text = why.to_string();
    shared
        .store
        .blocking_raw(move |store| {
            let task = store.get_task(&t, &id, Some(0), false)?;
            if task.status.state.is_terminal() {
                return Ok(None);
            }
            let mut message = Message::new(crate::util::random_id(), Role::Agent, &[]);
            message.parts = vec![Part::text(text)];
            message.task_id = Some(id.clone());
            message.context_id = Some(task.context_id.clone());
            let event = TaskStatusUpdateEvent {
                task_id: id.clone(),
                context_id: task.context_id.clone(),
                status: TaskStatus {
                    state: TaskState::Failed,
                    message: Some(message),
                    timestamp: None,
                    extra: Object::new(),
                }
                .into(),
                metadata: None,
            };
            store.update_status(&t, &event).map(|r| Some(r.seq))
        })
        .await
}
