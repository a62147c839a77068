//! Leak candidates: allocations still live at the end, grouped by stack, flagged when the same
//! stack left survivors in many iterations (memory that piles up step after step).
//!
//! Iterations come from repeated `record_function` ranges when the snapshot has them
//! ([`super::phases::iteration_starts`]), otherwise from the repeating allocation pattern
//! ([`repeating_pattern`]), and failing both from ten equal time windows. A stack is a
//! candidate when its survivors were allocated in at least 3 iterations and in at least half
//! of the iterations seen; one-off state (parameters, optimizer state created at step 1,
//! the last step's gradients) survives from a single iteration and is not flagged.

use memlens_api::{IterationInfo, LeakCandidate};
use polars::prelude::*;

use super::DeviceEvents;
use crate::stacks::StackResolver;

const WINDOWS: usize = 10;

pub fn leak_candidates(
    ev: &DeviceEvents,
    lifetimes: &DataFrame,
    iterations: Option<(String, Vec<i64>)>,
    stacks: &StackResolver,
) -> PolarsResult<(Vec<LeakCandidate>, IterationInfo)> {
    let (source, starts) = match iterations {
        Some((name, starts)) if ev.has_time => (format!("annotations:{name}"), starts),
        _ if repeating_pattern(ev).is_some() => (
            "allocation_pattern".to_owned(),
            repeating_pattern(ev).unwrap_or_default(),
        ),
        _ => {
            let (lo, hi) = (
                ev.time().first().copied().unwrap_or(0),
                ev.time().last().copied().unwrap_or(0),
            );
            let span = (hi - lo).max(1);
            (
                "time_windows".to_owned(),
                (1..WINDOWS as i64).map(|k| lo + span * k / WINDOWS as i64).collect(),
            )
        }
    };
    let info = IterationInfo {
        source,
        count: starts.len() + 1,
    };
    let alloc_idx = lifetimes.column("alloc_idx")?.i64()?;
    let free_idx = lifetimes.column("free_idx")?.i64()?;
    let mut rows = Vec::new();
    let mut bucket = Vec::new();
    for i in 0..lifetimes.height() {
        if let (Some(a), Some(-1)) = (alloc_idx.get(i), free_idx.get(i)) {
            if a >= 0 {
                let t = ev.time()[a as usize];
                rows.push(i as IdxSize);
                bucket.push(starts.partition_point(|&s| s <= t) as u32);
            }
        }
    }
    let live = lifetimes.take(&IdxCa::from_vec("idx".into(), rows))?;
    let live = live.hstack(&[Column::new("bucket".into(), bucket)])?;
    let groups = live
        .lazy()
        .group_by([col("stack")])
        .agg([
            col("size").sum().alias("bytes"),
            col("size").count().alias("count"),
            col("bucket").n_unique().alias("iterations"),
        ])
        .filter(col("iterations").gt_eq(lit(3u32)))
        .sort_by_exprs(
            [col("bytes"), col("stack")],
            SortMultipleOptions::default().with_order_descending_multi([true, false]),
        )
        .collect()?;
    let s = groups.column("stack")?.u32()?;
    let b = groups.column("bytes")?.i64()?;
    let c = groups.column("count")?.cast(&DataType::UInt64)?;
    let it = groups.column("iterations")?.cast(&DataType::UInt64)?;
    let (c, it) = (c.u64()?, it.u64()?);
    let mut out = Vec::new();
    for i in 0..groups.height() {
        let seen = it.get(i).unwrap_or(0) as usize;
        if seen * 2 < info.count {
            continue;
        }
        let id = s.get(i).unwrap_or(0);
        let bytes = b.get(i).unwrap_or(0);
        out.push(LeakCandidate {
            stack_id: Some(id),
            stack: stacks.user_frames(id),
            bytes,
            count: c.get(i).unwrap_or(0) as usize,
            iterations_seen: seen,
            bytes_per_iteration: bytes / seen.max(1) as i64,
        });
    }
    Ok((out, info))
}

/// Iteration starts from the allocation pattern: the times of the stack that allocates most
/// regularly (gaps within 30% of their mean) across at least half of the trace, with the fewest
/// repetitions (at least 3) — a
/// training loop allocates its input batch, activations and gradients once per step, so the
/// coarsest regular rhythm is the step. `None` when nothing repeats regularly.
pub fn repeating_pattern(ev: &DeviceEvents) -> Option<Vec<i64>> {
    let (action, stack, time) = (ev.action(), ev.stack(), ev.time());
    let mut by_stack: rustc_hash::FxHashMap<u32, Vec<i64>> = rustc_hash::FxHashMap::default();
    for i in 0..action.len() {
        if action[i] == crate::tables::Action::Alloc as u8 && stack[i] != 0 {
            by_stack.entry(stack[i]).or_default().push(time[i]);
        }
    }
    let span = (time.last().copied().unwrap_or(0) - time.first().copied().unwrap_or(0)).max(1);
    let mut best: Option<(usize, u64, u32, Vec<i64>)> = None;
    for (s, times) in by_stack {
        // A rhythm, not a burst: it must cover most of the trace.
        if times.len() < 3 || times.len() > 100_000 || (times[times.len() - 1] - times[0]) * 2 < span {
            continue;
        }
        let gaps: Vec<f64> = times.windows(2).map(|w| (w[1] - w[0]) as f64).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        if mean <= 0.0 {
            continue;
        }
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
        let cv = var.sqrt() / mean;
        if cv > 0.3 {
            continue;
        }
        let key = (times.len(), (cv * 1e6) as u64, s);
        if best.as_ref().is_none_or(|b| key < (b.0, b.1, b.2)) {
            best = Some((key.0, key.1, key.2, times));
        }
    }
    best.map(|b| b.3)
}
