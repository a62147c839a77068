//! Two devices side by side, A − B: two runs of a job (a config change, a checkpointing
//! policy, a new PyTorch) or two ranks of one. The peak difference is split by category and by
//! stack — stacks matched on their folded user frames, whose paths are shortened
//! ([`crate::stacks`]), never on addresses or stack ids, so runs from different machines line
//! up — and both allocated lines are put on one x axis, iteration against
//! iteration when both runs have iteration ranges, else as fractions of each run's span.
//!
//! Invariant: the category deltas and the stack deltas each add up to `peak_delta_bytes`
//! (every allocation live at a peak has one category and one stack).

use memlens_api::{
    AlignedTimelines, Category, CategoryDelta, CategorySteady, CompareAxis, ComparedRun, Comparison, DeviceSummary,
    FileSummary, Side, StackDelta,
};
use polars_core::prelude::*;
use rustc_hash::FxHashMap;

use crate::analysis::compare_verdict::{verdict, SettingChange};
use crate::analysis::lifetimes::live_by_stack;
use crate::error::AnalysisError;
use crate::stacks::StackResolver;
use crate::tables::columns::usage as usage_col;
use crate::tables::entry_steps::EntrySteps;
use crate::tables::int_slice::IntSlice;

/// How many stacks a comparison lists (the rest are summed).
pub const COMPARE_STACKS: usize = 50;
/// Aligned timeline buckets by default.
pub const COMPARE_WIDTH: usize = 600;

/// One side of a comparison: its summaries, its stored frames and its stacks.
pub struct CompareSide<'a> {
    pub label: String,
    pub report: Option<String>,
    pub file: &'a FileSummary,
    pub file_index: usize,
    pub device: &'a DeviceSummary,
    pub frames: &'a dyn crate::analysis::StoredDevice,
    pub stacks: &'a StackResolver,
    pub rank: Option<u32>,
}

/// Live bytes and allocations at a side's peak by stack: frames shortened and interned in
/// `frames` (shared by both sides, so equal frames get equal ids).
fn peak_by_stack(side: &CompareSide, frames: &mut FxHashMap<String, u32>) -> PolarsResult<Vec<PeakStack>> {
    let live = live_by_stack(side.frames.lifetimes(), side.device.peak_event_index, usize::MAX)?;
    let mut by_key: FxHashMap<Vec<u32>, (i64, usize)> = FxHashMap::default();
    for l in live {
        let key: Vec<u32> = side
            .stacks
            .user_frames(l.stack)
            .iter()
            .map(|f| {
                let n = frames.len() as u32;
                *frames.entry(f.clone()).or_insert(n)
            })
            .collect();
        let e = by_key.entry(key).or_default();
        e.0 += l.bytes;
        e.1 += l.count;
    }
    let mut out: Vec<PeakStack> = by_key
        .into_iter()
        .map(|(frames, (bytes, count))| PeakStack { frames, bytes, count })
        .collect();
    out.sort_by(|x, y| x.frames.cmp(&y.frames));
    Ok(out)
}

/// One side's live bytes at its peak from one stack (interned frames, innermost first).
struct PeakStack {
    frames: Vec<u32>,
    bytes: i64,
    count: usize,
}

