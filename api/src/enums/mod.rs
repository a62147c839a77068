//! Closed sets on the wire: each is a serde enum here, never a string compared in two crates.

mod oom;
pub use oom::{OomBackend, OomCause, OomPhase, RemedyAction};

use serde::{Deserialize, Serialize};

/// Lifecycle of a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ReportState {
    Queued,
    Processing,
    Ready,
    Failed,
}

impl ReportState {
    pub const ALL: [ReportState; 4] = [
        ReportState::Queued,
        ReportState::Processing,
        ReportState::Ready,
        ReportState::Failed,
    ];
    /// The wire name (`queued`, …), also what the store's index keeps.
    pub fn name(self) -> &'static str {
        match self {
            ReportState::Queued => "queued",
            ReportState::Processing => "processing",
            ReportState::Ready => "ready",
            ReportState::Failed => "failed",
        }
    }
    pub fn from_name(s: &str) -> Option<ReportState> {
        Self::ALL.into_iter().find(|st| st.name() == s)
    }
    /// Whether processing has ended (ready or failed).
    pub fn is_final(self) -> bool {
        matches!(self, ReportState::Ready | ReportState::Failed)
    }
}

/// What the pipeline is doing with a report right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    Queued,
    Processing,
    Importing,
    Analysing,
    Storing,
    Ready,
    Failed,
}

impl Stage {
    /// For people: "importing", "analysing", …
    pub fn name(self) -> &'static str {
        match self {
            Stage::Queued => "queued",
            Stage::Processing => "processing",
            Stage::Importing => "importing",
            Stage::Analysing => "analysing",
            Stage::Storing => "storing",
            Stage::Ready => "ready",
            Stage::Failed => "failed",
        }
    }
}

/// How a log's timestamps relate to the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum SampleClock {
    /// Seconds or microseconds since the Unix epoch (pynvml loggers, ISO times with an offset).
    Epoch,
    /// Wall-clock date and time with no zone (nvidia-smi): read as UTC, to be aligned later.
    #[serde(rename = "local_time")]
    LocalNoZone,
}

/// What an NVML log's `used` counts, which depends on the API that produced it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum UsedMeaning {
    /// nvidia-smi's `memory.used` / dmon `fb`: memory of active contexts, without the driver's
    /// own reservation (driver ≥ 5xx reports that as `memory.reserved`).
    ExcludesDriverReserved,
    /// NVML v1 `nvmlDeviceGetMemoryInfo` (pynvml's default): includes the driver's reservation.
    IncludesDriverReserved,
}

impl UsedMeaning {
    fn wire_name(self) -> &'static str {
        match self {
            UsedMeaning::ExcludesDriverReserved => "excludes_driver_reserved",
            UsedMeaning::IncludesDriverReserved => "includes_driver_reserved",
        }
    }

    /// What `used` counts, for people.
    pub fn note(self) -> &'static str {
        match self {
            UsedMeaning::ExcludesDriverReserved => {
                "used = memory of all processes' CUDA contexts (PyTorch's reserved memory, the CUDA context itself, \
                 NCCL/cuBLAS workspaces, other processes); the driver's own reservation is not included"
            }
            UsedMeaning::IncludesDriverReserved => {
                "used as NVML's v1 API reports it: all processes' memory plus the driver's own reservation \
                 (several hundred MiB more than nvidia-smi's memory.used)"
            }
        }
    }
}

/// A `used_meaning` that is neither a name on the wire nor a note an earlier summary wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownUsedMeaning(pub String);

impl std::fmt::Display for UnknownUsedMeaning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unknown used meaning `{}`", self.0)
    }
}

/// Its name on the wire, or, in a summary stored before the meaning was (its `used_note`),
/// the note it wrote.
impl TryFrom<String> for UsedMeaning {
    type Error = UnknownUsedMeaning;
    fn try_from(s: String) -> Result<UsedMeaning, UnknownUsedMeaning> {
        [UsedMeaning::ExcludesDriverReserved, UsedMeaning::IncludesDriverReserved]
            .into_iter()
            .find(|m| s == m.wire_name() || s == m.note())
            .ok_or(UnknownUsedMeaning(s))
    }
}

