//! A plan calibrated by a measured run of the same model: the what-if replay of that run
//! ([`crate::analysis::whatif`]) scaled to the planned tokens, so the run's own measured
//! activations, temporaries and allocator behaviour replace the formula's. The plan and the
//! what-if are then one model: asked for the run's own settings, the plan is the run.

use memlens_api::{OptimizerKind, PlanOptimizer, PlanParams, WhatIfDevice, WhatIfParams};
use polars::prelude::PolarsResult;

use crate::analysis::whatif::{what_if, RunFacts};

/// The measured run a plan is calibrated by.
pub struct Calibration<'a> {
    pub run: &'a RunFacts<'a>,
    /// How the run is named in the plan (its file or report link).
    pub name: String,
    pub run_batch: u64,
    pub run_seq: u64,
    pub run_checkpointing: bool,
}

/// The what-if scenario that is the plan's settings applied to the calibrating run.
pub fn scenario(c: &Calibration, q: &PlanParams, batch: u64, seq: u64) -> WhatIfParams {
    let run_tokens = c.run_batch * c.run_seq;
    WhatIfParams {
        run_batch_size: Some(run_tokens.max(1)),
        batch_size: Some(batch * seq),
        activation_checkpointing: Some(q.checkpointing.unwrap_or(c.run_checkpointing) && !c.run_checkpointing),
        optimizer: q.optimizer.and_then(|o| match o {
            PlanOptimizer::Adamw => Some(OptimizerKind::Adamw),
            PlanOptimizer::Adam => Some(OptimizerKind::Adam),
            PlanOptimizer::SgdMomentum => Some(OptimizerKind::SgdMomentum),
            PlanOptimizer::Sgd => Some(OptimizerKind::Sgd),
            PlanOptimizer::Adafactor | PlanOptimizer::Adamw8bit => None,
        }),
        zero_stage: q.zero_stage,
        gpus: q.gpus,
        optimizer_offload: q.optimizer_offload,
        ..WhatIfParams::default()
    }
}

/// The calibrated prediction at `batch` × `seq`.
pub fn predict(c: &Calibration, q: &PlanParams, batch: u64, seq: u64) -> PolarsResult<WhatIfDevice> {
    let mut d = what_if(c.run, &scenario(c, q, batch, seq))?;
    d.assumptions.retain(|a| !a.starts_with("no change asked for"));
    d.assumptions.insert(
        0,
        format!(
            "calibrated by {} ({} × {} tokens{}): its measured allocations, each scaled by its category, \
             replayed in its own order — activations, inputs and forward/backward temporaries with the tokens",
            c.name,
            c.run_batch,
            c.run_seq,
            if c.run_checkpointing { ", checkpointing" } else { "" }
        ),
    );
    if c.run_checkpointing && q.checkpointing == Some(false) {
        d.assumptions
            .push("the run used checkpointing; a plan from it cannot take checkpointing away: kept".into());
    }
    if matches!(q.optimizer, Some(PlanOptimizer::Adafactor | PlanOptimizer::Adamw8bit)) {
        d.assumptions
            .push("the run's optimizer state is kept (a replay scales fp32 states, not factored or 8-bit ones)".into());
    }
    if q.weights.is_some() || q.autocast.is_some() {
        d.assumptions
            .push("weights and autocast are the run's own (a replay keeps the run's element types)".into());
    }
    Ok(d)
}
