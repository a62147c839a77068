//! What-if: the allocated peak a run would have under another batch size, activation
//! checkpointing, activation dtype, optimizer, ZeRO sharding or optimizer offload — replayed
//! from the run's own allocations, each scaled by a factor its category (and, for checkpointing,
//! its repetition across layers) decides. Every prediction carries the assumptions it rests on.
//!
//! The replay keeps the run's timing: each allocation's requested bytes × its factor are added
//! at its alloc entry and removed at its free entry, and the predicted peak is the largest
//! running total, so a peak that moves (from the end of forward to the optimizer step, say)
//! is found where it moves to.

use memlens_api::{
    ActivationDtype, Category, CategoryBytes, CategoryRule, FileSummary, GpuLogSummary, PhaseRange, WhatIfDevice,
    WhatIfFile, WhatIfParams,
};
use polars_core::prelude::*;

use crate::tables::columns::lifetimes as lt_col;
use crate::tables::int_slice::IntSlice;
use crate::tables::stack_ids::StackIds;

/// Fewest repetitions per iteration that mark an activation as made by a repeated block.
const MIN_LAYERS: usize = 4;

/// Bytes per element of an activation dtype.
fn dtype_bytes(d: ActivationDtype) -> f64 {
    match d {
        ActivationDtype::Fp32 => 4.0,
        ActivationDtype::Bf16 | ActivationDtype::Fp16 => 2.0,
    }
}

/// Optimizer steps in the run (the `Optimizer.step#…` ranges PyTorch records).
pub fn optimizer_steps(phases: &[PhaseRange]) -> usize {
    phases
        .iter()
        .filter(|p| p.name.to_ascii_lowercase().starts_with("optimizer.step"))
        .count()
}

/// Each lifetimes row's category and rule, from the columns [`super::categories`] added
/// (frames stored before those columns existed read as unplaced).
pub fn categories_of(lifetimes: &DataFrame) -> PolarsResult<Vec<(Category, CategoryRule)>> {
    if lifetimes.column(lt_col::CATEGORY.name).is_err() {
        return Ok(vec![(Category::Other, CategoryRule::Unplaced); lifetimes.height()]);
    }
    let c = lt_col::CATEGORY.slice(lifetimes)?;
    let r = lt_col::CATEGORY_RULE.slice(lifetimes)?;
    Ok(c.iter()
        .zip(r)
        .map(|(&c, &r)| {
            (
                Category::ALL.get(c as usize).copied().unwrap_or(Category::Other),
                CategoryRule::ALL
                    .get(r as usize)
                    .copied()
                    .unwrap_or(CategoryRule::Unplaced),
            )
        })
        .collect())
}

/// Predictions for every device of an analysed file (or the one `s.device` names), from its
/// stored per-device frames; NVML logs of the same report give the memory outside the allocator.
pub fn what_if_file(
    file: &FileSummary,
    frames: &[impl super::StoredDevice],
    gpu_logs: &[GpuLogSummary],
    s: &WhatIfParams,
) -> PolarsResult<WhatIfFile> {
    Ok(WhatIfFile {
        file: file.file.clone(),
        devices: for_each_device(file, frames, gpu_logs, s.device, |run| what_if(run, s))?,
    })
}

/// `body` over the facts of each device of an analysed file that has stored frames (or the one
/// `device` names).
pub fn for_each_device<T>(
    file: &FileSummary,
    frames: &[impl super::StoredDevice],
    gpu_logs: &[GpuLogSummary],
    device: Option<i64>,
    mut body: impl FnMut(&RunFacts) -> PolarsResult<T>,
) -> PolarsResult<Vec<T>> {
    let mut out = Vec::new();
    for d in &file.devices {
        if device.is_some_and(|want| want != d.device) {
            continue;
        }
        let Some(f) = frames.iter().find(|f| f.device() == d.device) else {
            continue;
        };
        let categories = categories_of(f.lifetimes())?;
        let outside = gpu_logs
            .iter()
            .flat_map(|l| l.gpus.iter())
            .find(|g| g.gpu == d.device)
            .and_then(|g| g.peak_used_bytes)
            .map(|used| (used - d.peak_reserved_bytes).max(0));
        let run = RunFacts {
            lifetimes: f.lifetimes(),
            categories: &categories,
            phases: &d.phases,
            device: d.device,
            peak_allocated_bytes: d.peak_allocated_bytes,
            peak_reserved_bytes: d.peak_reserved_bytes,
            active_at_peak_bytes: d.fragmentation_at_peak.as_ref().map(|f| f.active_bytes),
            outside_allocator_bytes: outside,
        };
        out.push(body(&run)?);
    }
    Ok(out)
}

