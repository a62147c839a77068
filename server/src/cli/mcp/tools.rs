//! The tools: each one what a command of the CLI does (`analyze`, `diff`, `whatif`, `plan`, `check`,
//! the summary of a report by its link), no analysis of its own. Each answers a short text
//! first, then its JSON within [`MAX_ANSWER_BYTES`]; a tool that cannot do what it is asked
//! answers an error naming the file and the problem.

use std::path::PathBuf;
use std::time::Duration;

use memlens_api::{AnalyzeOutput, CategoryLimit};
use serde::Deserialize;
use serde_json::{json, Value};

use super::bound::{bounded_json, MAX_ANSWER_BYTES};
use crate::app::check::{Baseline, CheckRequest, DEFAULT_MAX_PEAK_INCREASE};
use crate::app::error::CommandError;
use crate::app::source::{report_at, SourceError};
use crate::cli::render::{gib, render_gpu_log_text, render_run_text, render_text};
use memlens_core::analysis::check::ThresholdError;
use memlens_core::pipeline::{run, Input, NoSink};

/// What a tool answers: its text summary and its JSON, or why it could not.
pub type Answer = Result<(String, Value), ToolError>;

/// Why a tool could not answer: told to the client as the tool's error, naming the file or
/// argument at fault.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("no tool {0:?}")]
    NoTool(String),
    #[error("arguments: {0}")]
    Arguments(serde_json::Error),
    /// An argument missing or of the wrong kind (said in full).
    #[error("{0}")]
    Argument(&'static str),
    #[error(transparent)]
    Command(#[from] CommandError),
    #[error(transparent)]
    Check(#[from] SourceError),
    #[error(transparent)]
    Threshold(#[from] ThresholdError),
    #[error("the pasted text could not be kept for reading: {0}")]
    Scratch(std::io::Error),
    #[error("the answer: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the answer does not fit")]
    TooLarge,
    /// The tool's thread panicked or was cancelled.
    #[error("the tool failed: {0}")]
    Failed(tokio::task::JoinError),
}

/// The tools as listed to a client: name, description (written for a model) and input schema.
pub fn catalogue() -> Vec<(&'static str, &'static str, Value)> {
    let max_list = json!({"type": "integer", "minimum": 1, "description": "Lists longer than this are cut to their first items (default 12); each cut list says so beside it (`<key>_cut`)."});
    vec![
        (
            "analyze_files",
            "Analyse GPU memory files of one training run: PyTorch CUDA allocator snapshots (torch.cuda.memory._dump_snapshot pickles), Nsight Systems exports, NVML/nvidia-smi logs, OOM error texts. Answers what the peak is made of (parameters, gradients, optimizer state, activations, temporaries by category and by stack), the OOMs with their cause and what to change, leaks, fragmentation, and for several ranks the worst one. The same JSON as `memlens analyze --json`, after a short text summary.",
            json!({"type": "object", "properties": {
                "paths": {"type": "array", "items": {"type": "string"}, "minItems": 1, "description": "Paths of the files on this machine."},
                "max_list": max_list,
            }, "required": ["paths"]}),
        ),
        (
            "explain_oom",
            "Explain a CUDA out-of-memory failure from pasted text: the OOM error message, a training log holding it, torch.cuda.memory_summary() output or an nvidia-smi screen. Answers each OOM found: what was asked for, what was free and reserved, whether memory was fragmented or held by another process or a cap, and what to change.",
            json!({"type": "object", "properties": {
                "text": {"type": "string", "description": "The text as the job left it."},
                "max_list": max_list,
            }, "required": ["text"]}),
        ),
        (
            "compare_runs",
            "Compare two allocator snapshots (A − B): the allocated peak's difference to the byte, split by category and by stack (matched on user frames), reserved memory and fragmentation of each, and each iteration's peak. Answers a one-line verdict first.",
            json!({"type": "object", "properties": {
                "a": {"type": "string", "description": "Path of snapshot A."},
                "b": {"type": "string", "description": "Path of snapshot B (the same path compares two devices of one file)."},
                "device_a": {"type": "integer"}, "device_b": {"type": "integer"},
                "max_list": max_list,
            }, "required": ["a", "b"]}),
        ),
        (
            "what_if",
            "Predict a measured run's allocated peak under another setting: batch size, activation checkpointing, activation dtype, optimizer, ZeRO stage and GPU count, optimizer offload; with gpu_memory_bytes also the largest batch that fits. Each prediction lists the assumptions it rests on.",
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "Path of the run's snapshot."},
                "run_batch_size": {"type": "integer", "minimum": 1, "description": "The batch size the run used."},
                "set": {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]},
                        "description": "The changes: batch_size, activation_checkpointing, activations (bf16|fp16|fp32), optimizer (adam|adamw|sgd_momentum|sgd|none), zero_stage, gpus, optimizer_offload, expandable_segments, gpu_memory_bytes."},
            }, "required": ["path"]}),
        ),
        (
            "plan",
            "Plan a training run's GPU memory before running it, from the model's Hugging Face config.json or a bundled model's name (`model`: meta-llama/Llama-3.1-8B, qwen3-8b, mixtral-8x7b, … — Llama 2/3/3.1/3.2/3.3, Mistral, Mixtral, Qwen2.5, Qwen3, Gemma 2/3, Phi-3/4, DeepSeek V2-Lite/V3, OLMo 2, SmolLM2, GPT-2, Pythia, Falcon): exact parameter count, the peak by category (parameters, gradients, optimizer state, activations, temporaries), whether it fits a GPU and the largest batch and sequence that do. Calibrated by a snapshot of a run of the same model when `calibrate` names one (then run_batch_size and run_seq_len are needed). Each number lists the assumptions it rests on.",
            json!({"type": "object", "properties": {
                "config_path": {"type": "string", "description": "Path of the model's config.json, or of the model's folder holding it (a bundled model's name where no such path exists)."},
                "model": {"type": "string", "description": "A bundled model by name: its Hugging Face id (meta-llama/Llama-3.1-8B) or a short name (llama-3.1-8b), any case; `memlens plan --list-models` lists them."},
                "params": {"type": "integer", "description": "Parameter count, for a model without a config memlens reads."},
                "batch_size": {"type": "integer", "minimum": 1}, "seq_len": {"type": "integer", "minimum": 1},
                "optimizer": {"enum": ["adamw", "adam", "sgd_momentum", "sgd", "adafactor", "adamw_8bit"]},
                "weights": {"enum": ["fp32", "bf16", "fp16", "nf4"], "description": "nf4: QLoRA's 4-bit base (with lora_rank)."}, "autocast": {"enum": ["bf16", "fp16", "none"]},
                "checkpointing": {"type": "boolean"}, "trainable_params": {"type": "integer"},
                "train": {"type": ["string", "array"], "items": {"type": "string"}, "description": "Only the parameters whose Hugging Face names match one of these comma-separated fnmatch globs train (model.layers.6.*,lm_head.weight; *.self_attn.*)."},
                "lora_rank": {"type": "integer", "minimum": 1, "description": "LoRA adapters of this rank (peft); the base frozen."},
                "lora_targets": {"type": ["string", "array"], "items": {"type": "string"}, "description": "Comma-separated linear modules LoRA adapts (q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj); default peft's for the family."},
                "lora_dropout": {"type": "number", "minimum": 0, "maximum": 1, "description": "LoRA's dropout (default 0.05)."},
                "grad_accum_steps": {"type": "integer", "minimum": 1, "description": "Micro-batches whose gradients accumulate before each optimizer step."},
                "zero_stage": {"type": "integer", "minimum": 0, "maximum": 3}, "gpus": {"type": "integer", "minimum": 1},
                "optimizer_offload": {"type": "boolean"}, "gpu_memory_bytes": {"type": "integer", "description": "The GPU's memory in bytes (24 GiB = 25769803776)."},
                "calibrate": {"type": "string", "description": "Path of a snapshot of a run of the same model (with serve: of the server's vLLM or SGLang startup log)."},
                "run_batch_size": {"type": "integer"}, "run_seq_len": {"type": "integer"}, "run_checkpointing": {"type": "boolean"},
                "serve": {"type": "boolean", "description": "Plan a vLLM or SGLang server's startup instead: weights, the profile run's activations, CUDA graphs and the KV cache per GPU, its tokens, whether one request of max_model_len fits, the longest max_model_len and the most requests that do (needs gpu_memory_bytes or a calibrating log; weights then bf16, fp8 or int4)."},
                "gpu_memory_utilization": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "description": "vLLM's --gpu-memory-utilization (SGLang: --mem-fraction-static)."},
                "max_model_len": {"type": "integer", "minimum": 1}, "max_num_seqs": {"type": "integer", "minimum": 1},
                "tp": {"type": "integer", "minimum": 1, "description": "Tensor parallel size."},
                "kv_cache_dtype": {"enum": ["auto", "fp8"]}, "engine": {"enum": ["vllm", "sglang"]},
                "engine_version": {"type": "string", "description": "The engine's version (0.6.4) where its accounting differs; default the newest."},
            }}),
        ),
        (
            "check",
            "Check a run's memory against a baseline, as a CI gate would: passed or regression, the allocated and reserved peaks' change, each category's, the stacks that moved most, and which limits were broken. Each side is a snapshot path or a memlens report link (http…/r/ID); or the baseline is a job's last good run (http…/j/ID).",
            json!({"type": "object", "properties": {
                "new": {"type": "string"},
                "baseline": {"type": "string"},
                "baseline_job": {"type": "string"},
                "thresholds": {"type": "object", "properties": {
                    "max_peak_increase": {"type": "string", "description": "`5%` (the default) or a size (`512MiB`)."},
                    "max_reserved_increase": {"type": "string"},
                    "max_category_increase": {"type": "object", "additionalProperties": {"type": "string"},
                                              "description": "Per category (parameter, gradient, optimizer_state, activation, temporary, input, cache, other): `10%` or a size."},
                }},
            }, "required": ["new"]}),
        ),
        (
            "open_report",
            "Read a report from a memlens server by its share link (http…/r/ID): the same summary as analyze_files, for a run someone uploaded.",
            json!({"type": "object", "properties": {
                "url": {"type": "string"},
                "max_list": max_list,
            }, "required": ["url"]}),
        ),
    ]
}

