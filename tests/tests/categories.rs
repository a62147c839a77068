//! Memory anatomy on real runs of models whose sizes are known (`../shared/traces/README.md`,
//! "Model facts"): parameter, gradient and optimizer-state bytes against parameters × 4 bytes
//! (fp32) and the optimizer's states per parameter; no training category on runs without
//! training; the categories at the peak add up to the peak.

use memlens_api::{Category, CategoryRule, DeviceSummary};
use memlens_core::pipeline::Pipeline;
use memlens_core::pipeline::{analyze_paths, summarize_file};
use memlens_tests::trace;

fn device0(name: &str) -> DeviceSummary {
    let s = summarize_file(&trace(name)).unwrap_or_else(|e| panic!("{e}"));
    s.devices.into_iter().next().expect("a device")
}

fn max_bytes(d: &DeviceSummary, c: Category) -> i64 {
    d.categories.iter().find(|x| x.category == c).map_or(0, |x| x.max_bytes)
}

/// `(snapshot, parameters, optimizer states per parameter)`.
const MODELS: [(&str, i64, i64); 8] = [
    ("gpt_train.pickle", 167_356_416, 2),      // AdamW: exp_avg + exp_avg_sq
    ("gpt_train_ckpt.pickle", 167_356_416, 2), // the same model, checkpointed
    ("mlp_train.pickle", 67_166_218, 1),       // SGD momentum
    ("mlp_train_cpp_stacks.pickle", 67_166_218, 1),
    ("leak.pickle", 12_609_546, 2), // Adam
    // traces/capture/hf_llama.py: a Hugging Face Llama, AdamW, no record_function ranges of
    // its own; with C++ stacks and Python-only (its cuBLAS workspace then has no frames).
    ("hf_llama_cpp.pickle.gz", 19_796_480, 2),
    ("hf_llama.pickle.gz", 19_796_480, 2),
    // traces/capture/profiler_categories.py: an MLP with AdamW.
    ("profiled.pickle.gz", 25_214_986, 2),
];

/// Parameter, gradient and optimizer-state bytes of `d` each within 5 % of the truth for a
/// model of `params` fp32 parameters and `states` optimizer states per parameter.
fn assert_training_state(name: &str, d: &DeviceSummary, params: i64, states: i64) {
    let fp32 = params * 4;
    for (c, want) in [
        (Category::Parameter, fp32),
        (Category::Gradient, fp32),
        (Category::OptimizerState, states * fp32),
    ] {
        let got = max_bytes(d, c);
        let off = (got - want).abs() as f64 / want as f64;
        assert!(off < 0.05, "{name}: {c:?} {got} vs {want} ({:.1}% off)", off * 100.0);
    }
}

#[test]
fn parameters_gradients_and_optimizer_state_match_the_models() {
    for (name, params, states) in MODELS {
        assert_training_state(name, &device0(name), params, states);
    }
}

#[test]
fn the_categories_at_the_peak_add_up_to_the_peak() {
    for name in [
        "gpt_train.pickle",
        "gpt_train_ckpt.pickle",
        "mlp_train.pickle",
        "leak.pickle",
        "kv_cache_inference.pickle",
        "oom_fragmentation.pickle",
        "bursts.pickle",
    ] {
        let d = device0(name);
        let sum: i64 = d.categories.iter().map(|c| c.bytes_at_peak).sum();
        assert_eq!(sum, d.peak_allocated_bytes, "{name}: {:#?}", d.categories);
    }
}

#[test]
fn checkpointing_shrinks_the_activations_at_the_peak() {
    let at_peak = |d: &DeviceSummary| {
        d.categories
            .iter()
            .find(|c| c.category == Category::Activation)
            .map_or(0, |c| c.bytes_at_peak)
    };
    let (plain, ckpt) = (device0("gpt_train.pickle"), device0("gpt_train_ckpt.pickle"));
    assert!(
        at_peak(&ckpt) * 2 < at_peak(&plain),
        "{} vs {}",
        at_peak(&ckpt),
        at_peak(&plain)
    );
}

#[test]
fn no_training_category_is_invented_without_training() {
    let training = [Category::Gradient, Category::OptimizerState, Category::Activation];
    for name in ["kv_cache_inference.pickle", "bursts.pickle"] {
        let d = device0(name);
        assert!(
            d.categories.iter().all(|c| !training.contains(&c.category)),
            "{name}: {:#?}",
            d.categories
        );
    }
    // Inference weights moved with `.to()` are still parameters.
    assert!(max_bytes(&device0("kv_cache_inference.pickle"), Category::Parameter) > 0);
    // Nsight sees driver allocations only: nothing is named.
    let out = analyze_paths(&[trace("cuda_alloc.sqlite")]).unwrap_or_else(|e| panic!("{e}"));
    let cats: Vec<Category> = out.files[0].devices[0].categories.iter().map(|c| c.category).collect();
    assert_eq!(cats, vec![Category::Other]);
}

