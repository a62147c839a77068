//! The structure of training read from a device's phases: each optimizer step's iteration —
//! its forward and backward, from the previous step's end (or the run's first iteration) to
//! the step — and the zero_grad ranges; and where an instant falls in them ([`locate`],
//! [`in_zero_grad`], [`first_forward_from`]), asked for every allocation by
//! [`crate::analysis::categories`], answered by binary search for every shape the iterations can take
//! (a long run has thousands; [`crate::analysis::interval_index`]).

use crate::analysis::interval_index::{FirstCovering, Union};
use crate::analysis::usage::Usage;
use crate::analysis::DeviceEvents;
use crate::stacks::StackResolver;
use crate::tables::int_slice::IntSlice;
use crate::tables::Action;
use memlens_api::PhaseRange;

/// A time interval `[start, end]` on the trace's axis.
pub(in crate::analysis) type Span = (i64, i64);

/// One training iteration as the allocator saw it.
#[derive(Debug, Clone, Copy)]
pub(in crate::analysis) struct Iteration {
    /// Forward and backward: from the previous step's end (or the run's first iteration) to
    /// this step's start.
    pub(in crate::analysis) forward: Span,
    pub(in crate::analysis) backward: Span,
    pub(in crate::analysis) step: Span,
    /// Where the iteration ends: its step's end, or the end of the zero_grad right after it.
    pub(in crate::analysis) end: i64,
}

/// The phases of a device's run.
pub struct Structure {
    pub(in crate::analysis) iterations: Vec<Iteration>,
    /// Whether the iterations end at optimizer steps (else at the ends of backward passes, in
    /// a run without an optimizer: their steps hold no instant).
    pub(in crate::analysis) from_optimizer: bool,
    /// Where [`locate`] and the zero_grad test look, found once: every allocation asks.
    index: PhaseIndex,
}

/// What answers "which iteration and phase is this instant in", "is it in a zero_grad" and
/// "which is the first iteration from this instant on" by binary search, for every shape the
/// iterations can take (a long run has thousands, and each of its millions of allocations
/// asks): the answers a scan of the iterations in order gives.
struct PhaseIndex {
    /// The first iteration that places an instant in one of its phases.
    placing: FirstCovering,
    zero_grads: Union,
    /// The first iteration whose forward holds an instant.
    forward_holding: FirstCovering,
    /// Forward starts ascending, each with the lowest iteration number among those starting
    /// there or later.
    forward_starts: Vec<(i64, u32)>,
}

impl PhaseIndex {
    fn new(iterations: &[Iteration], zero_grads: &[Span]) -> PhaseIndex {
        // The instants `place` puts in each: the step's closed range, and the half-open
        // backward and forward ones (the last instant inside a half-open one is end − 1).
        let placing = FirstCovering::new(iterations.iter().zip(0u32..).flat_map(|(it, k)| {
            let backward = if it.backward.1 > it.backward.0 {
                (it.backward.0, it.backward.1 - 1)
            } else {
                (1, 0)
            };
            [
                (it.step.0, it.step.1, k),
                (backward.0, backward.1, k),
                (it.forward.0, it.forward.1.saturating_sub(1), k),
            ]
        }));
        let forward_holding = FirstCovering::new(
            iterations
                .iter()
                .zip(0u32..)
                .map(|(it, k)| (it.forward.0, it.forward.1, k)),
        );
        let mut forward_starts: Vec<(i64, u32)> =
            iterations.iter().zip(0u32..).map(|(it, k)| (it.forward.0, k)).collect();
        forward_starts.sort_unstable();
        for i in (0..forward_starts.len().saturating_sub(1)).rev() {
            forward_starts[i].1 = forward_starts[i].1.min(forward_starts[i + 1].1);
        }
        PhaseIndex {
            placing,
            zero_grads: Union::new(zero_grads.iter().copied()),
            forward_holding,
            forward_starts,
        }
    }
}

fn lower(name: &str) -> String {
    name.to_ascii_lowercase()
}

