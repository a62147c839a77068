//! House rules over one walk of the tree (in the manner of rust-analyzer's `tidy.rs`): every
//! module says what it is (`//!`), no function passes [`MOST_LINES`] lines but those listed
//! in [`LONG_FUNCTIONS`] (a ratchet: each listed one must still be long, so a split removes
//! it), and the layers keep their direction — a transport does not reach into another
//! (`cli/`, `http/`, `mcp/`: none ↛ another), the application layer into none (`app/` ↛ all), and
//! storage reads no analysis: what a stored report holds comes through `memlens_core::stored`
//! (only its tests may run analyses: [`storage_may_read_analysis`]). Import circles and string errors have tests
//! of their own (`architecture.rs`, `typed_errors.rs`).

use std::path::{Path, PathBuf};

/// The most lines a function may span, its signature and closing brace included.
const MOST_LINES: usize = 100;

/// Functions longer than [`MOST_LINES`] today, by file and name, each to be split. A function
/// that is split leaves this list; none joins it.
const LONG_FUNCTIONS: &[(&str, &str)] = &[
    ("core/src/importers/pytorch_snapshot/pickle/machine.rs", "decode"),
    ("core/src/tables/dataframes.rs", "into_tables"),
    ("core/src/importers/nvidia_smi_csv/mod.rs", "read_smi_csv"),
    ("frontend/src/upload.rs", "UploadPage"),
    ("core/src/report.rs", "analyze_device_with"),
    ("core/src/query/mod.rs", "timeline_with"),
    ("bench/src/bin/timeline.rs", "main"),
    ("core/src/importers/pytorch_snapshot/lower/root.rs", "lower_root"),
    ("core/src/analysis/over_time/lifetimes.rs", "lifetimes_and_predating"),
    ("core/src/importers/pytorch_snapshot/lower/root.rs", "lower_segments"),
    ("bench/src/bin/segments.rs", "main"),
    ("server/src/charts.rs", "draw"),
    ("frontend/src/report/timeline_panel.rs", "TimelinePanel"),
    ("core/src/importers/pytorch_profiler_trace/mod.rs", "import"),
    ("frontend/src/plan/form.rs", "PlanForm"),
    ("frontend/src/compare/chart.rs", "draw"),
    ("core/src/importers/nvml_jsonl/mod.rs", "read_nvml_jsonl"),
    ("core/src/importers/common/nsys.rs", "lower_driver_allocations"),
    ("server/src/storage/parquet_object/encode.rs", "encode_with_paged"),
    ("frontend/src/report/state.rs", "fetch_timeline"),
];

/// Where storage's code may name `memlens_core::analysis`: its tests alone, which run analyses
/// over what it read back. Everything a stored report holds comes through `memlens_core::stored`.
fn storage_may_read_analysis(path: &str) -> bool {
    path.starts_with("server/src/storage/") && path.contains("/tests/")
}

/// The server's transports: each parses its own requests and renders its own answers through the
/// application layer (`server/src/app/`), never through another transport.
const TRANSPORTS: &[&str] = &["cli", "http", "mcp"];

/// The folders the rules walk, from the workspace root.
const ROOTS: &[&str] = &[
    "api/src",
    "core/src",
    "server/src",
    "frontend/src",
    "frontend/bundle/src",
    "bench/src",
    "xtask/src",
];

/// One Rust file: its path from the workspace root (with `/`) and its text.
struct Source {
    path: String,
    text: String,
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .to_path_buf()
}

/// Every `.rs` file under [`ROOTS`], read once.
fn walk() -> Vec<Source> {
    fn visit(root: &Path, dir: &Path, out: &mut Vec<Source>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .expect("dir")
            .flatten()
            .map(|e| e.path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                visit(root, &p, out);
            } else if p.extension().is_some_and(|e| e == "rs") {
                let path = p
                    .strip_prefix(root)
                    .expect("under root")
                    .to_string_lossy()
                    .replace('\\', "/");
                out.push(Source {
                    path,
                    text: std::fs::read_to_string(&p).expect("utf-8 source"),
                });
            }
        }
    }
    let root = workspace();
    let mut out = Vec::new();
    for r in ROOTS {
        visit(&root, &root.join(r), &mut out);
    }
    out
}

/// A function and how many lines it spans.
#[derive(Debug, PartialEq)]
struct Function {
    name: String,
    lines: usize,
}

