//! The Plan page `/plan?…`: will a training run fit before it runs? A bundled model is picked by
//! name, or a model's config.json pasted or dropped, the run's knobs set with sliders ([`form`]), and the server's plan drawn:
//! the verdict first (fits or not, the largest batch and sequence, and the single changes that
//! would make it fit, each one click away), the budget stacked by
//! category against the GPU's memory ([`bar`]), then the assumptions. The URL holds every
//! setting, the config included, so a plan is shared like a report; a report's what-if panel
//! links here with `calibrate` set to its run. Its Serving tab ([`serve`], `serve=true` in the
//! URL) plans a vLLM or SGLang server's startup instead.

mod bar;
mod form;
mod preset_picker;
mod serve;

use leptos::prelude::*;
use leptos::task::spawn_local;
use memlens_api::{Plan, PlanParams};

use crate::client;
use crate::display::bytes;

/// The settings the page was opened with.
fn params_from_url() -> PlanParams {
    let search = web_sys::window()
        .and_then(|w| w.location().search().ok())
        .unwrap_or_default();
    serde_urlencoded::from_str(search.trim_start_matches('?')).unwrap_or_default()
}

/// The page's address follows its settings (replaced, not pushed: one history entry).
fn follow_in_url(p: &PlanParams) {
    if let Some(h) = web_sys::window().and_then(|w| w.history().ok()) {
        let _ = h.replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&client::plan_page(p)));
    }
}

/// The plan's verdict, capitalised as the page's lead.
fn verdict(p: &Plan) -> String {
    let v = p.verdict();
    let mut c = v.chars();
    c.next().map(|f| f.to_uppercase().chain(c).collect()).unwrap_or(v)
}

fn largest(p: &Plan) -> Option<String> {
    let b = p.max_batch_size?;
    let s = p.max_seq_len.unwrap_or(0);
    Some(if b == 0 && s == 0 {
        "not even one sequence of one token fits: shard the model (ZeRO), freeze it (LoRA) or use smaller weights"
            .into()
    } else {
        format!(
            "largest batch at {} tokens: {b} · longest sequence at batch {}: {s} tokens",
            p.seq_len, p.batch_size
        )
    })
}

/// What single change would make a plan that does not fit fit, each a link to that plan.
fn alternatives(p: &Plan, settings: RwSignal<PlanParams>) -> Option<impl IntoView> {
    (!p.alternatives.is_empty()).then(|| {
        let items: Vec<_> = p
            .alternatives
            .iter()
            .map(|a| {
                let a = a.clone();
                let text = format!(
                    "{} {}: {} reserved",
                    if a.fits { "Fits with" } else { "Still over with" },
                    a.label,
                    bytes(a.predicted_peak_reserved_bytes)
                );
                let href = client::plan_page(&a.applied_to(&settings.get_untracked()));
                let fits = a.fits;
                let apply = move |e: leptos::ev::MouseEvent| {
                    e.prevent_default();
                    settings.update(|p| *p = a.applied_to(p));
                };
                view! { <li class:fits=fits><a href=href on:click=apply>{text}</a></li> }
            })
            .collect();
        view! { <ul id="plan-alternatives">{items}</ul> }
    })
}

fn plan_view(p: Plan, settings: RwSignal<PlanParams>) -> impl IntoView {
    let rows: Vec<_> = p
        .by_category
        .iter()
        .map(|c| {
            view! { <tr data-category=c.category.name()><td>{c.category.name()}</td><td class="num">{bytes(c.bytes)}</td></tr> }
        })
        .collect();
    view! {
        <p id="plan-verdict" class="lead" class:oom=p.fits == Some(false)>{verdict(&p)}</p>
        {largest(&p).map(|l| view! { <p id="plan-largest"><b>{l}</b></p> })}
        {alternatives(&p, settings)}
        <p id="plan-model" class="muted">{format!(
            "{:?} · {} · batch {} × {} tokens · peak at {}{}",
            p.model_family,
            if p.parameter_count > 0 {
                format!("{} parameters ({} trainable)", p.parameter_count, p.trainable_parameter_count)
            } else {
                "parameters not counted (no config.json)".to_owned()
            },
            p.batch_size, p.seq_len, p.peak_phase.label(),
            p.calibrated_from.as_ref().map(|c| format!(" · calibrated by {c}")).unwrap_or_default()
        )}</p>
        <bar::BudgetBar plan=p.clone() />
        <table id="plan-budget" class="table"><thead><tr><th>"at the peak"</th><th>"bytes"</th></tr></thead><tbody>{rows}</tbody></table>
        <ul id="plan-assumptions" class="muted">{p.assumptions.iter().map(|a| view! { <li>{a.clone()}</li> }).collect_view()}</ul>
    }
}

#[component]
pub fn PlanPage() -> impl IntoView {
    let settings = RwSignal::new(params_from_url());
    let answer = RwSignal::new(None::<Result<Plan, String>>);
    let serving = RwSignal::new(None::<Result<memlens_api::ServingPlan, String>>);
    // A memo: the forms are drawn again when the tab changes, not at every setting.
    let serve_tab = Memo::new(move |_| settings.get().serve == Some(true));
    // Each change of the settings asks again; only the latest answer is shown.
    let asked = StoredValue::new(0u64);
    Effect::new(move |_| {
        let p = settings.get();
        follow_in_url(&p);
        if p.config.is_none() && p.model.is_none() && p.params.is_none() && p.calibrate.is_none() {
            answer.set(None);
            serving.set(None);
            return;
        }
        let n = asked.get_value() + 1;
        asked.set_value(n);
        if p.serve == Some(true) {
            spawn_local(async move {
                let r = client::serving_plan(&p).await.map_err(|e| e.message);
                if asked.get_value() == n {
                    serving.set(Some(r));
                }
            });
            return;
        }
        spawn_local(async move {
            let r = client::plan(&p).await.map_err(|e| e.message);
            if asked.get_value() == n {
                answer.set(Some(r));
            }
        });
    });
    view! {
        <main class="report plan" id="plan">
            <h1>"Plan: will it fit?"</h1>
            <p id="plan-tabs" class="tabs">
                <button id="plan-tab-training" class:active=move || !serve_tab.get()
                    on:click=move |_| settings.update(|p| p.serve = None)>"Training"</button>
                <button id="plan-tab-serving" class:active=move || serve_tab.get()
                    on:click=move |_| settings.update(|p| {
                        p.serve = Some(true);
                        // A serving plan needs the GPU's memory: an 80 GB card until one is given.
                        p.gpu_memory_bytes.get_or_insert(80 << 30);
                    })>"Serving"</button>
            </p>
            {move || if serve_tab.get() {
                view! { <serve::ServeForm settings=settings /> }.into_any()
            } else {
                view! { <form::PlanForm settings=settings /> }.into_any()
            }}
            {move || serve_tab.get().then(|| match serving.get() {
                None => view! { <p id="plan-serve-waiting" class="muted">"Pick a model and give the GPU's memory to see what a vLLM or SGLang server would hold."</p> }.into_any(),
                Some(Err(e)) => view! { <p class="error" id="plan-error">{e}</p> }.into_any(),
                Some(Ok(p)) => serve::serving_view(p).into_any(),
            })}
            {move || (!serve_tab.get()).then(|| match answer.get() {
                None => view! { <p id="plan-waiting" class="muted">"Paste or drop a model's config.json (from its Hugging Face page) to see its memory."</p> }.into_any(),
                Some(Err(e)) => view! { <p class="error" id="plan-error">{e}</p> }.into_any(),
                Some(Ok(p)) => plan_view(p, settings).into_any(),
            })}
        </main>
    }
}
