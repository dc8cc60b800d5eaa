//! The operations, as both bindings call them: parameters in, protocol
//! objects or `A2aError`s out. No HTTP here.

use std::sync::Arc;
use std::time::Duration;

use ctxlog::a2a::{ListTasksResponse, Message, Task, TaskState};
use ctxlog::ListTasksQuery;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::Value;
use tracing::instrument;

use crate::error::A2aError;
use crate::sends::inbound::{begin_keyed, Begun, Inbound};
use crate::state::hub::Follower;
use crate::state::keys::Key;
use crate::state::Shared;
use crate::streams::reply::{direct_reply, is_direct_reply, settled};
use crate::streams::sse::{Follow, Start};

/// `SendMessageRequest` (the message kept as the text the client sent).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SendParams {
    pub(crate) message: Box<RawValue>,
    #[serde(default)]
    pub(crate) configuration: Option<SendConfig>,
    /// The message is in one of A2A v0.3's forms (a v0.3 request's; the
    /// store keeps it as received and reads it as v1.0).
    #[serde(skip)]
    pub(crate) v03: bool,
}

/// `SendMessageConfiguration`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SendConfig {
    #[serde(default, deserialize_with = "crate::http::protonames::int")]
    pub(crate) history_length: Option<i64>,
    #[serde(default)]
    pub(crate) return_immediately: Option<bool>,
    #[serde(default)]
    pub(crate) task_push_notification_config: Option<Value>,
}

/// `GetTaskRequest`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GetParams {
    pub(crate) id: String,
    #[serde(default, deserialize_with = "crate::http::protonames::int")]
    pub(crate) history_length: Option<i64>,
}

/// `CancelTaskRequest` and `SubscribeToTaskRequest`.
#[derive(Debug, Deserialize)]
pub(crate) struct IdParams {
    pub(crate) id: String,
}

/// `ListTasksRequest`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ListParams {
    #[serde(default)]
    pub(crate) context_id: Option<String>,
    #[serde(default)]
    pub(crate) status: Option<String>,
    #[serde(default, deserialize_with = "crate::http::protonames::int")]
    pub(crate) page_size: Option<i64>,
    #[serde(default)]
    pub(crate) page_token: Option<String>,
    #[serde(default, deserialize_with = "crate::http::protonames::int")]
    pub(crate) history_length: Option<i64>,
    #[serde(default)]
    pub(crate) status_timestamp_after: Option<String>,
    #[serde(default)]
    pub(crate) include_artifacts: Option<bool>,
}

/// What `SendMessage` answers: the task, or the agent's direct reply (both
/// in the spec's form).
pub(crate) enum SendOutcome {
    Task(Box<Task>),
    Message(Box<Message>),
}

impl Serialize for SendOutcome {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(1))?;
        match self {
            SendOutcome::Task(task) => map.serialize_entry("task", task)?,
            SendOutcome::Message(message) => map.serialize_entry("message", message)?,
        }
        map.end()
    }
}

/// A method's params as the client sent them (absent: `{}`).
pub(crate) fn params_text(params: &Option<Box<RawValue>>) -> &str {
    params.as_ref().map_or("{}", |p| p.get())
}

/// Parses a method's params (`null` or absent: the empty object).
pub(crate) fn params<T: serde::de::DeserializeOwned>(
    params: Option<Box<RawValue>>,
) -> Result<T, A2aError> {
    let text = params_text(&params);
    let text = if text == "null" { "{}" } else { text };
    serde_json::from_str(text).map_err(|e| A2aError::invalid(e.to_string()))
}

/// A history length as the store takes it: `None` for all; negative ones
/// are refused.
fn history_length(n: Option<i64>) -> Result<Option<usize>, A2aError> {
    n.map(|n| {
        usize::try_from(n).map_err(|_| {
            A2aError::invalid(format!("historyLength: {n} is negative; send 0 or more"))
        })
    })
    .transpose()
}

