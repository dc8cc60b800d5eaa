//! The A2A task model on top of the store: its types, status and artifact
//! events, cancel, and the helpers receiving (`receive.rs`) and reading
//! (`task_reads.rs`) share.

use std::sync::Arc;

use serde_json::value::RawValue;

use super::{
    bad_cursor, decode_cursor, encode_cursor, next_timestamp, ContextRecords, Hints, Store,
};
use crate::a2a::json::{self, Members};
use crate::a2a::lifecycle::Op;
use crate::a2a::DIRECT_REPLY;
use crate::a2a::{
    Artifact, Message, Part, Role, Stored, StreamResponse, Task, TaskArtifactUpdateEvent,
    TaskState, TaskStatus, TaskStatusUpdateEvent,
};
use crate::error::{Error, Result};
use crate::index::tasks::IdKey;
use crate::index::{prefix_of_id, ContextSlot, Life};
use crate::log::record::{RecordKind, TaskLink};
use crate::log::segments::RecordLoc;
use crate::namespace::{task_key, ContextKey};
use crate::time::iso8601_ms;

/// What receiving a message did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    /// The context the message is in (made by the store if the message had none).
    pub context_id: String,
    /// The task the message is in (made by the store for a new task).
    pub task_id: String,
    /// The message's seq in its context.
    pub seq: u64,
    /// This messageId had been received before: nothing was stored, and this
    /// is the first receipt again.
    pub duplicate: bool,
    /// The message opened its context.
    pub new_context: bool,
    /// The message opened its task.
    pub new_task: bool,
    /// The message's event number in its task (from 1; see
    /// [`events_since`](Store::events_since)): what its turn writes comes
    /// after it.
    pub event: u64,
}

impl Receipt {
    /// A status update for the message's task (for
    /// [`update_status`](Store::update_status)).
    pub fn status_update(&self, status: TaskStatus) -> TaskStatusUpdateEvent {
        TaskStatusUpdateEvent::new(&self.task_id, &self.context_id, status)
    }

    /// The first chunk of an artifact of the message's task (for
    /// [`add_artifact`](Store::add_artifact)).
    pub fn artifact_update(&self, artifact: Artifact) -> TaskArtifactUpdateEvent {
        TaskArtifactUpdateEvent::new(&self.task_id, &self.context_id, artifact)
    }
}

/// How [`Store::receive_message_with`] takes a message's messageId.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MessageIds {
    /// The messageId names the message: a resend (the same messageId, in
    /// the context the message names or its task's, or within the tenant
    /// for a message that names neither) is recognised, nothing is stored,
    /// and the first receipt comes back; the same messageId with other
    /// content there is `IdempotencyConflict`. The default.
    #[default]
    Idempotent,
    /// The messageId is the client's label: every message is new, and is
    /// stored, however many share a messageId.
    Labels,
}

/// What [`Store::task_progress`] tells of a task, from memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskProgress {
    /// Its state.
    pub state: TaskState,
    /// How many events it has.
    pub events: u64,
    /// Its turn ended in a direct reply (its COMPLETED status carries
    /// [`DIRECT_REPLY`](crate::a2a::DIRECT_REPLY)): the client got a
    /// message, not this task.
    pub direct_reply: bool,
}

/// Where a task is: its tenant, context and id, and its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRef {
    /// The tenant.
    pub tenant: String,
    /// The task's context.
    pub context_id: String,
    /// The task.
    pub task_id: String,
    /// Its state.
    pub state: TaskState,
}

/// An event recorded for a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRecord {
    /// The task.
    pub task_id: String,
    /// The event's per-task sequence number, from 1.
    pub seq: u64,
}

/// The filters and paging of [`Store::list_tasks`]; build it with
/// `..Default::default()` for the fields you do not set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListTasksQuery {
    /// Only tasks of this context.
    pub context_id: Option<String>,
    /// Only tasks in this state.
    pub status: Option<TaskState>,
    /// Only tasks whose status was recorded at or after this instant (ms
    /// since the epoch; the A2A `statusTimestampAfter`, whose proto says
    /// "greater than or equal").
    pub status_timestamp_after_ms: Option<u64>,
    /// 1 to 100; default 50.
    pub page_size: Option<usize>,
    /// The previous page's `nextPageToken`.
    pub page_token: Option<String>,
    /// Unset: the whole history; 0: none; N: the last N messages.
    pub history_length: Option<usize>,
    /// Include each task's artifacts (default: omit them).
    pub include_artifacts: bool,
}

