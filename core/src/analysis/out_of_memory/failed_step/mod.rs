//! The training step an OOM interrupted, read from the allocator's own evidence, whether or not
//! the script records ranges and whether or not any step completed before it:
//!
//! - **where it failed** ([`OomPhase`]): a range around the failure (`forward`, `backward`,
//!   `Optimizer.step#…`), else the failing request's own frames (`torch/optim/`, the autograd
//!   engine, a module's `forward`), else the step's allocations: the model's modules make the
//!   forward, the autograd thread (no Python frames) the backward, `torch/optim/` the
//!   optimizer step;
//! - **what is live there, in the user's terms**: what the failing step made is placed by the
//!   window it was made in — before the forward, the batch (`input`); in the forward,
//!   `activation`; in backward, `gradient` (a parameter's size is its gradient, any other a
//!   gradient being computed on the way to one); in the optimizer step, a
//!   parameter's size is `optimizer_state` being created (Adam-style optimizers create it
//!   lazily at their first step). Only what the run-wide rules left as other, temporary or
//!   cache is placed so;
//! - **how much of the batch fits**: [`batch_fit`]; in generation, [`generation_fit`].
//!
//! An OOM in inference ([`generation`]: generation's prefill or a decode step, a forward under a
//! no_grad decorator) is read the same way, its phase told from its frames.

mod batch_fit;
mod generation;
mod generation_fit;
mod pyramid;
use memlens_api::{Category, CategoryBytes, CategoryRule, OomCause, OomFit, OomPhase, PhaseRange};
use polars_core::prelude::*;
use rustc_hash::{FxHashMap, FxHashSet};

use crate::analysis::oom_cause::{LiveAtFailure, OomFacts};
use crate::analysis::usage::Usage;
use crate::analysis::DeviceEvents;
use crate::stacks::StackResolver;
use crate::tables::columns::lifetimes as lt_col;
use crate::tables::int_slice::IntSlice;
use crate::tables::stack_ids::StackIds;

/// What an allocation's frames say it is part of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The model's weights made: `Module.to()` / `.cuda()` moving them, a module's constructor
    /// or initialiser on the device, a checkpoint loaded onto it.
    Weights,
    /// A module's forward (`torch/nn/modules/module.py` calling it).
    Forward,
    /// The autograd engine: backward frames, or no Python frames where others have them.
    Backward,
    /// An optimizer's frames.
    Optimizer,
    /// Anything else: the script's own lines (a batch being made, a loss outside the model).
    Script,
}

fn kind_of(frames: &[String], recorded: bool) -> Kind {
    if frames.is_empty() {
        return if recorded { Kind::Backward } else { Kind::Script };
    }
    let any = |f: &dyn Fn(&str) -> bool| frames.iter().any(|x| f(x));
    if any(&|x| crate::analysis::phases::is_optimizer_frame(x)) {
        Kind::Optimizer
    } else if any(&|x| x.contains("torch/nn/modules/module.py") && x.ends_with(":_apply"))
        // Made on the device outside any module's call: a module's constructor, its
        // initialisers, a checkpoint loaded onto it.
        || !any(&|x| x.contains("torch/nn/modules/module.py"))
            && any(&|x| {
                x.contains("torch/nn/modules/") && (x.ends_with(":__init__") || x.ends_with(":reset_parameters"))
                    || x.contains("torch/nn/init.py")
                    || x.contains("transformers/modeling_utils.py") && (x.ends_with(":from_pretrained") || x.contains(":_load"))
                    || x.contains("accelerate/utils/modeling.py")
                    || x.contains("safetensors/")
            })
    {
        Kind::Weights
    } else if any(&|x| {
        (x.contains("torch/autograd/") || x.contains("torch/_tensor.py")) && x.ends_with(":backward")
            || x.contains("_engine_run_backward")
            || x.contains("torch::autograd::Engine")
    }) {
        Kind::Backward
    } else if any(&|x| x.contains("torch/nn/modules/module.py")) {
        Kind::Forward
    } else {
        Kind::Script
    }
}

