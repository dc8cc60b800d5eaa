//! The store's identity file: which store the directory is.
//!
//! ```text
//! magic "CTXLID\0\0" | version:u32 = 1 | store id:[u8; 16] | crc32 of the 28 bytes before:u32
//! ```
//!
//! Written once, when the store is created (as `IDENTITY.tmp`, synced,
//! renamed, directory synced). Every segment header, the manifest and the
//! checkpoint carry the same id; a file that names another is another
//! store's and is never read as this one's (DESIGN.md §2, "Store identity").

use std::path::Path;

use super::frame::StoreId;
use super::segments::sync_dir;
use crate::error::{Error, Result};
use crate::fs::Fs;

/// The identity file's name.
pub const IDENTITY: &str = "IDENTITY";
/// The identity being written, before its rename.
pub const IDENTITY_TMP: &str = "IDENTITY.tmp";
const MAGIC: [u8; 8] = *b"CTXLID\0\0";
const VERSION: u32 = 1;
const LEN: usize = 32;

/// What reading the identity file found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// There is none.
    Missing,
    /// A sound one.
    Found(StoreId),
    /// One that fails its checksum or format.
    Damaged,
}

/// The identity file's bytes for `id`.
pub fn encode(id: StoreId) -> [u8; LEN] {
    let mut b = [0u8; LEN];
    b[0..8].copy_from_slice(&MAGIC);
    b[8..12].copy_from_slice(&VERSION.to_le_bytes());
    b[12..28].copy_from_slice(&id.0);
    let crc = crc32fast::hash(&b[0..28]);
    b[28..32].copy_from_slice(&crc.to_le_bytes());
    b
}

/// The id in an identity file's bytes, if they are sound.
pub fn decode(bytes: &[u8]) -> Option<StoreId> {
    let b: &[u8; LEN] = bytes.try_into().ok()?;
    let crc = u32::from_le_bytes(b[28..32].try_into().ok()?);
    if b[0..8] != MAGIC || b[8..12] != VERSION.to_le_bytes() || crc != crc32fast::hash(&b[0..28]) {
        return None;
    }
    Some(StoreId(b[12..28].try_into().ok()?))
}

/// Reads the identity file of `dir`.
pub fn read(fs: &dyn Fs, dir: &Path) -> Result<Read> {
    let path = dir.join(IDENTITY);
    match fs.read(&path) {
        Ok(bytes) => Ok(decode(&bytes).map_or(Read::Damaged, Read::Found)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Read::Missing),
        Err(e) => Err(Error::io("read the store's identity", path, e)),
    }
}

/// Writes the identity file of `dir` atomically and durably.
pub fn write(fs: &dyn Fs, dir: &Path, id: StoreId) -> Result<()> {
    let tmp = dir.join(IDENTITY_TMP);
    fs.write_file(&tmp, &encode(id))
        .map_err(|e| Error::io("write the store's identity", &tmp, e))?;
    fs.rename(&tmp, &dir.join(IDENTITY))
        .map_err(|e| Error::io("name the store's identity", &tmp, e))?;
    sync_dir(fs, dir)
}

/// A new identity: 128 bits of the operating system's randomness.
pub fn fresh() -> Result<StoreId> {
    crate::random::bytes("draw the store's identity").map(StoreId)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let id = StoreId([0xab; 16]);
        let bytes = encode(id);
        assert_eq!(decode(&bytes), Some(id));
        for i in 0..LEN {
            let mut bad = bytes;
            bad[i] ^= 1;
            assert_eq!(decode(&bad), None, "byte {i}");
            assert_eq!(decode(&bytes[..i]), None);
        }
    }
}
