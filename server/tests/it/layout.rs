//! The server's modules use each other in one direction only: this test
//! reads every file of `src/`, lists the modules each one uses, and fails
//! on a cycle, naming it. It also fails when docs/design/server.md's drawing of the
//! modules (§12, "The server's modules") leaves one out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's name and its files (`agents/` is one module of several).
fn modules(src: &Path) -> BTreeMap<String, Vec<PathBuf>> {
    let mut modules = BTreeMap::new();
    for entry in std::fs::read_dir(src).expect("src/ lists") {
        let path = entry.expect("an entry").path();
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a UTF-8 name")
            .to_string();
        if path.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(&path)
                .expect("a module directory lists")
                .map(|e| e.expect("an entry").path())
                .filter(|p| p.extension().is_some_and(|e| e == "rs"))
                .collect();
            files.sort();
            modules.insert(name, files);
        } else if path.extension().is_some_and(|e| e == "rs") && name != "main" {
            modules.insert(name, vec![path]);
        }
    }
    modules
}

/// The code of `files`, without comment lines (doc links are not uses).
fn code(files: &[PathBuf]) -> String {
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

/// What `code` (a module's, or the crate root's when `root`) uses of the
/// crate: module names, or `lib` for an item of the crate root.
fn uses(code: &str, names: &BTreeSet<String>, root: bool) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    let mut name_of = |head: &str| {
        used.insert(match names.contains(head) {
            true => head.to_string(),
            false => "lib".to_string(),
        });
    };
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        match rest.strip_prefix('{') {
            Some(group) => group_heads(group).iter().for_each(|h| name_of(h)),
            None => name_of(
                &rest
                    .chars()
                    .take_while(|&c| is_ident(c))
                    .collect::<String>(),
            ),
        }
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

/// The server's graph: each module and what it uses.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = modules(&src);
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

/// A cycle of `graph`, if it has one, as the modules along it.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    // Depth first; a module met again while still on the path closes a
    // cycle. 0: not seen, 1: on the path, 2: done.
    fn visit(
        at: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
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
fn no_module_of_the_server_uses_itself_through_others() {
    let graph = graph();
    // The reading works: the modules are all there, and the uses that make
    // the layers are seen (each of these would be missed by a reader that
    // took only `use crate::x;` lines, or only the root's).
    for name in ["agent", "state", "turn", "turns", "core", "sse", "lib"] {
        assert!(graph.contains_key(name), "module {name} not found");
    }
    assert!(graph["turn"].contains("state"), "{:?}", graph["turn"]);
    assert!(graph["state"].contains("turns"), "{:?}", graph["state"]);
    assert!(graph["lib"].contains("rpc"), "{:?}", graph["lib"]);
    assert!(graph["fuzzing"].contains("lib"), "{:?}", graph["fuzzing"]);
    assert!(
        graph["agent"].is_empty(),
        "the agent's face uses {:?}",
        graph["agent"]
    );
    if let Some(cycle) = cycle(&graph) {
        panic!(
            "the server's modules use each other in a circle: {}",
            cycle.join(" -> ")
        );
    }
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
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
        "use crate::{hub::{Follower, Payload}, util::lock};\nlet s = crate::state::x;\nuse crate::{Config};",
        &names,
        false,
    );
    assert_eq!(
        used,
        ["hub", "lib", "state", "util"].map(String::from).into()
    );
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
    for name in graph().keys().filter(|n| *n != "lib") {
        let file = match name.as_str() {
            "agents" => "`agents/`".to_string(),
            "v03" => "`v03/`".to_string(),
            other => format!("`{other}.rs`"),
        };
        assert!(
            section.contains(&file),
            "docs/design/server.md's drawing of the server's modules does not name {file}"
        );
    }
}
