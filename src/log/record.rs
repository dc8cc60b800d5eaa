//! What a record says: the payload inside a frame.
//!
//! ```text
//! namespace version:u8 | key digest:[u8; 32] | body length:u32 | bincode(RecordBody) | blob
//! ```
//!
//! The namespace version and key sit at fixed offsets, outside bincode, so a
//! record of a namespace version this build does not know is recognised (and
//! refused) without decoding a body whose layout may have changed with it.
//! The blob (a message's raw bytes) is stored after the body as is, so reading
//! it is one copy, never a per-byte decode.

use serde::{Deserialize, Serialize};

use crate::a2a::TaskState;
use crate::namespace::{ContextKey, NAMESPACE_VERSION};
use crate::options::MAX_RECORD_BYTES;

/// Bytes before the bincode body: version, digest, body length.
pub const PREFIX_LEN: usize = 37;

/// One record of a context, without its blob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordBody {
    /// Position in the context's order, from 0.
    pub seq: u64,
    /// Milliseconds since the Unix epoch when the record was appended.
    pub timestamp_ms: u64,
    /// Set on the first record of a context (seq 0) and on no other: who owns
    /// the context and its original id. Carried inside the first record, not
    /// beside it, so a context and its first message appear atomically.
    pub opens: Option<ContextName>,
    /// What happened.
    pub kind: RecordKind,
}

/// The owner and original id of a context, byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextName {
    /// The tenant.
    pub tenant: String,
    /// The contextId as the client or the store made it.
    pub context_id: String,
}

/// The kinds of record. (bincode writes the variant's index as a u32: the
/// order here is part of the format.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RecordKind {
    /// An inbound message; the blob is its bytes exactly as received.
    Message {
        /// The task it was received into (`None`: saved with
        /// [`Store::append_message`](crate::Store::append_message), outside the task model).
        task: Option<TaskLink>,
    },
    /// A task's new status; the blob is the `TaskStatus` JSON as the agent gave it.
    Status {
        /// The task.
        task_id: String,
        /// The new state.
        state: TaskState,
        /// Whether the status carries a message (which joins the history).
        with_message: bool,
    },
    /// An artifact chunk; the blob is the `Artifact` JSON as the agent gave it.
    Artifact {
        /// The task.
        task_id: String,
        /// The artifact.
        artifact_id: String,
        /// Extends the artifact instead of creating or replacing it.
        append: bool,
        /// Nothing may follow this chunk.
        last_chunk: bool,
    },
    /// The context is gone: deleted, or expired under the retention policy.
    /// No record of the context may follow. The blob is empty.
    Gone {
        /// Expired (true) or deleted (false).
        expired: bool,
    },
    /// Messages leave the history: every record of seq `from_seq` up to
    /// (not including) `to_seq` that carries a message no longer does. Only
    /// in a context without tasks. The blob is empty; the hidden records
    /// stay on disk until the context is deleted.
    Hide {
        /// The first seq hidden.
        from_seq: u64,
        /// The seq after the last one hidden.
        to_seq: u64,
    },
    /// A task's push-notification config is set or deleted, or its
    /// delivery moved on. The blob is the config's JSON for
    /// [`PushChange::Set`], empty otherwise.
    Push {
        /// The task.
        task_id: String,
        /// The config's id within the task.
        config_id: String,
        /// What changed.
        change: PushChange,
    },
}

/// What a [`RecordKind::Push`] record changes. (bincode writes the
/// variant's index as a u32: the order here is part of the format.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PushChange {
    /// The config is created, or replaced if it exists; its delivery
    /// starts after the task's events so far (`through`: the last event
    /// seq it does not need, 0 for all of them).
    Set {
        /// The task's event seq the config's delivery starts after.
        through: u64,
    },
    /// The config is deleted: nothing more is delivered to it.
    Delete,
    /// The receiver acknowledged every event of the task up to and
    /// including event seq `through`, for the config as the `Set` record
    /// of seq `set_seq` made it (a position of a config since replaced is
    /// not its successor's).
    Delivered {
        /// The last event seq acknowledged.
        through: u64,
        /// The seq, in the context, of the `Set` record of the config
        /// delivered to.
        set_seq: u64,
    },
}

