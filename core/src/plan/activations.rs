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
            // QLoRA's 4-bit linears return their input's type: the rest of the model is fp32.
            WeightsDtype::Fp32 | WeightsDtype::Nf4 => 4.0,
            WeightsDtype::Bf16 | WeightsDtype::Fp16 => 2.0,
            // Quantised weights are planned for serving only (`plan::settings` refuses them for
            // training); were they trained, their layers would compute in 16 bits.
            WeightsDtype::Fp8 | WeightsDtype::Int4 => 2.0,
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

/// Bytes a norm of `width` saves beyond its input, per token: for its input's gradient, and
/// for its weight's.
fn norm_saved(m: &ModelShape, t: Types, width: f64) -> Split {
    if m.layer_norm() {
        return Split::default(); // saves its input (counted) and per-row statistics
    }
    // RMSNorm computes in fp32. From an fp32 residual it saves the normalised tensor (the
    // weight multiplies it: for the weight's gradient alone). From a half one it saves the
    // input's fp32 upcast (for the input's gradient), then Llama's saves the normalised tensor
    // cast back to the input's type (the weight multiplies that), Gemma's the fp32 normalised
    // tensor itself.
    if t.residual >= 4.0 {
        Split {
            graph: 0.0,
            weight: 4.0 * width,
        }
    } else if matches!(m.family, ModelFamily::Gemma | ModelFamily::Gemma2 | ModelFamily::Gemma3) {
        Split {
            graph: 4.0 * width,
            weight: 4.0 * width,
        }
    } else {
        Split {
            graph: 4.0 * width,
            weight: t.residual * width,
        }
    }
}

/// Bytes a residual-stream tensor keeps per element: the next norm's input. A LayerNorm saves
/// it, and so does an RMSNorm of an fp32 stream (its fp32 upcast is the tensor itself); an
/// RMSNorm of a half-precision stream saves its fp32 upcast instead (counted with the norm), and
/// the half tensor is freed (the snapshot of traces/plan/runs/llama_b4_bf16w: no residual kept).
fn residual_saved(m: &ModelShape, t: Types) -> f64 {
    if m.layer_norm() || t.residual >= 4.0 {
        t.residual
    } else {
        0.0
    }
}

/// Bytes saved for the gradient flowing down (`graph`) and for a weight's gradient alone.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Split {
    pub graph: f64,
    pub weight: f64,
}

impl Split {
    pub fn total(self) -> f64 {
        self.graph + self.weight
    }
}

/// Bytes saved for `linears` linear layers reading one input of `width`, per token: autocast
/// casts the input once per layer; otherwise the one input is saved. Only a weight's gradient
/// needs a linear's input.
fn linear_inputs(t: Types, linears: f64, width: f64) -> f64 {
    if t.casts {
        linears * 2.0 * width
    } else {
        t.compute * width
    }
}

/// What one decoder layer saves for backward, per token, by what needs it: the gradient flowing
/// through the layer to its input (saved whenever anything at or below the layer trains), and
/// each group of weights' gradients (saved only when that group trains). A frozen linear
/// keeps no input: autograd saves a matmul's input only for its weight's gradient.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LayerSaved {
    /// For the gradient flowing to the layer's input: the MLP's intermediates, the residual after
    /// it.
    pub graph: f64,
    /// What the attention half saves for the gradient flowing through it: q/k/v, its output and
    /// log-sum-exp, the residual after it (and the MLP norm's upcast of it), GPT-2's dropout
    /// mask. None of it when the layer's input needs no gradient and nothing of the attention
    /// trains.
    pub attention: f64,
    /// The attention norm's fp32 upcast of a half-precision input (saved only where the layer's
    /// input needs a gradient).
    pub attn_norm_input: f64,
    /// The attention norm's weight's gradient: the normalised tensor.
    pub attn_norm: f64,
    /// The q/k/v projections' input (autocast: each one's cast).
    pub qkv: f64,
    /// The attention output projection's input.
    pub o_proj: f64,
    /// The MLP norm's weight's gradient.
    pub mlp_norm: f64,
    /// The MLP's first linears' inputs (gate/up, fc1, the router and the experts').
    pub mlp_in: f64,
    /// The MLP's output projection's input (down, fc2).
    pub mlp_out: f64,
}

