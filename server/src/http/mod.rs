//! Reading requests off the network: the accept loop and its limits
//! (`listener.rs`), media types (`media.rs`), and proto field names read as
//! their JSON names (`protonames.rs`).

pub(crate) mod listener;
pub(crate) mod media;
pub(crate) mod protonames;
