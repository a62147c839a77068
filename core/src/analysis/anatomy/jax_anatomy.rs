//! What a JAX device memory profile's live buffers are, in JAX's terms: the profile has no
//! history (one instant, no trace), so the evidence is each buffer's Python stack and the
//! structure of what one call returned.
//!
//! - **Frames.** A buffer made by optax's code is optimizer state (an optimizer's `init`:
//!   `tree_zeros_like` of the parameters, the step count); one made by the backward pass of
//!   `jax.grad` / `value_and_grad` / `vjp` run eagerly (`ad.py`'s `backward_pass`) is a gradient;
//!   one made by a model library's parameter initialisation (flax's `Scope.param`, `Module.init`,
//!   a flax.nnx or equinox layer's `__init__`, haiku's `get_parameter`) is a parameter.
//! - **Structure.** What a jitted call returns carries the call's stack alone (optax and flax ran
//!   while it was traced, not when its buffers were made). A train step returns the parameters
//!   with state of their shape — Adam's two moments, the gradients when it returns them — so the
//!   buffers of one stack come as k ≥ 2 trees of exactly the same sizes: the greatest common
//!   divisor of the counts of each size, over two sizes or more. One tree is counted as the
//!   parameters, the other k − 1 as copies of their tree, which the stacks cannot tell apart
//!   (moments, gradients returned, gradients a script keeps step after step).
//! - What XLA holds inside a running computation (a jitted step's activations and temporaries)
//!   is not in a profile at all; what nothing above places is `other`, open to the user's frame
//!   rules.

use std::collections::HashMap;

use memlens_api::{stack_headline, Category, CategoryRule, DeviceSummary};
use polars_core::prelude::*;

use crate::analysis::categories::{FrameRules, Placement};
use crate::stacks::StackResolver;
use crate::tables::columns::lifetimes as lt_col;
use crate::tables::int_slice::IntSlice;
use crate::tables::stack_ids::StackIds;

/// The placement a buffer's frames give, if any (`frames` innermost first, `file:line:function`).
pub fn placed_by_frames(frames: &[String]) -> Option<(Category, CategoryRule)> {
    let parts = |f: &String| {
        let mut it = f.rsplitn(3, ':');
        let function = it.next().unwrap_or_default().to_owned();
        let _line = it.next();
        (it.next().unwrap_or_default().replace('\\', "/"), function)
    };
    let frames: Vec<(String, String)> = frames.iter().map(parts).collect();
    let any = |f: &dyn Fn(&str, &str) -> bool| frames.iter().any(|(file, function)| f(file, function));
    if any(&|file, _| file.contains("/optax/") || file.starts_with("optax/")) {
        return Some((Category::OptimizerState, CategoryRule::MadeByOptax));
    }
    if any(&|file, function| file.ends_with("jax/_src/interpreters/ad.py") && function.starts_with("backward_pass")) {
        return Some((Category::Gradient, CategoryRule::MadeByJaxGrad));
    }
    let model_init = |file: &str, function: &str| {
        (file.ends_with("flax/core/scope.py") && function == "param")
            || (file.ends_with("flax/linen/module.py") && matches!(function, "init" | "init_with_output"))
            || ((file.contains("flax/nnx/") || file.contains("equinox/nn/")) && function == "__init__")
            || (file.ends_with("haiku/_src/base.py") && function == "get_parameter")
    };
    if any(&model_init) {
        return Some((Category::Parameter, CategoryRule::MadeByModelInit));
    }
    None
}

/// Greatest common divisor.
fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Buffers of at most this many bytes are scalars (a step count, a loss, a PRNG key): returned
/// beside the trees, never part of the count of them.
pub const SCALAR_BYTES: i64 = 8;

/// Of the sizes of one stack's buffers: how many trees of one shape they are — the gcd of each
/// size's count (scalars left out), when there are two sizes or more and it is 2 or more.
pub fn copies_of_one_tree(sizes: &[i64]) -> Option<usize> {
    let mut counts: HashMap<i64, usize> = HashMap::new();
    for &s in sizes.iter().filter(|&&s| s > SCALAR_BYTES) {
        *counts.entry(s).or_default() += 1;
    }
    let k = counts.values().fold(0, |g, &c| gcd(g, c));
    (counts.len() >= 2 && k >= 2).then_some(k)
}

