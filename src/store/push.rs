//! Push-notification configs and their delivery positions, kept in the
//! log beside the task they belong to (DESIGN.md §7, "Push
//! notifications"): a `Push` record sets or deletes a config, or says how
//! far its receiver has acknowledged the task's events. Nothing of them is
//! held in memory: the index keeps each record as a 16-byte entry under no
//! task, and a read folds the context's push records in log order.

use super::tasks::{Form, MessageIds, Receipt, TaskRef};
use super::{next_timestamp, now_ms, Hints, Store};
use crate::error::{Error, Result};
use crate::index::{ContextSlot, Life};
use crate::log::record::{ContextName, PushChange, RecordBody, RecordKind};

/// The longest config id taken, in bytes.
pub const MAX_PUSH_CONFIG_ID: usize = 1024;

/// A task's push-notification config as the store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushConfig {
    /// The config's id within its task.
    pub config_id: String,
    /// The config, exactly as it was set (the store does not read it).
    pub config: Vec<u8>,
    /// The task's event seq its delivery starts after: events up to this
    /// one were there before the config and are not its to deliver.
    pub start_after: u64,
    /// The last event seq its receiver acknowledged (at least
    /// `start_after`): delivery resumes after it.
    pub delivered: u64,
    /// Which setting of the config this is (the seq of the record that
    /// set it): what [`Store::push_delivered`] names, so that a position
    /// reached for a config since replaced is never taken for its
    /// successor's.
    pub version: u64,
}

/// A push-notification config that comes with a message (A2A's
/// `SendMessage` may carry one), for
/// [`Store::receive_with_push`].
#[derive(Debug, Clone, Copy)]
pub struct InlinePush<'a> {
    /// The config's id; `None`: the id of the task the message goes to.
    pub config_id: Option<&'a str>,
    /// The config, kept byte for byte as [`Store::set_push_config`] keeps
    /// one.
    pub config: &'a [u8],
}

/// A received message's record, as a receive is about to append it.
pub(super) struct Received<'a> {
    pub(super) opens: Option<ContextName>,
    pub(super) kind: RecordKind,
    pub(super) raw: &'a [u8],
    pub(super) timestamp_ms: u64,
    pub(super) hints: Hints,
}

