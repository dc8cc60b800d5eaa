//! `Idempotency-Key`: the client's key for one send, so that a retry of it
//! gets the first answer instead of running again, whatever the messageId
//! mode (the semantics of the IETF httpapi draft and of Stripe's API, as
//! A2A's own proposal for safe retries takes them).
//!
//! The same key with the same request (the same operation, and parameters
//! that are the same JSON) is a replay: the message is looked up as a
//! resend ([`ctxlog::Store::find_received`]) and answered as one (a stream
//! replays the task's events from the store); if the first attempt never
//! got as far as storing its message, the replay stores it. The same key
//! with another request is `IDEMPOTENCY_CONFLICT` (HTTP 422, JSON-RPC
//! -32602). A request that comes while another with its key is being
//! received waits for it, then replays.
//!
//! Keys are per tenant and durable: each is one record, written (and
//! synced) before the request's message is received, in the store itself,
//! under a tenant of the server's own that no client can name (it begins
//! with a NUL byte), in one context per day. A tenant's keys are read back
//! on its first keyed request after a start, those older than the window
//! (`--idempotency-key-hours`, 24 by default) are forgotten, and a day's
//! context is deleted once the whole day is past the window.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::{now_ms, A2aError};
use crate::state::storecell::StoreCell;
use crate::util::lock;

const DAY_MS: u64 = 86_400_000;

/// A key a request carries, with what it asks.
#[derive(Debug, Clone)]
pub(crate) struct Key {
    key: String,
    fingerprint: [u8; 32],
}

impl Key {
    /// The request's `Idempotency-Key`, if it has one, for `operation` with
    /// `params` (the request's JSON): 1 to 255 visible ASCII characters, as
    /// a token or a quoted string.
    pub(crate) fn of(
        headers: &HeaderMap,
        operation: &str,
        params: &[u8],
    ) -> Result<Option<Key>, A2aError> {
        let Some(value) = headers.get("idempotency-key") else {
            return Ok(None);
        };
        let text = String::from_utf8_lossy(value.as_bytes());
        let text = text.trim();
        let key = text
            .strip_prefix('"')
            .and_then(|t| t.strip_suffix('"'))
            .unwrap_or(text);
        if key.is_empty() || key.len() > 255 || !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(A2aError::invalid(
                "Idempotency-Key: send 1 to 255 visible ASCII characters (a UUID, say)",
            ));
        }
        Ok(Some(Key {
            key: key.to_string(),
            fingerprint: fingerprint(operation, params),
        }))
    }
}

/// SHA-256 over the operation and the parameters' JSON with its members
/// sorted and its white space gone, so that the same request sent again,
/// however it is laid out, has the same fingerprint.
fn fingerprint(operation: &str, params: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(operation.as_bytes());
    h.update([0]);
    match serde_json::from_slice::<Value>(params) {
        Ok(value) => {
            let mut out = Vec::with_capacity(params.len());
            canonical(&value, &mut out);
            h.update(&out);
        }
        Err(_) => h.update(params),
    }
    h.finalize().into()
}

/// `value` as JSON with every object's members sorted by name.
fn canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut members: Vec<_> = map.iter().collect();
            members.sort_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (name, v)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(Value::String(name.clone()).to_string().as_bytes());
                out.push(b':');
                canonical(v, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonical(v, out);
            }
            out.push(b']');
        }
        other => out.extend_from_slice(other.to_string().as_bytes()),
    }
}

/// What a key allows the request to do, and the key held until the
/// request has received its message (so a request with the same key waits
/// for it).
pub(crate) struct Claim {
    /// The request ran before: answer it as a resend. (Otherwise the key
    /// is new, durable now, and the request runs.)
    pub(crate) replay: bool,
    _held: tokio::sync::OwnedMutexGuard<()>,
}

/// The keys of every tenant seen since the start.
#[derive(Default)]
pub(crate) struct Keys {
    tenants: Mutex<HashMap<String, Arc<TenantKeys>>>,
}

#[derive(Default)]
struct TenantKeys {
    /// The stored keys were read (once per start).
    loaded: tokio::sync::OnceCell<()>,
    /// Each key's fingerprint and when it was first seen.
    seen: Mutex<HashMap<String, ([u8; 32], u64)>>,
    /// A lock per key while a request with it is being received.
    busy: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// The last day whose old contexts were deleted.
    swept: Mutex<u64>,
}

/// The tenant the keys of `tenant` are stored under: no client can name
/// it (tokens name tenants with words; this one begins with a NUL byte).
fn keys_tenant(tenant: &str) -> String {
    format!("\u{0}idempotency-keys\u{0}{tenant}")
}

fn day_context(day: u64) -> String {
    format!("day-{day}")
}

impl Keys {
    /// Claims `key` for a request of `tenant`: new (and now durable), a
    /// replay, or a conflict.
    pub(crate) async fn claim(
        &self,
        store: &StoreCell,
        window: Duration,
        tenant: &str,
        key: &Key,
    ) -> Result<Claim, A2aError> {
        let keys = lock(&self.tenants)
            .entry(tenant.to_string())
            .or_default()
            .clone();
        keys.loaded
            .get_or_try_init(|| keys.load(store, tenant, window))
            .await?;
        let busy = lock(&keys.busy).entry(key.key.clone()).or_default().clone();
        let held = busy.lock_owned().await;
        let now = now_ms();
        let oldest = now.saturating_sub(window.as_millis() as u64);
        let seen = lock(&keys.seen).get(&key.key).copied();
        let claim = match seen {
            Some((fingerprint, at)) if at >= oldest => {
                if fingerprint != key.fingerprint {
                    return Err(A2aError::KeyConflict(key.key.clone()));
                }
                Claim {
                    replay: true,
                    _held: held,
                }
            }
            _ => {
                keys.record(store, tenant, key, now, window).await?;
                Claim {
                    replay: false,
                    _held: held,
                }
            }
        };
        // The busy lock itself is dropped once no request holds it.
        lock(&keys.busy).retain(|_, m| Arc::strong_count(m) > 1);
        Ok(claim)
    }
}

