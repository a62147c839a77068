//! Plan before you run: the memory a training step of a model will take, from its Hugging Face
//! config ([`config`]), its exact parameters ([`params`]) and a per-category budget
//! ([`budget`], its activations from [`activations`]) — or, calibrated by a measured run of the same model, the what-if replay of
//! that run ([`calibrate`]). The largest batch and sequence that fit a GPU are searched over
//! the same model ([`fit`]).

pub mod activations;
pub mod budget;
pub mod calibrate;
pub mod config;
pub mod fit;
pub mod names;
pub mod params;
pub mod presets;
pub mod serve;
pub mod settings;
pub mod training;

pub use config::ModelShape;

/// Why a plan could not be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error("config.json: {0}")]
    Config(String),
    #[error("config.json ({model_type}): no `{field}`: memlens counts this architecture from it; pass --params N to plan without a config")]
    MissingField { model_type: String, field: String },
    #[error("{0}")]
    Settings(String),
    #[error("no bundled model is named {name:?} ({close}); give its config.json instead")]
    UnknownModel { name: String, close: String },
    #[error("calibrating run: {0}")]
    Calibration(String),
}

use memlens_api::{Category, ModelFamily, Plan, PlanParams, PlanPhase, WeightsDtype};

use budget::{Settings, Trainable, CUDA_CONTEXT_BYTES, RESERVED_PER_ALLOCATED};
use calibrate::Calibration;

/// The plan's settings with defaults resolved (batch 1, the context length up to 2048 tokens,
/// AdamW, fp32 weights under bf16 autocast).
pub fn settings(q: &PlanParams, model: Option<&ModelShape>) -> Result<Settings, PlanError> {
    if let Some(w @ (WeightsDtype::Fp8 | WeightsDtype::Int4)) = q.weights {
        return Err(PlanError::Settings(format!(
            "{} weights are planned for serving (--serve): a training plan takes fp32, bf16 or fp16",
            serde_json::to_value(w)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        )));
    }
    if q.zero_stage.is_some_and(|z| z > 3) {
        return Err(PlanError::Settings("zero_stage is 0, 1, 2 or 3".into()));
    }
    let trainable = training::trainable_of(q, model)?;
    Ok(Settings {
        batch: q.batch_size.unwrap_or(1).max(1),
        seq: q
            .seq_len
            .unwrap_or_else(|| model.and_then(|m| m.max_positions).unwrap_or(2048).min(2048))
            .max(1),
        optimizer: q.optimizer.unwrap_or_default(),
        weights: q.weights.unwrap_or_default(),
        autocast: q.autocast.unwrap_or_default(),
        checkpointing: q.checkpointing.unwrap_or(false),
        trainable,
        zero_stage: q.zero_stage.unwrap_or(0),
        gpus: q.gpus.unwrap_or(1).max(1),
        optimizer_offload: q.optimizer_offload.unwrap_or(false),
        grad_accum_steps: q.grad_accum_steps.unwrap_or(1).max(1),
    })
}

/// The model's shape: from the config given, else from the bundled preset `model` names (the one
/// place the CLI's `--model NAME`, the API's `model` and the MCP tool's are resolved).
pub fn model_shape(q: &PlanParams) -> Result<Option<ModelShape>, PlanError> {
    match (q.config.as_deref(), q.model.as_deref().map(str::trim)) {
        (Some(config), _) => ModelShape::from_config_json(config).map(Some),
        (None, Some(name)) if !name.is_empty() => {
            ModelShape::from_config_json(&presets::resolve(name)?.config_json()).map(Some)
        }
        _ => Ok(None),
    }
}

/// One prediction at a batch and sequence length.
struct Point {
    allocated: i64,
    reserved: i64,
    phase: PlanPhase,
    by_category: Vec<memlens_api::CategoryBytes>,
    assumptions: Vec<String>,
}

