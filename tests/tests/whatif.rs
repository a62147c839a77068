//! What-if predictions against real runs: the GPT of the shared traces trained at batch 4, 8 and
//! 16, with and without activation checkpointing (traces/capture/gpt_batches.py, captured on the
//! H200), and the shared gpt_train / gpt_train_ckpt pair. Targets: batch ×2 and ×0.5 within 10%
//! of the real run, checkpointing within 25%.

use memlens_api::{Category, WhatIfDevice, WhatIfParams};
use memlens_core::analysis::whatif::what_if_file;
use memlens_core::pipeline::Pipeline;
use memlens_core::pipeline::{Input, KeepFrames};
use memlens_tests::{oracle_for, oracle_value, trace};

fn predict(name: &str, s: WhatIfParams) -> WhatIfDevice {
    let mut sink = KeepFrames::default();
    let out = Pipeline::keeping_frames()
        .run(vec![Input::path(&trace(name))], &mut sink)
        .expect("run");
    let w = what_if_file(&out.files[0], &sink.files[0], &out.gpu_logs, &s).expect("what-if");
    w.devices.into_iter().next().expect("a device")
}

fn real_peak(name: &str) -> i64 {
    oracle_value(&oracle_for(&trace(name)), "requested_bytes.all.peak")
}

fn off(predicted: i64, real: i64) -> f64 {
    (predicted - real) as f64 / real as f64
}

fn batch(run: u64, new: u64) -> WhatIfParams {
    WhatIfParams {
        run_batch_size: Some(run),
        batch_size: Some(new),
        ..WhatIfParams::default()
    }
}

#[test]
fn replaying_the_run_unchanged_gives_its_own_peak() {
    for name in [
        "gpt_b8.pickle.gz",
        "gpt_train.pickle",
        "mlp_train.pickle",
        "leak.pickle",
        "oom_fragmentation.pickle",
    ] {
        let d = predict(name, WhatIfParams::default());
        assert_eq!(d.predicted_peak_allocated_bytes, d.peak_allocated_bytes, "{name}");
        assert_eq!(d.peak_allocated_bytes, real_peak(name), "{name}");
    }
}

#[test]
fn twice_and_half_the_batch_are_within_ten_percent_of_real_runs() {
    for (target, new) in [("gpt_b16.pickle.gz", 16), ("gpt_b4.pickle.gz", 4)] {
        let d = predict("gpt_b8.pickle.gz", batch(8, new));
        let e = off(d.predicted_peak_allocated_bytes, real_peak(target));
        assert!(e.abs() < 0.10, "{target}: {:+.1}%", e * 100.0);
    }
}

#[test]
fn checkpointing_is_within_a_quarter_of_real_checkpointed_runs() {
    let ckpt = |s: WhatIfParams| WhatIfParams {
        activation_checkpointing: Some(true),
        ..s
    };
    for (source, s, target) in [
        (
            "gpt_b8.pickle.gz",
            ckpt(WhatIfParams::default()),
            "gpt_b8_ckpt.pickle.gz",
        ),
        ("gpt_b8.pickle.gz", ckpt(batch(8, 16)), "gpt_b16_ckpt.pickle.gz"),
        ("gpt_b8.pickle.gz", ckpt(batch(8, 4)), "gpt_b4_ckpt.pickle.gz"),
        (
            "gpt_train.pickle",
            ckpt(WhatIfParams::default()),
            "gpt_train_ckpt.pickle",
        ),
    ] {
        let d = predict(source, s);
        let e = off(d.predicted_peak_allocated_bytes, real_peak(target));
        assert!(e.abs() < 0.25, "{source} → {target}: {:+.1}%", e * 100.0);
        assert!(
            d.assumptions.iter().any(|a| a.contains("about 8 layers")),
            "{:?}",
            d.assumptions
        );
    }
}

#[test]
fn sharding_and_offload_take_state_off_the_gpu() {
    let at = |d: &WhatIfDevice, c: Category| {
        d.predicted_by_category
            .iter()
            .find(|x| x.category == c)
            .map_or(0, |x| x.bytes)
    };
    let plain = predict("gpt_b8.pickle.gz", WhatIfParams::default());
    let zero3 = predict(
        "gpt_b8.pickle.gz",
        WhatIfParams {
            zero_stage: Some(3),
            gpus: Some(8),
            ..WhatIfParams::default()
        },
    );
    // At the end-of-forward peak: 669,425,664 B of parameters and 1,338,851,328 B of AdamW state.
    assert_eq!(at(&plain, Category::Parameter), 669_425_664);
    assert_eq!(at(&zero3, Category::Parameter), 669_425_664 / 8);
    assert_eq!(at(&zero3, Category::OptimizerState), 1_338_851_328 / 8);
    assert!(zero3.predicted_peak_allocated_bytes < plain.predicted_peak_allocated_bytes);
    let offload = predict(
        "gpt_b8.pickle.gz",
        WhatIfParams {
            optimizer_offload: Some(true),
            ..WhatIfParams::default()
        },
    );
    assert_eq!(at(&offload, Category::OptimizerState), 0);
    // AdamW → SGD with momentum: one state instead of two.
    let sgd = predict(
        "gpt_b8.pickle.gz",
        WhatIfParams {
            optimizer: Some(memlens_api::OptimizerKind::SgdMomentum),
            ..WhatIfParams::default()
        },
    );
    assert_eq!(at(&sgd, Category::OptimizerState), 669_425_664);
}

#[test]
fn the_largest_batch_that_fits_is_the_last_one_predicted_to_fit() {
    let capacity = 40i64 << 30;
    let s = WhatIfParams {
        gpu_memory_bytes: Some(capacity),
        ..batch(8, 8)
    };
    let d = predict("gpt_b8.pickle.gz", s);
    let b = d.max_batch_size.expect("a batch size");
    let predicted = |n: u64| predict("gpt_b8.pickle.gz", batch(8, n)).predicted_peak_allocated_bytes as f64;
    assert!(b > 8, "{b}");
    // The fit uses the run's reserved ÷ allocated ratio, so compare with the same ratio.
    let ratio = {
        let mut sink = KeepFrames::default();
        let out = Pipeline::keeping_frames()
            .run(vec![Input::path(&trace("gpt_b8.pickle.gz"))], &mut sink)
            .expect("run");
        let dev = &out.files[0].devices[0];
        dev.peak_reserved_bytes as f64 / dev.peak_allocated_bytes as f64
    };
    assert!(predicted(b) * ratio <= capacity as f64);
    assert!(predicted(b + 1) * ratio > capacity as f64);
}

#[test]
fn expandable_segments_hold_what_is_active_not_the_split_blocks() {
    // The shared fragmentation run without and with expandable segments: the same workload.
    let plain = predict("oom_fragmentation.pickle", WhatIfParams::default());
    let expandable = predict(
        "oom_fragmentation.pickle",
        WhatIfParams {
            expandable_segments: Some(true),
            ..WhatIfParams::default()
        },
    );
    assert_eq!(
        plain.predicted_peak_reserved_bytes,
        oracle_value(
            &oracle_for(&trace("oom_fragmentation.pickle")),
            "reserved_bytes.all.peak"
        )
    );
    assert!(expandable.predicted_peak_reserved_bytes < plain.predicted_peak_reserved_bytes);
    assert!(expandable.predicted_peak_reserved_bytes >= expandable.predicted_peak_allocated_bytes);
    assert!(expandable.assumptions.iter().any(|a| a.contains("expandable segments")));
}
