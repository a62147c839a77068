//! Why an allocation failed and what to change, from whatever numbers the evidence gives: a
//! snapshot's OOM entry with the allocator's state there, or an error message's figures. One
//! classifier ([`classify`]) and one list of remedies ([`remedies`]) serve both, so a cause is
//! told the same way whatever the user brought.
//!
//! The causes, in the order they are tested (`ooms[].cause`):
//! 1. `fragmentation`: the free part of the reserve could hold the request and is a real share
//!    of it (a tenth or more), but no free block is large enough;
//! 2. `limit`: a known cap (`allowed`) is below what the process holds plus the request, or the
//!    device had the request free (so a cap stopped it), or most of the device was free;
//! 3. with the device full: `other_processes`, `non_pytorch` or `private_pool` when that holder
//!    alone holds what was missing and a tenth or more of what is in use (the largest such);
//! 4. `capacity` otherwise: live tensors fill what the process may use.
//!
//! Remedies never name allocator settings unless the cause is fragmentation, and the verdict
//! sentence states one cause and the remedy that follows from it.

use memlens_api::{OomCause, OomFit, OomPhase, Remedy, RemedyAction};

pub use super::failure_facts::{human, KvAtFailure, LiveAtFailure};

/// The numbers an OOM's evidence may give (`None`: not said).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OomFacts {
    pub requested: i64,
    /// Live tensors' bytes.
    pub allocated: Option<i64>,
    /// PyTorch's reserve.
    pub reserved: Option<i64>,
    /// Free bytes inside the reserve.
    pub reserved_free: Option<i64>,
    pub largest_free_block: Option<i64>,
    pub device_free: Option<i64>,
    pub device_total: Option<i64>,
    /// A per-process cap.
    pub allowed: Option<i64>,
    /// What other processes held on the device.
    pub other_processes: Option<i64>,
    /// What this process held outside PyTorch's reserve.
    pub non_pytorch: Option<i64>,
    /// Bytes in private pools (CUDA graphs, MemPools).
    pub private_pool: Option<i64>,
    /// The allocator already maps freed pages into one range (`expandable_segments`).
    pub expandable_segments: bool,
}

impl OomFacts {
    /// The most this process could have held when it failed: the cap, or what it held plus
    /// what the device had free.
    pub fn limit(&self) -> Option<i64> {
        self.allowed
            .or_else(|| Some(self.reserved? + self.device_free?))
            .or(self.reserved)
    }
}

/// What stood in the way (see the module's list).
pub fn classify(f: &OomFacts) -> OomCause {
    let r = f.requested;
    if f.reserved.is_none() && f.device_free.is_none() && f.allowed.is_none() && f.allocated.is_none() {
        // A message cut before its figures.
        return OomCause::Unknown;
    }
    if let (Some(free), Some(reserved)) = (f.reserved_free, f.reserved) {
        let split = f.largest_free_block.is_none_or(|l| l < r);
        if free >= r && split && free * 10 >= reserved {
            return OomCause::Fragmentation;
        }
    }
    if let (Some(cap), Some(reserved)) = (f.allowed, f.reserved) {
        if reserved + r > cap {
            return OomCause::Limit;
        }
    }
    if let Some(df) = f.device_free {
        if df >= r || f.device_total.is_some_and(|t| df * 2 >= t) {
            return OomCause::Limit;
        }
    }
    let missing = (r - f.device_free.unwrap_or(0)).max(1);
    let in_use = match (f.device_total, f.device_free) {
        (Some(t), Some(df)) => t - df,
        _ => {
            f.reserved.unwrap_or(0)
                + f.other_processes.unwrap_or(0)
                + f.non_pytorch.unwrap_or(0)
                + f.private_pool.unwrap_or(0)
        }
    };
    [
        (OomCause::OtherProcesses, f.other_processes),
        (OomCause::NonPytorch, f.non_pytorch),
        (OomCause::PrivatePool, f.private_pool),
    ]
    .into_iter()
    .filter_map(|(c, b)| Some((c, b?)))
    .filter(|&(_, b)| b >= missing && b * 10 >= in_use)
    .max_by_key(|&(_, b)| b)
    .map_or(OomCause::Capacity, |(c, _)| c)
}

/// GPUs the sharding remedy assumes.
pub const SHARD_GPUS: i64 = 4;

