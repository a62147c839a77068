//! Memory anatomy: every allocation gets a [`Category`] (parameter, gradient, optimizer state,
//! activation, temporary, input, cache, other) and the [`CategoryRule`] that decided it, and
//! each category's bytes at the peak and at its own maximum.
//!
//! Labels the entries carry win ([`crate::analysis::labels`]); then math-library workspaces seen in C++
//! stacks are cache, and AMP's `GradScaler` state is optimizer state; then the evidence is the structure of training, read from the snapshot
//! alone:
//! - **optimizer steps**: PyTorch's optimizers run their `step` and `zero_grad` under
//!   `record_function("Optimizer.step#…")` / `("Optimizer.zero_grad#…")`, which the allocator
//!   history records; a range named like `optimizer_step` also counts; without either they are
//!   inferred from `torch/optim/` frames ([`crate::analysis::phases::with_inferred_optimizer_steps`]);
//! - **iterations**: the window from one step's end to the next step's start holds forward and
//!   backward. Explicit `forward`/`backward` ranges split it; without them the split is the
//!   moment allocated bytes peak inside the window (forward builds activations up, backward
//!   frees them);
//! - **lifetimes** relative to those phases, and one frame rule (`Module.to()` moving weights);
//!   what backward keeps at a size no parameter has is not a gradient.
//!
//! Without optimizer steps, backward passes the stacks show (a forward + backward benchmark)
//! are the iterations ([`crate::analysis::training_structure::BackwardEvidence`]); without those either
//! (inference, eval loops, non-PyTorch sources) nothing training-shaped is invented: parameters
//! moved by `Module.to()` or there from before the recording to its end, temporaries, and
//! `other` for what lives long with nothing to say what it is (`cache` is only what is kept to
//! be reused: a library's workspace, a label).

use memlens_api::{Category, CategoryRule, CategorySummary, PhaseRange, RuleShare};
use polars_core::prelude::*;

pub use crate::analysis::labels::{
    explicit_labels, label_category, profiler_category, FrameRules, FrameRulesError, Labels,
};
use crate::analysis::rows_in_entry_order::RowsByEntry;
use crate::analysis::size_rules::BySizes;
pub use crate::analysis::training_structure::{autograd_windows, structure, BackwardEvidence, Structure};
use crate::analysis::training_structure::{first_forward_from, in_zero_grad, locate, spans_or_open, within, Span};
use crate::analysis::DeviceEvents;
use crate::stacks::StackResolver;
use crate::tables::columns::lifetimes as lt_col;
use crate::tables::int_slice::IntSlice;
use crate::tables::stack_ids::StackIds;

/// One allocation's lifetime on the trace's time axis (`None`: before the trace / never freed).
#[derive(Debug, Clone, Copy)]
struct Life {
    alloc: Option<i64>,
    free: Option<i64>,
    moved_by_module_to: bool,
    /// Its stack runs through a module's forward (an output, never a weight).
    made_by_forward: bool,
    /// Its stack shows weights being loaded or initialised ([`loads_weights`]).
    made_by_a_weight_loader: bool,
    /// It has no stack (made before the recording, or on a thread without Python).
    no_stack: bool,
}

