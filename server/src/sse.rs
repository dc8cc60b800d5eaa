//! Streams that follow a task: what the store holds for it, in the order it
//! was stored, each event with its ctxlog event number as the SSE `id`, so
//! a client that reconnects with `Last-Event-ID` gets exactly the events
//! after it, replayed from the store (also after a restart), then live ones.
//!
//! A stream never keeps events of its own: a write tells it (through the
//! hub) to look at the store again, and it sends what it finds after the
//! last event it sent. So every stream of a task sends the same events in
//! the same order, and one that drops out disturbs no other.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use axum::response::sse::{Event, KeepAlive, Sse};
use ctxlog::a2a::{StreamResponse, TaskState};
use futures_util::Stream;
use serde_json::value::RawValue;
use tokio::sync::watch;

use crate::core::{direct_reply, settled};
use crate::error::A2aError;
use crate::state::{Follower, Shared};

/// Where a stream starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// With the task as it stands.
    Snapshot,
    /// Once the agent's first event of a new turn is stored (the task has
    /// more events than this): with the task then, or, if that event was a
    /// direct reply, with the reply alone.
    FirstAgentEvent(u64),
    /// With the events after this one (a reconnect).
    After(u64),
    /// With the next events (the start was sent).
    Events,
    /// Nothing: the client has every event of a finished task.
    Ended,
}

/// One item of a stream: its event number, and the object (as JSON) or
/// the error that ends the stream.
pub(crate) struct Item {
    pub(crate) id: Option<u64>,
    pub(crate) body: Result<String, A2aError>,
}

/// A stream following one task.
pub(crate) struct Follow {
    shared: Arc<Shared>,
    tenant: String,
    task_id: String,
    events: Follower,
    shutdown: watch::Receiver<bool>,
    start: Start,
    /// The last event sent (or skipped).
    last: u64,
    /// Close after an interrupted state too (the streaming send does).
    close_on_interrupt: bool,
    history: Option<usize>,
    pending: VecDeque<Item>,
    done: bool,
}

impl Follow {
    pub(crate) fn new(
        shared: &Arc<Shared>,
        tenant: &str,
        task_id: &str,
        events: Follower,
        start: Start,
        close_on_interrupt: bool,
        history: Option<usize>,
    ) -> Self {
        Follow {
            shared: shared.clone(),
            tenant: tenant.to_string(),
            task_id: task_id.to_string(),
            events,
            shutdown: shared.shutdown.clone(),
            last: match start {
                Start::After(n) => n,
                _ => 0,
            },
            start: match start {
                Start::After(_) => Start::Events,
                other => other,
            },
            close_on_interrupt,
            history,
            pending: VecDeque::new(),
            done: start == Start::Ended,
        }
    }

