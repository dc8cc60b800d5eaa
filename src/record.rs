//! What a record says: the payload inside a frame.
//!
//! ```text
//! namespace version:u8 | key digest:[u8; 32] | bincode(RecordBody)
//! ```
//!
//! The namespace version and key sit at fixed offsets, outside bincode, so a
//! record of a namespace version this build does not know is recognised (and
//! refused) without decoding a body whose layout may have changed with it.

use serde::{Deserialize, Serialize};

use crate::namespace::{ContextKey, NAMESPACE_VERSION};
use crate::MAX_RECORD_BYTES;

/// Bytes before the bincode body.
pub const PREFIX_LEN: usize = 33;

/// One record of a context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordBody {
    /// Position in the context's order, from 0.
    pub seq: u64,
    /// Milliseconds since the Unix epoch when the record was appended.
    pub timestamp_ms: u64,
    /// What happened.
    pub kind: RecordKind,
}

/// The kinds of record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RecordKind {
    /// The first record of every context: who owns it and its original id.
    Opened {
        /// The tenant, byte for byte.
        tenant: String,
        /// The contextId, byte for byte.
        context_id: String,
    },
    /// An inbound message, exactly as received.
    Message {
        /// The raw bytes.
        raw: Vec<u8>,
    },
}

/// A decoded payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// A record of the current namespace.
    Current(ContextKey, RecordBody),
    /// A record of a namespace version this build does not serve.
    ForeignNamespace(ContextKey),
}

/// Why a payload that passed its checksum still cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub String);

fn config() -> impl bincode::config::Config {
    bincode::config::standard()
        .with_little_endian()
        .with_fixed_int_encoding()
        .with_limit::<{ MAX_RECORD_BYTES as usize }>()
}

/// Encodes a record of the current namespace.
pub fn encode(key: &ContextKey, body: &RecordBody) -> Result<Vec<u8>, DecodeError> {
    let mut out = Vec::with_capacity(PREFIX_LEN + 64);
    out.push(key.version());
    out.extend_from_slice(key.digest());
    let encoded = bincode::serde::encode_to_vec(body, config())
        .map_err(|e| DecodeError(format!("cannot encode record: {e}")))?;
    out.extend_from_slice(&encoded);
    Ok(out)
}

/// Decodes a payload; never panics, whatever the bytes.
pub fn decode(payload: &[u8]) -> Result<Decoded, DecodeError> {
    let (&version, rest) = payload
        .split_first()
        .ok_or_else(|| DecodeError("empty payload".into()))?;
    let digest: [u8; 32] = rest
        .get(..32)
        .and_then(|d| d.try_into().ok())
        .ok_or_else(|| DecodeError("payload shorter than its key".into()))?;
    let key = ContextKey::from_parts(version, digest);
    if version != NAMESPACE_VERSION {
        return Ok(Decoded::ForeignNamespace(key));
    }
    let body_bytes = rest.get(32..).unwrap_or_default();
    let (body, used): (RecordBody, usize) = bincode::serde::decode_from_slice(body_bytes, config())
        .map_err(|e| DecodeError(format!("record body does not decode: {e}")))?;
    if used != body_bytes.len() {
        return Err(DecodeError(format!(
            "{} trailing bytes after the record body",
            body_bytes.len() - used
        )));
    }
    Ok(Decoded::Current(key, body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip() {
        let key = ContextKey::derive("t", "c").unwrap();
        let body = RecordBody {
            seq: 3,
            timestamp_ms: 1_700_000_000_000,
            kind: RecordKind::Message {
                raw: b"{\"x\":1}".to_vec(),
            },
        };
        let bytes = encode(&key, &body).unwrap();
        assert_eq!(decode(&bytes), Ok(Decoded::Current(key, body)));
    }

    #[test]
    fn unknown_namespace_version_is_not_decoded_as_current() {
        let key = ContextKey::derive("t", "c").unwrap();
        let body = RecordBody {
            seq: 0,
            timestamp_ms: 0,
            kind: RecordKind::Message { raw: vec![1] },
        };
        let mut bytes = encode(&key, &body).unwrap();
        bytes[0] = 2;
        assert!(matches!(decode(&bytes), Ok(Decoded::ForeignNamespace(k)) if k.version() == 2));
    }

    #[test]
    fn trailing_bytes_are_refused() {
        let key = ContextKey::derive("t", "c").unwrap();
        let body = RecordBody {
            seq: 0,
            timestamp_ms: 0,
            kind: RecordKind::Message { raw: vec![] },
        };
        let mut bytes = encode(&key, &body).unwrap();
        bytes.push(0);
        assert!(decode(&bytes).is_err());
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode(&bytes);
        }

        #[test]
        fn decode_never_panics_on_current_prefix(tail in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut bytes = vec![NAMESPACE_VERSION];
            bytes.extend_from_slice(&[7u8; 32]);
            bytes.extend_from_slice(&tail);
            let _ = decode(&bytes);
        }
    }
}
