//! The rules that place allocations by their sizes beside their lives, run over
//! [`crate::analysis::categories::categorize`]'s first placement: a parameter's size tells gradients
//! from state a library keeps, the last iteration's gradients, optimizer state made before the
//! recording, autocast's weight copies and cuBLAS's workspaces; [`BySizes`] runs them in their order.

use memlens_api::{Category, CategoryRule};
use polars_core::prelude::*;

use crate::analysis::training_structure::Structure;
use crate::analysis::DeviceEvents;
use crate::tables::columns::lifetimes as lt_col;
use crate::tables::int_slice::IntSlice;

/// The sizes the blocks placed as parameters have.
fn sizes_of_parameters(placed: &[(Category, CategoryRule)], size: IntSlice) -> rustc_hash::FxHashSet<i64> {
    placed
        .iter()
        .zip(size)
        .filter(|(p, _)| p.0 == Category::Parameter)
        .map(|(_, s)| s)
        .collect()
}

/// A gradient has its parameter's size: what backward made and kept at a size no parameter
/// has is no gradient. Kept to the end, it is state of its own (DDP's buckets, a workspace),
/// placed as `cache`; freed later (by the next iteration), a temporary a reference held on to
/// (an input's gradient, a loss kept). Only the weakest gradient rule (kept from backward) is
/// second-guessed, and only when parameters were seen.
pub(in crate::analysis) fn not_gradients_unlike_any_parameter(
    mut placed: Vec<(Category, CategoryRule)>,
    size: IntSlice,
    free_idx: &[i32],
) -> Vec<(Category, CategoryRule)> {
    let parameter_sizes = sizes_of_parameters(&placed, size);
    if parameter_sizes.is_empty() {
        return placed;
    }
    for ((p, s), &f) in placed.iter_mut().zip(size).zip(free_idx) {
        if p.1 == CategoryRule::KeptFromBackward && !parameter_sizes.contains(&s) {
            let kept = if f < 0 { Category::Cache } else { Category::Temporary };
            *p = (kept, CategoryRule::KeptFromBackwardUnlikeAnyParameter);
        }
    }
    placed
}

/// A run whose last iteration is followed by no zero_grad (a one-step profile, a loop that
/// clears gradients before backward): what its forward and backward made at a parameter's
/// size and kept to the end are the gradients — where the split of the window between them
/// (the peak) fell inside backward, they would look like forward's and kept past it.
pub(in crate::analysis) fn last_gradients_by_size(
    mut placed: Vec<(Category, CategoryRule)>,
    size: IntSlice,
    alloc_idx: &[i32],
    free_idx: &[i32],
    ev: &DeviceEvents,
    st: &Structure,
) -> Vec<(Category, CategoryRule)> {
    let Some(last) = st.iterations.last().filter(|_| st.from_optimizer) else {
        return placed;
    };
    let parameter_sizes = sizes_of_parameters(&placed, size);
    let time = ev.time();
    for r in 0..placed.len() {
        let s = size.at(r);
        let made = usize::try_from(alloc_idx[r]).ok().and_then(|i| time.get(i));
        if placed[r] == (Category::Other, CategoryRule::KeptPastItsIteration)
            && free_idx[r] < 0
            && made.is_some_and(|t| t >= last.forward.0 && t < last.step.0)
            && parameter_sizes.contains(&s)
        {
            placed[r] = (Category::Gradient, CategoryRule::KeptFromBackward);
        }
    }
    placed
}

/// Blocks there from before the recording to its end are the weights — and, in a run recorded
/// after its optimizer's first steps, its state too, at the same sizes. Per size, as many as
/// one backward makes gradients of that size stay parameters; the rest are optimizer state
/// ([`CategoryRule::StateBySize`]), where the run has optimizer steps and backward was seen
/// making gradients of every such size.
pub(in crate::analysis) fn state_by_size(
    mut placed: Vec<(Category, CategoryRule)>,
    size: IntSlice,
    alloc_idx: &[i32],
    st: &Structure,
) -> Vec<(Category, CategoryRule)> {
    if !st.from_optimizer {
        return placed;
    }
    let iterations = st.iterations.len().max(1);
    let mut gradients: rustc_hash::FxHashMap<i64, usize> = rustc_hash::FxHashMap::default();
    let mut before: rustc_hash::FxHashMap<i64, Vec<usize>> = rustc_hash::FxHashMap::default();
    for (r, (p, s)) in placed.iter().zip(size).enumerate() {
        match p {
            (Category::Gradient, CategoryRule::KeptFromBackward | CategoryRule::FreedByZeroGrad)
                if alloc_idx[r] >= 0 =>
            {
                *gradients.entry(s).or_default() += 1
            }
            (Category::Parameter, CategoryRule::AliveThroughout) if alloc_idx[r] < 0 => {
                before.entry(s).or_default().push(r)
            }
            _ => {}
        }
    }
    // Sizes backward makes no gradients of (buffers, frozen layers) say nothing: left as they are.
    for (s, rows) in &before {
        let Some(weights) = gradients.get(s).map(|n| n.div_ceil(iterations)) else {
            continue;
        };
        for &r in rows.iter().skip(weights) {
            placed[r] = (Category::OptimizerState, CategoryRule::StateBySize);
        }
    }
    placed
}

