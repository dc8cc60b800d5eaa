//! The log: segment files of framed records, appended to and recovered.

pub mod frame;
pub mod identity;
pub mod layout;
pub mod manifest;
pub mod record;
pub mod recovery;
pub mod segments;
pub mod verify;
pub mod writer;
