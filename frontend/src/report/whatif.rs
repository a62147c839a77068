//! The what-if panel: the run's batch size and a scenario (batch size, activation checkpointing,
//! optimizer, ZeRO sharding, offload), answered by the server with the predicted peak and the
//! assumptions behind it; a link opens the Plan page calibrated by this run.

use leptos::prelude::*;
use leptos::task::spawn_local;
use memlens_api::{OptimizerKind, WhatIfDevice, WhatIfParams};

use super::state::ReportState;
use crate::client;
use crate::display::bytes;

fn number(v: &str) -> Option<u64> {
    v.trim().parse().ok().filter(|&n| n > 0)
}

#[component]
pub fn WhatIfPanel(st: ReportState) -> impl IntoView {
    let run_batch = RwSignal::new(String::new());
    let batch = RwSignal::new(String::new());
    let ckpt = RwSignal::new(false);
    let optimizer = RwSignal::new(String::new());
    let zero = RwSignal::new(0u8);
    let gpus = RwSignal::new("8".to_owned());
    let offload = RwSignal::new(false);
    let expandable = RwSignal::new(false);
    let answer = RwSignal::new(None::<Result<WhatIfDevice, String>>);
    let predict = move |_| {
        let params = WhatIfParams {
            file: Some(st.file.get_value()),
            device: Some(st.device.get_untracked()),
            run_batch_size: number(&run_batch.get_untracked()),
            batch_size: number(&batch.get_untracked()),
            activation_checkpointing: ckpt.get_untracked().then_some(true),
            optimizer: match optimizer.get_untracked().as_str() {
                "adam" => Some(OptimizerKind::Adam),
                "sgd_momentum" => Some(OptimizerKind::SgdMomentum),
                "sgd" => Some(OptimizerKind::Sgd),
                "none" => Some(OptimizerKind::None),
                _ => None,
            },
            zero_stage: Some(zero.get_untracked()).filter(|&z| z > 0),
            gpus: Some(zero.get_untracked())
                .filter(|&z| z > 0)
                .and_then(|_| number(&gpus.get_untracked())),
            optimizer_offload: offload.get_untracked().then_some(true),
            expandable_segments: expandable.get_untracked().then_some(true),
            ..WhatIfParams::default()
        };
        let id = st.id.get_value();
        spawn_local(async move {
            let r = client::whatif(&id, &params).await;
            answer.set(Some(match r {
                Ok(f) => f
                    .devices
                    .into_iter()
                    .next()
                    .ok_or_else(|| "no device in the answer".to_owned()),
                Err(e) => Err(e.message),
            }));
        });
    };
    view! {
        <section class="panel" id="whatif">
            <h2>"What if"</h2>
            <div class="whatif-form">
                <label>"run's batch " <input id="whatif-run-batch" type="number" min="1" size="4" prop:value=run_batch on:input=move |e| run_batch.set(event_target_value(&e)) /></label>
                <label>"batch " <input id="whatif-batch" type="number" min="1" size="4" prop:value=batch on:input=move |e| batch.set(event_target_value(&e)) />
                    <input id="whatif-batch-slider" type="range" min="1" max="256" step="1" prop:value=batch on:input=move |e| batch.set(event_target_value(&e)) />
                </label>
                <label><input id="whatif-ckpt" type="checkbox" on:change=move |e| ckpt.set(event_target_checked(&e)) />" activation checkpointing"</label>
                <label>"optimizer "
                    <select id="whatif-optimizer" on:change=move |e| optimizer.set(event_target_value(&e))>
                        <option value="">"as run"</option>
                        <option value="adam">"Adam/AdamW"</option>
                        <option value="sgd_momentum">"SGD + momentum"</option>
                        <option value="sgd">"SGD"</option>
                        <option value="none">"none"</option>
                    </select>
                </label>
                <label>"ZeRO "
                    <select id="whatif-zero" on:change=move |e| zero.set(event_target_value(&e).parse().unwrap_or(0))>
                        <option value="0">"off"</option>
                        <option value="1">"1"</option>
                        <option value="2">"2"</option>
                        <option value="3">"3"</option>
                    </select>
                    " over " <input type="number" min="1" size="3" prop:value=gpus on:input=move |e| gpus.set(event_target_value(&e)) /> " GPUs"
                </label>
                <label><input type="checkbox" on:change=move |e| offload.set(event_target_checked(&e)) />" offload optimizer"</label>
                <label><input type="checkbox" on:change=move |e| expandable.set(event_target_checked(&e)) />" expandable segments"</label>
                <button id="whatif-predict" on:click=predict>"Predict"</button>
                <a id="whatif-plan-link" href=move || client::plan_page(&memlens_api::PlanParams {
                    calibrate: Some(st.id.get_value()),
                    run_batch_size: number(&run_batch.get()),
                    batch_size: number(&batch.get()).or_else(|| number(&run_batch.get())),
                    ..memlens_api::PlanParams::default()
                })>"Plan batch, sequence and GPU from this run →"</a>
            </div>
            {move || answer.get().map(|a| match a {
                Ok(d) => view! {
                    <div id="whatif-result">
                        <p><b>{format!("peak {} → predicted {}", bytes(d.peak_allocated_bytes), bytes(d.predicted_peak_allocated_bytes))}</b>
                            {format!(" (reserved {})", bytes(d.predicted_peak_reserved_bytes))}</p>
                        <ul class="muted">{d.assumptions.iter().map(|a| view! { <li>{a.clone()}</li> }).collect_view()}</ul>
                    </div>
                }.into_any(),
                Err(e) => view! { <p class="error" id="whatif-result">{e}</p> }.into_any(),
            })}
        </section>
    }
}
