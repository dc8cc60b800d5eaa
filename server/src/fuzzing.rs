//! The body of the `rpc` fuzz target (placeholder replaced below).
