//! The Plan page's knobs: the model (a bundled one picked by name in a searchable list, or a
//! config pasted, chosen or dropped), batch and sequence sliders,
//! optimizer, weights (nf4 for QLoRA), autocast, checkpointing, LoRA (rank and targets), the
//! parameters that train (globs), gradient accumulation, ZeRO, offload, the GPU's memory, and for
//! a calibrated plan the calibrating run's batch and sequence. Every change rewrites the
//! settings the page plans from.

use leptos::prelude::*;
use leptos::task::spawn_local;
use memlens_api::{AutocastDtype, PlanOptimizer, PlanParams, WeightsDtype};
use wasm_bindgen_futures::JsFuture;

/// GPU memory choices (GiB): consumer cards, A100/H100 40 and 80, H100 NVL, H200.
const GPUS: [(&str, u64); 8] = [
    ("none", 0),
    ("16 GiB", 16),
    ("24 GiB", 24),
    ("40 GiB", 40),
    ("48 GiB", 48),
    ("80 GiB", 80),
    ("94 GiB", 94),
    ("141 GiB", 141),
];

/// A config's text compacted (the URL carries it): parsed and written back without spaces.
fn compact(text: &str) -> Result<String, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    serde_json::to_string(&v).map_err(|e| e.to_string())
}

fn positive(v: &str) -> Option<u64> {
    v.trim().parse().ok().filter(|&n| n > 0)
}

/// A text setting: blank is unset.
fn text(v: &str) -> Option<String> {
    Some(v.trim().to_owned()).filter(|t| !t.is_empty())
}

fn enum_of<T: serde::de::DeserializeOwned>(v: &str) -> Option<T> {
    serde_json::from_value(serde_json::Value::String(v.to_owned())).ok()
}