impl Store {
    /// Applies the agent's status update. A status message joins the history.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::a2a::{Message, Role, TaskState, TaskStatus};
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// # let r = store.receive_message("acme", br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#)?;
    /// // r: the receipt of the client's message.
    /// store.update_status("acme", &r.status_update(TaskStatus::new(TaskState::Working)))?;
    /// let reply = Message::new("a1", Role::Agent, &["Done."]);
    /// let done = TaskStatus::new(TaskState::Completed).with_message(reply);
    /// store.update_status("acme", &r.status_update(done))?;
    /// let task = store.get_task("acme", &r.task_id, None, false)?;
    /// assert_eq!(task.status.state, TaskState::Completed);
    /// assert_eq!(task.history.len(), 2); // the client's message and the reply
    /// // A terminal state is final.
    /// let again = r.status_update(TaskStatus::new(TaskState::Working));
    /// assert!(store.update_status("acme", &again).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn update_status(
        &self,
        tenant: &str,
        event: &TaskStatusUpdateEvent,
    ) -> Result<EventRecord> {
        let slot = self.task_slot(tenant, &event.task_id)?;
        let _turn = slot.write.lock();
        self.status_event(&slot, event)?.append(self, &slot)
    }

    /// The record of a status update, checked (the caller holds the
    /// context's lock).
    pub(super) fn status_event(
        &self,
        slot: &ContextSlot,
        event: &TaskStatusUpdateEvent,
    ) -> Result<Event> {
        let checked = self.check_task_op(
            slot,
            &event.task_id,
            Some(&event.context_id),
            Op::Status(event.status.state),
        )?;
        status_record(&event.task_id, &event.status, checked)
    }

    /// Applies an artifact chunk: `append: false` creates or replaces the
    /// artifact, `append: true` extends it; nothing may follow `lastChunk`.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::a2a::{Artifact, Part};
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// # let r = store.receive_message("acme", br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#)?;
    /// // r: the receipt of the client's message.
    /// let first = Artifact::new("report", vec![Part::text("Refunded ")]);
    /// store.add_artifact("acme", &r.artifact_update(first))?;
    /// let rest = Artifact::new("report", vec![Part::text("$42.00")]);
    /// store.add_artifact("acme", &r.artifact_update(rest).appending().last())?;
    /// let task = store.get_task("acme", &r.task_id, Some(0), true)?;
    /// let artifacts = task.artifacts.unwrap_or_default();
    /// assert_eq!(artifacts[0].parts.len(), 2); // the chunks, joined
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn add_artifact(
        &self,
        tenant: &str,
        event: &TaskArtifactUpdateEvent,
    ) -> Result<EventRecord> {
        let slot = self.task_slot(tenant, &event.task_id)?;
        let _turn = slot.write.lock();
        self.artifact_event(&slot, event)?.append(self, &slot)
    }

    /// The record of an artifact chunk, checked (the caller holds the
    /// context's lock).
    pub(super) fn artifact_event(
        &self,
        slot: &ContextSlot,
        event: &TaskArtifactUpdateEvent,
    ) -> Result<Event> {
        let artifact_id = &event.artifact.artifact_id;
        let op = Op::Artifact {
            artifact_id,
            append: event.append,
        };
        let checked = self.check_task_op(slot, &event.task_id, Some(&event.context_id), op)?;
        let blob = match event.artifact.raw_json() {
            Some(raw) => raw.as_bytes().to_vec(),
            None => to_json(&*event.artifact)?,
        };
        let kind = RecordKind::Artifact {
            task_id: event.task_id.clone(),
            artifact_id: artifact_id.clone(),
            append: event.append,
            last_chunk: event.last_chunk,
        };
        Ok(Event {
            kind,
            blob,
            hints: Hints::default(),
            checked,
            task_id: event.task_id.clone(),
        })
    }

    /// Applies one agent event given as an A2A `StreamResponse` (JSON) that
    /// carries a `statusUpdate` or an `artifactUpdate`. The status or the
    /// artifact chunk is stored as its text came (checked as a received
    /// message is: strict JSON, no key twice in any object).
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// # let r = store.receive_message("acme", br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#)?;
    /// // r: the receipt of the client's message.
    /// let event = format!(
    ///     r#"{{"statusUpdate":{{"taskId":"{}","contextId":"{}","status":{{"state":"TASK_STATE_WORKING"}}}}}}"#,
    ///     r.task_id, r.context_id
    /// );
    /// let stored = store.apply_event("acme", event.as_bytes())?;
    /// assert_eq!(stored.seq, 2); // the message was event 1
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn apply_event(&self, tenant: &str, raw: &[u8]) -> Result<EventRecord> {
        let invalid = |reason: String| Error::InvalidParams {
            field: "event",
            reason,
        };
        json::canonical(raw).map_err(|e| invalid(e.to_string()))?;
        let event: StreamResponse = serde_json::from_slice(raw).map_err(|e| {
            invalid(format!(
                "not an A2A StreamResponse: {e}{}",
                v03_hint(raw).unwrap_or_default()
            ))
        })?;
        match (event.status_update, event.artifact_update) {
            (Some(status), None) => self.update_status(tenant, &status),
            (None, Some(artifact)) => self.add_artifact(tenant, &artifact),
            _ => Err(Error::InvalidParams {
                field: "event",
                reason: format!(
                    "give exactly one of statusUpdate and artifactUpdate{}",
                    v03_hint(raw).unwrap_or_default()
                ),
            }),
        }
    }

    /// Cancels a task that is not in a terminal state, and returns it.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::a2a::TaskState;
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// # let r = store.receive_message("acme", br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#)?;
    /// let task = store.cancel_task("acme", &r.task_id)?;
    /// assert_eq!(task.status.state, TaskState::Canceled);
    /// assert!(matches!(
    ///     store.cancel_task("acme", &r.task_id),
    ///     Err(ctxlog::Error::TaskNotCancelable { .. })
    /// ));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cancel_task(&self, tenant: &str, task_id: &str) -> Result<Task> {
        let slot = self.task_slot(tenant, task_id)?;
        {
            let _turn = slot.write.lock();
            let checked = self.check_task_op(&slot, task_id, None, Op::Cancel)?;
            let status = TaskStatus {
                state: TaskState::Canceled,
                message: None,
                timestamp: None,
                extra: Default::default(),
            };
            status_record(task_id, &Stored::new(status), checked)?.append(self, &slot)?;
        }
        self.get_task(tenant, task_id, None, true)
    }

    /// The slot of the live context of a task of this tenant.
    pub(super) fn task_slot(&self, tenant: &str, task_id: &str) -> Result<Arc<ContextSlot>> {
        let slot = self.find_task(tenant, task_id).ok_or(Error::TaskNotFound)?;
        if self.life(&slot) != Life::Live {
            return Err(Error::TaskNotFound);
        }
        Ok(slot)
    }

    /// The context of a task of this tenant, live or not: through the
    /// prefix of a store-made id, else through the task map.
    pub(super) fn find_task(&self, tenant: &str, task_id: &str) -> Option<Arc<ContextSlot>> {
        if let IdKey::Made(bytes) = IdKey::of(task_id) {
            if let Some(slot) = self.index.prefix_context(&prefix_of_id(&bytes)) {
                let state = slot.state.read();
                let owned = state.meta.as_ref().is_some_and(|m| m.tenant() == tenant);
                if owned && state.task_pos(task_id).is_some() {
                    drop(state);
                    return Some(slot);
                }
            }
        }
        if !self.index.any_task_entry() {
            return None;
        }
        self.index.task_context(&task_key(tenant, task_id))
    }

    /// A task id no task of this tenant has, for a new task in the context
    /// of `slot` (whose write lock the caller holds): the context's prefix
    /// and 64 random bits.
    pub(super) fn fresh_task_id(&self, tenant: &str, slot: &ContextSlot) -> Result<String> {
        loop {
            let random = crate::random::bytes("draw a random task id")?;
            let id = slot.state.read().task_id_with(random);
            if self.find_task(tenant, &id).is_none() {
                return Ok(id);
            }
        }
    }

    /// Checks `op` on the task (the caller holds the context's write lock,
    /// so nothing else reaches the task before the record is appended).
    fn check_task_op(
        &self,
        slot: &ContextSlot,
        task_id: &str,
        context_id: Option<&str>,
        op: Op<'_>,
    ) -> Result<Checked> {
        let state = slot.state.read();
        if context_id.is_some_and(|c| c != context_of(&state).unwrap_or_default()) {
            return Err(mismatch());
        }
        let task = state.task(task_id).ok_or(Error::TaskNotFound)?;
        task.check(op)?;
        Ok(Checked {
            timestamp_ms: next_timestamp(&state),
            event_seq: task.event_count() as u64 + 1,
        })
    }

    /// The slots of the tenant's listed contexts (only `context_id`'s, if
    /// given); the caller checks that each is still live.
    pub(super) fn tenant_contexts(
        &self,
        tenant: &str,
        context_id: Option<&str>,
    ) -> Result<Vec<Arc<ContextSlot>>> {
        Ok(match context_id {
            Some(c) => self
                .index
                .get(&ContextKey::derive(tenant, c)?)
                .into_iter()
                .collect(),
            None => self
                .index
                .tenant_page(tenant, None, usize::MAX)
                .into_iter()
                .map(|(_, slot)| slot)
                .collect(),
        })
    }

    /// A store-made contextId no context of this tenant has.
    pub(super) fn fresh_context_id(&self, tenant: &str) -> Result<String> {
        loop {
            let id = random_id()?;
            let key = ContextKey::derive(tenant, &id)?;
            if self.index.get(&key).is_none() {
                return Ok(id);
            }
        }
    }
}

