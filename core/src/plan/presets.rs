//! The bundled model presets: the `config.json` fields of open models people fine-tune and
//! serve (`presets/*.json`, one file a model, embedded at build time), each with where its
//! values were taken from and its published parameter count. [`find`] resolves a name offline —
//! the Hugging Face id (`meta-llama/Llama-3.1-8B`), the id's model part or a short alias, any
//! case — for the plan's `model` setting (`--model`, `GET /api/plan?model=`, the MCP tool);
//! `tests/tests/presets.rs` holds each preset's planned parameter count to the one transformers
//! builds (traces/plan/preset_params.json).

use std::sync::OnceLock;

use memlens_api::PlanModel;
use serde::Deserialize;

use super::config::ModelShape;
use super::params::parameter_count;
use super::PlanError;

/// Where a preset's values come from.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// The public repository holding them (`owner/name`).
    pub repo: String,
    pub path: String,
    /// The commit read (none for this repository's own files).
    pub commit: Option<String>,
    /// The entry within the file (a dictionary key, a function), where it holds several.
    pub entry: Option<String>,
    /// What the file holds: a copy of the `config.json`, or its values in another form.
    pub kind: String,
}

/// The parameter count the model's publisher (or a library that ships it) states.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Published {
    pub parameters: u64,
    /// Stated to the parameter (a library's count); otherwise a rounded figure ("7B").
    pub exact: bool,
    /// Where it is stated.
    #[serde(rename = "where")]
    pub stated_in: String,
}

/// One bundled model.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preset {
    /// The Hugging Face repository id.
    pub id: String,
    /// How people write it (`Llama 3.1 8B`).
    pub name: String,
    /// Short names, matched without regard to case.
    pub aliases: Vec<String>,
    pub source: Source,
    pub published: Published,
    /// The model's `config.json` fields: those the plan reads and those that identify it.
    pub config: serde_json::Value,
    /// What differs from the model's own `config.json`, or what is left out.
    #[serde(default)]
    pub note: Option<String>,
}

/// Declares the preset files, in the order they are listed (by family, then size).
macro_rules! preset_files {
    ($($file:literal,)*) => {
        &[$(($file, include_str!(concat!("presets/", $file))),)*]
    };
}

/// Every preset file's name and text.
const FILES: &[(&str, &str)] = preset_files!(
    "llama-2-7b-hf.json",
    "llama-2-13b-hf.json",
    "llama-2-70b-hf.json",
    "meta-llama-3-8b.json",
    "meta-llama-3-70b.json",
    "llama-3.1-8b.json",
    "llama-3.1-70b.json",
    "llama-3.1-405b.json",
    "llama-3.2-1b.json",
    "llama-3.2-3b.json",
    "llama-3.3-70b-instruct.json",
    "mistral-7b-v0.1.json",
    "mistral-7b-v0.3.json",
    "mixtral-8x7b-v0.1.json",
    "mixtral-8x22b-instruct-v0.1.json",
    "qwen2.5-0.5b.json",
    "qwen2.5-1.5b.json",
    "qwen2.5-3b.json",
    "qwen2.5-7b.json",
    "qwen2.5-14b.json",
    "qwen2.5-32b.json",
    "qwen2.5-72b.json",
    "qwen3-0.6b.json",
    "qwen3-1.7b.json",
    "qwen3-4b.json",
    "qwen3-8b.json",
    "qwen3-14b.json",
    "qwen3-32b.json",
    "qwen3-30b-a3b.json",
    "qwen3-235b-a22b.json",
    "gemma-2-2b.json",
    "gemma-2-9b.json",
    "gemma-2-27b.json",
    "gemma-3-1b-it.json",
    "gemma-3-4b-pt.json",
    "gemma-3-12b-pt.json",
    "gemma-3-27b-pt.json",
    "phi-3-mini-4k-instruct.json",
    "phi-3-medium-4k-instruct.json",
    "phi-4.json",
    "deepseek-v2-lite.json",
    "deepseek-v3.json",
    "olmo-2-1124-7b.json",
    "olmo-2-1124-13b.json",
    "smollm2-135m.json",
    "smollm2-360m.json",
    "smollm2-1.7b.json",
    "gpt2.json",
    "gpt2-medium.json",
    "gpt2-large.json",
    "gpt2-xl.json",
    "pythia-160m.json",
    "pythia-410m.json",
    "pythia-1b.json",
    "pythia-1.4b.json",
    "pythia-2.8b.json",
    "pythia-6.9b.json",
    "pythia-12b.json",
    "falcon-7b.json",
    "falcon-40b.json",
);

