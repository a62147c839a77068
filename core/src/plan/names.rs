//! The model's parameters by the names `transformers` gives them (`model.layers.6.mlp.up_proj.weight`,
//! `lm_head.weight`), each with its layer and its role in what a layer saves for backward: what
//! `--train GLOB` matches (Python's `fnmatch`, as the runs select them) and what LoRA's target
//! modules name. Built from [`super::params::parameter_tensors`], so the elements are the same;
//! traces/plan/params.json holds the names transformers 5.17 built from the same configs.

use memlens_api::ModelFamily;
use regex::Regex;

use super::config::ModelShape;
use super::params::{parameter_tensors, ParamKind, ParamTensor};

/// What a parameter's gradient needs saved, as a decoder layer's activations are split
/// ([`super::activations::LayerSaved`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Token or position embeddings.
    Embedding,
    /// The norm before attention (its weight's gradient needs the normalised input).
    AttnNorm,
    /// The linears reading the attention's input (q/k/v, fused or latent).
    Qkv,
    /// The attention's output projection.
    OProj,
    /// The norm before the MLP.
    MlpNorm,
    /// The linears reading the MLP's input (gate, up, fc1, the router, the experts' first).
    MlpIn,
    /// The MLP's output projection (down, fc2, the experts' second).
    MlpOut,
    /// Anything else of a layer (q/k norms, the norms after attention or the MLP).
    LayerOther,
    FinalNorm,
    Head,
}

/// One parameter tensor as `named_parameters()` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedParam {
    pub name: String,
    pub elements: u64,
    /// The decoder layer holding it.
    pub layer: Option<u64>,
    pub role: Role,
    /// A bias (or a norm's bias): its gradient needs no saved input.
    pub bias: bool,
    /// A matrix a linear multiplies by (a linear's weight, fused experts, a head): autocast
    /// casts it to half precision.
    pub matrix: bool,
    /// A linear layer's weight (an `nn.Linear` or GPT-2's `Conv1D`, what LoRA adapts): its
    /// module's path, inputs and outputs.
    pub linear: Option<LinearModule>,
}

/// A linear module: its path (`model.layers.0.self_attn.q_proj`) and widths.
#[derive(Debug, Clone, PartialEq)]
pub struct LinearModule {
    pub path: String,
    pub inputs: u64,
    pub outputs: u64,
}

/// The prefixes a family's modules sit under: the model, its layers, the embedding, the final norm.
struct Layout {
    layers: &'static str,
    embed: &'static str,
    final_norm: &'static str,
}

fn layout(family: ModelFamily) -> Layout {
    match family {
        ModelFamily::Gpt2 => Layout {
            layers: "transformer.h",
            embed: "transformer.wte",
            final_norm: "transformer.ln_f",
        },
        ModelFamily::GptNeox => Layout {
            layers: "gpt_neox.layers",
            embed: "gpt_neox.embed_in",
            final_norm: "gpt_neox.final_layer_norm",
        },
        ModelFamily::Falcon => Layout {
            layers: "transformer.h",
            embed: "transformer.word_embeddings",
            final_norm: "transformer.ln_f",
        },
        ModelFamily::Phi => Layout {
            layers: "model.layers",
            embed: "model.embed_tokens",
            final_norm: "model.final_layernorm",
        },
        _ => Layout {
            layers: "model.layers",
            embed: "model.embed_tokens",
            final_norm: "model.norm",
        },
    }
}

/// A layer's norms by name and role, in the order `parameter_tensors` counts them.
fn layer_norms(m: &ModelShape) -> Vec<(&'static str, Role)> {
    use Role::*;
    match m.family {
        ModelFamily::Gpt2 => vec![("ln_1", AttnNorm), ("ln_2", MlpNorm)],
        ModelFamily::Falcon if m.norms_per_layer >= 2 && m.parallel_attention => {
            vec![("ln_attn", AttnNorm), ("ln_mlp", MlpNorm)]
        }
        ModelFamily::Gemma2 | ModelFamily::Gemma3 => vec![
            ("input_layernorm", AttnNorm),
            ("post_attention_layernorm", LayerOther),
            ("pre_feedforward_layernorm", MlpNorm),
            ("post_feedforward_layernorm", LayerOther),
        ],
        ModelFamily::Olmo2 => vec![
            ("post_attention_layernorm", AttnNorm),
            ("post_feedforward_layernorm", MlpNorm),
        ],
        _ if m.norms_per_layer >= 2 => vec![("input_layernorm", AttnNorm), ("post_attention_layernorm", MlpNorm)],
        _ => vec![("input_layernorm", AttnNorm)],
    }
}