/// One training step's windows, as entry indices (`None`: not reached).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepWindows {
    /// After the previous step's optimizer step (or the weights' move): where its batch is made.
    pub start: usize,
    /// Where the batch began: the run of at most [`BATCH_ALLOCATIONS`] allocations of the
    /// script's own just before the forward (`None`: the model made its own).
    pub batch: Option<usize>,
    pub forward: Option<usize>,
    pub backward: Option<usize>,
    pub optimizer: Option<usize>,
    /// Where the next step began (for a completed step).
    pub end: Option<usize>,
}

/// The most allocations a batch is taken to be made of (ids, mask, labels, a few more).
pub const BATCH_ALLOCATIONS: usize = 8;

/// The step an OOM interrupted and the last one completed before it.
#[derive(Debug, Clone, Copy, Default)]
pub struct FailedStep {
    pub phase: OomPhase,
    pub failing: StepWindows,
    pub previous: Option<StepWindows>,
}

/// The phase a range's name says, if it says one.
fn phase_of_range(name: &str) -> Option<OomPhase> {
    let n = name.to_ascii_lowercase();
    if n.starts_with("optimizer.step") || n.contains("optimizer_step") || n == "optimizer" || n == "step" {
        Some(OomPhase::OptimizerStep)
    } else if n.contains("backward") {
        Some(OomPhase::Backward)
    } else if n.contains("forward") {
        Some(OomPhase::Forward)
    } else {
        None
    }
}

fn phase_of_kind(k: Kind) -> OomPhase {
    match k {
        Kind::Forward => OomPhase::Forward,
        Kind::Backward => OomPhase::Backward,
        Kind::Optimizer => OomPhase::OptimizerStep,
        Kind::Weights | Kind::Script => OomPhase::Unknown,
    }
}

/// Per-stack kinds, worked out once per stack.
struct Kinds<'a> {
    stacks: &'a StackResolver,
    recorded: bool,
    seen: FxHashMap<u32, Kind>,
}

impl Kinds<'_> {
    fn of(&mut self, stack: u32) -> Kind {
        let (stacks, recorded) = (self.stacks, self.recorded);
        *self
            .seen
            .entry(stack)
            .or_insert_with(|| kind_of(&stacks.frames(stack), recorded))
    }
}

