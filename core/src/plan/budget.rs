//! The uncalibrated budget: every term of a training step's memory from the model's shape and
//! the run's settings, counted the way PyTorch holds them.
//!
//! - Parameters, gradients (trainable only) and optimizer state in the weights' type, plus
//!   fp32 master weights and state where DeepSpeed's mixed precision keeps them.
//! - Activations and the loss, per token ([`super::activations`]); with checkpointing each
//!   layer's input alone plus one recomputed layer in backward; a frozen bottom saves nothing.
//! - autocast's half-precision copies of the weights (kept for backward).
//! - The optimizer step's temporaries (foreach AdamW: one state-sized tensor).
//!
//! The peak is the largest of the three moments a step has: the loss and start of backward,
//! the end of backward (with checkpointing), and the optimizer step.

use memlens_api::{Category, CategoryBytes, PlanOptimizer, PlanPhase, WeightsDtype};

use super::activations::{layer_activation_bytes, loss_bytes, outer_activation_bytes, Types};
use super::config::ModelShape;
use super::params::{parameter_tensors, ParamKind, ParamTensor};
pub use super::settings::{Settings, Trainable};

/// Outside PyTorch's allocator: the CUDA context with its kernels loaded lazily (CUDA ≥ 11.7).
pub const CUDA_CONTEXT_BYTES: i64 = 512 << 20;

/// cuBLAS workspaces PyTorch's allocator holds on Hopper: one for the forward thread's handle and
/// one for the autograd thread's (`CUBLAS_WORKSPACE_CONFIG=:4096:8`, 32 MiB each).
pub const CUBLAS_WORKSPACE_BYTES: f64 = (64u64 << 20) as f64;

/// Reserved ÷ allocated at a training step's peak: the caching allocator's segment rounding and
/// free-but-cached blocks (the median over the runs in traces/plan/runs.json).
pub const RESERVED_PER_ALLOCATED: f64 = 1.13;

/// What one moment of a step holds beside what every moment holds.
#[derive(Debug, Clone, Copy)]
struct Moment {
    phase: PlanPhase,
    gradients: f64,
    /// Saved activations, the loss's tensors and autocast's weight copies.
    activations: f64,
    temporary: f64,
}

/// The memory of one step, by category, at its peak.
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    pub parameter_count: u64,
    pub trainable_parameter_count: u64,
    pub peak_allocated_bytes: i64,
    pub phase: PlanPhase,
    pub by_category: Vec<CategoryBytes>,
    pub assumptions: Vec<String>,
}