/// The functions of `text` with their lengths: from a line that declares one (`fn name`, any
/// visibility or qualifier, not a bare signature ending in `;`) to the first line after it that
/// closes a brace at the same indentation.
fn functions(text: &str) -> Vec<Function> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let body = line.trim_start();
        let indent = &line[..line.len() - body.len()];
        let Some(name) = declared_function(body) else { continue };
        if body.trim_end().ends_with(';') {
            continue;
        }
        let close = format!("{indent}}}");
        if let Some(end) = lines[i..].iter().position(|l| l.trim_end() == close) {
            out.push(Function { name, lines: end + 1 });
        }
    }
    out
}

/// The name a line declares as a function (`pub(crate) async fn name(`), if it does.
fn declared_function(body: &str) -> Option<String> {
    let mut rest = body;
    for qualifier in [
        "pub(crate) ",
        "pub(super) ",
        "pub ",
        "const ",
        "async ",
        "unsafe ",
        "extern \"C\" ",
    ] {
        rest = rest.strip_prefix(qualifier).unwrap_or(rest);
    }
    let name: String = rest
        .strip_prefix("fn ")?
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// What breaks the rules in `sources`, one line each.
fn violations(sources: &[Source]) -> Vec<String> {
    let mut out = Vec::new();
    let mut long_seen = Vec::new();
    for s in sources {
        if !s.text.lines().take(5).any(|l| l.starts_with("//!")) {
            out.push(format!("{}: no module doc (`//!` at the top)", s.path));
        }
        for f in functions(&s.text).into_iter().filter(|f| f.lines > MOST_LINES) {
            if LONG_FUNCTIONS.contains(&(s.path.as_str(), f.name.as_str())) {
                long_seen.push((s.path.clone(), f.name.clone()));
            } else {
                out.push(format!(
                    "{}: fn {} spans {} lines (at most {MOST_LINES}): split it by what it does",
                    s.path, f.name, f.lines
                ));
            }
        }
        let code = s.text.replace(' ', "");
        for from in TRANSPORTS {
            for to in TRANSPORTS.iter().filter(|t| *t != from) {
                if s.path.starts_with(&format!("server/src/{from}/")) && code.contains(&format!("crate::{to}::")) {
                    out.push(format!("{}: a transport ({from}) reaches into another ({to})", s.path));
                }
            }
        }
        if s.path.starts_with("server/src/app/") && TRANSPORTS.iter().any(|t| code.contains(&format!("crate::{t}::"))) {
            out.push(format!("{}: the application layer reaches into a transport", s.path));
        }
        if s.path.starts_with("server/src/storage/")
            && code.contains("memlens_core::analysis")
            && !storage_may_read_analysis(&s.path)
        {
            out.push(format!("{}: storage reads the analyses", s.path));
        }
    }
    for (path, name) in LONG_FUNCTIONS {
        if !long_seen.iter().any(|(p, n)| p == path && n == name) {
            out.push(format!(
                "{path}: fn {name} is listed in LONG_FUNCTIONS but is no longer over {MOST_LINES} lines (or gone): \
                 take it off the list"
            ));
        }
    }
    out
}

#[test]
fn the_tree_keeps_the_house_rules() {
    let v = violations(&walk());
    assert!(v.is_empty(), "house rules broken:\n{}", v.join("\n"));
}

#[test]
fn a_long_function_and_a_missing_doc_are_found_and_short_ones_are_not() {
    let long_body = "    x += 1;\n".repeat(MOST_LINES);
    let text = format!("fn short() {{\n}}\n\npub(crate) fn long() {{\n{long_body}}}\nfn sig();\n");
    let f = functions(&text);
    assert_eq!(
        f[0],
        Function {
            name: "short".into(),
            lines: 2
        }
    );
    assert_eq!(
        f[1],
        Function {
            name: "long".into(),
            lines: MOST_LINES + 2
        }
    );
    assert_eq!(f.len(), 2);
    let v = violations(&[Source {
        path: "server/src/cli/x.rs".into(),
        text: format!("{text}use crate::http::router;\n"),
    }]);
    assert!(v.iter().any(|l| l.contains("no module doc")), "{v:?}");
    assert!(v.iter().any(|l| l.contains("fn long spans")), "{v:?}");
    assert!(v.iter().any(|l| l.contains("reaches into another")), "{v:?}");
}
