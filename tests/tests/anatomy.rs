//! Memory anatomy on every model family and loop shape captured for it (`traces/anatomy/`,
//! made by `traces/capture/anatomy.py`): a CNN with SGD momentum with and without
//! `record_function` ranges, a ViT with fp16 autocast and `GradScaler`, an eval loop, a
//! hand-written MoE loop without ranges and a variable-length Llama run. Each capture's
//! `NAME.truth.json` holds what the script counted itself (parameter, gradient and optimizer
//! state bytes); the categories must match it whatever ranges the run recorded.

use memlens_api::{Category, CategoryRule, DeviceSummary};
use memlens_core::pipeline::summarize_file;
use memlens_tests::{category_at_peak as at_peak, category_max_bytes as max_bytes, summary_without_ranges, trace};

fn capture(case: &str) -> std::path::PathBuf {
    trace(&format!("anatomy/{case}.pickle.gz"))
}

fn device(case: &str) -> DeviceSummary {
    let s = summarize_file(&capture(case)).unwrap_or_else(|e| panic!("{case}: {e}"));
    s.devices.into_iter().next().expect("a device")
}

/// The same capture with its `record_function` ranges dropped (the optimizer's own too).
fn device_without_ranges(case: &str) -> DeviceSummary {
    let s = summary_without_ranges(&format!("anatomy/{case}.pickle.gz"));
    s.devices.into_iter().next().expect("a device")
}

fn truth(case: &str, key: &str) -> i64 {
    let path = trace(&format!("anatomy/{case}.truth.json"));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).expect("truth")).expect("json");
    v[key].as_i64().unwrap_or(0)
}

const TRAINING: [&str; 7] = [
    "resnet_sgd",
    "resnet_sgd_iter",
    "resnet_sgd_plain",
    "vit_amp",
    "moe_custom",
    "varlen_plain",
    "varlen_expandable",
];

/// Parameters (with buffers), gradients and optimizer state (with the `GradScaler`'s) each
/// within 5 % of what the script counted.
fn assert_matches_truth(case: &str, d: &DeviceSummary) {
    for (c, want) in [
        (
            Category::Parameter,
            truth(case, "parameter_bytes") + truth(case, "buffer_bytes"),
        ),
        (Category::Gradient, truth(case, "gradient_bytes")),
        (
            Category::OptimizerState,
            truth(case, "optimizer_state_bytes") + truth(case, "grad_scaler_bytes"),
        ),
    ] {
        let got = max_bytes(d, c);
        let off = (got - want).abs() as f64 / want as f64;
        assert!(off < 0.05, "{case}: {c:?} {got} vs {want} ({:.1}% off)", off * 100.0);
    }
}

#[test]
fn every_training_capture_s_state_matches_what_its_script_counted() {
    for case in TRAINING {
        assert_matches_truth(case, &device(case));
    }
}

#[test]
fn the_categories_do_not_depend_on_the_ranges_a_script_records() {
    for case in TRAINING {
        let d = device_without_ranges(case);
        assert!(d.phases.is_empty(), "{case}");
        assert_matches_truth(case, &d);
        let with = device(case);
        for c in [
            Category::Parameter,
            Category::Gradient,
            Category::OptimizerState,
            Category::Activation,
        ] {
            let (a, b) = (at_peak(&with, c), at_peak(&d, c));
            assert!(
                (a - b).abs() * 20 <= a.max(b),
                "{case}: {c:?} at the peak {a} with ranges, {b} without"
            );
        }
    }
}

#[test]
fn a_cnn_s_saved_activations_are_activations_with_or_without_ranges() {
    // The ResNet-50 run three ways: PyTorch's optimizer ranges and an `iteration` range; the
    // `iteration` range only; no range at all. SGD's steps after the first allocate nothing,
    // so only the zero_grad that frees the gradients separates them.
    for case in ["resnet_sgd", "resnet_sgd_iter", "resnet_sgd_plain"] {
        let d = device(case);
        let activation = at_peak(&d, Category::Activation);
        assert!(
            activation * 10 > d.peak_allocated_bytes * 8,
            "{case}: {:#?}",
            d.categories
        );
        assert!(
            at_peak(&d, Category::Other) * 20 < d.peak_allocated_bytes,
            "{case}: {:#?}",
            d.categories
        );
        // SGD momentum: one buffer per parameter.
        assert_eq!(
            max_bytes(&d, Category::OptimizerState),
            truth(case, "optimizer_state_bytes"),
            "{case}"
        );
    }
}

#[test]
fn grad_scaler_state_is_optimizer_state_by_its_own_rule() {
    let d = device("vit_amp");
    let state = d
        .categories
        .iter()
        .find(|c| c.category == Category::OptimizerState)
        .expect("optimizer state");
    let scaler = state
        .rules
        .iter()
        .find(|r| r.rule == CategoryRule::GradScalerState)
        .expect("the GradScaler's rule");
    assert_eq!(scaler.bytes, truth("vit_amp", "grad_scaler_bytes"));
}

#[test]
fn an_eval_loop_has_parameters_and_no_training_category() {
    let d = device("resnet_eval");
    for c in [Category::Gradient, Category::OptimizerState, Category::Activation] {
        assert_eq!(max_bytes(&d, c), 0, "{c:?}: {:#?}", d.categories);
    }
    let want = truth("resnet_eval", "parameter_bytes") + truth("resnet_eval", "buffer_bytes");
    assert_eq!(max_bytes(&d, Category::Parameter), want);
}

#[test]
fn autocast_s_weight_copies_are_named_on_mixed_precision_runs_only() {
    let rule_bytes = |d: &DeviceSummary| {
        d.categories
            .iter()
            .flat_map(|c| &c.rules)
            .filter(|r| r.rule == CategoryRule::AutocastWeightCopy)
            .map(|r| r.bytes)
            .sum::<i64>()
    };
    // fp16 (ViT) and bf16 (Llama) autocast: each step casts every weight once, half its size.
    for case in ["vit_amp", "varlen_plain"] {
        let d = device(case);
        let per_step = rule_bytes(&d) / d.iterations.count as i64;
        let half = truth(case, "parameter_bytes") / 2;
        let off = (per_step - half).abs() as f64 / half as f64;
        assert!(off < 0.05, "{case}: {per_step} per step vs {half}");
    }
    for case in ["resnet_sgd", "moe_custom", "resnet_eval"] {
        assert_eq!(rule_bytes(&device(case)), 0, "{case}");
    }
}
