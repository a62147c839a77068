//! What was live at an instant (the peak, an OOM): grouped by folded stack, with the model
//! code that asked and, for allocations without a stack, why they have none; and grouped by
//! that model-code frame alone.

use memlens_api::{ModuleGroup, NoStackReason, PhaseRange, StackGroup};
use polars_core::prelude::*;
use rustc_hash::FxHashMap;

use crate::analysis::interval_index::{FirstCovering, Union};
use crate::stacks::StackResolver;
use crate::tables::columns::lifetimes as lt_col;
use crate::tables::int_slice::IntSlice;
use crate::tables::stack_ids::StackIds;

/// What tells apart why allocations have no stack: asked for every live allocation without
/// one, so its ranges are indexed once ([`crate::analysis::interval_index`]).
pub struct NoStackEvidence<'a> {
    /// Whether the recording kept frames for any stack of the file.
    stacks_recorded: bool,
    /// Where an allocation without frames was made on the autograd thread (see
    /// [`crate::analysis::categories::autograd_windows`]).
    autograd: Union,
    /// `record_function` ranges, for the phase an allocation was made in.
    phases: &'a [PhaseRange],
    /// The innermost (shortest, then first) of `phases` holding an instant: ranked by length.
    innermost: FirstCovering,
    /// `phases`' positions by rank in `innermost`.
    by_rank: Vec<usize>,
    /// When each of the device's entries happened ([`crate::analysis::DeviceEvents::time`]):
    /// an allocation was made at its `alloc_idx`'s.
    entry_times: IntSlice<'a>,
}

impl<'a> NoStackEvidence<'a> {
    pub fn new(
        stacks_recorded: bool,
        autograd: &[(i64, i64)],
        phases: &'a [PhaseRange],
        entry_times: IntSlice<'a>,
    ) -> NoStackEvidence<'a> {
        let closed: Vec<usize> = (0..phases.len()).filter(|&i| phases[i].end_us.is_some()).collect();
        let mut by_rank = closed;
        by_rank.sort_by_key(|&i| {
            (
                phases[i].end_us.unwrap_or(i64::MAX).saturating_sub(phases[i].start_us),
                i,
            )
        });
        let innermost = FirstCovering::new(by_rank.iter().zip(0u32..).map(|(&i, rank)| {
            let p = &phases[i];
            (p.start_us, p.end_us.unwrap_or(i64::MIN), rank)
        }));
        NoStackEvidence {
            stacks_recorded,
            autograd: Union::new(autograd.iter().copied()),
            phases,
            innermost,
            by_rank,
            entry_times,
        }
    }

    /// Why an allocation made at `t_alloc` (`None`: before the trace) has no stack.
    pub fn reason(&self, t_alloc: Option<i64>) -> NoStackReason {
        match t_alloc {
            None => NoStackReason::BeforeTrace,
            Some(_) if !self.stacks_recorded => NoStackReason::StacksNotRecorded,
            Some(t) if self.autograd.holds(t) => NoStackReason::AutogradThread,
            Some(_) => NoStackReason::NoPythonThread,
        }
    }

    /// The innermost (shortest) range containing `t`.
    pub fn phase_at(&self, t: Option<i64>) -> Option<&str> {
        let rank = self.innermost.first(t?)?;
        Some(self.phases[self.by_rank[rank as usize]].name.as_str())
    }
}

/// One live allocation: its row in the lifetimes frame.
struct Live {
    stack: u32,
    size: i64,
    /// Entry index of its alloc, `-1` before the trace.
    alloc_idx: i32,
}

/// The time of the entry an allocation was made at (`None`: before the trace).
fn made_at(alloc_idx: i32, entry_times: IntSlice) -> Option<i64> {
    usize::try_from(alloc_idx).ok().and_then(|i| entry_times.get(i))
}

/// The allocations live right after entry `idx` (`None`: before the first entry).
fn live_at(lifetimes: &DataFrame, idx: Option<usize>) -> PolarsResult<Vec<Live>> {
    let at = idx.map_or(-1, |i| i as i64);
    let alloc = lt_col::ALLOC_IDX.slice(lifetimes)?;
    let free = lt_col::FREE_IDX.slice(lifetimes)?;
    let size = IntSlice::of(lifetimes, lt_col::SIZE)?;
    let stack = StackIds::of(lifetimes, lt_col::STACK)?;
    Ok((0..lifetimes.height())
        .filter(|&i| i64::from(alloc[i]) <= at && (free[i] == -1 || i64::from(free[i]) > at))
        .map(|i| Live {
            stack: stack.at(i),
            size: size.at(i),
            alloc_idx: alloc[i],
        })
        .collect())
}

/// How a live allocation is grouped: by its folded stack, or, without one, by why and where.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Key {
    Stack(Vec<String>),
    NoStack(u8, Option<String>),
}