/// Of one group of rows (one call's outputs, in the file's order): when they are k trees of one
/// shape, the first of each size's rows up to one tree's count are the parameters, the rest
/// copies of their tree (which of equal buffers is which changes no total); else they stay
/// as they are.
fn place_trees(rows: &[usize], size: &IntSlice, placed: &mut [(Category, CategoryRule)]) {
    let sizes: Vec<i64> = rows.iter().map(|&r| size.at(r)).collect();
    let Some(k) = copies_of_one_tree(&sizes) else {
        return;
    };
    let mut total: HashMap<i64, usize> = HashMap::new();
    for &sz in &sizes {
        *total.entry(sz).or_default() += 1;
    }
    let mut seen: HashMap<i64, usize> = HashMap::new();
    for (&r, &sz) in rows.iter().zip(&sizes).filter(|(_, &sz)| sz > SCALAR_BYTES) {
        let n = seen.entry(sz).or_default();
        placed[r] = if *n * k < total[&sz] {
            (Category::Parameter, CategoryRule::ParameterTreeOfCopies)
        } else {
            (Category::Other, CategoryRule::CopyOfParameterTree)
        };
        *n += 1;
    }
}

/// Every row of a profile's lifetimes placed: by frames, then by the user's frame rules, then
/// by the structure of what each call returned; the rest `other`.
pub fn placement(lifetimes: &DataFrame, stacks: &StackResolver, rules: &FrameRules) -> PolarsResult<Placement> {
    let stack = StackIds::of(lifetimes, lt_col::STACK)?;
    let size = IntSlice::of(lifetimes, lt_col::SIZE)?;
    // Rows by stack, then stacks by what a reader sees of them: a jitted function's first call
    // runs through Python dispatch frames its later calls skip, and its outputs are one group.
    let mut by_stack: HashMap<u32, Vec<usize>> = HashMap::new();
    for r in 0..lifetimes.height() {
        by_stack.entry(stack.at(r)).or_default().push(r);
    }
    let mut placed = vec![(Category::Other, CategoryRule::Unplaced); lifetimes.height()];
    let mut by_shown: HashMap<Vec<String>, Vec<usize>> = HashMap::new();
    for (s, rows) in &by_stack {
        let frames = stacks.frames(*s);
        if let Some(p) = placed_by_frames(&frames) {
            rows.iter().for_each(|&r| placed[r] = p);
        } else if let Some(c) = (!rules.is_empty()).then(|| rules.category_of(&frames)).flatten() {
            rows.iter().for_each(|&r| placed[r] = (c, CategoryRule::FrameRule));
        } else if !frames.is_empty() {
            // Buffers without a traceback share no call: no structure to read among them.
            by_shown.entry(stacks.user_frames(*s)).or_default().extend(rows);
        }
    }
    for rows in by_shown.values_mut() {
        rows.sort_unstable();
        place_trees(rows, &size, &mut placed);
    }
    Ok(Placement {
        placed,
        iteration_ends: Vec::new(),
    })
}

