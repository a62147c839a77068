//! Activations, per token: what autograd saves for backward in one decoder layer of each
//! family (norms, autocast's per-linear input copies, q/k/v, SDPA's output and log-sum-exp, the
//! MLP's intermediates, residuals, dropout masks), outside the layers, and the loss's tensors
//! at the start of backward — from the layer's layout and the run's element types
//! ([`Types`]). Checked against the snapshots of traces/plan/runs (`tests/tests/plan.rs`).

use memlens_api::{AutocastDtype, ModelFamily, WeightsDtype};

use super::config::ModelShape;
use super::settings::Settings;

/// Element sizes of the run's tensors.
#[derive(Debug, Clone, Copy)]
pub struct Types {
    /// Weights and their gradients.
    pub weights: f64,
    /// Matmul outputs (the compute type).
    pub compute: f64,
    /// The residual stream (the weights' type: autocast leaves additions in fp32).
    pub residual: f64,
    /// autocast casts each linear's input (and weight) to the compute type.
    pub casts: bool,
}

impl Types {
    pub fn of(s: &Settings) -> Types {
        let weights = match s.weights {
            WeightsDtype::Fp32 => 4.0,
            WeightsDtype::Bf16 | WeightsDtype::Fp16 => 2.0,
        };
        let casts = weights == 4.0 && s.autocast != AutocastDtype::None;
        Types {
            weights,
            compute: if casts { 2.0 } else { weights },
            residual: weights,
            casts,
        }
    }
}

/// Bytes a norm of `width` saves beyond its input, per token.
fn norm_saved(m: &ModelShape, t: Types, width: f64) -> f64 {
    if m.layer_norm() {
        return 0.0; // saves its input (counted) and per-row statistics
    }
    // RMSNorm computes in fp32. From an fp32 residual it saves the normalised tensor (the
    // weight multiplies it). From a half one it saves the input's fp32 upcast, then Llama's
    // saves the normalised tensor cast back to the input's type (the weight multiplies that),
    // Gemma's the fp32 normalised tensor itself.
    if t.residual >= 4.0 {
        4.0 * width
    } else if matches!(m.family, ModelFamily::Gemma | ModelFamily::Gemma2 | ModelFamily::Gemma3) {
        8.0 * width
    } else {
        4.0 * width + t.residual * width
    }
}

/// Bytes saved for `linears` linear layers reading one input of `width`, per token: autocast
/// casts the input once per layer; otherwise the one input is saved.
fn linear_inputs(t: Types, linears: f64, width: f64) -> f64 {
    if t.casts {
        linears * 2.0 * width
    } else {
        t.compute * width
    }
}