/// The closed ranges whose lowercase name `pick` takes, sorted; one that ends before it starts
/// (a clock's glitch) holds nothing and is left out.
fn spans(phases: &[PhaseRange], pick: impl Fn(&str) -> bool) -> Vec<Span> {
    let mut v: Vec<Span> = phases
        .iter()
        .filter(|p| pick(&lower(&p.name)))
        .filter_map(|p| p.end_us.filter(|&e| e >= p.start_us).map(|e| (p.start_us, e)))
        .collect();
    v.sort_unstable();
    v
}

/// Ranges sorted by start, for finding the first inside a window. A range that ends before it
/// starts holds no instant and is left out (kept, it could be inside a window it starts after,
/// and every look would have to scan to the end).
struct SortedSpans {
    spans: Vec<Span>,
}

impl SortedSpans {
    fn new(mut spans: Vec<Span>) -> SortedSpans {
        spans.retain(|s| s.0 <= s.1);
        SortedSpans { spans }
    }

    /// The first range inside `window`, looked for from the first starting in it, not by a
    /// scan from the first of a long run's thousands; a range starting past the window's end
    /// cannot be inside, so the look stops there.
    fn first_inside(&self, window: Span) -> Option<Span> {
        let from = self.spans.partition_point(|s| s.0 < window.0);
        self.spans[from..]
            .iter()
            .take_while(|s| s.0 <= window.1)
            .find(|s| s.1 <= window.1)
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
pub fn structure(
    phases: &[PhaseRange],
    time: IntSlice,
    usage: &Usage,
    backward: &BackwardEvidence,
) -> Option<Structure> {
    let mut steps = spans(phases, |n| n.starts_with("optimizer.step"));
    if steps.is_empty() {
        steps = spans(phases, |n| n.contains("optimizer") && !n.contains("zero_grad"));
    }
    if steps.is_empty() {
        return backward_passes(time, backward);
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
    for (k, &recorded) in steps.iter().enumerate() {
        // A step that runs a closure (`optimizer.step(closure)`: Lightning, LBFGS) holds the
        // iteration's forward and backward: its own work begins after backward's end.
        let step = match backward.pass_ending_in(&time, recorded) {
            Some(end) if end < recorded.1 => (end + 1, recorded.1),
            _ => recorded,
        };
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
        // One that begins inside the next step is that step's own (a closure's zero_grad).
        let after = zero_grads.partition_point(|z| z.0 < step.1);
        let next_step = steps.get(k + 1).map_or(i64::MAX, |n| n.0);
        prev_end = zero_grads
            .get(after)
            .filter(|z| z.0 <= step.1 + (step.1 - window.0).max(0) && z.0 < next_step)
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
        from_optimizer: true,
        index,
    })
}

/// Where backward runs, read from the stacks: an allocation made under the autograd engine
/// (`Tensor.backward`, `torch.autograd.backward`, `torch::autograd::Engine` in a C++ stack)
/// starts a backward pass; the allocations after it with no frames (made on the autograd
/// thread, where stacks were recorded) or backward's own carry it on, and the next allocation
/// with frames of anything else (the next forward) ends it. Where frees were recorded with
/// their own stacks (`context="all"`), frees say the same: backward's last frees (a workspace
/// of the input's size, the loss) belong to it, and `zero_grad`'s do not.
pub struct BackwardEvidence<'a> {
    action: &'a [u8],
    stack: crate::tables::stack_ids::StackIds<'a>,
    stacks: &'a StackResolver,
    /// Per stack id: 0 unknown, 1 backward's, 2 no frames, 3 anything else.
    kinds: std::cell::RefCell<Vec<u8>>,
    /// Whether some free carries frames of its own (recorded with `context="all"`).
    frees_have_stacks: bool,
}

const BACKWARD: u8 = 1;
const NO_FRAMES: u8 = 2;
const ELSE: u8 = 3;

impl<'a> BackwardEvidence<'a> {
    pub fn new(ev: &'a DeviceEvents, stacks: &'a StackResolver) -> BackwardEvidence<'a> {
        let (action, stack) = (ev.action(), ev.stack());
        let is_free = |a: u8| a == Action::FreeRequested as u8 || a == Action::FreeCompleted as u8;
        let mut seen = rustc_hash::FxHashSet::default();
        let frees_have_stacks = (0..action.len())
            .filter(|&i| is_free(action[i]))
            .map(|i| stack.at(i))
            .any(|s| seen.insert(s) && !stacks.frames(s).is_empty());
        BackwardEvidence {
            action,
            stack,
            stacks,
            kinds: std::cell::RefCell::new(vec![0; stacks.stack_count()]),
            frees_have_stacks,
        }
    }

