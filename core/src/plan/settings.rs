//! A planned run's settings with their defaults resolved (from the query by [`super::settings()`]):
//! what the budget and the activations are computed for.

use memlens_api::{AutocastDtype, PlanOptimizer, WeightsDtype};

/// What trains.
#[derive(Debug, Clone, PartialEq)]
pub enum Trainable {
    All,
    /// This many parameters train; the rest are frozen.
    Count(u64),
    /// The parameters whose Hugging Face names match one of these globs (`fnmatch`).
    Globs(Vec<String>),
    /// LoRA adapters; the base is frozen.
    Lora(Lora),
}

/// LoRA as peft's `get_peft_model` adds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Lora {
    pub rank: u64,
    /// The linear modules adapted, by name (a module whose path ends in `.NAME`).
    pub targets: Vec<String>,
    /// Whether the targets are peft's defaults for the family (none were given).
    pub default_targets: bool,
    pub dropout: f64,
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
    /// Micro-batches per optimizer step (1: no accumulation).
    pub grad_accum_steps: u64,
}