/// What checking an operation on a task gives the event it records.
#[derive(Debug, Clone, Copy)]
pub(super) struct Checked {
    /// The timestamp for its record.
    pub(super) timestamp_ms: u64,
    /// Its per-task sequence number: one past the task's events so far.
    event_seq: u64,
}

impl Checked {
    /// The record of the event, once appended.
    pub(super) fn record(self, task_id: &str) -> EventRecord {
        EventRecord {
            task_id: task_id.to_string(),
            seq: self.event_seq,
        }
    }
}

/// A task event checked under its context's lock: the record to append,
/// and what it answers once appended.
pub(super) struct Event {
    pub(super) kind: RecordKind,
    pub(super) blob: Vec<u8>,
    pub(super) hints: Hints,
    pub(super) checked: Checked,
    pub(super) task_id: String,
}

impl Event {
    /// Appends it (durably; the caller holds the context's lock).
    fn append(self, store: &Store, slot: &ContextSlot) -> Result<EventRecord> {
        let at = self.checked.timestamp_ms;
        store.append_record(slot, None, self.kind, &self.blob, at, self.hints)?;
        Ok(self.checked.record(&self.task_id))
    }
}

/// The record of a status of task `task_id`.
fn status_record(task_id: &str, status: &Stored<TaskStatus>, checked: Checked) -> Result<Event> {
    let blob = status_blob(status, checked.timestamp_ms)?;
    let kind = RecordKind::Status {
        task_id: task_id.to_string(),
        state: status.state,
        with_message: status.message.is_some(),
    };
    let hints = Hints {
        direct_reply: status.state == TaskState::Completed
            && status.extra.get(DIRECT_REPLY) == Some(&serde_json::Value::Bool(true)),
        ..Hints::default()
    };
    Ok(Event {
        kind,
        blob,
        hints,
        checked,
        task_id: task_id.to_string(),
    })
}

