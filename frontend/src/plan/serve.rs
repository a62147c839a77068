//! The Plan page's Serving tab: a vLLM or SGLang server's startup planned before it runs. The
//! model (a bundled one by name, or a config pasted), the GPU, the engine and its settings
//! (`gpu_memory_utilization`, `max_model_len`, `max_num_seqs`, tensor parallelism, the KV
//! cache's and the weights' types) set the query; the answer leads with whether one request of
//! `max_model_len` fits, the longest and the most that do, then the GPU's budget stacked
//! (weights, activations, non-torch, CUDA graphs, KV cache, left free), the remedies and the
//! assumptions.

use leptos::prelude::*;
use memlens_api::{KvCacheDtype, PlanParams, ServingEngine, ServingPlan, WeightsDtype};

use crate::display::bytes;

/// GPU memory choices as PyTorch reports them (GiB, two decimals): 24 GB cards, L4, A100 40 GB,
/// L40S, A100/H100 80 GB, H200.
const GPUS: [(&str, f64); 7] = [
    ("RTX 3090 / 4090 (23.58 GiB)", 23.58),
    ("L4 (22.05 GiB)", 22.05),
    ("A100 40 GB (39.39 GiB)", 39.39),
    ("L40S (44.4 GiB)", 44.4),
    ("A100 / H100 80 GB (79.22 GiB)", 79.22),
    ("H200 (139.8 GiB)", 139.8),
    ("B200 (178.35 GiB)", 178.35),
];

fn positive(v: &str) -> Option<u64> {
    v.trim().parse().ok().filter(|&n| n > 0)
}

fn enum_of<T: serde::de::DeserializeOwned>(v: &str) -> Option<T> {
    serde_json::from_value(serde_json::Value::String(v.to_owned())).ok()
}

fn name_of<T: serde::Serialize>(v: &Option<T>, default: &str) -> String {
    v.as_ref()
        .and_then(|v| serde_json::to_value(v).ok())
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| default.to_owned())
}

/// The model: a bundled one by name (the same picker as the training tab's, which is not shown
/// beside this one), or a config pasted.
#[component]
fn ModelPicker(settings: RwSignal<PlanParams>) -> impl IntoView {
    let paste = move |text: String| {
        // The URL carries the config: compacted, as the training tab keeps it.
        let compact = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| serde_json::to_string(&v).ok());
        settings.update(|p| {
            p.config = compact;
            if p.config.is_some() {
                p.model = None;
            }
        });
    };
    view! {
        <div class="plan-config">
            <super::preset_picker::PresetPicker settings=settings />
            <label>" or config.json "
                <textarea id="plan-serve-config" rows="2" cols="60" placeholder="paste the model's config.json here"
                    prop:value=move || settings.get().config.unwrap_or_default()
                    on:change=move |e| paste(event_target_value(&e))></textarea>
            </label>
        </div>
    }
}

/// The serving settings' knobs.
#[component]
pub fn ServeForm(settings: RwSignal<PlanParams>) -> impl IntoView {
    let number = move |get: fn(&PlanParams) -> Option<u64>| {
        move || get(&settings.get()).map(|n| n.to_string()).unwrap_or_default()
    };
    let gib = move || {
        settings
            .get()
            .gpu_memory_bytes
            .map(|b| format!("{:.2}", b as f64 / (1u64 << 30) as f64))
            .unwrap_or_default()
    };
    let set_gib = move |v: String| {
        settings.update(|p| {
            p.gpu_memory_bytes = v
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|g| *g > 0.0)
                .map(|g| (g * (1u64 << 30) as f64).round() as i64)
        })
    };
    view! {
        <div id="plan-serve-form" class="panel whatif-form">
            <ModelPicker settings=settings />
            <label>"engine "
                <select id="plan-engine" prop:value=move || name_of(&settings.get().engine, "vllm")
                    on:change=move |e| settings.update(|p| p.engine = enum_of::<ServingEngine>(&event_target_value(&e)))>
                    <option value="vllm">"vLLM"</option><option value="sglang">"SGLang"</option>
                </select>
                " version " <input id="plan-engine-version" type="text" size="7" placeholder="newest"
                    prop:value=move || settings.get().engine_version.unwrap_or_default()
                    on:change=move |e| settings.update(|p| p.engine_version = Some(event_target_value(&e).trim().to_owned()).filter(|v| !v.is_empty())) />
            </label>
            <label>"GPU memory (GiB) " <input id="plan-serve-gpu" type="number" min="1" step="0.01" size="7" list="plan-serve-gpus"
                prop:value=gib on:change=move |e| set_gib(event_target_value(&e)) />
                <datalist id="plan-serve-gpus">
                    {GPUS.iter().map(|(label, g)| view! { <option value=format!("{g:.2}")>{*label}</option> }).collect_view()}
                </datalist>
            </label>
            <label>"utilization " <input id="plan-utilization" type="number" min="0.05" max="1" step="0.01" size="5"
                placeholder="0.90"
                prop:value=move || settings.get().gpu_memory_utilization.map(|u| u.to_string()).unwrap_or_default()
                on:change=move |e| settings.update(|p| p.gpu_memory_utilization = event_target_value(&e).trim().parse().ok().filter(|u: &f64| *u > 0.0 && *u <= 1.0)) />
            </label>
            <label>"max_model_len " <input id="plan-max-model-len" type="number" min="1" size="7" placeholder="the model's context"
                prop:value=number(|p| p.max_model_len)
                on:change=move |e| settings.update(|p| p.max_model_len = positive(&event_target_value(&e))) />
            </label>
            <label>"max_num_seqs " <input id="plan-max-num-seqs" type="number" min="1" size="5" placeholder="default"
                prop:value=number(|p| p.max_num_seqs)
                on:change=move |e| settings.update(|p| p.max_num_seqs = positive(&event_target_value(&e))) />
            </label>
            <label>"tensor parallel " <input id="plan-tp" type="number" min="1" size="3" placeholder="1"
                prop:value=number(|p| p.tp)
                on:change=move |e| settings.update(|p| p.tp = positive(&event_target_value(&e))) />
            </label>
            <label>"KV cache "
                <select id="plan-kv-dtype" prop:value=move || name_of(&settings.get().kv_cache_dtype, "auto")
                    on:change=move |e| settings.update(|p| p.kv_cache_dtype = enum_of::<KvCacheDtype>(&event_target_value(&e)))>
                    <option value="auto">"auto (the weights' 16 bits)"</option><option value="fp8">"fp8"</option>
                </select>
            </label>
            <label>"weights "
                <select id="plan-serve-weights" prop:value=move || name_of(&settings.get().weights, "bf16")
                    on:change=move |e| settings.update(|p| p.weights = enum_of::<WeightsDtype>(&event_target_value(&e)))>
                    <option value="bf16">"bf16"</option><option value="fp16">"fp16"</option>
                    <option value="fp8">"fp8"</option><option value="int4">"int4 (GPTQ, AWQ)"</option>
                </select>
            </label>
        </div>
    }
}