/// Autocast (`torch.autocast` to fp16 or bf16) casts each fp32 weight an op reads in forward
/// and autograd keeps the copy for backward: made in forward, freed in backward, at exactly
/// half a parameter's size. They are activations by their life, but not ones a batch makes:
/// placed by a rule of their own, where the run shows autocast at work — such copies adding up
/// to at least a quarter of the parameters' bytes per iteration (a full cast makes a half) —
/// not on a coincidence of sizes.
pub(in crate::analysis) fn autocast_weight_copies(
    mut placed: Vec<(Category, CategoryRule)>,
    size: IntSlice,
    iterations: usize,
) -> Vec<(Category, CategoryRule)> {
    let mut parameter_bytes = 0;
    let mut halves = rustc_hash::FxHashSet::default();
    for (p, s) in placed.iter().zip(size) {
        if p.0 == Category::Parameter {
            parameter_bytes += s;
            if s % 2 == 0 {
                halves.insert(s / 2);
            }
        }
    }
    let is_copy = |p: &(Category, CategoryRule), s: i64| {
        *p == (Category::Activation, CategoryRule::ForwardFreedInBackward) && halves.contains(&s)
    };
    let copies: i64 = placed
        .iter()
        .zip(size)
        .filter(|(p, s)| is_copy(p, *s))
        .map(|(_, s)| s)
        .sum();
    if halves.is_empty() || copies * 4 < parameter_bytes * iterations as i64 {
        return placed;
    }
    for (p, s) in placed.iter_mut().zip(size) {
        if is_copy(p, s) {
            p.1 = CategoryRule::AutocastWeightCopy;
        }
    }
    placed
}

/// The workspace PyTorch gives cuBLAS per handle and stream when `CUBLAS_WORKSPACE_CONFIG` is
/// unset: 32 MiB on Hopper and Blackwell, `4096 KiB × 2 + 16 KiB × 8` before them.
const CUBLAS_WORKSPACE_SIZES: [i64; 2] = [32 << 20, 4096 * 1024 * 2 + 16 * 1024 * 8];
/// cuBLASLt's workspace as PyTorch sizes it by default (`CUBLASLT_WORKSPACE_SIZE`, KiB).
const CUBLASLT_WORKSPACE_SIZE: i64 = 1 << 20;
/// Handles are per thread and workspaces per handle and stream: a forward thread and
/// autograd's, each on a stream or two. More blocks of a size than this are something else.
const MOST_WORKSPACES: usize = 4;
/// How many entries after a cuBLAS workspace the first matrix product makes cuBLASLt's.
const LT_WORKSPACE_WITHIN: i32 = 16;

/// Where in the trace cuBLAS's workspaces may have been made and freed: by the run's first
/// iteration (it ends at entry `first_pass_end`; `None`, no iterations: anywhere) and freed,
/// if at all, only after its last (at `teardown_from`: Lightning's teardown clears them).
pub(in crate::analysis) struct WorkspaceWindow {
    pub first_pass_end: Option<i32>,
    pub teardown_from: Option<i32>,
}

