//! The plan: a memory budget for a training run before it runs, from a Hugging Face
//! `config.json` (`memlens plan`, `GET /api/plan`, the Plan page), optionally calibrated by a
//! measured run of the same model.

use serde::{Deserialize, Serialize};

use crate::CategoryBytes;

/// The architectures whose parameters are counted exactly from their config (`model_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ModelFamily {
    Llama,
    Mistral,
    Qwen2,
    Qwen3,
    /// Qwen3's mixture of experts (`qwen3_moe`).
    Qwen3Moe,
    Mixtral,
    Gemma,
    Gemma2,
    /// Gemma 3's language model (`gemma3_text`, or a `gemma3` config's `text_config`).
    Gemma3,
    /// OLMo 2: norms after attention and MLP, q/k norms over all heads.
    Olmo2,
    /// DeepSeek V2 and V3: multi-head latent attention, shared and routed experts.
    DeepseekV2,
    DeepseekV3,
    Phi,
    Phi3,
    Gpt2,
    GptNeox,
    Falcon,
    /// Another `model_type` with Llama's config fields, counted as a Llama-style decoder (not
    /// exact); or no config at all (`params` given).
    Other,
}

/// The optimizer of the planned run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum PlanOptimizer {
    #[default]
    Adamw,
    Adam,
    SgdMomentum,
    Sgd,
    /// Hugging Face's Adafactor (no first moment; factored second moment of matrices).
    Adafactor,
    /// bitsandbytes' 8-bit AdamW (block-wise quantised states).
    #[serde(rename = "adamw_8bit")]
    Adamw8bit,
}

/// The element type the model's weights are stored in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum WeightsDtype {
    #[default]
    Fp32,
    Bf16,
    Fp16,
    /// 8-bit floating point weights (serving plans only).
    Fp8,
    /// 4-bit integer weights with 16-bit group scales (serving plans only: GPTQ, AWQ).
    Int4,
    /// QLoRA's 4-bit NormalFloat base (bitsandbytes `load_in_4bit`, `nf4`, double quantisation):
    /// the linear layers' weights packed two to a byte with their block constants, the rest
    /// (embeddings, norms, the head) in fp32 as `prepare_model_for_kbit_training` leaves them.
    Nf4,
}

/// `torch.autocast` around the forward pass (`none`: the weights' own type throughout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum AutocastDtype {
    #[default]
    Bf16,
    Fp16,
    None,
}

/// Where in the training step the planned peak falls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum PlanPhase {
    /// The loss and the start of backward: every saved activation is still held.
    LossBackward,
    /// Backward's last layers: the gradients are nearly all made, a recomputed block is held.
    Backward,
    /// The optimizer step: gradients, state and the step's temporaries.
    OptimizerStep,
}

impl PlanPhase {
    /// The moment in words.
    pub fn label(self) -> &'static str {
        match self {
            PlanPhase::LossBackward => "the loss and the start of backward",
            PlanPhase::Backward => "the end of backward",
            PlanPhase::OptimizerStep => "the optimizer step",
        }
    }
}

impl PlanAlternative {
    /// `settings` with this change made.
    pub fn applied_to(&self, settings: &PlanParams) -> PlanParams {
        let mut p = settings.clone();
        match self.change {
            PlanChange::Checkpointing => p.checkpointing = Some(true),
            PlanChange::Bf16Weights => {
                p.weights = Some(WeightsDtype::Bf16);
                p.autocast = Some(AutocastDtype::None);
            }
            PlanChange::Lora => {
                p.lora_rank = Some(16);
                p.trainable_params = None;
            }
            PlanChange::Adamw8bit => p.optimizer = Some(PlanOptimizer::Adamw8bit),
            PlanChange::OptimizerOffload => p.optimizer_offload = Some(true),
            PlanChange::LargestBatch => p.batch_size = self.batch_size.or(p.batch_size),
        }
        p
    }
}

impl Plan {
    /// The plan's verdict in one line: `fits in 24.00 GiB: peak … allocated, … reserved + …
    /// CUDA context` (or `does not fit in …`, or `needs …` without a GPU).
    pub fn verdict(&self) -> String {
        let peak = format!(
            "peak {} allocated, {} reserved + {} CUDA context",
            crate::bytes_label(self.predicted_peak_allocated_bytes),
            crate::bytes_label(self.predicted_peak_reserved_bytes),
            crate::bytes_label(self.outside_allocator_bytes)
        );
        match (self.fits, self.gpu_memory_bytes) {
            (Some(true), Some(g)) => format!("fits in {}: {peak}", crate::bytes_label(g)),
            (Some(false), Some(g)) => format!("does not fit in {}: {peak}", crate::bytes_label(g)),
            _ => format!("needs {peak}"),
        }
    }
}

