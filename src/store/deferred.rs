//! Deferred task events: a status or an artifact chunk written to the log
//! at once, and published once its sync lands, with the context's write
//! lock held in between by the pending write itself. A caller on an async
//! runtime awaits the sync ([`PendingWrite::durable`]) instead of parking
//! a thread for it; the rules are those of every write (DESIGN.md §12,
//! "A send").

use std::sync::Arc;

use super::push::Received;
use super::tasks::{parse_inbound, Event, Form, MessageIds, Receipt};
use super::{apply, Store};
use crate::a2a::{TaskArtifactUpdateEvent, TaskStatusUpdateEvent};
use crate::error::Result;
use crate::index::write_lock::WriteHold;
use crate::index::{ContextSlot, IdemClaim, IdemGuard, IdemStart, Life};
use crate::log::record::RecordBody;
use crate::log::segments::RecordLoc;
use crate::log::writer::Durable;
use crate::namespace::check_tenant;
use crate::store::EventRecord;

/// A task event written to the log and not yet published: the context's
/// write lock stays held until it is. Await [`durable`](Self::durable),
/// then call [`publish`](Self::publish). Dropped unpublished, it waits for
/// the sync on the dropping thread and publishes then, so the index never
/// lacks a record the log holds.
#[must_use = "a pending write holds its context's lock until it is published"]
pub struct PendingWrite {
    pending: Pending,
    record: EventRecord,
}

/// A received message written to the log and not yet published (or a
/// resend, which wrote nothing): as [`PendingWrite`], and its messageId
/// stays claimed until it is published, so a resend of it waits for this
/// receive's end and is then answered as a resend.
#[must_use = "a pending receive holds its context's lock until it is published"]
pub struct PendingReceive {
    written: Written,
    receipt: Receipt,
}

/// What a receive wrote: the message's record, or nothing (a resend; the
/// store is kept for its wait, which is over at once). Not boxed: the
/// record is the common case, and a box would cost every receive an
/// allocation to save a resend a few bytes.
#[allow(clippy::large_enum_variant)]
enum Written {
    Record(Pending),
    Resend(Arc<Store>),
}

/// A record written and not yet published, with the context's lock (and
/// a received message's messageId claim) held until it is.
struct Pending {
    store: Arc<Store>,
    hold: WriteHold,
    claim: Option<IdemClaim>,
    body: RecordBody,
    loc: RecordLoc,
    hints: super::Hints,
    bytes: u64,
    end: u64,
    done: bool,
}