impl RecordKind {
    /// The task the record belongs to, if any.
    pub fn task_id(&self) -> Option<&str> {
        match self {
            RecordKind::Message { task } => task.as_ref().map(|t| t.task_id.as_str()),
            RecordKind::Status { task_id, .. } | RecordKind::Artifact { task_id, .. } => {
                Some(task_id)
            }
            RecordKind::Push { task_id, .. } => Some(task_id),
            RecordKind::Gone { .. } | RecordKind::Hide { .. } => None,
        }
    }
}

/// How a received message joined the task model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskLink {
    /// The task it joined or opened.
    pub task_id: String,
    /// Whether it opened the task.
    pub opens_task: bool,
    /// Its messageId (for idempotency).
    pub message_id: String,
    /// SHA-256 of its canonical JSON (for idempotency conflicts).
    pub digest: [u8; 32],
}

/// A decoded payload, borrowing its blob from the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// A record of the current namespace.
    Current {
        /// The context key.
        key: ContextKey,
        /// The body.
        body: RecordBody,
        /// The blob.
        blob: &'a [u8],
    },
    /// A record of a namespace version this build does not serve.
    ForeignNamespace(ContextKey),
}

/// Why a payload cannot be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub String);

fn config() -> impl bincode::config::Config {
    bincode::config::standard()
        .with_little_endian()
        .with_fixed_int_encoding()
        .with_limit::<{ MAX_RECORD_BYTES as usize }>()
}

/// Encodes a record of the current namespace.
pub fn encode(key: &ContextKey, body: &RecordBody, blob: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let encoded = bincode::serde::encode_to_vec(body, config())
        .map_err(|e| DecodeError(format!("cannot encode record: {e}")))?;
    let body_len =
        u32::try_from(encoded.len()).map_err(|_| DecodeError("record body above 4 GiB".into()))?;
    let mut out = Vec::with_capacity(PREFIX_LEN + encoded.len() + blob.len());
    out.push(key.version());
    out.extend_from_slice(key.digest());
    out.extend_from_slice(&body_len.to_le_bytes());
    out.extend_from_slice(&encoded);
    out.extend_from_slice(blob);
    Ok(out)
}

/// The context key at the front of a payload, of any namespace version,
/// without decoding the body.
pub fn key(payload: &[u8]) -> Result<ContextKey, DecodeError> {
    let short = || DecodeError("payload shorter than its prefix".into());
    let (&version, rest) = payload.split_first().ok_or_else(short)?;
    let digest: [u8; 32] = rest
        .get(..32)
        .and_then(|d| d.try_into().ok())
        .ok_or_else(short)?;
    Ok(ContextKey::from_parts(version, digest))
}

/// Decodes a payload; never panics and never allocates more than the payload
/// holds, whatever the bytes.
pub fn decode(payload: &[u8]) -> Result<Decoded<'_>, DecodeError> {
    let short = || DecodeError("payload shorter than its prefix".into());
    let key = key(payload)?;
    if key.version() != NAMESPACE_VERSION {
        return Ok(Decoded::ForeignNamespace(key));
    }
    let rest = payload.get(33..).ok_or_else(short)?;
    let (len, rest) = rest.split_at_checked(4).ok_or_else(short)?;
    let len = u32::from_le_bytes(len.try_into().map_err(|_| short())?) as usize;
    let (body_bytes, blob) = rest
        .split_at_checked(len)
        .ok_or_else(|| DecodeError(format!("body length {len} past the payload's end")))?;
    let (body, used): (RecordBody, usize) = bincode::serde::decode_from_slice(body_bytes, config())
        .map_err(|e| DecodeError(format!("record body does not decode: {e}")))?;
    if used != body_bytes.len() {
        return Err(DecodeError(format!(
            "{} stray bytes after the record body",
            body_bytes.len() - used
        )));
    }
    Ok(Decoded::Current { key, body, blob })
}

