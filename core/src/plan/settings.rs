//! A planned run's settings with their defaults resolved (from the query by [`super::settings()`]):
//! what the budget and the activations are computed for.

use memlens_api::{AutocastDtype, PlanOptimizer, WeightsDtype};

/// What trains.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Trainable {
    All,
    /// This many parameters train; the rest are frozen.
    Count(u64),
    /// LoRA adapters of this rank on the query and value projections; the base is frozen.
    LoraRank(u64),
}

/// A planned run's settings, defaults resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub batch: u64,
    pub seq: u64,
    pub optimizer: PlanOptimizer,
    pub weights: WeightsDtype,
    pub autocast: AutocastDtype,
    pub checkpointing: bool,
    pub trainable: Trainable,
    pub zero_stage: u8,
    pub gpus: u64,
    pub optimizer_offload: bool,
}