/// State of an allocator block; stored as `u8` in the `blocks` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum BlockState {
    Inactive = 0,
    ActiveAllocated = 1,
    ActivePendingFree = 2,
}

impl BlockState {
    /// PyTorch's name for it; unknown names are free gaps.
    pub fn from_name(s: &str) -> BlockState {
        match s {
            "active_allocated" => BlockState::ActiveAllocated,
            // The TypedDict docstring says `active_awaiting_free`; the C++ emits `active_pending_free`.
            "active_pending_free" | "active_awaiting_free" => BlockState::ActivePendingFree,
            _ => BlockState::Inactive,
        }
    }
    pub fn from_code(c: u8) -> BlockState {
        match c {
            1 => BlockState::ActiveAllocated,
            2 => BlockState::ActivePendingFree,
            _ => BlockState::Inactive,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            BlockState::Inactive => "inactive",
            BlockState::ActiveAllocated => "active_allocated",
            BlockState::ActivePendingFree => "active_pending_free",
        }
    }
}

/// The axis a timeline query is asked on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum TimelineAxis {
    /// Microseconds (traces with `time_us`; others fall back to entry order).
    Time,
    /// Entry order.
    Event,
}

/// What an allocation is, in the user's terms (what the peak is made of).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Model weights and buffers: alive from before the first iteration through the last.
    Parameter,
    /// Made in backward and kept for the optimizer step (freed by `zero_grad` or kept).
    Gradient,
    /// Made by the optimizer step and kept across iterations (Adam's two moments, momentum).
    OptimizerState,
    /// Made in forward and freed in backward (saved for the gradient computation).
    Activation,
    /// Born and freed inside one phase.
    Temporary,
    /// The batch: made before forward and kept through it.
    Input,
    /// What is kept to be reused: a math library's workspace, a KV cache, a cache the script
    /// keeps (never weights or activations).
    Cache,
    Other,
}

impl CategoryRule {
    /// Every rule; stored reports keep positions in this list, so new rules go at the end.
    pub const ALL: [CategoryRule; 34] = [
        CategoryRule::ExplicitLabel,
        CategoryRule::ModuleTo,
        CategoryRule::AliveThroughout,
        CategoryRule::PredatesTheTrace,
        CategoryRule::MadeByOptimizerStep,
        CategoryRule::FreedByZeroGrad,
        CategoryRule::KeptFromBackward,
        CategoryRule::ForwardFreedInBackward,
        CategoryRule::ForwardOutput,
        CategoryRule::MadeInFailedForward,
        CategoryRule::WithinOnePhase,
        CategoryRule::WithinOptimizerStep,
        CategoryRule::MadeBeforeForward,
        CategoryRule::LongLived,
        CategoryRule::KeptPastItsIteration,
        CategoryRule::FrameRule,
        CategoryRule::Unplaced,
        CategoryRule::ProfilerCategory,
        CategoryRule::LibraryWorkspace,
        CategoryRule::KeptFromBackwardUnlikeAnyParameter,
        CategoryRule::MadeInFailedBackward,
        CategoryRule::GradScalerState,
        CategoryRule::AutocastWeightCopy,
        CategoryRule::ThereBeforeRecording,
        CategoryRule::StateBySize,
        CategoryRule::ReplacedByOptimizerStep,
        CategoryRule::WorkspaceBySize,
        CategoryRule::KvCache,
        CategoryRule::LoadedAsWeights,
        CategoryRule::MadeByModelInit,
        CategoryRule::MadeByOptax,
        CategoryRule::MadeByJaxGrad,
        CategoryRule::ParameterTreeOfCopies,
        CategoryRule::CopyOfParameterTree,
    ];