/// `GET /api/plan?…`: the settings of a plan (the Plan page's URL holds the same query).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams, schemars::JsonSchema))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct PlanParams {
    /// The model's Hugging Face `config.json`, as text.
    pub config: Option<String>,
    /// A bundled model by name, when no `config` is given: its Hugging Face id
    /// (`meta-llama/Llama-3.1-8B`) or a short name (`llama-3.1-8b`), any case.
    pub model: Option<String>,
    /// Parameter count, for a model without a config this tool reads (no activations then).
    pub params: Option<u64>,
    /// Sequences per step (default 1).
    pub batch_size: Option<u64>,
    /// Tokens per sequence (default: the config's context length, at most 2048).
    pub seq_len: Option<u64>,
    pub optimizer: Option<PlanOptimizer>,
    pub weights: Option<WeightsDtype>,
    pub autocast: Option<AutocastDtype>,
    /// Activation checkpointing of every decoder layer.
    pub checkpointing: Option<bool>,
    /// Only this many parameters train (the rest frozen: no gradient, no optimizer state).
    pub trainable_params: Option<u64>,
    /// LoRA adapters of this rank (peft's `get_peft_model`); the base model is frozen.
    pub lora_rank: Option<u64>,
    /// The linear layers LoRA adapts, by module name, comma-separated (`q_proj,v_proj`; default:
    /// peft's targets for the model's family).
    pub lora_targets: Option<String>,
    /// LoRA's dropout probability (default 0.05, as the usual recipes set it; peft's own
    /// default is 0, which keeps no mask).
    pub lora_dropout: Option<f64>,
    /// Only the parameters whose Hugging Face names match one of these globs train, comma-
    /// separated (`model.layers.6.*,lm_head.weight`; Python's `fnmatch`: `*` crosses dots).
    pub train: Option<String>,
    /// Micro-batches whose gradients are accumulated before each optimizer step (default 1).
    pub grad_accum_steps: Option<u64>,
    /// DeepSpeed ZeRO stage 0–3, over `gpus` data-parallel GPUs.
    pub zero_stage: Option<u8>,
    pub gpus: Option<u64>,
    /// Optimizer state (and its master weights) kept in CPU memory.
    pub optimizer_offload: Option<bool>,
    /// The GPU's memory in bytes: adds `fits`, `max_batch_size` and `max_seq_len`.
    pub gpu_memory_bytes: Option<i64>,
    /// A report of a run of the same model (HTTP: its id): its measured activation and temporary
    /// bytes per token replace the formula's.
    pub calibrate: Option<String>,
    /// The calibrating run's batch size and sequence length (needed with `calibrate`).
    pub run_batch_size: Option<u64>,
    pub run_seq_len: Option<u64>,
    /// The calibrating run used activation checkpointing.
    pub run_checkpointing: Option<bool>,
    /// Plan a serving engine's startup (`memlens plan --serve`) instead of a training step; with
    /// it, `calibrate` names a startup log (HTTP: a report of one).
    pub serve: Option<bool>,
    /// vLLM's `--gpu-memory-utilization` (SGLang: `--mem-fraction-static`); default the
    /// engine's.
    pub gpu_memory_utilization: Option<f64>,
    /// Default: the model's context length.
    pub max_model_len: Option<u64>,
    pub max_num_seqs: Option<u64>,
    /// Tensor parallel size (default 1).
    pub tp: Option<u64>,
    pub kv_cache_dtype: Option<crate::KvCacheDtype>,
    /// vllm (default) or sglang.
    pub engine: Option<crate::ServingEngine>,
    /// The engine's version (`0.6.4`), where its accounting differs; default the newest.
    pub engine_version: Option<String>,
}

/// `GET /api/plan/models`: one bundled model the plan knows by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct PlanModel {
    /// The Hugging Face repository id (what `model` takes, as do `name`'s short forms).
    pub id: String,
    pub name: String,
    pub aliases: Vec<String>,
    /// The config's `model_type` (the language model's, for a multimodal config).
    pub model_type: String,
    /// The parameters as the plan counts them.
    pub parameter_count: u64,
    /// The count its publisher states (rounded where they round).
    pub published_parameters: u64,
    /// Where the config's values were taken from.
    pub source: String,
}

/// The predicted memory of a training step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct Plan {
    pub model_family: ModelFamily,
    pub parameter_count: u64,
    pub trainable_parameter_count: u64,
    pub batch_size: u64,
    pub seq_len: u64,
    pub predicted_peak_allocated_bytes: i64,
    /// Allocated × the allocator's rounding and caching (the run's own ratio when calibrated).
    pub predicted_peak_reserved_bytes: i64,
    pub peak_phase: PlanPhase,
    /// What the allocated peak is made of.
    pub by_category: Vec<CategoryBytes>,
    /// CUDA context and libraries, outside PyTorch's allocator (counted against `gpu_memory_bytes`).
    pub outside_allocator_bytes: i64,
    pub gpu_memory_bytes: Option<i64>,
    /// Reserved peak + outside the allocator ≤ the GPU's memory.
    pub fits: Option<bool>,
    /// The largest batch that fits at this sequence length (0: not even one).
    pub max_batch_size: Option<u64>,
    /// The longest sequence that fits at this batch size (0: not even one token).
    pub max_seq_len: Option<u64>,
    /// The run whose measured terms the plan uses.
    pub calibrated_from: Option<String>,
    /// Every assumption the numbers rest on, in words.
    pub assumptions: Vec<String>,
    /// With `gpu_memory_bytes` and a plan that does not fit: single changes to the settings,
    /// each planned the same way, those that fit first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alternatives: Vec<PlanAlternative>,
}

/// One change to a plan's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum PlanChange {
    /// Activation checkpointing of every layer.
    Checkpointing,
    /// bf16 weights (and no autocast).
    Bf16Weights,
    /// LoRA adapters of rank 16; the base frozen.
    Lora,
    /// bitsandbytes' 8-bit AdamW.
    Adamw8bit,
    /// The optimizer state kept in CPU memory.
    OptimizerOffload,
    /// The largest batch that fits at this sequence length.
    LargestBatch,
}

/// A plan's settings with one change, and what it would take.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct PlanAlternative {
    pub change: PlanChange,
    /// The change in words (`activation checkpointing`, `batch 3`).
    pub label: String,
    /// With [`PlanChange::LargestBatch`]: that batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<u64>,
    pub predicted_peak_reserved_bytes: i64,
    pub fits: bool,
}