impl TenantKeys {
    /// Reads the tenant's stored keys of the window.
    async fn load(
        &self,
        store: &StoreCell,
        tenant: &str,
        window: Duration,
    ) -> Result<(), A2aError> {
        let (owner, now) = (keys_tenant(tenant), now_ms());
        let oldest = now.saturating_sub(window.as_millis() as u64);
        let days: Vec<u64> = (oldest / DAY_MS..=now / DAY_MS).collect();
        let stored = store
            .blocking(move |store| {
                let mut found = Vec::new();
                for day in days {
                    match store.last_messages(&owner, &day_context(day), usize::MAX) {
                        Ok(messages) => found.extend(messages.into_iter().map(|m| m.raw)),
                        Err(ctxlog::Error::ContextNotFound) => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(found)
            })
            .await?;
        let mut seen = lock(&self.seen);
        for raw in stored {
            if let Some((key, fingerprint, at)) = parse_record(&raw) {
                if at >= oldest {
                    seen.entry(key).or_insert((fingerprint, at));
                }
            }
        }
        Ok(())
    }

    /// Stores `key` durably (and forgets keys past the window).
    async fn record(
        &self,
        store: &StoreCell,
        tenant: &str,
        key: &Key,
        now: u64,
        window: Duration,
    ) -> Result<(), A2aError> {
        let record = serde_json::json!({
            "key": key.key,
            "fingerprint": hex::encode(key.fingerprint),
            "at": now,
        })
        .to_string();
        let owner = keys_tenant(tenant);
        let today = now / DAY_MS;
        // Whole days past the window: their contexts go (once a day).
        let sweep = {
            let mut swept = lock(&self.swept);
            let due = *swept < today;
            *swept = today;
            due
        };
        let last_kept = now.saturating_sub(window.as_millis() as u64) / DAY_MS;
        store
            .blocking(move |store| {
                store.append_message(&owner, &day_context(today), record.as_bytes())?;
                if sweep {
                    for day in last_kept.saturating_sub(30)..last_kept {
                        match store.delete_context(&owner, &day_context(day)) {
                            Ok(()) | Err(ctxlog::Error::ContextNotFound) => {}
                            Err(e) => return Err(e),
                        }
                    }
                }
                Ok(())
            })
            .await?;
        let oldest = now.saturating_sub(window.as_millis() as u64);
        let mut seen = lock(&self.seen);
        if seen.len() >= 4096 {
            seen.retain(|_, (_, at)| *at >= oldest);
        }
        seen.insert(key.key.clone(), (key.fingerprint, now));
        Ok(())
    }
}

/// A stored key's record: the key, its fingerprint, when it was first seen.
fn parse_record(raw: &[u8]) -> Option<(String, [u8; 32], u64)> {
    #[derive(serde::Deserialize)]
    struct Record {
        key: String,
        fingerprint: String,
        at: u64,
    }
    let record: Record = serde_json::from_slice(raw).ok()?;
    let mut fingerprint = [0u8; 32];
    hex::decode_to_slice(&record.fingerprint, &mut fingerprint).ok()?;
    Some((record.key, fingerprint, record.at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_request_laid_out_otherwise_has_the_same_fingerprint() {
        let a = br#"{"message":{"messageId":"m1","parts":[{"text":"hi"}],"role":"ROLE_USER"}}"#;
        let b = br#"{ "message" : { "role":"ROLE_USER", "parts":[ {"text":"hi"} ], "messageId":"m1" } }"#;
        let c = br#"{"message":{"messageId":"m1","parts":[{"text":"ho"}],"role":"ROLE_USER"}}"#;
        assert_eq!(fingerprint("SendMessage", a), fingerprint("SendMessage", b));
        assert_ne!(fingerprint("SendMessage", a), fingerprint("SendMessage", c));
        assert_ne!(
            fingerprint("SendMessage", a),
            fingerprint("SendStreamingMessage", a)
        );
    }

    #[test]
    fn keys_are_checked_and_their_records_read_back() {
        let mut headers = HeaderMap::new();
        assert!(Key::of(&headers, "SendMessage", b"{}").unwrap().is_none());
        for bad in ["", "has space", &"x".repeat(256)] {
            headers.insert("idempotency-key", bad.parse().unwrap());
            assert!(Key::of(&headers, "SendMessage", b"{}").is_err(), "{bad:?}");
        }
        headers.insert("idempotency-key", "\"8e03978e-40d5\"".parse().unwrap());
        let key = Key::of(&headers, "SendMessage", b"{}").unwrap().unwrap();
        assert_eq!(key.key, "8e03978e-40d5");
        let record = serde_json::json!({
            "key": key.key, "fingerprint": hex::encode(key.fingerprint), "at": 7
        });
        let back = parse_record(record.to_string().as_bytes()).unwrap();
        assert_eq!(back, (key.key.clone(), key.fingerprint, 7));
        assert!(parse_record(b"{}").is_none());
    }
}