fn reason_slot(r: NoStackReason) -> u8 {
    match r {
        NoStackReason::BeforeTrace => 0,
        NoStackReason::StacksNotRecorded => 1,
        NoStackReason::AutogradThread => 2,
        NoStackReason::NoPythonThread => 3,
    }
}

const REASONS: [NoStackReason; 4] = [
    NoStackReason::BeforeTrace,
    NoStackReason::StacksNotRecorded,
    NoStackReason::AutogradThread,
    NoStackReason::NoPythonThread,
];

/// The live allocations at `idx`, grouped by folded stack (allocations without one by reason
/// and phase), largest `top` groups first.
pub fn live_groups_at(
    lifetimes: &DataFrame,
    idx: Option<usize>,
    top: usize,
    stacks: &StackResolver,
    evidence: &NoStackEvidence,
) -> PolarsResult<Vec<StackGroup>> {
    let mut folded: FxHashMap<u32, Vec<String>> = FxHashMap::default();
    // Per group: bytes, count, and its largest stack id with that id's bytes.
    let mut groups: FxHashMap<Key, (i64, usize, FxHashMap<u32, i64>)> = FxHashMap::default();
    for l in live_at(lifetimes, idx)? {
        let frames = folded.entry(l.stack).or_insert_with(|| stacks.user_frames(l.stack));
        let key = if frames.is_empty() {
            let t_alloc = made_at(l.alloc_idx, evidence.entry_times);
            let reason = evidence.reason(t_alloc);
            // The range it was made in; made on the autograd thread, it is backward anyway.
            let phase = evidence
                .phase_at(t_alloc)
                .map(str::to_owned)
                .or_else(|| (reason == NoStackReason::AutogradThread).then(|| "backward".to_owned()));
            Key::NoStack(reason_slot(reason), phase)
        } else {
            Key::Stack(frames.clone())
        };
        let g = groups.entry(key).or_default();
        g.0 += l.size;
        g.1 += 1;
        *g.2.entry(l.stack).or_default() += l.size;
    }
    let mut out: Vec<(Key, StackGroup)> = groups
        .into_iter()
        .map(|(key, (bytes, count, ids))| {
            let id = ids
                .into_iter()
                .max_by_key(|&(id, b)| (b, std::cmp::Reverse(id)))
                .map(|(id, _)| id)
                .unwrap_or(0);
            let (stack, no_stack_reason, phase) = match &key {
                Key::Stack(f) => (f.clone(), None, None),
                Key::NoStack(r, p) => (Vec::new(), Some(REASONS[*r as usize]), p.clone()),
            };
            let group = StackGroup {
                stack_id: Some(id),
                module: stacks.module_of(id),
                stack,
                bytes,
                count,
                no_stack_reason,
                phase,
            };
            (key, group)
        })
        .collect();
    out.sort_by(|(ka, a), (kb, b)| b.bytes.cmp(&a.bytes).then_with(|| ka.cmp(kb)));
    Ok(out.into_iter().take(top).map(|(_, g)| g).collect())
}

/// The live allocations at `idx`, grouped by the model-code frame that asked for them,
/// largest `top` first.
pub fn live_modules_at(
    lifetimes: &DataFrame,
    idx: Option<usize>,
    top: usize,
    stacks: &StackResolver,
) -> PolarsResult<Vec<ModuleGroup>> {
    let mut module: FxHashMap<u32, Option<String>> = FxHashMap::default();
    let mut groups: FxHashMap<Option<String>, (i64, usize)> = FxHashMap::default();
    for l in live_at(lifetimes, idx)? {
        let m = module.entry(l.stack).or_insert_with(|| stacks.module_of(l.stack));
        let g = groups.entry(m.clone()).or_default();
        g.0 += l.size;
        g.1 += 1;
    }
    let mut out: Vec<ModuleGroup> = groups
        .into_iter()
        .map(|(module, (bytes, count))| ModuleGroup { module, bytes, count })
        .collect();
    out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.module.cmp(&b.module)));
    out.truncate(top);
    Ok(out)
}

/// Why the allocations of `stack` (whose folded stack is empty) have none: the reason most of
/// its allocations' bytes share.
pub fn no_stack_reason_of(
    lifetimes: &DataFrame,
    stack: u32,
    evidence: &NoStackEvidence,
) -> PolarsResult<NoStackReason> {
    let stacks = StackIds::of(lifetimes, lt_col::STACK)?;
    let alloc = lt_col::ALLOC_IDX.slice(lifetimes)?;
    let size = IntSlice::of(lifetimes, lt_col::SIZE)?;
    let mut bytes = [0i64; 4];
    for i in (0..lifetimes.height()).filter(|&i| stacks.at(i) == stack) {
        let t = made_at(alloc[i], evidence.entry_times);
        bytes[reason_slot(evidence.reason(t)) as usize] += size.at(i);
    }
    let best = (0..4).max_by_key(|&r| (bytes[r], std::cmp::Reverse(r))).unwrap_or(0);
    Ok(REASONS[best])
}
