//! Phase annotations (`record_function` ranges from `external_annotations`), and the optimizer
//! steps inferred from optimizer frames (`torch/optim/`, …) when a history has no such ranges.

use memlens_api::PhaseRange;
use polars_core::prelude::*;
use rustc_hash::FxHashMap;

use super::DeviceEvents;
use crate::stacks::StackResolver;
use crate::tables::SnapshotTables;

/// The device's `annotate` trace entries (`torch.cuda.memory._annotate_memory`, PyTorch after
/// 2.11) as instants — ranges that end where they start — named by the `user_metadata` they
/// carry, in entry order.
fn annotate_marks(t: &SnapshotTables, device: i64) -> PolarsResult<Vec<PhaseRange>> {
    let ev = DeviceEvents::new(t, device)?;
    if !ev.has_time {
        return Ok(Vec::new());
    }
    let marks = ev.indices_of(crate::tables::Action::Annotate);
    if marks.is_empty() {
        return Ok(Vec::new());
    }
    let mut names: FxHashMap<usize, &str> = super::device_notes(&t.event_notes, &ev, "user_metadata")?
        .into_iter()
        .collect();
    Ok(marks
        .into_iter()
        .map(|i| {
            let at = ev.time().at(i);
            PhaseRange {
                device,
                name: names.remove(&i).unwrap_or("annotate").to_owned(),
                start_us: at,
                end_us: Some(at),
            }
        })
        .collect())
}

/// START/END markers of one device paired by name, innermost first, in start order, and its
/// `annotate` entries as instants.
pub fn phase_ranges(t: &SnapshotTables, device: i64) -> PolarsResult<Vec<PhaseRange>> {
    let mut out = record_function_ranges(t, device)?;
    let marks = annotate_marks(t, device)?;
    if !marks.is_empty() {
        out.extend(marks);
        out.sort_by_key(|p| p.start_us);
    }
    Ok(out)
}

