//! How much of a failed step's batch fits ([`OomFit`]): every allocation of the step is taken to
//! scale with the batch unless it has a parameter's size (weights, their bf16 copies,
//! gradients, optimizer state). The step's need at fraction `x` of the batch is, at each
//! moment, what does not scale plus `x` × what does; the fraction is the largest `x` whose
//! need stays under the limit at every moment. A completed step before the failing one
//! supplies the whole step's profile, scaled by the ratio of the two batches (each stack's
//! allocations compared in order); without one, the forward made so far is extrapolated over
//! the model's repeated blocks (layers counted from the parameters' repeating sizes, layers
//! done from the repeating stacks of the forward) and a language model's output layer, or, for a
//! model built as a pyramid of stages (a CNN), over the stages its weights show ([`pyramid`]).

use memlens_api::{Category, OomCause, OomFit, OomPhase};
use rustc_hash::{FxHashMap, FxHashSet};

use super::pyramid::{self, Made, Pyramid};
use super::{live_at, FailedStep, Row, StepWindows};
use crate::analysis::oom_cause::{human, LiveAtFailure, OomFacts};
use crate::analysis::usage::Usage;

/// The model's repeated blocks, read from its parameters in the order they were moved to the
/// device: one layer's sizes repeat once per layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocks {
    pub layers: usize,
    /// The sizes of one block's parameters.
    pub block_sizes: Vec<i64>,
    /// The sizes of the parameters after the last block (a final norm, an output layer).
    pub after: Vec<i64>,
}

pub(super) fn parameter_blocks(rows: &[Row]) -> Option<Blocks> {
    let mut params: Vec<&Row> = rows.iter().filter(|r| r.category == Category::Parameter).collect();
    params.sort_by_key(|r| r.alloc);
    let sizes: Vec<i64> = params.iter().map(|r| r.size).collect();
    blocks_of(&sizes)
}

/// The longest run of one repeating pattern in `sizes` (a pattern of at least two sizes
/// repeated at least twice), the period covering the most sizes winning.
pub fn blocks_of(sizes: &[i64]) -> Option<Blocks> {
    let n = sizes.len();
    let mut best: Option<(usize, usize, usize, usize)> = None; // (covered, period, repeats, end)
    for p in 2..=n / 2 {
        // The longest stretch where sizes[i] == sizes[i + p].
        let (mut run, mut longest, mut end) = (0, 0, 0);
        for i in 0..n - p {
            if sizes[i] == sizes[i + p] {
                run += 1;
                if run > longest {
                    longest = run;
                    end = i + p + 1;
                }
            } else {
                run = 0;
            }
        }
        let repeats = longest / p + 1;
        if repeats >= 2 {
            let covered = repeats * p;
            if best.is_none_or(|b| covered > b.0) {
                best = Some((covered, p, repeats, end));
            }
        }
    }
    let (_, p, layers, end) = best?;
    Some(Blocks {
        layers,
        block_sizes: sizes[end - p..end].to_vec(),
        after: sizes[end..].to_vec(),
    })
}

/// The step's need at a fraction of its batch, moment by moment: `fixed` bytes that do not
/// scale, `scaled` bytes that do.
#[derive(Debug, Clone, Copy)]
struct Need {
    fixed: i64,
    scaled: f64,
}

/// The largest `x` in [0, 1] with `fixed + x × scaled <= limit` at every moment.
fn fraction_under(limit: i64, needs: &[Need]) -> f64 {
    let mut x = 1.0f64;
    for n in needs {
        if n.fixed > limit {
            return 0.0;
        }
        if n.scaled > 0.0 {
            x = x.min((limit - n.fixed) as f64 / n.scaled);
        }
    }
    x.clamp(0.0, 1.0)
}