/// `SendMessage`.
#[instrument(level = "debug", skip_all, fields(tenant = %tenant))]
pub(crate) async fn send(
    shared: &Arc<Shared>,
    tenant: &str,
    params: SendParams,
    key: Option<Key>,
) -> Result<SendOutcome, A2aError> {
    let _sending = shared.store.sending();
    let (begun, history, config) = begin_send(shared, tenant, params, key, false).await?;
    let task_id = begun.receipt.task_id.clone();
    let want = Want {
        tenant,
        task_id: &task_id,
        history,
    };
    let settled_task = if config.return_immediately.unwrap_or(false) {
        None
    } else {
        // Both wait for what the message's turn writes; a resend reads the
        // task first, as that turn may be over already.
        let (base, read_first) = (begun.receipt.event, begun.receipt.duplicate);
        settle(shared, &want, begun.events, base, read_first).await?
    };
    answer(shared, &want, settled_task).await
}

/// `SendStreamingMessage`: the stream starts once the agent's first event
/// is durable (so that a direct reply can be the stream's one message).
#[instrument(level = "debug", skip_all, fields(tenant = %tenant))]
pub(crate) async fn send_streaming(
    shared: &Arc<Shared>,
    tenant: &str,
    params: SendParams,
    key: Option<Key>,
) -> Result<Follow, A2aError> {
    // Counted until the stream starts; its turn's writes go on after.
    let _sending = shared.store.sending();
    let (begun, history, _) = begin_send(shared, tenant, params, key, true).await?;
    // A stream may be its direct reply alone: it starts once the agent
    // has said which (at once if it has, as for a resend of a message
    // answered long ago). A resend that races the first send's turn waits
    // for it as the first send does, so it gets the same reply, never the
    // task the reply is kept in.
    let start = Start::FirstAgentEvent(begun.receipt.event);
    Ok(Follow::new(
        shared,
        tenant,
        &begun.receipt.task_id,
        begun.events,
        start,
        true,
        history,
    ))
}

/// What both sends do first: check the message and the push config given
/// with it, receive the message (with the config when it is new), and
/// deliver the config to the task the message went to (stored with the
/// message, or now, before the send is answered). The turn begun (its
/// task followed, as a stream if `streamed`) comes back with the history
/// length the answer wants and the send's configuration.
async fn begin_send(
    shared: &Arc<Shared>,
    tenant: &str,
    params: SendParams,
    key: Option<Key>,
    streamed: bool,
) -> Result<(Begun, Option<usize>, SendConfig), A2aError> {
    let (message, v03) = (&*params.message, params.v03);
    let config = params.configuration.unwrap_or_default();
    let push_config = config.task_push_notification_config.as_ref();
    let push = crate::push::configs::check_inline(shared, push_config, v03)?;
    crate::http::media::check_parts(message.get(), &shared.input_modes, v03)?;
    let history = history_length(config.history_length)?;
    let inbound = Inbound {
        message,
        v03,
        push,
        streamed,
    };
    let mut begun = begin_keyed(shared, tenant, &inbound, key).await?;
    if let Some(config) = &inbound.push {
        let stored = begun.push.take();
        crate::push::configs::set_inline(shared, tenant, &begun.receipt, config, stored).await?;
    }
    Ok((begun, history, config))
}

/// The task a send answers with: whose, which, how much history.
struct Want<'a> {
    tenant: &'a str,
    task_id: &'a str,
    history: Option<usize>,
}

impl Want<'_> {
    /// A task read with its whole history, as the answer shows it.
    fn trim(&self, task: &Task) -> Task {
        let mut task = task.clone();
        if let Some(n) = self.history {
            let drop = task.history.len().saturating_sub(n);
            task.history.drain(..drop);
        }
        task
    }

    /// The task as the answer shows it, with its event count.
    async fn read(&self, shared: &Arc<Shared>) -> Result<(Task, u64), A2aError> {
        let (t, id, history) = (
            self.tenant.to_string(),
            self.task_id.to_string(),
            self.history,
        );
        shared
            .store
            .blocking(move |store| store.task_snapshot(&t, &id, history, true))
            .await
    }
}