    /// The rule's position in [`CategoryRule::ALL`] (what stored reports keep); a match over
    /// every rule, so a new one cannot be left out of the list unnoticed
    /// (`every_rule_has_its_place_in_all`).
    pub const fn position(self) -> u8 {
        match self {
            CategoryRule::ExplicitLabel => 0,
            CategoryRule::ModuleTo => 1,
            CategoryRule::AliveThroughout => 2,
            CategoryRule::PredatesTheTrace => 3,
            CategoryRule::MadeByOptimizerStep => 4,
            CategoryRule::FreedByZeroGrad => 5,
            CategoryRule::KeptFromBackward => 6,
            CategoryRule::ForwardFreedInBackward => 7,
            CategoryRule::ForwardOutput => 8,
            CategoryRule::MadeInFailedForward => 9,
            CategoryRule::WithinOnePhase => 10,
            CategoryRule::WithinOptimizerStep => 11,
            CategoryRule::MadeBeforeForward => 12,
            CategoryRule::LongLived => 13,
            CategoryRule::KeptPastItsIteration => 14,
            CategoryRule::FrameRule => 15,
            CategoryRule::Unplaced => 16,
            CategoryRule::ProfilerCategory => 17,
            CategoryRule::LibraryWorkspace => 18,
            CategoryRule::KeptFromBackwardUnlikeAnyParameter => 19,
            CategoryRule::MadeInFailedBackward => 20,
            CategoryRule::GradScalerState => 21,
            CategoryRule::AutocastWeightCopy => 22,
            CategoryRule::ThereBeforeRecording => 23,
            CategoryRule::StateBySize => 24,
            CategoryRule::ReplacedByOptimizerStep => 25,
            CategoryRule::WorkspaceBySize => 26,
            CategoryRule::KvCache => 27,
            CategoryRule::LoadedAsWeights => 28,
            CategoryRule::MadeByModelInit => 29,
            CategoryRule::MadeByOptax => 30,
            CategoryRule::MadeByJaxGrad => 31,
            CategoryRule::ParameterTreeOfCopies => 32,
            CategoryRule::CopyOfParameterTree => 33,
        }
    }
}

impl Category {
    pub const ALL: [Category; 8] = [
        Category::Parameter,
        Category::Gradient,
        Category::OptimizerState,
        Category::Activation,
        Category::Temporary,
        Category::Input,
        Category::Cache,
        Category::Other,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Category::Parameter => "parameter",
            Category::Gradient => "gradient",
            Category::OptimizerState => "optimizer_state",
            Category::Activation => "activation",
            Category::Temporary => "temporary",
            Category::Input => "input",
            Category::Cache => "cache",
            Category::Other => "other",
        }
    }
    /// The category [`Category::name`] calls `s`.
    pub fn from_name(s: &str) -> Option<Category> {
        Category::ALL.into_iter().find(|c| c.name() == s)
    }
}