/// `weights_moved`: the device's trace shows `Module.to()` moving weights, so blocks older than
/// the trace are something else.
fn classify_training(st: &Structure, l: Life, weights_moved: bool) -> (Category, CategoryRule) {
    let first = st.iterations[0];
    let last = st.iterations[st.iterations.len() - 1];
    let alive_after = |t: i64| l.free.is_none_or(|f| f > t);
    if alive_after(last.step.1) {
        match l.alloc {
            _ if l.moved_by_module_to && l.alloc.is_none_or(|a| a < first.backward.0) => {
                return (Category::Parameter, CategoryRule::ModuleTo)
            }
            Some(a) if a < first.forward.0 => return (Category::Parameter, CategoryRule::AliveThroughout),
            // A block from before the recording that a forward made is an output kept, never a weight.
            None if !weights_moved && !l.made_by_forward => {
                return (Category::Parameter, CategoryRule::AliveThroughout)
            }
            None => return (Category::Other, CategoryRule::PredatesTheTrace),
            Some(_) => {}
        }
    }
    let Some(a) = l.alloc else {
        // There before the recording: what a step frees it replaced (state made anew each
        // step); what a zero_grad frees was the last step's gradients.
        return match l.free {
            Some(f) if matches!(locate(st, f), Some((_, 2))) => {
                (Category::OptimizerState, CategoryRule::ReplacedByOptimizerStep)
            }
            Some(f) if in_zero_grad(st, f) => (Category::Gradient, CategoryRule::FreedByZeroGrad),
            _ => (Category::Other, CategoryRule::Unplaced),
        };
    };
    let at = locate(st, a);
    if let Some((k, 2)) = at {
        if alive_after(st.iterations[k].step.1) {
            return (Category::OptimizerState, CategoryRule::MadeByOptimizerStep);
        }
    }
    if let Some(f) = l.free {
        if in_zero_grad(st, f) && at.is_none_or(|(_, p)| p != 2) {
            return (Category::Gradient, CategoryRule::FreedByZeroGrad);
        }
    }
    let next_end = |k: usize| st.iterations.get(k + 1).map_or(i64::MAX, |n| n.step.1);
    match at {
        Some((k, 1)) if alive_after(st.iterations[k].backward.1) => {
            (Category::Gradient, CategoryRule::KeptFromBackward)
        }
        Some((k, 0)) => {
            let it = st.iterations[k];
            match l.free {
                Some(f) if f < it.forward.1 => (Category::Temporary, CategoryRule::WithinOnePhase),
                Some(f) if f <= it.backward.1.max(it.forward.1) => {
                    (Category::Activation, CategoryRule::ForwardFreedInBackward)
                }
                Some(f) if f <= next_end(k) => (Category::Activation, CategoryRule::ForwardOutput),
                _ => (Category::Other, CategoryRule::KeptPastItsIteration),
            }
        }
        Some((_, 2)) => (Category::Temporary, CategoryRule::WithinOptimizerStep),
        Some((_, _)) => (Category::Temporary, CategoryRule::WithinOnePhase),
        None => {
            // Between iterations (after a step, before the next forward): the batch, if it is
            // kept into the next forward.
            match first_forward_from(st, a) {
                Some(k) if alive_after(st.iterations[k].forward.0) && l.free.is_none_or(|f| f <= next_end(k)) => {
                    (Category::Input, CategoryRule::MadeBeforeForward)
                }
                Some(_) if l.free.is_some() => (Category::Temporary, CategoryRule::WithinOnePhase),
                _ => (Category::Other, CategoryRule::KeptPastItsIteration),
            }
        }
    }
}

/// Without training structure: only what needs no iterations. `failed_forwards`: each
/// `forward` range in which an allocation failed, with the time of the failure.
/// What the trace shows of a model, for blocks there from before it.
#[derive(Clone, Copy)]
struct ModelSeen {
    /// A module's forward runs in the recording.
    runs: bool,
    /// Weights were moved in by `Module.to()` during the recording and kept to its end: the
    /// model was loaded there, and what predates it is something else.
    loaded_in_trace: bool,
}

fn classify_plain(l: Life, span: Span, failed_forwards: &[(Span, i64)], model: ModelSeen) -> (Category, CategoryRule) {
    if l.moved_by_module_to {
        return (Category::Parameter, CategoryRule::ModuleTo);
    }
    // There from before the recording to its end, in a run that runs a model (and made by no
    // forward): an eval or benchmark loop recorded after its model was loaded keeps nothing
    // else that long — also where layers are streamed in and out during it beside those kept.
    if l.alloc.is_none() && l.free.is_none() && model.runs && !model.loaded_in_trace && l.no_stack {
        return (Category::Parameter, CategoryRule::ThereBeforeRecording);
    }
    // Made by code that loads or initialises weights and kept to the end (a checkpoint loader,
    // `init_weights`, `from_pretrained`): the weights, however they reached the GPU.
    if l.made_by_a_weight_loader && l.free.is_none() {
        return (Category::Parameter, CategoryRule::LoadedAsWeights);
    }
    if let Some(a) = l.alloc {
        let live_at_failure =
            |((start, _), oom): &(Span, i64)| a >= *start && a < *oom && l.free.is_none_or(|f| f > *oom);
        if failed_forwards.iter().any(live_at_failure) {
            return (Category::Activation, CategoryRule::MadeInFailedForward);
        }
    }
    // A snapshot without a trace (only what was live at the dump) says nothing of a block's life.
    if span.1 <= span.0 && l.alloc.is_none() && l.free.is_none() {
        return (Category::Other, CategoryRule::Unplaced);
    }
    let (a, f) = (l.alloc.unwrap_or(span.0), l.free.unwrap_or(span.1));
    // Long-lived, but nothing says what it is: not called a cache (what is kept to be reused,
    // which a user may free), but left unexplained.
    if (f - a) * 4 >= (span.1 - span.0).max(1) {
        (Category::Other, CategoryRule::LongLived)
    } else {
        (Category::Temporary, CategoryRule::WithinOnePhase)
    }
}

