//! The structure of training read from a device's phases: each optimizer step's iteration —
//! its forward and backward, from the previous step's end (or the run's first iteration) to
//! the step — and the zero_grad ranges; and where an instant falls in them ([`locate`],
//! [`in_zero_grad`]), asked for every allocation by [`super::categories`], answered by binary
//! search where a run's iterations follow each other (a long run has thousands).

use super::usage::Usage;
use crate::tables::int_slice::IntSlice;
use memlens_api::PhaseRange;

/// A time interval `[start, end]` on the trace's axis.
pub(super) type Span = (i64, i64);

/// One training iteration as the allocator saw it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Iteration {
    /// Forward and backward: from the previous step's end (or the run's first iteration) to
    /// this step's start.
    pub(super) forward: Span,
    pub(super) backward: Span,
    pub(super) step: Span,
    /// Where the iteration ends: its step's end, or the end of the zero_grad right after it.
    pub(super) end: i64,
}

/// The phases of a device's run.
pub struct Structure {
    pub(super) iterations: Vec<Iteration>,
    pub(super) zero_grads: Vec<Span>,
    /// Where [`locate`] and the zero_grad test look, found once: every allocation asks.
    index: PhaseIndex,
}

/// What answers "which iteration and phase is this instant in" and "is it in a zero_grad"
/// with a binary search instead of a scan of every iteration (a long run has thousands, and
/// each of its millions of allocations asks both) — where the answer is the scan's: when the
/// instants each iteration can place follow each other without overlapping (as a run's
/// iterations do), only the one whose range holds an instant can place it; else every
/// instant scans them all, as before.
struct PhaseIndex {
    /// Per iteration that can place any instant: the first and last instants it can place,
    /// and its number; `None` when those ranges overlap or are out of order.
    iterations: Option<Vec<(i64, i64, usize)>>,
    /// Whether the zero_grad ranges (sorted) follow each other without overlapping.
    zero_grads_apart: bool,
}

impl PhaseIndex {
    fn new(iterations: &[Iteration], zero_grads: &[Span]) -> PhaseIndex {
        // The instants `locate` places in each: the step's closed range, and the half-open
        // backward and forward ones (the last instant inside a half-open one is end − 1).
        let placeable = |it: &Iteration| {
            let ranges = [
                (it.step.0, it.step.1),
                (it.backward.0, it.backward.1.saturating_sub(1)),
                (it.forward.0, it.forward.1.saturating_sub(1)),
            ];
            ranges
                .into_iter()
                .filter(|r| r.0 <= r.1)
                .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)))
        };
        let ranges: Vec<(i64, i64, usize)> = iterations
            .iter()
            .enumerate()
            .filter_map(|(k, it)| placeable(it).map(|(first, last)| (first, last, k)))
            .collect();
        let apart = |a: &(i64, i64), b: &(i64, i64)| a.1 < b.0;
        let iterations_apart = ranges.windows(2).all(|w| apart(&(w[0].0, w[0].1), &(w[1].0, w[1].1)));
        let nonempty: Vec<&Span> = zero_grads.iter().filter(|z| z.0 <= z.1).collect();
        PhaseIndex {
            iterations: iterations_apart.then_some(ranges),
            zero_grads_apart: nonempty.windows(2).all(|w| apart(w[0], w[1])),
        }
    }
}

fn lower(name: &str) -> String {
    name.to_ascii_lowercase()
}

fn spans(phases: &[PhaseRange], pick: impl Fn(&str) -> bool) -> Vec<Span> {
    let mut v: Vec<Span> = phases
        .iter()
        .filter(|p| pick(&lower(&p.name)))
        .filter_map(|p| p.end_us.map(|e| (p.start_us, e)))
        .collect();
    v.sort_unstable();
    v
}

/// Ranges sorted by start, for finding the first inside a window.
struct SortedSpans {
    spans: Vec<Span>,
    /// Whether any ends before it starts (such a range can be inside a window it starts after).
    any_reversed: bool,
}

impl SortedSpans {
    fn new(spans: Vec<Span>) -> SortedSpans {
        let any_reversed = spans.iter().any(|s| s.1 < s.0);
        SortedSpans { spans, any_reversed }
    }

