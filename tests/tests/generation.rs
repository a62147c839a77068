//! Generation with Hugging Face `generate()` (`traces/serving/`, made by
//! `traces/capture/serving.py` on an H100; each `NAME.truth.json` counted from live objects):
//! the key/value cache's bytes at the peak against `2 × layers × kv heads × head dim × tokens ×
//! dtype bytes`, its tokens, sequences and bytes a token; and the OOMs of generation read as
//! inference — prefill or decode, never a training remedy, the fitting batch bounded by the
//! fresh-process search's.

use memlens_api::{DeviceSummary, OomCause, OomExplanation, OomPhase, RemedyAction};
use memlens_core::pipeline::summarize_file;
use memlens_tests::trace;

fn device(case: &str) -> DeviceSummary {
    let s = summarize_file(&trace(&format!("serving/{case}.pickle.gz"))).unwrap_or_else(|e| panic!("{case}: {e}"));
    s.devices
        .into_iter()
        .find(|d| d.event_count > 0)
        .expect("a device with a trace")
}

fn truth(case: &str) -> serde_json::Value {
    let path = trace(&format!("serving/{case}.truth.json"));
    serde_json::from_slice(&std::fs::read(&path).expect("truth")).expect("json")
}

fn int(v: &serde_json::Value, key: &str) -> i64 {
    v[key].as_i64().unwrap_or_else(|| panic!("no {key}"))
}

/// `2 × layers × kv heads × head dim × dtype bytes`: one token of one sequence.
fn bytes_per_token(t: &serde_json::Value) -> i64 {
    let c = &t["config"];
    let dtype = if t["dtype"].as_str() == Some("torch.float32") {
        4
    } else {
        2
    };
    2 * int(c, "num_hidden_layers") * int(c, "num_key_value_heads") * int(c, "head_dim") * dtype
}

const GENERATIONS: [&str; 4] = [
    "generate_dynamic_fp32",
    "generate_dynamic_bf16",
    "generate_static_fp32",
    "generate_static_bf16",
];

/// The cache at the peak within 5 % of the formula at the tokens it held (the truth's, counted
/// from `past_key_values`), the old copy a `torch.cat` was replacing there aside.
#[test]
fn the_kv_cache_at_the_peak_is_the_formulas() {
    for case in GENERATIONS {
        let t = truth(case);
        let d = device(case);
        let kv = d.kv_cache.as_ref().unwrap_or_else(|| panic!("{case}: no kv_cache"));
        let want = bytes_per_token(&t) * int(&t, "kv_cache_allocated_tokens") * int(&t, "batch");
        let off = (kv.bytes_at_peak - want).abs() as f64 / want as f64;
        assert!(
            off <= 0.05,
            "{case}: {} vs {want} ({:.1} % off)",
            kv.bytes_at_peak,
            off * 100.0
        );
        assert_eq!(kv.tensors_at_peak as i64, int(&t, "kv_cache_tensors"), "{case}");
        assert_eq!(kv.sequences, Some(int(&t, "batch")), "{case}");
        // Growth within a request is no leak.
        assert!(d.leaks.is_empty(), "{case}: {:?}", d.leaks);
    }
}

/// The OOM captures at their peak: each key or value tensor of the layers made so far holds
/// `kv heads × head dim × tokens × dtype bytes` a sequence — the prompt's tokens in a prefill, the
/// tokens the growth reads in decode.
#[test]
fn the_kv_cache_of_a_failed_generation_is_the_formulas_layer_by_layer() {
    for case in ["generate_oom_prefill", "generate_oom_decode"] {
        let t = truth(case);
        let kv = device(case).kv_cache.expect("kv_cache");
        let tokens = kv.tokens_at_peak.unwrap_or_else(|| int(&t, "prompt_len"));
        let per_tensor = bytes_per_token(&t) / (2 * int(&t["config"], "num_hidden_layers")) * tokens * int(&t, "batch");
        let want = per_tensor * kv.tensors_at_peak as i64;
        let off = (kv.bytes_at_peak - want).abs() as f64 / want as f64;
        assert!(
            off <= 0.05,
            "{case}: {} vs {want} ({:.1} % off)",
            kv.bytes_at_peak,
            off * 100.0
        );
    }
}