/// Whether a stack runs through `Module._apply` (weights moved by `.to()`, `.cuda()`, `.half()`).
fn moved_by_module_to(stacks: &StackResolver, stack: u32) -> bool {
    stacks
        .frames(stack)
        .iter()
        .any(|f| f.contains("torch/nn/modules/module.py") && f.ends_with(":_apply"))
}

/// Whether a stack runs through a module's forward (`Module.__call__`, or a `forward` method).
fn runs_a_forward(stacks: &StackResolver, stack: u32) -> bool {
    stacks
        .frames(stack)
        .iter()
        .any(|f| f.contains("torch/nn/modules/module.py") && f.ends_with("_call_impl") || f.ends_with(":forward"))
}

/// Whether a stack shows weights being loaded or initialised: a checkpoint read to the GPU
/// (`torch.load`, safetensors), a state dict copied in, a model's own weight initialisation
/// or loader (`init_weight`, `load_weights`, `from_pretrained`).
fn loads_weights(stacks: &StackResolver, stack: u32) -> bool {
    const FUNCTIONS: [&str; 11] = [
        ":load_state_dict",
        ":_load_from_state_dict",
        ":from_pretrained",
        ":load_checkpoint",
        ":load_weights",
        ":load_model",
        ":init_weight",
        ":init_weights",
        ":_init_weights",
        ":reset_parameters",
        ":_load_state_dict_into_meta_model",
    ];
    stacks.frames(stack).iter().any(|f| {
        FUNCTIONS.iter().any(|n| f.ends_with(n))
            || f.contains("safetensors/torch.py")
            || f.contains("torch/serialization.py")
    })
}

/// Whether a C++ stack shows a math library's workspace being made (cuBLAS's per-handle
/// workspace, cuBLASLt's): PyTorch keeps it while the handle lives.
fn library_workspace(stacks: &StackResolver, stack: u32) -> bool {
    stacks
        .frames(stack)
        .iter()
        .any(|f| f.contains("at::cuda::setWorkspaceForHandle") || f.contains("at::cuda::getCUDABlasLtWorkspace"))
}

/// Where a stack shows a key/value cache being made.
#[derive(Clone, Copy, PartialEq, Eq)]
enum KvCacheSeen {
    /// Inside a generation loop (`transformers/generation/utils.py`): the cache generation keeps.
    InGenerate,
    /// In a forward outside generation: a cache where the block is kept long in a run without
    /// training structure, with nothing else to say what it is (an eval loop's outputs hold
    /// their cache); in a training forward the cache's keys and values are the ones autograd
    /// saves (activations either way), and what the forward frees is a temporary.
    Forward,
}

/// Whether a stack shows a key/value cache being made: Hugging Face's caches
/// (`transformers/cache_utils.py` or a copy of it, any frame), or an innermost frame — where the block is made,
/// not a driver that runs a cache benchmark — whose file or function is named for one
/// (`kv_cache.py`, `update_kv_cache`, `past_key_values`).
fn kv_cache(stacks: &StackResolver, stack: u32) -> Option<KvCacheSeen> {
    let frames = stacks.frames(stack);
    let named = |f: &String| {
        let lower = f.to_ascii_lowercase();
        ["kv_cache", "kvcache", "past_key_value"]
            .iter()
            .any(|n| lower.contains(n))
    };
    let cache = frames.iter().any(|f| f.contains("cache_utils")) || frames.first().is_some_and(named);
    let generating = frames.iter().any(|f| f.contains("transformers/generation/utils.py"));
    match (cache, generating) {
        (false, _) => None,
        (true, true) => Some(KvCacheSeen::InGenerate),
        (true, false) => Some(KvCacheSeen::Forward),
    }
}

