//! The KV cache's bytes per token from the attention layout, per GPU: keys and values of each
//! layer's key/value heads on this GPU (grouped-query attention's heads split by tensor
//! parallelism, never below one: a GPU holds a copy of a head it cannot split), or multi-head
//! latent attention's one latent of `kv_lora_rank + qk_rope_head_dim` (DeepSeek V2/V3, held
//! whole on every GPU); and the layers that attend over a sliding window, which an engine that
//! keeps only the window's tokens for them holds fewer tokens of.

use memlens_api::{KvCacheDtype, ModelFamily};
use serde::Deserialize;
use serde_json::Value;

use crate::plan::config::ModelShape;
use crate::plan::PlanError;

/// The keys of `config.json` that say which layers slide (and over how many tokens).
#[derive(Debug, Default, Deserialize)]
struct WindowKeys {
    #[serde(default)]
    sliding_window: Option<Value>,
    #[serde(default)]
    layer_types: Option<Vec<String>>,
    #[serde(default)]
    sliding_window_pattern: Option<u64>,
    #[serde(default)]
    use_sliding_window: Option<bool>,
    #[serde(default)]
    max_window_layers: Option<u64>,
    /// A multimodal config's language model.
    #[serde(default)]
    text_config: Option<Box<WindowKeys>>,
}

/// How the KV cache of one GPU grows with a request's tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvLayout {
    /// Bytes one token takes in one layer (this GPU's share of its heads).
    pub bytes_per_token_per_layer: i64,
    pub layers: u64,
    /// The window of each layer that attends over a sliding window (the other layers attend
    /// over every token).
    pub windows: Vec<u64>,
}

impl KvLayout {
    /// Bytes a token takes in every layer: what an engine allocates per token of its pool.
    pub fn bytes_per_token(&self) -> i64 {
        self.bytes_per_token_per_layer * self.layers as i64
    }

    /// Bytes one request of `len` tokens holds, the sliding layers at most their window where
    /// the engine keeps only that (`windows`).
    pub fn bytes_for(&self, len: u64, windows: bool) -> i64 {
        if !windows {
            return self.bytes_per_token() * len as i64;
        }
        let full = self.layers - self.windows.len() as u64;
        let slid: u64 = self.windows.iter().map(|w| len.min(*w)).sum();
        self.bytes_per_token_per_layer * (full * len + slid) as i64
    }

