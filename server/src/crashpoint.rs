//! Named points in a turn's steps at which a test can make the process die
//! as a `kill -9` would (no destructor, no flush, no goodbye), to check
//! what a restart makes of a crash at each: `CTXLOG_SERVER_CRASH_AT=NAME`.
//! Unset (always, outside such tests), a point costs one load of a value
//! read once.

use std::sync::OnceLock;

/// The environment variable that names the point to die at.
pub const VARIABLE: &str = "CTXLOG_SERVER_CRASH_AT";

/// The points, in the order a turn passes them.
pub const POINTS: [&str; 3] = [
    // The client's message is durable; its turn has not started.
    "received",
    // The turn is about to call the agent.
    "agent-called",
    // The agent's first event is durable; nobody has been told of it.
    "first-event",
];

/// Dies here if the environment names this point.
pub(crate) fn point(name: &str) {
    static AT: OnceLock<Option<String>> = OnceLock::new();
    let at = AT.get_or_init(|| std::env::var(VARIABLE).ok());
    if at.as_deref() == Some(name) {
        std::process::abort();
    }
}
