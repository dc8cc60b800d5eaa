//! A send's two halves: its message received, durable before anything
//! else (`inbound.rs`), and the turn that runs the agent on it
//! (`turn.rs`).

pub(crate) mod inbound;
pub(crate) mod turn;