/// Activations one decoder layer saves for backward, per token.
pub fn layer_activation_bytes(m: &ModelShape, t_settings: &Settings) -> f64 {
    let t = Types::of(t_settings);
    // fp32 attention cannot use the flash kernel; transformers passes `enable_gqa` to SDPA for
    // the attention modules that group key/value heads (all but GPT-2, GPT-NeoX and Falcon),
    // which the memory-efficient kernel refuses, so those run the math kernel: it saves the
    // softmax of every query against every key.
    let grouped = !matches!(m.family, ModelFamily::Gpt2 | ModelFamily::GptNeox | ModelFamily::Falcon);
    let math_attention = if m.fp32_math_attention {
        // The fp32 softmax, and fp32 copies of q and of k and v expanded to every head; no
        // log-sum-exp (taken off below).
        4.0 * m.heads as f64 * t_settings.seq as f64 + 3.0 * 4.0 * m.q_width() as f64 - 4.0 * m.heads as f64
    } else if t.compute >= 4.0 && grouped {
        4.0 * m.heads as f64 * t_settings.seq as f64
    } else {
        0.0
    };
    let (h, i) = (m.hidden as f64, m.intermediate as f64);
    let (q, kv) = (m.q_width() as f64, m.kv_width() as f64);
    let a = t.compute;
    let fused_qkv = matches!(
        m.family,
        ModelFamily::Gpt2 | ModelFamily::GptNeox | ModelFamily::Falcon | ModelFamily::Phi3
    );
    let rope = m.family != ModelFamily::Gpt2;
    // Attention: its norm, the projections' inputs, q/k/v as SDPA saves them, its output and
    // the output's contiguous copy (the output projection's input), log-sum-exp in fp32.
    let mut attn = norm_saved(m, t, h) + linear_inputs(t, if fused_qkv { 1.0 } else { 3.0 }, h);
    attn += if fused_qkv {
        a * (q + 2.0 * kv) + if rope { a * (q + kv) } else { 0.0 }
    } else {
        a * (q + 2.0 * kv)
    };
    // The q/k norms (per head, or OLMo 2's over all heads): the widths are the same.
    if matches!(
        m.family,
        ModelFamily::Qwen3 | ModelFamily::Qwen3Moe | ModelFamily::Gemma3 | ModelFamily::Olmo2
    ) {
        let half = Types { residual: a, ..t };
        attn += norm_saved(m, half, q) + norm_saved(m, half, kv) + a * (q + kv);
    }
    attn += 2.0 * a * q + 4.0 * m.heads as f64 + math_attention;
    // MLP.
    let gated = !matches!(
        m.family,
        ModelFamily::Gpt2 | ModelFamily::GptNeox | ModelFamily::Falcon | ModelFamily::Phi
    );
    let mlp_norm = if m.parallel_attention && m.norms_per_layer < 2 {
        0.0
    } else {
        norm_saved(m, t, h)
    };
    let mlp = if m.experts > 0 {
        // Routed: the router's input, then per routed token the expert's gathered input, its
        // projections' inputs and a gated MLP's intermediates, and the weighted output.
        let k = m.experts_per_token as f64;
        // DeepSeek's shared experts: a gated MLP every token goes through.
        let shared = if m.shared_intermediate > 0 {
            linear_inputs(t, 2.0, h) + 4.0 * a * m.shared_intermediate as f64
        } else {
            0.0
        };
        mlp_norm
            + linear_inputs(t, 1.0, h)
            + k * (t.residual * h + linear_inputs(t, 2.0, h) + 4.0 * a * i + a * h)
            + shared
    } else if gated {
        let linears = if m.family == ModelFamily::Phi3 { 1.0 } else { 2.0 };
        mlp_norm + linear_inputs(t, linears, h) + 4.0 * a * i
    } else {
        // gelu_new (GPT-2, Phi) is written out in Python: pow goes to fp32 under autocast, and
        // the input, tanh's output, 1 + tanh, x / 2 and the fp32 product are held at the loss
        // (the snapshots of traces/plan/runs show the four of activations.py); F.gelu saves its
        // input alone.
        let act = if matches!(m.family, ModelFamily::Gpt2 | ModelFamily::Phi) {
            if t.casts {
                2.0 * i + 4.0 * i + 4.0 * i + 2.0 * i + 4.0 * i
            } else {
                5.0 * a * i
            }
        } else {
            2.0 * a * i
        };
        mlp_norm + linear_inputs(t, 1.0, h) + act
    };
    // Residual stream: one new tensor per residual addition (the next norm saves it); GPT-2's
    // dropout keeps a one-byte mask per element after attention and after the MLP.
    let residuals = if m.parallel_attention { 1.0 } else { 2.0 };
    let dropout = if m.family == ModelFamily::Gpt2 { 2.0 * h } else { 0.0 };
    attn + mlp + residuals * t.residual * h + dropout
}

/// Activations outside the layers, per token: the embedding's output, the final norm and the
/// language-model head's input.
pub fn outer_activation_bytes(m: &ModelShape, s: &Settings) -> f64 {
    let t = Types::of(s);
    let h = m.hidden as f64;
    let dropout = if m.family == ModelFamily::Gpt2 { h } else { 0.0 };
    t.residual * h + dropout + norm_saved(m, t, h) + linear_inputs(t, 1.0, h)
}

/// The loss's tensors per token at the start of backward: `log_softmax`'s saved fp32 output
/// and the two fp32 gradients of that size (NLL's and `log_softmax`'s); in forward the
/// logits, their fp32 copy and that output are fewer.
pub fn loss_bytes(m: &ModelShape, s: &Settings) -> f64 {
    let t = Types::of(s);
    let v = m.vocab as f64;
    let forward = t.compute * v + if t.compute < 4.0 { 4.0 * v } else { 0.0 } + 4.0 * v;
    // Soft-capped logits (Gemma 2): tanh saves its output, and its gradient is one more.
    let softcap = if m.logit_softcap { 2.0 * t.compute * v } else { 0.0 };
    forward.max(12.0 * v) + softcap
}