/// The remedies for one OOM, the one that follows from its cause first, then by bytes saved.
pub fn remedies(
    cause: OomCause,
    f: &OomFacts,
    phase: OomPhase,
    live: Option<&LiveAtFailure>,
    fits: Option<&OomFit>,
) -> Vec<Remedy> {
    // What the cap lacks: for the whole step when its need is known, else for this request.
    let shortfall = f.limit().map(|l| {
        let step = fits.map_or(0, |x| x.fixed_bytes + x.batch_bytes - x.limit_bytes);
        (f.reserved.unwrap_or(0) + f.requested - l).max(f.requested).max(step)
    });
    let mut first: Vec<Remedy> = remedy_for_cause(cause, f, shortfall).into_iter().collect();
    let mut rest = match live {
        Some(l) if phase.is_inference() => super::inference_remedies::sized(l, fits, phase),
        Some(l) => {
            let trains = phase != OomPhase::Unknown || l.gradient > 0 || l.optimizer_state > 0;
            sized_remedies(l, fits, trains)
        }
        None if phase.is_inference() => super::inference_remedies::from_text(phase),
        None => unsized_remedies(phase),
    };
    rest.sort_by_key(|r| std::cmp::Reverse(r.saves_bytes));
    // Sized from what was live, a remedy that saves less than a hundredth of what is lacking
    // (checkpointing a model whose activations are a few bytes) is no remedy.
    if live.is_some() {
        let lacking = shortfall.unwrap_or(f.requested).max(1);
        rest.retain(|r| r.saves_bytes.saturating_mul(100) >= lacking);
    }
    if cause == OomCause::Capacity {
        // What follows from a full device: the remedy that makes the step fit.
        if let Some(i) = rest
            .iter()
            .position(|r| r.action == RemedyAction::SmallerBatch && r.saves_bytes > 0)
        {
            let r = rest.remove(i);
            rest.insert(0, r);
        }
    }
    if cause != OomCause::Limit && f.allowed.is_some() {
        rest.push(Remedy {
            action: RemedyAction::RaiseCap,
            saves_bytes: raise_within_device(f, Some(shortfall.unwrap_or(0))),
            note: format!("Or raise the cap ({}).", human(f.allowed.unwrap_or(0))),
        });
    }
    first.extend(rest);
    first
}

/// The remedy the cause itself names (defragment, raise the cap, free the other processes, …),
/// first in the list; none for a full device or an unknown cause.
fn remedy_for_cause(cause: OomCause, f: &OomFacts, shortfall: Option<i64>) -> Option<Remedy> {
    match cause {
        OomCause::Fragmentation => Some(Remedy {
            action: RemedyAction::Defragment,
            saves_bytes: f.reserved_free.unwrap_or(0),
            note: format!(
                "{} of the reserve is free but split{}: {}",
                human(f.reserved_free.unwrap_or(0)),
                f.largest_free_block
                    .map(|l| format!(" (largest block {})", human(l)))
                    .unwrap_or_default(),
                if f.expandable_segments {
                    "with expandable segments already on, allocate large long-lived tensors before many small ones, free \
                     references earlier so freed ranges coalesce, or set PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:0.8."
                } else {
                    "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True so freed pages map into one range, or allocate large \
                     long-lived tensors before many small ones."
                }
            ),
        }),
        OomCause::Limit => Some(Remedy {
            action: RemedyAction::RaiseCap,
            saves_bytes: raise_within_device(f, shortfall),
            note: match (f.allowed, f.device_free) {
                (Some(cap), _) if raise_within_device(f, shortfall) < shortfall.unwrap_or(f.requested) => format!(
                    "The cap is {}, and even the whole device ({}) is {} short of what this step needs: raise the cap as \
                     far as the device allows and run a smaller batch.",
                    human(cap),
                    human(f.device_total.unwrap_or(0)),
                    human(shortfall.unwrap_or(f.requested) + cap - f.device_total.unwrap_or(0))
                ),
                (Some(cap), _) => format!(
                    "The cap is {}; raise it (torch.cuda.set_per_process_memory_fraction or the job's limit) by at least {}.",
                    human(cap),
                    human(shortfall.unwrap_or(f.requested))
                ),
                (None, Some(df)) => format!(
                    "The device still had {} free, so a per-process cap stopped the request: raise it by at least {}.",
                    human(df),
                    human(shortfall.unwrap_or(f.requested))
                ),
                (None, None) => "A per-process cap stopped the request: raise it.".to_owned(),
            },
        }),
        OomCause::OtherProcesses => Some(Remedy {
            action: RemedyAction::FreeOtherProcesses,
            saves_bytes: f.other_processes.unwrap_or(0),
            note: format!(
                "Other processes held {} of the device: stop them, or run on a GPU of its own (CUDA_VISIBLE_DEVICES).",
                human(f.other_processes.unwrap_or(0))
            ),
        }),
        OomCause::NonPytorch => Some(Remedy {
            action: RemedyAction::ReduceNonPytorch,
            saves_bytes: f.non_pytorch.unwrap_or(0),
            note: format!(
                "This process held {} outside PyTorch's allocator (CUDA context, NCCL buffers, CuPy/JAX/TensorRT pools): \
                 free those pools or cap them (e.g. NCCL_BUFFSIZE, the other library's memory limit).",
                human(f.non_pytorch.unwrap_or(0))
            ),
        }),
        OomCause::PrivatePool => Some(Remedy {
            action: RemedyAction::ReleasePrivatePools,
            saves_bytes: f.private_pool.unwrap_or(0),
            note: format!(
                "{} sat in private pools (CUDA graphs, MemPools) that other allocations cannot use: share one pool between \
                 graphs, capture fewer graphs, or delete the graphs and pools you no longer replay.",
                human(f.private_pool.unwrap_or(0))
            ),
        }),
        OomCause::Capacity | OomCause::Unknown => None,
    }
}

