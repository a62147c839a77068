//! Closed sets of the OOM explanation on the wire (`ooms[]`): what stood in the way, where in
//! the step, which change fits, which allocator printed the message.

use serde::{Deserialize, Serialize};

/// What stood in the way of a failed allocation (the `ooms[].cause` contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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

/// Where in a training step an allocation failed (the `ooms[].phase` contract).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum OomPhase {
    Forward,
    Backward,
    OptimizerStep,
    #[default]
    Unknown,
}

impl OomPhase {
    /// For people: "forward", "backward", "optimizer step", "unknown phase".
    pub fn describe(self) -> &'static str {
        match self {
            OomPhase::Forward => "forward",
            OomPhase::Backward => "backward",
            OomPhase::OptimizerStep => "optimizer step",
            OomPhase::Unknown => "unknown phase",
        }
    }
}

/// One change that makes a failed step fit (the `ooms[].remedies[].action` contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RemedyAction {
    /// Run a smaller batch (see `fits.batch_fraction`), with gradient accumulation to keep the
    /// effective batch.
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
}

/// Which allocator printed an out-of-memory message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
}