    /// The first range inside `window`, looked for from the first starting in it, not by a
    /// scan from the first of a long run's thousands; past the window's end only a reversed
    /// range can be inside, so the look stops there when there is none.
    fn first_inside(&self, window: Span) -> Option<Span> {
        let inside = |s: &Span| s.0 >= window.0 && s.1 <= window.1;
        let from = self.spans.partition_point(|s| s.0 < window.0);
        self.spans[from..]
            .iter()
            .take_while(|s| self.any_reversed || s.0 <= window.1)
            .find(|s| inside(s))
            .copied()
    }
}

/// When allocated bytes (after each entry) first peak inside `span`.
fn peak_time_in(time: IntSlice, usage: &Usage, span: Span) -> Option<i64> {
    let a = time.partition_point(|t| t < span.0);
    let b = time.partition_point(|t| t <= span.1);
    (a < b).then(|| {
        let mut peak = (i64::MIN, a);
        for (i, allocated) in (a..b).zip(usage.allocated_from(a)) {
            if allocated > peak.0 {
                peak = (allocated, i);
            }
        }
        time.at(peak.1)
    })
}

/// The training iterations of a run and their phases, from its optimizer steps (`None`
/// without any): found once per device, read by the categories and the autograd windows.
pub fn structure(phases: &[PhaseRange], time: IntSlice, usage: &Usage) -> Option<Structure> {
    let mut steps = spans(phases, |n| n.starts_with("optimizer.step"));
    if steps.is_empty() {
        steps = spans(phases, |n| n.contains("optimizer") && !n.contains("zero_grad"));
    }
    if steps.is_empty() {
        return None;
    }
    let forwards = SortedSpans::new(spans(phases, |n| n == "forward" || n.ends_with(".forward")));
    let backwards = SortedSpans::new(spans(phases, |n| n == "backward" || n.ends_with(".backward")));
    let zero_grads = spans(phases, |n| n.contains("zero_grad"));
    let first_iteration = phases
        .iter()
        .filter(|p| {
            let n = lower(&p.name);
            ["iter", "step", "epoch", "batch"].iter().any(|k| n.contains(k)) && !n.contains("optimizer")
        })
        .map(|p| p.start_us)
        .min();
    let mut prev_end = first_iteration.or(time.first()).unwrap_or(steps[0].0);
    let mut iterations = Vec::new();
    for &step in &steps {
        let window = (prev_end, step.0);
        let (forward, backward) = match (forwards.first_inside(window), backwards.first_inside(window)) {
            // The gap before an explicit forward holds the batch (see `Category::Input`).
            (Some(f), Some(b)) => ((f.0, f.1), (f.1, window.1.max(b.1))),
            _ => {
                let split = peak_time_in(time, usage, window).unwrap_or(window.1);
                ((window.0, split), (split, window.1))
            }
        };
        iterations.push(Iteration {
            forward,
            backward,
            step,
            end: step.1,
        });
        // zero_grad may follow the step: the next forward starts after it. (The ranges are
        // sorted: the first starting at or after the step's end is the one to look at.)
        let after = zero_grads.partition_point(|z| z.0 < step.1);
        prev_end = zero_grads
            .get(after)
            .filter(|z| z.0 <= step.1 + (step.1 - window.0).max(0))
            .map(|z| z.1)
            .unwrap_or(step.1)
            .max(step.1);
        if let Some(it) = iterations.last_mut() {
            it.end = prev_end;
        }
    }
    let index = PhaseIndex::new(&iterations, &zero_grads);
    Some(Structure {
        iterations,
        zero_grads,
        index,
    })
}

/// Where backward may run: each training iteration's forward and backward together (from its
/// start to its optimizer step; forward runs on the Python thread, so an allocation there
/// without frames was made on the autograd thread), else the explicit `backward` ranges.
pub fn autograd_windows(phases: &[PhaseRange], training: Option<&Structure>) -> Vec<(i64, i64)> {
    match training {
        Some(st) => st.iterations.iter().map(|i| (i.forward.0, i.backward.1)).collect(),
        None => spans(phases, |n| n == "backward" || n.ends_with(".backward")),
    }
}

/// Ranges named exactly `name`, a range still open at the end reaching to the end of time.
pub(super) fn spans_or_open(phases: &[PhaseRange], name: &str) -> Vec<Span> {
    let mut v: Vec<Span> = phases
        .iter()
        .filter(|p| lower(&p.name) == name)
        .map(|p| (p.start_us, p.end_us.unwrap_or(i64::MAX)))
        .collect();
    v.sort_unstable();
    v
}

