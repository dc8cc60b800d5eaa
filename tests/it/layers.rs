//! The engine's modules use only the layers below their own (DESIGN.md
//! §1, "Layers"), no two of them use each other, and inside a folder no
//! two files use each other through others: read from `src/` by
//! `module_graph`.

use std::path::Path;

use crate::module_graph::{cycle, folder_graph, graph, unplaced, upward, Graph};

/// The engine's layers, top first, as DESIGN.md §1 draws them: a module
/// uses only modules of the layers below its own. (`cli` is the binary's
/// own crate; it uses the library as any program does.)
const LAYERS: &[&[&str]] = &[
    &["lib"],
    &["demo", "import", "fuzzing"],
    &["replicate"],
    &["store"],
    &["index"],
    &["log"],
    &["render"],
    &["a2a"],
    &["options"],
    &["fs"],
    &["namespace", "random"],
    &["error"],
    &["time"],
];

fn src() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn engine() -> Graph {
    graph(&src(), &["cli"])
}

#[test]
fn every_module_has_a_layer_and_uses_only_those_below() {
    let graph = engine();
    // The reading works: these uses are the layers' spine.
    assert!(graph["store"].contains("index"), "{:?}", graph["store"]);
    assert!(graph["index"].contains("log"), "{:?}", graph["index"]);
    assert!(graph["log"].contains("fs"), "{:?}", graph["log"]);
    assert!(
        graph["replicate"].contains("store"),
        "{:?}",
        graph["replicate"]
    );
    let unplaced = unplaced(&graph, LAYERS);
    assert!(
        unplaced.is_empty(),
        "src/ modules in no layer: {unplaced:?}; add them to LAYERS here and to DESIGN.md §1"
    );
    let upward = upward(&graph, LAYERS);
    assert!(
        upward.is_empty(),
        "uses that run up the engine's layers (or across one): {upward:?}"
    );
}

#[test]
fn a_use_up_the_layers_is_found() {
    let mut graph = engine();
    graph
        .get_mut("store")
        .expect("store")
        .insert("replicate".into());
    assert_eq!(
        upward(&graph, LAYERS),
        vec!["store -> replicate".to_string()]
    );
}

#[test]
fn no_files_of_a_folder_use_each_other_in_a_circle() {
    for (folder, files) in graph_folders() {
        if let Some(cycle) = cycle(&files) {
            panic!(
                "files of src/{folder}/ use each other in a circle: {}",
                cycle.join(" -> ")
            );
        }
    }
}

fn graph_folders() -> Vec<(String, Graph)> {
    let mut folders = Vec::new();
    for entry in std::fs::read_dir(src()).expect("src/ lists") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .expect("a UTF-8 name")
                .to_string();
            let files = folder_graph(&src(), &name);
            folders.push((name, files));
        }
    }
    folders
}

#[test]
fn the_folder_reading_sees_uses_between_files() {
    let replicate = folder_graph(&src(), "replicate");
    assert!(
        replicate["ship"].contains("shipper"),
        "{:?}",
        replicate["ship"]
    );
}
