//! `memlens plan` against real runs (traces/plan/: configs, and runs captured on the lent GPU by
//! traces/capture/plan_runs.py with transformers 5.17 and PyTorch 2.11):
//! - parameter counts equal `sum(p.numel())` of the model transformers builds from each config
//!   (params.json), for every family memlens counts;
//! - the uncalibrated peak is within 15 % of every run's `requested_bytes.all.peak` (two families
//!   at three batch sizes with and without checkpointing, bf16 weights, a partly frozen model,
//!   and six more families);
//! - calibrated by a run of another batch size, within 5 %; calibrated by the run itself, its
//!   own peak to the byte (the plan and the what-if are one model).

use std::path::{Path, PathBuf};

use memlens_api::{PlanParams, WeightsDtype};
use memlens_core::analysis::whatif::for_each_device;
use memlens_core::pipeline::{self, Input, KeepFrames};
use memlens_core::plan::calibrate::Calibration;
use memlens_core::plan::{params::parameter_count, plan, ModelShape};
use serde_json::Value;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../traces/plan")
}

fn config(name: &str) -> String {
    std::fs::read_to_string(dir().join("configs").join(format!("{name}.json"))).expect("config")
}

/// Every captured run's truth.json.
fn runs() -> Vec<Value> {
    let mut out: Vec<Value> = std::fs::read_dir(dir().join("runs"))
        .expect("runs")
        .filter_map(|e| {
            let p = e.ok()?.path();
            p.to_string_lossy()
                .ends_with(".truth.json")
                .then(|| serde_json::from_str(&std::fs::read_to_string(&p).ok()?).ok())?
        })
        .collect();
    out.sort_by_key(|r| r["name"].as_str().unwrap_or_default().to_owned());
    out
}

/// The plan's query for a captured run's settings.
fn query(run: &Value) -> PlanParams {
    let frozen = run["frozen"].as_bool().unwrap_or(false);
    PlanParams {
        config: Some(config(run["config"].as_str().expect("config"))),
        batch_size: run["batch"].as_u64(),
        seq_len: run["seq"].as_u64(),
        optimizer: serde_json::from_value(run["optimizer"].clone()).ok(),
        weights: serde_json::from_value(run["weights"].clone()).ok(),
        autocast: serde_json::from_value(run["autocast"].clone()).ok(),
        checkpointing: run["checkpointing"].as_bool(),
        trainable_params: frozen.then(|| run["trainable_parameters"].as_u64().expect("trainable")),
        ..PlanParams::default()
    }
}

fn off(predicted: i64, real: i64) -> f64 {
    (predicted - real) as f64 / real as f64
}

