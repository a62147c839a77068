//! Real OOMs in each phase of a training step, captured on an H100 with PyTorch 2.11
//! (`traces/capture/oom_phases.py`; `traces/oom/`): each at-OOM snapshot's cause, phase, what is
//! live in the user's terms, and `fits.batch_fraction` against reruns. The capture searched,
//! in fresh processes under the same cap, the largest batch whose whole step fits
//! (`capture_info.json`'s `sweeps`): the fraction must fit (its batch, rounded down, is at
//! most that one) and 25 % more must not. Each text the failure left (the message, the log,
//! `memory_summary()`) must tell the same cause.

use memlens_api::{Category, DeviceSummary, OomCause, OomExplanation, OomPhase};
use memlens_core::pipeline::summarize_file;
use memlens_tests::traces_dir;

fn device0(name: &str) -> DeviceSummary {
    let s = summarize_file(&traces_dir().join("oom").join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    s.devices.into_iter().next().expect("device 0")
}

fn oom(name: &str) -> OomExplanation {
    let d = device0(&format!("{name}.at_oom.pickle.gz"));
    assert_eq!(d.ooms.len(), 1, "{name}");
    d.ooms[0].clone()
}

fn live(o: &OomExplanation, c: Category) -> i64 {
    o.live_categories
        .iter()
        .filter(|x| x.category == c)
        .map(|x| x.bytes)
        .sum()
}

fn info() -> serde_json::Value {
    let text = std::fs::read_to_string(traces_dir().join("oom/capture_info.json")).expect("capture_info.json");
    serde_json::from_str(&text).expect("json")
}

/// The fraction fits (its batch, rounded down, ran) and 25 % more does not.
fn check_fraction(name: &str, fraction: f64) {
    let sweep = &info()["sweeps"][name];
    let max = sweep["max_fitting_batch"].as_f64().expect("max_fitting_batch");
    let batch = sweep["failing_batch"].as_f64().expect("failing_batch");
    let at = (fraction * batch).floor();
    assert!(
        at <= max,
        "{name}: {fraction} of {batch} is {at} > {max}, the largest that fits"
    );
    assert!(
        (1.25 * fraction * batch).floor() > max,
        "{name}: 25 % more than {fraction} of {batch} still fits (largest {max})"
    );
}

const GIB: i64 = 1 << 30;

#[test]
fn a_forward_after_the_batch_jumped_from_2_to_64() {
    let o = oom("fwd_jump");
    assert_eq!((o.cause, o.phase), (OomCause::Limit, OomPhase::Forward));
    // The failing forward's 14 GiB are activations; parameters and AdamW's state (from the
    // step at batch 2) are what they are.
    assert!(live(&o, Category::Activation) > 13 * GIB, "{:?}", o.live_categories);
    assert!(
        live(&o, Category::Other) + live(&o, Category::Temporary) < GIB / 10,
        "{:?}",
        o.live_categories
    );
    // Two states per parameter; the weights moved to the GPU also hold the rotary embedding's
    // buffer (a few hundred bytes), which has none.
    assert!((live(&o, Category::OptimizerState) - 2 * live(&o, Category::Parameter)).abs() < 4096);
    check_fraction("fwd_jump", o.fits.as_ref().expect("fits").batch_fraction);
}

#[test]
fn the_very_first_forward() {
    let o = oom("fwd_first");
    assert_eq!((o.cause, o.phase), (OomCause::Limit, OomPhase::Forward));
    assert!(live(&o, Category::Activation) > 13 * GIB, "{:?}", o.live_categories);
    for c in [Category::Other, Category::Temporary] {
        assert_eq!(live(&o, c), 0, "{c:?}: {:?}", o.live_categories);
    }
    // The only cache: cuBLAS's workspace, made by the first matrix product (32 MiB on the H200).
    assert_eq!(live(&o, Category::Cache), 32 << 20, "{:?}", o.live_categories);
    check_fraction("fwd_first", o.fits.as_ref().expect("fits").batch_fraction);
}

#[test]
fn the_first_backward() {
    let o = oom("bwd");
    assert_eq!((o.cause, o.phase), (OomCause::Limit, OomPhase::Backward));
    assert!(live(&o, Category::Activation) > 9 * GIB, "{:?}", o.live_categories);
    // Backward had begun with the logits' fp32 gradient (1.95 GiB): a gradient being computed.
    assert!(live(&o, Category::Gradient) > GIB, "{:?}", o.live_categories);
    for c in [Category::Other, Category::Temporary, Category::Cache] {
        assert_eq!(live(&o, c), 0, "{c:?}: {:?}", o.live_categories);
    }
    check_fraction("bwd", o.fits.as_ref().expect("fits").batch_fraction);
}

#[test]
fn the_first_optimizer_step_creating_adamw_state() {
    let o = oom("opt");
    assert_eq!((o.cause, o.phase), (OomCause::Limit, OomPhase::OptimizerStep));
    // 535,857,152 fp32 parameters: their gradients whole, AdamW's state part made.
    // (The weights moved also hold the rotary embedding's buffer: a few hundred bytes.)
    let params = 535_857_152i64 * 4;
    assert!((live(&o, Category::Parameter) - params).abs() < 4096);
    // Every parameter's gradient, and what backward left live beside them.
    let gradients = live(&o, Category::Gradient);
    assert!(gradients >= params && gradients < params + (64 << 20), "{gradients}");
    let state = live(&o, Category::OptimizerState);
    assert!(state > 0 && state < 2 * params, "{state}");
    assert!(o.remedy.contains("lazily at their first step"), "{}", o.remedy);
    // No batch fits: the step's state alone is over the cap.
    assert_eq!(o.fits.as_ref().map(|f| f.batch_fraction), Some(0.0));
    assert!(o
        .remedies
        .iter()
        .any(|r| r.action == memlens_api::RemedyAction::LighterOptimizer));
}

#[test]
fn each_text_a_failure_left_tells_its_cause_and_phase() {
    for (name, cause, phase) in [
        ("fwd_jump", OomCause::Limit, OomPhase::Forward),
        ("fwd_first", OomCause::Limit, OomPhase::Forward),
        ("bwd", OomCause::Limit, OomPhase::Backward),
        ("opt", OomCause::Limit, OomPhase::OptimizerStep),
        ("other_proc", OomCause::OtherProcesses, OomPhase::Forward),
        ("non_torch", OomCause::NonPytorch, OomPhase::Forward),
    ] {
        for text in ["error.txt", "log"] {
            let d = device0(&format!("{name}.{text}"));
            let o = &d.ooms[0];
            assert_eq!((o.cause, o.phase), (cause, phase), "{name}.{text}: {}", o.remedy);
            assert!(
                o.text.as_ref().is_some_and(|t| t.missing == ["largest_free_block"]),
                "{name}.{text}"
            );
        }
        // The memory summary taken after the failure counts it.
        let d = device0(&format!("{name}.memory_summary.txt"));
        assert_eq!(d.oom_count, 1, "{name}");
        assert!(d.peak_reserved_bytes > 0);
    }
}

#[test]
fn the_reruns_at_the_fractions_fit_and_25_percent_more_do_not() {
    // `traces/capture/oom_rerun.py` on the H100, at the fractions these snapshots give.
    let text = std::fs::read_to_string(traces_dir().join("oom/rerun.json")).expect("rerun.json");
    let runs: serde_json::Value = serde_json::from_str(&text).expect("json");
    for name in ["fwd_jump", "fwd_first", "bwd"] {
        let o = oom(name);
        let fraction = o.fits.as_ref().expect("fits").batch_fraction;
        let at = &runs[format!("{name} fraction")];
        let more = &runs[format!("{name} 25_percent_more")];
        let full = at["of"].as_f64().expect("of");
        assert_eq!(
            at["batch"].as_f64(),
            Some((fraction * full).floor()),
            "{name}: rerun at another fraction"
        );
        assert_eq!(at["fits"], true, "{name}");
        assert_eq!(more["fits"], false, "{name}");
    }
}

#[test]
fn a_snapshot_uploaded_with_its_log_takes_what_only_the_message_saw() {
    let dir = traces_dir().join("oom");
    for (name, cause) in [
        ("other_proc", OomCause::OtherProcesses),
        ("non_torch", OomCause::NonPytorch),
        ("opt", OomCause::Limit),
    ] {
        let out = memlens_core::pipeline::analyze_paths(&[
            dir.join(format!("{name}.at_oom.pickle.gz")),
            dir.join(format!("{name}.log")),
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        let snap = &out.files[0].devices[0];
        let o = &snap.ooms[0];
        assert_eq!(o.cause, cause, "{name}: {}", o.remedy);
        assert!(o.allowed_bytes.is_some() == (name == "opt"), "{name}");
        // What only the snapshot knows stays: the categories and the batch fit.
        assert!(!o.live_categories.is_empty() && o.fits.is_some(), "{name}");
        assert!(snap.verdict.starts_with(&o.remedy), "{name}");
    }
}