/// Waits until the task has events after `base` and is terminal or
/// interrupted (returning it as read then), or the request's time is up. A
/// shutdown shortens the wait to the grace period (in which the turn
/// finishes or is failed). The store is read first only if `read_first`
/// (a new turn has written nothing yet), then again only when a write set
/// a final or interrupted state (only this process writes the store, and it
/// tells the hub of every write).
async fn settle(
    shared: &Arc<Shared>,
    want: &Want<'_>,
    mut events: Follower,
    base: u64,
    read_first: bool,
) -> Result<Option<Task>, A2aError> {
    let mut deadline = tokio::time::Instant::now() + shared.config.request_timeout;
    let mut shutdown = shared.shutdown.clone();
    let mut look = read_first;
    loop {
        if look {
            events.seen();
            let (task, count) = want.read(shared).await?;
            if count > base && settled(task.status.state) {
                return Ok(Some(task));
            }
        }
        if *shutdown.borrow() {
            let grace = tokio::time::Instant::now()
                + shared.config.grace
                + std::time::Duration::from_secs(2);
            deadline = deadline.min(grace);
        }
        tokio::select! {
            () = events.changed() => {
                let written = events.seen();
                if let Some(e) = written.failed {
                    return Err(e);
                }
                // The turn that ended read the task for us.
                if let Some(done) = written.settled.filter(|d| d.count > base) {
                    return Ok(Some(want.trim(&done.task)));
                }
                look = written.state.is_some_and(settled);
            }
            _ = tokio::time::sleep_until(deadline) => return Ok(None),
            _ = shutdown.changed() => look = false,
        }
    }
}

/// The answer to a send: the agent's direct reply, or the task (as
/// `settled` read it, or read now).
async fn answer(
    shared: &Arc<Shared>,
    want: &Want<'_>,
    settled: Option<Task>,
) -> Result<SendOutcome, A2aError> {
    if let Some(why) = shared.turns.invalid_reason(want.tenant, want.task_id) {
        return Err(A2aError::InvalidAgentResponse(why));
    }
    let task = match settled {
        Some(task) => task,
        None => want.read(shared).await?.0,
    };
    Ok(match direct_reply(&task) {
        Some(message) => SendOutcome::Message(Box::new(message)),
        None => SendOutcome::Task(Box::new(task.into_wire())),
    })
}

/// `GetTask`.
#[instrument(level = "debug", skip_all, fields(tenant = %tenant, task = %params.id))]
pub(crate) async fn get_task(
    shared: &Arc<Shared>,
    tenant: &str,
    params: GetParams,
) -> Result<Task, A2aError> {
    let history = history_length(params.history_length)?;
    let t = tenant.to_string();
    let task = shared
        .store
        .blocking(move |store| store.get_task(&t, &params.id, history, true))
        .await?;
    if is_direct_reply(&task) {
        return Err(A2aError::TaskNotFound);
    }
    Ok(task.into_wire())
}

/// `ListTasks`.
#[instrument(level = "debug", skip_all, fields(tenant = %tenant))]
pub(crate) async fn list_tasks(
    shared: &Arc<Shared>,
    tenant: &str,
    params: ListParams,
) -> Result<ListTasksResponse, A2aError> {
    let status = params
        .status
        .as_deref()
        .filter(|s| !s.is_empty() && *s != "TASK_STATE_UNSPECIFIED")
        .map(|s| {
            TaskState::from_name(s).ok_or_else(|| {
                A2aError::invalid(format!(
                    "status: {s:?} is not a task state; use one of TASK_STATE_SUBMITTED, \
                     TASK_STATE_WORKING, TASK_STATE_INPUT_REQUIRED, TASK_STATE_AUTH_REQUIRED, \
                     TASK_STATE_COMPLETED, TASK_STATE_FAILED, TASK_STATE_CANCELED, \
                     TASK_STATE_REJECTED"
                ))
            })
        })
        .transpose()?;
    let after = params
        .status_timestamp_after
        .as_deref()
        .map(|s| {
            ctxlog::time::parse_iso8601_ms(s).ok_or_else(|| {
                A2aError::invalid(format!(
                    "statusTimestampAfter: {s:?} is not an ISO 8601 UTC time such as \
                     2026-01-01T00:00:00Z"
                ))
            })
        })
        .transpose()?;
    let page_size = params
        .page_size
        .map(|n| {
            usize::try_from(n)
                .map_err(|_| A2aError::invalid(format!("pageSize: {n} is not between 1 and 100")))
        })
        .transpose()?;
    let query = ListTasksQuery {
        context_id: params.context_id.filter(|c| !c.is_empty()),
        status,
        status_timestamp_after_ms: after,
        page_size,
        page_token: params.page_token.filter(|t| !t.is_empty()),
        history_length: history_length(params.history_length)?,
        include_artifacts: params.include_artifacts.unwrap_or(false),
    };
    let t = tenant.to_string();
    let page = shared
        .store
        .blocking(move |store| store.list_tasks(&t, &query))
        .await?;
    for damaged in &page.damaged {
        tracing::warn!(task = %damaged.task_id, reason = %damaged.reason, "a task could not be read");
    }
    Ok(ListTasksResponse {
        tasks: page.tasks.into_iter().map(Task::into_wire).collect(),
        ..page
    })
}