/// The rule that placed an allocation in its category, strongest evidence first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum CategoryRule {
    /// Labelled by the script: the allocation's `user_metadata` names the category
    /// (`torch.cuda.memory._set_memory_metadata("category=input")`).
    ExplicitLabel,
    /// Moved to the GPU by `Module.to()`/`.cuda()` (a `torch/nn/modules/module.py` `_apply` frame).
    ModuleTo,
    /// Made before the first iteration's forward (or before the trace, when no weights were
    /// seen being moved) and alive until after the last optimizer step.
    AliveThroughout,
    /// Made before the recording began, on a device whose weights were seen being moved in it.
    PredatesTheTrace,
    /// Made inside an optimizer step and alive after it.
    MadeByOptimizerStep,
    /// Freed inside `Optimizer.zero_grad`.
    FreedByZeroGrad,
    /// Made in backward and alive after it.
    KeptFromBackward,
    /// Made in forward, freed in backward.
    ForwardFreedInBackward,
    /// Made in forward, freed after backward but within the next iteration (an output).
    ForwardOutput,
    /// Made in the forward of an iteration in which an allocation then failed (out of memory, in
    /// that forward or the backward after it), live at the failure.
    MadeInFailedForward,
    /// Made and freed within one phase (forward, backward, between iterations).
    WithinOnePhase,
    /// Made and freed within one optimizer step (does not grow with the batch).
    WithinOptimizerStep,
    /// Made before forward in its iteration and alive into it.
    MadeBeforeForward,
    /// Alive for a large share of a run without training structure.
    LongLived,
    /// Made in one iteration and kept beyond the next (what leaks look like).
    KeptPastItsIteration,
    /// A frame of its stack matched a user rule (`--category-rules`).
    FrameRule,
    /// None of the rules applied.
    Unplaced,
    /// Named by PyTorch's own memory profiler: the `category` of a profiler-derived snapshot's
    /// entry (`torch.cuda._memory_viz._profile_to_snapshot`; its `autograd_detail` counts as
    /// temporary).
    ProfilerCategory,
    /// A workspace a math library keeps for as long as its handle lives (cuBLAS's
    /// `setWorkspaceForHandle`, cuBLASLt's `getCUDABlasLtWorkspace` in a C++ stack): state,
    /// not a gradient or an activation, whichever phase first needed it.
    LibraryWorkspace,
    /// Made in backward and kept, but of a size no parameter has, so no parameter's gradient:
    /// state a library or wrapper keeps (a cuBLAS workspace seen without C++ frames, DDP's
    /// gradient buckets).
    KeptFromBackwardUnlikeAnyParameter,
    /// Made in the backward of a step in which an allocation then failed, of no parameter's
    /// size, live at the failure: a gradient being computed (of an activation, on its way to a
    /// parameter's).
    MadeInFailedBackward,
    /// Made by AMP's `GradScaler` for its own state (`_lazy_init_scale_growth_tracker`: the loss
    /// scale and its growth tracker), kept for the run beside the optimizer's.
    GradScalerState,
    /// Made in forward at exactly half a parameter's size and freed in backward, in a run where
    /// such copies add up to a quarter of the weights or more per iteration: the fp16/bf16 copy
    /// of a weight that autocast made and autograd kept (an activation that does not grow with
    /// the batch).
    AutocastWeightCopy,
    /// There before the recording began and alive to its end, in a run without optimizer
    /// steps (an eval or benchmark loop recorded after its model was loaded): the weights.
    ThereBeforeRecording,
    /// There before the recording began and alive to its end, at a parameter's size, beyond
    /// as many blocks of that size as backward makes gradients: optimizer state made before
    /// the recording (recognised by its sizes; which blocks of a size are the weights is not
    /// known, their bytes are).
    StateBySize,
    /// There before the recording began and freed inside an optimizer step: state the step
    /// makes anew each time (`state["m"] = beta1 * m + …`), the old freed after the new.
    ReplacedByOptimizerStep,
    /// Never freed, at exactly the size of a workspace cuBLAS keeps per handle and stream as
    /// PyTorch sizes it (32 MiB on Hopper and Blackwell, 8 MiB + 128 KiB before; cuBLASLt's
    /// 1 MiB made beside one), made by the run's first matrix products or there before the
    /// recording where no gradient has that size: a library's workspace seen without C++ frames.
    WorkspaceBySize,
    /// Made by a generation's key/value cache: Hugging Face's (`transformers/cache_utils.py`:
    /// `DynamicCache`, `StaticCache`, …) or one whose file or function is named for a KV cache.
    /// Kept to be reused by the next token's attention; it grows with the batch and the length.
    KvCache,
    /// Made by code that loads or initialises weights (`torch.load`, safetensors,
    /// `load_state_dict`, `from_pretrained`, a model's `init_weights`) and kept to the end, in a
    /// run without training structure: the weights, however they reached the GPU.
    LoadedAsWeights,
    /// Made by a JAX model library's parameter initialisation (flax's `Scope.param` under
    /// `Module.init`, a flax.nnx `Param`, haiku's `get_parameter`, an equinox layer's
    /// `__init__`), in a JAX device memory profile: the parameters.
    MadeByModelInit,
    /// Made by optax's code, in a JAX device memory profile: an optimizer's `init` (its moments,
    /// `tree_zeros_like` of the parameters, and its step count) or an update run outside `jit`.
    MadeByOptax,
    /// Made by the backward pass of `jax.grad` / `value_and_grad` / `vjp` run outside `jit`
    /// (`jax/_src/interpreters/ad.py`'s `backward_pass`), in a JAX device memory profile.
    MadeByJaxGrad,
    /// In a JAX device memory profile, one of k ≥ 2 trees of exactly the same buffer sizes
    /// that one call returned (a jitted train step returns the parameters and state of their
    /// shape, all with the call's stack): one tree counted as the parameters.
    ParameterTreeOfCopies,
    /// The other k − 1 trees of the parameters' sizes from that call: an optimizer's moments
    /// (Adam keeps two), gradients returned or kept from earlier steps — which of them, the
    /// profile's stacks cannot tell.
    CopyOfParameterTree,
}

