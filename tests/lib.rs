//! Shared helpers of the end-to-end test harness: where the real traces are and their oracles.
//!
//! Fixtures are the real snapshots committed in `traces/` plus, when present, every snapshot in
//! `../shared/traces/pytorch` beside the checkout (CI has it). Each `NAME[.at_oom].pickle[.gz]`
//! has its oracle in `NAME.memory_stats.json` next to it.

use std::path::{Path, PathBuf};

use memlens_core::analysis::DeviceEvents;
use memlens_core::importers::{import_path, ImportOptions, Imported};
use memlens_core::tables::SnapshotTables;

/// The repository root: from `CARGO_MANIFEST_DIR` at run time (cargo and nextest set it for the
/// test process), since the compile-time value can be stale when a shared target directory
/// serves several checkouts.
pub fn repo_root() -> PathBuf {
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest.parent().map(Path::to_path_buf).unwrap_or_default()
}

/// `traces/` in the repository.
pub fn traces_dir() -> PathBuf {
    repo_root().join("traces")
}

/// `../shared/traces` beside the checkout, if it exists.
pub fn shared_traces_dir() -> Option<PathBuf> {
    let d = repo_root().parent()?.join("shared").join("traces");
    d.is_dir().then_some(d)
}

/// A committed trace by file name.
pub fn trace(name: &str) -> PathBuf {
    traces_dir().join(name)
}

/// Every snapshot file (`.pickle`, `.pickle.gz`) in a directory, sorted.
pub fn snapshots_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.retain(|p| {
        let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        n.ends_with(".pickle") || n.ends_with(".pickle.gz")
    });
    v.sort();
    v
}

/// Calls `each` with every device of every snapshot committed in `traces/` (the file's path as
/// text, its tables, the device's events); returns how many devices it was called with.
pub fn for_each_committed_device(mut each: impl FnMut(&str, &SnapshotTables, &DeviceEvents)) -> usize {
    let mut devices = 0;
    for path in snapshots_in(&traces_dir()) {
        let name = path.display().to_string();
        let f = import_path(&path, ImportOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let Imported::Snapshot(t) = f.data else {
            continue;
        };
        for device in memlens_core::analysis::devices(&t).unwrap_or_else(|e| panic!("{name}: {e}")) {
            let ev = DeviceEvents::new(&t, device).unwrap_or_else(|e| panic!("{name}: device {device}: {e}"));
            each(&name, &t, &ev);
            devices += 1;
        }
    }
    devices
}

/// The oracle file of a snapshot: `NAME.memory_stats.json` for `NAME[.at_oom].pickle[.gz]`.
pub fn oracle_for(snapshot: &Path) -> PathBuf {
    let name = snapshot.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let stem = name
        .trim_end_matches(".gz")
        .trim_end_matches(".pickle")
        .trim_end_matches(".at_oom");
    snapshot.with_file_name(format!("{stem}.memory_stats.json"))
}

/// Reads one counter from an oracle file.
pub fn oracle_value(oracle: &Path, key: &str) -> i64 {
    let text = std::fs::read_to_string(oracle).unwrap_or_else(|e| panic!("{}: {e}", oracle.display()));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", oracle.display()));
    v.get(key)
        .and_then(|x| x.as_i64())
        .unwrap_or_else(|| panic!("{}: no integer {key}", oracle.display()))
}

/// The summary of a committed snapshot (by its path under `traces/`) analysed with its
/// `record_function` ranges dropped (the optimizer's own too), as a history from before PyTorch
/// recorded them, or a script that never adds any, has it.
pub fn summary_without_ranges(name: &str) -> memlens_api::FileSummary {
    use memlens_core::importers::{import_path, Imported};
    let file = import_path(&trace(name), ImportOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let Imported::Snapshot(mut t) = file.data else {
        panic!("{name}: not a snapshot")
    };
    t.annotations = t.annotations.clear();
    let rules = memlens_core::analysis::categories::FrameRules::default();
    let (summary, _) = memlens_core::report::analyze_snapshot(&t, name, file.gzip, &rules).expect("analysis");
    summary
}

/// The most bytes category `c` held at any one time on a device (0 when it has none).
pub fn category_max_bytes(d: &memlens_api::DeviceSummary, c: memlens_api::Category) -> i64 {
    d.categories.iter().find(|x| x.category == c).map_or(0, |x| x.max_bytes)
}

/// The bytes category `c` held at a device's allocated peak (0 when it has none).
pub fn category_at_peak(d: &memlens_api::DeviceSummary, c: memlens_api::Category) -> i64 {
    d.categories
        .iter()
        .find(|x| x.category == c)
        .map_or(0, |x| x.bytes_at_peak)
}