/// Each moment's need over the rows made in `[from, to)`: a row whose `factor` is some `k`
/// counts its bytes × `k` as scaled, any other as fixed; `base` is added to every moment (what
/// lives through the step).
fn needs_over(rows: &[Row], from: usize, to: usize, base: i64, factor: &dyn Fn(&Row) -> Option<f64>) -> Vec<Need> {
    let mut events: Vec<(i64, i64, f64)> = Vec::new();
    for r in rows {
        let Ok(a) = usize::try_from(r.alloc) else { continue };
        if a < from || a >= to {
            continue;
        }
        let (fx, sc) = match factor(r) {
            None => (r.size, 0.0),
            Some(k) => (0, r.size as f64 * k),
        };
        events.push((r.alloc, fx, sc));
        if r.free >= 0 && (r.free as usize) < to {
            events.push((r.free, -fx, -sc));
        }
    }
    events.sort_by_key(|e| (e.0, e.1 < 0 || e.2 < 0.0));
    let mut cur = Need {
        fixed: base,
        scaled: 0.0,
    };
    let mut out = Vec::with_capacity(events.len());
    for (_, fx, sc) in events {
        cur.fixed += fx;
        cur.scaled += sc;
        out.push(cur);
    }
    out
}

/// The failing step's allocations against the same stacks' in the step before, each stack's
/// allocations paired in order: the ratio of the batches (the upper third of the pairs' ratios:
/// weights cast per layer, ratio 1, are fewer than the activations), and whether each earlier
/// allocation scales, and by how much (its pair's ratio: a tensor quadratic in the sequence
/// grows faster than one linear in it). A line that casts a weight and computes with it makes
/// both from one stack: its allocations alternate, so an earlier allocation past the failing
/// step's reach takes the ratio of its place in the stack's repeating pattern.
struct BatchRatio {
    overall: f64,
    /// Entry index of an earlier step's allocation → its ratio, `None` when it kept its size.
    factor: FxHashMap<i64, Option<f64>>,
}

/// The smallest period of `sizes` (the whole length when none repeats).
fn period_of(sizes: &[i64]) -> usize {
    (1..sizes.len())
        .find(|&p| (0..sizes.len() - p).all(|i| sizes[i] == sizes[i + p]))
        .unwrap_or(sizes.len().max(1))
}

fn batch_ratio(rows: &[Row], now: &StepWindows, before: &StepWindows, upto: usize) -> Option<BatchRatio> {
    let collect = |from: usize, to: usize| {
        let mut by_stack: FxHashMap<u32, Vec<(i64, i64)>> = FxHashMap::default();
        let mut ordered: Vec<&Row> = rows
            .iter()
            .filter(|r| usize::try_from(r.alloc).is_ok_and(|a| a >= from && a < to))
            .collect();
        ordered.sort_by_key(|r| r.alloc);
        for r in ordered {
            by_stack.entry(r.stack).or_default().push((r.alloc, r.size));
        }
        by_stack
    };
    let a = collect(now.forward?, upto);
    let b = collect(before.forward?, before.end.unwrap_or(upto));
    let mut all: Vec<f64> = Vec::new();
    let mut factor = FxHashMap::default();
    for (stack, sizes) in &a {
        let Some(prev) = b.get(stack) else { continue };
        let verdicts: Vec<Option<f64>> = sizes
            .iter()
            .zip(prev)
            .map(|((_, x), (_, y))| {
                let k = *x as f64 / (*y).max(1) as f64;
                all.push(k);
                (!(0.8..=1.25).contains(&k)).then_some(k)
            })
            .collect();
        if verdicts.is_empty() {
            continue;
        }
        let now_sizes: Vec<i64> = sizes.iter().map(|s| s.1).collect();
        let period = period_of(&now_sizes).min(verdicts.len());
        for (j, (alloc, _)) in prev.iter().enumerate() {
            let v = verdicts.get(j).copied().unwrap_or(verdicts[j % period]);
            factor.insert(*alloc, v);
        }
    }
    if all.is_empty() {
        return None;
    }
    all.sort_by(|x, y| x.total_cmp(y));
    Some(BatchRatio {
        overall: all[all.len() * 2 / 3],
        factor,
    })
}