/// Runs tool `name` on `arguments` (blocking: file analyses).
pub fn call(name: &str, arguments: Value) -> Answer {
    match name {
        "analyze_files" => analyze_files(parse(arguments)?),
        "explain_oom" => explain_oom(parse(arguments)?),
        "compare_runs" => compare_runs(parse(arguments)?),
        "what_if" => what_if(parse(arguments)?),
        "plan" => plan(arguments),
        "check" => check(parse(arguments)?),
        "open_report" => open_report(parse(arguments)?),
        other => Err(ToolError::NoTool(other.to_owned())),
    }
}

fn parse<T: serde::de::DeserializeOwned>(arguments: Value) -> Result<T, ToolError> {
    serde_json::from_value(arguments).map_err(ToolError::Arguments)
}

fn default_max_list() -> usize {
    12
}

/// `value` within the answer's budget, its lists cut to `max_list`.
fn bounded(value: &impl serde::Serialize, max_list: usize) -> Result<Value, ToolError> {
    let v = serde_json::to_value(value)?;
    let text = bounded_json(&v, max_list, MAX_ANSWER_BYTES - 4096).ok_or(ToolError::TooLarge)?;
    Ok(serde_json::from_str(&text)?)
}

/// The text summary of a report: each file's verdict and numbers, the run, the logs.
fn summary_text(out: &AnalyzeOutput) -> String {
    let mut s = String::new();
    for f in &out.files {
        s += &render_text(f);
    }
    for g in &out.gpu_logs {
        s += &render_gpu_log_text(g);
    }
    if let Some(r) = &out.run {
        s += &render_run_text(r);
    }
    for k in &out.skipped {
        s += &format!("{}: kept aside: {}\n", k.file, k.reason);
    }
    // The summary is a lead, not the whole: the JSON has the rest.
    s.chars().take(6_000).collect()
}

