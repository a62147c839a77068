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

use super::activations::{layer_saved, loss_bytes, outer_saved, Types};
use super::config::ModelShape;
use super::names::Role;
use super::params::{parameter_tensors, ParamTensor};
pub use super::settings::{Settings, Trainable};
use super::training::{frozen_layers, resolve, Training};

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
    let part = trainable_part(m, params, s, t, &mut assumptions);
    let states = ModelStates::of(tensors, params, &part, s, t, &mut assumptions);
    if let (Trainable::Count(n), Some(m)) = (&s.trainable, m) {
        frozen_count_assumption(m, *n, states.parameter_count, &mut assumptions);
    }
    let step = StepActivations::of(m, s, t, &part.training, &mut assumptions);
    let moments = step.moments(s, states.gradients, states.step_temporary);
    // Held at every moment: the weights, the optimizer state, the inputs, the workspaces.
    let held = states.weights + states.optimizer_state + step.inputs + CUBLAS_WORKSPACE_BYTES;
    let total = |m: &Moment| held + m.gradients + m.activations + m.temporary;
    let best = moments
        .iter()
        .max_by(|a, b| total(a).total_cmp(&total(b)))
        .copied()
        .unwrap_or(moments[0]);
    let by_category = [
        (Category::Parameter, states.weights),
        (Category::Gradient, best.gradients),
        (Category::OptimizerState, states.optimizer_state),
        (Category::Activation, best.activations),
        (Category::Input, step.inputs),
        (Category::Temporary, best.temporary),
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
        parameter_count: states.parameter_count,
        trainable_parameter_count: part.trainable,
        peak_allocated_bytes: total(&best).round() as i64,
        phase: best.phase,
        by_category,
        assumptions,
    }
}

/// What of the model trains: the layers resolved from the settings, the trainable parameters,
/// and whether they are LoRA's adapters.
struct TrainablePart {
    training: Training,
    trainable: u64,
    lora: bool,
}

/// Which parameters train (all, a count, LoRA adapters or those matching globs), with what LoRA
/// and globs assume said.
fn trainable_part(
    m: Option<&ModelShape>,
    params: u64,
    s: &Settings,
    t: Types,
    assumptions: &mut Vec<String>,
) -> TrainablePart {
    // LoRA's adapters compute in fp32 (peft's autocast_adapter_dtype), or autocast's half type.
    let adapter_compute = if t.casts { 2.0 } else { 4.0 };
    let training = match m {
        Some(m) => resolve(m, &s.trainable, adapter_compute).unwrap_or_default(),
        None => Training::default(),
    };
    let trainable = match (&s.trainable, m) {
        (Trainable::All, _) => params,
        (Trainable::Count(n), _) => (*n).min(params),
        (_, Some(_)) => training.trainable,
        (_, None) => 0,
    };
    if let (Trainable::Lora(l), Some(_)) = (&s.trainable, m) {
        assumptions.push(format!(
            "LoRA rank {} on {}{}, dropout {}: {} adapter parameters train in fp32 (peft's autocast_adapter_dtype), \
             the base is frozen; each adapted linear saves {}its dropped input and the rank-{} intermediate",
            l.rank,
            l.targets.join(", "),
            if l.default_targets {
                " (peft's default targets for the family)"
            } else {
                ""
            },
            l.dropout,
            training.adapters,
            if l.dropout > 0.0 { "its dropout mask, " } else { "" },
            l.rank
        ));
    }
    if let (Trainable::Globs(globs), Some(_)) = (&s.trainable, m) {
        let first = training.layers.iter().position(|l| l.graph);
        assumptions.push(format!(
            "only the parameters matching {} train ({trainable}); {}",
            globs.join(", "),
            match first {
                Some(0) | None => "every layer saves its activations".to_string(),
                Some(f) => format!("layers below {f} record no graph and save nothing"),
            }
        ));
    }
    TrainablePart {
        training,
        trainable,
        lora: matches!(s.trainable, Trainable::Lora(_)),
    }
}

/// The model states on one GPU: weights, gradients, optimizer state and the step's temporaries,
/// each sharded as ZeRO's stage says.
struct ModelStates {
    /// The parameters, LoRA's adapters included.
    parameter_count: u64,
    weights: f64,
    gradients: f64,
    optimizer_state: f64,
    step_temporary: f64,
}

