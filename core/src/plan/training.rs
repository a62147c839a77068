//! Which parameters train, resolved over the model's named parameters ([`super::names`]): all,
//! a count (taken as a frozen bottom), the globs of `--train`, or LoRA adapters on target
//! modules — and from that, layer by layer, what autograd keeps: a layer saves for backward only
//! when something at or below it trains (the gradient flows through it), and a linear keeps its
//! input only when its own weight trains.

use memlens_api::{PlanParams, WeightsDtype};

use super::config::ModelShape;
use super::names::{glob_regex, named_parameters, split_list, NamedParam, Role};
use super::params::{parameter_tensors, ParamKind, ParamTensor};
use super::settings::{Lora, Trainable};
use super::PlanError;

/// peft's default LoRA targets by `model_type` (`TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING`
/// in peft/utils/constants.py, the families memlens counts): what `get_peft_model` adapts when
/// `target_modules` is not given.
pub const PEFT_DEFAULT_TARGETS: &[(&str, &[&str])] = &[
    ("llama", &["q_proj", "v_proj"]),
    ("mistral", &["q_proj", "v_proj"]),
    ("mixtral", &["q_proj", "v_proj"]),
    ("gemma", &["q_proj", "v_proj"]),
    ("gemma2", &["q_proj", "v_proj"]),
    ("gemma3_text", &["q_proj", "v_proj"]),
    ("qwen2", &["q_proj", "v_proj"]),
    ("qwen3", &["q_proj", "v_proj"]),
    ("phi", &["q_proj", "v_proj", "fc1", "fc2"]),
    ("gpt2", &["c_attn"]),
    ("gpt_neox", &["query_key_value"]),
    ("falcon", &["query_key_value"]),
];

/// peft's default targets for a `model_type`, if it has any.
pub fn default_lora_targets(model_type: &str) -> Option<Vec<String>> {
    PEFT_DEFAULT_TARGETS
        .iter()
        .find(|(t, _)| *t == model_type)
        .map(|(_, targets)| targets.iter().map(|t| (*t).to_owned()).collect())
}

/// What trains, from the query: `trainable_params`, `train` globs or `lora_rank` (one of them),
/// checked against the model (a glob or a LoRA target that names nothing is an error).
pub fn trainable_of(q: &PlanParams, model: Option<&ModelShape>) -> Result<Trainable, PlanError> {
    let train = q.train.as_deref().map(split_list).filter(|g| !g.is_empty());
    let chosen = [q.trainable_params.is_some(), train.is_some(), q.lora_rank.is_some()];
    if chosen.iter().filter(|&&c| c).count() > 1 {
        return Err(PlanError::Settings(
            "give one of trainable_params, train and lora_rank".into(),
        ));
    }
    if q.lora_rank.is_none() && (q.lora_targets.is_some() || q.lora_dropout.is_some()) {
        return Err(PlanError::Settings(
            "lora_targets and lora_dropout need lora_rank".into(),
        ));
    }
    if q.weights == Some(WeightsDtype::Nf4) && q.lora_rank.is_none() {
        return Err(PlanError::Settings(
            "nf4 weights are QLoRA's frozen 4-bit base: give lora_rank for the adapters that train over it".into(),
        ));
    }
    let needs_model = |what: &str| PlanError::Settings(format!("{what} needs the model's config.json"));
    let t = match (q.trainable_params, train, q.lora_rank) {
        (Some(n), _, _) => Trainable::Count(n),
        (_, Some(globs), _) => {
            model.ok_or_else(|| needs_model("train"))?;
            Trainable::Globs(globs)
        }
        (_, _, Some(rank)) => {
            let m = model.ok_or_else(|| needs_model(&format!("lora_rank {rank}")))?;
            Trainable::Lora(lora_of(q, m, rank)?)
        }
        _ => Trainable::All,
    };
    if let Some(m) = model {
        resolve(m, &t, 4.0)?;
    }
    Ok(t)
}