/// A layer's tensor (by `parameter_tensors`' name) as transformers names it under the layer, and its role.
fn layer_tensor(family: ModelFamily, name: &str) -> (String, Role) {
    use Role::*;
    let attn = match family {
        ModelFamily::Gpt2 => "attn",
        ModelFamily::GptNeox => "attention",
        ModelFamily::Falcon => "self_attention",
        _ => "self_attn",
    };
    let (module, role) = match name {
        "c_attn" | "query_key_value" | "qkv_proj" | "q_proj" | "k_proj" | "v_proj" | "q_a_proj" | "q_b_proj"
        | "kv_a_proj_with_mqa" | "kv_b_proj" => (format!("{attn}.{name}"), Qkv),
        "q_norm" | "k_norm" | "q_a_layernorm" | "kv_a_layernorm" => (format!("{attn}.{name}"), LayerOther),
        "attn.c_proj" => ("attn.c_proj".into(), OProj),
        "dense" | "o_proj" => (format!("{attn}.{name}"), OProj),
        "mlp.c_proj" => ("mlp.c_proj".into(), MlpOut),
        "down_proj" | "dense_4h_to_h" | "fc2" => (format!("mlp.{name}"), MlpOut),
        "router" => ("mlp.gate".into(), MlpIn),
        // transformers 5 keeps each layer's experts fused: one tensor of every expert's gate and
        // up projections, one of their down projections.
        "experts.gate_proj" | "experts.up_proj" => ("mlp.experts.gate_up_proj".into(), MlpIn),
        "experts.down_proj" => ("mlp.experts.down_proj".into(), MlpOut),
        "shared_experts.down_proj" => ("mlp.shared_experts.down_proj".into(), MlpOut),
        other => (format!("mlp.{other}"), MlpIn),
    };
    (module, role)
}

/// Every parameter as `model.named_parameters()` lists it, layer by layer.
pub fn named_parameters(m: &ModelShape) -> Vec<NamedParam> {
    let l = layout(m.family);
    let tensors = parameter_tensors(m);
    let norms = layer_norms(m);
    let mut out = Vec::new();
    let mut previous: Option<&str> = None;
    let mut norm_bias_next = false;
    let mut layered: Vec<(u64, NamedParam)> = Vec::new();
    for t in &tensors {
        // A vector right after a tensor of the same name is its bias.
        let bias = t.kind == ParamKind::Vector && previous == Some(t.name) && t.name != "layer_norms";
        previous = Some(t.name);
        match t.name {
            "embed_tokens" | "wpe" => out.push(NamedParam {
                name: if t.name == "wpe" {
                    "transformer.wpe.weight".into()
                } else {
                    format!("{}.weight", l.embed)
                },
                elements: t.elements(),
                layer: None,
                role: Role::Embedding,
                bias: false,
                matrix: false,
                linear: None,
            }),
            "final_norm" => out.push(NamedParam {
                name: format!("{}.{}", l.final_norm, if bias { "bias" } else { "weight" }),
                elements: t.elements(),
                layer: None,
                role: Role::FinalNorm,
                bias,
                matrix: false,
                linear: None,
            }),
            "lm_head" => out.push(NamedParam {
                name: format!("lm_head.{}", if bias { "bias" } else { "weight" }),
                elements: t.elements(),
                layer: None,
                role: Role::Head,
                bias,
                matrix: !bias,
                linear: (!bias).then(|| LinearModule {
                    path: "lm_head".into(),
                    inputs: t.cols,
                    outputs: t.rows,
                }),
            }),
            "layer_norms" => {
                // One tensor of every layer's norms' weights, then (LayerNorm) one of their biases.
                let is_bias = norm_bias_next;
                norm_bias_next = true;
                for layer in 0..m.layers {
                    for &(norm, role) in &norms {
                        layered.push((layer, layer_param(&l, layer, norm, is_bias, t.rows, role, None)));
                    }
                }
            }
            name => layer_tensors(m, &l, t, name, bias, &mut layered),
        }
    }
    merge_fused_experts(&mut layered);
    layered.sort_by_key(|(layer, _)| *layer);
    let head = out.split_off(out.iter().position(|p| p.role != Role::Embedding).unwrap_or(out.len()));
    out.extend(layered.into_iter().map(|(_, p)| p));
    out.extend(head);
    out
}