/// The plan for `q`: from its config (or parameter count), calibrated when `calibration` is given.
pub fn plan(q: &PlanParams, calibration: Option<&Calibration>) -> Result<Plan, PlanError> {
    let model = model_shape(q)?;
    if model.is_none() && q.params.is_none() && calibration.is_none() {
        return Err(PlanError::Settings(
            "give the model's config.json (or --params N, or a run to calibrate by)".into(),
        ));
    }
    let s = settings(q, model.as_ref())?;
    let predict = |batch: u64, seq: u64| point_at(q, &s, model.as_ref(), calibration, batch, seq);
    let at = predict(s.batch, s.seq)?;
    let counts = match &model {
        Some(m) => budget::budget(m, &s),
        None => budget::budget_without_config(q.params.unwrap_or(0), &s),
    };
    let outside = CUDA_CONTEXT_BYTES;
    let mut assumptions = at.assumptions;
    plan_assumptions(q, model.as_ref(), calibration.is_some(), &mut assumptions);
    let (mut fits, mut max_batch_size, mut max_seq_len) = (None, None, None);
    if let Some(capacity) = q.gpu_memory_bytes {
        let reserved = |b: u64, sq: u64| predict(b, sq).map(|p| p.reserved).unwrap_or(i64::MAX);
        fits = Some(at.reserved + outside <= capacity);
        max_batch_size = Some(fit::max_batch_size(&reserved, s.seq, capacity, outside));
        let limit = model.as_ref().and_then(|m| m.max_positions).unwrap_or(1 << 20);
        max_seq_len = Some(fit::max_seq_len(&reserved, s.batch, capacity, outside, limit));
    }
    Ok(Plan {
        model_family: model.as_ref().map_or(ModelFamily::Other, |m| m.family),
        parameter_count: counts.parameter_count,
        trainable_parameter_count: counts.trainable_parameter_count,
        batch_size: s.batch,
        seq_len: s.seq,
        predicted_peak_allocated_bytes: at.allocated,
        predicted_peak_reserved_bytes: at.reserved,
        peak_phase: at.phase,
        by_category: at.by_category,
        outside_allocator_bytes: outside,
        gpu_memory_bytes: q.gpu_memory_bytes,
        fits,
        max_batch_size,
        max_seq_len,
        calibrated_from: calibration.map(|c| c.name.clone()),
        assumptions,
        alternatives: match (fits, q.gpu_memory_bytes) {
            (Some(false), Some(capacity)) => {
                alternatives(q, &s, model.as_ref(), calibration, max_batch_size, capacity)?
            }
            _ => Vec::new(),
        },
    })
}

/// The peak at `batch` × `seq` tokens: the calibrating run's replay when there is one, else the
/// budget from the config (or the parameter count alone).
fn point_at(
    q: &PlanParams,
    s: &Settings,
    model: Option<&ModelShape>,
    calibration: Option<&Calibration>,
    batch: u64,
    seq: u64,
) -> Result<Point, PlanError> {
    let s = Settings {
        batch,
        seq,
        ..s.clone()
    };
    if let Some(c) = calibration {
        let d = calibrate::predict(c, q, batch, seq).map_err(|e| PlanError::Calibration(e.to_string()))?;
        let has = |cat: Category| d.predicted_by_category.iter().any(|c| c.category == cat && c.bytes > 0);
        let phase = if !has(Category::Gradient) {
            PlanPhase::LossBackward
        } else if has(Category::Activation) && !has(Category::Temporary) {
            PlanPhase::Backward
        } else {
            PlanPhase::OptimizerStep
        };
        return Ok(Point {
            allocated: d.predicted_peak_allocated_bytes,
            reserved: d.predicted_peak_reserved_bytes,
            phase,
            by_category: d.predicted_by_category,
            assumptions: d.assumptions,
        });
    }
    let b = match model {
        Some(m) => budget::budget(m, &s),
        None => budget::budget_without_config(q.params.unwrap_or(0), &s),
    };
    Ok(Point {
        allocated: b.peak_allocated_bytes,
        reserved: (b.peak_allocated_bytes as f64 * RESERVED_PER_ALLOCATED).round() as i64,
        phase: b.phase,
        by_category: b.by_category,
        assumptions: b.assumptions,
    })
}