/// What a read of a record needs, borrowed from its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct View<'a> {
    /// The context key.
    pub key: ContextKey,
    /// Position in the context's order.
    pub seq: u64,
    /// When the record was appended.
    pub timestamp_ms: u64,
    /// What happened, without the fields reads do not use.
    pub kind: ViewKind<'a>,
    /// The blob.
    pub blob: &'a [u8],
}

/// A [`RecordKind`] as a [`View`] gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewKind<'a> {
    /// An inbound message, and the task it was received into.
    Message {
        /// The task, if any.
        task_id: Option<&'a str>,
    },
    /// A task's new status.
    Status {
        /// The task.
        task_id: &'a str,
    },
    /// An artifact chunk.
    Artifact {
        /// The task.
        task_id: &'a str,
    },
    /// The context is gone.
    Gone,
    /// Messages left the history.
    Hide,
    /// A push-notification config changed, or its delivery moved on.
    Push {
        /// The task.
        task_id: &'a str,
    },
}

impl<'a> ViewKind<'a> {
    /// The task the record belongs to, if any.
    pub fn task_id(&self) -> Option<&'a str> {
        match *self {
            ViewKind::Message { task_id } => task_id,
            ViewKind::Status { task_id }
            | ViewKind::Artifact { task_id }
            | ViewKind::Push { task_id } => Some(task_id),
            ViewKind::Gone | ViewKind::Hide => None,
        }
    }
}

/// Views a payload of the current namespace: the body decoded by hand, the
/// same bytes [`decode`] reads through bincode and refused where it refuses
/// them, but nothing built or allocated. A history read views each of its
/// records; the rest of the store decodes them whole.
pub fn view(payload: &[u8]) -> Result<View<'_>, DecodeError> {
    let key = key(payload)?;
    if key.version() != NAMESPACE_VERSION {
        return Err(DecodeError(format!(
            "a record of namespace version {}, which this build does not serve",
            key.version()
        )));
    }
    let mut rest = payload.get(33..).unwrap_or_default();
    let body_len = take(&mut rest, 4)
        .and_then(|b| b.first_chunk())
        .map(|b| u32::from_le_bytes(*b) as usize)
        .ok_or_else(|| DecodeError("payload shorter than its prefix".into()))?;
    let (mut body, blob) = rest
        .split_at_checked(body_len)
        .ok_or_else(|| DecodeError(format!("body length {body_len} past the payload's end")))?;
    let bad = || DecodeError("record body does not decode".into());
    let (seq, timestamp_ms, kind) = view_body(&mut body).ok_or_else(bad)?;
    if !body.is_empty() {
        return Err(DecodeError(format!(
            "{} stray bytes after the record body",
            body.len()
        )));
    }
    Ok(View {
        key,
        seq,
        timestamp_ms,
        kind,
        blob,
    })
}