/// One layer's parameter named under `layers.{layer}.{module}`.
fn layer_param(
    l: &Layout,
    layer: u64,
    module: &str,
    bias: bool,
    elements: u64,
    role: Role,
    linear: Option<(u64, u64)>,
) -> NamedParam {
    let path = format!("{}.{layer}.{module}", l.layers);
    let fused = module.starts_with("mlp.experts.");
    NamedParam {
        name: if fused {
            path.clone()
        } else {
            format!("{path}.{}", if bias { "bias" } else { "weight" })
        },
        elements,
        layer: Some(layer),
        role,
        bias,
        matrix: linear.is_some() && !bias,
        linear: linear
            .filter(|_| !bias && !fused)
            .map(|(inputs, outputs)| LinearModule { path, inputs, outputs }),
    }
}

/// A layer tensor's copies spread over the layers that hold it (MoE tensors over the sparse
/// layers after the dense ones, experts of one layer together).
fn layer_tensors(
    m: &ModelShape,
    l: &Layout,
    t: &ParamTensor,
    name: &str,
    bias: bool,
    out: &mut Vec<(u64, NamedParam)>,
) {
    let (module, role) = layer_tensor(m.family, name);
    let moe_part = name == "router" || name.starts_with("experts.") || name.starts_with("shared_experts.");
    let dense_mlp = m.experts > 0 && matches!(role, Role::MlpIn | Role::MlpOut) && !moe_part;
    let layers: Vec<u64> = if moe_part {
        (m.dense_layers.min(m.layers)..m.layers).collect()
    } else if dense_mlp {
        (0..m.dense_layers.min(m.layers)).collect()
    } else {
        (0..m.layers).collect()
    };
    let per_layer = t.copies / layers.len().max(1) as u64;
    let elements = t.rows * t.cols * per_layer;
    let linear = (t.kind == ParamKind::Matrix).then_some((t.cols, t.rows));
    for layer in layers {
        out.push((layer, layer_param(l, layer, &module, bias, elements, role, linear)));
    }
}

/// The experts' gate and up projections are one tensor per layer in transformers 5.
fn merge_fused_experts(params: &mut Vec<(u64, NamedParam)>) {
    let mut merged: Vec<(u64, NamedParam)> = Vec::with_capacity(params.len());
    for (layer, p) in params.drain(..) {
        if let Some((_, same)) = merged.iter_mut().find(|(l, q)| *l == layer && q.name == p.name) {
            same.elements += p.elements;
        } else {
            merged.push((layer, p));
        }
    }
    *params = merged;
}

/// Python's `fnmatch.fnmatch` pattern as a regex, as `fnmatch.translate` makes it (`*` any
/// characters, dots included; `?` one; `[seq]` and `[!seq]` a class), anchored. Hand-written
/// rather than a glob crate's: those treat `/`, `**` or classes otherwise than the `fnmatch`
/// the runs select parameters with.
pub fn glob_regex(glob: &str) -> Result<Regex, GlobError> {
    let mut re = String::from("^(?s:");
    let chars: Vec<char> = glob.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '*' => re.push_str(".*"),
            '?' => re.push('.'),
            '[' => match chars[i + 1..].iter().position(|&c| c == ']').map(|p| p + i + 1) {
                Some(end) if end > i + 1 => {
                    let mut class: String = chars[i + 1..end].iter().collect();
                    if let Some(rest) = class.strip_prefix('!') {
                        class = format!("^{rest}");
                    }
                    re.push('[');
                    re.push_str(&class.replace('\\', "\\\\"));
                    re.push(']');
                    i = end;
                }
                _ => re.push_str("\\["),
            },
            c => re.push_str(&regex::escape(&c.to_string())),
        }
        i += 1;
    }
    re.push_str(")$");
    Regex::new(&re).map_err(|source| GlobError {
        glob: glob.to_owned(),
        source,
    })
}

/// A `--train` glob that makes no pattern, with the reason.
#[derive(Debug, thiserror::Error)]
#[error("--train {glob}: {source}")]
pub struct GlobError {
    pub glob: String,
    #[source]
    pub source: regex::Error,
}

/// The globs of a comma-separated list (blank entries dropped).
pub fn split_list(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_fnmatch_does() {
        let m = |g: &str, s: &str| glob_regex(g).expect("glob").is_match(s);
        assert!(m("model.layers.6.*", "model.layers.6.mlp.up_proj.weight"));
        assert!(!m("model.layers.6.*", "model.layers.16.mlp.up_proj.weight"));
        assert!(m("*.self_attn.*", "model.layers.0.self_attn.q_proj.weight"));
        assert!(m("lm_head.weight", "lm_head.weight"));
        assert!(!m("lm_head.weight", "lm_head.weightx"));
        assert!(m("model.layers.[67].*", "model.layers.7.input_layernorm.weight"));
        assert!(!m("model.layers.[!67].*", "model.layers.7.input_layernorm.weight"));
        assert!(m("model.layers.?.mlp*", "model.layers.3.mlp.down_proj.weight"));
    }
}
