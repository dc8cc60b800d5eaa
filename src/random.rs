//! Randomness from the operating system: store identities, ids the store
//! makes, render nonces.

use crate::error::{Error, Result};

/// `N` bytes from the operating system's randomness; `op` names what they
/// are for in the error.
pub(crate) fn bytes<const N: usize>(op: &'static str) -> Result<[u8; N]> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|e| Error::Io {
        op,
        path: "getrandom".into(),
        source: std::io::Error::other(e.to_string()),
    })?;
    Ok(bytes)
}