/// The record kind of a received message, joining or opening `task_id`.
pub(super) fn inbound(
    task_id: &str,
    opens_task: bool,
    msg: &Message,
    digest: [u8; 32],
) -> RecordKind {
    RecordKind::Message {
        task: Some(TaskLink {
            task_id: task_id.to_string(),
            opens_task,
            message_id: msg.message_id.clone(),
            digest,
        }),
    }
}

pub(super) fn context_of(state: &crate::index::ContextState) -> Result<&str> {
    state
        .meta
        .as_ref()
        .map(crate::index::ContextMeta::context_id)
        .ok_or(Error::TaskNotFound)
}

pub(super) fn mismatch() -> Error {
    Error::InvalidParams {
        field: "contextId",
        reason: "it does not match the task's context; omit it or send the task's contextId".into(),
    }
}

/// Parses and checks an inbound message, and digests it: SHA-256 of its
/// canonical JSON (`json::check_and_digest`: keys sorted, no white space,
/// numbers as written), so two sends of one message digest alike however
/// they were spaced, and never alike when a value differs. A document with
/// a key twice in any object is refused: it would read back otherwise than
/// it was checked.
/// What to write instead, for JSON in the form of A2A v0.3 (lowercase roles
/// and states, a `kind` on every part and object), which v1.0 refuses: the
/// store takes the form of the version it implements, and says what that
/// form is rather than only that a variant is unknown.
fn v03_hint(raw: &[u8]) -> Option<&'static str> {
    let value: serde_json::Value = serde_json::from_slice(raw).ok()?;
    let mut found = false;
    let mut stack = vec![&value];
    while let Some(v) = stack.pop() {
        match v {
            serde_json::Value::Object(o) => {
                found |= o.contains_key("kind")
                    || o.get("role")
                        .and_then(|r| r.as_str())
                        .is_some_and(|r| matches!(r, "user" | "agent"))
                    || o.get("state")
                        .and_then(|r| r.as_str())
                        .is_some_and(|s| !s.starts_with("TASK_STATE_"))
                    || o.contains_key("final");
                stack.extend(o.values());
            }
            serde_json::Value::Array(a) => stack.extend(a),
            _ => {}
        }
    }
    found.then_some(
        "; this looks like A2A v0.3 JSON, and the store takes v1.0: a role is \"ROLE_USER\" or \
         \"ROLE_AGENT\" (not \"user\"), a state is \"TASK_STATE_WORKING\" and the like (not \
         \"working\"), and parts and objects carry no \"kind\" (a text part is {\"text\": \"...\"}); \
         an event is {\"statusUpdate\": {...}} or {\"artifactUpdate\": {...}}, without \"final\"",
    )
}