/// LoRA's settings: the targets given, else peft's for the family; dropout 0.05 unless given.
fn lora_of(q: &PlanParams, m: &ModelShape, rank: u64) -> Result<Lora, PlanError> {
    if rank == 0 {
        return Err(PlanError::Settings("lora_rank is at least 1".into()));
    }
    let dropout = q.lora_dropout.unwrap_or(0.05);
    if !(0.0..1.0).contains(&dropout) {
        return Err(PlanError::Settings(format!(
            "lora_dropout {dropout}: a probability below 1"
        )));
    }
    let given = q.lora_targets.as_deref().map(split_list).filter(|t| !t.is_empty());
    let default_targets = given.is_none();
    let targets = match given {
        Some(t) => t,
        None => default_lora_targets(&m.model_type).ok_or_else(|| {
            PlanError::Settings(format!(
                "peft has no default LoRA targets for model_type {:?}: give lora_targets (e.g. q_proj,v_proj)",
                m.model_type
            ))
        })?,
    };
    Ok(Lora {
        rank,
        targets,
        default_targets,
        dropout,
    })
}

/// One decoder layer: what flows through it and what of it trains.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LayerTraining {
    /// Something at or below the layer trains: it saves what the gradient flowing through it needs.
    pub graph: bool,
    /// Its input needs a gradient (something below it trains).
    pub input_grad: bool,
    /// Which of its weights train (a bias needs no saved input and counts for none).
    pub roles: Vec<Role>,
    /// Something of its attention half trains (a weight, a bias or an adapter): the attention
    /// records a graph even where the layer's input needs no gradient.
    pub attention_trains: bool,
    /// Matrices' elements whose linears' inputs need a gradient: autograd keeps their autocast copies.
    pub kept_matrices: u64,
    /// LoRA's own saved activations, per token.
    pub lora_bytes: f64,
}

impl LayerTraining {
    pub fn trains(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }
}

/// What trains, and what each layer therefore keeps.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Training {
    /// Trainable parameters (LoRA: the adapters).
    pub trainable: u64,
    /// LoRA adapters' parameters (in `trainable`), held in fp32.
    pub adapters: u64,
    pub layers: Vec<LayerTraining>,
    pub embedding: bool,
    pub final_norm: bool,
    pub head: bool,
    /// The final norm's input needs a gradient (any layer, or the embeddings, train).
    pub top_graph: bool,
    /// The head's weight's elements whose autocast copy is kept (its input needs a gradient).
    pub kept_head: u64,
    /// LoRA on the head: its saved activations per token.
    pub head_lora_bytes: f64,
    /// The base's linear weights, which QLoRA's 4-bit quantisation packs (all but the head).
    pub linear_weights: Vec<u64>,
}

/// A parameter of the attention half of a layer (its norm, projections, q/k norms; the norms
/// after attention or the MLP are counted here too, the safe side).
fn attention_role(role: Role) -> bool {
    matches!(role, Role::AttnNorm | Role::Qkv | Role::OProj | Role::LayerOther)
}

/// Bytes a LoRA adapter on a linear of `inputs` saves per token: the dropout mask (one byte an
/// element), the dropped input (for A's weight gradient) and the rank-R intermediate (for B's),
/// in the adapter's compute type (fp32, or autocast's half type).
fn lora_saved(inputs: u64, rank: u64, dropout: f64, adapter_compute: f64) -> f64 {
    let mask = if dropout > 0.0 { inputs as f64 } else { 0.0 };
    mask + adapter_compute * inputs as f64 + adapter_compute * rank as f64
}

/// Whether a LoRA target names the module at `path` (peft: the path itself or its last parts).
fn targets(path: &str, target: &str) -> bool {
    path == target || path.ends_with(&format!(".{target}"))
}

/// What trains under `trainable`, for `m`; `adapter_compute` is the LoRA adapters' compute
/// element size.
pub fn resolve(m: &ModelShape, trainable: &Trainable, adapter_compute: f64) -> Result<Training, PlanError> {
    let named = named_parameters(m);
    let params: u64 = named.iter().map(|p| p.elements).sum();
    let (trains, lora): (Vec<bool>, Option<&Lora>) = match trainable {
        Trainable::All => (vec![true; named.len()], None),
        Trainable::Count(n) => (frozen_bottom(m, &named, (*n).min(params)), None),
        Trainable::Globs(globs) => (by_globs(&named, globs)?, None),
        Trainable::Lora(l) => (vec![false; named.len()], Some(l)),
    };
    let mut t = Training {
        layers: vec![LayerTraining::default(); m.layers as usize],
        linear_weights: named
            .iter()
            .filter(|p| p.linear.is_some() && p.role != Role::Head)
            .map(|p| p.elements)
            .collect(),
        ..Training::default()
    };
    for (p, &on) in named.iter().zip(&trains) {
        if !on {
            continue;
        }
        t.trainable += p.elements;
        match (p.role, p.layer) {
            (Role::Embedding, _) => t.embedding = true,
            (Role::FinalNorm, _) => t.final_norm |= !p.bias,
            (Role::Head, _) => t.head |= !p.bias,
            (role, Some(layer)) => {
                let l = &mut t.layers[layer as usize];
                l.graph = true;
                l.attention_trains |= attention_role(role);
                if !p.bias {
                    l.roles.push(role);
                }
            }
            (_, None) => {}
        }
    }
    if let Some(l) = lora {
        add_adapters(&mut t, &named, l, adapter_compute)?;
    }
    flow(&mut t, &named, m);
    Ok(t)
}

