//! PyTorch's memory timeline (`export_memory_timeline`, `.json` and `.raw.json`) of a real
//! profiled AdamW run (traces/capture/profiler_categories.py): both shapes give the same peak
//! and categories, the peak is the allocator's own for the same run to within a few KiB (the
//! profiler counts its tensors' blocks), the profiler's categories place the tensors, and bad
//! files are refused naming the problem.

use memlens_api::{Category, CategoryRule, DeviceSummary, Format};
use memlens_core::importers::{import_source, ImportOptions};
use memlens_core::pipeline::summarize_file;
use memlens_core::source::{Source, SourceLimits};
use memlens_tests::trace;

fn device0(name: &str) -> DeviceSummary {
    let s = summarize_file(&trace(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(s.format, Format::PytorchMemoryTimeline, "{name}");
    s.devices.into_iter().next().expect("a device")
}

fn max_bytes(d: &DeviceSummary, c: Category) -> i64 {
    d.categories.iter().find(|x| x.category == c).map_or(0, |x| x.max_bytes)
}

#[test]
fn both_shapes_give_the_run_s_peak_and_pytorch_s_categories() {
    let summed = device0("profiled.memory_timeline.json.gz");
    let raw = device0("profiled.memory_timeline.raw.json.gz");
    let stats: serde_json::Value =
        serde_json::from_slice(&std::fs::read(trace("profiled.memory_stats.json")).expect("stats")).expect("json");
    let requested = stats["requested_bytes.all.peak"].as_i64().expect("peak");
    for d in [&summed, &raw] {
        assert_eq!(d.peak_allocated_bytes, summed.peak_allocated_bytes);
        assert!(
            (d.peak_allocated_bytes - requested).abs() < 8 << 10,
            "{} vs {requested}",
            d.peak_allocated_bytes
        );
        // 25,214,986 fp32 parameters; AdamW's two states (blocks, rounded up to 512 B).
        let fp32 = 25_214_986 * 4;
        assert_eq!(max_bytes(d, Category::Parameter), fp32);
        for (c, truth) in [(Category::Gradient, fp32), (Category::OptimizerState, 2 * fp32)] {
            let got = max_bytes(d, c);
            assert!(got >= truth && got - truth < 512 * 12, "{c:?}: {got}");
        }
        for c in &d.categories {
            let want = if c.category == Category::Other {
                CategoryRule::Unplaced // the profiler's `unknown`: nothing invented
            } else {
                CategoryRule::ProfilerCategory
            };
            assert!(c.rules.iter().all(|r| r.rule == want), "{c:?}");
        }
    }
    for c in [
        Category::Parameter,
        Category::Gradient,
        Category::OptimizerState,
        Category::Input,
    ] {
        assert_eq!(max_bytes(&summed, c), max_bytes(&raw, c), "{c:?}");
    }
}

fn refused(bytes: &[u8]) -> String {
    let source = Source::from_reader(
        Box::new(std::io::Cursor::new(bytes.to_vec())),
        bytes.len() as u64,
        SourceLimits::default(),
    )
    .expect("source");
    match import_source(source, &ImportOptions::default()) {
        Ok(_) => panic!("accepted: {}", String::from_utf8_lossy(bytes)),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_timelines_are_refused_naming_the_problem() {
    for (bytes, want) in [
        (
            &b"[[1, 2], [[0, 1, 0, 0, 0, 0, 0, 0, 0]]]"[..],
            "2 times but 1 rows of sizes",
        ),
        (b"[[1], [[0, 1, 0]]]", "row 0 of sizes is not a list of 9 byte counts"),
        (
            b"[[1], [[0, -5, 0, 0, 0, 0, 0, 0, 0]]]",
            "row 0: negative bytes for parameter",
        ),
        (b"[[-1, 1, 64, 0], [5, 7, 64, 0]]", "event 1: action 7 is not 1"),
        (b"[[-1, 1, 64, 9]]", "event 0: category 9 is not 0"),
        (
            b"[[-1, 1, 64, 0], [5, 4, -128, 0]]",
            "frees 64 more bytes of parameter than are live",
        ),
        (b"[[5, 2, 64]]", "event 0 is not [time, action, bytes, category]"),
        (b"[[5, 2, 6.5, 0]]", "event 0's bytes is not an integer"),
        (b"[[5, 2, 64, 0]", "memory timeline: not JSON"),
    ] {
        let msg = refused(bytes);
        assert!(msg.contains(want), "{}: {msg}", String::from_utf8_lossy(bytes));
    }
}