#[test]
fn a_real_oom_under_a_cap_names_the_cap_and_the_activations_in_the_way() {
    // GPT at batch 16 held to 10 GiB (traces/capture/gpt_batches.py … cap=10): the first
    // iteration's backward asks for 1.95 GiB and fails.
    let d = device0("gpt_b16_oom.pickle.gz");
    assert_eq!(d.oom_count, 1);
    let o = &d.ooms[0];
    assert_eq!(o.cause, memlens_api::OomCause::Limit);
    assert_eq!(o.phase, memlens_api::OomPhase::Backward);
    assert!(o.remedy.contains("per-process cap"), "{}", o.remedy);
    let actions: Vec<_> = o.remedies.iter().map(|r| r.action).collect();
    for a in [
        memlens_api::RemedyAction::RaiseCap,
        memlens_api::RemedyAction::SmallerBatch,
        memlens_api::RemedyAction::ActivationCheckpointing,
    ] {
        assert!(actions.contains(&a), "{a:?} not in {actions:?}");
    }
    let live = |c: Category| {
        o.live_categories
            .iter()
            .find(|x| x.category == c)
            .map_or(0, |x| x.bytes)
    };
    assert_eq!(live(Category::Parameter), 669_425_664);
    assert!(
        live(Category::Activation) > 10 * live(Category::Parameter) / 2,
        "{:?}",
        o.live_categories
    );
    // No optimizer step ever ran: none of its categories is invented. Backward had made only
    // the loss's seed gradient (`torch.ones_like(loss)`, 4 bytes) when the logits' gradient
    // failed: a gradient being computed, and nothing more.
    assert_eq!(max_bytes(&d, Category::OptimizerState), 0);
    assert_eq!(max_bytes(&d, Category::Gradient), 4);
}

#[test]
fn the_category_timeline_stacks_up_to_the_peak() {
    use memlens_core::pipeline::{Input, KeepFrames};
    for name in ["gpt_train.pickle", "leak.pickle", "kv_cache_inference.pickle"] {
        let mut keep = KeepFrames::default();
        let out = Pipeline::keeping_frames()
            .run(vec![Input::path(&trace(name))], &mut keep)
            .expect("run");
        let d = &out.files[0].devices[0];
        let tl =
            memlens_core::query::category_timeline(&keep.files[0][0], memlens_api::TimelineAxis::Time, None, None, 400)
                .expect("timeline");
        let stacked = (0..tl.width)
            .map(|b| tl.series.iter().map(|s| s.bytes[b]).sum::<i64>())
            .max()
            .unwrap_or(0);
        assert_eq!(stacked, d.peak_allocated_bytes, "{name}");
        let names: Vec<Category> = tl.series.iter().map(|s| s.category).collect();
        let summary: Vec<Category> = d.categories.iter().map(|c| c.category).collect();
        assert!(
            names.iter().all(|c| summary.contains(c)),
            "{name}: {names:?} vs {summary:?}"
        );
    }
}

#[test]
fn the_steady_state_per_iteration_holds_the_training_state() {
    let d = device0("gpt_train.pickle");
    let steady = |c: Category| {
        d.categories
            .iter()
            .find(|x| x.category == c)
            .and_then(|x| x.steady_bytes)
    };
    assert_eq!(steady(Category::Parameter), Some(669_425_664));
    assert_eq!(steady(Category::OptimizerState), Some(1_338_851_328));
    assert_eq!(steady(Category::Gradient), Some(669_425_664));
    let inference = device0("kv_cache_inference.pickle");
    assert!(inference.categories.iter().all(|c| c.steady_bytes.is_none()));
}

#[test]
fn labels_the_script_gave_win_over_every_other_rule() {
    // traces/capture/labels.py: `_set_memory_metadata("category=input")` around each batch and
    // `"category=cache"` around a lookup table; a 1,059,850-parameter MLP trained with Adam.
    let d = device0("labels.pickle");
    let of = |c: Category| d.categories.iter().find(|x| x.category == c).expect("category");
    let input = of(Category::Input);
    assert_eq!(input.count, 4);
    assert!(input
        .rules
        .iter()
        .all(|r| r.rule == memlens_api::CategoryRule::ExplicitLabel));
    // The labelled lookup table, beside cuBLAS's workspaces (two of 32 MiB and cuBLASLt's 1 MiB
    // on this H200, recognised by their sizes).
    let cache = of(Category::Cache);
    let by = |rule| cache.rules.iter().find(|r| r.rule == rule).map_or(0, |r| r.bytes);
    assert_eq!(by(memlens_api::CategoryRule::ExplicitLabel), 4096 * 1024 * 4);
    assert_eq!(by(memlens_api::CategoryRule::WorkspaceBySize), (2 * 32 + 1) << 20);
    assert_eq!(cache.max_bytes, 4096 * 1024 * 4 + ((2 * 32 + 1) << 20));
    assert_eq!(of(Category::Parameter).max_bytes, 1_059_850 * 4);
    assert_eq!(of(Category::OptimizerState).max_bytes, 2 * 1_059_850 * 4);
    use memlens_core::analysis::categories::label_category;
    for (m, c) in [
        ("category=activation", Some(Category::Activation)),
        ("memlens.category=optimizer_state", Some(Category::OptimizerState)),
        ("{\"category\": \"gradient\", \"step\": 3}", Some(Category::Gradient)),
        ("cache", Some(Category::Cache)),
        ("category=weights", None),
        ("", None),
    ] {
        assert_eq!(label_category(m), c, "{m}");
    }
}

