//! Every link between the project's Markdown files resolves: a relative
//! link `[text](path#anchor)` names a file that exists (from the linking
//! file's folder) and, into a Markdown file, a heading it has (GitHub's
//! anchors); and a path written as code (`docs/design/format.md`,
//! `tests/it/faults.rs`, …) names a file of the repository (from its root,
//! or from the server's or the Python package's folder, which their own
//! pages write paths from). CHANGELOG.md's paths are history and are not
//! checked.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The Markdown files under `dir`, leaving out build output, virtual
/// environments, hidden folders and the fuzz corpus.
fn markdown(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            let skip = name.starts_with('.')
                || ["target", "node_modules", "corpus", "artifacts"].contains(&name.as_str())
                || name.ends_with("venv");
            if !skip {
                markdown(&path, out);
            }
        } else if name.ends_with(".md") {
            out.push(path);
        }
    }
}

/// GitHub's anchor of a heading.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings.
fn anchors(file: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| slug(l.trim_start_matches('#')))
        .collect()
}

/// The text outside fenced code blocks.
fn prose(text: &str) -> String {
    let mut fenced = false;
    let mut out = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The relative links of `text`: what each `](…)` names.
fn links(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        let end = rest.find([')', ' ', '\n']).unwrap_or(rest.len());
        let target = &rest[..end];
        let scheme = target
            .find(':')
            .is_some_and(|c| !target[..c].contains(['/', '#']));
        if !target.is_empty() && !scheme {
            out.push(target);
        }
    }
    out
}

/// The repository paths written as code in `text`.
fn code_paths(text: &str) -> Vec<&str> {
    const ROOTS: [&str; 9] = [
        "docs/",
        "src/",
        "tests/",
        "server/",
        "python/",
        "examples/",
        "benches/",
        "fuzz/",
        "bench-compare/",
    ];
    const ENDINGS: [&str; 6] = [".md", ".rs", ".py", ".toml", ".json", ".sh"];
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|span| {
            ROOTS.iter().any(|r| span.starts_with(r))
                && ENDINGS.iter().any(|e| span.ends_with(e))
                && span
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-'))
        })
        .collect()
}

#[test]
fn every_link_between_the_docs_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    markdown(root, &mut files);
    assert!(files.len() >= 40, "{} Markdown files found", files.len());
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = prose(&std::fs::read_to_string(file).unwrap());
        let shown = file
            .strip_prefix(root)
            .unwrap_or(file)
            .display()
            .to_string();
        for link in links(&text) {
            checked += 1;
            let (path, anchor) = link.split_once('#').unwrap_or((link, ""));
            let target = match path {
                "" => file.clone(),
                path => file.parent().unwrap_or(root).join(path),
            };
            if !target.exists() {
                broken.push(format!("{shown}: ({link}) names no file"));
            } else if !anchor.is_empty()
                && target.extension().is_some_and(|e| e == "md")
                && !anchors(&target).contains(anchor)
            {
                broken.push(format!("{shown}: ({link}) names no heading of it"));
            }
        }
        if shown == "CHANGELOG.md" {
            continue;
        }
        for path in code_paths(&text) {
            checked += 1;
            let found = ["", "server", "python"]
                .iter()
                .any(|base| root.join(base).join(path).exists());
            if !found {
                broken.push(format!("{shown}: `{path}` names no file"));
            }
        }
    }
    assert!(checked >= 100, "{checked} links and paths checked");
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn the_checker_finds_what_it_should() {
    assert_eq!(
        slug(" 12. The A2A server (`server/`)"),
        "12-the-a2a-server-server"
    );
    assert_eq!(
        links("see [a](docs/x.md#top) and [b](https://e.org/) and [c](#here)"),
        ["docs/x.md#top", "#here"]
    );
    assert_eq!(
        code_paths("`tests/it/faults.rs` and `cargo test` and `docs/a b.md`"),
        ["tests/it/faults.rs"]
    );
    assert_eq!(prose("a\n```sh\n`src/x.rs`\n```\nb"), "a\nb\n");
}