/// cuBLAS keeps a workspace per handle and stream for as long as the process lives (or until
/// `torch._C._cuda_clearCublasWorkspaces()`), made by the first matrix product that needs it:
/// without C++ frames the stack shows only that product (a `Linear`'s forward; nothing, on
/// autograd's thread). Recognised by what they are: at exactly a default workspace size, kept
/// to the end, and either made by the run's first iteration in a forward or on a thread without
/// Python, or there before the recording (in a training run, one whose backward makes
/// gradients) — no more than
/// [`MOST_WORKSPACES`] of a size, and of a size no gradient that recurs has (a gradient freed by
/// `zero_grad`, or made after the first iteration). cuBLASLt's 1 MiB made just after a
/// forward's workspace is one too. Placed as `cache` ([`CategoryRule::WorkspaceBySize`]),
/// before the rules that read parameters' sizes: taken for weights, they would make the
/// backward's workspace a gradient.
pub(in crate::analysis) fn workspaces_by_size(
    mut placed: Vec<(Category, CategoryRule)>,
    size: IntSlice,
    alloc_idx: &[i32],
    free_idx: &[i32],
    mut made_by_a_product: impl FnMut(usize) -> bool,
    window: WorkspaceWindow,
) -> Vec<(Category, CategoryRule)> {
    use CategoryRule as R;
    let in_first_pass = |a: i32| a >= 0 && window.first_pass_end.is_none_or(|e| a < e);
    let kept = |f: i32| f < 0 || window.teardown_from.is_some_and(|t| f >= t);
    let gradients_made = placed
        .iter()
        .zip(alloc_idx)
        .any(|(p, &a)| p.0 == Category::Gradient && a >= 0);
    let mut by_size: rustc_hash::FxHashMap<i64, Vec<usize>> = rustc_hash::FxHashMap::default();
    let mut recurring_gradient_sizes = rustc_hash::FxHashSet::default();
    for r in 0..placed.len() {
        let s = size.at(r);
        if !CUBLAS_WORKSPACE_SIZES.contains(&s) {
            continue;
        }
        let a = alloc_idx[r];
        let workspace = kept(free_idx[r])
            && match placed[r] {
                (Category::Parameter, R::AliveThroughout) | (Category::Other, R::PredatesTheTrace) if a < 0 => {
                    gradients_made
                }
                // Taken for weights only because it was there before the recording (an eval loop,
                // a dump without its trace): a weight of exactly this size comes in more than a
                // handful in the models that have one.
                (Category::Parameter, R::ThereBeforeRecording) => true,
                (Category::Other, R::Unplaced | R::LongLived | R::KeptPastItsIteration)
                | (Category::Gradient, R::KeptFromBackward) => in_first_pass(a) && made_by_a_product(r),
                _ => false,
            };
        if workspace {
            by_size.entry(s).or_default().push(r);
        } else if placed[r].0 == Category::Gradient {
            recurring_gradient_sizes.insert(s);
        }
    }
    let mut made_in_trace: Vec<i32> = Vec::new();
    let mut before_recording = 0;
    for (s, rows) in &by_size {
        if rows.len() > MOST_WORKSPACES || recurring_gradient_sizes.contains(s) {
            continue;
        }
        for &r in rows {
            placed[r] = (Category::Cache, R::WorkspaceBySize);
            match alloc_idx[r] {
                a if a >= 0 => made_in_trace.push(a),
                _ => before_recording += 1,
            }
        }
    }
    made_in_trace.sort_unstable();
    lt_workspaces(
        &mut placed,
        size,
        (alloc_idx, free_idx),
        &kept,
        &made_in_trace,
        before_recording,
    );
    placed
}

/// cuBLASLt's 1 MiB workspace beside cuBLAS's: made just after one the trace shows being
/// made, or — there before the recording, where cuBLAS's were too — one per two of those at
/// most, of a size no gradient has.
fn lt_workspaces(
    placed: &mut [(Category, CategoryRule)],
    size: IntSlice,
    (alloc_idx, free_idx): (&[i32], &[i32]),
    kept: &dyn Fn(i32) -> bool,
    made_in_trace: &[i32],
    before_recording: usize,
) {
    let gradients_of_that_size = placed
        .iter()
        .zip(size)
        .any(|(p, s)| p.0 == Category::Gradient && s == CUBLASLT_WORKSPACE_SIZE);
    let mut older_left = if gradients_of_that_size {
        0
    } else {
        before_recording.div_ceil(2)
    };
    let older: Vec<usize> = (0..placed.len())
        .filter(|&r| {
            size.at(r) == CUBLASLT_WORKSPACE_SIZE
                && alloc_idx[r] < 0
                && matches!(
                    placed[r],
                    (Category::Parameter, CategoryRule::AliveThroughout)
                        | (Category::Other, CategoryRule::PredatesTheTrace)
                )
        })
        .collect();
    if older.len() > older_left {
        older_left = 0;
    }
    for r in older.into_iter().take(older_left) {
        placed[r] = (Category::Cache, CategoryRule::WorkspaceBySize);
    }
    for r in 0..placed.len() {
        let a = alloc_idx[r];
        let after_one = || {
            let k = made_in_trace.partition_point(|&w| w < a);
            k > 0 && a - made_in_trace[k - 1] <= LT_WORKSPACE_WITHIN
        };
        if size.at(r) == CUBLASLT_WORKSPACE_SIZE
            && a >= 0
            && matches!(placed[r].0, Category::Other | Category::Gradient)
            && kept(free_idx[r])
            && after_one()
        {
            placed[r] = (Category::Cache, CategoryRule::WorkspaceBySize);
        }
    }
}

