//! The server's integration tests, one module per concern, linked into one
//! binary (one link instead of one per file; `cargo test -p ctxlog-server
//! --test it MODULE::` runs one module's). `common` holds the helpers
//! (a server in this process, a client, a server process, test agents),
//! `hook` a webhook receiver.

mod common;
#[path = "common/hook.rs"]
mod hook;

mod agents;
mod conformance;
mod crash;
mod crash_points;
mod disk_full;
mod doc_examples;
mod fuzz_corpus;
mod input;
mod layout;
#[path = "../../../tests/it/module_graph.rs"]
mod module_graph;
mod protocol;
mod push;
mod push_crash;
mod push_kit;
mod replicate;
mod replicate_faults;
mod slow_clients;
mod streams;
mod turns;
mod v03;
