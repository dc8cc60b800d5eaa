//! A store's records in a portable form: one JSON line per record, which
//! `export` writes and `import` reads back. Every stored byte string (a
//! message as received, a status or an artifact as the agent gave it, a raw
//! append) travels exactly, so an export of an import of an export is the
//! export itself.
//!
//! A line names its tenant, context, seq and timestamp, then what the record
//! is, in the A2A JSON form:
//!
//! ```text
//! {"tenant":"t","contextId":"c","seq":0,"timestamp":"…","taskId":"…","opensTask":true,"message":{…}}
//! {"tenant":"t","contextId":"c","seq":1,"timestamp":"…","statusUpdate":{"taskId":"…","contextId":"c","status":{…}}}
//! {"tenant":"t","contextId":"c","seq":2,"timestamp":"…","artifactUpdate":{"taskId":"…","contextId":"c","append":false,"lastChunk":true,"artifact":{…}}}
//! {"tenant":"t","contextId":"c","seq":3,"timestamp":"…","raw":"bytes appended outside the task model"}
//! ```
//!
//! A stored JSON object is embedded as it is, unless it holds a line break
//! (a pretty-printed message): then it goes as a JSON string
//! (`messageText`, `statusText`, `artifactText`), so that a record stays one
//! line. Raw bytes that are not UTF-8 go as hex (`rawHex`).

use serde::Deserialize;
use serde_json::value::RawValue;

use super::tasks::{context_of, inbound, parse_inbound, stored_form};
use super::Store;
use crate::a2a::lifecycle::Op;
use crate::a2a::{json, Artifact, TaskStatus};
use crate::error::{Error, Result};
use crate::index::{IdemStart, Life};
use crate::log::record::{ContextName, RecordBody, RecordKind};
use crate::namespace::{
    check_context_id, check_tenant, context_message_key, message_key, ContextKey,
};
use crate::time::{iso8601_ms, parse_iso8601_ms};

/// One record of a context, in the portable form (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// The context's tenant.
    pub tenant: String,
    /// The context's id, byte for byte.
    pub context_id: String,
    /// The record's position in its context.
    pub seq: u64,
    /// When it was stored (ms since the Unix epoch).
    pub timestamp_ms: u64,
    /// What it is.
    pub kind: ItemKind,
}

/// What a record is, with its stored bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ItemKind {
    /// Bytes saved with [`Store::append_message`], outside the task model.
    Appended {
        /// The bytes.
        raw: Vec<u8>,
    },
    /// A message received into the task model.
    Received {
        /// The task it opened or joined.
        task_id: String,
        /// Whether it opened the task.
        opens_task: bool,
        /// The message, as received.
        message: Vec<u8>,
    },
    /// A task's new status, as the agent gave it.
    Status {
        /// The task.
        task_id: String,
        /// The `TaskStatus` JSON.
        status: Vec<u8>,
    },
    /// An artifact chunk, as the agent gave it.
    Artifact {
        /// The task.
        task_id: String,
        /// Extends the artifact of its id.
        append: bool,
        /// Nothing may follow it.
        last_chunk: bool,
        /// The `Artifact` JSON.
        artifact: Vec<u8>,
    },
}

impl Item {
    /// The item as one line of JSON (no line break in it or after it).
    pub fn to_json_line(&self) -> String {
        let mut out = format!(
            "{{\"tenant\":{},\"contextId\":{},\"seq\":{},\"timestamp\":{}",
            quote(&self.tenant),
            quote(&self.context_id),
            self.seq,
            quote(&iso8601_ms(self.timestamp_ms)),
        );
        match &self.kind {
            ItemKind::Appended { raw } => match std::str::from_utf8(raw) {
                Ok(text) => out.push_str(&format!(",\"raw\":{}", quote(text))),
                Err(_) => out.push_str(&format!(",\"rawHex\":\"{}\"", hex::encode(raw))),
            },
            ItemKind::Received {
                task_id,
                opens_task,
                message,
            } => {
                out.push_str(&format!(
                    ",\"taskId\":{},\"opensTask\":{opens_task},",
                    quote(task_id)
                ));
                embed(&mut out, "message", message);
            }
            ItemKind::Status { task_id, status } => {
                out.push_str(&format!(
                    ",\"statusUpdate\":{{\"taskId\":{},\"contextId\":{},",
                    quote(task_id),
                    quote(&self.context_id)
                ));
                embed(&mut out, "status", status);
                out.push('}');
            }
            ItemKind::Artifact {
                task_id,
                append,
                last_chunk,
                artifact,
            } => {
                out.push_str(&format!(
                    ",\"artifactUpdate\":{{\"taskId\":{},\"contextId\":{},\"append\":{append},\"lastChunk\":{last_chunk},",
                    quote(task_id),
                    quote(&self.context_id)
                ));
                embed(&mut out, "artifact", artifact);
                out.push('}');
            }
        }
        out.push('}');
        out
    }

