//! The A2A bindings over one request core: JSON-RPC 2.0 (`rpc.rs`, A2A
//! §9) and HTTP+JSON (`rest.rs`, §11) of v1.0, v0.3's beside them
//! (`v03/`), and the operations both call (`core.rs`: parameters in,
//! protocol objects or errors out). The top of the server: it uses every
//! part below it and nothing uses it but the router (`lib.rs`).

pub(crate) mod core;
pub(crate) mod rest;
pub(crate) mod rpc;
pub(crate) mod v03;