#[allow(clippy::too_many_arguments)]
pub(super) fn batch_fit(
    rows: &[Row],
    psize: &FxHashSet<i64>,
    step: &FailedStep,
    usage: &Usage,
    oom: usize,
    facts: &OomFacts,
    cause: OomCause,
    live: &LiveAtFailure,
    blocks: Option<&Blocks>,
) -> Option<OomFit> {
    if !super::fit_causes(cause) {
        return None;
    }
    let w = &step.failing;
    let limit = failure_limit(cause, facts, usage, oom);
    // The allocator holds more than it hands out (block rounding, split blocks).
    let overhead = (usage.reserved_before(oom) as f64 / usage.allocated_before(oom).max(1) as f64).max(1.0);
    let budget = (limit as f64 / overhead) as i64;
    // What lives through the step: made before it (weights, optimizer state, anything older).
    let at = oom as i64;
    let base: i64 = rows
        .iter()
        .filter(|r| live_at(r, at) && usize::try_from(r.alloc).map_or(true, |a| a < w.start))
        .map(|r| r.size)
        .sum();
    let step_so_far = StepSoFar {
        rows,
        psize,
        step,
        oom,
        base,
        requested: facts.requested,
    };
    let (needs, how) = match step.phase {
        OomPhase::OptimizerStep => {
            let need =
                base + live.gradient + live.optimizer_state_to_come.unwrap_or(live.optimizer_state) + facts.requested;
            return Some(OomFit {
                batch_fraction: 0.0,
                limit_bytes: limit,
                fixed_bytes: need,
                batch_bytes: 0,
                how: format!(
                    "The optimizer step needs {} whatever the batch (parameters, gradients and optimizer state): no smaller \
                     batch fits under {}.",
                    human(need),
                    human(limit)
                ),
                generation: None,
            });
        }
        OomPhase::Unknown => return None,
        // A generation without its cache read: its forward so far, as a first forward's.
        OomPhase::Forward | OomPhase::InferenceForward | OomPhase::Prefill | OomPhase::Decode => {
            match step.previous.as_ref() {
                Some(prev) => scaled_from_the_step_before(rows, step, prev, oom, base),
                None => extrapolated_first_forward(&step_so_far, live, blocks),
            }
        }
        OomPhase::Backward => {
            let mut needs = step_so_far.needs();
            let end_of_backward = base + live.parameter.max(live.gradient);
            if end_of_backward > budget {
                needs.push(Need {
                    fixed: end_of_backward,
                    scaled: 0.0,
                });
            }
            let how = "The forward ran whole: every moment of the step up to the failure, with what has a parameter's \
                       size fixed and the rest scaled, and the gradients of every parameter at the end of backward."
                .to_owned();
            (needs, how)
        }
    };
    let x = fraction_under(budget, &needs);
    let peak = needs
        .iter()
        .max_by(|a, b| (a.fixed as f64 + a.scaled).total_cmp(&(b.fixed as f64 + b.scaled)))
        .copied()?;
    Some(OomFit {
        batch_fraction: (x * 1000.0).floor() / 1000.0,
        limit_bytes: limit,
        fixed_bytes: peak.fixed,
        batch_bytes: peak.scaled as i64,
        how,
        generation: None,
    })
}

/// The limit the failure hit: under a cap the snapshot does not record, at least the most the
/// process held (the cap lies below that plus the request); on a full device, what the process
/// held plus what the device had free.
pub(super) fn failure_limit(cause: OomCause, facts: &OomFacts, usage: &Usage, oom: usize) -> i64 {
    let reserved = usage.reserved_before(oom);
    match cause {
        OomCause::Limit => facts.allowed.unwrap_or_else(|| {
            let peak_before = (0..oom.min(usage.len()))
                .map(|i| usage.reserved_before(i))
                .max()
                .unwrap_or(0);
            reserved.max(peak_before)
        }),
        _ => reserved + facts.device_free.unwrap_or(0),
    }
}

