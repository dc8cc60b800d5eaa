//! Taking messages back out of a context's history while the context lives
//! on: the newest message ([`Store::pop_message`]) or all of them
//! ([`Store::empty_context`]). What a conversation memory needs to undo a
//! turn or start a session over under the same id; neither retires the id
//! as [`Store::delete_context`] does. Both append one `Hide` record
//! (DESIGN.md §2, §7), durable before they return.

use super::{next_timestamp, Hints, Store, StoredMessage};
use crate::error::{Error, Result};
use crate::index::ContextSlot;
use crate::log::record::RecordKind;

impl Store {
    /// Takes the newest message out of a context's history, durably, and
    /// returns it (`None`, writing nothing, when the history is empty). The
    /// context stays open for new messages. Only for a context of
    /// [`append_message`](Self::append_message)s: one with tasks is
    /// [`Error::UnsupportedOperation`] (a task's history is the task's
    /// record). Another tenant's context answers as a missing one.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// store.append_message("acme", "session-1", b"one")?;
    /// store.append_message("acme", "session-1", b"two")?;
    /// let popped = store.pop_message("acme", "session-1")?.expect("a message");
    /// assert_eq!(popped.raw, b"two");
    /// let left = store.last_messages("acme", "session-1", 10)?;
    /// assert_eq!(left.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn pop_message(&self, tenant: &str, context_id: &str) -> Result<Option<StoredMessage>> {
        let slot = self.visible_slot(tenant, context_id)?;
        let _turn = slot.write.lock();
        self.refuse_if_gone(&slot)?;
        refuse_if_tasks(&slot)?;
        // Read under the write lock: no other write can come between the
        // read and the record that hides it.
        let Some(message) = self.last_messages(tenant, context_id, 1)?.pop() else {
            return Ok(None);
        };
        self.append_hide(&slot, message.seq, message.seq + 1)?;
        Ok(Some(message))
    }

    /// Takes every message out of a context's history, durably; returns
    /// how many there were (0, writing nothing, when it was already
    /// empty). The context keeps its id and stays open: the next
    /// [`append_message`](Self::append_message) continues it. Only for a
    /// context of `append_message`s, as [`pop_message`](Self::pop_message).
    /// The messages' bytes stay on disk until the context is deleted or
    /// expires.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// store.append_message("acme", "session-1", b"one")?;
    /// assert_eq!(store.empty_context("acme", "session-1")?, 1);
    /// assert!(store.last_messages("acme", "session-1", 10)?.is_empty());
    /// store.append_message("acme", "session-1", b"again")?; // the id lives on
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn empty_context(&self, tenant: &str, context_id: &str) -> Result<u64> {
        let slot = self.visible_slot(tenant, context_id)?;
        let _turn = slot.write.lock();
        self.refuse_if_gone(&slot)?;
        refuse_if_tasks(&slot)?;
        let (count, next_seq) = {
            let state = slot.state.read();
            (state.history_len(), state.next_seq)
        };
        if count == 0 {
            return Ok(0);
        }
        self.append_hide(&slot, 0, next_seq)?;
        Ok(count)
    }

    /// Appends the record that hides seqs `from_seq..to_seq` (the caller
    /// holds the context's write lock).
    fn append_hide(&self, slot: &ContextSlot, from_seq: u64, to_seq: u64) -> Result<u64> {
        let kind = RecordKind::Hide { from_seq, to_seq };
        let ts = next_timestamp(&slot.state.read());
        self.append_record(slot, None, kind, &[], ts, Hints::default())
    }
}

/// Messages leave only a history of appended messages: a task's messages
/// are its record, which A2A never takes back.
fn refuse_if_tasks(slot: &ContextSlot) -> Result<()> {
    if slot.state.read().task_count() > 0 {
        return Err(Error::UnsupportedOperation {
            reason: "the context holds tasks, whose messages are never taken back; only a \
                     context of appended messages can have messages removed"
                .into(),
        });
    }
    Ok(())
}