    /// What the stack of entry `i` says: an allocation's always, a free's only where frees
    /// were recorded with their own stacks.
    fn kind(&self, i: usize) -> Option<u8> {
        let a = self.action[i];
        let free = a == Action::FreeRequested as u8 || a == Action::FreeCompleted as u8;
        if a != Action::Alloc as u8 && !(free && self.frees_have_stacks) {
            return None;
        }
        let s = self.stack.at(i);
        let find = || {
            let frames = self.stacks.frames(s);
            if frames.is_empty() {
                if self.stacks.any_recorded() {
                    NO_FRAMES
                } else {
                    ELSE
                }
            } else if frames.iter().any(|f| is_backward_frame(f)) {
                BACKWARD
            } else {
                ELSE
            }
        };
        let mut kinds = self.kinds.borrow_mut();
        Some(match kinds.get_mut(s as usize) {
            Some(0) | None => {
                let k = find();
                if let Some(slot) = kinds.get_mut(s as usize) {
                    *slot = k;
                }
                k
            }
            Some(k) => *k,
        })
    }

    /// The time of the last allocation of the first backward pass that begins inside
    /// `span` (and the entries up to its end), if one does.
    fn pass_ending_in(&self, time: &IntSlice, span: Span) -> Option<i64> {
        let (lo, hi) = (
            time.partition_point(|t| t < span.0),
            time.partition_point(|t| t <= span.1),
        );
        let first = (lo..hi).find(|&i| self.kind(i) == Some(BACKWARD) && self.action[i] == Action::Alloc as u8)?;
        let mut last = first;
        for i in first + 1..hi {
            match self.kind(i) {
                Some(BACKWARD | NO_FRAMES) => last = i,
                Some(_) => break,
                None => {}
            }
        }
        Some(time.at(last))
    }

    /// Each backward pass's first and last allocation.
    fn passes(&self) -> Vec<(usize, usize)> {
        let mut out: Vec<(usize, usize)> = Vec::new();
        let mut open = false;
        for i in 0..self.action.len() {
            match self.kind(i) {
                Some(BACKWARD) if !open && self.action[i] == Action::Alloc as u8 => {
                    out.push((i, i));
                    open = true;
                }
                Some(BACKWARD | NO_FRAMES) if open => {
                    if let Some(p) = out.last_mut() {
                        p.1 = i;
                    }
                }
                Some(ELSE) => open = false,
                _ => {}
            }
        }
        out
    }
}

/// Whether a frame (`file:line:function`) is the autograd engine's backward.
pub(in crate::analysis) fn is_backward_frame(f: &str) -> bool {
    f.contains("torch/autograd/") && (f.ends_with(":backward") || f.contains("_engine_run_backward"))
        || f.contains("torch/_tensor.py") && f.ends_with(":backward")
        || f.contains("torch::autograd::Engine")
}

