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
use crate::MAX_RECORD_BYTES;

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
}

impl RecordKind {
    /// The task the record belongs to, if any.
    pub fn task_id(&self) -> Option<&str> {
        match self {
            RecordKind::Message { task } => task.as_ref().map(|t| t.task_id.as_str()),
            RecordKind::Status { task_id, .. } | RecordKind::Artifact { task_id, .. } => {
                Some(task_id)
            }
            RecordKind::Gone { .. } => None,
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

    proptest! {
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
