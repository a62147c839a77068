//! JAX device memory profiles (traces/jax-cpu, made on the CPU backend by
//! traces/capture/jax_cpu_profiles.py; traces/jax, the GPU captures of jax_capture.py, when
//! there): live bytes equal what the script counted from its arrays, to the byte; what the
//! frames and the structure of a train step's outputs place equals each pytree's own bytes;
//! the diff of two profiles of one run finds what grew; a profile has no timeline.

use memlens_api::{Category, CategoryRule, DeviceSummary, Format, TimeAxis};
use memlens_core::pipeline::summarize_file;
use memlens_tests::trace;

fn truth(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(trace(&format!("jax-cpu/{name}.truth.json"))).expect("truth");
    serde_json::from_str(&text).expect("json")
}

fn device0(name: &str) -> DeviceSummary {
    let s = summarize_file(&trace(&format!("jax-cpu/{name}.prof"))).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(s.format, Format::JaxDeviceMemoryProfile, "{name}");
    assert_eq!(s.devices.len(), 1, "{name}: one CPU device");
    s.devices.into_iter().next().expect("a device")
}

fn bytes_of(d: &DeviceSummary, c: Category) -> i64 {
    d.categories
        .iter()
        .find(|x| x.category == c)
        .map_or(0, |x| x.bytes_at_peak)
}

fn tree(t: &serde_json::Value, name: &str) -> i64 {
    t["trees"][name]["nbytes"].as_i64().expect("nbytes")
}

#[test]
fn live_bytes_equal_what_the_script_counted_to_the_byte() {
    for name in ["jax_cpu_eager", "jax_cpu_train.step1", "jax_cpu_train.step5"] {
        let d = device0(name);
        let t = truth(name);
        let live = &t["live_buffers_by_device"]["cpu:0"];
        assert_eq!(
            d.peak_allocated_bytes,
            live["nbytes"].as_i64().expect("bytes"),
            "{name}"
        );
        assert_eq!(d.final_allocated_bytes, d.peak_allocated_bytes, "{name}: one instant");
        let buffers: usize = d.categories.iter().map(|c| c.count).sum();
        assert_eq!(buffers as i64, live["buffers"].as_i64().expect("buffers"), "{name}");
        assert_eq!(
            (d.event_count, d.time_axis),
            (0, TimeAxis::EventOrder),
            "{name}: no trace"
        );
        assert!(
            d.verdict
                .starts_with("One instant (a JAX device memory profile: no timeline)"),
            "{}",
            d.verdict
        );
    }
}

#[test]
fn eager_trees_are_placed_by_their_libraries_frames_to_the_byte() {
    let d = device0("jax_cpu_eager");
    let t = truth("jax_cpu_eager");
    assert_eq!(
        bytes_of(&d, Category::Parameter),
        tree(&t, "params"),
        "flax's Scope.param under init"
    );
    assert_eq!(
        bytes_of(&d, Category::OptimizerState),
        tree(&t, "opt_state"),
        "optax's init"
    );
    assert_eq!(
        bytes_of(&d, Category::Gradient),
        tree(&t, "grads"),
        "jax.grad's backward pass"
    );
    assert_eq!(d.bytes_by_rule(CategoryRule::MadeByModelInit), tree(&t, "params"));
    assert_eq!(d.bytes_by_rule(CategoryRule::MadeByOptax), tree(&t, "opt_state"));
    assert_eq!(d.bytes_by_rule(CategoryRule::MadeByJaxGrad), tree(&t, "grads"));
}

#[test]
fn a_jitted_step_s_outputs_are_counted_as_trees_of_the_parameters_shape() {
    for (name, trees) in [("jax_cpu_train.step1", 4), ("jax_cpu_train.step5", 8)] {
        let d = device0(name);
        let t = truth(name);
        let params = tree(&t, "params");
        assert_eq!(bytes_of(&d, Category::Parameter), params, "{name}");
        assert_eq!(d.bytes_by_rule(CategoryRule::ParameterTreeOfCopies), params, "{name}");
        // Adam's two moments, this step's grads and (step 5) four earlier steps' grads kept in
        // grad_history: trees of exactly the parameters' sizes.
        assert_eq!(
            d.bytes_by_rule(CategoryRule::CopyOfParameterTree),
            (trees - 1) * params,
            "{name}"
        );
        assert!(d.verdict.contains(&format!("returned {trees} trees")), "{}", d.verdict);
    }
}