/// Matches the two sides' stacks: equal stacks first; then what is left by the longest
/// innermost run of frames both share that reaches code outside `torch/` (runs launched from
/// another entry point, or a config change a few frames up, differ only in their outer frames).
/// Each match is one delta named by the frames matched on; the rest are one side's only.
fn stack_deltas(a: &CompareSide, b: &CompareSide) -> PolarsResult<(Vec<StackDelta>, i64)> {
    let mut interned: FxHashMap<String, u32> = FxHashMap::default();
    let sa = peak_by_stack(a, &mut interned)?;
    let sb = peak_by_stack(b, &mut interned)?;
    let mut names = vec![String::new(); interned.len()];
    for (name, id) in interned {
        names[id as usize] = name;
    }
    let outside_torch: Vec<bool> = names.iter().map(|n| !n.starts_with("torch/")).collect();
    let mut done_a = vec![false; sa.len()];
    let mut done_b = vec![false; sb.len()];
    let mut all: Vec<StackDelta> = Vec::new();
    let push = |all: &mut Vec<StackDelta>, key: &[u32], ia: &[usize], ib: &[usize]| {
        let (bytes_a, count_a) = ia.iter().fold((0, 0), |s, &i| (s.0 + sa[i].bytes, s.1 + sa[i].count));
        let (bytes_b, count_b) = ib.iter().fold((0, 0), |s, &i| (s.0 + sb[i].bytes, s.1 + sb[i].count));
        all.push(StackDelta {
            stack: key.iter().map(|&f| names[f as usize].clone()).collect(),
            delta_bytes: bytes_a - bytes_b,
            bytes_a,
            bytes_b,
            count_a,
            count_b,
            only_in: match (ia.is_empty(), ib.is_empty()) {
                (false, true) => Some(Side::A),
                (true, false) => Some(Side::B),
                _ => None,
            },
        });
    };
    // Equal stacks.
    let index_b: FxHashMap<&[u32], usize> = sb.iter().enumerate().map(|(i, s)| (&s.frames[..], i)).collect();
    for (i, s) in sa.iter().enumerate() {
        if let Some(&j) = index_b.get(&s.frames[..]) {
            done_a[i] = true;
            done_b[j] = true;
            push(&mut all, &s.frames, &[i], &[j]);
        }
    }
    // The longest shared innermost runs.
    let longest = sa.iter().chain(&sb).map(|s| s.frames.len()).max().unwrap_or(0);
    for k in (1..=longest).rev() {
        let mut groups: FxHashMap<&[u32], (Vec<usize>, Vec<usize>)> = FxHashMap::default();
        let eligible = |s: &PeakStack| s.frames.len() >= k && s.frames[..k].iter().any(|&f| outside_torch[f as usize]);
        for (i, s) in sa.iter().enumerate().filter(|(i, s)| !done_a[*i] && eligible(s)) {
            groups.entry(&s.frames[..k]).or_default().0.push(i);
        }
        if groups.is_empty() {
            continue;
        }
        for (j, s) in sb.iter().enumerate().filter(|(j, s)| !done_b[*j] && eligible(s)) {
            if let Some(g) = groups.get_mut(&s.frames[..k]) {
                g.1.push(j);
            }
        }
        let mut matched: Vec<_> = groups.into_iter().filter(|(_, (_, ib))| !ib.is_empty()).collect();
        matched.sort_by(|x, y| x.0.cmp(y.0));
        for (key, (ia, ib)) in matched {
            ia.iter().for_each(|&i| done_a[i] = true);
            ib.iter().for_each(|&j| done_b[j] = true);
            push(&mut all, key, &ia, &ib);
        }
    }
    for (i, s) in sa.iter().enumerate().filter(|(i, _)| !done_a[*i]) {
        push(&mut all, &s.frames, &[i], &[]);
    }
    for (j, s) in sb.iter().enumerate().filter(|(j, _)| !done_b[*j]) {
        push(&mut all, &s.frames, &[], &[j]);
    }
    all.retain(|d| d.delta_bytes != 0);
    all.sort_by(|x, y| {
        y.delta_bytes
            .abs()
            .cmp(&x.delta_bytes.abs())
            .then_with(|| x.stack.cmp(&y.stack))
    });
    let rest = all.iter().skip(COMPARE_STACKS).map(|d| d.delta_bytes).sum();
    all.truncate(COMPARE_STACKS);
    Ok((all, rest))
}

