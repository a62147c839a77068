//! Closed sets of the OOM explanation on the wire (`ooms[]`): what stood in the way, where in
//! the step, which change fits, which allocator printed the message.

use serde::{Deserialize, Serialize};

/// What stood in the way of a failed allocation (the `ooms[].cause` contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum OomCause {
    /// A large share of the reserve was free, but split into blocks too small for the request.
    Fragmentation,
    /// Live tensors filled what the process may use; what was reserved but free was too small
    /// a share of the reserve to matter.
    Capacity,
    /// A per-process cap (`allowed`, `set_per_process_memory_fraction`) stopped the request, or
    /// the device had most of its memory free.
    Limit,
    /// Other processes on the device held what was missing.
    OtherProcesses,
    /// CUDA graphs' or MemPools' private pools held what was missing.
    PrivatePool,
    /// Memory of this process outside PyTorch's reserve (CUDA context, NCCL, other libraries)
    /// held what was missing.
    NonPytorch,
    /// The evidence does not say enough to tell.
    Unknown,
}

impl OomCause {
    pub const ALL: [OomCause; 7] = [
        OomCause::Fragmentation,
        OomCause::Capacity,
        OomCause::Limit,
        OomCause::OtherProcesses,
        OomCause::PrivatePool,
        OomCause::NonPytorch,
        OomCause::Unknown,
    ];
    /// The wire name (`other_processes`, …).
    pub fn name(self) -> &'static str {
        match self {
            OomCause::Fragmentation => "fragmentation",
            OomCause::Capacity => "capacity",
            OomCause::Limit => "limit",
            OomCause::OtherProcesses => "other_processes",
            OomCause::PrivatePool => "private_pool",
            OomCause::NonPytorch => "non_pytorch",
            OomCause::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for OomCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Where in a training step, or in inference, an allocation failed (the `ooms[].phase`
/// contract).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum OomPhase {
    /// A training forward (what it makes is kept for backward).
    Forward,
    Backward,
    OptimizerStep,
    /// Generation's first forward: the whole prompt at once, its key/value cache made.
    Prefill,
    /// A generation step after the prefill: one new token a sequence, the cache grown by it.
    Decode,
    /// A forward outside generation that keeps nothing for backward (under `torch.no_grad()` or
    /// `torch.inference_mode()`): evaluation, scoring, a plain inference batch.
    InferenceForward,
    #[default]
    Unknown,
}

impl OomPhase {
    /// For people: "forward", "backward", "optimizer step", "prefill", "decode step",
    /// "forward under no_grad", "unknown phase".
    pub fn describe(self) -> &'static str {
        match self {
            OomPhase::Forward => "forward",
            OomPhase::Backward => "backward",
            OomPhase::OptimizerStep => "optimizer step",
            OomPhase::Prefill => "prefill",
            OomPhase::Decode => "decode step",
            OomPhase::InferenceForward => "forward under no_grad",
            OomPhase::Unknown => "unknown phase",
        }
    }

    /// Inference: no gradients, no optimizer, nothing kept for a backward.
    pub fn is_inference(self) -> bool {
        matches!(self, OomPhase::Prefill | OomPhase::Decode | OomPhase::InferenceForward)
    }
}

/// One change that makes a failed step fit (the `ooms[].remedies[].action` contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum RemedyAction {
    /// Run a smaller batch (see `fits.batch_fraction`): in training with gradient accumulation
    /// to keep the effective batch; in inference, fewer sequences at once.
    SmallerBatch,
    /// Activation checkpointing of the repeated blocks.
    ActivationCheckpointing,
    /// Keep activations in bf16/fp16 (autocast).
    Bf16Activations,
    /// A lighter optimizer (8-bit Adam, Adafactor, SGD) in place of the one whose state is live.
    LighterOptimizer,
    /// ZeRO/FSDP: shard parameters, gradients and optimizer state over N GPUs.
    ShardStates,
    /// Offload optimizer state (and its step) to the CPU.
    CpuOffload,
    /// Raise the per-process cap (`set_per_process_memory_fraction`) or the device limit.
    RaiseCap,
    /// Reduce fragmentation (`expandable_segments`, allocation order).
    Defragment,
    /// Stop or move the other processes on the device.
    FreeOtherProcesses,
    /// Release or share CUDA graphs' / MemPools' private pools.
    ReleasePrivatePools,
    /// Reduce memory outside PyTorch's allocator (NCCL buffers, other libraries' pools).
    ReduceNonPytorch,
    /// JAX: donate the step's inputs to its outputs (`jax.jit(step, donate_argnums=…)`), so
    /// that the new parameters and optimizer state reuse the old ones' buffers.
    DonateBuffers,
    /// Inference: generate fewer tokens (`max_new_tokens` / `max_length`); the key/value cache
    /// grows with every one.
    ShorterGeneration,
    /// Inference: keep the key/value cache in a narrower type (bf16/fp16 in place of fp32, fp8
    /// in place of bf16: a quantized cache).
    NarrowerKvCache,
    /// Inference: hold fp32 weights in bf16.
    Bf16Weights,
    /// Inference: a cache allocated once at full length (a static cache, or paged blocks) in
    /// place of one grown by `torch.cat` every step, which copies it whole each step.
    StaticKvCache,
    /// Inference: quantize the weights (8-bit or 4-bit: bitsandbytes, GPTQ, AWQ).
    QuantizeWeights,
}

/// Which allocator printed an out-of-memory message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum OomBackend {
    /// The CUDA caching allocator.
    #[default]
    Cuda,
    /// `cudaMallocAsync` (`PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync`).
    CudaMallocAsync,
    /// ROCm's caching allocator (`HIP out of memory`).
    Hip,
    /// Apple's MPS backend.
    Mps,
    /// Intel's XPU caching allocator.
    Xpu,
    /// XLA's allocator under JAX (`RESOURCE_EXHAUSTED: Out of memory while trying to
    /// allocate …`; on GPU its BFC allocator, which preallocates 75 % of the device by default).
    Xla,
}