/// The form an inbound message comes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Form {
    /// A2A v1.0's, the store's own.
    V1,
    /// A2A v0.3's, translated to v1.0's for everything but its storage.
    V03,
}

/// [`parse_message`] of a message in `form`: one in v0.3's is checked as
/// JSON as it came (a key twice is refused before the translation could
/// hide it), then translated, and checked and digested in v1.0's form.
pub(super) fn parse_inbound(raw: &[u8], form: Form) -> Result<(Message, [u8; 32])> {
    match form {
        Form::V1 => parse_message(raw),
        Form::V03 => {
            let invalid = |reason: String| Error::InvalidParams {
                field: "message",
                reason,
            };
            json::check_and_digest(raw).map_err(|e| invalid(e.to_string()))?;
            let v1 = crate::a2a::v03::message_to_v1(raw).map_err(invalid)?;
            parse_message(v1.as_bytes())
        }
    }
}

/// A stored message's bytes, in whichever form it was received.
pub(super) fn stored_form(raw: &[u8]) -> Form {
    match crate::a2a::v03::is_v03_message(raw) {
        true => Form::V03,
        false => Form::V1,
    }
}

/// A stored message as the task model reads it: v1.0's form, a message
/// received in v0.3's translated ([`Store::receive_v03_message`]). One
/// that is neither answers v1.0's error.
///
/// Each form's reading refuses the other's (v1.0 has no role `user` or
/// `agent` and always `parts`; v0.3's role is one of those, or it has
/// `content` and no `parts`), so the order of the two tries changes no
/// answer, only its cost: a blob with a `"kind"` or `"content"` member,
/// as every v0.3 message has (a v1.0 one only in its values or among
/// members it does not define), is tried as v0.3 first, any other as
/// v1.0 first.
pub(super) fn stored_message(bytes: &[u8]) -> std::result::Result<Stored<Message>, String> {
    let text = stored_text(bytes)?;
    let v03 = || -> Option<Stored<Message>> {
        let value = serde_json::from_str(text).ok()?;
        let v1 = crate::a2a::v03::message_value_to_v1(value).ok()?;
        Stored::from_value(v1).ok()
    };
    let likely_v03 = text.contains("\"kind\"") || text.contains("\"content\"");
    if likely_v03 {
        if let Some(message) = v03() {
            return Ok(message);
        }
    }
    Stored::from_json(text).or_else(|v1_error| match likely_v03 {
        true => Err(unparsed(v1_error)),
        false => v03().ok_or_else(|| unparsed(v1_error)),
    })
}