#[derive(Deserialize)]
struct AnalyzeFiles {
    paths: Vec<PathBuf>,
    #[serde(default = "default_max_list")]
    max_list: usize,
}

fn analyze_files(a: AnalyzeFiles) -> Answer {
    if a.paths.is_empty() {
        return Err(ToolError::Argument("paths: give at least one file"));
    }
    let out = crate::app::analyze::analyze_files(&a.paths, None)?;
    Ok((summary_text(&out), bounded(&out, a.max_list)?))
}

#[derive(Deserialize)]
struct ExplainOom {
    text: String,
    #[serde(default = "default_max_list")]
    max_list: usize,
}

fn explain_oom(a: ExplainOom) -> Answer {
    let dir = tempfile::tempdir().map_err(ToolError::Scratch)?;
    let path = dir.path().join("pasted.txt");
    std::fs::write(&path, a.text.as_bytes()).map_err(ToolError::Scratch)?;
    // Reported under what it is, not the scratch file it was read from.
    let mut input = Input::path(&path);
    input.name = "the pasted text".into();
    let out = run(vec![input], Default::default(), &mut NoSink).map_err(CommandError::from)?;
    Ok((summary_text(&out), bounded(&out, a.max_list)?))
}

#[derive(Deserialize)]
struct CompareRuns {
    a: PathBuf,
    b: PathBuf,
    device_a: Option<i64>,
    device_b: Option<i64>,
    #[serde(default = "default_max_list")]
    max_list: usize,
}