/// Remedies sized from what was live at the failure: a smaller batch (when its fraction is
/// known), checkpointing and bf16 for activations, a lighter or offloaded optimizer for its
/// state, sharding for a training run's states.
fn sized_remedies(l: &LiveAtFailure, fits: Option<&OomFit>, trains: bool) -> Vec<Remedy> {
    let mut rest = Vec::new();
    if let Some(fit) = fits.filter(|x| x.batch_fraction > 0.0 && x.batch_fraction < 1.0) {
        let live_batch = l.activation + l.input;
        rest.push(Remedy {
            action: RemedyAction::SmallerBatch,
            saves_bytes: ((1.0 - fit.batch_fraction) * live_batch as f64) as i64,
            note: format!(
                "Run {:.0} % of this step's batch (fits.batch_fraction {:.2}), with gradient accumulation to keep the \
                 effective batch.",
                fit.batch_fraction * 100.0,
                fit.batch_fraction
            ),
        });
    }
    if l.activation > 0 {
        let layers = l.layers.unwrap_or(0);
        let kept = if layers > 1 { 1.0 / layers as f64 } else { 0.25 };
        rest.push(Remedy {
            action: RemedyAction::ActivationCheckpointing,
            saves_bytes: (l.activation as f64 * (1.0 - kept)) as i64,
            note: match layers {
                n if n > 1 => format!(
                    "Checkpoint each of the {n} repeated blocks (torch.utils.checkpoint): each keeps its input \
                     instead of its {} of activations and recomputes them in backward.",
                    human(l.activation / n as i64)
                ),
                _ => "Checkpoint the model's blocks (torch.utils.checkpoint): each keeps its input and recomputes \
                      the rest in backward (about three quarters of the activations saved)."
                    .to_owned(),
            },
        });
        rest.push(Remedy {
            action: RemedyAction::Bf16Activations,
            saves_bytes: l.activation / 2,
            note: "Run the forward under torch.autocast(\"cuda\", dtype=torch.bfloat16): fp32 activations halve \
                   (those already bf16 do not)."
                .to_owned(),
        });
    }
    let state = l.optimizer_state.max(l.optimizer_state_to_come.unwrap_or(0));
    if state > 0 {
        rest.push(Remedy {
            action: RemedyAction::LighterOptimizer,
            saves_bytes: state * 3 / 4,
            note: format!(
                "An 8-bit optimizer (bitsandbytes AdamW8bit) keeps about a quarter of the {} of optimizer state{}.",
                human(state),
                if l.optimizer_state_to_come.is_some() {
                    " Adam-style optimizers create it lazily at their first step: that is where this one failed"
                } else {
                    ""
                }
            ),
        });
        rest.push(Remedy {
            action: RemedyAction::CpuOffload,
            saves_bytes: state,
            note: format!(
                "Offload the optimizer state and its step to the CPU (DeepSpeed ZeRO-Offload, FSDP CPUOffload): the {} \
                 leave the GPU.",
                human(state)
            ),
        });
    }
    // Gradients being computed in backward (of activations) are not sharded state.
    let states = l.parameter + l.gradient.min(l.parameter) + state;
    if states > 0 && trains {
        rest.push(Remedy {
            action: RemedyAction::ShardStates,
            saves_bytes: states - states / SHARD_GPUS,
            note: format!(
                "ZeRO-3/FSDP over {SHARD_GPUS} GPUs keeps a quarter of the {} of parameters, gradients and optimizer \
                 state on each (over N GPUs: 1/N).",
                human(states)
            ),
        });
    }
    rest
}