/// The most blocks a step's data is made of (inputs, labels, a mask) among what was there
/// before the recording.
const MOST_BATCH_TENSORS: usize = 2;

/// A run whose backward makes gradients, recorded after its model and its batch reached the
/// GPU (a benchmark that builds its input once): of what was there before the recording and
/// taken for weights, a block at a size no gradient has is no trained weight. Where the others
/// all have a gradient of their size and at most [`MOST_BATCH_TENSORS`] such blocks are left,
/// holding less than the weights do, they are the batch the loop feeds again and again — not
/// frozen weights, which come by the layer.
pub(in crate::analysis) fn inputs_by_size(
    mut placed: Vec<(Category, CategoryRule)>,
    size: IntSlice,
    alloc_idx: &[i32],
) -> Vec<(Category, CategoryRule)> {
    use CategoryRule as R;
    let gradient_sizes: rustc_hash::FxHashSet<i64> = placed
        .iter()
        .zip(size)
        .zip(alloc_idx)
        .filter(|((p, _), &a)| p.0 == Category::Gradient && a >= 0)
        .map(|((_, s), _)| s)
        .collect();
    if gradient_sizes.is_empty() {
        return placed;
    }
    let taken_for_weights = |r: usize| {
        alloc_idx[r] < 0
            && matches!(
                placed[r],
                (Category::Parameter, R::AliveThroughout | R::ThereBeforeRecording)
            )
    };
    let (mut weights, mut unlike) = (0i64, Vec::new());
    for r in (0..placed.len()).filter(|&r| taken_for_weights(r)) {
        if gradient_sizes.contains(&size.at(r)) {
            weights += size.at(r);
        } else {
            unlike.push(r);
        }
    }
    let unlike_bytes: i64 = unlike.iter().map(|&r| size.at(r)).sum();
    if unlike.len() <= MOST_BATCH_TENSORS && unlike_bytes < weights {
        for r in unlike {
            placed[r] = (Category::Input, R::MadeBeforeForward);
        }
    }
    placed
}

/// What the rules that read sizes weigh beside [`crate::analysis::categories::categorize`]'s first placement.
pub(in crate::analysis) struct BySizes<'a> {
    pub ev: &'a DeviceEvents,
    pub lifetimes: &'a DataFrame,
    pub training: Option<&'a Structure>,
    /// The entry each iteration ends at.
    pub iteration_ends: &'a [usize],
}

impl BySizes<'_> {
    /// The size rules over the first placement, in their order: cuBLAS's workspaces first (for
    /// a PyTorch snapshot: `made_by_a_product` tells a row made by a forward or on a thread
    /// without Python), then what backward keeps unlike any parameter, then — with training
    /// structure — autocast's copies, the last iteration's gradients, state made before the
    /// recording and the batch made before it.
    pub(in crate::analysis) fn place(
        &self,
        placed: Vec<(Category, CategoryRule)>,
        made_by_a_product: Option<impl FnMut(usize) -> bool>,
    ) -> PolarsResult<Vec<(Category, CategoryRule)>> {
        let size = IntSlice::of(self.lifetimes, lt_col::SIZE)?;
        let alloc_idx = lt_col::ALLOC_IDX.slice(self.lifetimes)?;
        let free_idx = lt_col::FREE_IDX.slice(self.lifetimes)?;
        let placed = match made_by_a_product {
            Some(made_by_a_product) => {
                let entry = |e: &usize| i32::try_from(*e).unwrap_or(i32::MAX);
                let window = WorkspaceWindow {
                    first_pass_end: self.iteration_ends.first().map(entry),
                    teardown_from: self.iteration_ends.last().map(entry),
                };
                workspaces_by_size(placed, size, alloc_idx, free_idx, made_by_a_product, window)
            }
            None => placed,
        };
        let placed = not_gradients_unlike_any_parameter(placed, size, free_idx);
        Ok(match self.training {
            Some(st) => {
                let placed = autocast_weight_copies(placed, size, st.iterations.len());
                let placed = last_gradients_by_size(placed, size, alloc_idx, free_idx, self.ev, st);
                let placed = state_by_size(placed, size, alloc_idx, st);
                inputs_by_size(placed, size, alloc_idx)
            }
            None => placed,
        })
    }
}
