//! Deferred task events: a status or an artifact chunk written to the log
//! at once, and published once its sync lands, with the context's write
//! lock held in between by the pending write itself. A caller on an async
//! runtime awaits the sync ([`PendingWrite::durable`]) instead of parking
//! a thread for it; the rules are those of every write (DESIGN.md §12,
//! "A send").

use std::sync::Arc;

use super::tasks::Event;
use super::{apply, Store};
use crate::a2a::{TaskArtifactUpdateEvent, TaskStatusUpdateEvent};
use crate::error::Result;
use crate::index::write_lock::WriteHold;
use crate::index::ContextSlot;
use crate::log::record::RecordBody;
use crate::log::segments::RecordLoc;
use crate::log::writer::Durable;
use crate::store::EventRecord;

/// A task event written to the log and not yet published: the context's
/// write lock stays held until it is. Await [`durable`](Self::durable),
/// then call [`publish`](Self::publish). Dropped unpublished, it waits for
/// the sync on the dropping thread and publishes then, so the index never
/// lacks a record the log holds.
#[must_use = "a pending write holds its context's lock until it is published"]
pub struct PendingWrite {
    store: Arc<Store>,
    hold: WriteHold,
    body: RecordBody,
    loc: RecordLoc,
    hints: super::Hints,
    bytes: u64,
    end: u64,
    record: EventRecord,
    done: bool,
}

impl std::fmt::Debug for PendingWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingWrite")
            .field("record", &self.record)
            .field("end", &self.end)
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
        let (body, payload) = self.next_record(hold.slot(), None, event.kind, &event.blob, at)?;
        let (loc, end) = self.writer.append_deferred(&payload)?;
        Ok(PendingWrite {
            store: self.clone(),
            hold,
            body,
            loc,
            hints: event.hints,
            bytes: payload.len() as u64,
            end,
            record: event.checked.record(&event.task_id),
            done: false,
        })
    }
}

impl PendingWrite {
    /// Resolves once the record is durable (or with the error its sync
    /// failed with); it parks no thread.
    pub fn durable(&self) -> Durable {
        self.store.writer.log().durable(self.end)
    }

    /// Publishes the record and lets the context's lock go; returns what
    /// the blocking form returns. Waits for the sync first if it has not
    /// landed (at once after [`durable`](Self::durable) resolved). If the
    /// sync failed, nothing is published and the error is returned.
    pub fn publish(mut self) -> Result<EventRecord> {
        self.finish()?;
        Ok(self.record.clone())
    }

    fn finish(&mut self) -> Result<()> {
        self.done = true;
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

impl Drop for PendingWrite {
    fn drop(&mut self) {
        if !self.done {
            // Published (or abandoned, if its sync failed) before the hold
            // lets the lock go, as `publish` does.
            let _ = self.finish();
        }
    }
}
