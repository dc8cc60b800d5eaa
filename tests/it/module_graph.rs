//! A crate's modules and what each uses of the others, read from the
//! text of `src/`: the engine's layer test (`tests/it/layers.rs`) and the
//! server's (`server/tests/it/layout.rs`, which includes this file) check
//! the direction of use and find circles on it.
//!
//! A module is a file or a folder of `src/` (a folder is one module, all
//! its files at any depth); a use is a `crate::NAME` path in code (comment
//! lines are skipped: doc links are not uses), `crate::{A, B::x}` naming
//! each, and in the crate root a bare `NAME::` path. Inside one folder,
//! [`folder_graph`] reads the uses between its files the same way
//! (`super::NAME` and `crate::FOLDER::NAME`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module graph: each module and the modules it uses.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// Every `.rs` file under `dir`, at any depth, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("a module directory lists")
        .map(|e| e.expect("an entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// The modules of `dir` (a file or a folder each) and their files; the
/// crate root (`lib.rs`) is `lib`; `skip` names files and folders left
/// out (a binary's root and its own modules).
pub fn modules(dir: &Path, skip: &[&str]) -> BTreeMap<String, Vec<PathBuf>> {
    let mut modules = BTreeMap::new();
    for entry in std::fs::read_dir(dir).expect("src/ lists") {
        let path = entry.expect("an entry").path();
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a UTF-8 name")
            .to_string();
        if skip.contains(&name.as_str()) {
            continue;
        }
        if path.is_dir() {
            modules.insert(name, rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            modules.insert(name, vec![path]);
        }
    }
    modules
}

/// The code of `files`, without comment lines (doc links are not uses).
pub fn code(files: &[PathBuf]) -> String {
    let mut code = String::new();
    for file in files {
        let text = std::fs::read_to_string(file).expect("a source file reads");
        for line in text.lines() {
            if !line.trim_start().starts_with("//") {
                code.push_str(line);
                code.push('\n');
            }
        }
    }
    code
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The first path segment of each item of a `{...}` group that starts at
/// `text` (just after its `{`).
fn group_heads(text: &str) -> Vec<String> {
    let (mut heads, mut item, mut depth) = (Vec::new(), String::new(), 0usize);
    for c in text.chars() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => heads.push(std::mem::take(&mut item)),
            c if depth == 0 => item.push(c),
            _ => {}
        }
    }
    heads.push(item);
    heads
        .iter()
        .filter_map(|i| i.trim().split("::").next())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .collect()
}

/// The heads of the paths that follow each `prefix` in `code`: the
/// identifier after it, or each item's of a group.
fn heads_after(code: &str, prefix: &str) -> Vec<String> {
    let mut heads = Vec::new();
    for (at, _) in code.match_indices(prefix) {
        // `a_crate::x` is not `crate::x`.
        if code[..at].chars().next_back().is_some_and(is_ident) {
            continue;
        }
        let rest = &code[at + prefix.len()..];
        match rest.strip_prefix('{') {
            Some(group) => heads.extend(group_heads(group)),
            None => heads.push(rest.chars().take_while(|&c| is_ident(c)).collect()),
        }
    }
    heads
}

/// What `code` (a module's, or the crate root's when `root`) uses of the
/// crate: module names, or `lib` for an item of the crate root.
pub fn uses(code: &str, names: &BTreeSet<String>, root: bool) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    for head in heads_after(code, "crate::") {
        used.insert(match names.contains(&head) {
            true => head,
            false => "lib".to_string(),
        });
    }
    if root {
        // The root names its modules without `crate::`.
        for (at, _) in code.match_indices("::") {
            let before = &code[..at];
            let head: String = before
                .chars()
                .rev()
                .take_while(|&c| is_ident(c))
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            let preceded = before[..before.len() - head.len()].ends_with("::");
            if !preceded && names.contains(&head) {
                used.insert(head);
            }
        }
    }
    used
}

/// The graph of the modules of `src` (see [`modules`]).
pub fn graph(src: &Path, skip: &[&str]) -> Graph {
    let modules = modules(src, skip);
    let names: BTreeSet<String> = modules.keys().cloned().collect();
    modules
        .iter()
        .map(|(name, files)| {
            let mut used = uses(&code(files), &names, name == "lib");
            used.remove(name);
            (name.clone(), used)
        })
        .collect()
}

/// The graph of the files of one folder of `src`, `src/FOLDER`: each file
/// (or sub-folder, as one) but `mod.rs`, and the others it uses.
pub fn folder_graph(src: &Path, folder: &str) -> Graph {
    let files = modules(&src.join(folder), &["mod"]);
    let names: BTreeSet<String> = files.keys().cloned().collect();
    files
        .iter()
        .map(|(name, paths)| {
            let code = code(paths);
            // In a sub-folder's files, `super::` is the sub-folder.
            let up = match src.join(folder).join(name).is_dir() {
                true => "super::super::",
                false => "super::",
            };
            let mut heads = heads_after(&code, up);
            heads.extend(heads_after(&code, &format!("crate::{folder}::")));
            let mut used: BTreeSet<String> =
                heads.into_iter().filter(|h| names.contains(h)).collect();
            used.remove(name);
            (name.clone(), used)
        })
        .collect()
}

/// Each use of `graph` that goes to a module of the same layer or of one
/// above, as "from -> to"; `layers` lists the layers top first. A module
/// in no layer counts as out of order in every use.
pub fn upward(graph: &Graph, layers: &[&[&str]]) -> Vec<String> {
    let layer_of = |name: &str| layers.iter().position(|layer| layer.contains(&name));
    let mut found = Vec::new();
    for (from, used) in graph {
        for to in used {
            match (layer_of(from), layer_of(to)) {
                (Some(f), Some(t)) if t > f => {}
                _ => found.push(format!("{from} -> {to}")),
            }
        }
    }
    found
}

/// The modules of `graph` that `layers` leaves out.
pub fn unplaced(graph: &Graph, layers: &[&[&str]]) -> Vec<String> {
    graph
        .keys()
        .filter(|name| !layers.iter().any(|layer| layer.contains(&name.as_str())))
        .cloned()
        .collect()
}

/// A cycle of `graph`, if it has one, as the modules along it.
pub fn cycle(graph: &Graph) -> Option<Vec<String>> {
    // Depth first; a module met again while still on the path closes a
    // cycle. 0: not seen, 1: on the path, 2: done.
    fn visit(
        at: &str,
        graph: &Graph,
        mark: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        mark.insert(at.to_string(), 1);
        path.push(at.to_string());
        for next in graph.get(at).into_iter().flatten() {
            match mark.get(next).copied().unwrap_or(0) {
                1 => {
                    let from = path.iter().position(|m| m == next).unwrap_or(0);
                    let mut found = path[from..].to_vec();
                    found.push(next.clone());
                    return Some(found);
                }
                0 => {
                    if let Some(found) = visit(next, graph, mark, path) {
                        return Some(found);
                    }
                }
                _ => {}
            }
        }
        path.pop();
        mark.insert(at.to_string(), 2);
        None
    }
    let mut mark = BTreeMap::new();
    for start in graph.keys() {
        if mark.get(start).copied().unwrap_or(0) == 0 {
            if let Some(found) = visit(start, graph, &mut mark, &mut Vec::new()) {
                return Some(found);
            }
        }
    }
    None
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let graph: Graph = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(m, to)| (m.to_string(), to.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(
        cycle(&graph),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    let mut acyclic = graph.clone();
    acyclic.insert("c".into(), BTreeSet::new());
    assert_eq!(cycle(&acyclic), None);
}

#[test]
fn a_group_import_names_each_module() {
    let names: BTreeSet<String> = ["hub", "state", "util"].map(String::from).into();
    let used = uses(
        "use crate::{hub::{Follower, Payload}, util::lock};\nlet s = crate::state::x;\nuse crate::{Config};\nuse a_crate::util;",
        &names,
        false,
    );
    assert_eq!(
        used,
        ["hub", "lib", "state", "util"].map(String::from).into()
    );
}