/// START/END markers of one device paired by name, innermost first, in start order.
fn record_function_ranges(t: &SnapshotTables, device: i64) -> PolarsResult<Vec<PhaseRange>> {
    let a = &t.annotations;
    let dev = a.column("device")?.i64()?;
    let name = a.column("name")?.str()?;
    let stage = a.column("stage")?.str()?;
    let time = a.column("time_us")?.i64()?;
    let mut open: FxHashMap<&str, Vec<usize>> = FxHashMap::default();
    let mut out: Vec<PhaseRange> = Vec::new();
    for i in 0..a.height() {
        if dev.get(i) != Some(device) {
            continue;
        }
        let (Some(n), Some(s), Some(tm)) = (name.get(i), stage.get(i), time.get(i)) else {
            continue;
        };
        match s {
            "START" => {
                open.entry(n).or_default().push(out.len());
                out.push(PhaseRange {
                    device,
                    name: n.to_owned(),
                    start_us: tm,
                    end_us: None,
                });
            }
            "END" => {
                if let Some(j) = open.get_mut(n).and_then(|v| v.pop()) {
                    out[j].end_us = Some(tm);
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// `iteration_12` → `iteration`; `step#3` → `step`.
pub(super) fn family(name: &str) -> &str {
    name.trim_end_matches(|c: char| c.is_ascii_digit())
        .trim_end_matches(['_', '#', '-', ' ', '.', ':'])
}

/// What a stack says about the optimizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OptimizerFrames {
    None,
    /// An optimizer's frame ([`is_optimizer_frame`]).
    Step,
    /// `Optimizer.zero_grad` (`torch/optim/optimizer.py`), freeing gradients.
    ZeroGrad,
}

/// Where optimizers live: PyTorch's own, 8-bit ones (bitsandbytes), fused and low-bit ones
/// (apex, DeepSpeed, torchao) and Hugging Face's Adafactor (`transformers/optimization.py`).
const OPTIMIZER_PATHS: [&str; 6] = [
    "torch/optim/",
    "bitsandbytes/optim/",
    "apex/optimizers/",
    "deepspeed/ops/adam/",
    "torchao/optim/",
    "transformers/optimization.py",
];

/// Whether a frame (`file:line:function`) is an optimizer's own code (an LR scheduler's aside).
pub fn is_optimizer_frame(frame: &str) -> bool {
    OPTIMIZER_PATHS.iter().any(|p| frame.contains(p)) && !frame.contains("lr_scheduler")
}

fn optimizer_frames(stacks: &StackResolver, stack: u32) -> OptimizerFrames {
    let frames = stacks.frames(stack);
    let mut optim = frames.iter().filter(|f| is_optimizer_frame(f)).peekable();
    if optim.peek().is_none() {
        return OptimizerFrames::None;
    }
    if optim.any(|f| f.ends_with(":zero_grad")) {
        OptimizerFrames::ZeroGrad
    } else {
        OptimizerFrames::Step
    }
}

/// Entries without optimizer frames that may sit inside one inferred step (a free the
/// autograd thread or a hook made meanwhile) before the step counts as over; an allocation
/// outside the optimizer ends it at once.
const STEP_GAP_ENTRIES: usize = 8;

/// The phases the category analysis reads: `phases` plus, when the history names no optimizer
/// step (PyTorch before annotations were recorded, an optimizer that bypasses the profiling
/// hook), `Optimizer.step#…` / `Optimizer.zero_grad#…` ranges inferred from the runs of
/// entries whose stacks pass through `torch/optim/`, on the trace's time axis (entry order
/// where it has no timestamps). Without stacks nothing is added.
pub fn with_inferred_optimizer_steps(
    phases: &[PhaseRange],
    ev: &DeviceEvents,
    stacks: &StackResolver,
) -> Vec<PhaseRange> {
    let mut out = phases.to_vec();
    let names_a_step = phases.iter().any(|p| {
        let n = p.name.to_ascii_lowercase();
        n.contains("optimizer") && !n.contains("zero_grad")
    });
    if names_a_step || !stacks.any_recorded() {
        return out;
    }
    let (time, stack) = (ev.time(), ev.stack());
    let mut kinds = FxHashMap::<u32, OptimizerFrames>::default();
    // (kind, first entry, last entry) of each run.
    let mut runs: Vec<(OptimizerFrames, usize, usize)> = Vec::new();
    // Whether anything outside the optimizer allocated since the last run's last entry: a
    // forward did, and the next run is another step's.
    let mut allocated_outside = false;
    let alloc = crate::tables::Action::Alloc as u8;
    for ((i, s), &action) in stack.iter().enumerate().zip(ev.action()) {
        let k = *kinds.entry(s).or_insert_with(|| optimizer_frames(stacks, s));
        if k == OptimizerFrames::None {
            allocated_outside |= action == alloc;
            continue;
        }
        // A free carries the stack its block was made with, not where it is freed: it carries
        // on a step (the step's temporaries freed as it ends) but starts none (the optimizer's
        // blocks freed at the iteration's end are no second step). zero_grad is seen freeing.
        let starts = k == OptimizerFrames::ZeroGrad || action == alloc;
        match runs.last_mut() {
            Some(r) if r.0 == k && !allocated_outside && i - r.2 <= STEP_GAP_ENTRIES + 1 => r.2 = i,
            _ if starts => runs.push((k, i, i)),
            _ => continue,
        }
        allocated_outside = false;
    }
    // A step that allocates nothing (SGD's after the first, which made its momentum buffers)
    // leaves no frames of its own; the zero_grad freeing its gradients does. A zero_grad after
    // another with no step between them closes a step that ran just before it.
    let mut step_since_zero_grad = true;
    let mut zero_grads_seen = 0;
    for (k, first, last) in runs {
        let (start, end) = (time.at(first), time.at(last));
        if k == OptimizerFrames::ZeroGrad {
            if !step_since_zero_grad && zero_grads_seen > 0 {
                out.push(inferred(ev.device, INFERRED_FROM_ZERO_GRAD, start, start));
            }
            zero_grads_seen += 1;
            step_since_zero_grad = false;
            out.push(inferred(
                ev.device,
                "Optimizer.zero_grad#inferred from optimizer frames",
                start,
                end,
            ));
        } else {
            step_since_zero_grad = true;
            out.push(inferred(
                ev.device,
                "Optimizer.step#inferred from optimizer frames",
                start,
                end,
            ));
        }
    }
    out
}

/// The name of a step inferred from the zero_grad after it (it left no frames of its own).
const INFERRED_FROM_ZERO_GRAD: &str = "Optimizer.step#inferred from the zero_grad after it";

fn inferred(device: i64, name: &str, start_us: i64, end_us: i64) -> PhaseRange {
    PhaseRange {
        device,
        name: name.to_owned(),
        start_us,
        end_us: Some(end_us),
    }
}
