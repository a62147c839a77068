//! Leak candidates: allocations still live at the end, grouped by stack, flagged only where
//! the run shows growth.
//!
//! With a loop — its steps from whichever evidence the run has ([`crate::analysis::loop_steps`]) — a
//! stack is a candidate when its survivors were allocated in at least 3 steps and in at least
//! half of them; one-off state (parameters, optimizer state created at step 1, the last step's
//! gradients) survives from a single iteration and is not flagged.
//!
//! Without iterations none are invented: a stack is a candidate only when its own survivors
//! were allocated at [`MIN_MOMENTS`] or more separate moments spread over at least half of the
//! run (its live bytes stepping up again and again). Tensors made in a few bursts and kept —
//! a short script, a model being built — are not growth.

use memlens_api::LeakCandidate;
use polars_core::prelude::*;
use rustc_hash::FxHashMap;

use crate::analysis::DeviceEvents;
use crate::stacks::StackResolver;
use crate::tables::columns::lifetimes as lt_col;
use crate::tables::int_slice::IntSlice;
use crate::tables::stack_ids::StackIds;

/// Without iterations: separate moments of growth a stack needs to be a leak candidate.
pub const MIN_MOMENTS: usize = 4;
/// Survivors closer in time than this share of the run were made in one moment (one burst).
const MOMENT_GAP: f64 = 0.02;

/// The survivors (allocated in the trace, never freed): `(lifetimes row, alloc entry)`.
fn survivors(lifetimes: &DataFrame) -> PolarsResult<Vec<(usize, usize)>> {
    let alloc_idx = lt_col::ALLOC_IDX.of(lifetimes)?;
    let free_idx = lt_col::FREE_IDX.of(lifetimes)?;
    // Walked chunk by chunk, not looked up row by row.
    Ok(alloc_idx
        .iter()
        .zip(free_idx.iter())
        .enumerate()
        .filter_map(|(i, ends)| match ends {
            (Some(a), Some(-1)) if a >= 0 => Some((i, a as usize)),
            _ => None,
        })
        .collect())
}

/// Leak candidates, and without a loop what was done instead (in plain words). `steps`: each
/// of the loop's steps as `(start, end)` on the events' time axis, in order
/// ([`crate::analysis::loop_steps`]); `None` without a loop.
pub fn leak_candidates(
    ev: &DeviceEvents,
    lifetimes: &DataFrame,
    steps: Option<&[(i64, i64)]>,
    stacks: &StackResolver,
) -> PolarsResult<(Vec<LeakCandidate>, Option<String>)> {
    let steps = match steps {
        Some(steps) if !steps.is_empty() => steps,
        _ => return growth_candidates(ev, lifetimes, stacks),
    };
    // What came before the first step counts as one more, as does what came after each step
    // before the next (or after the last): a tensor kept after each step's end is made in a
    // new bucket each time.
    let buckets = steps.len() + 1;
    let bucket_of = |t: i64| {
        let k = steps.partition_point(|s| s.0 <= t);
        match k.checked_sub(1) {
            None => 0,
            Some(j) if t <= steps[j].1 || steps.get(k).is_some_and(|n| n.0 <= steps[j].1) => 2 * k - 1,
            Some(_) => 2 * k,
        }
    };
    let size = IntSlice::of(lifetimes, lt_col::SIZE)?;
    let stack = StackIds::of(lifetimes, lt_col::STACK)?;
    // Per stack: its survivors' bytes and the buckets they were made in, one each.
    let mut by_stack: FxHashMap<u32, (i64, Vec<u32>)> = FxHashMap::default();
    for (i, a) in survivors(lifetimes)? {
        let e = by_stack.entry(stack.at(i)).or_default();
        e.0 += size.at(i);
        e.1.push(bucket_of(ev.time().at(a)) as u32);
    }
    let mut out: Vec<LeakCandidate> = by_stack
        .into_iter()
        .filter_map(|(id, (bytes, mut made_in))| {
            let count = made_in.len();
            made_in.sort_unstable();
            made_in.dedup();
            let seen = made_in.len();
            (seen >= 3 && seen * 2 >= buckets).then(|| candidate(stacks, id, bytes, count, seen))
        })
        .collect();
    out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.stack_id.cmp(&b.stack_id)));
    Ok((out, None))
}

fn candidate(stacks: &StackResolver, id: u32, bytes: i64, count: usize, seen: usize) -> LeakCandidate {
    LeakCandidate {
        stack_id: Some(id),
        stack: stacks.user_frames(id),
        module: stacks.module_of(id),
        no_stack_reason: None,
        bytes,
        count,
        iterations_seen: seen,
        bytes_per_iteration: bytes / seen.max(1) as i64,
    }
}

/// Separate moments in sorted `times`: a new one starts after a gap longer than `gap`.
fn moments(times: &[i64], gap: i64) -> usize {
    if times.is_empty() {
        return 0;
    }
    1 + times.windows(2).filter(|w| w[1] - w[0] > gap).count()
}

/// Leak candidates of a run without iterations: stacks whose survivors grew at
/// [`MIN_MOMENTS`] or more separate moments spread over at least half of the run.
fn growth_candidates(
    ev: &DeviceEvents,
    lifetimes: &DataFrame,
    stacks: &StackResolver,
) -> PolarsResult<(Vec<LeakCandidate>, Option<String>)> {
    let time = ev.time();
    let span = (time.last().unwrap_or(0) - time.first().unwrap_or(0)).max(1);
    let gap = ((span as f64) * MOMENT_GAP) as i64;
    let size = IntSlice::of(lifetimes, lt_col::SIZE)?;
    let stack = StackIds::of(lifetimes, lt_col::STACK)?;
    let mut by_stack: FxHashMap<u32, (Vec<i64>, i64)> = FxHashMap::default();
    for (i, a) in survivors(lifetimes)? {
        let e = by_stack.entry(stack.at(i)).or_default();
        e.0.push(time.at(a));
        e.1 += size.at(i);
    }
    let mut out: Vec<LeakCandidate> = by_stack
        .into_iter()
        .filter_map(|(id, (mut times, bytes))| {
            times.sort_unstable();
            let n = moments(&times, gap);
            let spread = times.last().copied().unwrap_or(0) - times.first().copied().unwrap_or(0);
            (n >= MIN_MOMENTS && spread * 2 >= span).then(|| candidate(stacks, id, bytes, times.len(), n))
        })
        .collect();
    out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.stack_id.cmp(&b.stack_id)));
    let note = if out.is_empty() {
        format!(
            "no repeating iteration found; leak detection needs a loop (or a stack whose survivors were \
             allocated at {MIN_MOMENTS} or more separate moments across the run), and none grew like that"
        )
    } else {
        format!(
            "no repeating iteration found; candidates are stacks whose survivors were allocated at \
             {MIN_MOMENTS} or more separate moments across the run"
        )
    };
    Ok((out, Some(note)))
}