fn compare_runs(a: CompareRuns) -> Answer {
    let c = crate::app::compare::compare_files((&a.a, a.device_a), (&a.b, a.device_b), None)?;
    let mut v = serde_json::to_value(&c)?;
    // Both lines bucketed for drawing: no use to a model, and most of the bytes.
    if let Some(o) = v.as_object_mut() {
        o.remove("timeline");
    }
    let text = format!(
        "{}\nA − B: allocated peak {} B, reserved {} B",
        c.headline, c.peak_delta_bytes, c.reserved_delta_bytes
    );
    Ok((text, bounded(&v, a.max_list)?))
}

/// `plan`: the arguments are the plan's settings, with the config and the calibrating run as paths
/// (a `config_path` that is no path but a bundled model's name is taken as `model`, as `--model`).
fn plan(arguments: Value) -> Answer {
    let Value::Object(mut args) = arguments else {
        return Err(ToolError::Argument("arguments: expected an object"));
    };
    // The lists may come as arrays too: the request holds them comma-separated.
    for key in ["train", "lora_targets"] {
        if let Some(Value::Array(items)) = args.get(key) {
            let joined: Option<Vec<&str>> = items.iter().map(Value::as_str).collect();
            let joined = joined
                .ok_or(ToolError::Argument("train, lora_targets: expected strings"))?
                .join(",");
            args.insert(key.into(), Value::String(joined));
        }
    }
    if let Some(path) = args.remove("config_path") {
        let path = path
            .as_str()
            .ok_or(ToolError::Argument("config_path: expected a path"))?
            .to_owned();
        let (config, model) = crate::app::plan::config_or_name(&path)?;
        if let Some(text) = config {
            args.insert("config".into(), Value::String(text));
        }
        if let Some(name) = model {
            args.insert("model".into(), Value::String(name));
        }
    }
    let q: memlens_api::PlanParams = parse(Value::Object(args))?;
    let calibrate = q.calibrate.as_ref().map(PathBuf::from);
    if q.serve == Some(true) {
        let p = crate::app::plan::make_serving_plan(&q, calibrate.as_ref())?;
        let v = serde_json::to_value(&p)?;
        return Ok((crate::cli::plan::render_serving_plan(&p), v));
    }
    let p = crate::app::plan::make_plan(&q, calibrate.as_ref())?;
    let v = serde_json::to_value(&p)?;
    Ok((crate::cli::plan::render_plan(&p), v))
}

#[derive(Deserialize)]
struct WhatIf {
    path: PathBuf,
    run_batch_size: Option<u64>,
    #[serde(default)]
    set: serde_json::Map<String, Value>,
}