/// A profile's verdict: one instant, what its live buffers are made of, and what the trees of
/// one call's shape are (the structure rule's count of them, from its bytes).
pub fn verdict(d: &DeviceSummary) -> String {
    use crate::analysis::oom_cause::human;
    let total = d.peak_allocated_bytes.max(1);
    let buffers: usize = d.categories.iter().map(|c| c.count).sum();
    let made_of = crate::analysis::verdict::made_of(d, usize::MAX);
    let mut out = format!(
        "One instant (a JAX device memory profile: no timeline): {} live in {buffers} buffers",
        human(d.peak_allocated_bytes)
    );
    if !made_of.is_empty() {
        out += &format!(", made of {}", made_of.join(", "));
    }
    out.push('.');
    let tree = d.bytes_by_rule(CategoryRule::ParameterTreeOfCopies);
    let copies = d.bytes_by_rule(CategoryRule::CopyOfParameterTree);
    if tree > 0 && copies > 0 {
        let k = (copies + tree / 2) / tree + 1;
        let at = d
            .peak_stacks
            .first()
            .map(|s| stack_headline(s.module.as_deref(), &s.stack, s.no_stack_reason, None))
            .unwrap_or_else(|| "one call".to_owned());
        out += &format!(
            " {at} returned {k} trees of the same buffer sizes ({} each): one is counted as the parameters, \
             the other {} as state of their shape — an optimizer's moments (Adam keeps 2), gradients returned \
             or kept; which, the stacks cannot tell.",
            human(tree),
            k - 1
        );
        if k > 4 {
            out += &format!(
                " More than Adam's moments and one step's gradients: {} trees of the parameters' size are kept \
                 beyond those (a list holding each step's gradients or states?); a second profile later, compared \
                 with this one, shows whether they grow.",
                k - 4
            );
        }
    }
    let other = d
        .categories
        .iter()
        .find(|c| c.category == Category::Other)
        .map_or(0, |c| c.bytes_at_peak)
        - copies;
    if other as f64 > total as f64 * 0.1 {
        out += &format!(
            " {} ({:.0} %) no frame or structure places: each buffer's stack is in the flame graph.",
            human(other),
            other as f64 * 100.0 / total as f64
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn libraries_frames_say_what_a_buffer_is() {
        let optax = frames(&[
            "/v/site-packages/jax/_src/numpy/array_creation.py:310:zeros_like",
            "/v/site-packages/optax/tree_utils/_tree_math.py:335:tree_zeros_like",
            "/w/train.py:90:main",
        ]);
        assert_eq!(
            placed_by_frames(&optax),
            Some((Category::OptimizerState, CategoryRule::MadeByOptax))
        );
        let grad = frames(&[
            "/v/site-packages/jax/_src/interpreters/ad.py:1143:fancy_bilinear_transpose",
            "/v/site-packages/jax/_src/interpreters/ad.py:417:backward_pass3",
            "/v/site-packages/jax/_src/api.py:469:grad_f",
            "/w/train.py:91:main",
        ]);
        assert_eq!(
            placed_by_frames(&grad),
            Some((Category::Gradient, CategoryRule::MadeByJaxGrad))
        );
        let flax = frames(&[
            "/v/site-packages/jax/_src/numpy/array_creation.py:95:zeros",
            "/v/site-packages/flax/core/scope.py:983:param",
            "/v/site-packages/flax/linen/module.py:2456:init",
        ]);
        assert_eq!(
            placed_by_frames(&flax),
            Some((Category::Parameter, CategoryRule::MadeByModelInit))
        );
        let eqx = frames(&["/v/site-packages/equinox/nn/_linear.py:60:__init__"]);
        assert_eq!(
            placed_by_frames(&eqx),
            Some((Category::Parameter, CategoryRule::MadeByModelInit))
        );
        assert_eq!(placed_by_frames(&frames(&["/w/train.py:104:main"])), None);
    }

    #[test]
    fn a_step_returns_trees_of_one_shape() {
        // Adam after a jitted step: params, two moments, grads (4 trees of 4 sizes), and two
        // scalars (the step count, the loss).
        let tree = [65536, 65536, 262144, 1024, 1024, 256];
        let four: Vec<i64> = tree.iter().cycle().take(24).copied().collect();
        assert_eq!(copies_of_one_tree(&four), Some(4));
        let mut with_scalars = four.clone();
        with_scalars.extend([4, 4]);
        assert_eq!(
            copies_of_one_tree(&with_scalars),
            Some(4),
            "scalars are no part of a tree"
        );
        assert_eq!(copies_of_one_tree(&[8, 8, 8]), None, "one size is no tree");
        assert_eq!(copies_of_one_tree(&[8, 16, 16]), None);
    }
}