#[test]
fn the_diff_of_two_profiles_finds_the_trees_kept_step_after_step() {
    let a = device0("jax_cpu_train.step1");
    let b = device0("jax_cpu_train.step5");
    let (ta, tb) = (truth("jax_cpu_train.step1"), truth("jax_cpu_train.step5"));
    let grown = b.peak_allocated_bytes - a.peak_allocated_bytes;
    // Four more grads trees in grad_history (and one more step's grads trees in the truth's list).
    assert_eq!(grown, 4 * tree(&ta, "grads"));
    assert_eq!(tree(&tb, "grad_history") - tree(&ta, "grad_history"), grown);
    let top = &b.peak_stacks[0];
    assert_eq!(top.module.as_deref(), Some("jax_cpu_profiles.py:104 main"), "{top:?}");
}

/// What the capture script counted of the live arrays: their buffers each once (`unique_buffers`,
/// as XLA's profile counts them: a jitted function may return one buffer twice), −1 when absent.
fn counted(live: &serde_json::Value) -> i64 {
    live["unique_buffers"]["on_device_bytes"].as_i64().unwrap_or(-1)
}

/// The GPU captures of traces/capture/jax_capture.py (traces/jax, committed by the lead when run):
/// each profile's live bytes equal what the script counted from `jax.live_arrays()` at it, to the
/// byte; each stderr and exception text is read as XLA's out-of-memory error. Until the capture
/// lands the folder is absent and there is nothing to hold.
#[test]
fn gpu_captures_hold_their_truth_to_the_byte() {
    let dir = trace("jax");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    let mut checked = 0;
    for truth_path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
        let name = truth_path.file_name().and_then(|n| n.to_str()).unwrap_or("").to_owned();
        let Some(case) = name.strip_suffix(".truth.json") else {
            continue;
        };
        let t: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&truth_path).expect("truth")).expect("json");
        // (profile file, live bytes the script counted) for each profile the case saved.
        let mut profiles: Vec<(String, i64)> = Vec::new();
        for p in t["profiles"].as_array().into_iter().flatten() {
            profiles.push((p["file"].as_str().expect("file").to_owned(), counted(&p["live_arrays"])));
        }
        if let (Some(file), Some(bytes)) = (
            t["profile_at_oom"]["file"].as_str(),
            Some(counted(&t["live_arrays_at_oom"])).filter(|&b| b >= 0),
        ) {
            profiles.push((file.to_owned(), bytes));
        }
        for (file, bytes) in profiles {
            let s = summarize_file(&dir.join(&file)).unwrap_or_else(|e| panic!("{file}: {e}"));
            assert_eq!(s.format, Format::JaxDeviceMemoryProfile, "{file}");
            let live: i64 = s.devices.iter().map(|d| d.peak_allocated_bytes).sum();
            assert_eq!(live, bytes, "{file}: live bytes against jax.live_arrays()' buffers");
            checked += 1;
        }
        if t["oom"].as_bool() == Some(true) {
            for text in [format!("{case}.exception.txt"), format!("{case}.stderr.txt")] {
                let s = summarize_file(&dir.join(&text)).unwrap_or_else(|e| panic!("{text}: {e}"));
                let ooms: Vec<_> = s.devices.iter().flat_map(|d| &d.ooms).collect();
                assert!(!ooms.is_empty(), "{text}: no out-of-memory error read");
                assert!(
                    ooms.iter().all(|o| o
                        .text
                        .as_ref()
                        .is_some_and(|t| t.backend == memlens_api::OomBackend::Xla)),
                    "{text}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 0, "traces/jax holds no capture with its truth");
}

#[test]
fn a_profile_over_two_devices_holds_each_device_s_buffers_to_the_byte() {
    // traces/capture/jax_cpu_sharded.py: a weight sharded by rows over cpu:0 and cpu:1, a bias
    // replicated on both, a batch on cpu:0.
    let s = summarize_file(&trace("jax-cpu/jax_cpu_sharded.prof")).expect("imports");
    let t = truth("jax_cpu_sharded");
    let by_device = t["live_buffers_by_device"].as_object().expect("by device");
    assert_eq!(s.devices.len(), by_device.len());
    for (label, counted) in by_device {
        let n: i64 = label.rsplit(':').next().and_then(|n| n.parse().ok()).expect("cpu:N");
        let d = s.devices.iter().find(|d| d.device == n).expect("the device");
        assert_eq!(
            d.peak_allocated_bytes,
            counted["nbytes"].as_i64().expect("bytes"),
            "{label}"
        );
        let buffers: usize = d.categories.iter().map(|c| c.count).sum();
        assert_eq!(buffers as i64, counted["buffers"].as_i64().expect("buffers"), "{label}");
    }
    assert_eq!(s.focus_device, Some(0), "the busiest device");
}
