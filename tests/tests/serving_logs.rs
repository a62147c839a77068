//! vLLM and SGLang startup logs (`traces/serving-logs/`, each a log people posted; its source in
//! `SOURCES.md`): the guesser names each `serving_log` and no other text fixture so; every one
//! becomes a report with a serving summary; and the KV cache's size in tokens that a log states
//! is the one memlens reads, to the token.

use std::path::{Path, PathBuf};

use memlens_api::{FileSummary, Format, ServingAction};
use memlens_core::importers::{sniff, ImportOptions};
use memlens_core::pipeline::{run, Input};
use memlens_tests::traces_dir;

fn files_in(dir: &Path, keep: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.retain(|p| p.is_file() && keep(p.file_name().and_then(|n| n.to_str()).unwrap_or("")));
    v.sort();
    v
}

fn serving_logs() -> Vec<PathBuf> {
    let v = files_in(&traces_dir().join("serving-logs"), |n| n.ends_with(".log"));
    assert!(v.len() >= 15, "expected the committed serving logs, found {}", v.len());
    v
}

fn head(path: &Path) -> Vec<u8> {
    let bytes = std::fs::read(path).expect("read");
    bytes[..bytes.len().min(memlens_core::source::HEAD_LEN)].to_vec()
}

/// The pipeline's report of one file, `None` where it refuses the file (a text with nothing in it).
fn analyse(path: &Path) -> Option<FileSummary> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("?").to_owned();
    let p = path.to_owned();
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let input = Input::reader(
        name,
        size,
        Box::new(move || Ok(Box::new(std::fs::File::open(&p)?) as Box<dyn std::io::Read + Send>)),
    );
    let mut out = run(vec![input], ImportOptions::default()).ok()?;
    (!out.files.is_empty()).then(|| out.files.remove(0))
}

/// The number after the first `key` in `text`, thousands separators and all.
fn number_after(text: &str, key: &str) -> Option<i64> {
    let at = text.find(key)? + key.len();
    let digits: String = text[at..]
        .chars()
        .skip_while(|c| *c == ' ')
        .take_while(|c| c.is_ascii_digit() || *c == ',')
        .filter(|c| *c != ',')
        .collect();
    digits.parse().ok()
}

#[test]
fn the_guesser_names_every_serving_log_and_no_other_text() {
    for path in serving_logs() {
        assert_eq!(sniff(&head(&path)), Some(Format::ServingLog), "{}", path.display());
    }
    let mut others = files_in(&traces_dir().join("oom_text"), |_| true);
    others.extend(files_in(&traces_dir().join("oom"), |n| {
        n.ends_with(".txt") || n.ends_with(".log")
    }));
    others.extend(files_in(&traces_dir(), |n| {
        n.ends_with(".csv") || n.ends_with(".txt") || n.ends_with(".jsonl")
    }));
    assert!(
        others.len() >= 20,
        "expected the other text fixtures, found {}",
        others.len()
    );
    for path in others {
        assert_ne!(sniff(&head(&path)), Some(Format::ServingLog), "{}", path.display());
        if path
            .parent()
            .is_some_and(|d| d.ends_with("oom_text") || d.ends_with("oom"))
        {
            if let Some(f) = analyse(&path) {
                assert!(f.serving.is_none(), "{} has no serving startup", path.display());
            }
        }
    }
}

#[test]
fn every_serving_log_is_read_and_its_tokens_are_the_printed_ones() {
    for path in serving_logs() {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(&path).expect("read");
        let f = analyse(&path).unwrap_or_else(|| panic!("{name}: refused"));
        assert_eq!(f.format, Format::ServingLog, "{name}");
        let s = f.serving.unwrap_or_else(|| panic!("{name}: no serving summary"));
        assert!(!s.verdict.is_empty(), "{name}");
        // What the log states the KV cache holds, read here without memlens' parser.
        let printed = number_after(&text, "GPU KV cache size:")
            .or_else(|| number_after(&text, "#tokens:"))
            .or_else(|| number_after(&text, "stored in KV cache ("));
        if let Some(tokens) = printed {
            assert_eq!(s.kv_cache_tokens, Some(tokens), "{name}");
        }
        if let Some(fit) = number_after(&text, "estimated maximum model length is") {
            let lower = s.failure.as_ref().and_then(|f| {
                f.remedies
                    .iter()
                    .find(|r| r.action == ServingAction::LowerMaxModelLen)
                    .and_then(|r| r.value)
            });
            assert_eq!(lower, Some(fit as f64), "{name}");
        }
        if let (Some(blocks), Some(tokens)) = (number_after(&text, "# GPU blocks:"), s.kv_cache_tokens) {
            assert_eq!(
                Some(tokens),
                s.block_size.map(|b| b * blocks),
                "{name}: tokens are blocks × block size"
            );
        }
    }
}