pub(crate) fn category_deltas(a: &DeviceSummary, b: &DeviceSummary) -> Vec<CategoryDelta> {
    let at_peak = |d: &DeviceSummary, c: Category| {
        d.categories
            .iter()
            .find(|s| s.category == c)
            .map_or(0, |s| s.bytes_at_peak)
    };
    Category::ALL
        .iter()
        .map(|&c| CategoryDelta {
            category: c,
            bytes_a: at_peak(a, c),
            bytes_b: at_peak(b, c),
            delta_bytes: at_peak(a, c) - at_peak(b, c),
        })
        .filter(|d| d.bytes_a != 0 || d.bytes_b != 0)
        .collect()
}

/// A side's usage columns and its loop's steps (only with timestamps).
struct SideSeries<'a> {
    time: IntSlice<'a>,
    allocated: IntSlice<'a>,
    reserved: &'a EntrySteps,
    steps: &'a [memlens_api::IterationStep],
}

impl<'a> SideSeries<'a> {
    fn new(side: &'a CompareSide) -> PolarsResult<SideSeries<'a>> {
        let u = side.frames.usage();
        let steps = if side.device.time_axis == memlens_api::TimeAxis::TimeUs {
            &side.device.iterations.steps[..]
        } else {
            &[]
        };
        Ok(SideSeries {
            time: usage_col::times(u)?,
            allocated: usage_col::allocated(u)?,
            reserved: side.frames.reserved(),
            steps,
        })
    }

    /// The anchor times of the iteration axis: x = k at `anchors[k]`.
    fn anchors(&self) -> Option<Vec<i64>> {
        let first_step = self.steps.first()?;
        let first = self.time.first()?;
        let last = self.time.last()?;
        let mut a = vec![first.min(first_step.start_us)];
        a.extend(self.steps.iter().map(|s| s.start_us));
        let end = self.steps.last().map_or(last, |s| s.end_us);
        a.push(end);
        a.push(last.max(end));
        Some(a)
    }

    /// The allocated peak within each step.
    fn iteration_peaks(&self) -> Vec<i64> {
        self.steps.iter().map(|s| s.peak_allocated_bytes).collect()
    }
}

/// `t` on an axis whose unit `k` runs from `anchors[k]` to `anchors[k + 1]`.
fn x_on(anchors: &[i64], t: i64) -> f64 {
    let k = anchors.partition_point(|&a| a <= t).clamp(1, anchors.len() - 1) - 1;
    let (lo, hi) = (anchors[k], anchors[k + 1]);
    if hi <= lo {
        return k as f64;
    }
    k as f64 + ((t - lo) as f64 / (hi - lo) as f64).clamp(0.0, 1.0)
}

/// Per bucket the most of `values`, held across empty buckets, `None` past the side's end.
fn bucketed(xs: &[f64], values: impl IntoIterator<Item = i64>, x_max: f64, width: usize) -> Vec<Option<i64>> {
    let mut out: Vec<Option<i64>> = vec![None; width];
    let mut last_bucket = 0;
    for (&x, v) in xs.iter().zip(values) {
        let b = ((x / x_max * width as f64) as usize).min(width - 1);
        out[b] = Some(out[b].map_or(v, |o: i64| o.max(v)));
        last_bucket = last_bucket.max(b);
    }
    let mut held = None;
    for o in out.iter_mut().take(last_bucket + 1) {
        match o {
            Some(v) => held = Some(*v),
            None => *o = held,
        }
    }
    out
}

fn aligned(a: &SideSeries, b: &SideSeries, width: usize) -> AlignedTimelines {
    let width = width.clamp(10, 4000);
    let (axis, xa, xb, x_max) = match (a.anchors(), b.anchors()) {
        (Some(aa), Some(ab)) => {
            let xa: Vec<f64> = a.time.iter().map(|t| x_on(&aa, t)).collect();
            let xb: Vec<f64> = b.time.iter().map(|t| x_on(&ab, t)).collect();
            let x_max = (aa.len().max(ab.len()) - 1) as f64;
            (CompareAxis::Iteration, xa, xb, x_max)
        }
        _ => {
            let norm = |s: &SideSeries| -> Vec<f64> {
                let (first, last) = (s.time.first().unwrap_or(0), s.time.last().unwrap_or(0));
                let span = (last - first).max(1) as f64;
                s.time.iter().map(|t| (t - first) as f64 / span).collect()
            };
            (CompareAxis::NormalizedTime, norm(a), norm(b), 1.0)
        }
    };
    AlignedTimelines {
        axis,
        x_max,
        width,
        allocated_a: bucketed(&xa, a.allocated.iter(), x_max, width),
        allocated_b: bucketed(&xb, b.allocated.iter(), x_max, width),
        reserved_a: bucketed(&xa, a.reserved.values(), x_max, width),
        reserved_b: bucketed(&xb, b.reserved.values(), x_max, width),
    }
}

fn compared_run(side: &CompareSide, series: &SideSeries) -> ComparedRun {
    let d = side.device;
    ComparedRun {
        label: side.label.clone(),
        report: side.report.clone(),
        file: side.file.file.clone(),
        file_index: side.file_index,
        device: d.device,
        rank: side.rank,
        peak_allocated_bytes: d.peak_allocated_bytes,
        peak_reserved_bytes: d.peak_reserved_bytes,
        fragmentation_at_peak: d.fragmentation_at_peak.clone(),
        oom_count: d.oom_count,
        oom_causes: d.ooms.iter().map(|o| o.cause).collect(),
        iterations: series.steps.len(),
        iteration_peaks: series.iteration_peaks(),
        steady_by_category: d
            .categories
            .iter()
            .map(|c| CategorySteady {
                category: c.category,
                steady_bytes: c.steady_bytes,
            })
            .collect(),
    }
}

/// Compares two devices, A − B.
pub fn compare_runs(a: &CompareSide, b: &CompareSide, width: usize) -> Result<Comparison, AnalysisError> {
    let (sa, sb) = (SideSeries::new(a)?, SideSeries::new(b)?);
    let (by_stack, rest) = stack_deltas(a, b)?;
    let by_category = category_deltas(a.device, b.device);
    let (ra, rb) = (compared_run(a, &sa), compared_run(b, &sb));
    let peak_delta_bytes = a.device.peak_allocated_bytes - b.device.peak_allocated_bytes;
    let setting = SettingChange::between(
        (a.file.source.expandable_segments, a.file.source.alloc_conf.as_deref()),
        (b.file.source.expandable_segments, b.file.source.alloc_conf.as_deref()),
    );
    Ok(Comparison {
        headline: verdict(&ra, &rb, &by_category, &by_stack, setting.as_ref()),
        peak_delta_bytes,
        reserved_delta_bytes: a.device.peak_reserved_bytes - b.device.peak_reserved_bytes,
        by_category,
        by_stack,
        by_stack_rest_delta_bytes: rest,
        timeline: aligned(&sa, &sb, width),
        a: ra,
        b: rb,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iteration_axis_puts_each_iteration_on_one_unit() {
        let anchors = [0, 10, 20, 40, 40];
        assert_eq!(x_on(&anchors, 0), 0.0);
        assert_eq!(x_on(&anchors, 15), 1.5);
        assert_eq!(x_on(&anchors, 30), 2.5);
        assert_eq!(x_on(&anchors, 40), 3.0);
        assert_eq!(x_on(&anchors, 99), 3.0);
    }

    #[test]
    fn buckets_hold_their_value_and_end_with_the_side() {
        let b = bucketed(&[0.0, 0.1, 0.5], [1, 5, 3], 1.0, 10);
        assert_eq!(
            b,
            vec![
                Some(1),
                Some(5),
                Some(5),
                Some(5),
                Some(5),
                Some(3),
                None,
                None,
                None,
                None
            ]
        );
    }
}