    /// The longest request `bytes` holds (`cap` where it holds that many).
    pub fn longest_in(&self, bytes: i64, windows: bool, cap: u64) -> u64 {
        if bytes <= 0 || self.bytes_per_token_per_layer <= 0 {
            return 0;
        }
        if self.bytes_for(cap, windows) <= bytes {
            return cap;
        }
        let (mut lo, mut hi) = (0u64, cap);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if self.bytes_for(mid, windows) <= bytes {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo
    }
}

/// The windows of the sliding layers, as `transformers` and the engines read the config.
fn windows(m: &ModelShape, keys: &WindowKeys) -> Vec<u64> {
    let Some(window) = keys.sliding_window.as_ref().and_then(Value::as_u64) else {
        return Vec::new();
    };
    let layers = m.layers;
    let sliding: Vec<bool> = if let Some(types) = &keys.layer_types {
        types.iter().map(|t| t == "sliding_attention").collect()
    } else {
        match m.family {
            // Gemma 2: every other layer, the first sliding.
            ModelFamily::Gemma2 => (0..layers).map(|i| i % 2 == 0).collect(),
            // Gemma 3: five local layers to each global one.
            ModelFamily::Gemma3 => {
                let p = keys.sliding_window_pattern.unwrap_or(6).max(1);
                (0..layers).map(|i| (i + 1) % p != 0).collect()
            }
            // Qwen: only with use_sliding_window, from max_window_layers on.
            ModelFamily::Qwen2 | ModelFamily::Qwen3 | ModelFamily::Qwen3Moe => {
                let from = keys.max_window_layers.unwrap_or(layers);
                (0..layers)
                    .map(|i| keys.use_sliding_window.unwrap_or(false) && i >= from)
                    .collect()
            }
            ModelFamily::Gpt2 | ModelFamily::GptNeox | ModelFamily::Falcon | ModelFamily::Phi => Vec::new(),
            _ => vec![true; layers as usize],
        }
    };
    sliding
        .iter()
        .take(layers as usize)
        .filter(|s| **s)
        .map(|_| window)
        .collect()
}

/// The KV layout of `m` on each of `tp` GPUs, its elements `kv_bytes` each (2 for a 16-bit
/// cache, 1 for fp8, 4 for fp32), its sliding windows read from `config_json`.
pub fn kv_layout(m: &ModelShape, config_json: &str, tp: u64, kv_bytes: i64) -> Result<KvLayout, PlanError> {
    let mut keys: WindowKeys = serde_json::from_str(config_json).map_err(|e| PlanError::Config(e.to_string()))?;
    if let Some(text) = keys.text_config.take() {
        keys = WindowKeys {
            sliding_window: text.sliding_window.or(keys.sliding_window),
            layer_types: text.layer_types.or(keys.layer_types),
            sliding_window_pattern: text.sliding_window_pattern.or(keys.sliding_window_pattern),
            use_sliding_window: text.use_sliding_window.or(keys.use_sliding_window),
            max_window_layers: text.max_window_layers.or(keys.max_window_layers),
            text_config: None,
        };
    }
    let per_layer = match m.mla {
        Some(a) => (a.kv_lora_rank + a.qk_rope_head_dim) as i64,
        None => 2 * (m.kv_heads / tp.max(1)).max(1) as i64 * m.head_dim as i64,
    };
    Ok(KvLayout {
        bytes_per_token_per_layer: per_layer * kv_bytes,
        layers: m.layers,
        windows: windows(m, &keys),
    })
}

/// Bytes of one KV element: `auto` is the weights' compute type (fp32 weights keep an fp32
/// cache), `fp8` one byte.
pub fn kv_element_bytes(kv: KvCacheDtype, weights: memlens_api::WeightsDtype) -> i64 {
    match (kv, weights) {
        (KvCacheDtype::Fp8, _) => 1,
        (KvCacheDtype::Auto, memlens_api::WeightsDtype::Fp32) => 4,
        (KvCacheDtype::Auto, _) => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(config: &str, tp: u64) -> KvLayout {
        let m = ModelShape::from_config_json(config).expect("shape");
        kv_layout(&m, config, tp, 2).expect("layout")
    }

    /// A Llama-shaped config's fields but its `model_type`, open for more.
    const LLAMA: &str = r#"{"vocab_size": 32000, "hidden_size": 4096,
        "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8"#;

    #[test]
    fn gqa_heads_split_over_the_gpus_never_below_one() {
        let at = |tp| layout(&format!(r#"{LLAMA}, "model_type": "llama"}}"#), tp).bytes_per_token();
        assert_eq!(at(1), 2 * 32 * 8 * 128 * 2);
        assert_eq!(at(8), 2 * 32 * 128 * 2);
        assert_eq!(at(16), at(8), "a GPU holds a copy of a head it cannot split");
    }

    #[test]
    fn which_layers_slide_follows_each_family() {
        let gemma2 = layout(
            r#"{"model_type": "gemma2", "vocab_size": 256000, "hidden_size": 2304, "intermediate_size": 9216,
                "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                "sliding_window": 4096}"#,
            1,
        );
        assert_eq!(gemma2.windows, vec![4096; 13], "every other layer");
        let gemma3 = layout(
            r#"{"model_type": "gemma3_text", "vocab_size": 262144, "hidden_size": 1152, "intermediate_size": 6912,
                "num_hidden_layers": 26, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
                "sliding_window": 512}"#,
            1,
        );
        assert_eq!(gemma3.windows.len(), 26 - 4, "five local layers to each global one");
        let mistral = layout(
            &format!(r#"{LLAMA}, "model_type": "mistral", "sliding_window": 4096}}"#),
            1,
        );
        assert_eq!(mistral.windows.len(), 32);
        let qwen = layout(
            &format!(r#"{LLAMA}, "model_type": "qwen2", "sliding_window": 32768, "use_sliding_window": false}}"#),
            1,
        );
        assert!(qwen.windows.is_empty(), "Qwen slides only with use_sliding_window");
        let typed = layout(
            &format!(
                r#"{LLAMA}, "model_type": "llama", "sliding_window": 128, "layer_types": [{}]}}"#,
                (0..32)
                    .map(|i| if i % 4 == 3 {
                        "\"full_attention\""
                    } else {
                        "\"sliding_attention\""
                    })
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            1,
        );
        assert_eq!(typed.windows, vec![128; 24], "layer_types when given");
    }

    #[test]
    fn a_long_request_costs_only_the_window_in_sliding_layers() {
        let l = KvLayout {
            bytes_per_token_per_layer: 10,
            layers: 4,
            windows: vec![100, 100, 100],
        };
        assert_eq!(l.bytes_for(1000, false), 10 * 4 * 1000);
        assert_eq!(l.bytes_for(1000, true), 10 * (1000 + 300));
        assert_eq!(l.bytes_for(50, true), 10 * 4 * 50);
        // The longest request 13,000 bytes hold: 1,000 tokens, at most the context.
        assert_eq!(l.longest_in(13_000, true, 1 << 20), 1000);
        assert_eq!(l.longest_in(13_000, true, 600), 600);
        assert_eq!(l.longest_in(0, true, 600), 0);
    }
}
