//! Several messages appended to one context at once, with one sync: what a
//! conversation memory writes for a turn (the user's input, the model's
//! items, the tool calls and their results).

use super::{next_timestamp, Appended, Hints, Store};
use crate::error::{Error, Result};
use crate::log::record::{ContextName, RecordBody, RecordKind};
use crate::namespace::ContextKey;

impl Store {
    /// Saves each of `raws` byte for byte as a message of the context, in
    /// order, as [`append_message`](Self::append_message) does one, and
    /// returns once all of them are as durable as the store's durability
    /// promises: one sync for the lot. They become visible together, after
    /// that sync. A crash before it returns can keep a prefix of them (each
    /// message whole), never a later one without an earlier one. An empty
    /// list writes nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// let turn: [&[u8]; 3] = [b"question", b"tool call", b"answer"];
    /// let appended = store.append_messages("acme", "session-1", &turn)?; // one sync
    /// assert_eq!(appended.iter().map(|a| a.seq).collect::<Vec<_>>(), [0, 1, 2]);
    /// assert_eq!(store.last_messages("acme", "session-1", 10)?.len(), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn append_messages(
        &self,
        tenant: &str,
        context_id: &str,
        raws: &[impl AsRef<[u8]>],
    ) -> Result<Vec<Appended>> {
        let key = ContextKey::derive(tenant, context_id)?;
        if raws.is_empty() {
            return Ok(Vec::new());
        }
        if self.options.read_only {
            return Err(Error::ReadOnly);
        }
        let slot = self.index.get_or_insert(&key);
        let _turn = slot.write.lock();
        self.refuse_if_gone(&slot)?;
        let (opened, first_seq, timestamp_ms) = {
            let state = slot.state.read();
            (state.meta.is_some(), state.next_seq, next_timestamp(&state))
        };
        super::room_for(first_seq, raws.len() as u64)?;
        self.check_fenced()?;
        let mut bodies = Vec::with_capacity(raws.len());
        let mut payloads = Vec::with_capacity(raws.len());
        for (seq, raw) in (first_seq..).zip(raws) {
            let opens = (!opened && seq == first_seq).then(|| ContextName {
                tenant: tenant.to_string(),
                context_id: context_id.to_string(),
            });
            let body = RecordBody {
                seq,
                timestamp_ms,
                opens,
                kind: RecordKind::Message { task: None },
            };
            payloads.push(self.encode(&slot.key, &body, raw.as_ref())?);
            bodies.push(body);
        }
        let locs = self.writer.append_all(&payloads)?;
        {
            let mut state = slot.state.write();
            for (body, &loc) in bodies.iter().zip(&locs) {
                super::apply(&self.index, &slot, &mut state, body, loc, Hints::default());
            }
        }
        let bytes = payloads.iter().map(|p| p.len() as u64).sum();
        self.after_publish(&slot, &locs, bytes)?;
        Ok(bodies
            .iter()
            .map(|body| Appended {
                key,
                seq: body.seq,
                timestamp_ms,
                opened_context: body.opens.is_some(),
            })
            .collect())
    }
}