    /// Reads a line [`to_json_line`](Self::to_json_line) wrote.
    pub fn from_json_line(line: &str) -> Result<Self> {
        let bad = |reason: String| Error::InvalidParams {
            field: "line",
            reason,
        };
        let l: Line<'_> = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
        let timestamp_ms = parse_iso8601_ms(&l.timestamp)
            .ok_or_else(|| bad(format!("timestamp {:?} is not ISO 8601 UTC", l.timestamp)))?;
        let kind = match (l.raw, l.raw_hex, l.status_update, l.artifact_update) {
            (Some(raw), None, None, None) => ItemKind::Appended {
                raw: raw.into_bytes(),
            },
            (None, Some(h), None, None) => ItemKind::Appended {
                raw: hex::decode(h).map_err(|e| bad(format!("rawHex: {e}")))?,
            },
            (None, None, Some(s), None) => ItemKind::Status {
                task_id: s.task_id,
                status: embedded("status", s.status, s.status_text).map_err(bad)?,
            },
            (None, None, None, Some(a)) => ItemKind::Artifact {
                task_id: a.task_id,
                append: a.append,
                last_chunk: a.last_chunk,
                artifact: embedded("artifact", a.artifact, a.artifact_text).map_err(bad)?,
            },
            (None, None, None, None) => ItemKind::Received {
                task_id: l
                    .task_id
                    .ok_or_else(|| bad("a received message needs its taskId".into()))?,
                opens_task: l.opens_task.unwrap_or(false),
                message: embedded("message", l.message, l.message_text).map_err(bad)?,
            },
            _ => {
                return Err(bad(
                    "give one of raw, rawHex, message, statusUpdate and artifactUpdate".into(),
                ))
            }
        };
        Ok(Item {
            tenant: l.tenant,
            context_id: l.context_id,
            seq: l.seq,
            timestamp_ms,
            kind,
        })
    }
}

/// A line as read: stored objects borrowed as their raw text.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Line<'a> {
    tenant: String,
    context_id: String,
    seq: u64,
    timestamp: String,
    task_id: Option<String>,
    opens_task: Option<bool>,
    #[serde(borrow)]
    message: Option<&'a RawValue>,
    message_text: Option<String>,
    raw: Option<String>,
    raw_hex: Option<String>,
    #[serde(borrow)]
    status_update: Option<StatusLine<'a>>,
    #[serde(borrow)]
    artifact_update: Option<ArtifactLine<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StatusLine<'a> {
    task_id: String,
    #[allow(dead_code)]
    context_id: Option<String>,
    #[serde(borrow)]
    status: Option<&'a RawValue>,
    status_text: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ArtifactLine<'a> {
    task_id: String,
    #[allow(dead_code)]
    context_id: Option<String>,
    #[serde(default)]
    append: bool,
    #[serde(default)]
    last_chunk: bool,
    #[serde(borrow)]
    artifact: Option<&'a RawValue>,
    artifact_text: Option<String>,
}

/// A string as JSON.
fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| String::from("\"\""))
}

/// `"name":<the stored object>`, or `"nameText":"<it, as a string>"` when
/// it holds a line break (or is not UTF-8 JSON text to embed).
fn embed(out: &mut String, name: &str, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(text)
            if !text.contains(['\n', '\r']) && serde_json::from_str::<&RawValue>(text).is_ok() =>
        {
            out.push_str(&format!("\"{name}\":{text}"));
        }
        _ => out.push_str(&format!(
            "\"{name}Text\":{}",
            quote(&String::from_utf8_lossy(bytes))
        )),
    }
}

