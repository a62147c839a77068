//! The rules that place allocations by their sizes beside their lives, run over
//! [`super::categories::categorize`]'s first placement: a parameter's size tells gradients
//! from state a library keeps, the last iteration's gradients, optimizer state made before the
//! recording, and autocast's weight copies.

use memlens_api::{Category, CategoryRule};

use super::training_structure::Structure;
use super::DeviceEvents;
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
/// has is state of its own (a cuBLAS workspace recorded without C++ frames, DDP's buckets),
/// placed as `cache`. Only the weakest gradient rule (kept from backward) is second-guessed,
/// and only when parameters were seen.
pub(super) fn not_gradients_unlike_any_parameter(
    mut placed: Vec<(Category, CategoryRule)>,
    size: IntSlice,
) -> Vec<(Category, CategoryRule)> {
    let parameter_sizes = sizes_of_parameters(&placed, size);
    if parameter_sizes.is_empty() {
        return placed;
    }
    for (p, s) in placed.iter_mut().zip(size) {
        if p.1 == CategoryRule::KeptFromBackward && !parameter_sizes.contains(&s) {
            *p = (Category::Cache, CategoryRule::KeptFromBackwardUnlikeAnyParameter);
        }
    }
    placed
}

/// A run whose last iteration is followed by no zero_grad (a one-step profile, a loop that
/// clears gradients before backward): what its forward and backward made at a parameter's
/// size and kept to the end are the gradients — where the split of the window between them
/// (the peak) fell inside backward, they would look like forward's and kept past it.
pub(super) fn last_gradients_by_size(
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
pub(super) fn state_by_size(
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
pub(super) fn autocast_weight_copies(
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