/// The evidence a run's loop steps were found from, strongest first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum IterationEvidence {
    /// The script's own repeated `record_function` ranges (`iteration_12`, `train_step`, …),
    /// each range one step.
    StepRanges,
    /// Optimizer steps (ranges, or runs of `torch/optim/` frames) as separators: a step runs
    /// from the end of one optimizer step (and its zero_grad) to the end of the next.
    OptimizerSteps,
    /// The allocation rhythm: the stack that allocates once per step, regularly, across the
    /// run; a step runs from one of its allocations to the next.
    AllocationRhythm,
    /// No loop was seen.
    #[default]
    None,
}

/// An optimizer, by how many fp32 states it keeps per parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum OptimizerKind {
    /// Adam / AdamW: `exp_avg` and `exp_avg_sq`.
    Adam,
    Adamw,
    /// SGD with momentum: one buffer.
    SgdMomentum,
    /// Plain SGD: none.
    Sgd,
    /// No optimizer state (inference, or state elsewhere).
    None,
}

impl OptimizerKind {
    /// fp32 states per parameter.
    pub fn states_per_parameter(self) -> f64 {
        match self {
            OptimizerKind::Adam | OptimizerKind::Adamw => 2.0,
            OptimizerKind::SgdMomentum => 1.0,
            OptimizerKind::Sgd | OptimizerKind::None => 0.0,
        }
    }
}

/// The element type activations are kept in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ActivationDtype {
    Fp32,
    Bf16,
    Fp16,
}

/// Why an allocation has no stack to show (memory_viz's five reasons, told apart where the
/// trace allows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum NoStackReason {
    /// Allocated before the trace's first entry: recording began later, the ring buffer
    /// (`max_entries`) dropped its entry, or the block was known only from the final segments.
    BeforeTrace,
    /// The recording kept no frames at all (`_record_memory_history(context=None)` or
    /// `stacks` off).
    StacksNotRecorded,
    /// Allocated on the autograd engine's thread during backward: Python-only stacks have no
    /// frames there.
    AutogradThread,
    /// Allocated on a thread without Python frames (a communication or data-loader thread, a
    /// C++ extension's own thread).
    NoPythonThread,
}

impl NoStackReason {
    /// For people: the reason and what to do about it.
    pub fn describe(self) -> &'static str {
        match self {
            NoStackReason::BeforeTrace => {
                "allocated before the trace's first entry (recording began later, or the ring buffer dropped it)"
            }
            NoStackReason::StacksNotRecorded => "the recording kept no stacks (record with context=\"all\")",
            NoStackReason::AutogradThread => {
                "allocated on the autograd thread during backward: no Python frames (stacks=\"all\" shows C++ ones)"
            }
            NoStackReason::NoPythonThread => {
                "allocated on a thread without Python frames (communication, data loading or a C++ extension)"
            }
        }
    }
}

/// What kind of memory pool of the caching allocator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum PoolKind {
    /// The allocator's own pool (id `(0, 0)`).
    Default,
    /// A `torch.cuda.MemPool` (id `(0, n)`).
    MemPool,
    /// A CUDA graph's private pool (id `(n, 0)`), as `torch.cuda.graph` and compile make.
    GraphPool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_has_its_place_in_all() {
        for (k, r) in CategoryRule::ALL.iter().enumerate() {
            assert_eq!(usize::from(r.position()), k, "{r:?}");
        }
        // The last position is the list's last: no rule's position is past its end.
        assert_eq!(
            usize::from(CategoryRule::CopyOfParameterTree.position()) + 1,
            CategoryRule::ALL.len()
        );
    }

    #[test]
    fn used_meaning_reads_its_name_and_the_note_stored_before_it() {
        for m in [UsedMeaning::ExcludesDriverReserved, UsedMeaning::IncludesDriverReserved] {
            let wire = serde_json::to_string(&m).expect("json");
            assert_eq!(serde_json::from_str::<UsedMeaning>(&wire).expect("name"), m);
            let old = serde_json::to_string(m.note()).expect("json");
            assert_eq!(serde_json::from_str::<UsedMeaning>(&old).expect("note"), m);
        }
        assert!(serde_json::from_str::<UsedMeaning>("\"whatever\"").is_err());
    }
}