/// The iterations of a run without optimizer steps whose stacks show backward passes (a
/// forward + backward benchmark, gradients accumulated): each from the end of the previous
/// pass to the end of its own; their steps hold no instant.
fn backward_passes(time: IntSlice, backward: &BackwardEvidence) -> Option<Structure> {
    let passes = backward.passes();
    if passes.is_empty() {
        return None;
    }
    let mut prev_end = time.first()?;
    let iterations: Vec<Iteration> = passes
        .into_iter()
        .map(|(first, last)| {
            let (start, end) = (time.at(first), time.at(last));
            let it = Iteration {
                forward: (prev_end.min(start), start),
                backward: (start, end.saturating_add(1)),
                step: (end.saturating_add(1), end),
                end,
            };
            prev_end = end.saturating_add(1);
            it
        })
        .collect();
    let index = PhaseIndex::new(&iterations, &[]);
    Some(Structure {
        iterations,
        from_optimizer: false,
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
pub(in crate::analysis) fn spans_or_open(phases: &[PhaseRange], name: &str) -> Vec<Span> {
    let mut v: Vec<Span> = phases
        .iter()
        .filter(|p| lower(&p.name) == name)
        .map(|p| (p.start_us, p.end_us.unwrap_or(i64::MAX)))
        .collect();
    v.sort_unstable();
    v
}

pub(in crate::analysis) fn within(t: i64, s: Span) -> bool {
    s.0 <= t && t <= s.1
}

/// Where an instant falls: (iteration, phase) with phase 0 forward, 1 backward, 2 step; the
/// first iteration that places it.
pub(in crate::analysis) fn locate(st: &Structure, t: i64) -> Option<(usize, u8)> {
    let k = st.index.placing.first(t)? as usize;
    place(k, &st.iterations[k], t)
}

/// The first iteration whose forward starts after `t` or holds it.
pub(in crate::analysis) fn first_forward_from(st: &Structure, t: i64) -> Option<usize> {
    let starts = &st.index.forward_starts;
    let later = starts.get(starts.partition_point(|s| s.0 <= t)).map(|s| s.1);
    let holding = st.index.forward_holding.first(t);
    [later, holding].into_iter().flatten().min().map(|k| k as usize)
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
pub(in crate::analysis) fn in_zero_grad(st: &Structure, t: i64) -> bool {
    st.index.zero_grads.holds(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::testing::Lcg;

    /// Iterations one after another as a run's are (`overlap` 0), or overlapping and out of
    /// order, with empty phases now and then; zero_grads between them or anywhere.
    fn structure(rng: &mut Lcg, overlap: u64) -> (Structure, Vec<Span>) {
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
            // 0: apart; 1: overlapping, out of order; 2: each forward starts where the step
            // before it ends (a run without zero_grad ranges).
            t = match overlap {
                0 => z.1.max(s.1) + 2,
                1 => z.1.max(s.1) + 2 - n(60),
                _ => s.1,
            };
        }
        zero_grads.sort_unstable();
        let index = PhaseIndex::new(&iterations, &zero_grads);
        (
            Structure {
                iterations,
                from_optimizer: true,
                index,
            },
            zero_grads,
        )
    }

    /// Found by binary search or by a scan of every iteration, an instant lands in the same
    /// iteration and phase, in a zero_grad or not, and before the same first forward, alike —
    /// for iterations one after another, touching, overlapping and out of order (the search
    /// is used for every shape: a long run's millions of allocations each ask).
    #[test]
    fn an_instant_is_placed_by_search_as_by_a_scan() {
        let mut rng = Lcg(7);
        for case in 0..400 {
            let (st, zero_grads) = structure(&mut rng, case % 3);
            let end = zero_grads.last().map_or(0, |z| z.1) + 10;
            for t in -5..end {
                let scan = st.iterations.iter().enumerate().find_map(|(k, it)| place(k, it, t));
                assert_eq!(locate(&st, t), scan, "case {case} at {t}");
                let any = zero_grads.iter().any(|z| within(t, *z));
                assert_eq!(in_zero_grad(&st, t), any, "case {case} at {t}");
                let first = st
                    .iterations
                    .iter()
                    .position(|it| it.forward.0 > t || within(t, it.forward));
                assert_eq!(first_forward_from(&st, t), first, "case {case} at {t}");
            }
        }
    }
}
