//! What a client reads of a task as it goes: streams that follow it
//! (`sse.rs`) and when a send's answer is ready (`reply.rs`).

pub(crate) mod reply;
pub(crate) mod sse;
