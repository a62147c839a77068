//! The profile run's activation peak and the CUDA graphs, per GPU.
//!
//! vLLM sizes the KV cache after a profile run: one forward pass over its dummy batch
//! ([`DummyBatch`]: `max_num_batched_tokens` tokens over up to `max_num_seqs` requests), then the
//! sampler over the last token of each request (`gpu_model_runner.profile_run`,
//! `_dummy_sampler_run`). Without autograd a forward pass holds one layer's temporaries at a
//! time: its peak is the MLP's (the gate and up projections' output and the activation's, or
//! each routed expert's share of them for an MoE layer) or the attention's projections,
//! beside the residual stream and the normed input. The sampler holds the logits of every
//! request over the whole vocabulary in several copies ([`Engine::sampler_bytes_per_logit`]).
//! The peak is the larger of the two.

use memlens_api::{ModelFamily, WeightsDtype};

use super::engine::{DummyBatch, Engine};
use crate::plan::config::ModelShape;

/// Bytes a CUDA graph capture takes per decoder layer: 0.52 GiB for Qwen3-8B's 36 layers
/// under vLLM 0.21's estimate (an RTX A5000), 0.93 GiB for QwQ-32B's 64 layers under SGLang
/// (tensor parallel 4 on L4s).
const GRAPH_BYTES_PER_LAYER: f64 = 14.5 * 1_048_576.0;

/// Bytes of an activation: the compute type (fp32 only for fp32 weights).
fn activation_bytes(weights: WeightsDtype) -> f64 {
    if weights == WeightsDtype::Fp32 {
        4.0
    } else {
        2.0
    }
}

/// Elements a token holds in a layer's MLP at its peak, on one of `tp` GPUs.
fn mlp_elements(m: &ModelShape, tp: f64) -> f64 {
    let gated = !matches!(
        m.family,
        ModelFamily::Gpt2 | ModelFamily::GptNeox | ModelFamily::Falcon | ModelFamily::Phi
    );
    let dense = |width: u64| if gated { 3.0 } else { 2.0 } * width as f64 / tp;
    if m.experts == 0 {
        return dense(m.intermediate);
    }
    // Each routed copy of the token: its gate/up and activation outputs, and its output
    // before the weighted sum; the router's fp32 logits; the shared experts' MLP.
    let routed = m.experts_per_token as f64 * (3.0 * m.intermediate as f64 / tp + m.hidden as f64);
    let moe = routed + 2.0 * m.experts as f64 + dense(m.shared_intermediate);
    if m.dense_layers > 0 {
        moe.max(dense(m.dense_intermediate))
    } else {
        moe
    }
}

/// Elements a token holds in a layer's attention at its peak (the projections' outputs).
fn attention_elements(m: &ModelShape, tp: f64) -> f64 {
    let heads = (m.heads as f64 / tp).max(1.0);
    match m.mla {
        // The query, the latent, the keys and values expanded from it, the output.
        Some(a) => {
            heads * (a.qk_head_dim() + a.qk_nope_head_dim + 2 * a.v_head_dim) as f64
                + (a.kv_lora_rank + a.qk_rope_head_dim) as f64
        }
        None => {
            let kv = (m.kv_heads as f64 / tp).floor().max(1.0);
            (2.0 * heads + 2.0 * kv) * m.head_dim as f64
        }
    }
}

/// The forward pass's peak over `tokens` tokens, in bytes.
pub fn forward_peak(m: &ModelShape, weights: WeightsDtype, tp: u64, tokens: u64) -> f64 {
    let tp = tp.max(1) as f64;
    let per_token = mlp_elements(m, tp).max(attention_elements(m, tp)) + 2.0 * m.hidden as f64;
    tokens as f64 * per_token * activation_bytes(weights)
}

/// The sampler's peak over one token of each of `requests` requests, in bytes, with the
/// forward pass's hidden states still held.
pub fn sampler_peak(m: &ModelShape, engine: &Engine, weights: WeightsDtype, tp: u64, batch: DummyBatch) -> f64 {
    let vocab = m.vocab.div_ceil(64) as f64 * 64.0;
    let logits = batch.requests as f64 * vocab;
    // With tensor parallelism each GPU computes its share of the logits and gathers the rest.
    let partial = if tp > 1 { logits / tp as f64 * 2.0 } else { 0.0 };
    logits * engine.sampler_bytes_per_logit()
        + partial
        + batch.tokens as f64 * m.hidden as f64 * activation_bytes(weights)
}

/// The profile run's activation peak (PyTorch's peak above the weights), in bytes.
pub fn activation_peak(m: &ModelShape, engine: &Engine, weights: WeightsDtype, tp: u64, batch: DummyBatch) -> i64 {
    forward_peak(m, weights, tp, batch.tokens)
        .max(sampler_peak(m, engine, weights, tp, batch))
        .round() as i64
}

/// The CUDA graphs' memory, per GPU.
pub fn cuda_graph_bytes(m: &ModelShape) -> i64 {
    (m.layers as f64 * GRAPH_BYTES_PER_LAYER).round() as i64
}