/// What the run looked like, for the prediction.
pub struct RunFacts<'a> {
    pub lifetimes: &'a DataFrame,
    /// Category and rule of each lifetimes row.
    pub categories: &'a [(Category, CategoryRule)],
    pub phases: &'a [PhaseRange],
    pub device: i64,
    pub peak_allocated_bytes: i64,
    pub peak_reserved_bytes: i64,
    /// Block bytes (requested rounded up) active at the peak, when known.
    pub active_at_peak_bytes: Option<i64>,
    /// Memory outside PyTorch's allocator (CUDA context, libraries), from an NVML log.
    pub outside_allocator_bytes: Option<i64>,
}

/// Per-row factors and the assumptions behind them.
struct Factors {
    row: Vec<f64>,
    /// Added once at the predicted peak (checkpointing's recompute of one block).
    extra: f64,
    assumptions: Vec<String>,
}

fn factors(run: &RunFacts, s: &WhatIfParams, batch_ratio: f64) -> PolarsResult<Factors> {
    let size = IntSlice::of(run.lifetimes, lt_col::SIZE)?;
    let stack = StackIds::of(run.lifetimes, lt_col::STACK)?;
    let cats = run.categories;
    let mut assumptions = Vec::new();
    let param_bytes: i64 = (0..cats.len())
        .filter(|&r| cats[r].0 == Category::Parameter)
        .map(|r| size.at(r))
        .sum();
    let state_bytes: i64 = (0..cats.len())
        .filter(|&r| cats[r].0 == Category::OptimizerState && cats[r].1 == CategoryRule::MadeByOptimizerStep)
        .map(|r| size.at(r))
        .sum();
    if batch_ratio != 1.0 {
        assumptions.push(format!(
            "activations, inputs and forward/backward temporaries scale with the batch (× {batch_ratio:.3}); \
             parameters, gradients, optimizer state and optimizer-step temporaries do not"
        ));
    }
    let mut optimizer = optimizer_factor(param_bytes, state_bytes, s, &mut assumptions);
    let (zero, gpus) = (s.zero_stage.unwrap_or(0), s.gpus.unwrap_or(1).max(1) as f64);
    let shard = |from_stage: u8| if zero >= from_stage { 1.0 / gpus } else { 1.0 };
    if zero > 0 {
        assumptions.push(format!(
            "ZeRO stage {zero} over {gpus} GPUs (DeepSpeed's partitioning): optimizer state ÷ {gpus}{}{}",
            if zero >= 2 { ", gradients ÷ GPUs" } else { "" },
            if zero >= 3 {
                ", parameters ÷ GPUs (gathered one layer at a time, not counted)"
            } else {
                ""
            }
        ));
    }
    if s.optimizer_offload == Some(true) {
        optimizer = 0.0;
        assumptions.push("optimizer state offloaded to CPU memory: none of it stays on the GPU".into());
    }
    let run_dtype = s.run_activations.unwrap_or(ActivationDtype::Fp32);
    let dtype = s.activations.map_or(1.0, |d| dtype_bytes(d) / dtype_bytes(run_dtype));
    if let Some(d) = s.activations {
        assumptions.push(format!(
            "activations go from {run_dtype:?} to {d:?} (× {dtype}); the run's activations are taken to be {run_dtype:?}"
        ));
    }
    let (ckpt, extra) = if s.activation_checkpointing == Some(true) {
        checkpointed(run, &size, &stack, batch_ratio * dtype, &mut assumptions)
    } else {
        (vec![1.0; cats.len()], 0.0)
    };
    let row = (0..cats.len())
        .map(|r| {
            let (c, rule) = cats[r];
            match c {
                Category::Parameter => shard(3),
                Category::Gradient => shard(2),
                Category::OptimizerState => optimizer * shard(1),
                // A weight's autocast copy follows its weight, not the batch.
                Category::Activation if rule == CategoryRule::AutocastWeightCopy => shard(3) * ckpt[r],
                Category::Activation => batch_ratio * dtype * ckpt[r],
                Category::Input => batch_ratio,
                Category::Temporary if rule == CategoryRule::WithinOptimizerStep => 1.0,
                Category::Temporary => batch_ratio,
                Category::Cache | Category::Other => 1.0,
            }
        })
        .collect();
    Ok(Factors {
        row,
        extra: extra * batch_ratio * dtype,
        assumptions,
    })
}