impl ModelStates {
    fn of(
        tensors: &[ParamTensor],
        params: u64,
        part: &TrainablePart,
        s: &Settings,
        t: Types,
        assumptions: &mut Vec<String>,
    ) -> ModelStates {
        let (training, trainable, lora) = (&part.training, part.trainable, part.lora);
        let gpus = s.gpus.max(1) as f64;
        let shard = |from: u8| if s.zero_stage >= from { 1.0 / gpus } else { 1.0 };
        let weights = weight_bytes(params, training, s, assumptions) * shard(3)
            + if lora { training.adapters as f64 * 4.0 } else { 0.0 };
        // The trainable part's gradients; LoRA adapters are fp32 whatever the base.
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
        ModelStates {
            parameter_count: params + if lora { training.adapters } else { 0 },
            weights,
            gradients,
            optimizer_state: state,
            step_temporary: step_temp,
        }
    }
}

/// What a count of trainable parameters (`n` of `params`) leaves frozen, said.
fn frozen_count_assumption(m: &ModelShape, n: u64, params: u64, assumptions: &mut Vec<String>) {
    if n >= params {
        return;
    }
    let frozen = params - n;
    let layers = frozen_layers(m, frozen);
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
}

/// What a step's forward saves and its backward recomputes, by token, and the inputs.
struct StepActivations {
    saved: Saved,
    /// Token ids and labels.
    inputs: f64,
    tokens: f64,
    /// With checkpointing: each layer's saved input and the one layer recomputed at a time.
    saved_layers: f64,
    recompute: f64,
}

impl StepActivations {
    fn of(
        m: Option<&ModelShape>,
        s: &Settings,
        t: Types,
        training: &Training,
        assumptions: &mut Vec<String>,
    ) -> StepActivations {
        let saved = match m {
            Some(m) => saved_per_token(m, s, training),
            None => {
                assumptions.push("no config: activations and the loss are not counted (only the model states)".into());
                Saved::default()
            }
        };
        if let Some(m) = m {
            assumptions.insert(0, precision_assumption(m, s, t, saved.full_layer, saved.loss));
        }
        if s.grad_accum_steps > 1 {
            assumptions.push(format!(
                "{} micro-batches a step: from the second on, the accumulated gradients are held through its \
                 forward and backward",
                s.grad_accum_steps
            ));
        }
        let tokens = (s.batch * s.seq) as f64;
        let (saved_layers, recompute) = if s.checkpointing {
            (
                saved.graph_layers * t.residual * m.map_or(0, |m| m.hidden) as f64,
                saved.full_layer,
            )
        } else {
            (saved.layers, 0.0)
        };
        StepActivations {
            saved,
            inputs: 24.0 * tokens, // token ids, the labels padded and shifted (int64)
            tokens,
            saved_layers,
            recompute,
        }
    }

    /// The three moments of a step: the loss and the start of backward, backward, the
    /// optimizer's step.
    fn moments(&self, s: &Settings, gradients: f64, step_temporary: f64) -> [Moment; 3] {
        let gpus = s.gpus.max(1) as f64;
        let copies = self.saved.copies * if s.zero_stage >= 3 { 1.0 / gpus } else { 1.0 };
        let layers = self.saved.graph_layers;
        let loss_moment = (self.saved_layers + self.saved.outer + self.saved.loss) * self.tokens;
        let per_layer_copies = if layers > 0.0 { copies / (layers + 1.0) } else { 0.0 };
        let loss_copies = if s.checkpointing { per_layer_copies } else { copies };
        let backward_moment = self.recompute * self.tokens + per_layer_copies;
        [
            Moment {
                phase: PlanPhase::LossBackward,
                gradients: if s.grad_accum_steps > 1 { gradients } else { 0.0 },
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
                temporary: step_temporary,
            },
        ]
    }
}

/// What is saved for backward, per token (the autocast copies in bytes).
#[derive(Debug, Clone, Copy, Default)]
struct Saved {
    /// Every layer that records a graph, by what of it trains.
    layers: f64,
    outer: f64,
    loss: f64,
    /// autocast's half copies of the weights whose linears' inputs need a gradient.
    copies: f64,
    /// The layers that record a graph.
    graph_layers: f64,
    /// One whole layer's (what checkpointing recomputes).
    full_layer: f64,
}

