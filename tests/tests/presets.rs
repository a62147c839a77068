//! The bundled model presets (`core/src/plan/presets/`): each one's parameters as the plan
//! counts them equal, to the parameter, `sum(p.numel())` of the model transformers builds from
//! the same config on the meta device (`traces/plan/preset_params.json`, written by
//! `traces/capture/preset_params.py`); that count agrees with the published one (to the
//! parameter where it is published exactly, within 6 % where it is a rounded name such as "7B");
//! every name resolves to one preset, any case; a plan by name is the plan of its config.

use std::collections::BTreeMap;

use memlens_api::{ModelFamily, PlanParams};
use memlens_core::plan::params::parameter_count;
use memlens_core::plan::presets::{self, Preset};
use memlens_core::plan::{plan, ModelShape, PlanError};
use serde_json::Value;

/// Where a rounded published figure may sit from the exact count: the names round (OLMo 2 13B
/// holds 13.72 B parameters, 5.5 % over its name).
const ROUNDED_TOLERANCE: f64 = 0.06;

/// transformers' counts by preset id.
fn transformers_counts() -> BTreeMap<String, u64> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../traces/plan/preset_params.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("preset_params.json")).expect("json");
    v["presets"]
        .as_object()
        .expect("presets")
        .iter()
        .map(|(id, e)| {
            (
                id.clone(),
                e["parameters"].as_u64().unwrap_or_else(|| panic!("{id}: {e}")),
            )
        })
        .collect()
}

fn shape(p: &Preset) -> ModelShape {
    ModelShape::from_config_json(&p.config_json()).unwrap_or_else(|e| panic!("{}: {e}", p.id))
}

#[test]
fn at_least_forty_presets_each_of_a_family_counted_exactly() {
    let all = presets::all();
    assert!(all.len() >= 40, "{} presets", all.len());
    for p in all {
        assert_ne!(
            shape(p).family,
            ModelFamily::Other,
            "{}: read as a Llama-style guess",
            p.id
        );
        assert!(
            !p.source.repo.is_empty() && !p.source.path.is_empty(),
            "{}: no source",
            p.id
        );
    }
}

#[test]
fn every_preset_counts_what_transformers_builds_to_the_parameter() {
    let truth = transformers_counts();
    let mut off = Vec::new();
    for p in presets::all() {
        let want = *truth
            .get(&p.id)
            .unwrap_or_else(|| panic!("{}: not in preset_params.json", p.id));
        let got = parameter_count(&shape(p));
        if got != want {
            off.push(format!("{}: memlens {got}, transformers {want}", p.id));
        }
    }
    assert!(off.is_empty(), "{}", off.join("\n"));
    assert_eq!(
        truth.len(),
        presets::all().len(),
        "preset_params.json counts presets that are gone"
    );
}

#[test]
fn every_count_agrees_with_the_published_one() {
    let truth = transformers_counts();
    for p in presets::all() {
        let (count, published) = (truth[&p.id], p.published.parameters);
        if p.published.exact {
            assert_eq!(
                count, published,
                "{}: published {} ({})",
                p.id, published, p.published.stated_in
            );
        } else {
            let off = (count as f64 - published as f64).abs() / published as f64;
            assert!(
                off <= ROUNDED_TOLERANCE,
                "{}: {count} is {:.1} % from the published {published}",
                p.id,
                off * 100.0
            );
        }
    }
}

#[test]
fn names_resolve_to_one_preset_in_any_case() {
    let all = presets::all();
    for p in all {
        let names = [p.id.clone(), p.short_name().to_owned(), p.id.to_uppercase()]
            .into_iter()
            .chain(p.aliases.iter().cloned());
        for name in names {
            let named: Vec<&str> = all
                .iter()
                .filter(|q| q.is_named(&name))
                .map(|q| q.id.as_str())
                .collect();
            assert_eq!(named, [p.id.as_str()], "{name:?}");
        }
    }
    assert_eq!(
        presets::find("meta-llama/Llama-3.1-8B").map(|p| p.id.as_str()),
        Some("meta-llama/Llama-3.1-8B")
    );
    assert_eq!(
        presets::find(" LLAMA-3.1-8b ").map(|p| p.id.as_str()),
        Some("meta-llama/Llama-3.1-8B")
    );
    assert!(matches!(
        presets::resolve("llama-9-8b"),
        Err(PlanError::UnknownModel { .. })
    ));
}

#[test]
fn a_plan_by_name_is_the_plan_of_its_config() {
    let p = presets::find("qwen3-30b-a3b").expect("preset");
    let by_name = plan(
        &PlanParams {
            model: Some(p.id.clone()),
            ..PlanParams::default()
        },
        None,
    )
    .expect("plan");
    let by_config = plan(
        &PlanParams {
            config: Some(p.config_json()),
            ..PlanParams::default()
        },
        None,
    )
    .expect("plan");
    assert_eq!(by_name, by_config);
    assert_eq!(by_name.parameter_count, 30_532_122_624);
    assert_eq!(by_name.model_family, ModelFamily::Qwen3Moe);
    // A config given wins over a name.
    let both = PlanParams {
        config: Some(p.config_json()),
        model: Some("gpt2".into()),
        ..PlanParams::default()
    };
    assert_eq!(plan(&both, None).expect("plan").parameter_count, 30_532_122_624);
    let unknown = plan(
        &PlanParams {
            model: Some("no-such-model".into()),
            ..PlanParams::default()
        },
        None,
    );
    assert!(matches!(unknown, Err(PlanError::UnknownModel { .. })), "{unknown:?}");
}

#[test]
fn the_listing_carries_each_preset_with_its_planned_count() {
    let models = presets::models();
    assert_eq!(models.len(), presets::all().len());
    let truth = transformers_counts();
    for m in &models {
        assert_eq!(m.parameter_count, truth[&m.id], "{}", m.id);
    }
}
