//! A run's loop steps, from whichever evidence it has, strongest first: the script's own
//! step ranges (`record_function("iteration")`, `ProfilerStep#3`), optimizer steps as
//! separators (ranges, or runs of `torch/optim/` frames: [`super::phases`]), the allocation
//! rhythm ([`repeating_pattern`]), and last any range the script repeats.
//!
//! Invariant: a step is whole — its forward, backward and optimizer step — so its peak is
//! the step's, and the run's peak, when it falls inside a step, is the highest step peak
//! (`tests/tests/iterations.rs`).

use memlens_api::{IterationEvidence, IterationInfo, IterationStep, PhaseRange};

use super::phases::family;
use super::training_structure::Structure;
use super::usage::Usage;
use super::DeviceEvents;
use crate::tables::int_slice::IntSlice;

/// The most steps a summary lists one by one (about 90 bytes each in its JSON); a longer run
/// keeps its count only.
pub const MOST_STEPS_KEPT: usize = 10_000;

/// The steps of a run's loop and the evidence that found them.
pub struct LoopSteps {
    pub evidence: IterationEvidence,
    /// The name family of the ranges that gave them (`iteration`, `Optimizer.step#SGD.step`);
    /// empty for the rhythm.
    pub label: String,
    /// Each step's `(start, end)` µs, in order. A step holds the entries from its start to the
    /// next step's start (to its own end where a gap follows, or it is the last).
    pub spans: Vec<(i64, i64)>,
}

impl LoopSteps {
    /// The run's [`IterationInfo`]: the steps with their peaks (only with timestamps: `steps`
    /// are on the time axis; and only up to [`MOST_STEPS_KEPT`]).
    pub fn info(&self, ev: &DeviceEvents, usage: &Usage) -> IterationInfo {
        let source = match self.evidence {
            IterationEvidence::StepRanges => format!("annotations:{}", self.label),
            IterationEvidence::OptimizerSteps => format!("optimizer_steps:{}", self.label),
            IterationEvidence::AllocationRhythm => "allocation_pattern".to_owned(),
            IterationEvidence::None => "none".to_owned(),
        };
        IterationInfo {
            source,
            count: self.spans.len(),
            note: None,
            evidence: self.evidence,
            range_name: (!self.label.is_empty()).then(|| self.label.clone()),
            steps: if ev.has_time && self.spans.len() <= MOST_STEPS_KEPT {
                self.with_peaks(ev.time(), usage)
            } else {
                Vec::new()
            },
        }
    }

    /// Each step with the most bytes allocated after any entry within it (with no entry in it,
    /// what was allocated when it began): one pass over the entries where the steps follow
    /// each other, as a loop's do.
    fn with_peaks(&self, time: IntSlice, usage: &Usage) -> Vec<IterationStep> {
        let n = self.spans.len();
        // Each step's entries, `lo..hi`.
        let entries: Vec<(usize, usize)> = (0..n)
            .map(|k| {
                let (start, end) = self.spans[k];
                let lo = time.partition_point(|t| t < start);
                let next_abuts = self.spans.get(k + 1).is_some_and(|s| s.0 <= end);
                let hi = if next_abuts {
                    time.partition_point(|t| t < end)
                } else {
                    time.partition_point(|t| t <= end)
                };
                (lo, hi.max(lo))
            })
            .collect();
        let in_order = entries.windows(2).all(|w| w[0].1 <= w[1].0);
        let peaks: Vec<i64> = match entries.first() {
            Some(&(first, _)) if in_order => {
                let mut peaks = Vec::with_capacity(n);
                let mut values = usage.allocated_from(first);
                // The next entry `values` yields, and the bytes allocated after the one before.
                let (mut next, mut now) = (first, usage.allocated_before(first));
                for &(lo, hi) in &entries {
                    // Up to the step's first entry, then through the step.
                    for v in values.by_ref().take(lo - next) {
                        now = v;
                    }
                    let mut peak = None::<i64>;
                    for v in values.by_ref().take(hi - lo) {
                        now = v;
                        peak = Some(peak.map_or(v, |p| p.max(v)));
                    }
                    next = hi;
                    peaks.push(peak.unwrap_or(now));
                }
                peaks
            }
            _ => {
                // Steps that overlap or come out of order (ranges a script nests or leaves
                // open): each step's maximum from block maxima, not a scan of its entries.
                let blocks = BlockMax::new(usage);
                entries
                    .iter()
                    .map(|&(lo, hi)| blocks.max(usage, lo, hi).unwrap_or_else(|| usage.allocated_before(lo)))
                    .collect()
            }
        };
        self.spans
            .iter()
            .zip(peaks)
            .map(|(&(start_us, end_us), peak_allocated_bytes)| IterationStep {
                start_us,
                end_us,
                peak_allocated_bytes,
            })
            .collect()
    }
}

