//! Receiving a client's message under the A2A rules: a new task, a task
//! it joins, or a resend recognised by its messageId.

use std::sync::Arc;

use super::push::{InlinePush, Received};
use super::tasks::{context_of, inbound, mismatch, parse_inbound, Form, MessageIds, Receipt};
use super::{next_timestamp, Hints, Store};
use crate::a2a::lifecycle::Op;
use crate::a2a::{Message, TaskState};
use crate::error::{Error, Result};
use crate::index::{ContextSlot, IdemStart, Life};
use crate::log::record::{ContextName, RecordKind};
use crate::namespace::{
    check_context_id, check_tenant, context_message_key, message_key, ContextKey,
};

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

    /// Checks `raw` as [`receive_message`](Self::receive_message) checks a
    /// message before anything else (JSON with no key twice, an A2A
    /// Message from the user with sound parts), with no store at hand: a
    /// caller that would create a store for the message checks it first,
    /// so that a bad message leaves nothing behind.
    ///
    /// ```
    /// use ctxlog::Store;
    /// assert!(Store::check_message(br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#).is_ok());
    /// assert!(Store::check_message(b"{not json").is_err());
    /// ```
    pub fn check_message(raw: &[u8]) -> Result<()> {
        parse_inbound(raw, Form::V1).map(drop)
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
        let (slot, new_task_in) = self.slot_for(tenant, &msg)?;
        let _turn = slot.write.lock();
        if new_task_in.is_some() {
            self.refuse_if_gone(&slot)?;
        }
        let (received, mut receipt) = self.plan(tenant, &slot, &msg, raw, digest, new_task_in)?;
        receipt.seq =
            self.append_received(&slot, received, &receipt.task_id, receipt.event, push)?;
        Ok(receipt)
    }

    /// The key a message's messageId is recognised by: within the context
    /// it names, or its task's (`TaskNotFound` if the tenant has no such
    /// task), or within the tenant for a message that names neither.
    pub(super) fn idem_key(&self, tenant: &str, msg: &Message) -> Result<[u8; 32]> {
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

    /// The context a message goes to: its task's, if it names one, else
    /// the context it names or a new one (whose id comes back: the
    /// message opens a task there).
    pub(super) fn slot_for(
        &self,
        tenant: &str,
        msg: &Message,
    ) -> Result<(Arc<ContextSlot>, Option<String>)> {
        if let Some(task_id) = &msg.task_id {
            return Ok((self.task_slot(tenant, task_id)?, None));
        }
        let context_id = match &msg.context_id {
            Some(c) => {
                check_context_id(c)?;
                c.clone()
            }
            None => self.fresh_context_id(tenant)?,
        };
        let key = ContextKey::derive(tenant, &context_id)?;
        Ok((self.index.get_or_insert(&key), Some(context_id)))
    }

    /// The record a message makes in `slot` and its receipt (but for its
    /// seq): it joins the task it names, or (`new_task_in`, from
    /// [`slot_for`](Self::slot_for)) opens a task. The caller holds the
    /// context's write lock and has refused a gone context.
    pub(super) fn plan<'r>(
        &self,
        tenant: &str,
        slot: &ContextSlot,
        msg: &Message,
        raw: &'r [u8],
        digest: [u8; 32],
        new_task_in: Option<String>,
    ) -> Result<(Received<'r>, Receipt)> {
        let Some(context_id) = new_task_in else {
            let task_id = msg.task_id.as_deref().ok_or(Error::TaskNotFound)?;
            return self.plan_join(slot, msg, task_id, raw, digest);
        };
        let (new_context, timestamp_ms) = {
            let state = slot.state.read();
            (state.meta.is_none(), next_timestamp(&state))
        };
        let task_id = self.fresh_task_id(tenant, slot)?;
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
        let receipt = Receipt {
            context_id,
            task_id,
            seq: 0,
            duplicate: false,
            new_context,
            new_task: true,
            event: 1,
        };
        Ok((received, receipt))
    }

    /// [`plan`](Self::plan) of a message that names its task: it joins it.
    fn plan_join<'r>(
        &self,
        slot: &ContextSlot,
        msg: &Message,
        task_id: &str,
        raw: &'r [u8],
        digest: [u8; 32],
    ) -> Result<(Received<'r>, Receipt)> {
        let (context_id, timestamp_ms, event) = {
            let state = slot.state.read();
            let context_id = context_of(&state)?;
            if msg.context_id.as_deref().is_some_and(|c| c != context_id) {
                return Err(mismatch());
            }
            let task = state.task(task_id).ok_or(Error::TaskNotFound)?;
            task.check(Op::Message)?;
            // One turn of a task at a time (`Options::one_turn_per_task`):
            // a message joins a task only while it waits for one
            // (INPUT_REQUIRED, AUTH_REQUIRED). One
            // that joined before moved it to WORKING in the same critical
            // section (`message_joined`), so of two sent at once the
            // second is refused here, never answered with the first's
            // turn (DESIGN.md §7, "Lifecycle").
            let now = task.state();
            if self.options.one_turn_per_task
                && matches!(now, TaskState::Submitted | TaskState::Working)
            {
                return Err(Error::UnsupportedOperation {
                    reason: format!(
                        "task {task_id} is {}: its turn is running, and a task takes one \
                         message per turn; send this one once the task asks for input \
                         (TASK_STATE_INPUT_REQUIRED), or as a new task with \
                         referenceTaskIds",
                        now.name()
                    ),
                });
            }
            let event = task.event_count() as u64 + 1;
            (context_id.to_string(), next_timestamp(&state), event)
        };
        let received = Received {
            opens: None,
            kind: inbound(task_id, false, msg, digest),
            raw,
            timestamp_ms,
            hints: Hints::default(),
        };
        let receipt = Receipt {
            context_id,
            task_id: task_id.to_string(),
            seq: 0,
            duplicate: false,
            new_context: false,
            new_task: false,
            event,
        };
        Ok((received, receipt))
    }

    /// The first receipt of an already received messageId, if the content is the same.
    pub(super) fn duplicate(
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
}