/// Whether a stack shows AMP's `GradScaler` making its state (the loss scale and its growth
/// tracker, made once at the first `scale()` and kept for the run).
fn grad_scaler_state(stacks: &StackResolver, stack: u32) -> bool {
    stacks
        .frames(stack)
        .iter()
        .any(|f| f.contains("amp/grad_scaler.py") && f.ends_with(":_lazy_init_scale_growth_tracker"))
}

/// What the built-in evidence leaves to user rules: nothing placed, state of a run without
/// training structure, and what outlived its iteration.
fn open_to_rules(placed: (Category, CategoryRule)) -> bool {
    matches!(
        placed.1,
        CategoryRule::Unplaced | CategoryRule::LongLived | CategoryRule::KeptPastItsIteration
    )
}

/// The evidence `categorize` weighs beside the trace itself.
pub struct Evidence<'a> {
    /// Labels the entries carry (alloc entry → category); they win over every other rule.
    pub labels: &'a Labels,
    /// User frame rules, for what the built-in rules leave open.
    pub rules: &'a FrameRules,
}

/// What [`categorize`] found: each lifetimes row's category and rule, and the entry index at
/// which each training iteration ends (its optimizer step's end; empty without training
/// structure), for the steady state.
pub struct Placement {
    pub placed: Vec<(Category, CategoryRule)>,
    pub iteration_ends: Vec<usize>,
}

/// Every lifetime row's category and rule; `training`, the run's [`structure`], is read only
/// for a PyTorch snapshot with timestamps.
pub fn categorize(
    ev: &DeviceEvents,
    training: Option<&Structure>,
    lifetimes: &DataFrame,
    phases: &[PhaseRange],
    stacks: &StackResolver,
    pytorch: bool,
    evidence: &Evidence,
) -> PolarsResult<Placement> {
    let labels = evidence.labels;
    let time = ev.time();
    let span = (time.first().unwrap_or(0), time.last().unwrap_or(0));
    // A snapshot PyTorch's profiler derived carries the profiler's categories; the structure
    // read on its entry order (it has no timestamps) would second-guess what it left unknown.
    let from_profiler = labels.values().any(|l| l.1 == CategoryRule::ProfilerCategory);
    let st = training.filter(|_| pytorch && (ev.has_time || !from_profiler));
    let alloc_idx = lt_col::ALLOC_IDX.slice(lifetimes)?;
    let free_idx = lt_col::FREE_IDX.slice(lifetimes)?;
    let stack = StackIds::of(lifetimes, lt_col::STACK)?;
    let at = |i: i32| usize::try_from(i).ok().and_then(|i| time.get(i));
    let mut module_to = PerStack::new(stacks);
    let mut workspace = PerStack::new(stacks);
    let mut is_workspace = |s: u32| workspace.get(s, || library_workspace(stacks, s));
    let mut kv = PerStack::new(stacks);
    let mut is_kv_cache = |s: u32| kv.get(s, || kv_cache(stacks, s).filter(|_| pytorch));
    let mut scaler = PerStack::new(stacks);
    let mut is_scaler_state = |s: u32| scaler.get(s, || grad_scaler_state(stacks, s));
    // Each allocation's life is made where it is placed, not kept for all at once (40 bytes
    // per allocation); whether any moved weights is a pass over the stacks first.
    let mut moved = |s: u32| pytorch && module_to.get(s, || moved_by_module_to(stacks, s));
    let weights_moved = stack.iter().any(&mut moved);
    let mut loaders = PerStack::new(stacks);
    let mut loader = |s: u32| loaders.get(s, || loads_weights(stacks, s));
    let mut forward = PerStack::new(stacks);
    let mut by_forward = |s: u32| forward.get(s, || runs_a_forward(stacks, s));
    // Whether a module's forward runs in the recording (the stacks of blocks from before it
    // tell of earlier work, not of this run).
    let model = ModelSeen {
        // Any block's stack: a snapshot whose trace was lost keeps the stacks of what was live.
        runs: pytorch && stack.iter().any(&mut by_forward),
        loaded_in_trace: stack
            .iter()
            .zip(alloc_idx.iter().zip(free_idx))
            .any(|(s, (&a, &f))| a >= 0 && f < 0 && moved(s)),
    };
    let lives = (0..lifetimes.height()).map(|r| Life {
        alloc: at(alloc_idx[r]),
        free: at(free_idx[r]),
        moved_by_module_to: moved(stack.at(r)),
        made_by_forward: by_forward(stack.at(r)),
        made_by_a_weight_loader: pytorch && loader(stack.at(r)),
        no_stack: stacks.frames(stack.at(r)).is_empty(),
    });
    let mut by_rule = PerStack::new(stacks);
    let failed_forwards = failed_forwards(ev, phases);
    let placed = lives
        .zip(alloc_idx)
        .zip(stack.iter())
        .map(|((life, &a), s)| match (&st, pytorch) {
            _ if !labels.is_empty() && a >= 0 && labels.contains_key(&(a as usize)) => labels[&(a as usize)],
            _ if pytorch && is_workspace(s) => (Category::Cache, CategoryRule::LibraryWorkspace),
            _ if pytorch && is_scaler_state(s) => (Category::OptimizerState, CategoryRule::GradScalerState),
            (Some(st), _) => classify_training(st, life, weights_moved),
            (None, true) => classify_plain(life, span, &failed_forwards, model),
            (None, false) => (Category::Other, CategoryRule::Unplaced),
        })
        .zip(stack.iter())
        .map(|(placed, s)| with_kv_cache(placed, is_kv_cache(s), st.is_some()))
        .zip(stack.iter())
        .map(|(placed, st)| {
            if evidence.rules.is_empty() || !open_to_rules(placed) {
                return placed;
            }
            let hit = by_rule.get(st, || evidence.rules.category_of(&stacks.frames(st)));
            hit.map_or(placed, |c| (c, CategoryRule::FrameRule))
        })
        .collect();
    let iteration_ends: Vec<usize> = st.map_or_else(Vec::new, |st| {
        st.iterations
            .iter()
            .map(|it| time.partition_point(|t| t <= it.step.1))
            .collect()
    });
    let made_by_a_product = |r: usize| by_forward(stack.at(r)) || stacks.frames(stack.at(r)).is_empty();
    let by_sizes = BySizes {
        ev,
        lifetimes,
        training: st,
        iteration_ends: &iteration_ends,
    };
    let placed = by_sizes.place(placed, pytorch.then_some(made_by_a_product))?;
    Ok(Placement { placed, iteration_ends })
}