/// A forward that failed after a whole step ran: that step's profile, scaled to this batch. A
/// stack seen in both keeps its own ratio's verdict (a weight cast does not scale).
fn scaled_from_the_step_before(
    rows: &[Row],
    step: &FailedStep,
    prev: &StepWindows,
    oom: usize,
    base: i64,
) -> (Vec<Need>, String) {
    let w = &step.failing;
    let ratio = batch_ratio(rows, w, prev, oom);
    let overall = ratio.as_ref().map_or(1.0, |r| r.overall);
    // Stacks the failing forward has not reached (the head, the loss, backward) scale unless
    // the completed step's own rules made them state.
    let factor = |r: &Row| match ratio.as_ref().and_then(|x| x.factor.get(&r.alloc)) {
        Some(k) => *k,
        // The optimizer step works on the parameters, whatever the batch.
        None => (prev.optimizer.is_none_or(|o| r.alloc < o as i64)
            && !matches!(
                r.category,
                Category::Parameter | Category::Gradient | Category::OptimizerState
            ))
        .then_some(overall),
    };
    let end = prev.end.unwrap_or(w.start);
    // Its rows still live now are in `base` (optimizer state made at its step).
    let at = oom as i64;
    let transient: Vec<Row> = rows.iter().filter(|r| !live_at(r, at)).copied().collect();
    let needs = needs_over(&transient, prev.start, end, base, &factor);
    let how = format!(
        "The previous step ran whole: its allocations, each scaled by the ratio of the same allocation in this step \
         (stacks compared in order; {overall:.1}× over the step, for what this step has not reached yet), give the whole \
         step's need; what does not grow with the batch (weights cast per layer, gradients, optimizer state) does not \
         scale."
    );
    (needs, how)
}

/// The failing step as far as it got, without a step before it to compare with.
struct StepSoFar<'a> {
    rows: &'a [Row],
    psize: &'a FxHashSet<i64>,
    step: &'a FailedStep,
    oom: usize,
    base: i64,
    requested: i64,
}

impl StepSoFar<'_> {
    /// Its need at every moment up to the failure and at the failing request, with what has a
    /// parameter's size (weights, their bf16 copies, gradients) fixed and the rest scaled.
    fn needs(&self) -> Vec<Need> {
        let by_size = |r: &Row| (!self.psize.contains(&r.size)).then_some(1.0);
        let mut needs = needs_over(self.rows, self.step.failing.start, self.oom, self.base, &by_size);
        if let Some(last) = needs.last().copied() {
            needs.push(Need {
                fixed: last.fixed,
                scaled: last.scaled + self.requested as f64,
            });
        }
        needs
    }
}

/// A first forward that failed: its need so far, extrapolated over the model's repeated blocks
/// still to come and a language model's output layer — where blocks holding at least half of
/// the weights were seen; else the need so far, whose fraction is then an upper bound.
fn extrapolated_first_forward(s: &StepSoFar, live: &LiveAtFailure, blocks: Option<&Blocks>) -> (Vec<Need>, String) {
    let mut needs = s.needs();
    // Blocks that hold under half of the weights are one stage of a model whose stages differ
    // (a CNN's widths double as its resolution halves): what one of them holds says nothing of
    // the rest, so nothing is extrapolated from it.
    let blocks = blocks.filter(|b| {
        let repeated = b.layers as i64 * b.block_sizes.iter().sum::<i64>();
        repeated * 2 >= live.parameter
    });
    let w = &s.step.failing;
    let Some((b, (done, per_layer))) = blocks
        .zip(layers_done(s.rows, s.psize, w, s.oom))
        .filter(|(b, (done, _))| (b.layers as f64) > *done && *done > 0.0)
    else {
        if let Some(pyramid) = pyramid_forward(s, live, &mut needs) {
            return (needs, pyramid);
        }
        let how = "The first forward failed and no repeated blocks holding most of the weights were seen to \
                   extrapolate over: its need so far is the whole need counted, a lower bound, so the fraction is an \
                   upper bound (the batch at it may still not fit)."
            .to_owned();
        return (needs, how);
    };
    let more = per_layer * (b.layers as f64 - done);
    let head = output_layer(s.rows, w, b);
    if let Some(last) = needs.last_mut() {
        last.scaled += more + head.as_ref().map_or(0.0, |h| h.bytes as f64);
    }
    let how = format!(
        "The first forward failed in block {:.1} of {} (the parameters repeat {} times; the forward's repeated stacks \
         show how far it got): the {} each block holds was added for the blocks to come{}",
        done + 1.0,
        b.layers,
        b.layers,
        human(per_layer as i64),
        match head {
            Some(h) => format!(
                ", and {} for the output layer and its loss ({} tokens × {} outputs × {} bytes: the logits, their fp32 \
                 copy and the log-softmax kept for backward).",
                human(h.bytes),
                h.tokens,
                h.outputs,
                h.bytes_per_output
            ),
            None => ". What the model does after its blocks is not seen yet and not counted.".to_owned(),
        }
    );
    (needs, how)
}