#[test]
fn user_frame_rules_place_what_the_built_in_rules_leave_open() {
    use memlens_core::analysis::categories::FrameRules;
    use memlens_core::pipeline::{run_with, Input};
    // The shared leak keeps each step's output in a list (train.py:142 in wl_leak): kept past
    // its iteration, so `other` — unless a rule says what it is.
    let rules = FrameRules::parse("# outputs kept for logging\n\ncache: train\\.py:142:wl_leak\n").expect("rules");
    let out = run_with(vec![Input::path(&trace("leak.pickle"))], Default::default(), &rules).expect("run");
    let d = &out.files[0].devices[0];
    let cache = d
        .categories
        .iter()
        .find(|c| c.category == Category::Cache)
        .expect("cache");
    // The 30 outputs by the rule; beside them only cuBLAS's two workspaces, by their sizes.
    let by = |rule| cache.rules.iter().find(|r| r.rule == rule).map_or(0, |r| r.count);
    assert_eq!(by(memlens_api::CategoryRule::FrameRule), 30);
    assert_eq!(by(memlens_api::CategoryRule::WorkspaceBySize), 2);
    assert_eq!(cache.count, 32);
    // Rules never override what the built-in evidence placed.
    assert_eq!(max_bytes(d, Category::Parameter), 12_609_546 * 4);
    for (text, want) in [
        ("weights: x", "line 1: `weights` is not a category"),
        ("cache", "line 1: expected `category: regex`"),
        ("\n\ncache: (", "line 3:"),
    ] {
        let e = FrameRules::parse(text).expect_err(text).to_string();
        assert!(e.starts_with(want), "{text}: {e}");
    }
}

/// Every device summary of a snapshot whose `record_function` ranges were dropped, as in a
/// history from before PyTorch recorded them or of an optimizer outside its profiling hook.
fn without_annotations(name: &str) -> Vec<DeviceSummary> {
    memlens_tests::summary_without_ranges(name).devices
}

#[test]
fn optimizer_steps_are_found_from_torch_optim_frames_when_no_range_names_them() {
    for (name, params, states) in MODELS {
        let d = without_annotations(name).remove(0);
        assert!(d.phases.is_empty(), "{name}");
        assert_training_state(name, &d, params, states);
    }
    // Inference has no optimizer frames: still nothing training-shaped.
    let d = without_annotations("kv_cache_inference.pickle").remove(0);
    assert!(d.categories.iter().all(|c| !matches!(
        c.category,
        Category::Gradient | Category::OptimizerState | Category::Activation
    )));
}

#[test]
fn pytorch_s_own_memory_profiler_agrees_with_the_categories_memlens_infers() {
    // The same AdamW run, recorded twice at once (traces/capture/profiler_categories.py): the
    // allocator history, which memlens categorises from its structure, and the profiler's
    // derived snapshot (`_profile_to_snapshot`), whose entries carry PyTorch's categories.
    let ours = device0("profiled.pickle.gz");
    let pytorch = device0("profiled.from_profiler.pickle.gz");
    let fp32 = 25_214_986 * 4;
    for (c, truth) in [
        (Category::Parameter, fp32),
        (Category::Gradient, fp32),
        (Category::OptimizerState, 2 * fp32),
    ] {
        // memlens counts requested bytes, the profiler its blocks (rounded up to 512 B).
        assert_eq!(max_bytes(&ours, c), truth, "{c:?}");
        let theirs = max_bytes(&pytorch, c);
        assert!(theirs >= truth && theirs - truth < 512 * 12, "{c:?}: {theirs}");
        let rules = &pytorch
            .categories
            .iter()
            .find(|x| x.category == c)
            .expect("category")
            .rules;
        assert!(
            rules.iter().all(|r| r.rule == CategoryRule::ProfilerCategory),
            "{c:?}: {rules:?}"
        );
    }
    // The cuBLAS/cuBLASLt workspaces (C++ frames) are state, not gradients.
    let cache = ours
        .categories
        .iter()
        .find(|c| c.category == Category::Cache)
        .expect("cache");
    assert!(
        cache.rules.iter().any(|r| r.rule == CategoryRule::LibraryWorkspace),
        "{cache:?}"
    );
    // The derived snapshot's last device holds the CPU's tensors: left out, and said so.
    let s = summarize_file(&trace("profiled.from_profiler.pickle.gz")).expect("summary");
    assert_eq!(s.devices.len(), 1);
    assert!(
        s.source.notes.iter().any(|n| n.contains("_profile_to_snapshot")),
        "{:?}",
        s.source.notes
    );
}