    /// The next item, or `None` once the stream is over.
    pub(crate) async fn next(&mut self) -> Option<Item> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Some(item);
            }
            if self.done {
                return None;
            }
            // Marked seen before the store is read: a write after the read
            // is then never missed.
            self.events.seen();
            let progressed = match self.start {
                Start::Events | Start::After(_) | Start::Ended => self.read_events().await,
                Start::Snapshot => self.snapshot(None).await,
                Start::FirstAgentEvent(base) => self.snapshot(Some(base)).await,
            };
            if let Err(e) = progressed {
                self.pending.push_back(Item {
                    id: None,
                    body: Err(e),
                });
                self.done = true;
                continue;
            }
            if !self.pending.is_empty() || self.done {
                continue;
            }
            if *self.shutdown.borrow() {
                self.done = true;
                continue;
            }
            tokio::select! {
                () = self.events.changed() => {}
                _ = self.shutdown.changed() => self.done = true,
            }
        }
    }

    /// Sends the task as it stands (for the first agent event of a new
    /// turn: once there is one, and as the reply alone if it is one).
    async fn snapshot(&mut self, after: Option<u64>) -> Result<(), A2aError> {
        let (t, id, history) = (self.tenant.clone(), self.task_id.clone(), self.history);
        let (task, events) = self
            .shared
            .blocking(move |store| store.task_snapshot(&t, &id, history, true))
            .await?;
        let state = task.status.state;
        // Until the agent's first event lands, there is nothing to start
        // with.
        if after.is_some_and(|base| events <= base) {
            return Ok(());
        }
        self.start = Start::Events;
        self.last = events;
        if let Some(reply) = direct_reply(&task) {
            self.push(events, &StreamResponse::default(), Some(reply))?;
            self.done = true;
            return Ok(());
        }
        let response = StreamResponse {
            task: Some(task),
            ..StreamResponse::default()
        };
        self.push(events, &response, None)?;
        self.close_if(state);
        Ok(())
    }

    /// Sends the events after the last one sent. A client's messages are
    /// inputs, not updates: they are passed over (their numbers too).
    async fn read_events(&mut self) -> Result<(), A2aError> {
        let (t, id, after) = (self.tenant.clone(), self.task_id.clone(), self.last);
        let events = self
            .shared
            .blocking(move |store| store.events_since(&t, &id, after))
            .await?;
        for (seq, event) in events {
            self.last = seq;
            if event.message.is_some() {
                continue;
            }
            self.push(seq, &event, None)?;
            if let Some(update) = &event.status_update {
                self.close_if(update.status.state);
                if self.done {
                    break;
                }
            }
        }
        Ok(())
    }

    fn push(
        &mut self,
        seq: u64,
        response: &StreamResponse,
        reply: Option<Box<RawValue>>,
    ) -> Result<(), A2aError> {
        let body = match reply {
            Some(message) => serde_json::to_string(&serde_json::json!({ "message": message })),
            None => serde_json::to_string(response),
        }
        .map_err(|e| A2aError::Internal(format!("an event could not be written: {e}")))?;
        self.pending.push_back(Item {
            id: Some(seq),
            body: Ok(body),
        });
        Ok(())
    }

    fn close_if(&mut self, state: TaskState) {
        if state.is_terminal() || (self.close_on_interrupt && settled(state)) {
            self.done = true;
        }
    }
}

/// How a binding frames each item.
pub(crate) enum Framing {
    /// JSON-RPC: each item a response to the request of this id.
    JsonRpc(Box<RawValue>),
    /// HTTP+JSON: each item the object itself; an error as an `error` event.
    Rest,
}

impl Framing {
    fn event(&self, item: Item) -> Event {
        let event = Event::default();
        let event = match item.id {
            Some(id) => event.id(id.to_string()),
            None => event,
        };
        match (self, item.body) {
            (Framing::JsonRpc(id), Ok(body)) => event.data(format!(
                r#"{{"jsonrpc":"2.0","id":{},"result":{body}}}"#,
                id.get()
            )),
            (Framing::JsonRpc(id), Err(e)) => event.data(format!(
                r#"{{"jsonrpc":"2.0","id":{},"error":{}}}"#,
                id.get(),
                e.jsonrpc_error()
            )),
            (Framing::Rest, Ok(body)) => event.data(body),
            (Framing::Rest, Err(e)) => event.event("error").data(e.rest_body().to_string()),
        }
    }
}

/// The SSE response of a stream.
pub(crate) fn respond(
    follow: Follow,
    framing: Framing,
    keep_alive: std::time::Duration,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let stream =
        futures_util::stream::unfold((follow, framing), |(mut follow, framing)| async move {
            let item = follow.next().await?;
            let event = framing.event(item);
            Some((Ok(event), (follow, framing)))
        });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(keep_alive))
}

/// A `Last-Event-ID` header's event number.
pub(crate) fn last_event_id(headers: &axum::http::HeaderMap) -> Result<Option<u64>, A2aError> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or_default().trim();
    text.parse().map(Some).map_err(|_| {
        A2aError::invalid(format!(
            "Last-Event-ID: {text:?} is not an event number this server sent"
        ))
    })
}