/// Reads the steps up to the OOM at entry `oom`.
pub fn locate(ev: &DeviceEvents, stacks: &StackResolver, phases: &[PhaseRange], oom: usize) -> FailedStep {
    let mut kinds = Kinds {
        stacks,
        recorded: stacks.any_recorded(),
        seen: FxHashMap::default(),
    };
    let action = ev.action();
    let stack = ev.stack();
    let alloc = crate::tables::Action::Alloc as u8;
    let mut cur = StepWindows::default();
    let mut previous = None;
    let mut state = Kind::Weights;
    // The run of the script's own allocations going on (where it began, how many).
    let mut run: Option<(usize, usize)> = None;
    for (i, _) in action.iter().enumerate().take(oom).filter(|(_, &a)| a == alloc) {
        let k = kinds.of(stack.at(i));
        let batch = run.filter(|r| r.1 <= BATCH_ALLOCATIONS).map(|r| r.0);
        run = match (k, state) {
            (Kind::Script, Kind::Weights | Kind::Script | Kind::Optimizer) => {
                Some(run.map_or((i, 1), |r| (r.0, r.1 + 1)))
            }
            (Kind::Script, _) => run,
            _ => None,
        };
        match (k, state) {
            (Kind::Weights, _) => {
                cur = StepWindows {
                    start: i + 1,
                    ..Default::default()
                };
                state = Kind::Weights;
            }
            (Kind::Forward, Kind::Weights | Kind::Script) => {
                cur.forward = Some(i);
                cur.batch = batch;
                state = Kind::Forward;
            }
            (Kind::Forward, Kind::Optimizer) => {
                // A new step whose batch the model made itself.
                previous = Some(StepWindows { end: Some(i), ..cur });
                cur = StepWindows {
                    start: i,
                    forward: Some(i),
                    ..Default::default()
                };
                state = Kind::Forward;
            }
            (Kind::Backward, Kind::Forward) => {
                cur.backward = Some(i);
                state = Kind::Backward;
            }
            (Kind::Optimizer, Kind::Forward | Kind::Backward) => {
                cur.optimizer = Some(i);
                state = Kind::Optimizer;
            }
            (Kind::Script, Kind::Optimizer) => {
                // The next batch: the step is over.
                previous = Some(StepWindows { end: Some(i), ..cur });
                cur = StepWindows {
                    start: i,
                    ..Default::default()
                };
                state = Kind::Script;
            }
            (Kind::Script, Kind::Weights) => state = Kind::Script,
            _ => {}
        }
    }
    // The failure's own evidence: a range around it, then its frames, then the step's state.
    let t = ev.time().at(oom.min(ev.len().saturating_sub(1)));
    let in_range = phases
        .iter()
        .filter(|p| p.start_us <= t && p.end_us.is_none_or(|e| e >= t))
        .filter_map(|p| Some((p.start_us, phase_of_range(&p.name)?)))
        .max_by_key(|(s, _)| *s)
        .map(|(_, ph)| ph);
    let own = (oom < ev.len()).then(|| kinds.of(stack.at(oom)));
    let phase = in_range
        .or_else(|| match own {
            // Recomputation in backward (checkpointing) runs modules' forwards.
            Some(Kind::Forward) if state == Kind::Backward => Some(OomPhase::Backward),
            Some(Kind::Backward) if state == Kind::Weights || state == Kind::Script => None,
            Some(k) => Some(phase_of_kind(k)).filter(|p| *p != OomPhase::Unknown),
            None => None,
        })
        .unwrap_or(phase_of_kind(state));
    let phase = generation::inference_phase(ev, stacks, oom, phase).unwrap_or(phase);
    FailedStep {
        phase,
        failing: cur,
        previous,
    }
}

/// One allocation of the lifetimes table.
#[derive(Debug, Clone, Copy)]
pub(super) struct Row {
    pub(super) alloc: i64,
    pub(super) free: i64,
    pub(super) size: i64,
    pub(super) stack: u32,
    pub(super) category: Category,
    pub(super) rule: CategoryRule,
}

/// The lifetimes' rows with their category columns.
pub(super) fn rows(lifetimes: &DataFrame) -> PolarsResult<Vec<Row>> {
    rows_placed(lifetimes, &crate::analysis::whatif::categories_of(lifetimes)?)
}

/// The lifetimes' rows with each one's placement.
fn rows_placed(lifetimes: &DataFrame, placed: &[(Category, CategoryRule)]) -> PolarsResult<Vec<Row>> {
    let alloc = lt_col::ALLOC_IDX.slice(lifetimes)?;
    let free = lt_col::FREE_IDX.slice(lifetimes)?;
    let size = IntSlice::of(lifetimes, lt_col::SIZE)?;
    let stack = StackIds::of(lifetimes, lt_col::STACK)?;
    Ok((0..lifetimes.height())
        .map(|r| Row {
            alloc: i64::from(alloc[r]),
            free: i64::from(free[r]),
            size: size.at(r),
            stack: stack.at(r),
            category: placed[r].0,
            rule: placed[r].1,
        })
        .collect())
}

pub(super) fn live_at(r: &Row, at: i64) -> bool {
    r.alloc < at && (r.free < 0 || r.free > at)
}