/// Each `forward` range in which an allocation failed (out of memory in it, or in the backward
/// that follows it), with the time of the failure.
fn failed_forwards(ev: &DeviceEvents, phases: &[PhaseRange]) -> Vec<(Span, i64)> {
    let time = ev.time();
    let forwards = spans_or_open(phases, "forward");
    let backwards = spans_or_open(phases, "backward");
    ev.indices_of(crate::tables::Action::Oom)
        .into_iter()
        .map(|i| time.at(i))
        .filter_map(|t| {
            // The last forward starting at or before the failure (they are sorted).
            let f = forwards[..forwards.partition_point(|f| f.0 <= t)].last().copied()?;
            let in_backward = backwards.iter().any(|b| b.0 >= f.1 && within(t, *b));
            (within(t, f) || in_backward).then_some((f, t))
        })
        .collect()
}

/// A placement where a key/value cache made the block: always inside generation; outside it,
/// only what was left `other` in a run without training structure (see [`KvCacheSeen`]).
/// Labels, a library's workspace and the scaler's state keep their own evidence.
fn with_kv_cache(
    placed: (Category, CategoryRule),
    seen: Option<KvCacheSeen>,
    training: bool,
) -> (Category, CategoryRule) {
    let by_its_own_evidence = matches!(
        placed.1,
        CategoryRule::ExplicitLabel | CategoryRule::LibraryWorkspace | CategoryRule::GradScalerState
    );
    match seen {
        _ if by_its_own_evidence => placed,
        Some(KvCacheSeen::InGenerate) => (Category::Cache, CategoryRule::KvCache),
        Some(KvCacheSeen::Forward) if !training && placed.0 == Category::Other => {
            (Category::Cache, CategoryRule::KvCache)
        }
        _ => placed,
    }
}

/// A fact about each stack, found once per stack and kept by stack id (ids are dense): a
/// look-up for every allocation is an index, not a hash.
struct PerStack<T> {
    known: Vec<Option<T>>,
}

impl<T: Copy> PerStack<T> {
    fn new(stacks: &StackResolver) -> PerStack<T> {
        PerStack {
            known: vec![None; stacks.stack_count()],
        }
    }