/// The wire name of a setting, or of its default when unset (what the plan then assumes).
fn name_of<T: serde::Serialize + Default>(v: &Option<T>) -> String {
    serde_json::to_value(v.as_ref().unwrap_or(&T::default()))
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

#[component]
pub fn PlanForm(settings: RwSignal<PlanParams>) -> impl IntoView {
    let problem = RwSignal::new(None::<String>);
    let set_config = move |text: String| match compact(&text) {
        Ok(c) => {
            problem.set(None);
            settings.update(|p| {
                p.config = Some(c);
                p.model = None;
            });
        }
        Err(e) => problem.set(Some(format!("config.json: {e}"))),
    };
    let read_file = move |file: web_sys::File| {
        spawn_local(async move {
            if let Ok(t) = JsFuture::from(file.text()).await {
                set_config(t.as_string().unwrap_or_default());
            }
        });
    };
    let on_drop = move |e: web_sys::DragEvent| {
        e.prevent_default();
        if let Some(f) = e.data_transfer().and_then(|d| d.files()).and_then(|f| f.get(0)) {
            read_file(f);
        }
    };
    let on_choose = move |e: leptos::ev::Event| {
        let input: web_sys::HtmlInputElement = event_target(&e);
        if let Some(f) = input.files().and_then(|f| f.get(0)) {
            read_file(f);
        }
    };
    let number = move |get: fn(&PlanParams) -> Option<u64>| {
        move || get(&settings.get()).map(|n| n.to_string()).unwrap_or_default()
    };
    view! {
        <div id="plan-form" class="panel whatif-form">
            <div class="plan-config" on:dragover=|e: web_sys::DragEvent| e.prevent_default() on:drop=on_drop>
                <super::preset_picker::PresetPicker settings=settings />
                <label>" or config.json "
                    <textarea id="plan-config" rows="3" cols="60" placeholder="paste the model's config.json here, or drop the file"
                        prop:value=move || settings.get().config.unwrap_or_default()
                        on:change=move |e| set_config(event_target_value(&e))></textarea>
                </label>
                <input id="plan-config-file" type="file" accept=".json,application/json" on:change=on_choose />
                {move || problem.get().map(|p| view! { <p class="error" id="plan-config-error">{p}</p> })}
            </div>
            <label>"batch " <input id="plan-batch" type="number" min="1" size="4" prop:value=number(|p| p.batch_size)
                on:input=move |e| settings.update(|p| p.batch_size = positive(&event_target_value(&e))) />
                <input id="plan-batch-slider" type="range" min="1" max="256" prop:value=number(|p| p.batch_size)
                on:input=move |e| settings.update(|p| p.batch_size = positive(&event_target_value(&e))) />
            </label>
            <label>"sequence " <input id="plan-seq" type="number" min="1" size="6" prop:value=number(|p| p.seq_len)
                on:input=move |e| settings.update(|p| p.seq_len = positive(&event_target_value(&e))) />
                <input id="plan-seq-slider" type="range" min="128" max="32768" step="128" prop:value=number(|p| p.seq_len)
                on:input=move |e| settings.update(|p| p.seq_len = positive(&event_target_value(&e))) />
            </label>
            <label>"optimizer "
                <select id="plan-optimizer" prop:value=move || name_of(&settings.get().optimizer)
                    on:change=move |e| settings.update(|p| p.optimizer = enum_of::<PlanOptimizer>(&event_target_value(&e)))>
                    <option value="adamw">"AdamW"</option><option value="adam">"Adam"</option>
                    <option value="sgd_momentum">"SGD + momentum"</option><option value="sgd">"SGD"</option>
                    <option value="adafactor">"Adafactor"</option><option value="adamw_8bit">"AdamW 8-bit"</option>
                </select>
            </label>
            <label>"weights "
                <select id="plan-weights" prop:value=move || name_of(&settings.get().weights)
                    on:change=move |e| settings.update(|p| p.weights = enum_of::<WeightsDtype>(&event_target_value(&e)))>
                    <option value="fp32">"fp32"</option><option value="bf16">"bf16"</option><option value="fp16">"fp16"</option>
                    <option value="nf4">"nf4 (QLoRA, with a LoRA rank)"</option>
                </select>
            </label>
            <label>"autocast "
                <select id="plan-autocast" prop:value=move || name_of(&settings.get().autocast)
                    on:change=move |e| settings.update(|p| p.autocast = enum_of::<AutocastDtype>(&event_target_value(&e)))>
                    <option value="bf16">"bf16"</option><option value="fp16">"fp16"</option><option value="none">"none"</option>
                </select>
            </label>
            <label><input id="plan-ckpt" type="checkbox" prop:checked=move || settings.get().checkpointing == Some(true)
                on:change=move |e| settings.update(|p| p.checkpointing = event_target_checked(&e).then_some(true)) />" activation checkpointing"</label>
            <label>"LoRA rank " <input id="plan-lora" type="number" min="0" size="3" prop:value=number(|p| p.lora_rank)
                on:input=move |e| settings.update(|p| p.lora_rank = positive(&event_target_value(&e))) /></label>
            <label>" on " <input id="plan-lora-targets" type="text" size="24" placeholder="peft's default targets"
                prop:value=move || settings.get().lora_targets.unwrap_or_default()
                on:change=move |e| settings.update(|p| p.lora_targets = text(&event_target_value(&e)))
                prop:disabled=move || settings.get().lora_rank.is_none() /></label>
            <label>"train only " <input id="plan-train" type="text" size="28" placeholder="model.layers.6.*,lm_head.weight"
                prop:value=move || settings.get().train.unwrap_or_default()
                on:change=move |e| settings.update(|p| p.train = text(&event_target_value(&e))) /></label>
            <label>"gradient accumulation " <input id="plan-accum" type="number" min="1" size="3" prop:value=number(|p| p.grad_accum_steps)
                on:input=move |e| settings.update(|p| p.grad_accum_steps = positive(&event_target_value(&e)).filter(|&n| n > 1)) /></label>
            <label>"ZeRO "
                <select id="plan-zero" prop:value=move || settings.get().zero_stage.unwrap_or(0).to_string()
                    on:change=move |e| settings.update(|p| p.zero_stage = event_target_value(&e).parse().ok().filter(|&z: &u8| z > 0))>
                    <option value="0">"off"</option><option value="1">"1"</option><option value="2">"2"</option><option value="3">"3"</option>
                </select>
                " over " <input id="plan-gpus" type="number" min="1" size="3" prop:value=number(|p| p.gpus)
                on:input=move |e| settings.update(|p| p.gpus = positive(&event_target_value(&e))) /> " GPUs"
            </label>
            <label><input id="plan-offload" type="checkbox" prop:checked=move || settings.get().optimizer_offload == Some(true)
                on:change=move |e| settings.update(|p| p.optimizer_offload = event_target_checked(&e).then_some(true)) />" offload optimizer"</label>
            <label>"GPU "
                <select id="plan-gpu" prop:value=move || (settings.get().gpu_memory_bytes.unwrap_or(0) >> 30).to_string()
                    on:change=move |e| settings.update(|p| p.gpu_memory_bytes = event_target_value(&e).parse::<i64>().ok().filter(|&g| g > 0).map(|g| g << 30))>
                    {GPUS.iter().map(|(label, gib)| view! { <option value=gib.to_string()>{*label}</option> }).collect_view()}
                </select>
            </label>
            {move || settings.get().calibrate.map(|c| view! {
                <p id="plan-calibration">{format!("calibrated by the run of report {c}: its batch ")}
                    <input id="plan-run-batch" type="number" min="1" size="4" prop:value=number(|p| p.run_batch_size)
                        on:input=move |e| settings.update(|p| p.run_batch_size = positive(&event_target_value(&e))) />
                    " × sequence "
                    <input id="plan-run-seq" type="number" min="1" size="6" prop:value=number(|p| p.run_seq_len)
                        on:input=move |e| settings.update(|p| p.run_seq_len = positive(&event_target_value(&e))) />
                    <label><input type="checkbox" prop:checked=move || settings.get().run_checkpointing == Some(true)
                        on:change=move |e| settings.update(|p| p.run_checkpointing = event_target_checked(&e).then_some(true)) />" it used checkpointing"</label>
                    " "<button id="plan-uncalibrate" on:click=move |_| settings.update(|p| p.calibrate = None)>"plan from the formula"</button>
                </p>
            })}
        </div>
    }
}
