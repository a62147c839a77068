//! `memlens plan --model CONFIG.json …`: the memory a training step will take before it runs,
//! from a Hugging Face config ([`memlens_core::plan`]) or a bundled model by name (`--model
//! meta-llama/Llama-3.1-8B`, `--list-models`); `--calibrate RUN.pickle` replays a measured run
//! of the same model instead of the formula's activations. `--serve` plans a vLLM or SGLang
//! server's startup instead (`memlens_core::plan::serve`), calibrated by its startup log.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use memlens_api::{AutocastDtype, KvCacheDtype, Limit, PlanOptimizer, PlanParams, ServingEngine, WeightsDtype};
use memlens_core::analysis::check::parse_limit;

use super::error::CommandError;
use super::render::print_json;
use crate::app::plan::{PlanAnswer, PlanRequest};
use crate::text::plan::{render_models, render_plan, render_serving_plan};

#[derive(Args)]
pub struct PlanArgs {
    /// The model's Hugging Face config.json (or the model's folder holding it), or a bundled
    /// model's name (`meta-llama/Llama-3.1-8B`, `llama-3.1-8b`): a path that exists wins.
    #[arg(long, value_name = "CONFIG.json|NAME")]
    pub model: Option<String>,
    /// List the bundled models `--model` takes by name, with their parameter counts.
    #[arg(long)]
    pub list_models: bool,
    /// Parameter count, for a model without a config memlens reads (model states only).
    #[arg(long, value_name = "N")]
    pub params: Option<u64>,
    #[arg(long)]
    pub batch_size: Option<u64>,
    /// Tokens per sequence (default: the config's context, at most 2048).
    #[arg(long)]
    pub seq_len: Option<u64>,
    /// adamw, adam, sgd_momentum, sgd, adafactor or adamw_8bit.
    #[arg(long, value_parser = wire_name::<PlanOptimizer>)]
    pub optimizer: Option<PlanOptimizer>,
    /// fp32, bf16, fp16, or nf4 (QLoRA's 4-bit base, with --lora-rank).
    #[arg(long, value_parser = wire_name::<WeightsDtype>)]
    pub weights: Option<WeightsDtype>,
    /// bf16, fp16 or none.
    #[arg(long, value_parser = wire_name::<AutocastDtype>)]
    pub autocast: Option<AutocastDtype>,
    /// Activation checkpointing of every decoder layer.
    #[arg(long)]
    pub checkpointing: bool,
    /// Only this many parameters train.
    #[arg(long, value_name = "N", conflicts_with_all = ["lora_rank", "train"])]
    pub trainable_params: Option<u64>,
    /// Only the parameters whose Hugging Face names match train (repeatable; `fnmatch`:
    /// `model.layers.6.*`, `lm_head.weight`, `*.self_attn.*`).
    #[arg(long, value_name = "GLOB", conflicts_with = "lora_rank")]
    pub train: Vec<String>,
    /// LoRA adapters of this rank (peft's get_peft_model); the base model frozen.
    #[arg(long, value_name = "R")]
    pub lora_rank: Option<u64>,
    /// The linear modules LoRA adapts (default: peft's for the model's family).
    #[arg(long, value_name = "q_proj,v_proj,…", requires = "lora_rank")]
    pub lora_targets: Option<String>,
    /// LoRA's dropout (default 0.05; 0 keeps no mask).
    #[arg(long, value_name = "P", requires = "lora_rank")]
    pub lora_dropout: Option<f64>,
    /// Micro-batches whose gradients accumulate before each optimizer step.
    #[arg(long, value_name = "N")]
    pub grad_accum_steps: Option<u64>,
    /// DeepSpeed ZeRO stage (0–3), over --gpus data-parallel GPUs.
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=3))]
    pub zero_stage: Option<u8>,
    #[arg(long)]
    pub gpus: Option<u64>,
    /// Optimizer state kept in CPU memory.
    #[arg(long)]
    pub optimizer_offload: bool,
    /// The GPU's memory (`24GiB`, `80GB`, bytes): adds whether it fits and the largest batch
    /// and sequence that do.
    #[arg(long, value_name = "SIZE")]
    pub gpu_memory: Option<String>,
    /// A snapshot of a run of the same model: its measured terms replace the formula's.
    #[arg(long, value_name = "RUN.pickle")]
    pub calibrate: Option<PathBuf>,
    /// The calibrating run's batch size (required with --calibrate).
    #[arg(long, requires = "calibrate")]
    pub run_batch_size: Option<u64>,
    /// The calibrating run's sequence length (default --seq-len).
    #[arg(long, requires = "calibrate")]
    pub run_seq_len: Option<u64>,
    /// The calibrating run used activation checkpointing.
    #[arg(long, requires = "calibrate")]
    pub run_checkpointing: bool,
    /// Plan a vLLM or SGLang server's startup instead of a training step: the KV cache the
    /// GPU leaves, its tokens and requests (`--calibrate` then takes the server's startup log).
    #[arg(long)]
    pub serve: bool,
    /// vLLM's --gpu-memory-utilization (SGLang: --mem-fraction-static); default the engine's.
    #[arg(long, value_name = "U", requires = "serve")]
    pub gpu_memory_utilization: Option<f64>,
    /// Default: the model's context length.
    #[arg(long, value_name = "L", requires = "serve")]
    pub max_model_len: Option<u64>,
    #[arg(long, value_name = "N", requires = "serve")]
    pub max_num_seqs: Option<u64>,
    /// Tensor parallel size.
    #[arg(long, value_name = "N", requires = "serve")]
    pub tp: Option<u64>,
    /// auto or fp8.
    #[arg(long, value_parser = wire_name::<KvCacheDtype>, requires = "serve")]
    pub kv_cache_dtype: Option<KvCacheDtype>,
    /// vllm (default) or sglang.
    #[arg(long, value_parser = wire_name::<ServingEngine>, requires = "serve")]
    pub engine: Option<ServingEngine>,
    /// The engine's version (`0.6.4`) where its accounting differs (default the newest).
    #[arg(long, value_name = "X.Y.Z", requires = "serve")]
    pub engine_version: Option<String>,
    #[arg(long)]
    pub json: bool,
}

