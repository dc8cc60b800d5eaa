//! Small helpers every module uses: a mutex lock that outlives a panic,
//! the server's own random ids.

use std::sync::Mutex;

/// A poisoned std mutex only means a panic elsewhere while it was held.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// 128 random bits as 32 hex digits (messageIds of the server's own
/// messages), drawn as the store draws its own ids (in blocks).
pub(crate) fn random_id() -> String {
    // Without the OS's randomness (which does not fail on Linux), a time
    // and a counter still make the id unique in this process.
    ctxlog::render::new_nonce().unwrap_or_else(|_| {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&crate::error::now_ms().to_le_bytes());
        bytes[8..].copy_from_slice(&n.to_le_bytes());
        hex::encode(bytes)
    })
}
