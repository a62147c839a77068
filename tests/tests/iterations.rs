//! A run's iterations are its loop's steps, whole, from whichever evidence it has — one test
//! per evidence kind — checked against the steps the capturing script timed itself
//! (`traces/anatomy/NAME.truth.json`, `steps[k].start_us`/`end_us` on the trace's clock): each
//! step found holds exactly one timed step, the steps' peaks top out at the run's peak, and a
//! variable-length run's peaks vary with its batches.

use memlens_api::{DeviceSummary, IterationEvidence};
use memlens_core::pipeline::summarize_file;
use memlens_tests::trace;

fn device(path: &str) -> DeviceSummary {
    let s = summarize_file(&trace(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    s.devices.into_iter().next().expect("a device")
}

/// `(start_us, end_us, batch × size)` of each step the script timed.
fn timed_steps(case: &str) -> Vec<(i64, i64, i64)> {
    let path = trace(&format!("anatomy/{case}.truth.json"));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).expect("truth")).expect("json");
    v["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| {
            let n = |k: &str| s[k].as_i64().unwrap_or(0);
            (n("start_us"), n("end_us"), n("batch") * n("size"))
        })
        .collect()
}

/// The steps found are the timed ones, one for one (each step found overlaps the timed step
/// at its place more than any other), found from `evidence`, and their peaks top out at the
/// run's peak.
fn assert_steps(case: &str, d: &DeviceSummary, evidence: IterationEvidence) {
    let timed = timed_steps(case);
    let it = &d.iterations;
    assert_eq!(it.evidence, evidence, "{case}: {}", it.source);
    assert_eq!(
        (it.count, it.steps.len()),
        (timed.len(), timed.len()),
        "{case}: {}",
        it.source
    );
    for (k, step) in it.steps.iter().enumerate() {
        let overlap = |&(start, end, _): &(i64, i64, i64)| (end.min(step.end_us) - start.max(step.start_us)).max(0);
        let most = (0..timed.len()).max_by_key(|&j| overlap(&timed[j]));
        assert_eq!(
            most,
            Some(k),
            "{case}: step {k} {step:?} is not the timed {:?}",
            timed[k]
        );
    }
    let highest = it.steps.iter().map(|s| s.peak_allocated_bytes).max();
    assert_eq!(highest, Some(d.peak_allocated_bytes), "{case}");
}

#[test]
fn step_ranges_are_the_steps() {
    // `record_function("iteration")` around each step, beside PyTorch's optimizer ranges.
    let d = device("anatomy/resnet_sgd.pickle.gz");
    assert_steps("resnet_sgd", &d, IterationEvidence::StepRanges);
    assert_eq!(d.iterations.source, "annotations:iteration");
}

#[test]
fn optimizer_steps_separate_the_steps() {
    // PyTorch's own `Optimizer.step#AdamW.step` ranges: each step runs from one optimizer
    // step's end to the next's, not the optimizer step itself.
    assert_steps(
        "varlen_plain",
        &device("anatomy/varlen_plain.pickle.gz"),
        IterationEvidence::OptimizerSteps,
    );
    // No range at all: Adam's steps seen in `torch/optim/` frames, and SGD's, which allocate
    // nothing after the first, by the zero_grad that frees their gradients.
    for case in ["moe_custom", "resnet_sgd_plain"] {
        let d = device(&format!("anatomy/{case}.pickle.gz"));
        assert!(d.phases.is_empty(), "{case}");
        assert_steps(case, &d, IterationEvidence::OptimizerSteps);
    }
}

#[test]
fn the_allocation_rhythm_gives_the_steps_of_a_loop_without_optimizer_or_ranges() {
    // An eval loop: no optimizer, no range; each batch is made at the top of its step.
    assert_steps(
        "resnet_eval",
        &device("anatomy/resnet_eval.pickle.gz"),
        IterationEvidence::AllocationRhythm,
    );
}

#[test]
fn a_variable_length_run_s_step_peaks_follow_its_batches() {
    let d = device("anatomy/varlen_plain.pickle.gz");
    let timed = timed_steps("varlen_plain");
    let peaks: Vec<i64> = d.iterations.steps.iter().map(|s| s.peak_allocated_bytes).collect();
    let mut distinct = peaks.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert!(distinct.len() >= 8, "{peaks:?}");
    // After the first (which has no optimizer state yet), a step with more tokens never peaks
    // lower than one with fewer (steps of as many tokens in other shapes peak within 1 %).
    for (a, &pa) in timed.iter().zip(&peaks).skip(1) {
        for (b, &pb) in timed.iter().zip(&peaks).skip(1) {
            if a.2 <= b.2 {
                assert!(pa <= pb + pb / 100, "{} tokens peak at {pa}, {} at {pb}", a.2, b.2);
            }
        }
    }
    // The largest step holds the run's peak.
    let largest = (0..timed.len())
        .max_by_key(|&k| (timed[k].2, std::cmp::Reverse(k)))
        .expect("steps");
    assert_eq!(peaks[largest], d.peak_allocated_bytes);
}