/// The fields of a body (DESIGN.md §3, "Payload") from the front of
/// `bytes`, which it advances; `None` where bincode would refuse them.
fn view_body<'a>(bytes: &mut &'a [u8]) -> Option<(u64, u64, ViewKind<'a>)> {
    let seq = take_u64(bytes)?;
    let timestamp_ms = take_u64(bytes)?;
    if take_option(bytes)? {
        take_str(bytes)?;
        take_str(bytes)?;
    }
    let kind = match take_u32(bytes)? {
        0 => {
            let mut task_id = None;
            if take_option(bytes)? {
                task_id = Some(take_str(bytes)?);
                take_bool(bytes)?;
                take_str(bytes)?;
                take(bytes, 32)?;
            }
            ViewKind::Message { task_id }
        }
        1 => {
            let task_id = take_str(bytes)?;
            if take_u32(bytes)? as usize >= TaskState::ALL.len() {
                return None;
            }
            take_bool(bytes)?;
            ViewKind::Status { task_id }
        }
        2 => {
            let task_id = take_str(bytes)?;
            take_str(bytes)?;
            take_bool(bytes)?;
            take_bool(bytes)?;
            ViewKind::Artifact { task_id }
        }
        3 => {
            take_bool(bytes)?;
            ViewKind::Gone
        }
        4 => {
            take_u64(bytes)?;
            take_u64(bytes)?;
            ViewKind::Hide
        }
        5 => {
            let task_id = take_str(bytes)?;
            take_str(bytes)?;
            match take_u32(bytes)? {
                0 => {
                    take_u64(bytes)?;
                }
                2 => {
                    take_u64(bytes)?;
                    take_u64(bytes)?;
                }
                1 => {}
                _ => return None,
            }
            ViewKind::Push { task_id }
        }
        _ => return None,
    };
    Some((seq, timestamp_ms, kind))
}

// Readers of bincode's fixed-width little-endian encoding, each taking from
// the front of `bytes` (which it advances); `None` where bincode would
// refuse the bytes.

/// Takes `n` bytes.
pub fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    let (part, rest) = bytes.split_at_checked(n)?;
    *bytes = rest;
    Some(part)
}

/// Takes one byte.
pub fn take_u8(bytes: &mut &[u8]) -> Option<u8> {
    take(bytes, 1)?.first().copied()
}

/// Takes a bool: one byte, 0 or 1.
pub fn take_bool(bytes: &mut &[u8]) -> Option<bool> {
    match take_u8(bytes)? {
        0 => Some(false),
        1 => Some(true),
        _ => None,
    }
}

/// Takes an `Option`'s tag: whether a value follows.
fn take_option(bytes: &mut &[u8]) -> Option<bool> {
    take_bool(bytes)
}

/// Takes a little-endian u32 (an enum's variant index).
pub fn take_u32(bytes: &mut &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(*take(bytes, 4)?.first_chunk()?))
}

/// Takes a little-endian u64.
pub fn take_u64(bytes: &mut &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(*take(bytes, 8)?.first_chunk()?))
}

/// Takes a string: its length as a u64, then its UTF-8 bytes.
pub fn take_str<'a>(bytes: &mut &'a [u8]) -> Option<&'a str> {
    std::str::from_utf8(take_items(bytes, 1)?).ok()
}

/// Takes a sequence of fixed-size items (its length as a u64, then `size`
/// bytes per item) and returns their bytes.
pub fn take_items<'a>(bytes: &mut &'a [u8], size: usize) -> Option<&'a [u8]> {
    let n = usize::try_from(take_u64(bytes)?).ok()?;
    take(bytes, n.checked_mul(size)?)
}

