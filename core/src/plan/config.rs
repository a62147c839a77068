//! A Hugging Face `config.json` read into the shape the plan needs: the architecture's family,
//! its widths and the switches that add or remove parameters (biases, tied embeddings, extra
//! norms, experts). A field a family cannot do without and that has no default in
//! `transformers`' own config class is an error naming it.

use memlens_api::ModelFamily;
use serde::Deserialize;
use serde_json::Value;

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
    /// The width of the MLP every token of an MoE layer also goes through (DeepSeek's shared
    /// experts, as transformers builds them: one MLP), 0 for none.
    pub shared_intermediate: u64,
    /// The first layers of an MoE model whose MLP is dense (DeepSeek's `first_k_dense_replace`),
    /// and that MLP's width.
    pub dense_layers: u64,
    pub dense_intermediate: u64,
    /// Multi-head latent attention (DeepSeek V2 and V3) instead of q/k/v projections.
    pub mla: Option<Mla>,
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

/// DeepSeek's multi-head latent attention: queries (through a low-rank `q_lora_rank` where
/// given) and keys/values through a compressed latent of `kv_lora_rank`, with a shared rotary
/// key of `qk_rope_head_dim`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mla {
    pub q_lora_rank: Option<u64>,
    pub kv_lora_rank: u64,
    pub qk_nope_head_dim: u64,
    pub qk_rope_head_dim: u64,
    pub v_head_dim: u64,
}

impl Mla {
    /// Width of one head's query and key (the part without and the part with rotary embedding).
    pub fn qk_head_dim(&self) -> u64 {
        self.qk_nope_head_dim + self.qk_rope_head_dim
    }
}

/// A number where `config.json` holds one (anything else, `null` included, reads as absent, as
/// `transformers` falls back to its default).
fn number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(Value::deserialize(d)?.as_u64())
}

/// A string where `config.json` holds one.
fn text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Value::deserialize(d)?.as_str().map(str::to_owned))
}

/// A nested config where `config.json` holds an object.
fn nested<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Box<RawConfig>>, D::Error> {
    match Value::deserialize(d)? {
        v @ Value::Object(_) => RawConfig::deserialize(v)
            .map(|c| Some(Box::new(c)))
            .map_err(serde::de::Error::custom),
        _ => Ok(None),
    }
}

/// A decimal number where `config.json` holds one.
fn decimal<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    Ok(Value::deserialize(d)?.as_f64())
}

/// A value as given (`null` included), for a key read both as a number and for its presence.
fn given<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// A boolean where `config.json` holds one.
fn flag<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    Ok(Value::deserialize(d)?.as_bool())
}

