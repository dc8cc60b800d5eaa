//! The versioned namespace: how a (tenant, contextId) pair becomes a context key.
//!
//! A key is SHA-256 over an injective, length-prefixed encoding of the pair,
//! prefixed by a domain tag that names the namespace version:
//!
//! ```text
//! "ctxlog-namespace" 0x00 version:u8 len(tenant):u64le tenant len(context):u64le context
//! ```
//!
//! Because every field is length-prefixed, two distinct pairs always encode to
//! distinct byte strings, so they can share a key only through a SHA-256
//! collision. Nothing is normalised: `tenant/a` and `tenanta`, NFC and NFD
//! spellings, and ids that differ in a trailing space or NUL are all distinct.

use std::fmt;

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// The namespace version this build writes and serves.
pub const NAMESPACE_VERSION: u8 = 1;

/// Longest accepted tenant, in bytes of UTF-8.
pub const MAX_TENANT_BYTES: usize = 1024;

/// Longest accepted contextId, in bytes of UTF-8.
pub const MAX_CONTEXT_ID_BYTES: usize = 4096;

const DOMAIN_TAG: &[u8] = b"ctxlog-namespace\0";

/// The key of one context: a namespace version and a SHA-256 digest.
///
/// Printed as `v1-<64 hex digits>`, which is also how it names anything.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContextKey {
    version: u8,
    digest: [u8; 32],
}

impl ContextKey {
    /// Derives the current-version key of (tenant, contextId), checking both
    /// against the documented limits.
    pub fn derive(tenant: &str, context_id: &str) -> Result<Self> {
        check_tenant(tenant)?;
        check_context_id(context_id)?;
        Ok(Self::derive_unchecked(tenant, context_id))
    }

    /// Derives the key without checking the limits (both strings are still
    /// hashed in full, so the result is collision-free all the same). Useful
    /// to compute a key that [`derive`](Self::derive) would refuse.
    pub fn derive_unchecked(tenant: &str, context_id: &str) -> Self {
        Self {
            version: NAMESPACE_VERSION,
            digest: scoped_digest(DOMAIN_TAG, tenant, context_id),
        }
    }

    /// Rebuilds a key from its stored parts (any version, known or not).
    pub(crate) fn from_parts(version: u8, digest: [u8; 32]) -> Self {
        Self { version, digest }
    }

    /// The namespace version this key belongs to.
    pub fn version(&self) -> u8 {
        self.version
    }

    /// The 32 digest bytes.
    pub fn digest(&self) -> &[u8; 32] {
        &self.digest
    }

    /// Parses the printed form `v<version>-<64 hex>`.
    pub fn parse(text: &str) -> Option<Self> {
        let rest = text.strip_prefix('v')?;
        let (version, hex_digest) = rest.split_once('-')?;
        let version: u8 = version.parse().ok()?;
        let mut digest = [0u8; 32];
        hex::decode_to_slice(hex_digest, &mut digest).ok()?;
        Some(Self { version, digest })
    }
}

impl fmt::Display for ContextKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}-{}", self.version, hex::encode(self.digest))
    }
}

impl fmt::Debug for ContextKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// SHA-256 over `tag ‖ version ‖ len(tenant) ‖ tenant ‖ len(id) ‖ id`: the
/// namespace encoding, also used (with other tags) to key task ids and
/// messageIds within a tenant.
pub(crate) fn scoped_digest(tag: &[u8], tenant: &str, id: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(tag);
    h.update([NAMESPACE_VERSION]);
    h.update((tenant.len() as u64).to_le_bytes());
    h.update(tenant.as_bytes());
    h.update((id.len() as u64).to_le_bytes());
    h.update(id.as_bytes());
    h.finalize().into()
}

/// The in-memory key of a task id within a tenant.
pub(crate) fn task_key(tenant: &str, task_id: &str) -> [u8; 32] {
    scoped_digest(b"ctxlog-task\0", tenant, task_id)
}

/// The in-memory key of a messageId within a tenant (a message that names
/// neither a context nor a task is recognised by it).
pub(crate) fn message_key(tenant: &str, message_id: &str) -> [u8; 32] {
    scoped_digest(b"ctxlog-message\0", tenant, message_id)
}

/// The in-memory key of a messageId within a context (whose key already
/// says whose it is): SHA-256 over `tag ‖ version ‖ the context key's
/// digest ‖ len(id) ‖ id`.
pub(crate) fn context_message_key(context: &ContextKey, message_id: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"ctxlog-message-in-context\0");
    h.update([NAMESPACE_VERSION]);
    h.update(context.digest());
    h.update((message_id.len() as u64).to_le_bytes());
    h.update(message_id.as_bytes());
    h.finalize().into()
}

/// Checks a tenant against the documented limit (the empty tenant is valid).
pub fn check_tenant(tenant: &str) -> Result<()> {
    if tenant.len() > MAX_TENANT_BYTES {
        return Err(Error::InvalidParams {
            field: "tenant",
            reason: format!(
                "{} bytes is longer than the limit of {MAX_TENANT_BYTES}; use a shorter tenant name",
                tenant.len()
            ),
        });
    }
    Ok(())
}

/// Checks a contextId: non-empty and at most [`MAX_CONTEXT_ID_BYTES`].
pub fn check_context_id(context_id: &str) -> Result<()> {
    let reason = if context_id.is_empty() {
        "it is empty".to_string()
    } else if context_id.len() > MAX_CONTEXT_ID_BYTES {
        format!(
            "it is {} bytes, longer than the limit of {MAX_CONTEXT_ID_BYTES}",
            context_id.len()
        )
    } else {
        return Ok(());
    };
    Err(Error::ContextRejected {
        reason: format!("{reason}; send a contextId of 1 to {MAX_CONTEXT_ID_BYTES} bytes, or none to have one made"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printed_form_round_trips() {
        let k = ContextKey::derive("acme", "ctx-1").unwrap();
        let s = k.to_string();
        assert!(s.starts_with("v1-") && s.len() == 3 + 64, "{s}");
        assert_eq!(ContextKey::parse(&s), Some(k));
        assert_eq!(ContextKey::parse("v1-zz"), None);
        assert_eq!(ContextKey::parse("x1-00"), None);
    }

    #[test]
    fn limits_are_enforced() {
        assert!(ContextKey::derive("", "a").is_ok());
        assert!(matches!(
            ContextKey::derive("t", ""),
            Err(Error::ContextRejected { .. })
        ));
        let long = "x".repeat(MAX_CONTEXT_ID_BYTES);
        assert!(ContextKey::derive("t", &long).is_ok());
        let longer = "x".repeat(MAX_CONTEXT_ID_BYTES + 1);
        assert!(matches!(
            ContextKey::derive("t", &longer),
            Err(Error::ContextRejected { .. })
        ));
        let tenant = "t".repeat(MAX_TENANT_BYTES + 1);
        assert!(matches!(
            ContextKey::derive(&tenant, "a"),
            Err(Error::InvalidParams {
                field: "tenant",
                ..
            })
        ));
    }
}