/// Whether the run-wide rules left a row to the failing step's evidence.
fn open_to_failed_step(r: &Row) -> bool {
    matches!(r.category, Category::Other | Category::Temporary | Category::Cache)
        && matches!(
            r.rule,
            CategoryRule::Unplaced
                | CategoryRule::LongLived
                | CategoryRule::WithinOnePhase
                | CategoryRule::KeptPastItsIteration
                | CategoryRule::WithinOptimizerStep
                | CategoryRule::KeptFromBackwardUnlikeAnyParameter
        )
}

/// Sizes a parameter has, and half of them (bf16 copies of fp32 weights).
pub(super) fn parameter_sizes(rows: &[Row]) -> FxHashSet<i64> {
    let mut s = FxHashSet::default();
    for r in rows.iter().filter(|r| r.category == Category::Parameter) {
        s.insert(r.size);
        if r.size % 2 == 0 {
            s.insert(r.size / 2);
        }
    }
    s
}

/// Where a row made in the failing step belongs.
/// `first`: no step completed before this one, so what lives from before its batch was made to
/// the failure is the model's weights (loaded or made on the device, not moved there).
fn placed_in_step(
    r: &Row,
    w: &StepWindows,
    parameter_size: &FxHashSet<i64>,
    first: bool,
) -> Option<(Category, CategoryRule)> {
    let a = usize::try_from(r.alloc).ok()?;
    // No model ran in the step: nothing training-shaped to place by.
    if a < w.start || w.forward.is_none() {
        return None;
    }
    let before = |x: Option<usize>| x.is_none_or(|b| a < b);
    Some(if w.optimizer.is_some_and(|o| a >= o) {
        if parameter_size.contains(&r.size) {
            (Category::OptimizerState, CategoryRule::MadeByOptimizerStep)
        } else {
            (Category::Temporary, CategoryRule::WithinOptimizerStep)
        }
    } else if w.backward.is_some_and(|b| a >= b) {
        if parameter_size.contains(&r.size) {
            (Category::Gradient, CategoryRule::KeptFromBackward)
        } else {
            (Category::Gradient, CategoryRule::MadeInFailedBackward)
        }
    } else if w.forward.is_some_and(|f| a >= f) && before(w.backward) {
        (Category::Activation, CategoryRule::MadeInFailedForward)
    } else if before(w.forward) {
        match w.batch {
            Some(b) if a < b && first => (Category::Parameter, CategoryRule::AliveThroughout),
            None if first => (Category::Parameter, CategoryRule::AliveThroughout),
            _ => (Category::Input, CategoryRule::MadeBeforeForward),
        }
    } else {
        return None;
    })
}

/// Places what each OOM's failed step made and left live by the window it was made in (see
/// the module's list), where the run-wide rules left it as other, temporary or cache: the
/// report's categories, its peak's make-up and each OOM's `live_categories` then agree.
pub fn place_failed_steps(
    ev: &DeviceEvents,
    stacks: &StackResolver,
    phases: &[PhaseRange],
    lifetimes: &DataFrame,
    mut placed: Vec<(Category, CategoryRule)>,
) -> PolarsResult<Vec<(Category, CategoryRule)>> {
    let ooms = ev.indices_of(crate::tables::Action::Oom);
    if ooms.is_empty() {
        return Ok(placed);
    }
    let mut rows = rows_placed(lifetimes, &placed)?;
    let mut kinds = Kinds {
        stacks,
        recorded: stacks.any_recorded(),
        seen: FxHashMap::default(),
    };
    for oom in ooms {
        let step = locate(ev, stacks, phases, oom);
        let first = step.previous.is_none();
        // What precedes the forward first (the weights, in a first step), then the rest with
        // those weights' sizes known.
        for pass in [0, 1] {
            let psize = parameter_sizes(&rows);
            for (r, p) in rows.iter_mut().zip(placed.iter_mut()) {
                let pre_forward = step.failing.forward.is_some_and(|f| r.alloc < f as i64);
                if (pass == 0) != pre_forward || !live_at(r, oom as i64) || !open_to_failed_step(r) {
                    continue;
                }
                // Weights made on the device, before the failing step (or before any step).
                let weights = (pass == 0 && kinds.of(r.stack) == Kind::Weights && step.failing.forward.is_some())
                    .then_some((Category::Parameter, CategoryRule::AliveThroughout));
                if let Some(np) = weights.or_else(|| placed_in_step(r, &step.failing, &psize, first)) {
                    *p = np;
                    r.category = np.0;
                    r.rule = np.1;
                }
            }
        }
    }
    Ok(placed)
}