/// A setting's name on the wire (`bf16`, `adamw_8bit`, `gpt_neox`).
fn wire<T: serde::Serialize>(v: T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// Optimizer state bytes for the trainable tensors, and the step's temporaries.
fn optimizer_bytes(tensors: &[ParamTensor], trainable: u64, s: &Settings, state: f64) -> (f64, f64) {
    let p = trainable as f64;
    match s.optimizer {
        PlanOptimizer::Adamw | PlanOptimizer::Adam => (2.0 * state * p, state * p),
        PlanOptimizer::SgdMomentum => (state * p, 0.0),
        PlanOptimizer::Sgd => (0.0, 0.0),
        PlanOptimizer::Adafactor => {
            let all: u64 = tensors.iter().map(ParamTensor::elements).sum::<u64>().max(1);
            let factored: f64 = tensors
                .iter()
                .map(|t| {
                    let n = if t.cols > 1 { t.rows + t.cols } else { t.rows };
                    (n * t.copies) as f64
                })
                .sum();
            let largest = tensors.iter().map(|t| t.rows * t.cols).max().unwrap_or(0) as f64;
            // Factored second moments of the trainable share; the step works on one tensor at a time.
            (state * factored * p / all as f64, 2.0 * state * largest)
        }
        PlanOptimizer::Adamw8bit => (2.0 * p + 2.0 * 4.0 * p / 256.0, 0.0),
    }
}

/// The budget of one training step.
pub fn budget(m: &ModelShape, s: &Settings) -> Budget {
    let tensors = parameter_tensors(m);
    let params: u64 = tensors.iter().map(ParamTensor::elements).sum();
    budget_of(Some(m), &tensors, params, s)
}

/// The budget of a model known only by its parameter count: the model states, no activations.
pub fn budget_without_config(params: u64, s: &Settings) -> Budget {
    budget_of(None, &[], params, s)
}

fn budget_of(m: Option<&ModelShape>, tensors: &[ParamTensor], params: u64, s: &Settings) -> Budget {
    let t = Types::of(s);
    let mut assumptions = Vec::new();
    let trainable = match s.trainable {
        Trainable::All => params,
        Trainable::Count(n) => n.min(params),
        Trainable::LoraRank(r) => m.map_or(0, |m| r * m.layers * (m.hidden + m.q_width() + m.hidden + m.kv_width())),
    };
    if let (Trainable::LoraRank(r), Some(_)) = (s.trainable, m) {
        assumptions.push(format!(
            "LoRA rank {r} on the query and value projections (PEFT's default targets): {trainable} adapter \
             parameters train in fp32, the base model is frozen"
        ));
    }
    let gpus = s.gpus.max(1) as f64;
    let shard = |from: u8| if s.zero_stage >= from { 1.0 / gpus } else { 1.0 };
    let tokens = (s.batch * s.seq) as f64;
    let lora = matches!(s.trainable, Trainable::LoraRank(_));
    // Weights, and the trainable part's gradients; LoRA adapters are fp32 whatever the base.
    let weights = params as f64 * t.weights * shard(3) + if lora { trainable as f64 * 4.0 } else { 0.0 };
    let grad_type = if lora { 4.0 } else { t.weights };
    let gradients = trainable as f64 * grad_type * shard(2);
    // Optimizer state: in the weights' type with plain PyTorch; DeepSpeed's mixed precision
    // (ZeRO with half weights) keeps fp32 state and fp32 master weights.
    let master = s.zero_stage > 0 && t.weights < 4.0 && !lora;
    let state_type = if master || lora { 4.0 } else { t.weights };
    let (mut state, mut step_temp) = optimizer_bytes(tensors, trainable, s, state_type);
    if master {
        state += 4.0 * trainable as f64;
        assumptions.push("ZeRO with half-precision weights: fp32 master weights and fp32 optimizer state".into());
    }
    state *= shard(1);
    step_temp *= shard(1);
    if s.optimizer_offload {
        state = 0.0;
        step_temp = 0.0;
        assumptions.push("optimizer state offloaded to CPU memory: none of it, nor its step, on the GPU".into());
    }
    if s.zero_stage > 0 {
        assumptions.push(format!(
            "ZeRO stage {} over {gpus} GPUs: optimizer state ÷ {gpus}{}{}",
            s.zero_stage,
            if s.zero_stage >= 2 { ", gradients ÷ GPUs" } else { "" },
            if s.zero_stage >= 3 {
                ", parameters ÷ GPUs (the layer being computed is gathered whole, not counted)"
            } else {
                ""
            }
        ));
    }
    // Activations and the loss.
    let (layer, outer, loss, copies) = match m {
        Some(m) => {
            let matrices: u64 = tensors
                .iter()
                .filter(|p| p.kind == ParamKind::Matrix || (p.kind == ParamKind::Embedding && m.tied))
                .filter(|p| p.kind == ParamKind::Matrix || p.name == "embed_tokens")
                .map(ParamTensor::elements)
                .sum();
            let copies = if t.casts { 2.0 * matrices as f64 * shard(3) } else { 0.0 };
            (
                layer_activation_bytes(m, s),
                outer_activation_bytes(m, s),
                loss_bytes(m, s),
                copies,
            )
        }
        None => {
            assumptions.push("no config: activations and the loss are not counted (only the model states)".into());
            (0.0, 0.0, 0.0, 0.0)
        }
    };
    // Frozen parameters are taken to be the bottom of the network (the embeddings, then whole
    // layers from the first): a layer whose weights and input need no gradient records no graph,
    // so it saves nothing for backward, and autocast caches no copy of a frozen weight.
    let frozen_layers = match (s.trainable, m) {
        (Trainable::Count(n), Some(m)) if n < params => {
            let frozen = params - n;
            let embeddings: u64 = tensors
                .iter()
                .filter(|t| t.kind == ParamKind::Embedding)
                .map(ParamTensor::elements)
                .sum();
            let per_layer: u64 = tensors
                .iter()
                .filter(|t| t.copies >= m.layers && t.copies % m.layers.max(1) == 0)
                .map(ParamTensor::elements)
                .sum::<u64>()
                / m.layers.max(1);
            // Whole layers above every embedding: the rest is not a frozen bottom (a trainable
            // position embedding, say, keeps every layer's graph), and every layer saves.
            let rest = frozen.saturating_sub(embeddings);
            let layers = (rest + per_layer / 2) / per_layer.max(1);
            let whole = frozen >= embeddings && rest.abs_diff(layers * per_layer) <= per_layer / 100;
            let layers = if whole { layers.min(m.layers) } else { 0 };
            assumptions.push(if layers > 0 {
                format!(
                    "{frozen} frozen parameters are the embeddings and the first {layers} layers: those layers \
                     record no graph and save no activations"
                )
            } else {
                format!(
                    "{frozen} frozen parameters are not the embeddings and whole first layers: every layer still \
                     saves its activations for the gradients below it"
                )
            });
            layers
        }
        _ => 0,
    };
    let layers = m.map_or(0, |m| m.layers - frozen_layers) as f64;
    if let Some(m) = m {
        let precision = match (s.weights, t.casts) {
            (_, true) => format!("{} weights under {} autocast", wire(s.weights), wire(s.autocast)),
            (WeightsDtype::Fp32, false) => "fp32 weights, no autocast (fp32 attention runs SDPA's math kernel)".into(),
            _ => format!("{} weights, no autocast", wire(s.weights)),
        };
        assumptions.insert(
            0,
            format!(
                "{precision}, {}, Hugging Face's {} layers with SDPA attention: {} saved per token per layer{}; \
                 the loss {} per token (fp32 log-softmax and its gradients, as transformers ≥ 4.46 computes it: \
                 no full-vocabulary copies); the optimizer state appears at the first step and stays",
                wire(s.optimizer),
                wire(m.family),
                memlens_api::bytes_label(layer.round() as i64),
                if s.checkpointing {
                    ", of which checkpointing keeps each layer's input and recomputes one layer in backward"
                } else {
                    ""
                },
                memlens_api::bytes_label(loss.round() as i64)
            ),
        );
    }
    let copies = match m {
        Some(m) if m.layers > 0 => copies * (1.0 - frozen_layers as f64 / (m.layers + 1) as f64),
        _ => copies,
    };
    let inputs = 24.0 * tokens; // token ids, the labels padded and shifted (int64)
    let (saved, recompute) = if s.checkpointing {
        (layers * t.residual * m.map_or(0, |m| m.hidden) as f64, layer)
    } else {
        (layers * layer, 0.0)
    };
    // The three moments of a step.
    let loss_moment = (saved + outer + loss) * tokens;
    let per_layer_copies = if layers > 0.0 { copies / (layers + 1.0) } else { 0.0 };
    let loss_copies = if s.checkpointing { per_layer_copies } else { copies };
    let backward_moment = recompute * tokens + per_layer_copies;
    let moments = [
        Moment {
            phase: PlanPhase::LossBackward,
            gradients: 0.0,
            activations: loss_moment + loss_copies,
            temporary: 0.0,
        },
        Moment {
            phase: PlanPhase::Backward,
            gradients,
            activations: backward_moment + per_layer_copies,
            temporary: 0.0,
        },
        Moment {
            phase: PlanPhase::OptimizerStep,
            gradients,
            activations: 0.0,
            temporary: step_temp,
        },
    ];
    // Held at every moment: the weights, the optimizer state, the inputs, the workspaces.
    let held = weights + state + inputs + CUBLAS_WORKSPACE_BYTES;
    let total = |m: &Moment| held + m.gradients + m.activations + m.temporary;
    let best = moments
        .iter()
        .max_by(|a, b| total(a).total_cmp(&total(b)))
        .copied()
        .unwrap_or(moments[0]);
    let (phase, gradients, activations, temp) = (best.phase, best.gradients, best.activations, best.temporary);
    let by_category = [
        (Category::Parameter, weights),
        (Category::Gradient, gradients),
        (Category::OptimizerState, state),
        (Category::Activation, activations),
        (Category::Input, inputs),
        (Category::Temporary, temp),
        (Category::Other, CUBLAS_WORKSPACE_BYTES),
    ]
    .into_iter()
    .filter(|(_, b)| *b >= 0.5)
    .map(|(category, b)| CategoryBytes {
        category,
        bytes: b.round() as i64,
    })
    .collect();
    Budget {
        parameter_count: params,
        trainable_parameter_count: trainable,
        peak_allocated_bytes: total(&best).round() as i64,
        phase,
        by_category,
        assumptions,
    }
}