/// What every plan assumes beside its budget's: a model it does not count exactly, and the
/// memory outside the allocator and the reserve's overhead.
fn plan_assumptions(q: &PlanParams, model: Option<&ModelShape>, calibrated: bool, assumptions: &mut Vec<String>) {
    if model.is_none() && q.params.is_none() {
        assumptions.push("no config.json: the model's parameters are not counted (the run's own bytes are)".into());
    }
    if let Some(m) = model {
        if m.family == ModelFamily::Other {
            assumptions.push(format!(
                "model_type {:?} is not one memlens counts exactly: read as a Llama-style decoder",
                m.model_type
            ));
        }
    }
    assumptions.push(format!(
        "{} outside the allocator (the CUDA context); reserved = allocated × {}{}",
        memlens_api::bytes_label(CUDA_CONTEXT_BYTES),
        if calibrated {
            "the run's own ratio".to_string()
        } else {
            format!("{RESERVED_PER_ALLOCATED}")
        },
        if calibrated {
            ""
        } else {
            " (the allocator's rounding and cached blocks)"
        }
    ));
}

/// Single changes to a plan that does not fit, each planned again, those that fit first (then
/// by the memory they need). A calibrated plan offers only what its replay can change.
fn alternatives(
    q: &PlanParams,
    s: &Settings,
    model: Option<&ModelShape>,
    calibration: Option<&Calibration>,
    max_batch: Option<u64>,
    capacity: i64,
) -> Result<Vec<memlens_api::PlanAlternative>, PlanError> {
    use memlens_api::{PlanAlternative, PlanChange, PlanOptimizer};
    let full_model = model.is_some() && matches!(s.trainable, Trainable::All);
    let adam = matches!(s.optimizer, PlanOptimizer::Adamw | PlanOptimizer::Adam);
    let formula = calibration.is_none();
    let mut changes: Vec<PlanAlternative> = Vec::new();
    let mut offer = |change: PlanChange, label: String, batch_size: Option<u64>| {
        changes.push(PlanAlternative {
            change,
            label,
            batch_size,
            predicted_peak_reserved_bytes: 0,
            fits: false,
        })
    };
    if !s.checkpointing {
        offer(PlanChange::Checkpointing, "activation checkpointing".into(), None);
    }
    if formula && s.weights == WeightsDtype::Fp32 {
        offer(PlanChange::Bf16Weights, "bf16 weights".into(), None);
    }
    // LoRA on peft's default targets, where the family has them.
    let lora_targets = model.and_then(|m| training::default_lora_targets(&m.model_type));
    if let (true, true, Some(targets)) = (formula, full_model, lora_targets) {
        offer(
            PlanChange::Lora,
            format!("LoRA rank 16 on {}, the base frozen", targets.join(", ")),
            None,
        );
    }
    if formula && adam {
        offer(PlanChange::Adamw8bit, "8-bit AdamW".into(), None);
    }
    if !s.optimizer_offload && !matches!(s.optimizer, PlanOptimizer::Sgd) {
        offer(
            PlanChange::OptimizerOffload,
            "optimizer state offloaded to CPU".into(),
            None,
        );
    }
    if let Some(b) = max_batch.filter(|&b| b >= 1 && b < s.batch) {
        offer(PlanChange::LargestBatch, format!("batch {b}"), Some(b));
    }
    let base = PlanParams {
        gpu_memory_bytes: None,
        ..q.clone()
    };
    for a in &mut changes {
        let p = plan(&a.applied_to(&base), calibration)?;
        a.predicted_peak_reserved_bytes = p.predicted_peak_reserved_bytes;
        a.fits = p.predicted_peak_reserved_bytes + p.outside_allocator_bytes <= capacity;
    }
    changes.sort_by_key(|a| (!a.fits, a.predicted_peak_reserved_bytes));
    Ok(changes)
}
