//! What a vLLM or SGLang server's startup log says of its GPU memory (`files[].serving`): the
//! budget it drew (weights, the profile run's activation peak, memory outside PyTorch, CUDA
//! graphs, the KV cache), what the KV cache holds in tokens and requests, and, when the server
//! did not start, why and what to change, each change with its number. The closed sets the
//! answer carries (engine, cause, action) sit beside it.

use serde::{Deserialize, Serialize};

/// Which serving engine printed the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ServingEngine {
    Vllm,
    Sglang,
}

impl ServingEngine {
    /// For people: `vLLM`, `SGLang`.
    pub fn label(self) -> &'static str {
        match self {
            ServingEngine::Vllm => "vLLM",
            ServingEngine::Sglang => "SGLang",
        }
    }
}

/// Why a server did not start (the `serving.failure.cause` contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ServingCause {
    /// The KV cache holds fewer tokens than one request of `max_model_len` needs.
    MaxModelLenOverKvCache,
    /// Nothing was left for the KV cache once weights, activations and the rest were counted.
    NoKvCacheMemory,
    /// The free memory at startup is below what `gpu_memory_utilization` asks for (another
    /// process holds the difference).
    FreeMemoryBelowUtilization,
    /// Out of memory while the weights were loaded.
    OomLoadingWeights,
    /// Out of memory in the profile run that measures the activation peak.
    OomInProfileRun,
    /// Out of memory while CUDA graphs were captured (after the KV cache was sized).
    OomInCudaGraphCapture,
}

/// A change to a server's settings (the `serving.failure.remedies[].action` contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ServingAction {
    /// `--max-model-len` (SGLang: `--context-length`); value: the longest that fits.
    LowerMaxModelLen,
    /// `--gpu-memory-utilization`; value: the least that fits.
    RaiseGpuMemoryUtilization,
    /// `--gpu-memory-utilization`; value: the most that leaves room for what is outside it.
    LowerGpuMemoryUtilization,
    /// SGLang's `--mem-fraction-static`; value: the least that fits.
    RaiseMemFractionStatic,
    /// `--kv-cache-dtype fp8`: half the KV bytes per token; value: the tokens it would hold.
    Fp8KvCache,
    /// fp8 or int4 weights; value: the bytes an fp8 copy of 16-bit weights frees per GPU.
    QuantizeWeights,
    /// `--tensor-parallel-size`; value: the next size.
    MoreTensorParallel,
    /// `--max-num-seqs` (SGLang: `--max-running-requests`): fewer CUDA graphs and a smaller
    /// sampler; value: the setting to try.
    LowerMaxNumSeqs,
    /// `--enforce-eager` (SGLang: `--disable-cuda-graph`); value: the bytes of CUDA graphs saved.
    EnforceEager,
}

/// One remedy: the setting, its number where the log gives one, and what it does.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct ServingRemedy {
    pub action: ServingAction,
    /// Tokens, a fraction, bytes or a parallel size, as the action says; `None` when the log
    /// lacks what it would be computed from.
    pub value: Option<f64>,
    pub note: String,
}

/// Why the server stopped and what to change.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct ServingFailure {
    pub cause: ServingCause,
    /// The error as printed (the line, from its message on).
    pub message: String,
    /// 1-based line of the error.
    pub line: usize,
    pub remedies: Vec<ServingRemedy>,
}