/// The causes a batch fit is read for: what the step itself needs stood in the way.
fn fit_causes(cause: OomCause) -> bool {
    matches!(
        cause,
        OomCause::Limit | OomCause::Capacity | OomCause::Fragmentation | OomCause::Unknown
    )
}

/// What an OOM's failed step says: its phase, what is live by category, and the batch fit.
pub struct FailureReading {
    pub phase: OomPhase,
    pub live: Vec<CategoryBytes>,
    pub summary: LiveAtFailure,
    pub fits: Option<OomFit>,
}

/// Reads the failed step of the OOM at entry `oom`.
#[allow(clippy::too_many_arguments)]
pub fn read_failure(
    ev: &DeviceEvents,
    stacks: &StackResolver,
    phases: &[PhaseRange],
    lifetimes: &DataFrame,
    usage: &Usage,
    oom: usize,
    facts: &OomFacts,
    cause: OomCause,
    kv: Option<&crate::analysis::kv_cache::KvCacheReading>,
) -> PolarsResult<FailureReading> {
    let step = locate(ev, stacks, phases, oom);
    let rows = rows(lifetimes)?;
    let psize = parameter_sizes(&rows);
    let at = oom as i64;
    // The categories already hold the failed step's placements (`place_failed_steps`).
    let mut bytes = vec![0i64; Category::ALL.len()];
    let slot = |c: Category| {
        Category::ALL
            .iter()
            .position(|&x| x == c)
            .unwrap_or(Category::ALL.len() - 1)
    };
    for r in rows.iter().filter(|r| live_at(r, at)) {
        bytes[slot(r.category)] += r.size;
    }
    let live: Vec<CategoryBytes> = Category::ALL
        .iter()
        .zip(&bytes)
        .filter(|(_, b)| **b > 0)
        .map(|(&category, &bytes)| CategoryBytes { category, bytes })
        .collect();
    let mut summary = LiveAtFailure::of(&live);
    let blocks = batch_fit::parameter_blocks(&rows);
    summary.layers = blocks.as_ref().map(|b| b.layers);
    if step.phase == OomPhase::OptimizerStep && step.failing.optimizer.is_some() {
        // Adam-style state, made lazily at the first step: two of each parameter's size.
        let adam = (oom < ev.len())
            .then(|| stacks.frames(ev.stack().at(oom)))
            .is_some_and(|f| f.iter().any(|x| x.contains("torch/optim/adam")));
        if adam && step.previous.is_none() {
            summary.optimizer_state_to_come = Some(2 * summary.gradient.max(summary.parameter));
        }
    }
    let generating = matches!(step.phase, OomPhase::Prefill | OomPhase::Decode);
    let fits = match kv.filter(|_| generating) {
        Some(kv) => {
            let g = generation_fit::GenerationStep {
                rows: &rows,
                step: &step,
                usage,
                oom,
                facts,
                cause,
                blocks: blocks.as_ref(),
                kv,
            };
            let at_failure = g.kv_at_failure();
            summary.kv = Some(at_failure);
            fit_causes(cause).then(|| g.fit(&at_failure))
        }
        None => batch_fit::batch_fit(
            &rows,
            &psize,
            &step,
            usage,
            oom,
            facts,
            cause,
            &summary,
            blocks.as_ref(),
        ),
    };
    Ok(FailureReading {
        phase: step.phase,
        live,
        summary,
        fits,
    })
}