/// Text gives totals only: the remedies that fit the phase, unsized.
fn unsized_remedies(phase: OomPhase) -> Vec<Remedy> {
    match phase {
        OomPhase::OptimizerStep => vec![
            Remedy {
                action: RemedyAction::LighterOptimizer,
                saves_bytes: 0,
                note: "It failed in the optimizer step (Adam-style optimizers create their state, two copies of the \
                       parameters, lazily at the first step): an 8-bit optimizer keeps about a quarter of that; to size it, \
                       capture a snapshot at the next OOM (memlens.torch.on_oom)."
                    .to_owned(),
            },
            Remedy {
                action: RemedyAction::ShardStates,
                saves_bytes: 0,
                note: "ZeRO/FSDP over N GPUs keeps 1/N of parameters, gradients and optimizer state on each."
                    .to_owned(),
            },
            Remedy {
                action: RemedyAction::CpuOffload,
                saves_bytes: 0,
                note: "Offload the optimizer state and its step to the CPU.".to_owned(),
            },
        ],
        _ => vec![Remedy {
            action: RemedyAction::SmallerBatch,
            saves_bytes: 0,
            note: "Reduce the batch or sequence length, or checkpoint activations; to size each remedy, capture a \
                   snapshot at the next OOM (memlens.torch.on_oom)."
                .to_owned(),
        }],
    }
}

/// What raising the cap can give: what is lacking, but never beyond the device's own memory.
fn raise_within_device(f: &OomFacts, shortfall: Option<i64>) -> i64 {
    let lacking = shortfall.unwrap_or(f.requested);
    match (f.device_total, f.allowed) {
        (Some(total), Some(cap)) => lacking.min((total - cap).max(0)),
        _ => lacking,
    }
}

/// The verdict in one or two sentences: the cause and its numbers, the phase, the biggest live
/// category, and the first remedy with its number.
pub fn verdict(
    cause: OomCause,
    f: &OomFacts,
    phase: OomPhase,
    live: Option<&LiveAtFailure>,
    remedies: &[Remedy],
    fits: Option<&OomFit>,
) -> String {
    let req = human(f.requested);
    let at = match phase {
        OomPhase::Unknown => String::new(),
        p => format!(" in the {}", p.describe()),
    };
    let why = match cause {
        OomCause::Fragmentation => format!(
            "Fragmentation: a {req} request failed{at} with {} of the reserve free but split into blocks{} too small for it.",
            human(f.reserved_free.unwrap_or(0)),
            f.largest_free_block
                .map(|l| format!(" of at most {}", human(l)))
                .unwrap_or_default()
        ),
        OomCause::Limit => match (f.allowed, f.device_free) {
            (Some(cap), _) => format!("Limit: the per-process cap of {} stopped a {req} request{at}.", human(cap)),
            (None, Some(df)) => format!(
                "Limit: a per-process cap stopped a {req} request{at} while the device still had {} free.",
                human(df)
            ),
            (None, None) => format!("Limit: a per-process cap stopped a {req} request{at}."),
        },
        OomCause::OtherProcesses => format!(
            "Other processes: they held {} of the device when a {req} request failed{at}.",
            human(f.other_processes.unwrap_or(0))
        ),
        OomCause::NonPytorch => format!(
            "Outside PyTorch: this process held {} beyond PyTorch's reserve when a {req} request failed{at}.",
            human(f.non_pytorch.unwrap_or(0))
        ),
        OomCause::PrivatePool => format!(
            "Private pools: {} sat in CUDA graphs' or MemPools' pools when a {req} request failed{at}.",
            human(f.private_pool.unwrap_or(0))
        ),
        OomCause::Capacity => format!(
            "Capacity: live tensors{} filled what the process could use when a {req} request failed{at}.",
            f.allocated.map(|a| format!(" ({})", human(a))).unwrap_or_default()
        ),
        OomCause::Unknown => format!(
            "Unknown: a {req} request failed{at}; the evidence stops before the figures that say why."
        ),
    };
    let biggest = live.and_then(|l| {
        [
            ("activations", l.activation),
            ("parameters", l.parameter),
            ("gradients", l.gradient),
            ("optimizer state", l.optimizer_state),
            ("inputs", l.input),
            ("temporaries", l.temporary),
            ("cache", l.cache),
            ("other memory", l.other),
        ]
        .into_iter()
        .filter(|(_, b)| *b > 0)
        .max_by_key(|(_, b)| *b)
    });
    let mut out = why;
    if live.is_some_and(|l| l.optimizer_state_to_come.is_some()) {
        out +=
            " It failed creating the optimizer's state, which Adam-style optimizers make lazily at their first step.";
    }
    match (biggest, f.allocated, f.reserved) {
        (Some((name, b)), _, _) => out += &format!(" The biggest live category is {name} ({}).", human(b)),
        // Text names no category: what PyTorch held, at least.
        (None, Some(a), Some(r)) if cause != OomCause::Capacity => {
            out += &format!(" Live tensors held {} of the {} PyTorch reserved.", human(a), human(r))
        }
        _ => {}
    }
    if let Some(r) = remedies.first() {
        out += &format!(" {}", first_sentence(r, f, fits));
        if let Some(fit) = fits.filter(|x| r.action != RemedyAction::SmallerBatch && x.batch_fraction > 0.0) {
            if fit.batch_fraction < 1.0 {
                out.pop();
                out += &format!(
                    "; or run {:.0} % of the batch (fits.batch_fraction {:.2}).",
                    fit.batch_fraction * 100.0,
                    fit.batch_fraction
                );
            }
        }
    }
    out
}