fn what_if(a: WhatIf) -> Answer {
    let mut pairs: Vec<(String, String)> = a
        .set
        .iter()
        .map(|(k, v)| {
            let v = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.clone(), v)
        })
        .collect();
    if let Some(b) = a.run_batch_size {
        pairs.push(("run_batch_size".into(), b.to_string()));
    }
    let scenario = crate::app::whatif::scenario_of(&pairs).map_err(|e| match e {
        // The setting at fault as this tool takes it.
        CommandError::Flag { flag, problem } => CommandError::Flag {
            flag: flag.replace("--set ", "set."),
            problem,
        },
        other => other,
    })?;
    let out = crate::app::whatif::predict(std::slice::from_ref(&a.path), &scenario, None)?;
    let mut text = String::new();
    for f in &out.files {
        for d in &f.devices {
            text += &format!(
                "{} device {}: peak allocated {} → predicted {}{}\n",
                f.file,
                d.device,
                gib(d.peak_allocated_bytes),
                gib(d.predicted_peak_allocated_bytes),
                d.max_batch_size
                    .map_or(String::new(), |b| format!("; largest batch that fits: {b}"))
            );
        }
    }
    Ok((text, bounded(&out, default_max_list())?))
}

#[derive(Deserialize)]
struct Check {
    new: String,
    baseline: Option<String>,
    baseline_job: Option<String>,
    #[serde(default)]
    thresholds: CheckLimits,
}

/// The limits as `memlens check` takes them, as text.
#[derive(Deserialize, Default)]
struct CheckLimits {
    max_peak_increase: Option<String>,
    max_reserved_increase: Option<String>,
    #[serde(default)]
    max_category_increase: serde_json::Map<String, Value>,
}

fn check(a: Check) -> Answer {
    use memlens_core::analysis::check::{parse_category_limit, parse_limit};
    let limit = |s: &Option<String>| s.as_deref().map(parse_limit).transpose();
    let t = a.thresholds;
    let categories = t
        .max_category_increase
        .iter()
        .map(|(c, l)| {
            let l = l.as_str().map_or_else(|| l.to_string(), str::to_owned);
            parse_category_limit(&format!("{c}={l}"))
        })
        .collect::<Result<Vec<CategoryLimit>, ThresholdError>>()?;
    let baseline = match (a.baseline, a.baseline_job) {
        (Some(b), None) => Baseline::Run(b),
        (None, Some(job)) => Baseline::LastGoodOfJob(job),
        _ => return Err(ToolError::Argument("give one of baseline and baseline_job")),
    };
    let request = CheckRequest {
        new: a.new,
        baseline,
        max_peak_increase: limit(&t.max_peak_increase)?.unwrap_or(DEFAULT_MAX_PEAK_INCREASE),
        max_reserved_increase: limit(&t.max_reserved_increase)?,
        max_category_increase: categories,
        // An agent waits less than CI for a report being analysed.
        wait: Duration::from_secs(120),
        category_rules: None,
    };
    let outcome = crate::app::check::check(&request)?;
    Ok((outcome.verdict.clone(), bounded(&outcome, default_max_list())?))
}

#[derive(Deserialize)]
struct OpenReport {
    url: String,
    #[serde(default = "default_max_list")]
    max_list: usize,
}

fn open_report(a: OpenReport) -> Answer {
    let out = report_at(&a.url, Duration::from_secs(60))?;
    Ok((summary_text(&out), bounded(&out, a.max_list)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_tool_plans_a_server_with_serve() {
        let (text, v) = call(
            "plan",
            json!({"serve": true, "model": "meta-llama/Llama-3.1-8B", "gpu_memory_bytes": 25_318_832_210i64,
                   "gpu_memory_utilization": 0.9, "max_model_len": 29000, "engine_version": "0.6.4"}),
        )
        .expect("plan");
        // The RTX 3090 log's settings (docs/plan.md#serving): 25,120 tokens, short of 29,000.
        assert_eq!(v["largest_max_model_len"], 25120);
        assert_eq!(v["fits_max_model_len"], false);
        assert!(text.starts_with("does not fit max_model_len 29000"), "{text}");
    }
}