/// The fields of a `config.json` the plan reads, under each name the families use (GPT-2's
/// `n_embd`, Falcon's `n_embed` and `n_head_kv`, …): which name wins where several are given is
/// decided per family below.
#[derive(Debug, Default, Deserialize)]
struct RawConfig {
    /// The family's name (anything but a string reads as absent).
    #[serde(default, deserialize_with = "text")]
    model_type: Option<String>,
    /// A multimodal config's language model (read where it is an object).
    #[serde(default, deserialize_with = "nested")]
    text_config: Option<Box<RawConfig>>,
    #[serde(default, deserialize_with = "number")]
    vocab_size: Option<u64>,
    #[serde(default, deserialize_with = "number")]
    hidden_size: Option<u64>,
    #[serde(default, deserialize_with = "number")]
    n_embd: Option<u64>,
    #[serde(default, deserialize_with = "number")]
    n_embed: Option<u64>,
    #[serde(default, deserialize_with = "number")]
    num_attention_heads: Option<u64>,
    #[serde(default, deserialize_with = "number")]
    n_head: Option<u64>,
    #[serde(default, deserialize_with = "number")]
    num_hidden_layers: Option<u64>,
    #[serde(default, deserialize_with = "number")]
    n_layer: Option<u64>,
    #[serde(default, deserialize_with = "number")]
    num_key_value_heads: Option<u64>,
    #[serde(default, deserialize_with = "number")]
    num_kv_heads: Option<u64>,
    #[serde(default, deserialize_with = "number")]
    n_head_kv: Option<u64>,
    #[serde(default, deserialize_with = "number")]
    head_dim: Option<u64>,
    #[serde(default, deserialize_with = "number")]
    intermediate_size: Option<u64>,
    #[serde(default, deserialize_with = "number")]
    n_inner: Option<u64>,
    #[serde(default, deserialize_with = "number")]
    ffn_hidden_size: Option<u64>,
    #[serde(default, deserialize_with = "number")]
    max_position_embeddings: Option<u64>,
    #[serde(default, deserialize_with = "number")]
    n_positions: Option<u64>,
    #[serde(default, deserialize_with = "number")]
    n_ctx: Option<u64>,
    #[serde(default, deserialize_with = "given")]
    num_local_experts: Option<Value>,
    #[serde(default, deserialize_with = "number")]
    num_experts_per_tok: Option<u64>,
    #[serde(default, deserialize_with = "number")]
    num_ln_in_parallel_attn: Option<u64>,
    #[serde(default, deserialize_with = "flag")]
    tie_word_embeddings: Option<bool>,
    #[serde(default, deserialize_with = "flag")]
    attention_bias: Option<bool>,
    #[serde(default, deserialize_with = "flag")]
    mlp_bias: Option<bool>,
    #[serde(default, deserialize_with = "flag")]
    bias: Option<bool>,
    #[serde(default, deserialize_with = "flag")]
    new_decoder_architecture: Option<bool>,
    #[serde(default, deserialize_with = "flag")]
    multi_query: Option<bool>,
    #[serde(default, deserialize_with = "flag")]
    parallel_attn: Option<bool>,
    #[serde(default, deserialize_with = "flag")]
    use_parallel_residual: Option<bool>,
    #[serde(default, deserialize_with = "decimal")]
    final_logit_softcapping: Option<f64>,
    /// Mixture-of-experts keys (each read for its presence too, where memlens has no layout).
    #[serde(default, deserialize_with = "given")]
    num_experts: Option<Value>,
    #[serde(default, deserialize_with = "given")]
    n_routed_experts: Option<Value>,
    #[serde(default, deserialize_with = "given")]
    moe_intermediate_size: Option<Value>,
    #[serde(default, deserialize_with = "number")]
    n_shared_experts: Option<u64>,
    #[serde(default, deserialize_with = "number")]
    first_k_dense_replace: Option<u64>,
    #[serde(default, deserialize_with = "number")]
    decoder_sparse_step: Option<u64>,
    #[serde(default, deserialize_with = "number")]
    moe_layer_freq: Option<u64>,
    #[serde(default, deserialize_with = "given")]
    mlp_only_layers: Option<Value>,
    /// Multi-head latent attention (DeepSeek).
    /// Absent and `null` differ: see [`mla`].
    #[serde(default, deserialize_with = "given")]
    q_lora_rank: Option<Value>,
    #[serde(default, deserialize_with = "number")]
    kv_lora_rank: Option<u64>,
    #[serde(default, deserialize_with = "number")]
    qk_nope_head_dim: Option<u64>,
    #[serde(default, deserialize_with = "number")]
    qk_rope_head_dim: Option<u64>,
    #[serde(default, deserialize_with = "number")]
    v_head_dim: Option<u64>,
}

/// The first of `values` given, or an error naming the field by its first name.
fn need(model_type: &str, field: &str, values: &[Option<u64>]) -> Result<u64, PlanError> {
    values.iter().find_map(|v| *v).ok_or_else(|| PlanError::MissingField {
        model_type: model_type.to_string(),
        field: field.to_string(),
    })
}

