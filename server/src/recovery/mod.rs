//! The server getting its store back: on start, the turns a process that
//! died left running (`restart.rs`); after a failed write or sync, the
//! store reopened and `/healthz` (`health.rs`); on a standby, following
//! the writer's replica and taking over (`following.rs`).

pub(crate) mod following;
pub(crate) mod health;
pub(crate) mod restart;
