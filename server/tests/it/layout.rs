//! The server's parts use each other in one direction only (see
//! docs/design/server.md, "The server's modules"): this test reads every
//! file of `src/` (with `tests/it/module_graph.rs`, the engine's reading),
//! takes each folder and each file beside them as one module, and fails
//! on a use that runs up the layers below, on a circle between the files
//! of a folder, and when the design's table leaves a module out.

use std::path::{Path, PathBuf};

use crate::module_graph::{cycle, folder_graph, graph, unplaced, upward, Graph};

/// The server's layers, top first: a module uses only modules of the
/// layers below its own.
const LAYERS: &[&[&str]] = &[
    &["fuzzing"],
    &["lib"],
    &["bindings"],
    &["recovery"],
    &["sends"],
    &["push"],
    &["streams"],
    &["http"],
    &["state"],
    &["agents"],
    &["card"],
    &["config"],
    &["auth", "webhook"],
    &["util"],
    &["agent", "error", "logline", "crashpoint"],
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The server's graph: each folder or file of `src/` (but the binary's
/// root, `main.rs`) and what it uses.
fn server() -> Graph {
    graph(&src(), &["main"])
}

#[test]
fn every_part_of_the_server_uses_only_the_layers_below() {
    let graph = server();
    // The reading works: the modules are all there, and the uses that make
    // the layers are seen (each of these would be missed by a reader that
    // took only `use crate::x;` lines, or only the root's).
    assert!(graph["sends"].contains("state"), "{:?}", graph["sends"]);
    assert!(
        graph["bindings"].contains("sends"),
        "{:?}",
        graph["bindings"]
    );
    assert!(graph["lib"].contains("bindings"), "{:?}", graph["lib"]);
    assert!(graph["fuzzing"].contains("lib"), "{:?}", graph["fuzzing"]);
    assert!(
        graph["agent"].is_empty(),
        "the agent's face uses {:?}",
        graph["agent"]
    );
    let unplaced = unplaced(&graph, LAYERS);
    assert!(
        unplaced.is_empty(),
        "src/ modules in no layer: {unplaced:?}; add them to LAYERS here and to docs/design/server.md"
    );
    let upward = upward(&graph, LAYERS);
    assert!(
        upward.is_empty(),
        "uses that run up the server's layers (or across one): {upward:?}"
    );
    if let Some(cycle) = cycle(&graph) {
        panic!(
            "the server's modules use each other in a circle: {}",
            cycle.join(" -> ")
        );
    }
}

#[test]
fn a_use_up_the_layers_is_found() {
    let mut graph = server();
    graph
        .get_mut("state")
        .expect("state")
        .insert("sends".into());
    assert_eq!(upward(&graph, LAYERS), vec!["state -> sends".to_string()]);
}

#[test]
fn no_files_of_a_folder_use_each_other_in_a_circle() {
    let folders = [
        "bindings", "http", "push", "recovery", "sends", "state", "streams",
    ];
    for folder in folders {
        let files = folder_graph(&src(), folder);
        assert!(!files.is_empty(), "src/{folder}/ has no files");
        if let Some(cycle) = cycle(&files) {
            panic!(
                "files of src/{folder}/ use each other in a circle: {}",
                cycle.join(" -> ")
            );
        }
    }
    // The reading sees uses between the files of a folder.
    let bindings = folder_graph(&src(), "bindings");
    assert!(bindings["rpc"].contains("core"), "{:?}", bindings["rpc"]);
}

#[test]
fn design_draws_every_module() {
    let design = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/design/server.md"),
    )
    .expect("docs/design/server.md reads");
    let start = design
        .find("## The server's modules")
        .expect("docs/design/server.md has \"## The server's modules\"");
    let section = &design[start + 1..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    for (name, _) in server().iter().filter(|(n, _)| *n != "lib") {
        let file = match src().join(name).is_dir() {
            true => format!("`{name}/`"),
            false => format!("`{name}.rs`"),
        };
        assert!(
            section.contains(&file),
            "docs/design/server.md's table of the server's modules does not name {file}"
        );
    }
}