impl ModelShape {
    /// Reads `config.json` text. Multimodal configs that nest the language model under
    /// `text_config` are read from there.
    pub fn from_config_json(text: &str) -> Result<ModelShape, PlanError> {
        let v: Value = serde_json::from_str(text).map_err(|e| PlanError::Config(e.to_string()))?;
        if !v.is_object() {
            return Err(PlanError::Config("a config.json holds one JSON object".into()));
        }
        let mut c = RawConfig::deserialize(v).map_err(|e| PlanError::Config(e.to_string()))?;
        if let Some(text) = c.text_config.take() {
            c = *text;
        }
        let model_type = c.model_type.clone().ok_or_else(|| PlanError::MissingField {
            model_type: "?".into(),
            field: "model_type".into(),
        })?;
        let mt = model_type.as_str();
        let family = match mt {
            "llama" => ModelFamily::Llama,
            "mistral" => ModelFamily::Mistral,
            "qwen2" => ModelFamily::Qwen2,
            "qwen3" => ModelFamily::Qwen3,
            "qwen3_moe" => ModelFamily::Qwen3Moe,
            "mixtral" => ModelFamily::Mixtral,
            "gemma" => ModelFamily::Gemma,
            "gemma2" => ModelFamily::Gemma2,
            "gemma3_text" | "gemma3" => ModelFamily::Gemma3,
            "olmo2" => ModelFamily::Olmo2,
            "deepseek_v2" => ModelFamily::DeepseekV2,
            "deepseek_v3" => ModelFamily::DeepseekV3,
            "phi" => ModelFamily::Phi,
            "phi3" => ModelFamily::Phi3,
            "gpt2" => ModelFamily::Gpt2,
            "gpt_neox" => ModelFamily::GptNeox,
            "falcon" => ModelFamily::Falcon,
            _ => ModelFamily::Other,
        };
        // A mixture of experts memlens has no layout for would be counted as a dense model.
        if family == ModelFamily::Other {
            let moe = [
                ("num_experts", c.num_experts.is_some()),
                ("num_local_experts", c.num_local_experts.is_some()),
                ("n_routed_experts", c.n_routed_experts.is_some()),
                ("moe_intermediate_size", c.moe_intermediate_size.is_some()),
            ];
            if let Some((key, _)) = moe.into_iter().find(|m| m.1) {
                return Err(PlanError::Config(format!(
                    "{mt}: a mixture of experts (`{key}`) whose layout memlens does not count (it counts mixtral's, \
                     qwen3_moe's and deepseek's); \
                     pass --params N to plan its model states"
                )));
            }
        }
        let shape = match family {
            ModelFamily::Gpt2 => gpt2(&c, family, &model_type)?,
            ModelFamily::Falcon => falcon(&c, family, &model_type)?,
            ModelFamily::Gemma3 => decoder(&gemma3_defaults(c), family, &model_type)?,
            _ => decoder(&c, family, &model_type)?,
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

/// GPT-2: its own field names, biases everywhere, tied embeddings by default.
fn gpt2(c: &RawConfig, family: ModelFamily, mt: &str) -> Result<ModelShape, PlanError> {
    let hidden = need(mt, "n_embd", &[c.n_embd, c.hidden_size])?;
    let heads = need(mt, "n_head", &[c.n_head, c.num_attention_heads])?;
    Ok(ModelShape {
        family,
        model_type: mt.to_owned(),
        vocab: need(mt, "vocab_size", &[c.vocab_size])?,
        hidden,
        layers: need(mt, "n_layer", &[c.n_layer, c.num_hidden_layers])?,
        heads,
        kv_heads: heads,
        head_dim: hidden / heads.max(1),
        intermediate: c.n_inner.unwrap_or(4 * hidden),
        max_positions: Some(need(
            mt,
            "n_positions",
            &[c.n_positions, c.n_ctx, c.max_position_embeddings],
        )?),
        tied: c.tie_word_embeddings.unwrap_or(true),
        qkv_bias: true,
        out_bias: true,
        mlp_bias: true,
        experts: 0,
        experts_per_token: 0,
        shared_intermediate: 0,
        dense_layers: 0,
        dense_intermediate: 0,
        mla: None,
        norms_per_layer: 2,
        parallel_attention: false,
        logit_softcap: false,
        fp32_math_attention: false,
    })
}

/// Falcon, old (multi-query, parallel attention) and new decoder architecture.
fn falcon(c: &RawConfig, family: ModelFamily, mt: &str) -> Result<ModelShape, PlanError> {
    let hidden = need(mt, "hidden_size", &[c.hidden_size, c.n_embed])?;
    let heads = need(mt, "num_attention_heads", &[c.num_attention_heads, c.n_head])?;
    let new_arch = c.new_decoder_architecture.unwrap_or(false);
    let kv_heads = if new_arch {
        c.num_kv_heads.or(c.n_head_kv).unwrap_or(heads)
    } else if c.multi_query.unwrap_or(true) {
        1
    } else {
        heads
    };
    let bias = c.bias.unwrap_or(false);
    let parallel = c.parallel_attn.unwrap_or(true);
    let norms = match (new_arch, c.num_ln_in_parallel_attn) {
        (true, None) => 2,
        (true, Some(n)) => n,
        (false, _) => 1 + u64::from(!parallel),
    };
    Ok(ModelShape {
        family,
        model_type: mt.to_owned(),
        vocab: need(mt, "vocab_size", &[c.vocab_size])?,
        hidden,
        layers: need(mt, "num_hidden_layers", &[c.num_hidden_layers, c.n_layer])?,
        heads,
        kv_heads,
        head_dim: hidden / heads.max(1),
        intermediate: c.ffn_hidden_size.unwrap_or(4 * hidden),
        max_positions: c.max_position_embeddings,
        tied: c.tie_word_embeddings.unwrap_or(true),
        qkv_bias: bias,
        out_bias: bias,
        mlp_bias: bias,
        experts: 0,
        experts_per_token: 0,
        shared_intermediate: 0,
        dense_layers: 0,
        dense_intermediate: 0,
        mla: None,
        norms_per_layer: norms,
        parallel_attention: parallel,
        logit_softcap: false,
        fp32_math_attention: !new_arch && kv_heads == 1 && heads > 1,
    })
}

/// How a decoder's MLPs are laid out: dense, or experts (with shared experts and dense first
/// layers where the family has them).
struct Mlps {
    experts: u64,
    experts_per_token: u64,
    /// Width of each expert's MLP (or of the dense MLP).
    intermediate: u64,
    shared_intermediate: u64,
    dense_layers: u64,
    dense_intermediate: u64,
}

/// A number-valued key read for its value (`given` keeps `null` apart from absent).
fn count(v: &Option<Value>) -> Option<u64> {
    v.as_ref().and_then(Value::as_u64)
}

/// The MLP layout of the Llama-style decoders: Mixtral's experts in every layer; Qwen3-MoE's
/// where `decoder_sparse_step` and `mlp_only_layers` put them; DeepSeek's after
/// `first_k_dense_replace` dense layers, beside its shared experts.
fn mlps(c: &RawConfig, family: ModelFamily, mt: &str, layers: u64) -> Result<Mlps, PlanError> {
    let dense = || need(mt, "intermediate_size", &[c.intermediate_size]);
    let (experts, per_token) = match family {
        ModelFamily::Mixtral => (need(mt, "num_local_experts", &[count(&c.num_local_experts)])?, 2),
        ModelFamily::Qwen3Moe => (need(mt, "num_experts", &[count(&c.num_experts)])?, 8),
        ModelFamily::DeepseekV2 | ModelFamily::DeepseekV3 => {
            (need(mt, "n_routed_experts", &[count(&c.n_routed_experts)])?, 8)
        }
        _ => {
            let i = dense()?;
            return Ok(Mlps {
                experts: 0,
                experts_per_token: 0,
                intermediate: i,
                shared_intermediate: 0,
                dense_layers: 0,
                dense_intermediate: i,
            });
        }
    };
    let expert_width = match family {
        ModelFamily::Mixtral => dense()?,
        _ => need(mt, "moe_intermediate_size", &[count(&c.moe_intermediate_size)])?,
    };
    // Layers whose MLP stays dense, as transformers decides per layer index.
    let sparse = |i: u64| match family {
        ModelFamily::Qwen3Moe => {
            let only: Vec<u64> = c
                .mlp_only_layers
                .as_ref()
                .and_then(Value::as_array)
                .map_or(Vec::new(), |a| a.iter().filter_map(Value::as_u64).collect());
            !only.contains(&i) && (i + 1).is_multiple_of(c.decoder_sparse_step.unwrap_or(1).max(1))
        }
        ModelFamily::DeepseekV2 | ModelFamily::DeepseekV3 => {
            i >= c.first_k_dense_replace.unwrap_or(0) && i.is_multiple_of(c.moe_layer_freq.unwrap_or(1).max(1))
        }
        _ => true,
    };
    let dense_layers = (0..layers).filter(|&i| !sparse(i)).count() as u64;
    Ok(Mlps {
        experts,
        experts_per_token: c.num_experts_per_tok.unwrap_or(per_token),
        intermediate: expert_width,
        shared_intermediate: c.n_shared_experts.unwrap_or(0) * expert_width,
        dense_layers,
        dense_intermediate: if dense_layers > 0 { dense()? } else { expert_width },
    })
}

/// DeepSeek's multi-head latent attention; an absent `q_lora_rank` is transformers' default
/// (1536), a `null` one projects queries directly (DeepSeek-V2-Lite).
fn mla(c: &RawConfig, family: ModelFamily, mt: &str) -> Result<Option<Mla>, PlanError> {
    if !matches!(family, ModelFamily::DeepseekV2 | ModelFamily::DeepseekV3) {
        return Ok(None);
    }
    Ok(Some(Mla {
        q_lora_rank: match &c.q_lora_rank {
            None => Some(1536),
            Some(v) => v.as_u64(),
        },
        kv_lora_rank: need(mt, "kv_lora_rank", &[c.kv_lora_rank])?,
        qk_nope_head_dim: need(mt, "qk_nope_head_dim", &[c.qk_nope_head_dim])?,
        qk_rope_head_dim: need(mt, "qk_rope_head_dim", &[c.qk_rope_head_dim])?,
        v_head_dim: need(mt, "v_head_dim", &[c.v_head_dim])?,
    }))
}

/// Gemma 3's language model with `Gemma3TextConfig`'s defaults where the config leaves fields
/// out (a multimodal `gemma3` config's `text_config` names only what differs).
fn gemma3_defaults(mut c: RawConfig) -> RawConfig {
    c.vocab_size = c.vocab_size.or(Some(262_208));
    c.hidden_size = c.hidden_size.or(Some(2304));
    c.intermediate_size = c.intermediate_size.or(Some(9216));
    c.num_hidden_layers = c.num_hidden_layers.or(Some(26));
    c.num_attention_heads = c.num_attention_heads.or(Some(8));
    c.num_key_value_heads = c.num_key_value_heads.or(Some(4));
    c.head_dim = c.head_dim.or(Some(256));
    c
}

/// The Llama-style decoders (Llama, Mistral, Qwen, Mixtral, Gemma, Phi, GPT-NeoX, OLMo 2,
/// DeepSeek, …): what differs is which biases they have, their norms, their MLPs (dense or
/// experts), their attention (MLA) and whether attention and MLP run in parallel.
fn decoder(c: &RawConfig, family: ModelFamily, mt: &str) -> Result<ModelShape, PlanError> {
    let hidden = need(mt, "hidden_size", &[c.hidden_size])?;
    let heads = need(mt, "num_attention_heads", &[c.num_attention_heads])?;
    let layers = need(mt, "num_hidden_layers", &[c.num_hidden_layers])?;
    let attention_bias = c.attention_bias.unwrap_or(matches!(family, ModelFamily::GptNeox));
    let (qkv_bias, out_bias, mlp_bias) = match family {
        ModelFamily::Qwen2 => (true, false, false),
        ModelFamily::Phi => (true, true, true),
        ModelFamily::GptNeox => (attention_bias, attention_bias, true),
        ModelFamily::Phi3 | ModelFamily::Gemma | ModelFamily::Gemma2 | ModelFamily::Gemma3 | ModelFamily::Mistral => {
            (false, false, false)
        }
        _ => (attention_bias, attention_bias, c.mlp_bias.unwrap_or(false)),
    };
    let m = mlps(c, family, mt, layers)?;
    let mla = mla(c, family, mt)?;
    // MLA's activations are counted as attention of its query/key head width over every head.
    let (kv_heads, head_dim) = match mla {
        Some(a) => (heads, a.qk_head_dim()),
        None => (
            c.num_key_value_heads.unwrap_or(heads),
            c.head_dim.unwrap_or(hidden / heads.max(1)),
        ),
    };
    Ok(ModelShape {
        family,
        model_type: mt.to_owned(),
        vocab: need(mt, "vocab_size", &[c.vocab_size])?,
        hidden,
        layers,
        heads,
        kv_heads,
        head_dim,
        intermediate: m.intermediate,
        max_positions: c.max_position_embeddings,
        tied: c.tie_word_embeddings.unwrap_or(matches!(
            family,
            ModelFamily::Gemma | ModelFamily::Gemma2 | ModelFamily::Gemma3
        )),
        qkv_bias,
        out_bias,
        mlp_bias,
        experts: m.experts,
        experts_per_token: m.experts_per_token,
        shared_intermediate: m.shared_intermediate,
        dense_layers: m.dense_layers,
        dense_intermediate: m.dense_intermediate,
        mla,
        norms_per_layer: match family {
            ModelFamily::Phi => 1,
            ModelFamily::Gemma2 | ModelFamily::Gemma3 => 4,
            _ => 2,
        },
        parallel_attention: match family {
            ModelFamily::Phi => true,
            ModelFamily::GptNeox => c.use_parallel_residual.unwrap_or(true),
            _ => false,
        },
        logit_softcap: c.final_logit_softcapping.is_some(),
        fp32_math_attention: false,
    })
}
