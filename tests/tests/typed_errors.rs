//! Errors are typed: no function of the library crates or the server returns
//! `Result<_, String>` (an error a caller can only print or search), outside tests. What fails
//! says what it is by its type (`ImportError`, `CommandError`, `StartupError`, `LineProblem`,
//! …), and its message names the file and the problem.
//!
//! The one exception is named below with why.

use std::path::{Path, PathBuf};

/// Functions allowed a `String` error, each with why.
const ALLOWED: &[(&str, &str)] = &[(
    "flat_reads_agree",
    "the fuzz oracle's diagnostic: which of two decoders disagreed, printed by the fuzzer",
)];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read a source folder") {
        let path = entry.expect("entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if path.is_dir() {
            if name != "tests" {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") && !name.ends_with("_tests.rs") {
            out.push(path);
        }
    }
}

/// The generic arguments of the `Result<…>` starting at `at` (just after `<`), split at its
/// own commas.
fn result_arguments(text: &str, at: usize) -> Vec<String> {
    let mut depth = 0usize;
    let mut args = vec![String::new()];
    for c in text[at..].chars() {
        match c {
            '<' | '(' | '[' => depth += 1,
            '>' | ')' | ']' if depth == 0 => break,
            '>' | ')' | ']' => depth -= 1,
            ',' if depth == 0 => {
                args.push(String::new());
                continue;
            }
            _ => {}
        }
        args.last_mut().expect("one").push(c);
    }
    args.into_iter().map(|a| a.split_whitespace().collect()).collect()
}

/// `(function, line)` of each function (or closure, named by the function it is in) in `text`
/// returning `Result<_, String>`.
fn string_errors(text: &str) -> Vec<(String, usize)> {
    // Unit tests at the end of a file are tests.
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    let mut found = Vec::new();
    let mut function = String::new();
    for (n, line) in text.lines().enumerate() {
        if let Some(at) = line.find("fn ") {
            let name: String = line[at + 3..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                function = name;
            }
        }
        let Some(arrow) = line.find("->") else { continue };
        let mut rest = &line[arrow..];
        while let Some(at) = rest.find("Result<") {
            let whole = line.len() - rest.len() + at;
            // `PolarsResult<…>` and the like name their own error.
            let plain = whole == 0 || !line[..whole].ends_with(|c: char| c.is_alphanumeric() || c == '_');
            let args = result_arguments(line, whole + "Result<".len());
            if plain && args.len() == 2 && args[1] == "String" {
                found.push((function.clone(), n + 1));
            }
            rest = &rest[at + "Result<".len()..];
        }
    }
    found
}

#[test]
fn no_function_returns_a_string_error() {
    let mut files = Vec::new();
    for krate in ["api/src", "core/src", "server/src"] {
        rust_files(&workspace().join(krate), &mut files);
    }
    assert!(files.len() > 100, "the crates' sources are found");
    let mut offenders = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read a source file");
        for (function, line) in string_errors(&text) {
            if !ALLOWED.iter().any(|(allowed, _)| *allowed == function) {
                offenders.push(format!("{}:{line} `{function}`", file.display()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "Result<_, String> returned by:\n{}",
        offenders.join("\n")
    );
}

#[test]
fn a_string_error_is_found_and_a_typed_one_is_not() {
    let text = "fn a(x: u8) -> Result<Vec<u8>, String> {\n}\nfn b() -> PolarsResult<HashMap<i64, String>> {}\n\
                fn c() -> Result<HashMap<i64, String>, DataError> {}\nlet f = || -> Result<(), String> { Ok(()) };\n\
                #[cfg(test)]\nfn d() -> Result<(), String> {}\n";
    // `a` returns one; a closure inside `c` does too; `b` and `c` name their errors.
    assert_eq!(string_errors(text), vec![("a".to_owned(), 1), ("c".to_owned(), 5)]);
}