pub(super) fn parse_message(raw: &[u8]) -> Result<(Message, [u8; 32])> {
    if std::str::from_utf8(raw).is_err() {
        let lossy = String::from_utf8_lossy(raw);
        if let Ok(m) = serde_json::from_str::<Message>(&lossy) {
            if m.context_id.is_some_and(|c| c.contains('\u{fffd}')) {
                return Err(Error::ContextRejected {
                    reason: "it is not valid UTF-8; send a contextId of valid UTF-8".into(),
                });
            }
        }
    }
    let not_a_message = |e: serde_json::Error| Error::InvalidParams {
        field: "message",
        reason: format!(
            "not an A2A Message in JSON: {e}{}",
            v03_hint(raw).unwrap_or_default()
        ),
    };
    let digest = json::check_and_digest(raw).map_err(|e| Error::InvalidParams {
        field: "message",
        reason: e.to_string(),
    })?;
    let msg: Message = serde_json::from_slice(raw).map_err(not_a_message)?;
    let invalid = |field, reason: &str| {
        Err(Error::InvalidParams {
            field,
            reason: reason.to_string(),
        })
    };
    if msg.message_id.is_empty() {
        return invalid("messageId", "it is empty; every message needs a messageId");
    }
    if msg.role != Role::User {
        return invalid("role", "an inbound message must have role ROLE_USER");
    }
    if msg.parts.is_empty() {
        return invalid("parts", "a message needs at least one part");
    }
    if let Some(problem) = msg.parts.iter().find_map(Part::problem) {
        return invalid("parts", problem);
    }
    if msg.task_id.as_deref() == Some("") {
        return invalid("taskId", "it is empty; omit it to start a new task");
    }
    Ok((msg, digest))
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| Error::InvalidParams {
        field: "json",
        reason: e.to_string(),
    })
}

/// A stored object, kept with its text (see [`Stored`]).
pub(super) fn from_json<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
) -> std::result::Result<Stored<T>, String> {
    Stored::from_json(stored_text(bytes)?).map_err(unparsed)
}

/// A stored object's bytes as text, borrowed (the object keeps one copy
/// of its own).
fn stored_text(bytes: &[u8]) -> std::result::Result<&str, String> {
    std::str::from_utf8(bytes).map_err(|_| "a stored object is not UTF-8".to_string())
}

fn blob_text(bytes: &[u8]) -> std::result::Result<String, String> {
    stored_text(bytes).map(str::to_string)
}

fn unparsed(e: serde_json::Error) -> String {
    format!("a stored object does not parse: {e}")
}