/// In a first forward: how many repeated blocks are done (a fraction for the one it failed in:
/// the share of the block's repeating stacks it had reached) and the bytes one block holds.
fn layers_done(rows: &[Row], psize: &FxHashSet<i64>, w: &StepWindows, oom: usize) -> Option<(f64, f64)> {
    let f = w.forward?;
    let mut count: FxHashMap<u32, usize> = FxHashMap::default();
    let made: Vec<&Row> = rows
        .iter()
        .filter(|r| usize::try_from(r.alloc).is_ok_and(|a| a >= f && a < oom))
        .collect();
    for r in &made {
        *count.entry(r.stack).or_default() += 1;
    }
    let repeating: Vec<usize> = count.values().copied().filter(|&c| c >= 2).collect();
    // Blocks begun: the most common count. The failing block splits its stacks between that
    // count and the one next to it; the share of them it reached is the part of it done.
    let mut freq: FxHashMap<usize, usize> = FxHashMap::default();
    for &c in &repeating {
        *freq.entry(c).or_default() += 1;
    }
    let (mode, n_mode) = freq.iter().max_by_key(|&(c, n)| (*n, *c)).map(|(c, n)| (*c, *n))?;
    let ahead = freq.get(&(mode + 1)).copied().unwrap_or(0);
    let behind = freq.get(&(mode - 1)).copied().unwrap_or(0);
    let done = if ahead > 0 {
        mode as f64 + ahead as f64 / (ahead + n_mode) as f64
    } else if behind > 0 && mode > 2 {
        (mode - 1) as f64 + n_mode as f64 / (n_mode + behind) as f64
    } else {
        mode as f64
    };
    let at = oom as i64;
    let layered: i64 = made
        .iter()
        .filter(|r| count.get(&r.stack).is_some_and(|&c| c >= 2) && live_at(r, at) && !psize.contains(&r.size))
        .map(|r| r.size)
        .sum();
    Some((done, layered as f64 / done))
}

/// A language model's output layer, not yet run when its first forward failed: a parameter
/// after the blocks at least four times the largest block parameter (`outputs` × hidden × 4
/// bytes, the hidden size being the block's smallest parameter, a norm's weight), applied to
/// every token of the batch (its int64 token ids, the largest input). Its logits cost 10 bytes
/// an output under autocast (bf16 logits, the fp32 copy the loss makes, the fp32 log-softmax
/// kept for backward) and 8 in fp32.
struct OutputLayer {
    tokens: i64,
    outputs: i64,
    bytes_per_output: i64,
    bytes: i64,
}