/// The most bytes allocated after any entry of a range, in O(1) over whole blocks of entries
/// (a sparse table of the blocks' maxima) and at most two partial blocks scanned.
struct BlockMax {
    /// `levels[j][b]`: the maximum over blocks `b .. b + 2^j`.
    levels: Vec<Vec<i64>>,
}

/// Entries a block holds.
const BLOCK: usize = 4096;

impl BlockMax {
    fn new(usage: &Usage) -> BlockMax {
        let mut first = Vec::with_capacity(usage.len().div_ceil(BLOCK));
        let mut values = usage.allocated_from(0).peekable();
        while values.peek().is_some() {
            first.push(values.by_ref().take(BLOCK).max().unwrap_or(i64::MIN));
        }
        let mut levels = vec![first];
        while let Some(last) = levels.last().filter(|l| l.len() > 1) {
            let half = 1 << (levels.len() - 1);
            let next: Vec<i64> = (0..last.len().saturating_sub(half))
                .map(|b| last[b].max(last[b + half]))
                .collect();
            if next.is_empty() {
                break;
            }
            levels.push(next);
        }
        BlockMax { levels }
    }

    /// The maximum after entries `lo..hi` (`None`: no entry).
    fn max(&self, usage: &Usage, lo: usize, hi: usize) -> Option<i64> {
        if lo >= hi {
            return None;
        }
        let (first_whole, end_whole) = (lo.div_ceil(BLOCK), hi / BLOCK);
        if first_whole >= end_whole {
            return usage.allocated_from(lo).take(hi - lo).max();
        }
        let head = usage.allocated_from(lo).take(first_whole * BLOCK - lo).max();
        let tail = usage
            .allocated_from(end_whole * BLOCK)
            .take(hi - end_whole * BLOCK)
            .max();
        let j = (end_whole - first_whole).ilog2() as usize;
        let whole = self.levels[j][first_whole].max(self.levels[j][end_whole - (1 << j)]);
        [head, tail, Some(whole)].into_iter().flatten().max()
    }
}

/// The loop's steps, from the strongest evidence the run has (without timestamps, only the
/// allocation rhythm, on the entry axis); `None` without any loop. `phases` are the device's ranges with the inferred optimizer steps, `training`
/// the structure found from them.
pub fn loop_steps(
    phases: &[PhaseRange],
    training: Option<&Structure>,
    ev: &DeviceEvents,
    usage: &Usage,
) -> Option<LoopSteps> {
    let last = ev.time().last().unwrap_or(0);
    // Without timestamps the ranges and the steps they give have no place on the entry axis:
    // only the rhythm can be read.
    let phases: &[PhaseRange] = if ev.has_time { phases } else { &[] };
    let training = training.filter(|_| ev.has_time);
    if let Some((label, spans)) = repeated_ranges(phases, says_step, last) {
        return Some(LoopSteps {
            evidence: IterationEvidence::StepRanges,
            label,
            spans,
        });
    }
    // Optimizer steps are the loop's steps when there is one per step: more of them than the
    // allocation rhythm has repetitions (an optimizer stepped per parameter from gradient
    // hooks, inside backward) is evidence that yields no loop, and the rhythm is read instead.
    let rhythm = std::cell::OnceCell::new();
    let rhythm = || rhythm.get_or_init(|| repeating_pattern(ev).filter(|starts| churns(ev, usage, starts)));
    let one_per_step = |st: &&Structure| {
        let n = st.iterations.len();
        n > 0 && st.from_optimizer && rhythm().as_ref().is_none_or(|starts| n * 2 <= starts.len() * 3)
    };
    if let Some(st) = training.filter(one_per_step) {
        let label = phases
            .iter()
            .filter(|p| p.name.to_ascii_lowercase().starts_with("optimizer.step"))
            .map(|p| family(&p.name))
            .next()
            .unwrap_or("optimizer")
            .to_owned();
        return Some(LoopSteps {
            evidence: IterationEvidence::OptimizerSteps,
            label,
            spans: st.iterations.iter().map(|it| (it.forward.0, it.end)).collect(),
        });
    }
    if let Some(starts) = rhythm().clone() {
        let widest = starts.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
        let spans = starts
            .iter()
            .enumerate()
            .map(|(k, &s)| (s, starts.get(k + 1).copied().unwrap_or(last.min(s + widest))))
            .collect();
        return Some(LoopSteps {
            evidence: IterationEvidence::AllocationRhythm,
            label: String::new(),
            spans,
        });
    }
    repeated_ranges(phases, |n| !names_a_phase_of_a_step(n) && !names_compile_work(n), last).map(|(label, spans)| {
        LoopSteps {
            evidence: IterationEvidence::StepRanges,
            label,
            spans,
        }
    })
}

