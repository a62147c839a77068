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
            attention(&mut p, m);
            mlp(&mut p, m);
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

/// A Llama-style layer's attention: q/k/v/o projections (with the q/k norms of the families that
/// have them), or DeepSeek's multi-head latent attention.
fn attention(p: &mut Vec<ParamTensor>, m: &ModelShape) {
    let (h, l) = (m.hidden, m.layers);
    if let Some(a) = m.mla {
        let q_out = m.heads * a.qk_head_dim();
        match a.q_lora_rank {
            Some(r) => {
                linear(p, "q_a_proj", h, r, m.qkv_bias, l);
                norm(p, "q_a_layernorm", r, false, l);
                linear(p, "q_b_proj", r, q_out, false, l);
            }
            None => linear(p, "q_proj", h, q_out, false, l),
        }
        linear(
            p,
            "kv_a_proj_with_mqa",
            h,
            a.kv_lora_rank + a.qk_rope_head_dim,
            m.qkv_bias,
            l,
        );
        norm(p, "kv_a_layernorm", a.kv_lora_rank, false, l);
        linear(
            p,
            "kv_b_proj",
            a.kv_lora_rank,
            m.heads * (a.qk_nope_head_dim + a.v_head_dim),
            false,
            l,
        );
        linear(p, "o_proj", m.heads * a.v_head_dim, h, m.out_bias, l);
        return;
    }
    let (q, kv) = (m.q_width(), m.kv_width());
    linear(p, "q_proj", h, q, m.qkv_bias, l);
    linear(p, "k_proj", h, kv, m.qkv_bias, l);
    linear(p, "v_proj", h, kv, m.qkv_bias, l);
    linear(p, "o_proj", q, h, m.out_bias, l);
    match m.family {
        ModelFamily::Qwen3 | ModelFamily::Qwen3Moe | ModelFamily::Gemma3 => {
            norm(p, "q_norm", m.head_dim, false, l);
            norm(p, "k_norm", m.head_dim, false, l);
        }
        ModelFamily::Olmo2 => {
            norm(p, "q_norm", q, false, l);
            norm(p, "k_norm", kv, false, l);
        }
        _ => {}
    }
}

/// A Llama-style layer's MLP: gated and dense, or a router over experts (beside shared experts,
/// after dense first layers, where the family has them).
fn mlp(p: &mut Vec<ParamTensor>, m: &ModelShape) {
    let h = m.hidden;
    let dense = if m.experts > 0 { m.dense_layers } else { m.layers };
    if dense > 0 {
        let i = if m.experts > 0 {
            m.dense_intermediate
        } else {
            m.intermediate
        };
        linear(p, "gate_proj", h, i, m.mlp_bias, dense);
        linear(p, "up_proj", h, i, m.mlp_bias, dense);
        linear(p, "down_proj", i, h, m.mlp_bias, dense);
    }
    let sparse = m.layers - dense;
    if m.experts == 0 || sparse == 0 {
        return;
    }
    let i = m.intermediate;
    linear(p, "router", h, m.experts, false, sparse);
    linear(p, "experts.gate_proj", h, i, false, sparse * m.experts);
    linear(p, "experts.up_proj", h, i, false, sparse * m.experts);
    linear(p, "experts.down_proj", i, h, false, sparse * m.experts);
    if m.shared_intermediate > 0 {
        let s = m.shared_intermediate;
        linear(p, "shared_experts.gate_proj", h, s, false, sparse);
        linear(p, "shared_experts.up_proj", h, s, false, sparse);
        linear(p, "shared_experts.down_proj", s, h, false, sparse);
    }
}

/// All parameters of the model.
pub fn parameter_count(m: &ModelShape) -> u64 {
    parameter_tensors(m).iter().map(ParamTensor::elements).sum()
}