/// Takes a sequence's length (a u64) and returns it if the rest of `bytes`
/// could hold that many items of at least `min` bytes each, so that a
/// reader never reserves more than the bytes could fill.
pub fn take_count(bytes: &mut &[u8], min: usize) -> Option<usize> {
    let n = usize::try_from(take_u64(bytes)?).ok()?;
    (n <= bytes.len() / min.max(1)).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn body(opens: bool) -> RecordBody {
        RecordBody {
            seq: 3,
            timestamp_ms: 1_700_000_000_000,
            opens: opens.then(|| ContextName {
                tenant: "t".into(),
                context_id: "c".into(),
            }),
            kind: RecordKind::Message { task: None },
        }
    }

    #[test]
    fn round_trip() {
        let key = ContextKey::derive("t", "c").unwrap();
        for opens in [false, true] {
            let bytes = encode(&key, &body(opens), b"{\"x\":1}").unwrap();
            assert_eq!(
                decode(&bytes),
                Ok(Decoded::Current {
                    key,
                    body: body(opens),
                    blob: b"{\"x\":1}"
                })
            );
        }
    }

    /// Pins every byte of the payload layout documented in DESIGN.md.
    #[test]
    fn payload_layout_is_as_documented() {
        let key = ContextKey::derive("t", "c").unwrap();
        let bytes = encode(&key, &body(true), b"BLOB").unwrap();
        let mut want = vec![1u8];
        want.extend_from_slice(key.digest());
        let mut b = Vec::new();
        b.extend_from_slice(&3u64.to_le_bytes()); // seq
        b.extend_from_slice(&1_700_000_000_000u64.to_le_bytes()); // timestamp_ms
        b.push(1); // opens: Some
        b.extend_from_slice(&1u64.to_le_bytes());
        b.push(b't');
        b.extend_from_slice(&1u64.to_le_bytes());
        b.push(b'c');
        b.extend_from_slice(&0u32.to_le_bytes()); // kind: Message
        b.push(0); // task: None
        want.extend_from_slice(&(b.len() as u32).to_le_bytes());
        want.extend_from_slice(&b);
        want.extend_from_slice(b"BLOB");
        assert_eq!(bytes, want);
    }

    #[test]
    fn unknown_namespace_version_is_not_decoded_as_current() {
        let key = ContextKey::derive("t", "c").unwrap();
        let mut bytes = encode(&key, &body(false), b"x").unwrap();
        bytes[0] = 2;
        assert!(matches!(decode(&bytes), Ok(Decoded::ForeignNamespace(k)) if k.version() == 2));
    }

    #[test]
    fn stray_bytes_in_the_body_are_refused() {
        let key = ContextKey::derive("t", "c").unwrap();
        let mut bytes = encode(&key, &body(false), b"").unwrap();
        let len = u32::from_le_bytes(bytes[33..37].try_into().unwrap()) + 1;
        bytes[33..37].copy_from_slice(&len.to_le_bytes());
        bytes.push(0);
        assert!(decode(&bytes).is_err());
    }

    fn any_string() -> impl Strategy<Value = String> {
        prop_oneof![Just(String::new()), "[a-zé-]{1,12}"]
    }

    fn any_body() -> impl Strategy<Value = RecordBody> {
        let link = (any_string(), any::<bool>(), any_string(), any::<[u8; 32]>()).prop_map(
            |(task_id, opens_task, message_id, digest)| TaskLink {
                task_id,
                opens_task,
                message_id,
                digest,
            },
        );
        let kind = prop_oneof![
            proptest::option::of(link).prop_map(|task| RecordKind::Message { task }),
            (any_string(), 0..TaskState::ALL.len(), any::<bool>()).prop_map(
                |(task_id, state, with_message)| RecordKind::Status {
                    task_id,
                    state: TaskState::ALL[state],
                    with_message,
                }
            ),
            (any_string(), any_string(), any::<bool>(), any::<bool>()).prop_map(
                |(task_id, artifact_id, append, last_chunk)| RecordKind::Artifact {
                    task_id,
                    artifact_id,
                    append,
                    last_chunk,
                }
            ),
            any::<bool>().prop_map(|expired| RecordKind::Gone { expired }),
            (any::<u64>(), any::<u64>())
                .prop_map(|(from_seq, to_seq)| RecordKind::Hide { from_seq, to_seq }),
            (
                any_string(),
                any_string(),
                prop_oneof![
                    any::<u64>().prop_map(|through| PushChange::Set { through }),
                    Just(PushChange::Delete),
                    (any::<u64>(), any::<u64>())
                        .prop_map(|(through, set_seq)| PushChange::Delivered { through, set_seq }),
                ]
            )
                .prop_map(|(task_id, config_id, change)| RecordKind::Push {
                    task_id,
                    config_id,
                    change,
                }),
        ];
        let opens = proptest::option::of(
            (any_string(), any_string())
                .prop_map(|(tenant, context_id)| ContextName { tenant, context_id }),
        );
        (any::<u64>(), any::<u64>(), opens, kind).prop_map(|(seq, timestamp_ms, opens, kind)| {
            RecordBody {
                seq,
                timestamp_ms,
                opens,
                kind,
            }
        })
    }

    /// Whether `view` gives what `decode` gives, or refuses where it refuses.
    fn view_agrees(payload: &[u8]) -> bool {
        match (view(payload), decode(payload)) {
            (Ok(v), Ok(Decoded::Current { key, body, blob })) => {
                let kind = match &body.kind {
                    RecordKind::Message { task } => ViewKind::Message {
                        task_id: task.as_ref().map(|t| t.task_id.as_str()),
                    },
                    RecordKind::Status { task_id, .. } => ViewKind::Status { task_id },
                    RecordKind::Artifact { task_id, .. } => ViewKind::Artifact { task_id },
                    RecordKind::Gone { .. } => ViewKind::Gone,
                    RecordKind::Hide { .. } => ViewKind::Hide,
                    RecordKind::Push { task_id, .. } => ViewKind::Push { task_id },
                };
                let (seq, timestamp_ms) = (body.seq, body.timestamp_ms);
                v == View {
                    key,
                    seq,
                    timestamp_ms,
                    kind,
                    blob,
                }
            }
            (Err(_), Err(_) | Ok(Decoded::ForeignNamespace(_))) => true,
            _ => false,
        }
    }

    proptest! {
        #[test]
        fn a_view_reads_every_body_as_decode_does(
            body in any_body(),
            blob in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let key = ContextKey::derive("t", "c").unwrap();
            let bytes = encode(&key, &body, &blob).unwrap();
            prop_assert!(view_agrees(&bytes));
            let v = view(&bytes).unwrap();
            prop_assert_eq!((v.seq, v.timestamp_ms, v.blob), (body.seq, body.timestamp_ms, &blob[..]));
            prop_assert_eq!(v.kind.task_id(), body.kind.task_id());
        }

        /// Any byte of the body changed, or the body's length moved: the
        /// view refuses exactly what bincode refuses.
        #[test]
        fn a_view_refuses_what_decode_refuses(
            body in any_body(),
            at in any::<prop::sample::Index>(),
            byte: u8,
            shift in -3i64..4,
        ) {
            let key = ContextKey::derive("t", "c").unwrap();
            let mut bytes = encode(&key, &body, b"xyz").unwrap();
            let body_len = u32::from_le_bytes(bytes[33..37].try_into().unwrap());
            let i = PREFIX_LEN + at.index(body_len as usize);
            bytes[i] = byte;
            prop_assert!(view_agrees(&bytes));
            let moved = (i64::from(body_len) + shift).max(0) as u32;
            bytes[33..37].copy_from_slice(&moved.to_le_bytes());
            prop_assert!(view_agrees(&bytes));
        }

        #[test]
        fn a_view_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            prop_assert!(view_agrees(&bytes));
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode(&bytes);
        }

        #[test]
        fn decode_never_panics_on_current_prefix(
            len in 0u32..600,
            tail in proptest::collection::vec(any::<u8>(), 0..512),
        ) {
            let mut bytes = vec![NAMESPACE_VERSION];
            bytes.extend_from_slice(&[7u8; 32]);
            bytes.extend_from_slice(&len.to_le_bytes());
            bytes.extend_from_slice(&tail);
            let _ = decode(&bytes);
        }

        #[test]
        fn any_blob_round_trips(blob in proptest::collection::vec(any::<u8>(), 0..256), seq: u64) {
            let key = ContextKey::derive("t", "c").unwrap();
            let b = RecordBody { seq, ..body(true) };
            let bytes = encode(&key, &b, &blob).unwrap();
            prop_assert_eq!(decode(&bytes), Ok(Decoded::Current { key, body: b, blob: &blob }));
        }
    }
}
