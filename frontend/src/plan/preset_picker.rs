//! The bundled models by name (`#plan-model-preset`, a searchable list fetched once), shared by
//! the training and the serving tabs (only one is shown at a time): picking one sets `model`
//! and clears a pasted config.

use leptos::prelude::*;
use leptos::task::spawn_local;
use memlens_api::PlanParams;

#[component]
pub fn PresetPicker(settings: RwSignal<PlanParams>) -> impl IntoView {
    let models = RwSignal::new(Vec::<memlens_api::PlanModel>::new());
    spawn_local(async move {
        if let Ok(list) = crate::client::plan_models().await {
            models.set(list);
        }
    });
    let pick = move |name: String| {
        let name = name.trim().to_owned();
        settings.update(|p| {
            p.model = (!name.is_empty()).then_some(name);
            if p.model.is_some() {
                p.config = None;
            }
        });
    };
    view! {
        <label>"model "
            <input id="plan-model-preset" list="plan-model-presets" size="36"
                placeholder="pick one: llama-3.1-8b, qwen3-8b, mixtral-8x7b…"
                prop:value=move || settings.get().model.unwrap_or_default()
                on:change=move |e| pick(event_target_value(&e)) />
            <datalist id="plan-model-presets">
                {move || models.get().into_iter().map(|m| {
                    let label = format!("{} · {} · {:.2} B parameters", m.name, m.model_type, m.parameter_count as f64 / 1e9);
                    view! { <option value=m.id>{label}</option> }
                }).collect_view()}
            </datalist>
        </label>
    }
}