/// The status as its record keeps it: the text the agent sent (or the
/// value's JSON), with the store's time as its `timestamp` if it had none.
fn status_blob(status: &Stored<TaskStatus>, timestamp_ms: u64) -> Result<Vec<u8>> {
    let stamp = iso8601_ms(timestamp_ms);
    let raw = match (status.raw_json(), &status.timestamp) {
        (Some(raw), Some(_)) => return Ok(raw.as_bytes().to_vec()),
        (Some(raw), None) => raw,
        (None, _) => {
            let mut value = TaskStatus::clone(status);
            value.timestamp.get_or_insert(stamp);
            return to_json(&value);
        }
    };
    let invalid = |e: serde_json::Error| Error::InvalidParams {
        field: "status",
        reason: e.to_string(),
    };
    let mut members = Members::of(raw).map_err(invalid)?;
    let stamp =
        RawValue::from_string(serde_json::to_string(&stamp).map_err(invalid)?).map_err(invalid)?;
    members.set("timestamp", &stamp);
    Ok(members.to_text().into_bytes())
}

/// An artifact whole. One chunk is served as it was stored; several are
/// joined around their parts: the first chunk's members in their order,
/// every later chunk's parts appended (each part's text as stored), and
/// any other member a later chunk sets (not to `null` or `[]`) taking
/// that chunk's value.
pub(super) fn read_artifact(
    records: &mut ContextRecords,
    chunks: &[RecordLoc],
) -> Result<Stored<Artifact>> {
    let texts = chunks
        .iter()
        .map(|&loc| {
            let text = records.record(loc, |_, blob| blob_text(blob))?;
            text.map(|t| (loc, t))
                .map_err(|e| Error::corrupt(loc.segment, u64::from(loc.offset), e))
        })
        .collect::<Result<Vec<_>>>()?;
    let (first, rest) = texts
        .split_first()
        .ok_or_else(|| Error::corrupt(0, 0, "an artifact with no chunks"))?;
    let bad = |e: String| Error::corrupt(first.0.segment, u64::from(first.0.offset), e);
    let whole = if rest.is_empty() {
        first.1.clone()
    } else {
        join_chunks(texts.iter().map(|(_, t)| t.as_str())).map_err(bad)?
    };
    from_json(whole.as_bytes()).map_err(bad)
}

/// The record at `loc` as JSON.
pub(super) fn read_json<T: serde::de::DeserializeOwned>(
    records: &mut ContextRecords,
    loc: RecordLoc,
) -> Result<Stored<T>> {
    records
        .record(loc, |_, blob| from_json(blob))?
        .map_err(|e| Error::corrupt(loc.segment, u64::from(loc.offset), e))
}

/// Several chunks of one artifact as one object (see `read_artifact`).
fn join_chunks<'a>(
    mut chunks: impl Iterator<Item = &'a str>,
) -> std::result::Result<String, String> {
    let bad = |e: serde_json::Error| format!("a stored artifact chunk does not parse: {e}");
    let first = chunks.next().ok_or("an artifact with no chunks")?;
    let mut whole = Members::of(first).map_err(bad)?;
    let mut parts: Vec<&RawValue> = match whole.get("parts") {
        Some(p) => serde_json::from_str(p.get()).map_err(bad)?,
        None => Vec::new(),
    };
    for chunk in chunks {
        for (key, value) in Members::of(chunk).map_err(bad)?.0 {
            if key == "parts" {
                parts.extend(serde_json::from_str::<Vec<&RawValue>>(value.get()).map_err(bad)?);
            } else if !matches!(value.get().trim(), "null" | "[]") {
                whole.set(&key, value);
            }
        }
    }
    let texts: Vec<&str> = parts.iter().map(|p| p.get()).collect();
    let joined = RawValue::from_string(format!("[{}]", texts.join(","))).map_err(bad)?;
    whole.set("parts", &joined);
    Ok(whole.to_text())
}

/// 128 random bits as 32 hex digits: a store-made contextId, opaque and
/// unguessable.
pub(crate) fn random_id() -> Result<String> {
    crate::render::new_nonce()
}

pub(super) fn encode_task_token(status_ms: u64, task_id: &str) -> String {
    encode_cursor(status_ms, task_id.as_bytes())
}

pub(super) fn decode_task_token(token: &str) -> Result<(u64, String)> {
    let (ms, id) = decode_cursor(token, "pageToken")?;
    let id = String::from_utf8(id).map_err(|_| bad_cursor("pageToken"))?;
    Ok((ms, id))
}
