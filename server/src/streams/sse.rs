//! Streams that follow a task: what the store holds for it, in the order it
//! was stored, each event with its ctxlog event number as the SSE `id`, so
//! a client that reconnects with `Last-Event-ID` gets exactly the events
//! after it, replayed from the store (also after a restart), then live ones.
//!
//! A stream never keeps events of its own: a write tells it (through the
//! hub) to look at the store again, and it sends what it finds after the
//! last event it sent. So every stream of a task sends the same events in
//! the same order, and one that drops out disturbs no other.
//!
//! What a stream holds is bounded: it reads the store a page at a time
//! (about [`PAGE_BYTES`] of records) and only when its client has taken
//! what it read before (the body is pulled by hyper as the socket drains),
//! and a large event or snapshot is read once for all of a task's streams
//! and sent from that one copy ([`Payload`], shared through the hub's
//! entry for the task), so a hundred slow readers of a large event hold
//! one copy of it, not a hundred.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use ctxlog::a2a::{StreamResponse, TaskState};
use serde_json::value::RawValue;
use tokio::sync::watch;

use crate::error::A2aError;
use crate::state::hub::{Follower, Payload, PayloadKey};
use crate::state::Shared;
use crate::streams::reply::{direct_reply, settled};

/// How much of the store (records' bytes) a stream reads at once.
const PAGE_BYTES: usize = 256 << 10;
/// Snapshots this large are shared among a task's streams (an event is
/// always shared: a stream that finds it saves a read of the store, which
/// for a small event costs far more than the event).
const SHARE_FROM: usize = 8 << 10;

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

