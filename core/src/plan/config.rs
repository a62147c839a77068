//! A Hugging Face `config.json` read into the shape the plan needs: the architecture's family,
//! its widths and the switches that add or remove parameters (biases, tied embeddings, extra
//! norms, experts). A field a family cannot do without and that has no default in
//! `transformers`' own config class is an error naming it.

use memlens_api::ModelFamily;
use serde_json::{Map, Value};

use super::PlanError;

/// How a decoder layer's attention and MLP are laid out, as far as parameters and saved
/// activations differ.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelShape {
    pub family: ModelFamily,
    /// The config's own `model_type`.
    pub model_type: String,
    pub vocab: u64,
    pub hidden: u64,
    pub layers: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    /// MLP width (per expert for MoE).
    pub intermediate: u64,
    /// The context length the config allows.
    pub max_positions: Option<u64>,
    /// `lm_head` shares the input embedding's weight.
    pub tied: bool,
    /// Biases of the query/key/value projections and of the attention's output projection.
    pub qkv_bias: bool,
    pub out_bias: bool,
    /// Biases of the MLP's linear layers.
    pub mlp_bias: bool,
    /// Experts per MoE layer and experts each token is routed to (0 for a dense MLP).
    pub experts: u64,
    pub experts_per_token: u64,
    /// Norms in each decoder layer (2 for pre-norm attention + MLP, 1 where both read one norm).
    pub norms_per_layer: u64,
    /// Attention and MLP read the same input and add to the residual together (GPT-J style).
    pub parallel_attention: bool,
    /// The logits are soft-capped (`final_logit_softcapping`: tanh of logits ÷ cap, × cap).
    pub logit_softcap: bool,
    /// Attention runs SDPA's math kernel whatever the element type, in fp32, over key/value
    /// heads expanded to every query head: what the snapshot of old-architecture Falcon's
    /// multi-query attention shows (traces/plan/runs/falcon_mq_b4_s512: per layer the fp32
    /// softmax of every query against every key, and fp32 copies of q and the expanded k and v).
    pub fp32_math_attention: bool,
}

fn get_u64(c: &Map<String, Value>, keys: &[&str]) -> Option<u64> {
    keys.iter().find_map(|k| c.get(*k).and_then(Value::as_u64))
}

fn get_bool(c: &Map<String, Value>, key: &str, default: bool) -> bool {
    c.get(key).and_then(Value::as_bool).unwrap_or(default)
}

fn need(c: &Map<String, Value>, model_type: &str, keys: &[&str]) -> Result<u64, PlanError> {
    get_u64(c, keys).ok_or_else(|| PlanError::MissingField {
        model_type: model_type.to_string(),
        field: keys[0].to_string(),
    })
}