impl std::fmt::Debug for PendingWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingWrite")
            .field("record", &self.record)
            .field("end", &self.pending.end)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for PendingReceive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingReceive")
            .field("receipt", &self.receipt)
            .field("duplicate", &self.receipt.duplicate)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// [`update_status`](Self::update_status), deferred: checked and
    /// written now, published by [`PendingWrite::publish`] once durable.
    /// `None` (nothing written) if another writer holds the context's lock,
    /// or if writes wait for synchronous replication: call `update_status`
    /// then, where waiting is allowed. A periodic checkpoint that falls due
    /// is not written by the publication: call
    /// [`checkpoint_if_due`](Self::checkpoint_if_due) where blocking is
    /// allowed (at once if [`checkpoint_due`](Self::checkpoint_due)).
    /// A segment rotation (once per segment) still happens in the write.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ctxlog::a2a::{TaskState, TaskStatus};
    /// # let dir = tempfile::tempdir()?;
    /// let store = Arc::new(ctxlog::Store::open(dir.path(), ctxlog::Options::default())?);
    /// # let r = store.receive_message("acme", br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#)?;
    /// let done = r.status_update(TaskStatus::new(TaskState::Completed));
    /// let pending = store.update_status_deferred("acme", &done)?.expect("nobody else writes");
    /// // An async caller awaits `pending.durable()` here.
    /// let record = pending.publish()?;
    /// assert_eq!(store.get_task("acme", &record.task_id, Some(0), false)?.status.state, TaskState::Completed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn update_status_deferred(
        self: &Arc<Self>,
        tenant: &str,
        event: &TaskStatusUpdateEvent,
    ) -> Result<Option<PendingWrite>> {
        self.defer(tenant, &event.task_id, |slot| {
            self.status_event(slot, event)
        })
    }

    /// [`add_artifact`](Self::add_artifact), deferred as
    /// [`update_status_deferred`](Self::update_status_deferred) is.
    pub fn add_artifact_deferred(
        self: &Arc<Self>,
        tenant: &str,
        event: &TaskArtifactUpdateEvent,
    ) -> Result<Option<PendingWrite>> {
        self.defer(tenant, &event.task_id, |slot| {
            self.artifact_event(slot, event)
        })
    }

    /// [`receive_message_with`](Self::receive_message_with), deferred as
    /// [`update_status_deferred`](Self::update_status_deferred) is: the
    /// message is checked and written now and published by
    /// [`PendingReceive::publish`] once durable. A resend is answered at
    /// once (a pending receive that wrote nothing). `None` (nothing
    /// written) where the blocking form would wait or write more: another
    /// writer holds the context's lock, another receive of the messageId
    /// is under way, the context is gone (its refusal may write its
    /// tombstone), or writes wait for synchronous replication.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ctxlog::MessageIds;
    /// # let dir = tempfile::tempdir()?;
    /// let store = Arc::new(ctxlog::Store::open(dir.path(), ctxlog::Options::default())?);
    /// let raw = br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#;
    /// let pending = store.receive_deferred("acme", raw, MessageIds::Idempotent)?.expect("nobody else writes");
    /// // An async caller awaits `pending.durable()` here.
    /// let receipt = pending.publish()?;
    /// assert!(store.receive_message("acme", raw)?.duplicate);
    /// assert_eq!(store.get_task("acme", &receipt.task_id, None, false)?.history.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn receive_deferred(
        self: &Arc<Self>,
        tenant: &str,
        raw: &[u8],
        ids: MessageIds,
    ) -> Result<Option<PendingReceive>> {
        self.receive_deferred_as(tenant, raw, ids, Form::V1)
    }

    /// [`receive_deferred`](Self::receive_deferred) of a message in A2A
    /// v0.3's form (see [`receive_v03_message`](Self::receive_v03_message)).
    pub fn receive_v03_deferred(
        self: &Arc<Self>,
        tenant: &str,
        raw: &[u8],
        ids: MessageIds,
    ) -> Result<Option<PendingReceive>> {
        self.receive_deferred_as(tenant, raw, ids, Form::V03)
    }

    fn receive_deferred_as(
        self: &Arc<Self>,
        tenant: &str,
        raw: &[u8],
        ids: MessageIds,
        form: Form,
    ) -> Result<Option<PendingReceive>> {
        check_tenant(tenant)?;
        let (msg, digest) = parse_inbound(raw, form)?;
        let owner = match ids {
            MessageIds::Labels => None,
            MessageIds::Idempotent => match self.index.idem_start(self.idem_key(tenant, &msg)?) {
                IdemStart::Done(slot, seq) if self.life(&slot) == Life::Live => {
                    let receipt = self.duplicate(&msg.message_id, &slot, seq, &digest)?;
                    return Ok(Some(PendingReceive {
                        written: Written::Resend(self.clone()),
                        receipt,
                    }));
                }
                // Its context is gone (the blocking form forgets it), or
                // another receive of it is under way (and may be waited for).
                IdemStart::Done(..) | IdemStart::Wait(_) => return Ok(None),
                IdemStart::Owner(guard) => Some(guard),
            },
        };
        let (slot, new_task_in) = self.slot_for(tenant, &msg)?;
        let Some(hold) = self.hold(&slot) else {
            return Ok(None);
        };
        if new_task_in.is_some() && matches!(self.life(&slot), Life::Gone(_)) {
            return Ok(None);
        }
        let (received, mut receipt) = self.plan(tenant, &slot, &msg, raw, digest, new_task_in)?;
        let claim = owner.and_then(IdemGuard::into_claim);
        let pending = self.write_pending(hold, claim, received)?;
        receipt.seq = pending.body.seq;
        Ok(Some(PendingReceive {
            written: Written::Record(pending),
            receipt,
        }))
    }

    /// Writes the periodic checkpoint if one is due (see
    /// [`Options::checkpoint_interval`](crate::Options::checkpoint_interval)):
    /// what a deferred write leaves to its caller, to run where blocking is
    /// allowed. Every other write does it itself.
    pub fn checkpoint_if_due(&self) {
        self.write_due_checkpoint();
    }

    /// Whether a periodic checkpoint is due (see
    /// [`checkpoint_if_due`](Self::checkpoint_if_due)).
    pub fn checkpoint_due(&self) -> bool {
        self.count_appended(0)
    }

    /// Takes the lock of task `task_id`'s context (or answers `None`),
    /// checks the event `event` builds, and writes it.
    fn defer(
        self: &Arc<Self>,
        tenant: &str,
        task_id: &str,
        event: impl FnOnce(&ContextSlot) -> Result<Event>,
    ) -> Result<Option<PendingWrite>> {
        let slot = self.task_slot(tenant, task_id)?;
        let Some(hold) = self.hold(&slot) else {
            return Ok(None);
        };
        let event = event(&slot)?;
        self.write_deferred(hold, event).map(Some)
    }

    /// The context's lock, if it is free and a deferred write may take it
    /// (not with synchronous replication, whose wait blocks).
    fn hold(&self, slot: &Arc<ContextSlot>) -> Option<WriteHold> {
        #[cfg(feature = "replicate")]
        if self.replica.get().is_some_and(|r| r.synchronous()) {
            return None;
        }
        WriteHold::try_take(slot)
    }

    /// Writes `event`'s record (the context's lock held by `hold`), as
    /// `append_record` does up to its wait for the sync.
    fn write_deferred(self: &Arc<Self>, hold: WriteHold, event: Event) -> Result<PendingWrite> {
        let at = event.checked.timestamp_ms;
        let record = event.checked.record(&event.task_id);
        let received = Received {
            opens: None,
            kind: event.kind,
            raw: &event.blob,
            timestamp_ms: at,
            hints: event.hints,
        };
        let pending = self.write_pending(hold, None, received)?;
        Ok(PendingWrite { pending, record })
    }

    /// Writes a record to the log, not yet published (the context's lock
    /// held by `hold`, a received message's messageId by `claim`).
    fn write_pending(
        self: &Arc<Self>,
        hold: WriteHold,
        claim: Option<IdemClaim>,
        record: Received<'_>,
    ) -> Result<Pending> {
        let hints = record.hints;
        let written = self
            .next_record(
                hold.slot(),
                record.opens,
                record.kind,
                record.raw,
                record.timestamp_ms,
            )
            .and_then(|(body, payload)| {
                let (loc, end) = self.writer.append_deferred(&payload)?;
                Ok((body, payload.len() as u64, loc, end))
            });
        let (body, bytes, loc, end) = match written {
            Ok(written) => written,
            Err(e) => {
                if let Some(claim) = claim {
                    self.index.idem_release(claim);
                }
                return Err(e);
            }
        };
        Ok(Pending {
            store: self.clone(),
            hold,
            claim,
            body,
            loc,
            hints,
            bytes,
            end,
            done: false,
        })
    }
}

