//! PyTorch profiler Chrome traces (`profile_memory=True`, `export_chrome_trace`) on the real
//! capture of the shared MLP run: the peak is the largest `Total Allocated` of its CUDA
//! `[memory]` events, allocations are named by the profiled op that made them, and a trace
//! without memory events is kept aside saying why.

use memlens_api::Format;
use memlens_core::pipeline::analyze_paths;
use memlens_tests::trace;

/// The largest `Total Allocated` of the trace's CUDA memory events, read here on its own.
fn largest_total_allocated(path: &std::path::Path) -> i64 {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).expect("trace")).expect("json");
    v["traceEvents"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["name"] == "[memory]" && e["args"]["Device Type"] == 1)
        .filter_map(|e| e["args"]["Total Allocated"].as_i64())
        .max()
        .expect("CUDA memory events")
}

#[test]
fn the_peak_is_the_largest_total_allocated_and_ops_name_the_allocations() {
    let path = trace("mlp_train.profiler_trace.json");
    let out = analyze_paths(std::slice::from_ref(&path)).expect("analyze");
    assert!(out.skipped.is_empty(), "{:?}", out.skipped);
    let f = &out.files[0];
    assert_eq!(f.format, Format::PytorchProfilerTrace);
    let d = &f.devices[0];
    assert_eq!(d.peak_allocated_bytes, largest_total_allocated(&path));
    // Named by ops (the asking op, not the empty-tensor factory under it).
    let named: Vec<&String> = d.peak_stacks.iter().filter_map(|g| g.stack.first()).collect();
    assert!(
        named.iter().any(|f| f.starts_with("aten::") && f.ends_with("[op]")),
        "{named:?}"
    );
    assert!(named.iter().all(|f| !f.starts_with("aten::empty_strided")), "{named:?}");
    assert!(f.source.notes.iter().any(|n| n.contains("Total Reserved")));
}

#[test]
fn a_profiler_trace_without_memory_events_is_kept_aside_with_the_reason() {
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(trace("mlp_train.profiler_trace.json")).expect("trace")).expect("json");
    let mut v = v;
    let events = v["traceEvents"].as_array_mut().expect("events");
    events.retain(|e| e["name"] != "[memory]");
    let dir = std::env::temp_dir().join(format!("memlens-profiler-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let no_memory = dir.join("no_memory.json");
    std::fs::write(&no_memory, serde_json::to_vec(&v).expect("json")).expect("write");
    let with_snapshot = analyze_paths(&[no_memory.clone(), trace("mlp_train.pickle")]).expect("analyze");
    assert_eq!(with_snapshot.files.len(), 1);
    assert_eq!(with_snapshot.skipped.len(), 1);
    assert!(
        with_snapshot.skipped[0].reason.contains("profile_memory=True"),
        "{:?}",
        with_snapshot.skipped
    );
    let alone = analyze_paths(&[no_memory]).expect_err("nothing to analyse");
    assert!(alone.to_string().contains("profile_memory=True"), "{alone}");
    let _ = std::fs::remove_dir_all(dir);
}