/// One item of a stream: its event number, and the object (as SSE-ready
/// JSON) or the error that ends the stream.
pub(crate) struct Item {
    pub(crate) id: Option<u64>,
    pub(crate) body: Result<Bytes, A2aError>,
    /// The stream ends after it (v0.3's `final`).
    pub(crate) last: bool,
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
    /// The stream has read the store to the task's end once since it
    /// started following: every event after `last` has been told since.
    synced: bool,
    /// Of the news last seen: the highest event number told, and the
    /// latest event, ready to send.
    told: u64,
    latest: Option<(u64, Arc<Payload>)>,
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
        mut events: Follower,
        start: Start,
        close_on_interrupt: bool,
        history: Option<usize>,
    ) -> Self {
        events.as_stream();
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
            synced: false,
            told: 0,
            latest: None,
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

    /// The next item, or `None` once the stream is over. (Dropping the
    /// future between items loses nothing: what was read is kept.)
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
            let news = self.events.seen();
            (self.told, self.latest) = (news.events, news.latest);
            let before = (self.last, self.start);
            let progressed = match self.start {
                Start::Events | Start::After(_) | Start::Ended => self.read_events().await,
                Start::Snapshot => self.snapshot(None).await,
                Start::FirstAgentEvent(base) => self.snapshot(Some(base)).await,
            };
            if let Err(e) = progressed {
                self.pending.push_back(Item {
                    id: None,
                    body: Err(e),
                    last: true,
                });
                self.done = true;
                continue;
            }
            // Something to send, or something passed over (a page of the
            // client's own messages): read on before waiting.
            if !self.pending.is_empty() || self.done || (self.last, self.start) != before {
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

    /// The task's state and event count, from the store's memory.
    async fn progress(&self) -> Result<ctxlog::TaskProgress, A2aError> {
        let (t, id) = (self.tenant.clone(), self.task_id.clone());
        self.shared
            .store
            .blocking(move |store| store.task_progress(&t, &id))
            .await
    }

    /// Sends the task as it stands (for the first agent event of a new
    /// turn: once there is one, and as the reply alone if it is one).
    async fn snapshot(&mut self, after: Option<u64>) -> Result<(), A2aError> {
        let task = self.events.task();
        let _reading = task.reading.lock().await;
        let mut count = self.progress().await?.events;
        // Until the agent's first event lands, there is nothing to start
        // with.
        if after.is_some_and(|base| count <= base) {
            return Ok(());
        }
        let payload = match task.payload(PayloadKey::Snapshot(count, self.history)) {
            Some(payload) => payload,
            None => {
                let (t, id, history) = (self.tenant.clone(), self.task_id.clone(), self.history);
                let (snapshot, read) = self
                    .shared
                    .store
                    .blocking(move |store| store.task_snapshot(&t, &id, history, true))
                    .await?;
                let state = Some(snapshot.status.state);
                let payload = match direct_reply(&snapshot) {
                    Some(reply) => payload_of(&reply_json(reply)?, state, true),
                    None => {
                        let response = StreamResponse {
                            task: Some(snapshot.into_wire()),
                            ..StreamResponse::default()
                        };
                        payload_of(&to_json(&response)?, state, false)
                    }
                };
                // Written as it was read (a write may have come between).
                count = read;
                if payload.data.len() >= SHARE_FROM {
                    task.share(PayloadKey::Snapshot(count, self.history), &payload);
                }
                payload
            }
        };
        self.last = count;
        self.synced = true;
        self.start = Start::Events;
        self.send(count, payload);
        Ok(())
    }

    /// Sends the events after the last one sent: the latest one told, and
    /// those another stream of the task holds, then (unless every event
    /// told has been sent) a page from the store. A client's messages are
    /// inputs, not updates: they are passed over (their numbers too), and
    /// not even read.
    async fn read_events(&mut self) -> Result<(), A2aError> {
        let task = self.events.task();
        let _reading = task.reading.lock().await;
        loop {
            let next = self.last + 1;
            if task.is_passed(next) {
                self.last = next;
                continue;
            }
            let latest = self.latest.as_ref().filter(|(seq, _)| *seq == next);
            let Some(payload) = latest
                .map(|(_, payload)| payload.clone())
                .or_else(|| task.payload(PayloadKey::Event(next)))
            else {
                break;
            };
            self.last = next;
            self.send(next, payload);
            if self.done || self.pending.len() >= 16 {
                return Ok(());
            }
        }
        if !self.pending.is_empty() || (self.synced && self.last >= self.told) {
            return Ok(());
        }
        let (t, id, after) = (self.tenant.clone(), self.task_id.clone(), self.last);
        let (events, count) = self
            .shared
            .store
            .blocking(move |store| {
                let page = store.updates_page(&t, &id, after, PAGE_BYTES)?;
                Ok((page, store.task_progress(&t, &id)?.events))
            })
            .await?;
        for (seq, event) in events {
            // The numbers the page skipped are the client's messages.
            task.pass(self.last + 1, seq);
            self.last = seq;
            let payload = event_payload(event)?;
            task.share(PayloadKey::Event(seq), &payload);
            self.send(seq, payload);
            if self.done {
                break;
            }
        }
        // The count was taken after the page: when the page reached it,
        // every event not yet sent will be told.
        self.synced |= self.last == count;
        Ok(())
    }

    /// Queues `payload` as event `seq`; a state it sets may end the stream.
    fn send(&mut self, seq: u64, payload: Arc<Payload>) {
        if payload.reply {
            self.done = true;
        } else if let Some(state) = payload.state {
            if state.is_terminal() || (self.close_on_interrupt && settled(state)) {
                self.done = true;
            }
        }
        self.pending.push_back(Item {
            id: Some(seq),
            body: Ok(Bytes::from_owner(SharedPayload(payload))),
            last: self.done,
        });
    }
}

/// Event `seq` of the task as its streams send it (read back by its writer,
/// who has just stored it, so that they need not read it), unless it is
/// larger than a page: those are read by the streams, and shared while
/// they hold them.
pub(crate) fn written_payload(
    store: &ctxlog::Store,
    tenant: &str,
    task_id: &str,
    seq: u64,
) -> Option<Arc<Payload>> {
    // A page of one event (the first is always taken).
    let page = store
        .updates_page(tenant, task_id, seq.saturating_sub(1), 1)
        .ok()?;
    let (read, event) = page.into_iter().next()?;
    if read != seq {
        return None;
    }
    event_payload(event)
        .ok()
        .filter(|payload| payload.data.len() <= PAGE_BYTES)
}

/// A stored event as its streams send it.
fn event_payload(event: StreamResponse) -> Result<Arc<Payload>, A2aError> {
    let state = event.status_update.as_ref().map(|u| u.status.state);
    Ok(payload_of(&to_json(&event.into_wire())?, state, false))
}

/// A payload as the bytes of a body frame (it stays alive, and shared,
/// until hyper has written it).
struct SharedPayload(Arc<Payload>);

impl AsRef<[u8]> for SharedPayload {
    fn as_ref(&self) -> &[u8] {
        &self.0.data
    }
}

fn to_json(value: &impl serde::Serialize) -> Result<Vec<u8>, A2aError> {
    serde_json::to_vec(value)
        .map_err(|e| A2aError::Internal(format!("an event could not be written: {e}")))
}

fn reply_json(reply: ctxlog::a2a::Message) -> Result<Vec<u8>, A2aError> {
    to_json(&StreamResponse {
        message: Some(reply.into()),
        ..StreamResponse::default()
    })
}

/// A payload of `json`, its line breaks (stored text may hold them, as
/// white space) continued on new `data:` lines, as SSE requires.
fn payload_of(json: &[u8], state: Option<TaskState>, reply: bool) -> Arc<Payload> {
    let data = if json.iter().any(|&b| b == b'\n' || b == b'\r') {
        let mut out = Vec::with_capacity(json.len() + 64);
        let mut bytes = json.iter().peekable();
        while let Some(&b) = bytes.next() {
            match b {
                b'\r' | b'\n' => {
                    if b == b'\r' && bytes.peek() == Some(&&b'\n') {
                        bytes.next();
                    }
                    out.extend_from_slice(b"\ndata: ");
                }
                _ => out.push(b),
            }
        }
        out
    } else {
        json.to_vec()
    };
    Arc::new(Payload { data, state, reply })
}

/// How a binding frames each item.
pub(crate) enum Framing {
    /// JSON-RPC: each item a response to the request of this id.
    JsonRpc {
        /// The request's id.
        id: Box<RawValue>,
        /// Writes each payload in another version's form (v0.3's).
        translate: Option<Translate>,
    },
    /// HTTP+JSON: each item the object itself; an error as an `error`
    /// event.
    Rest {
        /// Writes each payload in another version's form (v0.3's).
        translate: Option<Translate>,
    },
}

/// A payload (v1.0's `StreamResponse`, SSE-ready) in another version's
/// form; `last`: the stream ends after it.
pub(crate) type Translate = fn(&[u8], bool) -> Result<Bytes, A2aError>;

impl Framing {
    /// The item's SSE event, as body frames (the payload among them as it
    /// is, not copied, unless it is translated for a v0.3 client).
    fn frames(&self, item: Item, out: &mut VecDeque<Bytes>) {
        let id = item.id.map(|id| format!("id: {id}\n")).unwrap_or_default();
        let translate = match self {
            Framing::JsonRpc { translate, .. } | Framing::Rest { translate } => translate,
        };
        let body = match (translate, item.body) {
            (Some(translate), Ok(payload)) => translate(&payload, item.last),
            (_, body) => body,
        };
        match (self, body) {
            (Framing::JsonRpc { id: rpc, .. }, Ok(payload)) => {
                out.push_back(Bytes::from(format!(
                    "{id}data: {{\"jsonrpc\":\"2.0\",\"id\":{},\"result\":",
                    rpc.get()
                )));
                out.push_back(payload);
                out.push_back(Bytes::from_static(b"}\n\n"));
            }
            (Framing::Rest { .. }, Ok(payload)) => {
                out.push_back(Bytes::from(format!("{id}data: ")));
                out.push_back(payload);
                out.push_back(Bytes::from_static(b"\n\n"));
            }
            (Framing::JsonRpc { id: rpc, .. }, Err(e)) => out.push_back(Bytes::from(format!(
                "{id}data: {{\"jsonrpc\":\"2.0\",\"id\":{},\"error\":{}}}\n\n",
                rpc.get(),
                e.jsonrpc_error()
            ))),
            (Framing::Rest { .. }, Err(e)) => out.push_back(Bytes::from(format!(
                "{id}event: error\ndata: {}\n\n",
                e.rest_body()
            ))),
        }
    }
}

/// The SSE response of a stream: its events as they come, and a comment
/// line after each `keep_alive` without one.
pub(crate) fn respond(follow: Follow, framing: Framing, keep_alive: Duration) -> Response {
    let state = (follow, framing, VecDeque::new());
    let stream =
        futures_util::stream::unfold(state, move |(mut follow, framing, mut out)| async move {
            loop {
                if let Some(frame) = out.pop_front() {
                    return Some((Ok::<_, Infallible>(frame), (follow, framing, out)));
                }
                match tokio::time::timeout(keep_alive, follow.next()).await {
                    Ok(Some(item)) => framing.frames(item, &mut out),
                    Ok(None) => return None,
                    Err(_) => out.push_back(Bytes::from_static(b":\n\n")),
                }
            }
        });
    (
        StatusCode::OK,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        Body::from_stream(stream),
    )
        .into_response()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_breaks_in_a_payload_continue_on_new_data_lines() {
        let p = payload_of(b"{\"a\":\r\n1,\n\"b\":\r2}", None, false);
        assert_eq!(p.data, b"{\"a\":\ndata: 1,\ndata: \"b\":\ndata: 2}");
        let plain = payload_of(b"{\"a\":1}", None, false);
        assert_eq!(plain.data, b"{\"a\":1}");
    }
}