/// The gradient flows up from the lowest trained layer: every layer above saves for it.
fn flow(t: &mut Training, named: &[NamedParam], m: &ModelShape) {
    let mut below = t.embedding;
    for l in t.layers.iter_mut() {
        l.input_grad = below;
        l.graph |= below;
        below = l.graph;
    }
    t.top_graph = below;
    for p in named.iter().filter(|p| p.matrix) {
        match p.layer {
            Some(layer) => {
                let l = &mut t.layers[layer as usize];
                if l.graph && (l.input_grad || p.role != Role::Qkv) {
                    l.kept_matrices += p.elements;
                }
            }
            None if t.top_graph => t.kept_head += p.elements,
            None => {}
        }
    }
    // Tied: the head is the token embedding's matrix, kept for the head's input gradient.
    if m.tied && t.top_graph {
        t.kept_head += named
            .iter()
            .find(|p| p.role == Role::Embedding)
            .map_or(0, |p| p.elements);
    }
}

/// LoRA's adapters on every linear its targets name: their parameters and saved activations.
fn add_adapters(t: &mut Training, named: &[NamedParam], l: &Lora, adapter_compute: f64) -> Result<(), PlanError> {
    for target in &l.targets {
        if !named
            .iter()
            .any(|p| p.linear.as_ref().is_some_and(|lin| targets(&lin.path, target)))
        {
            return Err(PlanError::Settings(format!(
                "lora_targets: no linear module of this model is named {target:?} (its linears: {})",
                linear_names(named)
            )));
        }
    }
    for p in named {
        let Some(lin) = &p.linear else { continue };
        if !l.targets.iter().any(|target| targets(&lin.path, target)) {
            continue;
        }
        let adapter = l.rank * (lin.inputs + lin.outputs);
        t.adapters += adapter;
        t.trainable += adapter;
        let saved = lora_saved(lin.inputs, l.rank, l.dropout, adapter_compute);
        match p.layer {
            Some(layer) => {
                let layer = &mut t.layers[layer as usize];
                layer.graph = true;
                layer.attention_trains |= attention_role(p.role);
                layer.lora_bytes += saved;
            }
            None => t.head_lora_bytes += saved,
        }
    }
    Ok(())
}

/// The distinct names of the model's linear modules (`q_proj, k_proj, …`).
fn linear_names(named: &[NamedParam]) -> String {
    let mut names: Vec<&str> = Vec::new();
    for p in named {
        if let Some(lin) = &p.linear {
            let last = lin.path.rsplit('.').next().unwrap_or(&lin.path);
            if !names.contains(&last) {
                names.push(last);
            }
        }
    }
    names.join(", ")
}