/// How the optimizer state scales when the run's optimizer is swapped for `s.optimizer`: the new
/// one's states per parameter over the run's (optimizer state ÷ parameters), said.
fn optimizer_factor(param_bytes: i64, state_bytes: i64, s: &WhatIfParams, assumptions: &mut Vec<String>) -> f64 {
    let Some(o) = s.optimizer else {
        return 1.0;
    };
    let run_states = if param_bytes > 0 {
        (state_bytes as f64 / param_bytes as f64).round()
    } else {
        0.0
    };
    let new_states = o.states_per_parameter();
    assumptions.push(format!(
        "optimizer state: the run keeps {run_states} fp32 state(s) per parameter (optimizer state ÷ parameters); \
         {o:?} keeps {new_states}"
    ));
    if run_states == 0.0 && new_states > 0.0 {
        assumptions
            .push("the run shows no optimizer state to scale from: the new optimizer's state is not added".into());
    }
    if run_states > 0.0 {
        new_states / run_states
    } else {
        0.0
    }
}

/// Activation checkpointing of the repeated blocks: each row's factor, and what backward's
/// recomputation of one block adds at the peak (before the batch and dtype scale it, which
/// `scale` does for the assumption's figure).
///
/// Activations whose stack repeats within an iteration come from repeated blocks (layers called
/// in a loop share their frames). A checkpointed block keeps only its input, about one of its
/// `kinds` saved tensors, and recomputes one block in backward.
fn checkpointed(
    run: &RunFacts,
    size: &IntSlice,
    stack: &StackIds,
    scale: f64,
    assumptions: &mut Vec<String>,
) -> (Vec<f64>, f64) {
    let cats = run.categories;
    let mut ckpt = vec![1.0; cats.len()];
    let steps = optimizer_steps(run.phases).max(1);
    let mut by_stack: rustc_hash::FxHashMap<u32, (usize, i64)> = rustc_hash::FxHashMap::default();
    for (r, &(category, _)) in cats.iter().enumerate() {
        if category == Category::Activation {
            let e = by_stack.entry(stack.at(r)).or_default();
            e.0 += 1;
            e.1 += size.at(r);
        }
    }
    // Repeated blocks: an activation stack made 4 or more times per iteration (layers called
    // in a loop share their frames). Layers: the greatest common divisor of those
    // repetitions (a tensor made once per layer repeats `layers` times, one made k times
    // per layer k × layers); saved tensors per layer: all repetitions ÷ layers.
    let layered: Vec<(u32, usize, i64)> = by_stack
        .iter()
        .map(|(&s, &(n, b))| (s, n / steps, b))
        .filter(|l| l.1 >= MIN_LAYERS)
        .collect();
    let gcd = |mut a: usize, mut b: usize| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let reps: Vec<usize> = layered.iter().map(|l| l.1).collect();
    let layers = reps.iter().copied().reduce(gcd).unwrap_or(1).max(1) as f64;
    let kinds = (reps.iter().sum::<usize>() as f64 / layers).max(1.0);
    let layered_per_step: i64 = layered.iter().map(|l| l.2).sum::<i64>() / steps as i64;
    for r in 0..cats.len() {
        if cats[r].0 == Category::Activation && layered.iter().any(|l| l.0 == stack.at(r)) {
            ckpt[r] = 1.0 / kinds;
        }
    }
    let extra = layered_per_step as f64 / layers;
    assumptions.push(format!(
        "activation checkpointing of the repeated blocks: about {layers} layers (activation stacks repeating a \
         multiple of {layers} times per iteration) saving about {kinds:.0} tensors each; a checkpointed block keeps one of \
         them (its input) and backward recomputes one block at a time (+{} at the peak)",
        memlens_api::bytes_label((extra * scale) as i64)
    ));
    (ckpt, extra)
}

