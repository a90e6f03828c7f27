//! The rooms of `src/passthrough/` (its module doc): imports run only downwards, from the
//! operations (`ops/`, `migration/`) through the filesystem object and the policies to the state
//! and `sys/`, and no files import each other in a circle. Read from the source: every path a
//! file names (`use` lines and paths in code, not comments) that starts with `super`, `self`,
//! `crate::passthrough` or a child module is resolved to the file defining it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

type Module = Vec<String>;

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            source_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn module_of(root: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(root).unwrap().with_extension("");
    let mut m: Module = rel
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    if m.last().is_some_and(|l| l == "mod") {
        m.pop();
    }
    m
}

/// The room of a module and its rank: an import may only name a module of the same or a lower
/// rank.
fn rank(m: &Module) -> u32 {
    match (m.first().map(String::as_str), m.get(1).map(String::as_str)) {
        (None, _) => 9,
        (Some("sys"), _) => 0,
        (Some("state" | "request_types"), _) => 1,
        (Some("policy"), _) | (Some("migration"), Some("config")) => 2,
        (Some("config"), _) => 3,
        (Some("filesystem"), _) => 4,
        (Some("ops" | "migration"), _) => 5,
        (Some(other), _) => panic!("src/passthrough/{other}: a file in no room; add it to rank()"),
    }
}

/// Source without comments, visibility paths and inline test modules (`#[cfg(test)] mod tests { … }`
/// at the end of a file, which may use anything).
fn code(src: &str) -> String {
    let src = match src.find("#[cfg(test)]\nmod tests {") {
        Some(i) => &src[..i],
        None => src,
    };
    // `pub(in crate::passthrough)` names a visibility, not an import.
    src.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("pub(in crate::passthrough)", "pub")
}

/// Every path (as segments) named by `use` lines (brace groups expanded) and in code.
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = code;
    // `use` statements, up to their `;`.
    while let Some(i) = rest.find("use ") {
        let before = rest[..i].chars().last();
        rest = &rest[i + 4..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let end = rest.find(';').unwrap_or(rest.len());
        expand(&rest[..end].replace(char::is_whitespace, ""), &mut out);
        rest = &rest[end..];
    }
    // Paths in code: runs of `ident::ident::...`.
    let mut word = String::new();
    for c in code.chars().chain(std::iter::once(' ')) {
        if c.is_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
        } else {
            if word.contains("::") {
                out.push(word.split("::").map(str::to_string).collect());
            }
            word.clear();
        }
    }
    out
}

fn expand(s: &str, out: &mut Vec<Vec<String>>) {
    let Some(open) = s.find('{') else {
        let s = s.split("as").next().unwrap_or(s);
        out.push(s.split("::").map(str::to_string).collect());
        return;
    };
    let (prefix, body) = (&s[..open], &s[open + 1..s.len() - 1]);
    let mut depth = 0;
    let mut part = String::new();
    for c in body.chars().chain(std::iter::once(',')) {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                if !part.is_empty() {
                    expand(&format!("{prefix}{part}"), out);
                }
                part.clear();
                continue;
            }
            _ => {}
        }
        part.push(c);
    }
}

/// The module file a path names, seen from `from` (`None`: outside `passthrough`, or not a
/// module path).
fn resolve(
    from: &Module,
    children: &BTreeSet<String>,
    path: &[String],
    files: &BTreeSet<Module>,
) -> Option<Module> {
    let (mut base, mut rest): (Module, &[String]) = match path.first()?.as_str() {
        "crate" if path.get(1)? == "passthrough" => (Vec::new(), &path[2..]),
        "self" => (from.clone(), &path[1..]),
        "super" => {
            let mut b = from.clone();
            let mut r = path;
            while r.first().is_some_and(|s| s == "super") {
                b.pop();
                r = &r[1..];
            }
            (b, r)
        }
        first if children.contains(first) => (from.clone(), path),
        _ => return None,
    };
    let mut best = None;
    let mut cur = std::mem::take(&mut base);
    if files.contains(&cur) {
        best = Some(cur.clone());
    }
    while let Some((seg, r)) = rest.split_first() {
        cur.push(seg.clone());
        if files.contains(&cur) {
            best = Some(cur.clone());
        }
        rest = r;
    }
    best
}

#[test]
fn passthrough_imports_run_downwards_and_in_no_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/passthrough");
    let mut files = Vec::new();
    source_files(&root, &mut files);
    let modules: BTreeSet<Module> = files.iter().map(|f| module_of(&root, f)).collect();
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for f in &files {
        let m = module_of(&root, f);
        if m.last().is_some_and(|l| l == "tests") {
            continue;
        }
        let code = code(&fs::read_to_string(f).unwrap());
        let children: BTreeSet<String> = modules
            .iter()
            .filter(|c| c.len() == m.len() + 1 && c.starts_with(&m))
            .map(|c| c.last().unwrap().clone())
            .filter(|c| c != "tests")
            .collect();
        for p in paths(&code) {
            if let Some(t) = resolve(&m, &children, &p, &modules) {
                if t != m && !t.last().is_some_and(|l| l == "tests") {
                    edges.entry(m.clone()).or_default().insert(t);
                }
            }
        }
    }
    let name = |m: &Module| {
        if m.is_empty() {
            "mod".to_string()
        } else {
            m.join("/")
        }
    };
    // A parent's `mod.rs` that only declares and re-exports its children is wiring, not an
    // import: it may name a child of any rank.
    let wiring = |from: &Module, to: &Module| to.len() == from.len() + 1 && to.starts_with(from);
    let upward: Vec<String> = edges
        .iter()
        .flat_map(|(a, ts)| ts.iter().map(move |b| (a, b)))
        .filter(|(a, b)| !wiring(a, b) && rank(b) > rank(a))
        .map(|(a, b)| format!("{} -> {}", name(a), name(b)))
        .collect();
    assert!(upward.is_empty(), "imports that run up: {upward:?}");
    // Circles: a depth-first search for a back edge.
    fn visit(
        m: &Module,
        edges: &BTreeMap<Module, BTreeSet<Module>>,
        state: &mut BTreeMap<Module, u8>,
        stack: &mut Vec<Module>,
    ) -> Option<Vec<Module>> {
        state.insert(m.clone(), 1);
        stack.push(m.clone());
        for t in edges.get(m).into_iter().flatten() {
            match state.get(t) {
                Some(1) => {
                    let i = stack.iter().position(|s| s == t).unwrap();
                    return Some(stack[i..].to_vec());
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(t, edges, state, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        state.insert(m.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for m in &modules {
        if !state.contains_key(m) {
            if let Some(c) = visit(m, &edges, &mut state, &mut Vec::new()) {
                let c: Vec<String> = c.iter().map(name).collect();
                panic!("files importing each other in a circle: {c:?}");
            }
        }
    }
    // The check sees imports at all: the operations use the filesystem object, which uses the
    // inode table.
    let fs = vec!["filesystem".to_string()];
    assert!(edges[&vec!["ops".to_string(), "setattr".to_string()]].contains(&fs));
    assert!(edges[&fs].contains(&vec!["state".to_string(), "inode_table".to_string()]));
}
