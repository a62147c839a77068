//! The findings users come for, on real traces: leak sites, clean loops, OOM explanations.

use memlens_api::DeviceSummary;
use memlens_core::pipeline::summarize_file;
use memlens_tests::trace;

fn device0(name: &str) -> DeviceSummary {
    let s = summarize_file(&trace(name)).unwrap_or_else(|e| panic!("{e}"));
    s.devices.into_iter().next().expect("device 0")
}

#[test]
fn leak_finds_both_leak_sites() {
    let d = device0("leak.pickle");
    assert_eq!(d.iterations.source, "optimizer_steps:Optimizer.step#Adam.step");
    assert_eq!(d.leaks.len(), 2, "{:#?}", d.leaks);
    // One site is the model output kept in a list, the other the copied input batch.
    let kept_output = d
        .leaks
        .iter()
        .any(|l| l.stack.first().is_some_and(|f| f.contains("linear.py")));
    let copied_input = d
        .leaks
        .iter()
        .any(|l| l.stack.first().is_some_and(|f| f.contains("train.py:142 wl_leak")));
    assert!(kept_output && copied_input, "{:#?}", d.leaks);
    for l in &d.leaks {
        assert!(l.iterations_seen >= 25, "{l:?}");
        assert!(l.bytes_per_iteration > 0);
    }
}

#[test]
fn clean_training_loops_have_no_leaks() {
    for name in [
        "mlp_train.pickle",
        "mlp_train_cpp_stacks.pickle",
        "gpt_train.pickle",
        "gpt_train_ckpt.pickle",
    ] {
        let d = device0(name);
        assert!(d.leaks.is_empty(), "{name}: {:#?}", d.leaks);
        assert!(d.iterations.count >= 5, "{name}: {:?}", d.iterations);
    }
}

fn check_fragmentation_oom(name: &str, expandable: bool) {
    let d = device0(name);
    assert!(d.oom_count >= 1, "{name}");
    let o = d.ooms.last().expect("an oom");
    assert_eq!(o.requested_bytes, 2 << 30, "{name}: the 2 GiB request");
    assert!(o.largest_free_block_bytes < o.requested_bytes, "{name}: {o:#?}");
    assert!(
        o.reserved_free_bytes >= o.requested_bytes,
        "{name}: gigabytes free but fragmented: {o:#?}"
    );
    assert_eq!(o.cause, memlens_api::OomCause::Fragmentation, "{name}");
    if !expandable {
        assert!(o.remedy.contains("expandable_segments:True"), "{name}: {}", o.remedy);
    }
    assert!(!o.live_stacks.is_empty(), "{name}");
}

#[test]
fn oom_fragmentation_is_explained() {
    check_fragmentation_oom("oom_fragmentation.pickle", false);
    check_fragmentation_oom("oom_fragmentation.at_oom.pickle", false);
}

#[test]
fn expandable_oom_is_explained() {
    check_fragmentation_oom("expandable_oom_fragmentation.pickle", true);
    check_fragmentation_oom("expandable_oom_fragmentation.at_oom.pickle", true);
}

#[test]
fn gzip_input_matches_plain() {
    let gz = summarize_file(&trace("many_small.pickle.gz")).unwrap_or_else(|e| panic!("{e}"));
    assert!(gz.gzip);
    let d = &gz.devices[0];
    assert_eq!(d.event_count, 180_009, "many_small: entries counted by CPython pickle");
    assert_eq!(d.alloc_count, 60_000);
    if let Some(shared) = memlens_tests::shared_traces_dir() {
        let plain = summarize_file(&shared.join("pytorch/many_small.pickle")).unwrap_or_else(|e| panic!("{e}"));
        assert!(!plain.gzip);
        assert_eq!(plain.devices, gz.devices, "gzip and plain decode to the same summary");
    }
}

#[test]
fn a_short_script_of_bursts_has_no_leak_and_says_why() {
    // Real: three bursts of tensors kept to the end, no loop (traces/capture/bursts.py).
    let d = device0("bursts.pickle");
    assert!(d.leaks.is_empty(), "{:#?}", d.leaks);
    assert_eq!((d.iterations.source.as_str(), d.iterations.count), ("none", 0));
    assert!(
        d.iterations
            .note
            .as_deref()
            .is_some_and(|n| n.contains("no repeating iteration found; leak detection needs a loop")),
        "{:?}",
        d.iterations
    );
}

#[test]
fn each_device_leads_with_its_most_important_finding() {
    // A leak.
    assert!(device0("leak.pickle").verdict.starts_with("Leak: "));
    // An OOM's own verdict, whatever else the device shows.
    let d = device0("oom_fragmentation.at_oom.pickle");
    assert!(d.verdict.starts_with(&d.ooms[0].remedy), "{}", d.verdict);
    // What the peak is made of, for a clean training loop.
    let v = device0("gpt_train.pickle").verdict;
    assert!(v.starts_with("Peak: ") && v.contains("activation"), "{v}");
    // CuPy holding 3 GiB beside the allocator, seen by the NVML log of the same run.
    let out =
        memlens_core::pipeline::analyze_paths(&[trace("cupy_outside.pickle.gz"), trace("cupy_outside.nvidia_smi.csv")])
            .unwrap_or_else(|e| panic!("{e}"));
    let v = &out.files[0].devices[0].verdict;
    assert!(v.starts_with("Outside PyTorch: up to 3.73 GiB"), "{v}");
}