impl LayerSaved {
    /// Everything, as when the whole layer trains and its input needs a gradient.
    pub fn total(&self) -> f64 {
        self.graph
            + self.attention
            + self.attn_norm_input
            + self.attn_norm
            + self.qkv
            + self.o_proj
            + self.mlp_norm
            + self.mlp_in
            + self.mlp_out
    }
}

/// Activations one decoder layer saves for backward, per token, when all of it trains.
pub fn layer_activation_bytes(m: &ModelShape, s: &Settings) -> f64 {
    layer_saved(m, s).total()
}

/// Activations one decoder layer saves for backward, per token, by what needs them.
pub fn layer_saved(m: &ModelShape, t_settings: &Settings) -> LayerSaved {
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
    let h = m.hidden as f64;
    let (q, kv) = (m.q_width() as f64, m.kv_width() as f64);
    let a = t.compute;
    let fused_qkv = matches!(
        m.family,
        ModelFamily::Gpt2 | ModelFamily::GptNeox | ModelFamily::Falcon | ModelFamily::Phi3
    );
    let rope = m.family != ModelFamily::Gpt2;
    let mut out = LayerSaved::default();
    // Attention: its norm, the projections' inputs, q/k/v as SDPA saves them, its output and
    // the output's contiguous copy (the output projection's input), log-sum-exp in fp32.
    let attn_norm = norm_saved(m, t, h);
    out.attn_norm_input = attn_norm.graph;
    out.attn_norm = attn_norm.weight;
    out.qkv = linear_inputs(t, if fused_qkv { 1.0 } else { 3.0 }, h);
    // transformers 5 keeps a DynamicCache in training (unless checkpointing): SDPA reads the
    // cache's copies of k and v. GPT-2's q is a view of the fused output, which it keeps whole,
    // beside those copies (the snapshot of traces/plan/runs/gpt2_b4).
    out.attention += if fused_qkv {
        a * (q + 2.0 * kv)
            + if rope { a * (q + kv) } else { 0.0 }
            + if m.family == ModelFamily::Gpt2 && !t_settings.checkpointing {
                2.0 * a * kv
            } else {
                0.0
            }
    } else {
        a * (q + 2.0 * kv)
    };
    // The q/k norms (per head, or OLMo 2's over all heads): the widths are the same.
    if matches!(
        m.family,
        ModelFamily::Qwen3 | ModelFamily::Qwen3Moe | ModelFamily::Gemma3 | ModelFamily::Olmo2
    ) {
        let half = Types { residual: a, ..t };
        out.attention += norm_saved(m, half, q).total() + norm_saved(m, half, kv).total() + a * (q + kv);
    }
    out.attention += a * q + 4.0 * m.heads as f64 + math_attention;
    // SDPA's fused kernels write their output head-last, so the transpose back is contiguous and
    // the output projection reads the very tensor SDPA saved; the math kernel's output is
    // head-first, and `.contiguous()` copies it for the projection (the snapshots of
    // traces/plan/runs: no copy beside a flash or memory-efficient output).
    out.o_proj = if math_attention > 0.0 { a * q } else { 0.0 };
    mlp_saved(m, t, &mut out);
    // Residual stream: one new tensor per residual addition (the next norm saves it); GPT-2's
    // dropout keeps a one-byte mask per element after attention and after the MLP.
    let dropout = if m.family == ModelFamily::Gpt2 { h } else { 0.0 };
    out.graph += residual_saved(m, t) * h + dropout;
    if !m.parallel_attention {
        out.attention += residual_saved(m, t) * h + dropout;
    }
    out
}