/// The saved activations of the layers and parts that take part in backward.
fn saved_per_token(m: &ModelShape, s: &Settings, training: &Training) -> Saved {
    let t = Types::of(s);
    let ls = layer_saved(m, s);
    let os = outer_saved(m, s);
    let mut out = Saved {
        loss: loss_bytes(m, s),
        full_layer: ls.total() + training.layers.iter().map(|l| l.lora_bytes).fold(0.0, f64::max),
        ..Saved::default()
    };
    let mut kept = training.kept_head;
    for l in training.layers.iter().filter(|l| l.graph) {
        let on = |role: Role, bytes: f64| if l.trains(role) { bytes } else { 0.0 };
        out.graph_layers += 1.0;
        out.layers += ls.graph
            + if l.input_grad { ls.attn_norm_input } else { 0.0 }
            + if l.input_grad || l.attention_trains {
                ls.attention
            } else {
                0.0
            }
            + on(Role::AttnNorm, ls.attn_norm)
            + on(Role::Qkv, ls.qkv)
            + on(Role::OProj, ls.o_proj)
            + on(Role::MlpNorm, ls.mlp_norm)
            + on(Role::MlpIn, ls.mlp_in)
            + on(Role::MlpOut, ls.mlp_out)
            + l.lora_bytes;
        kept += l.kept_matrices;
    }
    // A tied head is the embedding: it trains with it.
    let head = training.head || (m.tied && training.embedding);
    out.outer = if training.embedding { os.embedding } else { 0.0 }
        + if training.top_graph { os.final_norm_input } else { 0.0 }
        + if training.final_norm { os.final_norm } else { 0.0 }
        + if head { os.head } else { 0.0 }
        + training.head_lora_bytes;
    // QLoRA's 4-bit linears go through bitsandbytes' own matmul, which keeps the packed weight
    // and no half copy.
    if s.weights == WeightsDtype::Nf4 {
        kept = training.kept_head;
    }
    out.copies = if t.casts { 2.0 * kept as f64 } else { 0.0 };
    out
}

/// bitsandbytes' 4-bit NF4 storage of a tensor of `n` elements, double quantised as
/// `BitsAndBytesConfig(bnb_4bit_use_double_quant=True)` does: two elements a byte, one uint8
/// absmax per block of 64, its fp32 absmax per block of 256 of those, the mean they are offset
/// by (fp32) and the 16-value NF4 code (fp32). The 256-value code of the nested absmax is one
/// tensor for all (`NF4_SHARED_BYTES`).
pub fn nf4_bytes(n: u64) -> u64 {
    let blocks = n.div_ceil(64);
    n.div_ceil(2) + blocks + 4 * blocks.div_ceil(256) + 4 + 16 * 4
}

/// The nested absmax's 256-value fp32 code, one for every 4-bit tensor.
pub const NF4_SHARED_BYTES: u64 = 256 * 4;

/// The weights' bytes: in their type, or QLoRA's 4-bit linears beside an fp32 rest.
fn weight_bytes(params: u64, training: &Training, s: &Settings, assumptions: &mut Vec<String>) -> f64 {
    if s.weights != WeightsDtype::Nf4 {
        return params as f64 * Types::of(s).weights;
    }
    let quantised: u64 = training.linear_weights.iter().sum();
    let packed: u64 = training.linear_weights.iter().map(|&n| nf4_bytes(n)).sum::<u64>() + NF4_SHARED_BYTES;
    assumptions.push(format!(
        "QLoRA: {quantised} linear weights in 4-bit NF4 with double quantisation (blocks of 64, their absmax \
         in blocks of 256): {packed} bytes; the embeddings, norms and head ({}) in fp32 as \
         prepare_model_for_kbit_training casts them",
        params - quantised
    ));
    packed as f64 + (params - quantised) as f64 * 4.0
}

/// The first assumption: the precision, the family, a layer's saved bytes and the loss's.
fn precision_assumption(m: &ModelShape, s: &Settings, t: Types, layer: f64, loss: f64) -> String {
    let precision = match (s.weights, t.casts) {
        (_, true) => format!("{} weights under {} autocast", wire(s.weights), wire(s.autocast)),
        (WeightsDtype::Fp32, false) => "fp32 weights, no autocast (fp32 attention runs SDPA's math kernel)".into(),
        (WeightsDtype::Nf4, false) => {
            "nf4 weights, no autocast (the 4-bit linears return fp32: attention runs SDPA's math kernel)".into()
        }
        _ => format!("{} weights, no autocast", wire(s.weights)),
    };
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
    )
}
