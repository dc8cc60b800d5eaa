//! The A2A task model on top of the store: receiving messages under the A2A
//! rules, status and artifact events, cancel, reads and listings.

use std::sync::Arc;

use serde_json::value::RawValue;

use super::push::{InlinePush, Received};
use super::{
    bad_cursor, check_page_size, decode_cursor, encode_cursor, next_timestamp, now_ms,
    ContextRecords, Hints, Store,
};
use crate::a2a::json::{self, Members};
use crate::a2a::lifecycle::Op;
use crate::a2a::DIRECT_REPLY;
use crate::a2a::{
    Artifact, DamagedTask, ListTasksResponse, Message, Part, Role, Stored, StreamResponse, Task,
    TaskArtifactUpdateEvent, TaskState, TaskStatus, TaskStatusUpdateEvent,
};
use crate::error::{Error, Result};
use crate::index::context::TaskView;
use crate::index::tasks::IdKey;
use crate::index::{prefix_of_id, ContextSlot, IdemStart, Life};
use crate::log::record::{ContextName, RecordKind, TaskLink};
use crate::log::segments::RecordLoc;
use crate::namespace::{
    check_context_id, check_tenant, context_message_key, message_key, task_key, ContextKey,
};
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
    /// The receipt of an inbound message received before (marked
    /// `duplicate`), without storing anything: `None` if its messageId is
    /// new for the tenant (or its context is gone). Checks the message as
    /// [`receive_message`](Self::receive_message) does, and answers
    /// `IdempotencyConflict` for a messageId received with other content.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// let raw = br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#;
    /// assert!(store.find_received("acme", raw)?.is_none()); // new: and nothing is stored
    /// let receipt = store.receive_message("acme", raw)?;
    /// let again = store.find_received("acme", raw)?.unwrap();
    /// assert!(again.duplicate && again.task_id == receipt.task_id);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn find_received(&self, tenant: &str, raw: &[u8]) -> Result<Option<Receipt>> {
        self.find_received_as(tenant, raw, Form::V1)
    }

    /// [`find_received`](Self::find_received) of a message in A2A v0.3's
    /// form (see [`receive_v03_message`](Self::receive_v03_message)).
    pub fn find_received_v03(&self, tenant: &str, raw: &[u8]) -> Result<Option<Receipt>> {
        self.find_received_as(tenant, raw, Form::V03)
    }

    fn find_received_as(&self, tenant: &str, raw: &[u8], form: Form) -> Result<Option<Receipt>> {
        check_tenant(tenant)?;
        let (msg, digest) = parse_inbound(raw, form)?;
        let idem = match self.idem_key(tenant, &msg) {
            Ok(idem) => idem,
            // Its task is not this tenant's, or is gone: nothing was
            // received there (the receive answers why).
            Err(Error::TaskNotFound) => return Ok(None),
            Err(e) => return Err(e),
        };
        match self.index.idem_lookup(idem) {
            Some((slot, seq)) if self.life(&slot) == Life::Live => self
                .duplicate(&msg.message_id, &slot, seq, &digest)
                .map(Some),
            _ => Ok(None),
        }
    }

    /// Receives an inbound A2A message (JSON, as it came from the client)
    /// under the A2A rules, and saves it exactly as received, durably, before
    /// returning. See DESIGN.md, "The task model", for the rules. A resend
    /// of a messageId is recognised in the context the message names (or
    /// its task's), and within the tenant for a message that names neither
    /// ([`MessageIds::Idempotent`]; [`receive_message_with`](Self::receive_message_with)
    /// takes messageIds as labels instead).
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// let raw = br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"Refund order 123"}]}"#;
    /// let receipt = store.receive_message("acme", raw)?; // durable here
    /// assert!(receipt.new_context && receipt.new_task);
    /// // A resend is recognised: nothing is stored, the same task answers.
    /// let again = store.receive_message("acme", raw)?;
    /// assert!(again.duplicate && again.task_id == receipt.task_id);
    /// // The same messageId with other content is refused.
    /// let changed = br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"Refund order 456"}]}"#;
    /// assert!(matches!(
    ///     store.receive_message("acme", changed),
    ///     Err(ctxlog::Error::IdempotencyConflict { .. })
    /// ));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn receive_message(&self, tenant: &str, raw: &[u8]) -> Result<Receipt> {
        self.receive_message_with(tenant, raw, MessageIds::Idempotent)
    }

    /// [`receive_message`](Self::receive_message), with messageIds taken as
    /// `ids` says: as the message's identity (a resend is recognised), or
    /// as the client's labels (every message is new, however many share a
    /// messageId; each is stored, and the history keeps them all).
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::MessageIds;
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// let raw = br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#;
    /// let first = store.receive_message_with("acme", raw, MessageIds::Labels)?;
    /// let second = store.receive_message_with("acme", raw, MessageIds::Labels)?;
    /// assert!(!second.duplicate && second.task_id != first.task_id);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn receive_message_with(
        &self,
        tenant: &str,
        raw: &[u8],
        ids: MessageIds,
    ) -> Result<Receipt> {
        self.receive_as(tenant, raw, ids, Form::V1, None)
    }

    /// [`receive_message_with`](Self::receive_message_with) of a message in
    /// A2A v0.3's form (`"role": "user"`, parts with a `kind`), for a
    /// server that speaks v0.3 too. The bytes are stored exactly as
    /// received (an export and [`last_messages`](Self::last_messages) give them
    /// back); the checks, the messageId's digest (so a resend in either
    /// form is recognised) and every read of the task model
    /// ([`get_task`](Self::get_task) and the rest) take the message in
    /// v1.0's form, [`a2a::v03::message_to_v1`](crate::a2a::v03::message_to_v1).
    /// [`receive_message`](Self::receive_message) keeps refusing v0.3.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// use ctxlog::MessageIds;
    /// let v03 = br#"{"kind":"message","messageId":"m1","role":"user","parts":[{"kind":"text","text":"hi"}]}"#;
    /// let r = store.receive_v03_message("acme", v03, MessageIds::Idempotent)?;
    /// let task = store.get_task("acme", &r.task_id, None, false)?;
    /// assert_eq!(task.history[0].parts[0].text.as_deref(), Some("hi"));
    /// // The same message in v1.0's form is its resend.
    /// let v1 = br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#;
    /// assert!(store.receive_message("acme", v1)?.duplicate);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn receive_v03_message(
        &self,
        tenant: &str,
        raw: &[u8],
        ids: MessageIds,
    ) -> Result<Receipt> {
        self.receive_as(tenant, raw, ids, Form::V03, None)
    }

    /// Receives a message in `form`; a new one's `push` config (see
    /// [`receive_with_push`](Self::receive_with_push)) is stored with it.
    pub(super) fn receive_as(
        &self,
        tenant: &str,
        raw: &[u8],
        ids: MessageIds,
        form: Form,
        push: Option<InlinePush<'_>>,
    ) -> Result<Receipt> {
        check_tenant(tenant)?;
        let (msg, digest) = parse_inbound(raw, form)?;
        let _owner = match ids {
            MessageIds::Labels => None,
            MessageIds::Idempotent => {
                let idem = self.idem_key(tenant, &msg)?;
                loop {
                    match self.index.idem_start(idem) {
                        IdemStart::Done(slot, seq) => {
                            if self.life(&slot) == Life::Live {
                                return self.duplicate(&msg.message_id, &slot, seq, &digest);
                            }
                            // Its context is gone: the messageId is free again.
                            self.index.idem_forget(idem);
                        }
                        IdemStart::Wait(gate) => gate.wait(),
                        IdemStart::Owner(guard) => break Some(guard),
                    }
                }
            }
        };
        match &msg.task_id {
            Some(task_id) => self.receive_into_task(tenant, &msg, task_id, raw, digest, push),
            None => self.receive_new_task(tenant, &msg, raw, digest, push),
        }
    }

    /// The key a message's messageId is recognised by: within the context
    /// it names, or its task's (`TaskNotFound` if the tenant has no such
    /// task), or within the tenant for a message that names neither.
    fn idem_key(&self, tenant: &str, msg: &Message) -> Result<[u8; 32]> {
        if let Some(task_id) = &msg.task_id {
            let slot = self.task_slot(tenant, task_id)?;
            return Ok(context_message_key(&slot.key, &msg.message_id));
        }
        if let Some(context_id) = &msg.context_id {
            check_context_id(context_id)?;
            let key = ContextKey::derive(tenant, context_id)?;
            return Ok(context_message_key(&key, &msg.message_id));
        }
        Ok(message_key(tenant, &msg.message_id))
    }

    /// A message that names its task joins it.
    fn receive_into_task(
        &self,
        tenant: &str,
        msg: &Message,
        task_id: &str,
        raw: &[u8],
        digest: [u8; 32],
        push: Option<InlinePush<'_>>,
    ) -> Result<Receipt> {
        let slot = self.task_slot(tenant, task_id)?;
        let _turn = slot.write.lock();
        let (context_id, timestamp_ms, event) = {
            let state = slot.state.read();
            let context_id = context_of(&state)?;
            if msg.context_id.as_deref().is_some_and(|c| c != context_id) {
                return Err(mismatch());
            }
            let task = state.task(task_id).ok_or(Error::TaskNotFound)?;
            task.check(Op::Message)?;
            let event = task.event_count() as u64 + 1;
            (context_id.to_string(), next_timestamp(&state), event)
        };
        let kind = inbound(task_id, false, msg, digest);
        let received = Received {
            opens: None,
            kind,
            raw,
            timestamp_ms,
            hints: Hints::default(),
        };
        let seq = self.append_received(&slot, received, task_id, event, push)?;
        Ok(Receipt {
            context_id,
            task_id: task_id.to_string(),
            seq,
            duplicate: false,
            new_context: false,
            new_task: false,
            event,
        })
    }

    /// A message without a task opens one, in its context or a new one.
    fn receive_new_task(
        &self,
        tenant: &str,
        msg: &Message,
        raw: &[u8],
        digest: [u8; 32],
        push: Option<InlinePush<'_>>,
    ) -> Result<Receipt> {
        let context_id = match &msg.context_id {
            Some(c) => {
                check_context_id(c)?;
                c.clone()
            }
            None => self.fresh_context_id(tenant)?,
        };
        let key = ContextKey::derive(tenant, &context_id)?;
        let slot = self.index.get_or_insert(&key);
        let _turn = slot.write.lock();
        self.refuse_if_gone(&slot)?;
        let (new_context, timestamp_ms) = {
            let state = slot.state.read();
            (state.meta.is_none(), next_timestamp(&state))
        };
        let task_id = self.fresh_task_id(tenant, &slot)?;
        let name = new_context.then(|| ContextName {
            tenant: tenant.to_string(),
            context_id: context_id.clone(),
        });
        let received = Received {
            opens: name,
            kind: inbound(&task_id, true, msg, digest),
            raw,
            timestamp_ms,
            hints: Hints {
                tenant_scoped: msg.context_id.is_none(),
                ..Hints::default()
            },
        };
        let seq = self.append_received(&slot, received, &task_id, 1, push)?;
        Ok(Receipt {
            context_id,
            task_id,
            seq,
            duplicate: false,
            new_context,
            new_task: true,
            event: 1,
        })
    }

    /// The first receipt of an already received messageId, if the content is the same.
    fn duplicate(
        &self,
        message_id: &str,
        slot: &ContextSlot,
        seq: u64,
        digest: &[u8; 32],
    ) -> Result<Receipt> {
        let state = slot.state.read();
        let context_id = context_of(&state)?.to_string();
        let loc = state.message_at(seq).ok_or(Error::TaskNotFound)?;
        let link = self.with_record(&slot.key, loc, |body, _| match &body.kind {
            RecordKind::Message { task: Some(link) } => Some(link.clone()),
            _ => None,
        })?;
        let link = link.ok_or_else(|| {
            Error::corrupt(
                loc.segment,
                u64::from(loc.offset),
                "idempotency entry is not a message",
            )
        })?;
        if &link.digest != digest || link.message_id != message_id {
            return Err(Error::IdempotencyConflict {
                message_id: message_id.to_string(),
            });
        }
        // Its place among its task's events.
        let event = state
            .task(&link.task_id)
            .and_then(|t| t.events().iter().position(|l| *l == loc))
            .map_or(0, |at| at as u64 + 1);
        Ok(Receipt {
            context_id,
            task_id: link.task_id,
            seq,
            duplicate: true,
            new_context: false,
            new_task: false,
            event,
        })
    }

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
        let checked = self.check_task_op(
            &slot,
            &event.task_id,
            Some(&event.context_id),
            Op::Status(event.status.state),
        )?;
        self.write_status(&slot, &event.task_id, &event.status, checked)
    }

    fn write_status(
        &self,
        slot: &ContextSlot,
        task_id: &str,
        status: &Stored<TaskStatus>,
        checked: Checked,
    ) -> Result<EventRecord> {
        let timestamp_ms = checked.timestamp_ms;
        let blob = status_blob(status, timestamp_ms)?;
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
        self.append_record(slot, None, kind, &blob, timestamp_ms, hints)?;
        Ok(checked.record(task_id))
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
        let artifact_id = &event.artifact.artifact_id;
        let slot = self.task_slot(tenant, &event.task_id)?;
        let _turn = slot.write.lock();
        let op = Op::Artifact {
            artifact_id,
            append: event.append,
        };
        let checked = self.check_task_op(&slot, &event.task_id, Some(&event.context_id), op)?;
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
        self.append_record(
            &slot,
            None,
            kind,
            &blob,
            checked.timestamp_ms,
            Hints::default(),
        )?;
        Ok(checked.record(&event.task_id))
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
            self.write_status(&slot, task_id, &Stored::new(status), checked)?;
        }
        self.get_task(tenant, task_id, None, true)
    }

    /// A task, with the last `history_length` messages of its history (unset:
    /// all; 0: none) and, if asked, its artifacts. Reads only what it returns.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// # let r = store.receive_message("acme", br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#)?;
    /// // The last 10 messages, no artifacts.
    /// let task = store.get_task("acme", &r.task_id, Some(10), false)?;
    /// assert_eq!((task.id.as_str(), task.history.len()), (r.task_id.as_str(), 1));
    /// // Another tenant's task answers as a missing one.
    /// assert!(matches!(
    ///     store.get_task("other", &r.task_id, None, false),
    ///     Err(ctxlog::Error::TaskNotFound)
    /// ));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn get_task(
        &self,
        tenant: &str,
        task_id: &str,
        history_length: Option<usize>,
        include_artifacts: bool,
    ) -> Result<Task> {
        self.task_snapshot(tenant, task_id, history_length, include_artifacts)
            .map(|(task, _)| task)
    }

    /// A task as [`get_task`](Self::get_task) returns it, with the number
    /// of its events so far, read together: the events after that number
    /// ([`events_since`](Self::events_since)) are exactly those the
    /// snapshot does not reflect (for a subscriber that starts from it).
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// # let r = store.receive_message("acme", br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#)?;
    /// let (task, events) = store.task_snapshot("acme", &r.task_id, Some(0), false)?;
    /// assert_eq!(events, 1);
    /// // A subscriber that starts from the snapshot goes on after `events`.
    /// assert!(store.events_since("acme", &task.id, events)?.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn task_snapshot(
        &self,
        tenant: &str,
        task_id: &str,
        history_length: Option<usize>,
        include_artifacts: bool,
    ) -> Result<(Task, u64)> {
        let slot = self.task_slot(tenant, task_id)?;
        // Records are read under the context's read lock, so a compaction
        // cannot move them in between (it remaps under the write lock).
        let state = slot.state.read();
        let task = state.task(task_id).ok_or(Error::TaskNotFound)?;
        let at = Place {
            key: &slot.key,
            context_id: context_of(&state)?,
        };
        let events = task.event_count() as u64;
        Ok((
            self.read_task(at, task, history_length, include_artifacts)?,
            events,
        ))
    }

    /// The task's state and how many events it has, from memory (no record
    /// is read): what a stream checks before it reads events it may
    /// already have.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::a2a::TaskState;
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// # let r = store.receive_message("acme", br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#)?;
    /// let progress = store.task_progress("acme", &r.task_id)?;
    /// assert_eq!((progress.state, progress.events), (TaskState::Submitted, 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn task_progress(&self, tenant: &str, task_id: &str) -> Result<TaskProgress> {
        let slot = self.task_slot(tenant, task_id)?;
        let state = slot.state.read();
        let task = state.task(task_id).ok_or(Error::TaskNotFound)?;
        Ok(TaskProgress {
            state: task.state(),
            events: task.event_count() as u64,
            direct_reply: task.is_direct_reply(),
        })
    }

    /// The latest message a client sent into the task (a received message,
    /// not an agent's status message), with its seq in its context: what a
    /// turn interrupted by a crash was processing, and where its history
    /// ends (`render_history(.., before: Some(seq), ..)`).
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// # let r = store.receive_message("acme", br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#)?;
    /// let (seq, message) = store.latest_received("acme", &r.task_id)?.unwrap();
    /// assert_eq!((seq, message.message_id.as_str()), (r.seq, "m1"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn latest_received(
        &self,
        tenant: &str,
        task_id: &str,
    ) -> Result<Option<(u64, Stored<Message>)>> {
        let slot = self.task_slot(tenant, task_id)?;
        let state = slot.state.read();
        let task = state.task(task_id).ok_or(Error::TaskNotFound)?;
        for loc in task.history_newest() {
            let found = self.with_record(&slot.key, loc, |body, blob| match body.kind {
                RecordKind::Message { .. } => Some((body.seq, stored_message(blob))),
                _ => None,
            })?;
            if let Some((seq, message)) = found {
                let message =
                    message.map_err(|e| Error::corrupt(loc.segment, u64::from(loc.offset), e))?;
                return Ok(Some((seq, message)));
            }
        }
        Ok(None)
    }

    /// Every live task, of every tenant, whose state is one of `states`
    /// (for a server that resolves, on start, the turns a crash left
    /// running).
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::a2a::TaskState;
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// # let r = store.receive_message("acme", br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#)?;
    /// // After a crash: the tasks whose turn was running.
    /// let running = store.tasks_in(&[TaskState::Submitted, TaskState::Working]);
    /// assert_eq!(running[0].task_id, r.task_id);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn tasks_in(&self, states: &[TaskState]) -> Vec<TaskRef> {
        let now = now_ms();
        let mut found = Vec::new();
        for slot in self.index.all_slots() {
            let state = slot.state.read();
            if state.life(now, self.options.retention) != Life::Live {
                continue;
            }
            let Some(meta) = &state.meta else { continue };
            found.extend(
                state
                    .tasks()
                    .filter(|t| states.contains(&t.state()))
                    .map(|t| TaskRef {
                        tenant: meta.tenant().to_string(),
                        context_id: meta.context_id().to_string(),
                        task_id: t.id().to_string(),
                        state: t.state(),
                    }),
            );
        }
        found
    }

    /// The tenant's tasks, filtered, newest status first (ties by id), in
    /// pages with cursor tokens. See [`ListTasksQuery`]. A task whose turn
    /// ended in a direct reply is never listed (the client got a message,
    /// not a task).
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::a2a::TaskState;
    /// use ctxlog::ListTasksQuery;
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// for id in ["m1", "m2", "m3"] {
    ///     let raw = format!(r#"{{"messageId":"{id}","role":"ROLE_USER","parts":[{{"text":"hi"}}]}}"#);
    ///     store.receive_message("acme", raw.as_bytes())?;
    /// }
    /// let query = ListTasksQuery {
    ///     status: Some(TaskState::Submitted),
    ///     page_size: Some(2),
    ///     ..Default::default()
    /// };
    /// let page = store.list_tasks("acme", &query)?;
    /// assert_eq!((page.tasks.len(), page.total_size), (2, 3));
    /// let next = ListTasksQuery { page_token: Some(page.next_page_token), ..query };
    /// let last = store.list_tasks("acme", &next)?;
    /// assert_eq!((last.tasks.len(), last.next_page_token.as_str()), (1, ""));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn list_tasks(&self, tenant: &str, query: &ListTasksQuery) -> Result<ListTasksResponse> {
        let page_size = query.page_size.unwrap_or(super::DEFAULT_PAGE_SIZE);
        check_page_size(page_size, "pageSize")?;
        let after = query
            .page_token
            .as_deref()
            .map(decode_task_token)
            .transpose()?;
        // (status time, task id, its context's place in `slots`)
        let mut found: Vec<(u64, String, usize)> = Vec::new();
        let now = now_ms();
        let slots = self.tenant_contexts(tenant, query.context_id.as_deref())?;
        for (place, slot) in slots.iter().enumerate() {
            let state = slot.state.read();
            if state.life(now, self.options.retention) != Life::Live {
                continue;
            }
            found.extend(
                state
                    .tasks()
                    // A direct reply's task was never the client's.
                    .filter(|t| !t.is_direct_reply())
                    .filter(|t| query.status.is_none_or(|s| s == t.state()))
                    .filter(|t| {
                        query
                            .status_timestamp_after_ms
                            .is_none_or(|a| t.status_ms() >= a)
                    })
                    .map(|t| (t.status_ms(), t.id().to_string(), place)),
            );
        }
        found.sort_unstable_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        let total_size = found.len();
        let start = after.map_or(0, |(ms, id)| {
            found.partition_point(|(m, i, _)| *m > ms || (*m == ms && *i <= id))
        });
        let page: Vec<_> = found.iter().skip(start).take(page_size).collect();
        let more = start + page.len() < total_size;
        let next_page_token = match page.last() {
            Some((ms, id, _)) if more => encode_task_token(*ms, id),
            _ => String::new(),
        };
        let mut tasks = Vec::with_capacity(page.len());
        let mut damaged = Vec::new();
        for (_, id, place) in page {
            let Some(slot) = slots.get(*place) else {
                continue;
            };
            let state = slot.state.read();
            let Some(task) = state.task(id) else { continue };
            let at = Place {
                key: &slot.key,
                context_id: context_of(&state)?,
            };
            match self.read_task(at, task, query.history_length, query.include_artifacts) {
                Ok(task) => tasks.push(task),
                // One unreadable task never hides the others: it is left
                // out of the page and reported beside it.
                Err(e @ Error::Corrupt { .. }) => damaged.push(DamagedTask {
                    task_id: id.clone(),
                    reason: e.to_string(),
                }),
                Err(e) => return Err(e),
            }
        }
        Ok(ListTasksResponse {
            tasks,
            next_page_token,
            page_size: page_size as u32,
            total_size: u32::try_from(total_size).unwrap_or(u32::MAX),
            damaged,
        })
    }

    /// The task's events after per-task sequence number `after` (0: all), in
    /// order, for a subscriber that reconnects.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::a2a::{TaskState, TaskStatus};
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// # let r = store.receive_message("acme", br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#)?;
    /// store.update_status("acme", &r.status_update(TaskStatus::new(TaskState::Working)))?;
    /// let events = store.events_since("acme", &r.task_id, 1)?; // after the message
    /// assert_eq!(events.len(), 1);
    /// assert_eq!(events[0].0, 2);
    /// assert!(events[0].1.status_update.is_some());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn events_since(
        &self,
        tenant: &str,
        task_id: &str,
        after: u64,
    ) -> Result<Vec<(u64, StreamResponse)>> {
        self.events_page(tenant, task_id, after, usize::MAX)
    }

    /// The first of the task's events after `after`, as
    /// [`events_since`](Self::events_since) gives them, up to about `bytes`
    /// of stored records (always one, if there is one): a page, for a
    /// reader that must bound what it holds (a stream to a slow client).
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::a2a::{TaskState, TaskStatus};
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// # let r = store.receive_message("acme", br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#)?;
    /// store.update_status("acme", &r.status_update(TaskStatus::new(TaskState::Working)))?;
    /// let page = store.events_page("acme", &r.task_id, 0, 1)?; // one record's worth
    /// assert_eq!(page.len(), 1);
    /// assert_eq!(store.events_page("acme", &r.task_id, 1, 1 << 20)?.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn events_page(
        &self,
        tenant: &str,
        task_id: &str,
        after: u64,
        bytes: usize,
    ) -> Result<Vec<(u64, StreamResponse)>> {
        self.page(tenant, task_id, after, bytes, true)
    }

    /// [`events_page`](Self::events_page) without the messages the client
    /// sent (the agent's status updates and artifact chunks only, with
    /// their numbers): what a stream sends, which passes over the client's
    /// own messages. Those are neither read nor counted in `bytes`.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::a2a::{TaskState, TaskStatus};
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// # let r = store.receive_message("acme", br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#)?;
    /// store.update_status("acme", &r.status_update(TaskStatus::new(TaskState::Working)))?;
    /// let page = store.updates_page("acme", &r.task_id, 0, 1 << 20)?;
    /// assert_eq!(page.len(), 1);
    /// assert_eq!(page[0].0, 2); // the message, event 1, is passed over
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn updates_page(
        &self,
        tenant: &str,
        task_id: &str,
        after: u64,
        bytes: usize,
    ) -> Result<Vec<(u64, StreamResponse)>> {
        self.page(tenant, task_id, after, bytes, false)
    }

    fn page(
        &self,
        tenant: &str,
        task_id: &str,
        after: u64,
        bytes: usize,
        messages: bool,
    ) -> Result<Vec<(u64, StreamResponse)>> {
        let slot = self.task_slot(tenant, task_id)?;
        let state = slot.state.read();
        let task = state.task(task_id).ok_or(Error::TaskNotFound)?;
        let skip = usize::try_from(after).unwrap_or(usize::MAX);
        let at = Place {
            key: &slot.key,
            context_id: context_of(&state)?,
        };
        let mut taken = 0usize;
        task.events_with_kind()
            .into_iter()
            .enumerate()
            .skip(skip)
            .filter(|(_, (_, sent))| messages || !sent)
            .map(|(i, (loc, _))| (i, loc))
            .take_while(|(_, loc)| {
                let first = taken == 0;
                taken = taken.saturating_add(loc.len as usize);
                first || taken <= bytes
            })
            .map(|(i, loc)| Ok((i as u64 + 1, self.read_event(at, loc, task_id)?)))
            .collect()
    }

    /// The task's events after per-task sequence number `after`, as
    /// [`events_since`](Self::events_since) gives them, once there is at
    /// least one: waits (without polling) until another thread stores one
    /// or `timeout` passes, and then answers with whatever there is (empty
    /// on a timeout). A task with events past `after` already answers at
    /// once. For an async program, call it from a blocking thread
    /// (`tokio::task::spawn_blocking`).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use ctxlog::a2a::{TaskState, TaskStatus};
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// # let r = store.receive_message("acme", br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#)?;
    /// let store = Arc::new(store);
    /// let waiter = {
    ///     let (store, task) = (store.clone(), r.task_id.clone());
    ///     std::thread::spawn(move || store.wait_for_events("acme", &task, 1, Duration::from_secs(10)))
    /// };
    /// store.update_status("acme", &r.status_update(TaskStatus::new(TaskState::Working)))?;
    /// let events = waiter.join().unwrap()?;
    /// assert_eq!(events[0].0, 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn wait_for_events(
        &self,
        tenant: &str,
        task_id: &str,
        after: u64,
        timeout: std::time::Duration,
    ) -> Result<Vec<(u64, StreamResponse)>> {
        let slot = self.task_slot(tenant, task_id)?;
        let now = std::time::Instant::now();
        // A timeout too far to add is as good as forever: a year.
        let deadline = now
            .checked_add(timeout)
            .unwrap_or(now + std::time::Duration::from_secs(365 * 86_400));
        let more = || -> Result<bool> {
            let state = slot.state.read();
            let task = state.task(task_id).ok_or(Error::TaskNotFound)?;
            Ok(task.event_count() as u64 > after)
        };
        match self.waits.wait(slot.number, deadline, more)? {
            true => self.events_since(tenant, task_id, after),
            false => Ok(Vec::new()),
        }
    }

    fn read_event(&self, at: Place<'_>, loc: RecordLoc, task_id: &str) -> Result<StreamResponse> {
        let bad = |e: String| Error::corrupt(loc.segment, u64::from(loc.offset), e);
        let context_id = at.context_id;
        let event = self.with_record(
            at.key,
            loc,
            |body, blob| -> std::result::Result<_, String> {
                let mut out = StreamResponse::default();
                match &body.kind {
                    RecordKind::Message { .. } => out.message = Some(from_json(blob)?),
                    RecordKind::Status { .. } => {
                        out.status_update = Some(TaskStatusUpdateEvent {
                            task_id: task_id.to_string(),
                            context_id: context_id.to_string(),
                            status: from_json(blob)?,
                            metadata: None,
                        })
                    }
                    RecordKind::Gone { .. } | RecordKind::Hide { .. } | RecordKind::Push { .. } => {
                        return Err("a task event points at a record of no task".into())
                    }
                    RecordKind::Artifact {
                        append, last_chunk, ..
                    } => {
                        out.artifact_update = Some(TaskArtifactUpdateEvent {
                            task_id: task_id.to_string(),
                            context_id: context_id.to_string(),
                            artifact: from_json(blob)?,
                            append: *append,
                            last_chunk: *last_chunk,
                            metadata: None,
                        })
                    }
                }
                Ok(out)
            },
        )?;
        event.map_err(bad)
    }

    /// A task as A2A shows it, read straight from its records (the caller
    /// holds the context's read lock): the latest status, the last
    /// `history_length` messages of its history, and, if asked, its artifacts.
    fn read_task(
        &self,
        at: Place<'_>,
        task: TaskView<'_>,
        history_length: Option<usize>,
        include_artifacts: bool,
    ) -> Result<Task> {
        // The task's records, read under one lock of the segment set.
        let mut records = self.context_records(at.key);
        // A task the client wrote to since its latest status reads as its
        // state says (SUBMITTED, or WORKING on the client's answer), not as
        // that status: its question is answered.
        let status = match task.status_record() {
            Some(loc) => read_json(&mut records, loc)?,
            None => Stored::new(TaskStatus {
                state: task.state(),
                message: None,
                timestamp: Some(iso8601_ms(task.status_ms())),
                extra: Default::default(),
            }),
        };
        // The newest `history_length` messages, walking back from the end.
        let mut history = task
            .history_newest()
            .take(history_length.unwrap_or(usize::MAX))
            .map(|loc| {
                records
                    .message(loc, |_, bytes| stored_message(bytes))?
                    .map_err(|e| Error::corrupt(loc.segment, u64::from(loc.offset), e))
            })
            .collect::<Result<Vec<_>>>()?;
        history.reverse();
        let artifacts = include_artifacts
            .then(|| {
                task.artifacts()
                    .map(|chunks| read_artifact(&mut records, &chunks))
                    .collect::<Result<Vec<_>>>()
            })
            .transpose()?;
        Ok(Task {
            id: task.id().to_string(),
            context_id: at.context_id.to_string(),
            status,
            artifacts,
            history,
            metadata: None,
        })
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
    fn fresh_task_id(&self, tenant: &str, slot: &ContextSlot) -> Result<String> {
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
    fn tenant_contexts(
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
    fn fresh_context_id(&self, tenant: &str) -> Result<String> {
        loop {
            let id = random_id()?;
            let key = ContextKey::derive(tenant, &id)?;
            if self.index.get(&key).is_none() {
                return Ok(id);
            }
        }
    }
}

/// A context as its records are read: its key (every record read must name
/// it) and its id (for the objects built around the records).
#[derive(Clone, Copy)]
struct Place<'a> {
    key: &'a ContextKey,
    context_id: &'a str,
}

/// What checking an operation on a task gives the event it records.
#[derive(Debug, Clone, Copy)]
struct Checked {
    /// The timestamp for its record.
    timestamp_ms: u64,
    /// Its per-task sequence number: one past the task's events so far.
    event_seq: u64,
}

impl Checked {
    /// The record of the event, once appended.
    fn record(self, task_id: &str) -> EventRecord {
        EventRecord {
            task_id: task_id.to_string(),
            seq: self.event_seq,
        }
    }
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

fn mismatch() -> Error {
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
/// received in v0.3's translated ([`Store::receive_v03_message`]). Only a
/// blob that v1.0 does not read is tried as v0.3 (the translation refuses
/// what is not v0.3); one that is neither answers v1.0's error.
fn stored_message(bytes: &[u8]) -> std::result::Result<Stored<Message>, String> {
    from_json::<Message>(bytes).or_else(|v1_error| match crate::a2a::v03::message_to_v1(bytes) {
        Ok(v1) => from_json::<Message>(v1.as_bytes()),
        Err(_) => Err(v1_error),
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
fn from_json<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
) -> std::result::Result<Stored<T>, String> {
    Stored::from_json(&blob_text(bytes)?)
        .map_err(|e| format!("a stored object does not parse: {e}"))
}

fn blob_text(bytes: &[u8]) -> std::result::Result<String, String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| "a stored object is not UTF-8".to_string())
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
fn read_artifact(records: &mut ContextRecords, chunks: &[RecordLoc]) -> Result<Stored<Artifact>> {
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
fn read_json<T: serde::de::DeserializeOwned>(
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

fn encode_task_token(status_ms: u64, task_id: &str) -> String {
    encode_cursor(status_ms, task_id.as_bytes())
}

fn decode_task_token(token: &str) -> Result<(u64, String)> {
    let (ms, id) = decode_cursor(token, "pageToken")?;
    let id = String::from_utf8(id).map_err(|_| bad_cursor("pageToken"))?;
    Ok((ms, id))
}