/// The MLP's share of a layer's saved activations.
fn mlp_saved(m: &ModelShape, t: Types, out: &mut LayerSaved) {
    let (h, i, a) = (m.hidden as f64, m.intermediate as f64, t.compute);
    let gated = !matches!(
        m.family,
        ModelFamily::Gpt2 | ModelFamily::GptNeox | ModelFamily::Falcon | ModelFamily::Phi
    );
    let mlp_norm = if m.parallel_attention && m.norms_per_layer < 2 {
        Split::default()
    } else {
        norm_saved(m, t, h)
    };
    out.attention += mlp_norm.graph;
    out.mlp_norm = mlp_norm.weight;
    if m.experts > 0 {
        // Routed: the router's input, then per routed token the expert's gathered input, its
        // projections' inputs and a gated MLP's intermediates (the product: the down
        // projection's input), and the weighted output.
        let k = m.experts_per_token as f64;
        out.mlp_in += linear_inputs(t, 1.0, h) + k * (t.residual * h + linear_inputs(t, 2.0, h));
        out.graph += k * (3.0 * a * i + a * h);
        out.mlp_out += k * a * i;
        // DeepSeek's shared experts: a gated MLP every token goes through.
        if m.shared_intermediate > 0 {
            let s = m.shared_intermediate as f64;
            out.mlp_in += linear_inputs(t, 2.0, h);
            out.graph += 3.0 * a * s;
            out.mlp_out += a * s;
        }
    } else if gated {
        // The gate's output (the activation saves it), the activation's and the up projection's
        // outputs (the product saves each for the other), the product (the down projection's input).
        let linears = if m.family == ModelFamily::Phi3 { 1.0 } else { 2.0 };
        out.mlp_in += linear_inputs(t, linears, h);
        out.graph += 3.0 * a * i;
        out.mlp_out += a * i;
    } else {
        // gelu_new (GPT-2, Phi) is written out in Python: under autocast pow goes to fp32, and
        // x / 2 (half) and three fp32 tensors (pow's input, tanh's output, 1 + tanh) are held
        // for the gradient flowing through, in every layer it flows through; the second linear
        // saves the half cast of the fp32 product for its weight alone (the snapshots of
        // traces/plan/runs/gpt2_b4 and gpt2_b4_frozen: the frozen layers keep the four of
        // activations.py and drop the cast). Without autocast the product is the second
        // linear's input. F.gelu saves its input alone.
        let (act, fc2_input) = if matches!(m.family, ModelFamily::Gpt2 | ModelFamily::Phi) {
            if t.casts {
                (2.0 * i + 3.0 * 4.0 * i, 2.0 * i)
            } else {
                (4.0 * a * i, a * i)
            }
        } else {
            (a * i, a * i)
        };
        out.mlp_in += linear_inputs(t, 1.0, h);
        out.graph += act;
        out.mlp_out += fc2_input;
    }
}

/// Activations outside the layers, per token, by what needs them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OuterSaved {
    /// The embedding's output (and GPT-2's dropout mask), saved by the first layer for the
    /// embeddings' gradient.
    pub embedding: f64,
    /// The final norm's share for the gradient flowing through it.
    pub final_norm_input: f64,
    /// The final norm's weight's gradient.
    pub final_norm: f64,
    /// The language-model head's input (its weight's gradient).
    pub head: f64,
}

impl OuterSaved {
    pub fn total(&self) -> f64 {
        self.embedding + self.final_norm_input + self.final_norm + self.head
    }
}

/// Activations outside the layers, per token: the embedding's output, the final norm and the
/// language-model head's input.
pub fn outer_saved(m: &ModelShape, s: &Settings) -> OuterSaved {
    let t = Types::of(s);
    let h = m.hidden as f64;
    let dropout = if m.family == ModelFamily::Gpt2 { h } else { 0.0 };
    let norm = norm_saved(m, t, h);
    OuterSaved {
        embedding: residual_saved(m, t) * h + dropout,
        final_norm_input: norm.graph,
        final_norm: norm.weight,
        head: linear_inputs(t, 1.0, h),
    }
}

/// Activations outside the layers when everything trains, per token.
pub fn outer_activation_bytes(m: &ModelShape, s: &Settings) -> f64 {
    outer_saved(m, s).total()
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
