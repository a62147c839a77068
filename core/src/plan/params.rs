//! The parameters a config's model holds, tensor by tensor as `transformers` builds them
//! (`sum(p.numel())` of the model equals [`parameter_count`]; traces/plan/params.json holds the
//! counts `transformers` gave on the same configs).

use memlens_api::ModelFamily;

use super::config::ModelShape;

/// What a parameter is, for what the optimizer, autocast and LoRA do with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    /// Token (or position) embeddings.
    Embedding,
    /// A linear layer's weight: autocast makes a half-precision copy of it in forward.
    Matrix,
    /// Biases and norm weights.
    Vector,
}

/// One parameter tensor of one layer, and how many layers hold it.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamTensor {
    pub name: &'static str,
    /// Rows × columns (columns 1 for a vector).
    pub rows: u64,
    pub cols: u64,
    pub kind: ParamKind,
    /// How many of them the model holds (layers, or layers × experts).
    pub copies: u64,
}

impl ParamTensor {
    pub fn elements(&self) -> u64 {
        self.rows * self.cols * self.copies
    }
}

fn matrix(name: &'static str, rows: u64, cols: u64, copies: u64) -> ParamTensor {
    ParamTensor {
        name,
        rows,
        cols,
        kind: ParamKind::Matrix,
        copies,
    }
}

fn vector(name: &'static str, len: u64, copies: u64) -> ParamTensor {
    ParamTensor {
        name,
        rows: len,
        cols: 1,
        kind: ParamKind::Vector,
        copies,
    }
}

/// A linear layer: its weight and, with `bias`, its bias.
fn linear(out: &mut Vec<ParamTensor>, name: &'static str, inputs: u64, outputs: u64, bias: bool, copies: u64) {
    out.push(matrix(name, outputs, inputs, copies));
    if bias {
        out.push(vector(name, outputs, copies));
    }
}

/// LayerNorm (weight and bias) or RMSNorm (weight only).
fn norm(out: &mut Vec<ParamTensor>, name: &'static str, len: u64, with_bias: bool, copies: u64) {
    out.push(vector(name, len, copies));
    if with_bias {
        out.push(vector(name, len, copies));
    }
}

/// Every parameter tensor of the causal-LM model the config builds.
pub fn parameter_tensors(m: &ModelShape) -> Vec<ParamTensor> {
    let (h, l, v, i) = (m.hidden, m.layers, m.vocab, m.intermediate);
    let (q, kv) = (m.q_width(), m.kv_width());
    let mut p = vec![ParamTensor {
        name: "embed_tokens",
        rows: v,
        cols: h,
        kind: ParamKind::Embedding,
        copies: 1,
    }];
    let layer_norm = m.layer_norm();
    norm(&mut p, "layer_norms", h, layer_norm, l * m.norms_per_layer);
    match m.family {
        ModelFamily::Gpt2 => {
            p.push(ParamTensor {
                name: "wpe",
                rows: m.max_positions.unwrap_or(1024),
                cols: h,
                kind: ParamKind::Embedding,
                copies: 1,
            });
            linear(&mut p, "c_attn", h, 3 * h, true, l);
            linear(&mut p, "attn.c_proj", h, h, true, l);
            linear(&mut p, "c_fc", h, i, true, l);
            linear(&mut p, "mlp.c_proj", i, h, true, l);
        }
        ModelFamily::GptNeox => {
            linear(&mut p, "query_key_value", h, q + 2 * kv, m.qkv_bias, l);
            linear(&mut p, "dense", q, h, m.out_bias, l);
            linear(&mut p, "dense_h_to_4h", h, i, true, l);
            linear(&mut p, "dense_4h_to_h", i, h, true, l);
        }
        ModelFamily::Falcon => {
            linear(&mut p, "query_key_value", h, q + 2 * kv, m.qkv_bias, l);
            linear(&mut p, "dense", q, h, m.out_bias, l);
            linear(&mut p, "dense_h_to_4h", h, i, m.mlp_bias, l);
            linear(&mut p, "dense_4h_to_h", i, h, m.mlp_bias, l);
        }
        ModelFamily::Phi => {
            linear(&mut p, "q_proj", h, q, true, l);
            linear(&mut p, "k_proj", h, kv, true, l);
            linear(&mut p, "v_proj", h, kv, true, l);
            linear(&mut p, "dense", q, h, true, l);
            linear(&mut p, "fc1", h, i, true, l);
            linear(&mut p, "fc2", i, h, true, l);
        }
        ModelFamily::Phi3 => {
            linear(&mut p, "qkv_proj", h, q + 2 * kv, false, l);
            linear(&mut p, "o_proj", q, h, false, l);
            linear(&mut p, "gate_up_proj", h, 2 * i, false, l);
            linear(&mut p, "down_proj", i, h, false, l);
        }
        _ => {
            linear(&mut p, "q_proj", h, q, m.qkv_bias, l);
            linear(&mut p, "k_proj", h, kv, m.qkv_bias, l);
            linear(&mut p, "v_proj", h, kv, m.qkv_bias, l);
            linear(&mut p, "o_proj", q, h, m.out_bias, l);
            if m.family == ModelFamily::Qwen3 {
                norm(&mut p, "q_norm", m.head_dim, false, l);
                norm(&mut p, "k_norm", m.head_dim, false, l);
            }
            if m.experts > 0 {
                linear(&mut p, "router", h, m.experts, false, l);
                linear(&mut p, "experts.gate_proj", h, i, false, l * m.experts);
                linear(&mut p, "experts.up_proj", h, i, false, l * m.experts);
                linear(&mut p, "experts.down_proj", i, h, false, l * m.experts);
            } else {
                linear(&mut p, "gate_proj", h, i, m.mlp_bias, l);
                linear(&mut p, "up_proj", h, i, m.mlp_bias, l);
                linear(&mut p, "down_proj", i, h, m.mlp_bias, l);
            }
        }
    }
    norm(&mut p, "final_norm", h, layer_norm, 1);
    if !m.tied {
        p.push(matrix("lm_head", v, h, 1));
        if m.family == ModelFamily::Phi {
            p.push(vector("lm_head", v, 1));
        }
    }
    p
}

/// All parameters of the model.
pub fn parameter_count(m: &ModelShape) -> u64 {
    parameter_tensors(m).iter().map(ParamTensor::elements).sum()
}