/// Every bundled preset, read once (a malformed file is a build defect: `tests/tests/presets.rs`
/// reads them all).
pub fn all() -> &'static [Preset] {
    static PRESETS: OnceLock<Vec<Preset>> = OnceLock::new();
    PRESETS.get_or_init(|| {
        FILES
            .iter()
            .map(|(file, text)| serde_json::from_str(text).unwrap_or_else(|e| panic!("presets/{file}: {e}")))
            .collect()
    })
}

impl Preset {
    /// The id's model part (`Llama-3.1-8B` of `meta-llama/Llama-3.1-8B`).
    pub fn short_name(&self) -> &str {
        self.id.rsplit('/').next().unwrap_or(&self.id)
    }

    /// Whether `name` names this preset: its id, the id's model part or an alias, any case.
    pub fn is_named(&self, name: &str) -> bool {
        let name = name.trim();
        [self.id.as_str(), self.short_name()]
            .into_iter()
            .chain(self.aliases.iter().map(String::as_str))
            .any(|n| n.eq_ignore_ascii_case(name))
    }

    /// The preset's `config.json` as text, as the plan reads a pasted one.
    pub fn config_json(&self) -> String {
        self.config.to_string()
    }

    /// The model's parameters as the plan counts them.
    pub fn parameter_count(&self) -> Result<u64, PlanError> {
        Ok(parameter_count(&ModelShape::from_config_json(&self.config_json())?))
    }

    /// The preset as the API lists it.
    pub fn listed(&self) -> PlanModel {
        PlanModel {
            id: self.id.clone(),
            name: self.name.clone(),
            aliases: self.aliases.clone(),
            model_type: self.model_type().to_owned(),
            parameter_count: self.parameter_count().unwrap_or(0),
            published_parameters: self.published.parameters,
            source: format!("{} {}", self.source.repo, self.source.path),
        }
    }

    /// The config's `model_type` (its language model's, for a multimodal config).
    fn model_type(&self) -> &str {
        let c = self.config.get("text_config").unwrap_or(&self.config);
        c.get("model_type").and_then(|v| v.as_str()).unwrap_or("?")
    }
}

/// The preset `name` names (see [`Preset::is_named`]).
pub fn find(name: &str) -> Option<&'static Preset> {
    all().iter().find(|p| p.is_named(name))
}

/// The preset `name` names, or an error listing the closest names.
pub fn resolve(name: &str) -> Result<&'static Preset, PlanError> {
    find(name).ok_or_else(|| {
        let needle = name.trim().to_ascii_lowercase();
        let close: Vec<&str> = all()
            .iter()
            .filter(|p| {
                let id = p.id.to_ascii_lowercase();
                needle
                    .split(['-', '/', '.', ' ', '_'])
                    .filter(|w| w.len() > 1)
                    .any(|w| id.contains(w))
            })
            .map(|p| p.id.as_str())
            .take(8)
            .collect();
        PlanError::UnknownModel {
            name: name.to_owned(),
            close: if close.is_empty() {
                "`memlens plan --list-models` lists them".into()
            } else {
                format!("close: {}", close.join(", "))
            },
        }
    })
}

/// Every preset as the API lists it.
pub fn models() -> Vec<PlanModel> {
    all().iter().map(Preset::listed).collect()
}