/// The GPU's budget stacked: each term's width its share of the GPU, the rest left free.
fn budget_bar(p: &ServingPlan) -> impl IntoView {
    let s = &p.serving;
    let total = s.total_gpu_memory_bytes.unwrap_or(0).max(1) as f64;
    let terms = [
        ("weights", s.weights_bytes, "#1f77b4"),
        ("activation peak", s.activation_peak_bytes, "#ff7f0e"),
        ("non-torch", s.non_torch_bytes, "#555"),
        ("CUDA graphs", s.cuda_graph_bytes, "#9467bd"),
        ("KV cache", s.kv_cache_bytes, "#2ca02c"),
    ];
    let used: i64 = terms.iter().filter_map(|(_, b, _)| *b).map(|b| b.max(0)).sum();
    let free = s.total_gpu_memory_bytes.unwrap_or(0) - used;
    let pct = move |b: i64| format!("{:.3}%", 100.0 * b.max(0) as f64 / total);
    let segments: Vec<_> = terms
        .iter()
        .filter_map(|(name, b, colour)| b.map(|b| (name, b, colour)))
        .map(|(name, b, colour)| {
            view! { <div class="plan-seg" data-term=*name title=format!("{name}: {}", bytes(b)) style=format!("width:{};background:{colour}", pct(b))></div> }
        })
        .collect();
    let legend: Vec<_> = terms
        .iter()
        .filter_map(|(name, b, colour)| b.map(|b| (name, b, colour)))
        .map(|(name, b, colour)| {
            view! { <span><span class="swatch" style=format!("background:{colour}")></span>{format!("{name} {} ", bytes(b))}</span> }
        })
        .collect();
    view! {
        <div class="panel">
            <div id="plan-serve-bar" class="plan-bar" class:over=!p.fits_max_model_len>
                {segments}
                <div class="plan-seg" data-term="free" title=format!("left free: {}", bytes(free)) style=format!("width:{};background:#eee", pct(free))></div>
            </div>
            <p class="muted plan-legend">{legend}<span>{format!("left free {}", bytes(free))}</span></p>
        </div>
    }
}

/// The serving plan: fits or not first, the longest and the most that fit, the budget, the
/// remedies, the assumptions.
pub fn serving_view(p: ServingPlan) -> impl IntoView {
    let s = p.serving.clone();
    let len = s.max_model_len.unwrap_or(0);
    let lead = format!(
        "{} max_model_len {len}: {}",
        if p.fits_max_model_len { "Fits" } else { "Does not fit" },
        s.verdict
    );
    let largest = format!(
        "longest max_model_len that fits: {} tokens · requests of {len} tokens at once: {}{}",
        p.largest_max_model_len,
        p.largest_concurrency,
        s.kv_cache_tokens
            .map(|t| format!(" · KV cache: {t} tokens"))
            .unwrap_or_default()
    );
    let remedies = s.failure.as_ref().map(|f| {
        view! { <ul id="plan-serve-remedies">{f.remedies.iter().map(|r| view! { <li>{r.note.clone()}</li> }).collect_view()}</ul> }
    });
    view! {
        <p id="plan-serve-verdict" class="lead" class:oom=!p.fits_max_model_len>{lead}</p>
        <p id="plan-serve-largest"><b>{largest}</b></p>
        {remedies}
        {budget_bar(&p)}
        {p.calibrated_from.clone().map(|c| view! { <p class="muted">{format!("calibrated by {c}")}</p> })}
        <ul id="plan-serve-assumptions" class="muted">{s.notes.iter().map(|a| view! { <li>{a.clone()}</li> }).collect_view()}</ul>
    }
}