/// The stored bytes of an embedded object, from whichever form it took.
fn embedded(
    name: &str,
    raw: Option<&RawValue>,
    text: Option<String>,
) -> std::result::Result<Vec<u8>, String> {
    match (raw, text) {
        (Some(raw), None) => Ok(raw.get().as_bytes().to_vec()),
        (None, Some(text)) => Ok(text.into_bytes()),
        _ => Err(format!("give one of {name} and {name}Text")),
    }
}

impl Store {
    /// The tenants that hold a live context, sorted.
    pub fn tenants(&self) -> Vec<String> {
        let now = super::now_ms();
        let mut tenants: Vec<String> = self
            .index
            .all_slots()
            .into_iter()
            .filter_map(|slot| {
                let state = slot.state.read();
                (state.life(now, self.options.retention) == Life::Live)
                    .then(|| state.meta.as_ref().map(|m| m.tenant().to_string()))
                    .flatten()
            })
            .collect();
        tenants.sort();
        tenants.dedup();
        tenants
    }

    /// Every record of a live context, oldest first, in the portable form
    /// (see [`Item`]); `ContextNotFound` for a context this tenant does not
    /// have.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// # let copy_dir = tempfile::tempdir()?;
    /// store.append_message("acme", "case-42", b"hello")?;
    /// let items = store.export_context("acme", "case-42")?;
    /// assert!(items[0].to_json_line().ends_with(r#""raw":"hello"}"#));
    /// // Into another store, and back out the same.
    /// let copy = ctxlog::Store::open(copy_dir.path(), ctxlog::Options::default())?;
    /// for item in &items {
    ///     copy.import_item(item)?;
    /// }
    /// assert_eq!(copy.export_context("acme", "case-42")?, items);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn export_context(&self, tenant: &str, context_id: &str) -> Result<Vec<Item>> {
        let slot = self.visible_slot(tenant, context_id)?;
        // Under the context's read lock, so a compaction cannot move the
        // records while they are read.
        let state = slot.state.read();
        let context_id = context_of(&state)?.to_string();
        let mut items = Vec::with_capacity(state.history_len() as usize);
        // Messages taken out of the history are not exported, nor the
        // records that took them: an export is what the context holds.
        for loc in state.visible_record_locs() {
            let item = self.with_record(&slot.key, loc, |body, blob| {
                let kind = match &body.kind {
                    RecordKind::Message { task: None } => {
                        Some(ItemKind::Appended { raw: blob.to_vec() })
                    }
                    RecordKind::Message { task: Some(link) } => Some(ItemKind::Received {
                        task_id: link.task_id.clone(),
                        opens_task: link.opens_task,
                        message: blob.to_vec(),
                    }),
                    RecordKind::Status { task_id, .. } => Some(ItemKind::Status {
                        task_id: task_id.clone(),
                        status: blob.to_vec(),
                    }),
                    RecordKind::Artifact {
                        task_id,
                        append,
                        last_chunk,
                        ..
                    } => Some(ItemKind::Artifact {
                        task_id: task_id.clone(),
                        append: *append,
                        last_chunk: *last_chunk,
                        artifact: blob.to_vec(),
                    }),
                    // Push configs and delivery positions are the server's
                    // working state, and hold credentials: not exported.
                    RecordKind::Gone { .. } | RecordKind::Hide { .. } | RecordKind::Push { .. } => {
                        None
                    }
                };
                kind.map(|kind| Item {
                    tenant: tenant.to_string(),
                    context_id: context_id.clone(),
                    seq: body.seq,
                    timestamp_ms: body.timestamp_ms,
                    kind,
                })
            })?;
            items.extend(item);
        }
        Ok(items)
    }

    /// Appends one exported record to its context (opening the context with
    /// its first record), checked as the live path checks it: a message
    /// joins only a task that takes one, a task is opened once per tenant, a
    /// messageId is new where a live receive would recognise it (its
    /// context, and the tenant for a message that named neither a context
    /// nor a task), statuses and artifacts follow the
    /// lifecycle, every stored object is strict JSON. The record keeps its
    /// timestamp unless that would put it before the context's latest; its
    /// seq is the context's next (an export's seqs have gaps only where a
    /// salvage skipped damage).
    pub fn import_item(&self, item: &Item) -> Result<()> {
        check_tenant(&item.tenant)?;
        check_context_id(&item.context_id)?;
        let tenant = item.tenant.as_str();
        let key = ContextKey::derive(tenant, &item.context_id)?;
        // A received message reserves its messageId first, as a live
        // receive does, so that no other receive takes it meanwhile.
        let _reserved = match &item.kind {
            ItemKind::Received { message, .. } => {
                let (msg, _) = parse_inbound(message, stored_form(message))?;
                // The key a live receive of it would be recognised by in
                // its context (a message that named neither a context nor a
                // task is also recognised within the tenant: checked too).
                let idem = context_message_key(&key, &msg.message_id);
                let in_tenant = (msg.context_id.is_none() && msg.task_id.is_none())
                    .then(|| message_key(tenant, &msg.message_id));
                if let Some((slot, _)) = in_tenant.and_then(|k| self.index.idem_lookup(k)) {
                    if self.life(&slot) == Life::Live {
                        return Err(Error::IdempotencyConflict {
                            message_id: msg.message_id,
                        });
                    }
                }
                loop {
                    match self.index.idem_start(idem) {
                        IdemStart::Done(slot, _) if self.life(&slot) == Life::Live => {
                            return Err(Error::IdempotencyConflict {
                                message_id: msg.message_id,
                            });
                        }
                        IdemStart::Done(..) => self.index.idem_forget(idem),
                        IdemStart::Wait(gate) => gate.wait(),
                        IdemStart::Owner(guard) => break Some(guard),
                    }
                }
            }
            _ => None,
        };
        let slot = self.index.get_or_insert(&key);
        let _turn = slot.write.lock();
        self.refuse_if_gone(&slot)?;
        let (new_context, timestamp_ms) = {
            let state = slot.state.read();
            (
                state.meta.is_none(),
                // A context's timestamps never go backwards.
                item.timestamp_ms.max(state.last_ms),
            )
        };
        let name = new_context.then(|| ContextName {
            tenant: tenant.to_string(),
            context_id: item.context_id.clone(),
        });
        let check = |task_id: &str, op: Op<'_>| -> Result<()> {
            let state = slot.state.read();
            state.task(task_id).ok_or(Error::TaskNotFound)?.check(op)
        };
        let (kind, blob) = match &item.kind {
            ItemKind::Appended { raw } => (RecordKind::Message { task: None }, raw),
            ItemKind::Received {
                task_id,
                opens_task,
                message,
            } => {
                let (msg, digest) = parse_inbound(message, stored_form(message))?;
                if *opens_task {
                    if task_id.is_empty() || self.find_task(tenant, task_id).is_some() {
                        return Err(Error::InvalidParams {
                            field: "taskId",
                            reason: format!(
                                "task {task_id:?} exists for this tenant already (or is empty)"
                            ),
                        });
                    }
                } else {
                    check(task_id, Op::Message)?;
                }
                (inbound(task_id, *opens_task, &msg, digest), message)
            }
            ItemKind::Status { task_id, status } => {
                let parsed: TaskStatus = strict("status", status)?;
                check(task_id, Op::Status(parsed.state))?;
                let kind = RecordKind::Status {
                    task_id: task_id.clone(),
                    state: parsed.state,
                    with_message: parsed.message.is_some(),
                };
                (kind, status)
            }
            ItemKind::Artifact {
                task_id,
                append,
                last_chunk,
                artifact,
            } => {
                let parsed: Artifact = strict("artifact", artifact)?;
                check(
                    task_id,
                    Op::Artifact {
                        artifact_id: &parsed.artifact_id,
                        append: *append,
                    },
                )?;
                let kind = RecordKind::Artifact {
                    task_id: task_id.clone(),
                    artifact_id: parsed.artifact_id,
                    append: *append,
                    last_chunk: *last_chunk,
                };
                (kind, artifact)
            }
        };
        let body = RecordBody {
            seq: 0,
            timestamp_ms,
            opens: name,
            kind,
        };
        let hints = super::Hints::of(&body, blob);
        self.append_record(&slot, body.opens, body.kind, blob, timestamp_ms, hints)?;
        Ok(())
    }
}

/// A stored object checked as a live event's is (strict JSON, no key twice
/// in any object), then parsed.
fn strict<T: serde::de::DeserializeOwned>(field: &'static str, bytes: &[u8]) -> Result<T> {
    let invalid = |reason: String| Error::InvalidParams { field, reason };
    json::canonical(bytes).map_err(|e| invalid(e.to_string()))?;
    serde_json::from_slice(bytes).map_err(|e| invalid(e.to_string()))
}