pub(super) fn within(t: i64, s: Span) -> bool {
    s.0 <= t && t <= s.1
}

/// Where an instant falls: (iteration, phase) with phase 0 forward, 1 backward, 2 step.
pub(super) fn locate(st: &Structure, t: i64) -> Option<(usize, u8)> {
    if let Some(ranges) = &st.index.iterations {
        let j = ranges.partition_point(|r| r.0 <= t).checked_sub(1)?;
        let (_, last, k) = ranges[j];
        return (t <= last).then(|| place(k, &st.iterations[k], t)).flatten();
    }
    st.iterations.iter().enumerate().find_map(|(k, it)| place(k, it, t))
}

/// Where an instant falls in iteration `k`, if in it.
fn place(k: usize, it: &Iteration, t: i64) -> Option<(usize, u8)> {
    if within(t, it.step) {
        Some((k, 2))
    } else if t >= it.backward.0 && t < it.backward.1 && it.backward.1 > it.backward.0 {
        Some((k, 1))
    } else if t >= it.forward.0 && t < it.forward.1 {
        Some((k, 0))
    } else {
        None
    }
}

/// Whether an instant is inside a zero_grad range.
pub(super) fn in_zero_grad(st: &Structure, t: i64) -> bool {
    if st.index.zero_grads_apart {
        // The last range starting at or before `t` is the only one that can hold it (ranges
        // that hold nothing sort anywhere, but hold nothing).
        let z = &st.zero_grads;
        let i = z.partition_point(|r| r.0 <= t);
        return z[..i].iter().rev().find(|r| r.0 <= r.1).is_some_and(|r| within(t, *r));
    }
    st.zero_grads.iter().any(|z| within(t, *z))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::testing::Lcg;

    /// Iterations one after another as a run's are (`overlap` 0), or overlapping and out of
    /// order, with empty phases now and then; zero_grads between them or anywhere.
    fn structure(rng: &mut Lcg, overlap: i64) -> Structure {
        let mut n = |k: u64| rng.below(k) as i64;
        let mut t = n(50);
        let mut iterations = Vec::new();
        let mut zero_grads = Vec::new();
        for _ in 0..1 + n(40) {
            let f = (t, t + n(30));
            let b = (f.1, f.1 + n(30));
            let s = (b.1 + n(3), b.1 + 3 + n(10));
            iterations.push(Iteration {
                forward: f,
                backward: b,
                step: s,
                end: s.1,
            });
            let z = (s.1 + 1, s.1 + 1 + n(5) - n(2));
            zero_grads.push(z);
            t = z.1.max(s.1) + 2 - overlap * n(60);
        }
        zero_grads.sort_unstable();
        let index = PhaseIndex::new(&iterations, &zero_grads);
        Structure {
            iterations,
            zero_grads,
            index,
        }
    }

    /// Found by binary search or by a scan of every iteration, an instant lands in the same
    /// iteration and phase, and in a zero_grad or not, alike; the search is used where the
    /// iterations follow each other, and only there.
    #[test]
    fn an_instant_is_placed_by_search_as_by_a_scan() {
        let mut rng = Lcg(7);
        let (mut searched, mut scanned, mut zero_grads_searched) = (0, 0, 0);
        for case in 0..400 {
            let st = structure(&mut rng, case % 2);
            if st.index.iterations.is_some() {
                searched += 1;
            } else {
                scanned += 1;
            }
            zero_grads_searched += usize::from(st.index.zero_grads_apart);
            let end = st.zero_grads.last().map_or(0, |z| z.1) + 10;
            for t in -5..end {
                let scan = st.iterations.iter().enumerate().find_map(|(k, it)| place(k, it, t));
                assert_eq!(locate(&st, t), scan, "case {case} at {t}");
                let any = st.zero_grads.iter().any(|z| within(t, *z));
                assert_eq!(in_zero_grad(&st, t), any, "case {case} at {t}");
            }
        }
        assert!(searched > 100 && scanned > 50, "{searched} searched, {scanned} scanned");
        assert!(
            (100..350).contains(&zero_grads_searched),
            "{zero_grads_searched} of 400"
        );
    }
}