/// Which parameters the globs select; a glob that selects none is an error naming it.
fn by_globs(named: &[NamedParam], globs: &[String]) -> Result<Vec<bool>, PlanError> {
    let patterns = globs
        .iter()
        .map(|g| glob_regex(g).map_err(|e| PlanError::Settings(e.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    for (glob, re) in globs.iter().zip(&patterns) {
        if !named.iter().any(|p| re.is_match(&p.name)) {
            let example = named
                .iter()
                .find(|p| p.layer == Some(0))
                .map_or("", |p| p.name.as_str());
            return Err(PlanError::Settings(format!(
                "train {glob:?} matches no parameter of this model (its names are as transformers \
                 builds them, e.g. {example:?})"
            )));
        }
    }
    Ok(named
        .iter()
        .map(|p| patterns.iter().any(|re| re.is_match(&p.name)))
        .collect())
}

/// A trainable count read as a frozen bottom: the embeddings, then whole layers from the first.
/// When the frozen part is not that, every layer is taken to train (each still saves for the
/// gradients below it).
fn frozen_bottom(m: &ModelShape, named: &[NamedParam], trainable: u64) -> Vec<bool> {
    let layers = frozen_layers(m, named.iter().map(|p| p.elements).sum::<u64>() - trainable);
    named
        .iter()
        .map(|p| match (p.role, p.layer) {
            (Role::Embedding, _) => layers == 0,
            (_, Some(l)) => l >= layers,
            _ => true,
        })
        .collect()
}

/// How many whole first layers (above every embedding) `frozen` parameters are; 0 when they
/// are not the embeddings and whole first layers.
pub fn frozen_layers(m: &ModelShape, frozen: u64) -> u64 {
    let tensors = parameter_tensors(m);
    let embeddings: u64 = tensors
        .iter()
        .filter(|t| t.kind == ParamKind::Embedding)
        .map(ParamTensor::elements)
        .sum();
    let per_layer: u64 = tensors
        .iter()
        .filter(|t| t.copies >= m.layers && t.copies % m.layers.max(1) == 0)
        .map(ParamTensor::elements)
        .sum::<u64>()
        / m.layers.max(1);
    let rest = frozen.saturating_sub(embeddings);
    let layers = (rest + per_layer / 2) / per_layer.max(1);
    let whole = frozen >= embeddings && rest.abs_diff(layers * per_layer) <= per_layer / 100;
    if whole {
        layers.min(m.layers)
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn llama() -> ModelShape {
        ModelShape::from_config_json(
            r#"{"model_type": "llama", "hidden_size": 1024, "intermediate_size": 2816, "num_attention_heads": 16,
                "num_hidden_layers": 8, "num_key_value_heads": 4, "vocab_size": 32000, "tie_word_embeddings": false}"#,
        )
        .expect("config")
    }

    #[test]
    fn globs_select_layers_and_the_flow_starts_at_the_lowest() {
        let m = llama();
        let t = resolve(
            &m,
            &Trainable::Globs(vec!["model.layers.6.*".into(), "model.layers.7.*".into()]),
            4.0,
        )
        .expect("resolve");
        assert_eq!(
            t.trainable,
            2 * (2 * 1024 * 1024 + 2 * 1024 * 256 + 3 * 1024 * 2816 + 2 * 1024)
        );
        assert!(!t.layers[5].graph && t.layers[6].graph && !t.layers[6].input_grad && t.layers[7].input_grad);
        assert!(t.top_graph && !t.head && !t.embedding);
        let e = resolve(&m, &Trainable::Globs(vec!["layers.6.*".into()]), 4.0).expect_err("no such name");
        assert!(e.to_string().contains("model.layers.0."), "{e}");
    }

    #[test]
    fn lora_adapts_the_targets_of_every_layer() {
        let m = llama();
        let lora = Lora {
            rank: 16,
            targets: default_lora_targets("llama").expect("llama"),
            default_targets: true,
            dropout: 0.05,
        };
        let t = resolve(&m, &Trainable::Lora(lora.clone()), 4.0).expect("resolve");
        assert_eq!(t.adapters, 8 * 16 * ((1024 + 1024) + (1024 + 256)));
        assert_eq!(t.trainable, t.adapters);
        assert!(t.layers.iter().all(|l| l.graph && l.roles.is_empty()));
        assert!(!t.layers[0].input_grad && t.layers[1].input_grad);
        assert!(t.layers[0].attention_trains);
        // On the MLP alone, the lowest layer's attention records no graph.
        let mlp = Lora {
            targets: vec!["down_proj".into()],
            ..lora.clone()
        };
        let t = resolve(&m, &Trainable::Lora(mlp), 4.0).expect("resolve");
        assert!(t.layers[0].graph && !t.layers[0].attention_trains && !t.layers[0].input_grad);
        assert!(t.layers[1].input_grad);
        let bad = Lora {
            targets: vec!["c_attn".into()],
            ..lora
        };
        let e = resolve(&m, &Trainable::Lora(bad), 4.0).expect_err("no c_attn");
        assert!(e.to_string().contains("q_proj"), "{e}");
    }
}