/// A cache grown by `torch.cat` tells its tokens and its bytes a token of a sequence exactly;
/// the copy being replaced at the peak is one tensor, a key or a value of one layer.
#[test]
fn a_dynamic_cache_tells_its_tokens_and_bytes_a_token() {
    for case in ["generate_dynamic_fp32", "generate_dynamic_bf16"] {
        let t = truth(case);
        let kv = device(case).kv_cache.expect("kv_cache");
        assert!(kv.grown_by_copy, "{case}");
        assert_eq!(kv.tokens_at_peak, Some(int(&t, "kv_cache_seq_length")), "{case}");
        assert_eq!(kv.bytes_per_token, Some(bytes_per_token(&t)), "{case}");
        assert_eq!(
            kv.bytes_per_sequence,
            Some(bytes_per_token(&t) * int(&t, "kv_cache_seq_length")),
            "{case}"
        );
        let one_tensor = kv.bytes_at_peak / kv.tensors_at_peak as i64;
        assert!(
            kv.growth_copy_bytes_at_peak <= one_tensor && kv.growth_copy_bytes_at_peak > 0,
            "{case}: {kv:?}"
        );
    }
    for case in ["generate_static_fp32", "generate_static_bf16"] {
        assert!(!device(case).kv_cache.expect("kv_cache").grown_by_copy, "{case}");
    }
}

fn the_oom(case: &str) -> OomExplanation {
    let d = device(case);
    assert_eq!(d.ooms.len(), 1, "{case}");
    d.ooms[0].clone()
}

const TRAINING_REMEDIES: [RemedyAction; 5] = [
    RemedyAction::ActivationCheckpointing,
    RemedyAction::Bf16Activations,
    RemedyAction::LighterOptimizer,
    RemedyAction::ShardStates,
    RemedyAction::CpuOffload,
];

/// Each generation OOM in the phase the capture saw it fail in (`failed_phase`: its forward
/// hooks counted the forwards), a cap's limit and not fragmentation, with inference remedies
/// only, each sized, none under a hundredth of what the step lacks.
#[test]
fn a_generation_oom_is_read_as_inference() {
    for case in ["generate_oom_prefill", "generate_oom_decode"] {
        let t = truth(case);
        let o = the_oom(case);
        let phase = match t["failed_phase"].as_str() {
            Some("prefill") => OomPhase::Prefill,
            Some("decode") => OomPhase::Decode,
            other => panic!("{case}: failed_phase {other:?}"),
        };
        assert_eq!(o.phase, phase, "{case}");
        assert_eq!(o.cause, OomCause::Limit, "{case}: {}", o.remedy);
        let fit = o.fits.as_ref().expect("fits");
        let lacking = fit.fixed_bytes + fit.batch_bytes - fit.limit_bytes;
        for r in &o.remedies {
            assert!(!TRAINING_REMEDIES.contains(&r.action), "{case}: {:?}", r.action);
            assert!(
                r.saves_bytes * 100 >= lacking,
                "{case}: {r:?} saves under 1 % of {lacking}"
            );
        }
        for a in [
            RemedyAction::SmallerBatch,
            RemedyAction::NarrowerKvCache,
            RemedyAction::Bf16Weights,
            RemedyAction::QuantizeWeights,
        ] {
            assert!(o.remedies.iter().any(|r| r.action == a), "{case}: no {a:?}");
        }
    }
}

/// The snapshot does not hold `max_new_tokens`: the fraction counts the cache at the length it
/// had and says it is an upper bound — which it is: the fresh-process search's largest fitting
/// batch (the whole 512 + 512 tokens) is at most the fraction's batch.
#[test]
fn the_fitting_batch_is_bounded_from_above_when_the_length_is_unknown() {
    let t = truth("generate_oom_prefill");
    let fit = the_oom("generate_oom_prefill").fits.expect("fits");
    let batch = int(&t, "batch") as f64;
    assert!(fit.how.contains("upper bound"), "{}", fit.how);
    assert!(
        fit.batch_fraction * batch >= int(&t, "largest_fitting_batch") as f64,
        "{} of {batch} is below the {} that fit",
        fit.batch_fraction,
        int(&t, "largest_fitting_batch")
    );
    assert!(fit.batch_fraction < 1.0, "{fit:?}");
}

/// A traceback whose `generate(...)` line sets the length: the text's OOM carries it, for a
/// snapshot of the same failure to count its cache at the full length.
#[test]
fn a_traceback_tells_the_generation_length() {
    let text = std::fs::read_to_string(trace("serving/generate_oom_prefill.oom.txt")).expect("oom.txt");
    let written = text.replace("**gen_kwargs(False))", "max_new_tokens=512, do_sample=False)");
    assert_ne!(text, written, "the capture's generate line changed");
    let path = std::env::temp_dir().join(format!("memlens-generation-{}.txt", std::process::id()));
    std::fs::write(&path, written).expect("write");
    let s = summarize_file(&path).expect("a text OOM");
    let _ = std::fs::remove_file(&path);
    let o = &s.devices[0].ooms[0];
    assert_eq!(o.phase, OomPhase::Prefill);
    let t = o.text.as_ref().expect("text");
    assert_eq!((t.max_new_tokens, t.max_length), (Some(512), None));
}
