//! The module graph has no circle: within every folder of every crate, the sibling modules
//! (files and subfolders) use one another in one direction only, so each folder reads as
//! layers. A module's children may use its own items and it theirs; what is checked is that no
//! two siblings reach each other, directly or round a ring.
//!
//! The paths are read from the source text: every `crate::…`, `super::…` and `self::…` path,
//! `use` groups (`{a, b::c}`) expanded, comments left out; a path names the deepest module it
//! reaches. Paths through a crate's name from outside (`memlens_core::…`) cross crates, which
//! cargo already keeps acyclic.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module, as the names from its crate's root (`[]` is the root).
type ModPath = Vec<String>;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every module of a crate's `src/`, with its file.
fn modules(src: &Path) -> BTreeMap<ModPath, PathBuf> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read a source folder") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                // `src/bin/` holds separate crates.
                if path != src.join("bin") {
                    dirs.push(path);
                }
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).expect("under src").with_extension("");
            let mut names: ModPath = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
            if names.last().is_some_and(|n| n == "mod") {
                names.pop();
            }
            if names.len() == 1 && (names[0] == "lib" || names[0] == "main") {
                names.clear();
            }
            out.insert(names, path);
        }
    }
    out
}

/// The text without `//` comments (doc comments included: their links are not uses).
fn without_comments(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Reads a path at `at` (`a::b::{c, d::e}`), pushing every path it names onto `out`.
fn read_path(chars: &[char], mut at: usize, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix.to_vec();
    loop {
        while at < chars.len() && chars[at].is_whitespace() {
            at += 1;
        }
        if at < chars.len() && chars[at] == '{' {
            at += 1;
            loop {
                while at < chars.len() && (chars[at].is_whitespace() || chars[at] == ',') {
                    at += 1;
                }
                if at >= chars.len() || chars[at] == '}' {
                    return at + 1;
                }
                let next = read_path(chars, at, &path, out);
                // Skip what follows an item (`as x`) up to the next comma or the group's end.
                let mut depth = 0;
                at = next;
                while at < chars.len() && !(depth == 0 && (chars[at] == ',' || chars[at] == '}')) {
                    match chars[at] {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    at += 1;
                }
            }
        }
        let start = at;
        while at < chars.len() && is_ident(chars[at]) {
            at += 1;
        }
        if at == start {
            break;
        }
        path.push(chars[start..at].iter().collect());
        if chars.get(at) == Some(&':') && chars.get(at + 1) == Some(&':') {
            at += 2;
        } else {
            break;
        }
    }
    out.push(path);
    at
}

/// The modules a file's paths reach.
fn uses(text: &str, me: &ModPath, mods: &BTreeMap<ModPath, PathBuf>) -> BTreeSet<ModPath> {
    let chars: Vec<char> = without_comments(text).chars().collect();
    let mut paths = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        let starts = ["crate::", "super::", "self::"].iter().find(|k| {
            let k: Vec<char> = k.chars().collect();
            chars[at..].starts_with(&k) && (at == 0 || !is_ident(chars[at - 1]) && chars[at - 1] != ':')
        });
        match starts {
            Some(_) => at = read_path(&chars, at, &[], &mut paths),
            None => at += 1,
        }
    }
    let mut out = BTreeSet::new();
    for path in paths {
        let (mut full, rest): (ModPath, &[String]) = match path.first().map(String::as_str) {
            Some("crate") => (Vec::new(), &path[1..]),
            _ => (me.clone(), &path[..]),
        };
        let mut rest = rest;
        while let Some(step) = rest.first() {
            match step.as_str() {
                "super" => {
                    full.pop();
                }
                "self" => {}
                _ => break,
            }
            rest = &rest[1..];
        }
        full.extend(rest.iter().cloned());
        if let Some(k) = (0..=full.len()).rev().find(|&k| mods.contains_key(&full[..k])) {
            out.insert(full[..k].to_vec());
        }
    }
    out
}

/// Each folder's sibling edges: `parent → {(from child, to child)}`.
fn sibling_edges(src: &Path) -> BTreeMap<ModPath, BTreeSet<(String, String)>> {
    let mods = modules(src);
    let mut edges: BTreeMap<ModPath, BTreeSet<(String, String)>> = BTreeMap::new();
    for (me, file) in &mods {
        let text = std::fs::read_to_string(file).expect("read a source file");
        for target in uses(&text, me, &mods) {
            let common = me.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common == me.len() || common == target.len() {
                continue; // an ancestor or a descendant: not a sibling
            }
            edges
                .entry(me[..common].to_vec())
                .or_default()
                .insert((me[common].clone(), target[common].clone()));
        }
    }
    edges
}

/// A ring among the siblings, if there is one, as the names round it.
fn find_ring(edges: &BTreeSet<(String, String)>) -> Option<Vec<String>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges {
        next.entry(a).or_default().push(b);
    }
    // Depth-first, with the path on a stack: an edge back into the path closes a ring.
    fn visit<'a>(
        node: &'a str,
        next: &BTreeMap<&'a str, Vec<&'a str>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|&p| p == node) {
            return Some(path[at..].iter().map(|s| s.to_string()).collect());
        }
        if done.contains(node) {
            return None;
        }
        path.push(node);
        for &n in next.get(node).into_iter().flatten() {
            if let Some(ring) = visit(n, next, path, done) {
                return Some(ring);
            }
        }
        path.pop();
        done.insert(node);
        None
    }
    let mut done = BTreeSet::new();
    next.keys()
        .find_map(|&start| visit(start, &next, &mut Vec::new(), &mut done))
}

#[test]
fn no_two_sibling_modules_use_each_other() {
    let mut rings = Vec::new();
    for krate in ["api", "core", "server", "frontend"] {
        for (parent, edges) in sibling_edges(&workspace().join(krate).join("src")) {
            if let Some(ring) = find_ring(&edges) {
                rings.push(format!(
                    "{krate}/src/{}: {} → {}",
                    parent.join("/"),
                    ring.join(" → "),
                    ring[0]
                ));
            }
        }
    }
    assert!(rings.is_empty(), "import circles:\n{}", rings.join("\n"));
}

#[test]
fn a_circle_is_found_and_a_layering_is_not() {
    let edges = |pairs: &[(&str, &str)]| -> BTreeSet<(String, String)> {
        pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    };
    assert_eq!(find_ring(&edges(&[("a", "b"), ("b", "c"), ("a", "c")])), None);
    let ring = find_ring(&edges(&[("a", "b"), ("b", "c"), ("c", "a")])).expect("a ring");
    assert_eq!(ring.len(), 3);
    // Paths in `use` groups, through `super`, and into a folder's module.
    let mods: BTreeMap<ModPath, PathBuf> = [vec![], vec!["x".into()], vec!["y".into()], vec!["y".into(), "z".into()]]
        .into_iter()
        .map(|m| (m, PathBuf::new()))
        .collect();
    let me: ModPath = vec!["x".into()];
    let found = uses(
        "use super::y::{z::Thing, Other as O};\n// crate::nothing\nfn f() { crate::x::g() }",
        &me,
        &mods,
    );
    let want: BTreeSet<ModPath> = [vec!["y".into(), "z".into()], vec!["y".into()], me.clone()]
        .into_iter()
        .collect();
    assert_eq!(found, want);
}