#[test]
fn parameter_counts_equal_transformers_on_every_config() {
    let counted: Value =
        serde_json::from_str(&std::fs::read_to_string(dir().join("params.json")).expect("params.json")).expect("json");
    let configs = counted["configs"].as_object().expect("configs");
    assert!(configs.len() >= 20, "{} configs", configs.len());
    for (name, c) in configs {
        let m = ModelShape::from_config_json(&config(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            parameter_count(&m),
            c["parameters"].as_u64().expect("count"),
            "{name} ({:?})",
            m.family
        );
    }
}

#[test]
fn every_real_run_is_within_fifteen_percent_uncalibrated() {
    let runs = runs();
    assert!(runs.len() >= 22, "{} runs", runs.len());
    let mut table = String::from("run | real peak | planned | off\n");
    let mut worst = 0.0f64;
    for r in &runs {
        let p = plan(&query(r), None).expect("plan");
        let real = r["peak_requested_bytes"].as_i64().expect("peak");
        assert_eq!(p.parameter_count, r["parameters"].as_u64().expect("parameters"));
        assert_eq!(
            p.trainable_parameter_count,
            r["trainable_parameters"].as_u64().expect("trainable")
        );
        let e = off(p.predicted_peak_allocated_bytes, real);
        table += &format!(
            "{} | {real} | {} | {:+.1}%\n",
            r["name"],
            p.predicted_peak_allocated_bytes,
            e * 100.0
        );
        worst = worst.max(e.abs());
    }
    println!("{table}");
    assert!(worst <= 0.15, "worst {:+.1}%:\n{table}", worst * 100.0);
}

#[test]
fn earlier_captures_of_hugging_face_llamas_are_within_fifteen_percent() {
    // traces/hf_llama (fp32, no autocast: SDPA's math kernel) and traces/anatomy/varlen_plain
    // (bf16 autocast, 40 steps of varying shape; its largest is 16 × 1024).
    for (config, stats, batch, seq, autocast) in [
        ("hf_llama", "hf_llama.memory_stats.json", 4, 512, "none"),
        (
            "varlen_llama",
            "anatomy/varlen_plain.memory_stats.json",
            16,
            1024,
            "bf16",
        ),
    ] {
        let q = PlanParams {
            config: Some(self::config(config)),
            batch_size: Some(batch),
            seq_len: Some(seq),
            autocast: serde_json::from_value(Value::String(autocast.into())).ok(),
            ..PlanParams::default()
        };
        let p = plan(&q, None).expect("plan");
        let oracle: Value =
            serde_json::from_str(&std::fs::read_to_string(dir().join("..").join(stats)).expect("stats")).expect("json");
        let e = off(
            p.predicted_peak_allocated_bytes,
            oracle["requested_bytes.all.peak"].as_i64().expect("peak"),
        );
        assert!(e.abs() <= 0.15, "{config}: {:+.1}%", e * 100.0);
    }
}

/// Plans of `target`'s settings calibrated by the snapshot `source`.
fn calibrated(source: &Value, target: &Value) -> (i64, Option<String>) {
    let name = format!("{}.pickle.gz", source["name"].as_str().expect("name"));
    let path = dir().join("runs").join(&name);
    let mut sink = KeepFrames::default();
    let out = pipeline::run(vec![Input::path(&path)], Default::default(), &mut sink).expect("run");
    let mut q = query(target);
    q.run_checkpointing = source["checkpointing"].as_bool();
    let plans = for_each_device(&out.files[0], &sink.files[0], &out.gpu_logs, None, |run| {
        let c = Calibration {
            run,
            name: name.clone(),
            run_batch: source["batch"].as_u64().expect("batch"),
            run_seq: source["seq"].as_u64().expect("seq"),
            run_checkpointing: source["checkpointing"].as_bool().unwrap_or(false),
        };
        Ok(plan(&q, Some(&c)).expect("plan"))
    })
    .expect("devices");
    let p = plans.into_iter().next().expect("a device");
    (p.predicted_peak_allocated_bytes, p.calibrated_from)
}

#[test]
fn calibrated_by_another_batch_size_is_within_five_percent() {
    let runs = runs();
    let by_name = |n: &str| runs.iter().find(|r| r["name"] == n).unwrap_or_else(|| panic!("{n}"));
    let mut table = String::from("calibrated by | planned run | real peak | planned | off\n");
    let mut worst = 0.0f64;
    for family in ["llama", "gpt2"] {
        for ckpt in ["", "_ckpt"] {
            for (from, to) in [(2, 8), (8, 2), (4, 8), (2, 4)] {
                let (s, t) = (format!("{family}_b{from}{ckpt}"), format!("{family}_b{to}{ckpt}"));
                if !dir().join("runs").join(format!("{s}.pickle.gz")).exists() {
                    continue; // GPT-2 with checkpointing was captured without its history
                }
                let (planned, from_run) = calibrated(by_name(&s), by_name(&t));
                assert!(from_run.is_some_and(|n| n.contains(&s)));
                let real = by_name(&t)["peak_requested_bytes"].as_i64().expect("peak");
                let e = off(planned, real);
                table += &format!("{s} | {t} | {real} | {planned} | {:+.1}%\n", e * 100.0);
                worst = worst.max(e.abs());
            }
        }
    }
    println!("{table}");
    assert!(table.lines().count() > 10, "{table}");
    assert!(worst <= 0.05, "worst {:+.1}%:\n{table}", worst * 100.0);
}

#[test]
fn calibrated_by_the_run_itself_is_the_run() {
    for r in runs().iter().filter(|r| {
        dir()
            .join("runs")
            .join(format!("{}.pickle.gz", r["name"].as_str().unwrap_or_default()))
            .exists()
    }) {
        let (planned, _) = calibrated(r, r);
        assert_eq!(
            planned,
            r["peak_requested_bytes"].as_i64().expect("peak"),
            "{}",
            r["name"]
        );
    }
}

#[test]
fn a_gpu_budget_gives_the_largest_batch_and_sequence_that_fit() {
    let q = PlanParams {
        config: Some(config("llama3_8b")),
        batch_size: Some(1),
        seq_len: Some(2048),
        weights: Some(WeightsDtype::Bf16),
        lora_rank: Some(16),
        checkpointing: Some(true),
        gpu_memory_bytes: Some(24 << 30),
        ..PlanParams::default()
    };
    let p = plan(&q, None).expect("plan");
    assert_eq!(p.parameter_count, 8_030_261_248);
    assert!(
        p.trainable_parameter_count < 10_000_000,
        "{}",
        p.trainable_parameter_count
    );
    assert_eq!(p.fits, Some(true), "{p:?}");
    let b = p.max_batch_size.expect("max batch");
    assert!(b >= 1);
    // One more sequence than the largest batch does not fit; the largest does.
    for (batch, fits) in [(b, true), (b + 1, false)] {
        let at = plan(
            &PlanParams {
                batch_size: Some(batch),
                ..q.clone()
            },
            None,
        )
        .expect("plan");
        assert_eq!(
            at.fits,
            Some(fits),
            "batch {batch}: {}",
            at.predicted_peak_reserved_bytes
        );
    }
    // At a batch past the largest, each single change is planned as its own settings would be,
    // those that fit first; the largest batch is one of them and fits.
    let over = plan(
        &PlanParams {
            batch_size: Some(b + 4),
            ..q.clone()
        },
        None,
    )
    .expect("plan");
    assert_eq!(over.fits, Some(false));
    assert!(!over.alternatives.is_empty());
    let fits: Vec<bool> = over.alternatives.iter().map(|a| a.fits).collect();
    assert!(fits.windows(2).all(|w| w[0] >= w[1]), "{fits:?}");
    for a in &over.alternatives {
        let direct = plan(
            &a.applied_to(&PlanParams {
                batch_size: Some(b + 4),
                gpu_memory_bytes: None,
                ..q.clone()
            }),
            None,
        )
        .expect("plan");
        assert_eq!(
            a.predicted_peak_reserved_bytes, direct.predicted_peak_reserved_bytes,
            "{}",
            a.label
        );
    }
    let largest = over
        .alternatives
        .iter()
        .find(|a| a.change == memlens_api::PlanChange::LargestBatch)
        .expect("the largest batch");
    assert!(largest.fits && largest.batch_size == Some(b), "{largest:?}");
    // A full fine-tune of the same model with AdamW does not fit 24 GiB at all.
    let full = plan(
        &PlanParams {
            lora_rank: None,
            weights: None,
            ..q.clone()
        },
        None,
    )
    .expect("plan");
    assert_eq!(full.fits, Some(false));
    assert_eq!(full.max_batch_size, Some(0));
}

#[test]
fn an_unknown_architecture_names_the_missing_field() {
    let e = plan(
        &PlanParams {
            config: Some(r#"{"model_type": "mamba", "d_model": 768, "n_layer": 24, "vocab_size": 50280}"#.into()),
            ..PlanParams::default()
        },
        None,
    )
    .expect_err("no hidden_size");
    let text = e.to_string();
    assert!(
        text.contains("mamba") && text.contains("hidden_size") && text.contains("--params"),
        "{text}"
    );
    let e = plan(
        &PlanParams {
            config: Some(
                r#"{"model_type": "qwen2_moe", "hidden_size": 2048, "num_hidden_layers": 24, "num_attention_heads": 16,
                    "intermediate_size": 5632, "moe_intermediate_size": 1408, "num_experts": 60, "vocab_size": 151936}"#
                    .into(),
            ),
            ..PlanParams::default()
        },
        None,
    )
    .expect_err("an MoE without its layout");
    assert!(e.to_string().contains("num_experts"), "{e}");
    // --params N plans the model states alone.
    let p = plan(
        &PlanParams {
            params: Some(1_000_000_000),
            ..PlanParams::default()
        },
        None,
    )
    .expect("plan");
    assert_eq!(p.parameter_count, 1_000_000_000);
    assert!(
        p.assumptions.iter().any(|a| a.contains("no config")),
        "{:?}",
        p.assumptions
    );
}