/// The replayed peak with each row's bytes × its factor, and each category's bytes then.
fn replay(run: &RunFacts, f: &Factors) -> PolarsResult<(i64, Vec<CategoryBytes>)> {
    let alloc = lt_col::ALLOC_IDX.slice(run.lifetimes)?;
    let free = lt_col::FREE_IDX.slice(run.lifetimes)?;
    let size = IntSlice::of(run.lifetimes, lt_col::SIZE)?;
    let n = Category::ALL.len();
    let slot = |c: Category| Category::ALL.iter().position(|&x| x == c).unwrap_or(n - 1);
    let mut live = vec![0f64; n];
    let mut events: Vec<(i64, usize, f64)> = Vec::new();
    for r in 0..size.len() {
        let b = size.at(r) as f64 * f.row[r];
        let s = slot(run.categories[r].0);
        if alloc[r] < 0 {
            live[s] += b;
        } else {
            events.push((i64::from(alloc[r]), s, b));
        }
        if free[r] >= 0 {
            events.push((i64::from(free[r]), s, -b));
        }
    }
    events.sort_by_key(|e| e.0);
    let mut best = live.clone();
    let mut best_total: f64 = live.iter().sum();
    let mut i = 0;
    while i < events.len() {
        // All changes of one entry at once.
        let e = events[i].0;
        while i < events.len() && events[i].0 == e {
            live[events[i].1] += events[i].2;
            i += 1;
        }
        let total: f64 = live.iter().sum();
        if total > best_total {
            best_total = total;
            best.clone_from(&live);
        }
    }
    let by_category = Category::ALL
        .iter()
        .enumerate()
        .filter(|(s, _)| best[*s].abs() >= 0.5)
        .map(|(s, &category)| CategoryBytes {
            category,
            bytes: best[s].round() as i64,
        })
        .collect();
    Ok(((best_total + f.extra).round() as i64, by_category))
}

/// The prediction for one device under scenario `s`.
pub fn what_if(run: &RunFacts, s: &WhatIfParams) -> PolarsResult<WhatIfDevice> {
    let ratio = match (s.run_batch_size, s.batch_size) {
        (Some(run_b), Some(new_b)) if run_b > 0 => new_b as f64 / run_b as f64,
        _ => 1.0,
    };
    let f = factors(run, s, ratio)?;
    let (predicted, by_category) = replay(run, &f)?;
    let mut assumptions = f.assumptions;
    if s.batch_size.is_some() && s.run_batch_size.is_none() {
        assumptions.push("no run batch size given (--batch-size / run_batch_size): the batch is not scaled".into());
    }
    let allocated = run.peak_allocated_bytes.max(1) as f64;
    let reserve_ratio = match (s.expandable_segments, run.active_at_peak_bytes) {
        (Some(true), Some(active)) => {
            let r = (active as f64 / allocated).max(1.0);
            assumptions.push(format!(
                "expandable segments: the cache maps what is active (× {r:.3} of allocated, block rounding), not \
                 the run's {} of free-but-split blocks at its peak",
                memlens_api::bytes_label((run.peak_reserved_bytes - active).max(0))
            ));
            r
        }
        _ => run.peak_reserved_bytes as f64 / allocated,
    };
    let predicted_reserved = (predicted as f64 * reserve_ratio).round() as i64;
    let max_batch_size = match (s.gpu_memory_bytes, s.run_batch_size) {
        (Some(capacity), Some(run_b)) if run_b > 0 => {
            let outside = run.outside_allocator_bytes.unwrap_or(0);
            assumptions.push(format!(
                "fits when predicted peak × {reserve_ratio:.3} (reserved ÷ allocated) + {} {} ≤ {}",
                memlens_api::bytes_label(outside),
                if run.outside_allocator_bytes.is_some() {
                    "outside the allocator (NVML used − reserved during the run)"
                } else {
                    "outside the allocator (no NVML log of the run: CUDA context and libraries not counted)"
                },
                memlens_api::bytes_label(capacity)
            ));
            let fits = |b: u64| -> PolarsResult<bool> {
                let f = factors(run, s, b as f64 / run_b as f64)?;
                let (p, _) = replay(run, &f)?;
                Ok(p as f64 * reserve_ratio + outside as f64 <= capacity as f64)
            };
            // The peak grows with the batch: bisect the largest batch that fits.
            let (mut lo, mut hi) = (0u64, run_b.max(1));
            while fits(hi)? && hi < 1 << 24 {
                lo = hi;
                hi *= 2;
            }
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if fits(mid)? {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            Some(lo)
        }
        _ => None,
    };
    if assumptions.is_empty() {
        assumptions.push("no change asked for: the prediction replays the run as it was".into());
    }
    Ok(WhatIfDevice {
        device: run.device,
        peak_allocated_bytes: run.peak_allocated_bytes,
        predicted_peak_allocated_bytes: predicted,
        predicted_peak_reserved_bytes: predicted_reserved,
        predicted_by_category: by_category,
        max_batch_size,
        assumptions,
    })
}