impl Store {
    /// Receives a message as [`receive_message_with`](Self::receive_message_with)
    /// does (or, with `v03`, as [`receive_v03_message`](Self::receive_v03_message)
    /// does) and stores `push` as a config of the task the message goes to,
    /// in the same durable write: one sync for both, and a crash keeps the
    /// message alone or both, never the config alone. The config's delivery
    /// starts after the message's event. A resent message is answered as
    /// a resend (its receipt says `duplicate`) and stores no config: the
    /// second of the pair is `None`, and the caller may then set it as
    /// [`set_push_config`](Self::set_push_config) does. An invalid config
    /// id stores nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// use ctxlog::{InlinePush, MessageIds};
    /// let msg = br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#;
    /// let push = InlinePush { config_id: None, config: br#"{"url":"https://hook.example"}"# };
    /// let (receipt, config) = store.receive_with_push("acme", msg, MessageIds::Idempotent, false, push)?;
    /// let config = config.expect("a new message stores its config");
    /// assert_eq!(config.config_id, receipt.task_id);
    /// assert_eq!(store.push_configs("acme", &receipt.task_id)?, [config]);
    /// let (again, none) = store.receive_with_push("acme", msg, MessageIds::Idempotent, false, push)?;
    /// assert!(again.duplicate && none.is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn receive_with_push(
        &self,
        tenant: &str,
        raw: &[u8],
        ids: MessageIds,
        v03: bool,
        push: InlinePush<'_>,
    ) -> Result<(Receipt, Option<PushConfig>)> {
        if let Some(id) = push.config_id {
            check_config_id(id)?;
        }
        let form = if v03 { Form::V03 } else { Form::V1 };
        let receipt = self.receive_as(tenant, raw, ids, form, Some(push))?;
        if receipt.duplicate {
            return Ok((receipt, None));
        }
        // The config's record follows the message's (`append_received`).
        let config = PushConfig {
            config_id: push.config_id.unwrap_or(&receipt.task_id).to_string(),
            config: push.config.to_vec(),
            start_after: receipt.event,
            delivered: receipt.event,
            version: receipt.seq + 1,
        };
        Ok((receipt, Some(config)))
    }

    /// Appends a received message's record (task `task_id`'s event
    /// `event`) and, with `push`, the record setting that config right
    /// after it (at the next seq), with one sync for both; returns the
    /// message's seq. The caller holds the context's write lock.
    pub(super) fn append_received(
        &self,
        slot: &ContextSlot,
        received: Received<'_>,
        task_id: &str,
        event: u64,
        push: Option<InlinePush<'_>>,
    ) -> Result<u64> {
        let Received {
            opens,
            kind,
            raw,
            timestamp_ms,
            hints,
        } = received;
        let Some(push) = push else {
            return self.append_record(slot, opens, kind, raw, timestamp_ms, hints);
        };
        if self.options.read_only {
            return Err(Error::ReadOnly);
        }
        self.check_fenced()?;
        let seq = slot.state.read().next_seq;
        super::room_for(seq, 2)?;
        let message = RecordBody {
            seq,
            timestamp_ms,
            opens,
            kind,
        };
        let config = RecordBody {
            seq: seq + 1,
            timestamp_ms,
            opens: None,
            kind: RecordKind::Push {
                task_id: task_id.to_string(),
                config_id: push.config_id.unwrap_or(task_id).to_string(),
                change: PushChange::Set { through: event },
            },
        };
        let payloads = [
            self.encode(&slot.key, &message, raw)?,
            self.encode(&slot.key, &config, push.config)?,
        ];
        let locs = self.writer.append_all(&payloads)?;
        {
            let mut state = slot.state.write();
            let applied = [(&message, hints), (&config, Hints::default())];
            for ((body, hints), &loc) in applied.into_iter().zip(&locs) {
                super::apply(&self.index, slot, &mut state, body, loc, hints);
            }
        }
        let bytes = payloads.iter().map(|p| p.len() as u64).sum();
        self.after_publish(slot, &locs, bytes)?;
        Ok(seq)
    }

    /// Sets task `task_id`'s push-notification config `config_id` (creates
    /// it, or replaces the one of that id), durably, and returns it as
    /// stored: its delivery starts after event `after`, or after the
    /// task's events so far when `None`. `config` is kept byte for byte
    /// and never read by the store. Another tenant's task, or a task whose
    /// context is gone, answers [`Error::TaskNotFound`]; a task in a
    /// terminal state takes a config too (its delivery may still be under
    /// way).
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// # let r = store.receive_message("acme", br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#)?;
    /// let config = br#"{"url":"http://127.0.0.1:9/hook"}"#;
    /// let set = store.set_push_config("acme", &r.task_id, "c1", config, None)?;
    /// assert_eq!(set.start_after, 1); // after the message, event 1
    /// let configs = store.push_configs("acme", &r.task_id)?;
    /// assert_eq!(configs, [set]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_push_config(
        &self,
        tenant: &str,
        task_id: &str,
        config_id: &str,
        config: &[u8],
        after: Option<u64>,
    ) -> Result<PushConfig> {
        check_config_id(config_id)?;
        let slot = self.task_slot(tenant, task_id)?;
        let _turn = slot.write.lock();
        self.refuse_if_gone(&slot)?;
        let events = event_count(&slot, task_id)?;
        let through = after.unwrap_or(events).min(events);
        let change = PushChange::Set { through };
        let version = self.append_push(&slot, task_id, config_id, change, config)?;
        Ok(PushConfig {
            config_id: config_id.to_string(),
            config: config.to_vec(),
            start_after: through,
            delivered: through,
            version,
        })
    }

    /// Deletes task `task_id`'s push-notification config `config_id`,
    /// durably; returns whether there was one (deleting it again changes
    /// nothing and writes nothing). Nothing more is delivered to it.
    pub fn delete_push_config(&self, tenant: &str, task_id: &str, config_id: &str) -> Result<bool> {
        let slot = self.task_slot(tenant, task_id)?;
        let _turn = slot.write.lock();
        self.refuse_if_gone(&slot)?;
        let exists = self.config_position(&slot, task_id, config_id)?.is_some();
        if exists {
            self.append_push(&slot, task_id, config_id, PushChange::Delete, &[])?;
        }
        Ok(exists)
    }

    /// Task `task_id`'s push-notification configs, in the order they were
    /// first set, each with how far its delivery got. Reads only the
    /// context's push records.
    pub fn push_configs(&self, tenant: &str, task_id: &str) -> Result<Vec<PushConfig>> {
        let slot = self.task_slot(tenant, task_id)?;
        self.task_push(&slot, task_id)
    }

    /// Records that config `config_id`'s receiver acknowledged every event
    /// of the task up to and including event seq `through`, durably (one
    /// record for any number of events), for the config as set at
    /// `version` ([`PushConfig::version`]). Returns whether it was
    /// written: not for a config that is gone or was set again meanwhile,
    /// nor for a position it had already reached. A position past the
    /// task's last event is [`Error::InvalidParams`].
    pub fn push_delivered(
        &self,
        tenant: &str,
        task_id: &str,
        config_id: &str,
        version: u64,
        through: u64,
    ) -> Result<bool> {
        let slot = self.task_slot(tenant, task_id)?;
        let _turn = slot.write.lock();
        self.refuse_if_gone(&slot)?;
        if through > event_count(&slot, task_id)? {
            return Err(Error::InvalidParams {
                field: "through",
                reason: format!("event {through} is past the task's last event"),
            });
        }
        let behind = self
            .config_position(&slot, task_id, config_id)?
            .is_some_and(|(set_seq, delivered)| set_seq == version && delivered < through);
        if behind {
            let change = PushChange::Delivered {
                through,
                set_seq: version,
            };
            self.append_push(&slot, task_id, config_id, change, &[])?;
        }
        Ok(behind)
    }

    /// Every live task that has at least one push-notification config:
    /// what a server resumes delivery for after it opens the store. A walk
    /// over every context's in-memory entries, reading only the push
    /// records it finds.
    pub fn push_tasks(&self) -> Result<Vec<TaskRef>> {
        let now = now_ms();
        let mut found = Vec::new();
        for slot in self.index.all_slots() {
            let (tenant, context_id) = {
                let state = slot.state.read();
                if state.life(now, self.options.retention) != Life::Live
                    || state.taskless_record_locs().next().is_none()
                {
                    continue;
                }
                let Some(meta) = &state.meta else { continue };
                (meta.tenant().to_string(), meta.context_id().to_string())
            };
            let mut tasks: Vec<String> = self
                .fold_push(&slot, None)?
                .into_iter()
                .map(|(task_id, _)| task_id)
                .collect();
            tasks.dedup();
            let state = slot.state.read();
            for task_id in tasks {
                let Some(task) = state.task(&task_id) else {
                    continue;
                };
                found.push(TaskRef {
                    tenant: tenant.clone(),
                    context_id: context_id.clone(),
                    state: task.state(),
                    task_id,
                });
            }
        }
        Ok(found)
    }

    /// Appends one push record (the caller holds the context's write lock).
    fn append_push(
        &self,
        slot: &ContextSlot,
        task_id: &str,
        config_id: &str,
        change: PushChange,
        blob: &[u8],
    ) -> Result<u64> {
        let kind = RecordKind::Push {
            task_id: task_id.to_string(),
            config_id: config_id.to_string(),
            change,
        };
        let ts = next_timestamp(&slot.state.read());
        self.append_record(slot, None, kind, blob, ts, Hints::default())
    }

    /// Folds the context's push records (of task `only`, or of every
    /// task), in log order, into the live configs, grouped by task in the
    /// order each task's first config was set. The records are read under
    /// the context's read lock, so a merge cannot move them meanwhile.
    fn fold_push(
        &self,
        slot: &ContextSlot,
        only: Option<&str>,
    ) -> Result<Vec<(String, PushConfig)>> {
        let state = slot.state.read();
        let mut records = self.context_records(&slot.key);
        let mut configs: Vec<(String, PushConfig)> = Vec::new();
        for loc in state.taskless_record_locs() {
            records.record(loc, |body, blob| {
                let RecordKind::Push {
                    task_id,
                    config_id,
                    change,
                } = &body.kind
                else {
                    return;
                };
                if only.is_some_and(|only| only != task_id) {
                    return;
                }
                let at = configs
                    .iter()
                    .position(|(t, c)| t == task_id && &c.config_id == config_id);
                match (*change, at) {
                    (PushChange::Set { through }, at) => {
                        let config = PushConfig {
                            config_id: config_id.clone(),
                            config: blob.to_vec(),
                            start_after: through,
                            delivered: through,
                            version: body.seq,
                        };
                        match at.and_then(|i| configs.get_mut(i)) {
                            Some((_, old)) => *old = config,
                            None => {
                                // After the task's other configs, so that
                                // each task's stay together.
                                let end = configs
                                    .iter()
                                    .rposition(|(t, _)| t == task_id)
                                    .map_or(configs.len(), |i| i + 1);
                                configs.insert(end, (task_id.clone(), config));
                            }
                        }
                    }
                    (PushChange::Delete, Some(i)) => {
                        configs.remove(i);
                    }
                    (PushChange::Delivered { through, set_seq }, Some(i)) => {
                        if let Some((_, c)) =
                            configs.get_mut(i).filter(|(_, c)| c.version == set_seq)
                        {
                            c.delivered = c.delivered.max(through);
                        }
                    }
                    (PushChange::Delete | PushChange::Delivered { .. }, None) => {}
                }
            })?;
        }
        Ok(configs)
    }

    /// Which setting of config `config_id` of task `task_id` lives, and how
    /// far it got: (version, position), as its newest record says (a
    /// `Delete`: gone; a `Set`: its own seq and start; a `Delivered`: the
    /// set it names and its position, since positions only grow between
    /// two sets and are written only for the live one). A walk
    /// back from the context's newest push record, which a delivery's own
    /// records usually are: it costs what was written since the config's
    /// last change, not the task's whole life.
    fn config_position(
        &self,
        slot: &ContextSlot,
        task_id: &str,
        config_id: &str,
    ) -> Result<Option<(u64, u64)>> {
        let state = slot.state.read();
        let mut records = self.context_records(&slot.key);
        for loc in state.taskless_record_locs().rev() {
            let found = records.record(loc, |body, _| match &body.kind {
                RecordKind::Push {
                    task_id: t,
                    config_id: c,
                    change,
                } if t == task_id && c == config_id => Some(match *change {
                    PushChange::Set { through } => Some((body.seq, through)),
                    PushChange::Delivered { through, set_seq } => Some((set_seq, through)),
                    PushChange::Delete => None,
                }),
                _ => None,
            })?;
            if let Some(found) = found {
                return Ok(found);
            }
        }
        Ok(None)
    }

    /// Task `task_id`'s live configs (see [`fold_push`](Self::fold_push)).
    fn task_push(&self, slot: &ContextSlot, task_id: &str) -> Result<Vec<PushConfig>> {
        Ok(self
            .fold_push(slot, Some(task_id))?
            .into_iter()
            .map(|(_, c)| c)
            .collect())
    }
}

/// The number of events of task `task_id` (whose context's write lock the
/// caller holds).
fn event_count(slot: &ContextSlot, task_id: &str) -> Result<u64> {
    let state = slot.state.read();
    let task = state.task(task_id).ok_or(Error::TaskNotFound)?;
    Ok(task.event_count() as u64)
}

fn check_config_id(config_id: &str) -> Result<()> {
    if config_id.is_empty() || config_id.len() > MAX_PUSH_CONFIG_ID {
        return Err(Error::InvalidParams {
            field: "id",
            reason: format!(
                "a push-notification config id is 1 to {MAX_PUSH_CONFIG_ID} bytes; this one is {}",
                config_id.len()
            ),
        });
    }
    Ok(())
}