fn first_sentence(r: &Remedy, f: &OomFacts, fits: Option<&OomFit>) -> String {
    if r.saves_bytes == 0 {
        // Unsized (text evidence): the advice itself.
        return format!("First remedy: {}", r.note);
    }
    let n = human(r.saves_bytes);
    match r.action {
        RemedyAction::SmallerBatch => match fits {
            Some(fit) if fit.batch_fraction > 0.0 => format!(
                "First remedy: run {:.0} % of the batch (saves {n} at the failure).",
                fit.batch_fraction * 100.0
            ),
            _ => r.note.clone(),
        },
        // Raising the cap to the whole device is not enough: the note says so.
        RemedyAction::RaiseCap
            if f.device_total
                .zip(f.allowed)
                .is_some_and(|(total, cap)| r.saves_bytes > 0 && r.saves_bytes == total - cap) =>
        {
            format!("First remedy: {}", r.note)
        }
        RemedyAction::RaiseCap => format!("First remedy: raise the cap by at least {n}."),
        RemedyAction::ActivationCheckpointing => format!("First remedy: activation checkpointing (saves about {n})."),
        RemedyAction::Bf16Activations => format!("First remedy: bf16 activations (saves about {n})."),
        RemedyAction::LighterOptimizer => format!("First remedy: an 8-bit optimizer (saves about {n})."),
        RemedyAction::ShardStates => {
            format!("First remedy: ZeRO-3/FSDP over {SHARD_GPUS} GPUs (saves about {n} each).")
        }
        RemedyAction::CpuOffload => format!("First remedy: offload the optimizer state to the CPU (saves {n})."),
        RemedyAction::Defragment => format!("First remedy: {}", r.note),
        RemedyAction::FreeOtherProcesses => format!("First remedy: stop the other processes (frees {n})."),
        RemedyAction::ReleasePrivatePools => format!("First remedy: release or share the private pools (frees {n})."),
        RemedyAction::ReduceNonPytorch => format!("First remedy: shrink the memory outside PyTorch (frees {n})."),
        RemedyAction::DonateBuffers => format!("First remedy: {}", r.note),
        RemedyAction::ShorterGeneration
        | RemedyAction::NarrowerKvCache
        | RemedyAction::Bf16Weights
        | RemedyAction::StaticKvCache
        | RemedyAction::QuantizeWeights => format!(
            "First remedy: {} (saves about {n}).",
            super::inference_remedies::short_name(r.action)
        ),
    }
}