    /// The fact about stack `s`, found by `find` the first time (every time for an id
    /// beyond the stacks, which has no frames).
    fn get(&mut self, s: u32, find: impl FnOnce() -> T) -> T {
        match self.known.get_mut(s as usize) {
            Some(Some(v)) => *v,
            Some(slot) => *slot.insert(find()),
            None => find(),
        }
    }
}

/// Each category's bytes at the peak (entry `peak`), its own maximum, its steady state per
/// iteration (iterations ending at `iteration_ends`), and its rules.
pub fn category_budget(
    lifetimes: &DataFrame,
    categories: &[(Category, CategoryRule)],
    peak: Option<usize>,
    iteration_ends: &[usize],
) -> PolarsResult<Vec<CategorySummary>> {
    let rows = BudgetRows {
        categories,
        alloc_idx: lt_col::ALLOC_IDX.slice(lifetimes)?,
        free_idx: lt_col::FREE_IDX.slice(lifetimes)?,
        size: IntSlice::of(lifetimes, lt_col::SIZE)?,
    };
    let Tallies {
        live,
        at_peak,
        count,
        mut rules,
        in_alloc_order,
    } = rows.tally(peak);
    let (max, per_iteration) = rows.sweep(live, in_alloc_order, iteration_ends);
    let steady = |s: usize| -> Option<i64> {
        let mut v: Vec<i64> = per_iteration.iter().map(|it| it[s]).collect();
        v.sort_unstable();
        v.get(v.len() / 2).copied()
    };
    Ok(Category::ALL
        .iter()
        .enumerate()
        .filter(|(s, _)| count[*s] > 0)
        .map(|(s, &category)| {
            let mut r = std::mem::take(&mut rules[s]);
            r.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.rule.cmp(&b.rule)));
            CategorySummary {
                category,
                bytes_at_peak: at_peak[s],
                max_bytes: max[s],
                steady_bytes: steady(s),
                count: count[s],
                rules: r,
            }
        })
        .collect())
}

/// The rows a budget reads: each allocation's category and rule, entries and size.
struct BudgetRows<'a> {
    categories: &'a [(Category, CategoryRule)],
    alloc_idx: &'a [i32],
    free_idx: &'a [i32],
    size: IntSlice<'a>,
}

/// What the rows say one by one, by category (in `Category::ALL` order): the bytes live before
/// the trace, at the peak, the count and the rules; and whether allocations come in entry order.
struct Tallies {
    live: Vec<i64>,
    at_peak: Vec<i64>,
    count: Vec<usize>,
    rules: Vec<Vec<RuleShare>>,
    in_alloc_order: bool,
}

/// A category's slot in `Category::ALL` (the last for one not listed).
fn slot(c: Category) -> usize {
    let n = Category::ALL.len();
    Category::ALL.iter().position(|&x| x == c).unwrap_or(n - 1)
}