impl PendingWrite {
    /// Resolves once the record is durable (or with the error its sync
    /// failed with); it parks no thread.
    pub fn durable(&self) -> Durable {
        self.pending.durable()
    }

    /// Publishes the record and lets the context's lock go; returns what
    /// the blocking form returns. Waits for the sync first if it has not
    /// landed (at once after [`durable`](Self::durable) resolved). If the
    /// sync failed, nothing is published and the error is returned.
    pub fn publish(mut self) -> Result<EventRecord> {
        self.pending.finish()?;
        Ok(self.record)
    }
}

impl PendingReceive {
    /// The receipt the message will have once published (its seq, task
    /// and event are final; nothing reads them before the publication).
    pub fn receipt(&self) -> &Receipt {
        &self.receipt
    }

    /// Resolves once the message is durable (at once for a resend), as
    /// [`PendingWrite::durable`] does.
    pub fn durable(&self) -> Durable {
        match &self.written {
            Written::Record(pending) => pending.durable(),
            Written::Resend(store) => store.writer.log().durable(0),
        }
    }

    /// Publishes the message, lets its context's lock and its messageId
    /// go, and returns its receipt, as [`PendingWrite::publish`] does.
    pub fn publish(mut self) -> Result<Receipt> {
        if let Written::Record(pending) = &mut self.written {
            pending.finish()?;
        }
        Ok(self.receipt)
    }
}

impl Pending {
    fn durable(&self) -> Durable {
        self.store.writer.log().durable(self.end)
    }

    /// Publishes the record once durable (or abandons it, if its sync
    /// failed), then gives the messageId claim back; the lock goes with
    /// the hold, after.
    fn finish(&mut self) -> Result<()> {
        if self.done {
            return Ok(());
        }
        self.done = true;
        let published = self.publish_record();
        if let Some(claim) = self.claim.take() {
            self.store.index.idem_release(claim);
        }
        published
    }

    fn publish_record(&self) -> Result<()> {
        let store = &self.store;
        if let Err(e) = store.writer.wait_until(self.end) {
            store.writer.published(self.loc);
            return Err(e);
        }
        let slot = self.hold.slot();
        apply(
            &store.index,
            slot,
            &mut slot.state.write(),
            &self.body,
            self.loc,
            self.hints,
        );
        store.published(slot, std::slice::from_ref(&self.loc));
        // A checkpoint due is left to the caller (`checkpoint_if_due`): it
        // writes the whole index, which an async worker must not wait for.
        store.count_appended(self.bytes);
        store.after_replicated()
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        // Published (or abandoned, if its sync failed) before the hold
        // lets the lock go, as `publish` does.
        let _ = self.finish();
    }
}
