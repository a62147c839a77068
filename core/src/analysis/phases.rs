//! Phase annotations (`record_function` ranges from `external_annotations`), the optimizer
//! steps inferred from `torch/optim/` frames when a history has no such ranges, and the
//! iteration boundaries the leak analysis counts in.

use memlens_api::PhaseRange;
use polars::prelude::*;
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
fn family(name: &str) -> &str {
    name.trim_end_matches(|c: char| c.is_ascii_digit())
        .trim_end_matches(['_', '#', '-', ' ', '.', ':'])
}

/// The iterations [`iteration_starts`] finds, as `(start, end)` µs in order: each ends where
/// its range ends (or where the next one starts, when its END marker is missing).
pub fn iteration_spans(phases: &[PhaseRange]) -> Option<Vec<(i64, i64)>> {
    let (fam, _) = iteration_starts(phases)?;
    let mut spans: Vec<(i64, Option<i64>)> = phases
        .iter()
        .filter(|p| family(&p.name) == fam)
        .map(|p| (p.start_us, p.end_us))
        .collect();
    spans.sort_unstable();
    let starts: Vec<i64> = spans.iter().map(|s| s.0).collect();
    Some(
        spans
            .iter()
            .enumerate()
            .map(|(k, &(s, e))| (s, e.or(starts.get(k + 1).copied()).unwrap_or(s).max(s)))
            .collect(),
    )
}

/// Iteration start times from repeated `record_function` ranges: the most repeated range
/// family, preferring names that say iteration/step/epoch/batch. `None` without ≥ 2 repeats.
pub fn iteration_starts(phases: &[PhaseRange]) -> Option<(String, Vec<i64>)> {
    let mut fams: FxHashMap<&str, Vec<i64>> = FxHashMap::default();
    for p in phases {
        fams.entry(family(&p.name)).or_default().push(p.start_us);
    }
    let says_iteration = |f: &str| {
        let l = f.to_ascii_lowercase();
        ["iter", "step", "epoch", "batch"].iter().any(|k| l.contains(k))
    };
    let mut best: Option<(&str, Vec<i64>)> = None;
    for (f, starts) in fams {
        if starts.len() < 2 || f.is_empty() {
            continue;
        }
        let better = match &best {
            None => true,
            Some((bf, bs)) => {
                (says_iteration(f), starts.len(), std::cmp::Reverse(starts.iter().min()))
                    > (says_iteration(bf), bs.len(), std::cmp::Reverse(bs.iter().min()))
            }
        };
        if better {
            best = Some((f, starts));
        }
    }
    best.map(|(f, mut s)| {
        s.sort_unstable();
        (f.to_owned(), s)
    })
}

/// What a stack says about the optimizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OptimizerFrames {
    None,
    /// A frame in `torch/optim/` (the LR schedulers aside).
    Step,
    /// `Optimizer.zero_grad` (`torch/optim/optimizer.py`), freeing gradients.
    ZeroGrad,
}

fn optimizer_frames(stacks: &StackResolver, stack: u32) -> OptimizerFrames {
    let frames = stacks.frames(stack);
    let mut optim = frames
        .iter()
        .filter(|f| f.contains("torch/optim/") && !f.contains("lr_scheduler"))
        .peekable();
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
/// autograd thread or a hook made meanwhile) before the step counts as over.
const STEP_GAP_ENTRIES: usize = 8;

/// The phases the category analysis reads: `phases` plus, when the history names no optimizer
/// step (PyTorch before annotations were recorded, an optimizer that bypasses the profiling
/// hook), `Optimizer.step#…` / `Optimizer.zero_grad#…` ranges inferred from the runs of
/// entries whose stacks pass through `torch/optim/`. Without timestamps or stacks nothing is
/// added.
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
    if names_a_step || !ev.has_time || !stacks.any_recorded() {
        return out;
    }
    let (time, stack) = (ev.time(), ev.stack());
    let mut kinds = FxHashMap::<u32, OptimizerFrames>::default();
    // (kind, first entry, last entry) of each run.
    let mut runs: Vec<(OptimizerFrames, usize, usize)> = Vec::new();
    for (i, s) in stack.iter().enumerate() {
        let k = *kinds.entry(s).or_insert_with(|| optimizer_frames(stacks, s));
        if k == OptimizerFrames::None {
            continue;
        }
        match runs.last_mut() {
            Some(r) if r.0 == k && i - r.2 <= STEP_GAP_ENTRIES + 1 => r.2 = i,
            _ => runs.push((k, i, i)),
        }
    }
    for (k, first, last) in runs {
        let name = match k {
            OptimizerFrames::ZeroGrad => "Optimizer.zero_grad#inferred from torch/optim frames",
            _ => "Optimizer.step#inferred from torch/optim frames",
        };
        out.push(PhaseRange {
            device: ev.device,
            name: name.to_owned(),
            start_us: time.at(first),
            end_us: Some(time.at(last)),
        });
    }
    out
}