/// Whether a range family's name says it is a step of the loop (not one of a step's parts).
fn says_step(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    ["iter", "step", "epoch", "batch"].iter().any(|k| n.contains(k))
        && !names_a_phase_of_a_step(&n)
        && !names_compile_work(&n)
}

/// Whether a lowercase range name is `torch.compile`'s own work — its compile stages
/// (`(dynamo_timed)`), inductor's autotuning and benchmarks (`pad_mm_benchmark`) — which
/// repeats hundreds of times in a compiled run's first steps and is no step of its loop.
fn names_compile_work(n: &str) -> bool {
    [
        "dynamo",
        "inductor",
        "autotun",
        "benchmark",
        "compile",
        "triton",
        "aot_",
    ]
    .iter()
    .any(|k| n.contains(k))
}

/// Whether a lowercase range name is a part of a step: the optimizer's, a zero_grad, a forward
/// or a backward.
fn names_a_phase_of_a_step(n: &str) -> bool {
    ["optimizer", "zero_grad", "forward", "backward", "lr_scheduler"]
        .iter()
        .any(|k| n.contains(k))
}

/// The most repeated family (at least 2) of ranges whose family `pick` takes, the earliest on
/// a tie, as steps: each range's own span, or up to the next one's start where it has no
/// length (an instant, or no END marker); the last such ends at `last`.
fn repeated_ranges(phases: &[PhaseRange], pick: impl Fn(&str) -> bool, last: i64) -> Option<(String, Vec<(i64, i64)>)> {
    let mut fams: rustc_hash::FxHashMap<&str, Vec<(i64, Option<i64>)>> = rustc_hash::FxHashMap::default();
    for p in phases {
        let f = family(&p.name);
        if !f.is_empty() && pick(f) {
            fams.entry(f).or_default().push((p.start_us, p.end_us));
        }
    }
    let (name, mut ranges) = fams.into_iter().filter(|(_, r)| r.len() >= 2).max_by_key(|(f, r)| {
        (
            r.len(),
            std::cmp::Reverse(r.iter().map(|x| x.0).min()),
            std::cmp::Reverse(*f),
        )
    })?;
    ranges.sort_unstable();
    let spans = (0..ranges.len())
        .map(|k| {
            let (s, e) = ranges[k];
            let next = ranges.get(k + 1).map_or(last, |r| r.0);
            (s, e.filter(|&e| e > s).unwrap_or(next).max(s))
        })
        .collect();
    Some((name.to_owned(), spans))
}

/// The fewest entries a step of the rhythm may hold on average (four allocations and their
/// frees).
const MIN_STEP_ENTRIES: usize = 12;

/// The most repetitions a rhythm may have (more: a per-allocation pattern, not a step).
const MOST_REPETITIONS: usize = 100_000;