impl BudgetRows<'_> {
    /// Each row counted once (`peak`: the entry of the peak, none for a run without one).
    fn tally(&self, peak: Option<usize>) -> Tallies {
        let (categories, alloc_idx, free_idx, size) = (self.categories, self.alloc_idx, self.free_idx, self.size);
        let n = Category::ALL.len();
        let mut live = vec![0i64; n];
        let mut at_peak = vec![0i64; n];
        let mut count = vec![0usize; n];
        let mut rules: Vec<Vec<RuleShare>> = vec![Vec::new(); n];
        let peak = peak.map(|p| p as i64);
        // The allocations by alloc entry and by free entry: their changes are swept in entry order
        // by merging the two (each entry allocates or frees at most one allocation). Allocations
        // come in alloc order: they are read as they are (sorted only if they are not). The frees
        // are put in entry order by their ranks among the free entries (4 bytes a free, no sort).
        let mut in_alloc_order = true;
        let mut last_alloc = -1i64;
        for (r, &(c, rule)) in categories.iter().enumerate() {
            let s = slot(c);
            count[s] += 1;
            match rules[s].iter_mut().find(|x| x.rule == rule) {
                Some(x) => {
                    x.count += 1;
                    x.bytes += size.at(r);
                }
                None => rules[s].push(RuleShare {
                    rule,
                    count: 1,
                    bytes: size.at(r),
                }),
            }
            let (a, f) = (i64::from(alloc_idx[r]), i64::from(free_idx[r]));
            if a < 0 {
                live[s] += size.at(r);
            } else {
                in_alloc_order &= a > last_alloc;
                last_alloc = a;
            }
            let live_at_peak = match peak {
                Some(p) => a <= p && (f < 0 || f > p),
                None => a < 0,
            };
            if live_at_peak {
                at_peak[s] += size.at(r);
            }
        }
        Tallies {
            live,
            at_peak,
            count,
            rules,
            in_alloc_order,
        }
    }

    /// The allocations and frees swept in entry order from `live` (what was there before the
    /// trace): each category's most bytes over the run, and per iteration (iteration k ends
    /// before entry `iteration_ends[k]`).
    fn sweep(&self, mut live: Vec<i64>, in_alloc_order: bool, iteration_ends: &[usize]) -> (Vec<i64>, Vec<Vec<i64>>) {
        let (categories, alloc_idx, free_idx, size) = (self.categories, self.alloc_idx, self.free_idx, self.size);
        // A quarter of the frees at a time (see `RowsByEntry`).
        let by_free = RowsByEntry::new(free_idx).in_windows(FREE_WINDOWS);
        let made = (0..categories.len() as u32).filter(|&r| alloc_idx[r as usize] >= 0);
        let allocs: Box<dyn Iterator<Item = u32>> = match in_alloc_order {
            true => Box::new(made),
            false => {
                let mut rows: Vec<u32> = made.collect();
                rows.sort_unstable_by_key(|&r| alloc_idx[r as usize]);
                Box::new(rows.into_iter())
            }
        };
        let (mut allocs, mut frees) = (allocs.peekable(), by_free.peekable());
        let mut max = live.clone();
        // Per iteration, each category's most bytes (iteration k ends before entry iteration_ends[k]).
        let mut per_iteration: Vec<Vec<i64>> = vec![live.clone(); iteration_ends.len()];
        let mut k = 0;
        // Crosses every iteration end at or before `entry`: the next iteration starts from `live`.
        let cross = |entry: usize, k: &mut usize, live: &[i64], per_iteration: &mut [Vec<i64>]| {
            while *k < iteration_ends.len() && entry >= iteration_ends[*k] {
                *k += 1;
                if *k < iteration_ends.len() {
                    per_iteration[*k].clone_from_slice(live);
                }
            }
        };
        // The last entry that allocates or frees.
        let mut last_entry = None;
        // The allocs and the frees merged by entry (a free first where both are at one).
        loop {
            let alloc_at = allocs.peek().map(|&r| alloc_idx[r as usize] as usize);
            let free_at = frees.peek().map(|&r| free_idx[r as usize] as usize);
            let (entry, row, d) = match (alloc_at, free_at) {
                (Some(a), Some(f)) if f < a => (f, frees.next(), -1),
                (Some(a), _) => (a, allocs.next(), 1),
                (None, Some(f)) => (f, frees.next(), -1),
                (None, None) => break,
            };
            let row = row.expect("peeked");
            let d = d * size.at(row as usize);
            cross(entry, &mut k, &live, &mut per_iteration);
            last_entry = Some(entry);
            if d == 0 {
                continue;
            }
            let s = slot(categories[row as usize].0);
            live[s] += d;
            max[s] = max[s].max(live[s]);
            if k < iteration_ends.len() {
                per_iteration[k][s] = per_iteration[k][s].max(live[s]);
            }
        }
        // The ends up to the last entry that changed anything are crossed, as a sweep over every
        // entry would (later ones keep the value from before the trace).
        if let Some(entry) = last_entry {
            cross(entry, &mut k, &live, &mut per_iteration);
        }
        (max, per_iteration)
    }
}

/// How many windows of entries the category budget takes the frees in.
const FREE_WINDOWS: usize = 4;

/// Adds each row's category and rule to the lifetimes frame (positions in `Category::ALL` and
/// `CategoryRule::ALL`), so stored reports can answer what-if questions.
pub fn add_category_columns(lifetimes: &mut DataFrame, placed: &[(Category, CategoryRule)]) -> PolarsResult<()> {
    let pos_c = |c: Category| Category::ALL.iter().position(|&x| x == c).unwrap_or(0) as u8;
    lifetimes.with_column(lt_col::CATEGORY.build(placed.iter().map(|p| pos_c(p.0)).collect()))?;
    lifetimes.with_column(lt_col::CATEGORY_RULE.build(placed.iter().map(|p| p.1.position()).collect()))?;
    Ok(())
}
