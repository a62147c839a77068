//! Golden summaries: every fixture in `traces/` goes through the pipeline alone, and its whole
//! `AnalyzeOutput` (or its error) is compared with the reviewed snapshot in `tests/snapshots/`
//! (insta). Any change to what memlens reports for a real file fails here until the new output
//! is reviewed (`cargo insta review`) and committed; CI never writes snapshots.

use std::path::Path;

use memlens_core::importers::ImportOptions;
use memlens_core::pipeline::{run, Input};
use memlens_tests::traces_dir;

/// Fixture files: every file in `traces/` but oracles, notes and scripts (`capture/` holds how the
/// captured ones were made), and in its folders of OOM evidence: `oom/` (at-OOM snapshots and
/// the texts each failure left, captured), `oom_text/` (one message or table per shape) and
/// `serving-logs/` (vLLM and SGLang startup logs people posted, one per wording); `jax-cpu/`
/// (JAX device memory profiles made on the CPU); `serving/` (Hugging Face generation: its
/// snapshots and the tracebacks its OOMs left; not its run records); `jax-texts/` (XLA's
/// out-of-memory texts people posted).
fn fixtures() -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = ["", "oom", "oom_text", "serving-logs", "jax-cpu", "serving", "jax-texts"]
        .iter()
        .flat_map(|sub| std::fs::read_dir(traces_dir().join(sub)).expect("traces/"))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            p.is_file()
                && !(n.ends_with(".memory_stats.json")
                    || n.ends_with(".truth.json")
                    || n == "capture_info.json"
                    || n == "rerun.json"
                    || n == "run_info.txt"
                    || n == "serving.log"
                    || n.ends_with(".md")
                    || n.ends_with(".py"))
        })
        .collect();
    v.sort();
    v
}

/// A fixture's snapshot name: its path under `traces/`, dots and slashes as underscores.
fn snapshot_name(path: &Path) -> String {
    let rel = path.strip_prefix(traces_dir()).unwrap_or(path);
    rel.to_string_lossy().replace(['.', '/'], "_")
}

/// The pipeline's answer for one file, reported under its bare name (no machine paths).
fn answer(path: &Path) -> serde_json::Value {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("?").to_owned();
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let p = path.to_owned();
    let input = Input::reader(
        name,
        size,
        Box::new(move || Ok(Box::new(std::fs::File::open(&p)?) as Box<dyn std::io::Read + Send>)),
    );
    match run(vec![input], ImportOptions::default()) {
        Ok(out) => serde_json::to_value(&out).expect("json"),
        Err(e) => serde_json::json!({ "error": e.to_string() }),
    }
}

#[test]
fn every_fixture_summary_matches_its_reviewed_snapshot() {
    let files = fixtures();
    assert!(
        files.len() >= 20,
        "expected the committed fixtures, found {}",
        files.len()
    );
    let mut settings = insta::Settings::clone_current();
    settings.set_prepend_module_to_snapshot(false);
    settings.set_snapshot_path("../snapshots");
    settings.bind(|| {
        for f in &files {
            insta::assert_json_snapshot!(snapshot_name(f), answer(f));
        }
    });
}