/// Iteration starts from the allocation pattern: the times of the stack that allocates
/// regularly across at least half of the trace with the fewest repetitions (at least 3), the
/// earliest in the step among those — a loop allocates its input batch, activations and
/// gradients once per step, so the coarsest regular rhythm is the step, and the first of its
/// allocations starts it. Regular: the gaps between its allocations, in time or in entries,
/// within 30 % of their mean (the first gap aside when there are more: a first step warms
/// up). `None` when nothing repeats regularly.
fn repeating_pattern(ev: &DeviceEvents) -> Option<Vec<i64>> {
    let (action, stack, time) = (ev.action(), ev.stack(), ev.time());
    // A stack's entries are kept up to one more than a rhythm may have: past that it is out
    // whatever they are, and keeping them all (a stack allocating every step of a long run)
    // was hundreds of MB of fresh pages on a GB-scale trace.
    let mut by_stack: rustc_hash::FxHashMap<u32, Vec<u32>> = rustc_hash::FxHashMap::default();
    for (i, &a) in action.iter().enumerate() {
        if a == crate::tables::Action::Alloc as u8 && stack.at(i) != 0 {
            let entries = by_stack.entry(stack.at(i)).or_default();
            if entries.len() <= MOST_REPETITIONS {
                entries.push(i as u32);
            }
        }
    }
    let span = (time.last().unwrap_or(0) - time.first().unwrap_or(0)).max(1);
    // (repetitions, first entry, stack) of the best so far, and its times.
    let mut best: Option<((usize, u32, u32), Vec<i64>)> = None;
    for (s, entries) in by_stack {
        let times: Vec<i64> = entries.iter().map(|&i| time.at(i as usize)).collect();
        // A rhythm, not a burst: it must cover most of the trace.
        if times.len() < 3 || times.len() > MOST_REPETITIONS || (times[times.len() - 1] - times[0]) * 2 < span {
            continue;
        }
        let entry_gaps: Vec<f64> = entries.windows(2).map(|w| f64::from(w[1] - w[0])).collect();
        // A step holds a few allocations at least (each an alloc and its frees): a stack
        // allocating every few entries is a loop over tensors, not over steps.
        if entry_gaps.iter().sum::<f64>() < (MIN_STEP_ENTRIES * entry_gaps.len()) as f64 {
            continue;
        }
        let time_gaps: Vec<f64> = times.windows(2).map(|w| (w[1] - w[0]) as f64).collect();
        if !regular(&time_gaps) && !regular(&entry_gaps) {
            continue;
        }
        let key = (times.len(), entries[0], s);
        if best.as_ref().is_none_or(|b| key < b.0) {
            best = Some((key, times));
        }
    }
    best.map(|b| b.1)
}

/// Whether the steps of a rhythm give back most of what they allocate, as a loop's steps do
/// (its activations freed in backward, its temporaries at once): over the whole steps after
/// the first, the bytes still held at the last one's start grew by at most half of all the
/// steps allocated.
/// A forward's layers repeat as regularly, but keep what each saves for backward: no loop.
fn churns(ev: &DeviceEvents, usage: &Usage, starts: &[i64]) -> bool {
    let time = ev.time();
    // The first step aside where more follow: it makes what a loop keeps (an optimizer's state).
    let from = if starts.len() >= 3 { 1 } else { 0 };
    let (Some(&first), Some(&last)) = (starts.get(from), starts.last()) else {
        return false;
    };
    let (a, b) = (time.partition_point(|t| t < first), time.partition_point(|t| t < last));
    let (action, size) = (ev.action(), ev.size());
    let allocated: i64 = (a..b)
        .filter(|&i| action[i] == crate::tables::Action::Alloc as u8)
        .map(|i| size.at(i))
        .sum();
    let held = usage.allocated_before(b) - usage.allocated_before(a);
    held * 2 <= allocated
}

/// Whether gaps are within 30 % of their mean (their coefficient of variation), the first
/// one aside when at least three follow it.
fn regular(gaps: &[f64]) -> bool {
    let gaps = if gaps.len() >= 4 { &gaps[1..] } else { gaps };
    let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
    if mean <= 0.0 {
        return false;
    }
    let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
    var.sqrt() / mean <= 0.3
}