/// `CancelTask`: the task is stored CANCELED, its running turn told to
/// stop, and every stream of it told.
#[instrument(level = "debug", skip_all, fields(tenant = %tenant, task = %params.id))]
pub(crate) async fn cancel_task(
    shared: &Arc<Shared>,
    tenant: &str,
    params: IdParams,
) -> Result<Task, A2aError> {
    let (t, id) = (tenant.to_string(), params.id.clone());
    let (task, events) = shared
        .store
        .blocking(move |store| {
            // A direct reply's task was never the client's.
            if store.task_progress(&t, &id)?.direct_reply {
                return Err(ctxlog::Error::TaskNotFound);
            }
            let task = store.cancel_task(&t, &id)?;
            // Its events now: the cancel's among them.
            Ok((task, store.task_progress(&t, &id)?.events))
        })
        .await?;
    shared.turns.cancel(tenant, &params.id);
    shared
        .hub
        .notify(tenant, &params.id, Some(TaskState::Canceled), events);
    Ok(task.into_wire())
}

/// `SubscribeToTask`: the task's snapshot, then its events as they are
/// stored, until it is terminal. With `last_event_id` (a reconnect), the
/// events after it instead, replayed from the store, then live ones; that
/// also serves a task that has become terminal meanwhile. A reconnect at
/// the end of a terminal task gets nothing more and closes; one past the
/// task's last event names no event of it and is refused.
#[instrument(level = "debug", skip_all, fields(tenant = %tenant, task = %params.id))]
pub(crate) async fn subscribe(
    shared: &Arc<Shared>,
    tenant: &str,
    params: IdParams,
    last_event_id: Option<u64>,
) -> Result<Follow, A2aError> {
    let events = shared.hub.follow(tenant, &params.id);
    let (t, id) = (tenant.to_string(), params.id.clone());
    // The state and the count, from memory: a subscriber reads nothing
    // more of the task than its stream sends.
    let progress = shared
        .store
        .blocking(move |store| store.task_progress(&t, &id))
        .await?;
    if progress.direct_reply {
        return Err(A2aError::TaskNotFound);
    }
    let (state, count) = (progress.state, progress.events);
    let terminal = state.is_terminal();
    let start = match last_event_id {
        Some(after) if after > count => {
            return Err(A2aError::invalid(format!(
                "Last-Event-ID: {after} names no event of task {}: it has {count}; resume \
                 from the id of the last event you received from this task's stream",
                params.id
            )))
        }
        Some(after) if after == count && terminal => Start::Ended,
        Some(after) => Start::After(after),
        None if terminal => {
            return Err(A2aError::unsupported(format!(
                "the task is {}, a terminal state: there is nothing to subscribe to (GetTask \
                 reads it; a reconnecting stream sends Last-Event-ID)",
                state.name()
            )))
        }
        None => Start::Snapshot,
    };
    Ok(Follow::new(
        shared, tenant, &params.id, events, start, false, None,
    ))
}

/// `GetExtendedAgentCard`.
pub(crate) fn extended_card(shared: &Shared) -> Result<String, A2aError> {
    // The card declares the operation exactly when a card is configured.
    shared.cards.extended.clone().ok_or_else(|| {
        A2aError::unsupported(
            "this agent has no extended agent card (its card says extendedAgentCard: false)",
        )
    })
}

/// How long a stream may stay idle before a keep-alive comment.
pub(crate) fn keep_alive(shared: &Shared) -> Duration {
    shared.config.keep_alive
}
