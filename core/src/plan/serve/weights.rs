//! The weights one GPU holds when a serving engine loads the model, tensor by tensor
//! ([`parameter_tensors`]): the linear layers split over the tensor-parallel GPUs (the key and
//! value projections never below one head a GPU), the embeddings and `lm_head` split by
//! vocabulary (padded to 64 rows a GPU, as vLLM pads it), the norms, the MoE router and the
//! low-rank MLA projections copied on every GPU. Quantised weights (fp8, int4) quantise the
//! linear layers only; embeddings, norms and the router stay 16-bit. Beside them, the rotary
//! embedding's cos/sin table the engine keeps in the model's type.

use memlens_api::{ModelFamily, WeightsDtype};

use crate::plan::config::ModelShape;
use crate::plan::params::{parameter_tensors, ParamKind, ParamTensor};

/// Bytes of one weight of a linear layer in `dtype`: int4 with a 16-bit scale and a 4-bit zero
/// point per group of 128 (GPTQ and AWQ's layout).
fn matrix_bytes(dtype: WeightsDtype) -> f64 {
    match dtype {
        WeightsDtype::Fp32 => 4.0,
        WeightsDtype::Bf16 | WeightsDtype::Fp16 => 2.0,
        WeightsDtype::Fp8 => 1.0,
        WeightsDtype::Int4 => 0.5 + (2.0 + 0.5) / 128.0,
        // bitsandbytes' NormalFloat: an fp32 absmax a block of 64, itself quantised to 8 bits
        // (double quantisation).
        WeightsDtype::Nf4 => 0.5 + 1.0 / 64.0,
    }
}

/// Bytes of a weight kept unquantised (embeddings, norms, biases, the router).
fn plain_bytes(dtype: WeightsDtype) -> f64 {
    match dtype {
        WeightsDtype::Fp32 => 4.0,
        _ => 2.0,
    }
}

/// How a tensor is laid over the tensor-parallel GPUs.
enum Split {
    /// The same on every GPU.
    Copied,
    /// Its rows split evenly.
    Rows,
    /// The vocabulary's rows, padded to 64 a GPU.
    Vocabulary,
    /// A fused query/key/value projection: the query's rows split, the key's and value's never
    /// below one head.
    Qkv,
    /// A key or value projection alone.
    KeyValue,
}

fn split_of(t: &ParamTensor) -> Split {
    match t.name {
        "embed_tokens" | "lm_head" => Split::Vocabulary,
        "layer_norms" | "final_norm" | "q_norm" | "k_norm" | "q_a_layernorm" | "kv_a_layernorm" | "wpe" | "router"
        | "q_a_proj" | "kv_a_proj_with_mqa" => Split::Copied,
        "query_key_value" | "qkv_proj" => Split::Qkv,
        "k_proj" | "v_proj" => Split::KeyValue,
        _ => Split::Rows,
    }
}

/// The rows of `t` one of `tp` GPUs holds.
fn rows_per_gpu(t: &ParamTensor, m: &ModelShape, tp: u64) -> f64 {
    let heads_here = |heads: u64| (heads / tp).max(1) as f64 * m.head_dim as f64;
    match split_of(t) {
        Split::Copied => t.rows as f64,
        Split::Rows => t.rows as f64 / tp as f64,
        Split::Vocabulary => (t.rows.div_ceil(64 * tp) * 64) as f64,
        Split::KeyValue => heads_here(m.kv_heads),
        Split::Qkv => (m.q_width() / tp) as f64 + 2.0 * heads_here(m.kv_heads),
    }
}

/// Whether the tensor is a linear layer's weight that quantisation stores in fewer bits.
fn quantised(t: &ParamTensor) -> bool {
    t.kind == ParamKind::Matrix && t.name != "router" && t.name != "lm_head"
}

/// The bytes of the rotary embedding's cos/sin table (`max_position × rotary_dim`, in the
/// model's type): none for GPT-2's learned positions.
fn rotary_bytes(m: &ModelShape, dtype: WeightsDtype) -> f64 {
    if m.family == ModelFamily::Gpt2 {
        return 0.0;
    }
    let rotary_dim = m.mla.map_or(m.head_dim, |a| a.qk_rope_head_dim);
    m.max_positions.unwrap_or(2048) as f64 * rotary_dim as f64 * plain_bytes(dtype)
}

/// The weights one of `tp` GPUs holds, in bytes.
pub fn weights_per_gpu(m: &ModelShape, dtype: WeightsDtype, tp: u64) -> i64 {
    let tp = tp.max(1);
    let tensors: f64 = parameter_tensors(m)
        .iter()
        .map(|t| {
            let bytes = if quantised(t) {
                matrix_bytes(dtype)
            } else {
                plain_bytes(dtype)
            };
            rows_per_gpu(t, m, tp) * t.cols as f64 * t.copies as f64 * bytes
        })
        .sum();
    (tensors + rotary_bytes(m, dtype)).round() as i64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::presets;

    fn shape(name: &str) -> ModelShape {
        ModelShape::from_config_json(&presets::resolve(name).expect("preset").config_json()).expect("shape")
    }

    #[test]
    fn one_gpu_holds_every_parameter_in_its_type() {
        let m = shape("meta-llama/Llama-3.1-8B");
        let params = crate::plan::params::parameter_count(&m) as f64;
        let rotary = 131_072.0 * 128.0 * 2.0;
        assert_eq!(
            weights_per_gpu(&m, WeightsDtype::Bf16, 1),
            (params * 2.0 + rotary) as i64
        );
    }

    #[test]
    fn tensor_parallelism_splits_all_but_the_copied_tensors() {
        let m = shape("meta-llama/Llama-3.1-8B");
        let one = weights_per_gpu(&m, WeightsDtype::Bf16, 1) as f64;
        let four = weights_per_gpu(&m, WeightsDtype::Bf16, 4) as f64;
        // Norms and the rotary table stay whole: a quarter and a little more.
        assert!(four > one / 4.0 && four < one / 4.0 * 1.01, "{four} vs {one}");
    }

    #[test]
    fn fp8_halves_the_linear_layers_only() {
        let m = shape("meta-llama/Llama-3.1-8B");
        let bf16 = weights_per_gpu(&m, WeightsDtype::Bf16, 1) as f64;
        let fp8 = weights_per_gpu(&m, WeightsDtype::Fp8, 1) as f64;
        // Embeddings and lm_head (1.05 B parameters) stay 16-bit.
        let embeddings = 2.0 * 128_256.0 * 4096.0 * 2.0;
        assert!(((bf16 - embeddings) / 2.0 + embeddings - fp8).abs() < 50e6, "{fp8}");
    }
}