/// What one startup of a serving engine says of its memory. Byte figures are per GPU (each
/// tensor-parallel rank prints its own; the first rank's are read), converted from the printed
/// GiB (vLLM and SGLang print `GB` for 2^30 bytes too) and so within half the last printed digit.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct ServingSummary {
    pub engine: ServingEngine,
    /// The engine's version when the log names it (`0.6.4.post1`).
    #[serde(default)]
    pub version: Option<String>,
    /// The model as the engine names it (path, hub id, or SGLang's architecture).
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub tensor_parallel_size: Option<i64>,
    #[serde(default)]
    pub pipeline_parallel_size: Option<i64>,
    /// The weights' dtype as printed (`torch.bfloat16`, `auto`).
    #[serde(default)]
    pub dtype: Option<String>,
    /// `auto` (the weights' dtype), `fp8`, `fp8_e4m3`, …
    #[serde(default)]
    pub kv_cache_dtype: Option<String>,
    /// vLLM's share of the whole GPU it may use.
    #[serde(default)]
    pub gpu_memory_utilization: Option<f64>,
    /// SGLang's share of the whole GPU for weights and the KV cache.
    #[serde(default)]
    pub mem_fraction_static: Option<f64>,
    #[serde(default)]
    pub total_gpu_memory_bytes: Option<i64>,
    /// Free memory when the engine started (SGLang's `avail mem` before the weights, vLLM's
    /// `Free memory on device`).
    #[serde(default)]
    pub free_at_start_bytes: Option<i64>,
    #[serde(default)]
    pub weights_bytes: Option<i64>,
    /// The profile run's activation peak (PyTorch's peak above the weights).
    #[serde(default)]
    pub activation_peak_bytes: Option<i64>,
    /// Memory of the process outside PyTorch's allocator (CUDA context, NCCL buffers).
    #[serde(default)]
    pub non_torch_bytes: Option<i64>,
    /// CUDA graphs as captured (or as estimated before the KV cache was sized, vLLM ≥ 0.21).
    #[serde(default)]
    pub cuda_graph_bytes: Option<i64>,
    /// The KV cache's bytes (vLLM: the memory it was given; SGLang: K + V as allocated).
    #[serde(default)]
    pub kv_cache_bytes: Option<i64>,
    #[serde(default)]
    pub kv_cache_tokens: Option<i64>,
    /// vLLM's `# GPU blocks`.
    #[serde(default)]
    pub kv_cache_blocks: Option<i64>,
    /// Tokens a block holds (the tokens over the blocks, or the engine's setting).
    #[serde(default)]
    pub block_size: Option<i64>,
    /// KV cache bytes over its tokens (all layers of this GPU's share of the heads).
    #[serde(default)]
    pub kv_bytes_per_token: Option<i64>,
    #[serde(default)]
    pub max_model_len: Option<i64>,
    /// `--max-num-seqs` (SGLang: `max_running_requests`).
    #[serde(default)]
    pub max_num_seqs: Option<i64>,
    /// How many requests of `concurrency_tokens` tokens the KV cache holds at once.
    #[serde(default)]
    pub max_concurrency: Option<f64>,
    #[serde(default)]
    pub concurrency_tokens: Option<i64>,
    /// Tensor-parallel ranks that printed the same lines.
    #[serde(default)]
    pub ranks: usize,
    /// Startups in the file (a log of several restarts): the one read is the last that failed,
    /// else the last.
    #[serde(default)]
    pub startups: usize,
    /// 1-based line where the startup read begins.
    #[serde(default)]
    pub line: usize,
    #[serde(default)]
    pub failure: Option<ServingFailure>,
    /// One sentence for people, the failure first.
    pub verdict: String,
    /// What the figures rest on and what the log did not say.
    #[serde(default)]
    pub notes: Vec<String>,
}

/// The KV cache's element type in a serving plan: `auto` (the weights' 16-bit type) or `fp8`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum KvCacheDtype {
    #[default]
    Auto,
    Fp8,
}

/// `memlens plan --serve` (`GET /api/plan?serve=true`): a serving engine's startup predicted
/// from the model's config before it runs — the same figures a startup log gives
/// (`serving`), whether one request of `max_model_len` fits, and the longest `max_model_len`
/// and the most requests that do.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct ServingPlan {
    /// The startup as predicted, in the log summary's fields (per GPU); its `notes` are every
    /// assumption the numbers rest on.
    pub serving: ServingSummary,
    /// The KV cache holds one request of `serving.max_model_len` tokens.
    pub fits_max_model_len: bool,
    /// The longest `max_model_len` one request of which the KV cache holds (at most the
    /// model's context; 0 when nothing is left for the KV cache).
    pub largest_max_model_len: i64,
    /// Requests of `serving.max_model_len` tokens the KV cache holds at once, at most
    /// `max_num_seqs`.
    pub largest_concurrency: i64,
    /// The tokens of the profile run's dummy batch (vLLM's `max_num_batched_tokens`).
    #[serde(default)]
    pub max_num_batched_tokens: Option<i64>,
    /// The startup log whose measured figures replace the estimate's.
    #[serde(default)]
    pub calibrated_from: Option<String>,
}