impl ModelShape {
    /// Reads `config.json` text. Multimodal configs that nest the language model under
    /// `text_config` are read from there.
    pub fn from_config_json(text: &str) -> Result<ModelShape, PlanError> {
        let v: Value = serde_json::from_str(text).map_err(|e| PlanError::Config(e.to_string()))?;
        let Value::Object(mut c) = v else {
            return Err(PlanError::Config("a config.json holds one JSON object".into()));
        };
        if let Some(Value::Object(text)) = c.get("text_config").cloned() {
            c = text;
        }
        let model_type = c
            .get("model_type")
            .and_then(Value::as_str)
            .ok_or_else(|| PlanError::MissingField {
                model_type: "?".into(),
                field: "model_type".into(),
            })?
            .to_string();
        let mt = model_type.as_str();
        let family = match mt {
            "llama" => ModelFamily::Llama,
            "mistral" => ModelFamily::Mistral,
            "qwen2" => ModelFamily::Qwen2,
            "qwen3" => ModelFamily::Qwen3,
            "mixtral" => ModelFamily::Mixtral,
            "gemma" => ModelFamily::Gemma,
            "gemma2" => ModelFamily::Gemma2,
            "phi" => ModelFamily::Phi,
            "phi3" => ModelFamily::Phi3,
            "gpt2" => ModelFamily::Gpt2,
            "gpt_neox" => ModelFamily::GptNeox,
            "falcon" => ModelFamily::Falcon,
            _ => ModelFamily::Other,
        };
        // A mixture of experts memlens has no layout for would be counted as a dense model.
        if family == ModelFamily::Other {
            if let Some(key) = [
                "num_experts",
                "num_local_experts",
                "n_routed_experts",
                "moe_intermediate_size",
            ]
            .into_iter()
            .find(|k| c.contains_key(*k))
            {
                return Err(PlanError::Config(format!(
                    "{mt}: a mixture of experts (`{key}`) whose layout memlens does not count (it counts mixtral's); \
                     pass --params N to plan its model states"
                )));
            }
        }
        let shape = match family {
            ModelFamily::Gpt2 => {
                let hidden = need(&c, mt, &["n_embd", "hidden_size"])?;
                let heads = need(&c, mt, &["n_head", "num_attention_heads"])?;
                ModelShape {
                    family,
                    model_type: model_type.clone(),
                    vocab: need(&c, mt, &["vocab_size"])?,
                    hidden,
                    layers: need(&c, mt, &["n_layer", "num_hidden_layers"])?,
                    heads,
                    kv_heads: heads,
                    head_dim: hidden / heads.max(1),
                    intermediate: get_u64(&c, &["n_inner"]).unwrap_or(4 * hidden),
                    max_positions: Some(need(&c, mt, &["n_positions", "n_ctx", "max_position_embeddings"])?),
                    tied: get_bool(&c, "tie_word_embeddings", true),
                    qkv_bias: true,
                    out_bias: true,
                    mlp_bias: true,
                    experts: 0,
                    experts_per_token: 0,
                    norms_per_layer: 2,
                    parallel_attention: false,
                    logit_softcap: false,
                    fp32_math_attention: false,
                }
            }
            ModelFamily::Falcon => {
                let hidden = need(&c, mt, &["hidden_size", "n_embed"])?;
                let heads = need(&c, mt, &["num_attention_heads", "n_head"])?;
                let new_arch = get_bool(&c, "new_decoder_architecture", false);
                let kv_heads = if new_arch {
                    get_u64(&c, &["num_kv_heads", "n_head_kv"]).unwrap_or(heads)
                } else if get_bool(&c, "multi_query", true) {
                    1
                } else {
                    heads
                };
                let bias = get_bool(&c, "bias", false);
                let parallel = get_bool(&c, "parallel_attn", true);
                let norms = match (new_arch, get_u64(&c, &["num_ln_in_parallel_attn"])) {
                    (true, None) => 2,
                    (true, Some(n)) => n,
                    (false, _) => 1 + u64::from(!parallel),
                };
                ModelShape {
                    family,
                    model_type: model_type.clone(),
                    vocab: need(&c, mt, &["vocab_size"])?,
                    hidden,
                    layers: need(&c, mt, &["num_hidden_layers", "n_layer"])?,
                    heads,
                    kv_heads,
                    head_dim: hidden / heads.max(1),
                    intermediate: get_u64(&c, &["ffn_hidden_size"]).unwrap_or(4 * hidden),
                    max_positions: get_u64(&c, &["max_position_embeddings"]),
                    tied: get_bool(&c, "tie_word_embeddings", true),
                    qkv_bias: bias,
                    out_bias: bias,
                    mlp_bias: bias,
                    experts: 0,
                    experts_per_token: 0,
                    norms_per_layer: norms,
                    parallel_attention: parallel,
                    logit_softcap: false,
                    fp32_math_attention: !new_arch && kv_heads == 1 && heads > 1,
                }
            }
            _ => {
                let hidden = need(&c, mt, &["hidden_size"])?;
                let heads = need(&c, mt, &["num_attention_heads"])?;
                let attention_bias = get_bool(&c, "attention_bias", matches!(family, ModelFamily::GptNeox));
                let (qkv_bias, out_bias, mlp_bias) = match family {
                    ModelFamily::Qwen2 => (true, false, false),
                    ModelFamily::Phi => (true, true, true),
                    ModelFamily::GptNeox => (attention_bias, attention_bias, true),
                    ModelFamily::Phi3 | ModelFamily::Gemma | ModelFamily::Gemma2 | ModelFamily::Mistral => {
                        (false, false, false)
                    }
                    _ => (attention_bias, attention_bias, get_bool(&c, "mlp_bias", false)),
                };
                let experts = match family {
                    ModelFamily::Mixtral => need(&c, mt, &["num_local_experts"])?,
                    _ => 0,
                };
                ModelShape {
                    family,
                    model_type: model_type.clone(),
                    vocab: need(&c, mt, &["vocab_size"])?,
                    hidden,
                    layers: need(&c, mt, &["num_hidden_layers"])?,
                    heads,
                    kv_heads: get_u64(&c, &["num_key_value_heads"]).unwrap_or(heads),
                    head_dim: get_u64(&c, &["head_dim"]).unwrap_or(hidden / heads.max(1)),
                    intermediate: need(&c, mt, &["intermediate_size"])?,
                    max_positions: get_u64(&c, &["max_position_embeddings"]),
                    tied: get_bool(
                        &c,
                        "tie_word_embeddings",
                        matches!(family, ModelFamily::Gemma | ModelFamily::Gemma2),
                    ),
                    qkv_bias,
                    out_bias,
                    mlp_bias,
                    experts,
                    experts_per_token: if experts > 0 {
                        get_u64(&c, &["num_experts_per_tok"]).unwrap_or(2)
                    } else {
                        0
                    },
                    norms_per_layer: match family {
                        ModelFamily::Phi => 1,
                        ModelFamily::Gemma2 => 4,
                        _ => 2,
                    },
                    parallel_attention: match family {
                        ModelFamily::Phi => true,
                        ModelFamily::GptNeox => get_bool(&c, "use_parallel_residual", true),
                        _ => false,
                    },
                    logit_softcap: c.get("final_logit_softcapping").and_then(Value::as_f64).is_some(),
                    fp32_math_attention: false,
                }
            }
        };
        if shape.heads == 0 || shape.hidden == 0 || shape.layers == 0 || shape.vocab == 0 {
            return Err(PlanError::Config(format!(
                "{mt}: hidden size, heads, layers and vocabulary must be positive"
            )));
        }
        Ok(shape)
    }

    /// LayerNorm (weight and bias) rather than RMSNorm (weight only).
    pub fn layer_norm(&self) -> bool {
        matches!(
            self.family,
            ModelFamily::Gpt2 | ModelFamily::GptNeox | ModelFamily::Falcon | ModelFamily::Phi
        )
    }

    /// Width of the query projection's output (heads × head size).
    pub fn q_width(&self) -> u64 {
        self.heads * self.head_dim
    }

    /// Width of the key (and of the value) projection's output.
    pub fn kv_width(&self) -> u64 {
        self.kv_heads * self.head_dim
    }
}
