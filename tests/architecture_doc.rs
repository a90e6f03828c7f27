//! docs/ARCHITECTURE.md stays a map a newcomer can read: every source file under `src/` has
//! exactly one entry in it, no name in it is stale, and no part of it is a wall of text.
//!
//! The doc's convention, which these tests read:
//! - A code-map entry is a list item that starts with one or more source files in backticks,
//!   as paths relative to `src/`, separated by `, ` (test files may share an entry; an item may
//!   go on over indented lines):
//!   ``- `vhost_device/drain.rs`: serving a queue.``
//! - Every other path in backticks (ending in `.rs`, `.sh`, `.md` or `/`) is relative to `src/`
//!   too, unless it starts with `src/`, `tests/`, `fuzz/`, `contrib/`, `docs/` or `.ci/`: then it
//!   is relative to the repository. Each must exist.
//!
//! `VHOSTFS_ARCHITECTURE_DOC=/some/file.md` points the tests at another file (to check an old
//! version of the doc, which fails them).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Longest line of a markdown table, in characters. A table row is one source line, so this is
/// the bound on a row's cells: no row over about two lines of 100 (the cells of the old module
/// map ran to 4,300 characters). The rewritten doc's longest row has about 200.
const TABLE_LINE_MAX: usize = 240;

/// Most lines in one paragraph (a run of non-blank lines; a heading, a list item or a table row
/// starts a new one). The rewritten doc's longest paragraph has 8 lines; the old doc had four of
/// 14 to 36 lines (the longest: the in-place upgrade under the namespace sandbox).
const PARAGRAPH_MAX: usize = 12;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn doc() -> String {
    let path = std::env::var_os("VHOSTFS_ARCHITECTURE_DOC")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("docs/ARCHITECTURE.md"));
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every `*.rs` file under `dir`, as a path relative to `base` with `/` separators.
fn source_files(base: &Path, dir: &Path, out: &mut BTreeSet<String>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            source_files(base, &p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let rel = p.strip_prefix(base).unwrap();
            out.insert(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// Lines outside fenced code blocks, with their line numbers (1-based).
fn prose_lines(doc: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in doc.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// List items outside code blocks, each with its continuation lines (indented by two spaces)
/// joined to it by a space, and the line number where it starts.
fn list_items(doc: &str) -> Vec<(usize, String)> {
    let mut items: Vec<(usize, String)> = Vec::new();
    let mut open = false;
    for (n, line) in prose_lines(doc) {
        if line.starts_with("- ") {
            items.push((n, line.to_string()));
            open = true;
        } else if open && line.starts_with("  ") && !line.trim().is_empty() {
            let item = &mut items.last_mut().unwrap().1;
            item.push(' ');
            item.push_str(line.trim());
        } else {
            open = false;
        }
    }
    items
}

/// The source files a code-map entry names: the backticked `*.rs` names at the start of a list
/// item, before the first text that is not another backticked name.
fn entry_names(line: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let Some(mut rest) = line.strip_prefix("- `") else {
        return names;
    };
    while let Some(end) = rest.find('`') {
        let name = &rest[..end];
        if !name.ends_with(".rs") {
            break;
        }
        names.push(name);
        rest = &rest[end + 1..];
        match rest.strip_prefix(", `") {
            Some(r) => rest = r,
            None => break,
        }
    }
    names
}

/// Backticked spans of a line.
fn code_spans(line: &str) -> impl Iterator<Item = &str> {
    line.split('`').skip(1).step_by(2)
}

/// Whether a backticked span is a path the doc names (see the module doc).
fn is_path(span: &str) -> bool {
    !span.is_empty()
        && !span.starts_with('/')
        && !span.starts_with('-')
        && span
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./-".contains(c))
        && [".rs", ".sh", ".md", "/"]
            .iter()
            .any(|end| span.ends_with(end))
}

#[test]
fn every_source_file_has_exactly_one_entry() {
    let doc = doc();
    let src = root().join("src");
    let mut files = BTreeSet::new();
    source_files(&src, &src, &mut files);
    assert!(files.len() > 50, "src/ has {} files?", files.len());

    let mut entries: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (n, item) in list_items(&doc) {
        for name in entry_names(&item) {
            entries.entry(name.to_string()).or_default().push(n);
        }
    }
    let mut problems = Vec::new();
    for f in &files {
        match entries.get(f) {
            Some(lines) if lines.len() == 1 => {}
            Some(lines) => problems.push(format!("src/{f}: entries on lines {lines:?}")),
            None => problems.push(format!("src/{f}: no entry (a line \"- `{f}`: ...\")")),
        }
    }
    for (name, lines) in &entries {
        if !files.contains(name) {
            problems.push(format!(
                "entry `{name}` (line {lines:?}): no such file under src/"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "the code map of docs/ARCHITECTURE.md ({} problems):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn every_path_named_exists() {
    let doc = doc();
    let root = root();
    let mut stale = Vec::new();
    for (n, line) in prose_lines(&doc) {
        for span in code_spans(line).filter(|s| is_path(s)) {
            let in_repo = ["src/", "tests/", "fuzz/", "contrib/", "docs/", ".ci/"]
                .iter()
                .any(|p| span.starts_with(p));
            let path = if in_repo {
                root.join(span)
            } else {
                root.join("src").join(span)
            };
            if !path.exists() {
                stale.push(format!(
                    "line {n}: `{span}` ({} does not exist)",
                    path.display()
                ));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "docs/ARCHITECTURE.md names paths that do not exist:\n{}",
        stale.join("\n")
    );
}

#[test]
fn no_wall_of_text() {
    let doc = doc();
    let mut problems = Vec::new();
    let mut paragraph: Option<(usize, usize)> = None; // (first line, lines)
    fn end(p: &mut Option<(usize, usize)>, problems: &mut Vec<String>) {
        if let Some((first, len)) = p.take() {
            if len > PARAGRAPH_MAX {
                problems.push(format!("line {first}: a paragraph of {len} lines"));
            }
        }
    }
    for (n, line) in prose_lines(&doc) {
        let t = line.trim_start();
        if t.starts_with('|') {
            end(&mut paragraph, &mut problems);
            let len = line.chars().count();
            if len > TABLE_LINE_MAX {
                problems.push(format!("line {n}: a table row of {len} characters"));
            }
            continue;
        }
        let starts_block = t.is_empty()
            || t.starts_with('#')
            || t.starts_with("- ")
            || t.starts_with("* ")
            || t.split_once(". ")
                .is_some_and(|(d, _)| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()));
        if starts_block {
            end(&mut paragraph, &mut problems);
        }
        if !t.is_empty() && !t.starts_with('#') {
            paragraph = Some(match paragraph {
                Some((first, len)) => (first, len + 1),
                None => (n, 1),
            });
        }
    }
    end(&mut paragraph, &mut problems);
    assert!(
        problems.is_empty(),
        "docs/ARCHITECTURE.md has walls of text (rows over {TABLE_LINE_MAX} characters, \
         paragraphs over {PARAGRAPH_MAX} lines):\n{}",
        problems.join("\n")
    );
}