/// A closed set's value by its name on the wire (`adamw_8bit`, `bf16`): the API's own enums.
fn wire_name<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, serde_json::Error> {
    serde_json::from_value(serde_json::Value::String(text.to_owned()))
}

/// The plan's request from the command line (`--model` a config's path or a model's name,
/// resolved by the request).
fn request_of(a: &PlanArgs) -> Result<PlanRequest, CommandError> {
    let gpu_memory_bytes = match a.gpu_memory.as_deref().map(parse_limit).transpose() {
        Ok(None) => None,
        Ok(Some(Limit::Bytes(b))) => Some(b),
        Ok(Some(Limit::Ratio(_))) | Err(_) => {
            return Err(CommandError::flag(
                format!("--gpu-memory {}", a.gpu_memory.as_deref().unwrap_or_default()),
                "expected a size (24GiB, 80GB, bytes)",
            ))
        }
    };
    let settings = PlanParams {
        config: None,
        model: None,
        params: a.params,
        batch_size: a.batch_size,
        seq_len: a.seq_len,
        optimizer: a.optimizer,
        weights: a.weights,
        autocast: a.autocast,
        checkpointing: a.checkpointing.then_some(true),
        trainable_params: a.trainable_params,
        lora_rank: a.lora_rank,
        lora_targets: a.lora_targets.clone(),
        lora_dropout: a.lora_dropout,
        train: (!a.train.is_empty()).then(|| a.train.join(",")),
        grad_accum_steps: a.grad_accum_steps,
        zero_stage: a.zero_stage,
        gpus: a.gpus,
        optimizer_offload: a.optimizer_offload.then_some(true),
        gpu_memory_bytes,
        calibrate: a.calibrate.as_ref().map(|p| p.display().to_string()),
        run_batch_size: a.run_batch_size,
        run_seq_len: a.run_seq_len,
        run_checkpointing: a.run_checkpointing.then_some(true),
        serve: a.serve.then_some(true),
        gpu_memory_utilization: a.gpu_memory_utilization,
        max_model_len: a.max_model_len,
        max_num_seqs: a.max_num_seqs,
        tp: a.tp,
        kv_cache_dtype: a.kv_cache_dtype,
        engine: a.engine,
        engine_version: a.engine_version.clone(),
    };
    Ok(PlanRequest {
        config_path: a.model.clone(),
        settings,
    })
}

pub fn plan(args: PlanArgs) -> ExitCode {
    if args.list_models {
        let models = memlens_core::plan::presets::models();
        if args.json {
            return print_json(&models);
        }
        print!("{}", render_models(&models));
        return ExitCode::SUCCESS;
    }
    let answer = match request_of(&args).and_then(|r| crate::app::plan::plan(&r)) {
        Ok(answer) => answer,
        Err(e) => {
            eprintln!("memlens: {e}");
            return ExitCode::from(2);
        }
    };
    match answer {
        PlanAnswer::Training(p) if args.json => print_json(&p),
        PlanAnswer::Serving(p) if args.json => print_json(&p),
        PlanAnswer::Training(p) => {
            print!("{}", render_plan(&p));
            ExitCode::SUCCESS
        }
        PlanAnswer::Serving(p) => {
            print!("{}", render_serving_plan(&p));
            ExitCode::SUCCESS
        }
    }
}