fn output_layer(rows: &[Row], w: &StepWindows, b: &Blocks) -> Option<OutputLayer> {
    let largest_block = *b.block_sizes.iter().max()?;
    let head = *b.after.iter().max()?;
    let hidden4 = *b.block_sizes.iter().min()?;
    if head < 4 * largest_block || hidden4 <= 0 || head % hidden4 != 0 {
        return None;
    }
    let outputs = head / hidden4;
    let forward = w.forward?;
    let ids = rows
        .iter()
        .filter(|r| usize::try_from(r.alloc).is_ok_and(|a| a >= w.start && a < forward))
        .map(|r| r.size)
        .max()?;
    if ids % 8 != 0 {
        return None;
    }
    let tokens = ids / 8;
    // bf16 copies of the block's weights made in the forward: autocast.
    let autocast = rows.iter().any(|r| {
        usize::try_from(r.alloc).is_ok_and(|a| a >= forward)
            && b.block_sizes.iter().any(|&s| s > 4096 && s == 2 * r.size)
    });
    let per = if autocast { 10 } else { 8 };
    Some(OutputLayer {
        tokens,
        outputs,
        bytes_per_output: per,
        bytes: tokens * outputs * per,
    })
}

/// What backward needs over the activations the forward saved, as a share of them: its
/// gradients of activations, made while the saved ones are freed block by block. Measured on our
/// ResNet-50 capture (`traces/anatomy/resnet_sgd`, batch 32, first step): backward's peak
/// stood 72.6 MB over the 2.78 GB the forward held at its end (2.6 %), gradients of the
/// parameters included (counted apart here, so this errs high).
const BACKWARD_OVER_SAVED: f64 = 0.026;

/// A training forward that failed in a pyramid of stages ([`pyramid`]): its need so far plus
/// the rest of the forward extrapolated over the stages the weights show, backward's share over
/// it, and every parameter's gradient; `how` says what it rests on. `None` where the weights
/// show no pyramid or the forward's allocations do not repeat with its blocks.
fn pyramid_forward(s: &StepSoFar, live: &LiveAtFailure, needs: &mut [Need]) -> Option<String> {
    if s.step.phase != OomPhase::Forward {
        return None;
    }
    let sizes: Vec<i64> = s
        .rows
        .iter()
        .filter(|r| r.category == Category::Parameter)
        .map(|r| r.size)
        .collect();
    let pyramid = Pyramid::of(&sizes)?;
    let f = s.step.failing.forward?;
    let at = s.oom as i64;
    let mut forward: Vec<&Row> = s
        .rows
        .iter()
        .filter(|r| usize::try_from(r.alloc).is_ok_and(|a| a >= f && a < s.oom))
        .collect();
    forward.sort_by_key(|r| r.alloc);
    let made: Vec<Made> = forward
        .iter()
        .map(|r| Made {
            stack: r.stack,
            live_bytes: if live_at(r, at) && !s.psize.contains(&r.size) && r.category != Category::Cache {
                r.size
            } else {
                0
            },
        })
        .collect();
    let reached = pyramid::reached(&pyramid, &made, s.requested)?;
    let last = needs.last_mut()?;
    last.scaled = (last.scaled + reached.to_come) * (1.0 + BACKWARD_OVER_SAVED);
    last.fixed += live.parameter;
    let stages: Vec<String> = pyramid
        .stages
        .iter()
        .map(|st| format!("{} × {}", st.blocks, human(st.weight)))
        .collect();
    Some(format!(
        "The first forward failed in block {} of stage {} of {}: the weights' sizes show a pyramid of stages \
         (blocks × the stage's largest repeated weight: {}; a block holds {} of its stage's weight; each stage's weight 4× the one before, \
         its channels doubling). One block of this stage keeps {} (the forward's allocations repeat with its \
         blocks); the rest of the forward was added as {}, each later stage's block at half the one before (its \
         activations C × H × W halve as the channels double and the resolution halves: the pyramid assumption), \
         then {:.1} % more for backward (our ResNet-50 capture's) and every parameter's gradient ({}). The layers \
         between stages and the head are not counted (the fraction errs high by a few %); where the cap is not in \
         the trace, the limit is what the process held, at most the cap (the fraction errs low).",
        reached.block,
        reached.stage + 1,
        pyramid.stages.len(),
        stages.join(", "),
        pyramid.per_block,
        human(reached.block_bytes),
        human(reached.to_come as i64),
        BACKWARD_OVER_SAVED * 100.0,
        human(live.parameter),
    ))
}
