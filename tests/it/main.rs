//! The engine's integration tests, one module per concern, linked into one
//! binary (one link instead of one per file; `cargo test --test it
//! MODULE::` runs one module's). The helpers they share are in `common`.

mod common;

mod cli;
mod compaction;
mod concurrency;
mod conversation;
mod crash;
mod deferred;
mod deferred_receive;
mod doc_links;
mod exact_json;
mod faults;
mod foreign_and_lost;
mod fuzz_corpus;
mod idempotency;
mod layers;
mod lock;
mod maintenance;
mod module_graph;
mod namespace;
mod portable;
mod push;
mod read_only;
mod readme_cli;
mod recovery;
mod render;
mod replicate;
mod replicate_faults;
mod retention;
mod store;
mod task_model;
mod tasks;
mod tracing;
mod v03;
