//! A plan calibrated by a measured run of the same model: the what-if replay of that run
//! ([`crate::analysis::whatif`]) scaled to the planned tokens, so the run's own measured
//! activations, temporaries and allocator behaviour replace the formula's. The plan and the
//! what-if are then one model: asked for the run's own settings, the plan is the run.

use memlens_api::{
    FileSummary, GpuLogSummary, OptimizerKind, Plan, PlanOptimizer, PlanParams, WhatIfDevice, WhatIfParams,
};
use polars_core::prelude::PolarsResult;

use super::PlanError;
use crate::analysis::whatif::{for_each_device, what_if, RunFacts};
use crate::stored::frames::DeviceFrames;

/// The measured run a plan is calibrated by.
pub struct Calibration<'a> {
    pub run: &'a RunFacts<'a>,
    /// How the run is named in the plan (its file or report link).
    pub name: String,
    pub run_batch: u64,
    pub run_seq: u64,
    pub run_checkpointing: bool,
}

/// What a calibrating run must say of itself and the query did not: its batch size, or its
/// sequence length (`run_seq_len`, else the plan's own `seq_len`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CalibrationNeeds {
    #[error("the calibrating run's batch size")]
    RunBatchSize,
    #[error("the calibrating run's sequence length")]
    RunSeqLen,
}

/// The calibrating run's batch size and sequence length, as the query gives them.
pub fn calibrating_run(q: &PlanParams) -> Result<(u64, u64), CalibrationNeeds> {
    let batch = q.run_batch_size.ok_or(CalibrationNeeds::RunBatchSize)?;
    let seq = q.run_seq_len.or(q.seq_len).ok_or(CalibrationNeeds::RunSeqLen)?;
    Ok((batch, seq))
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
    if q.train.is_some() || q.lora_rank.is_some() || q.grad_accum_steps.is_some_and(|n| n > 1) {
        d.assumptions.push(
            "what trains and the gradient accumulation are the run's own (a replay keeps its gradients and saved \
             tensors)"
                .into(),
        );
    }
    if q.weights.is_some() || q.autocast.is_some() {
        d.assumptions
            .push("weights and autocast are the run's own (a replay keeps the run's element types)".into());
    }
    Ok(d)
}

/// The plan `q` calibrated by an analysed file of the run (`file`, its stored `frames`, the
/// report's NVML logs): by its busiest device (the largest allocated peak; the first among
/// equals), named `name`. `None` when no device of the file has frames to calibrate by.
pub fn plan_by_busiest_device(
    q: &PlanParams,
    name: &str,
    (run_batch, run_seq): (u64, u64),
    file: &FileSummary,
    frames: &[DeviceFrames],
    gpu_logs: &[GpuLogSummary],
) -> PolarsResult<Option<Result<Plan, PlanError>>> {
    let plans = for_each_device(file, frames, gpu_logs, None, |run| {
        let c = Calibration {
            run,
            name: name.to_owned(),
            run_batch,
            run_seq,
            run_checkpointing: q.run_checkpointing.unwrap_or(false),
        };
        Ok((run.peak_allocated_bytes, super::plan(q, Some(&c))))
    })?;
    let mut best: Option<(i64, Result<Plan, PlanError>)> = None;
    for (peak, plan) in plans {
        if best.as_ref().is_none_or(|(b, _)| peak > *b) {
            best = Some((peak, plan));
        }
    }
    Ok(best.map(|(_, plan)| plan))
}
