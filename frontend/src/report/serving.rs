//! A vLLM or SGLang startup log's report: its verdict first, the GPU's budget drawn stacked
//! (weights, the profile run's activations, memory outside PyTorch, CUDA graphs, the KV cache,
//! what was left free), what the KV cache holds, and, when the server did not start, each
//! remedy with its number.

use leptos::prelude::*;
use memlens_api::ServingSummary;

use crate::display::bytes;

/// A closed set's wire name (`lower_max_model_len`), as other tools read it.
fn wire<T: serde::Serialize>(t: &T) -> String {
    serde_json::to_value(t)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The budget's parts, each with its colour, then what was left free of the whole GPU.
fn parts(v: &ServingSummary) -> Vec<(&'static str, &'static str, i64)> {
    let mut out: Vec<(&'static str, &'static str, i64)> = [
        ("weights", "#4c72b0", v.weights_bytes),
        ("activation peak", "#dd8452", v.activation_peak_bytes),
        ("non-torch", "#a0a4ab", v.non_torch_bytes),
        ("CUDA graphs", "#8172b2", v.cuda_graph_bytes),
        ("KV cache", "#937860", v.kv_cache_bytes),
    ]
    .into_iter()
    .filter_map(|(name, colour, b)| b.filter(|b| *b > 0).map(|b| (name, colour, b)))
    .collect();
    if let Some(total) = v.total_gpu_memory_bytes {
        let used: i64 = out.iter().map(|p| p.2).sum();
        if total > used {
            out.push(("left free", "#eef0f3", total - used));
        }
    }
    out
}

fn budget_bar(v: &ServingSummary) -> Option<impl IntoView> {
    let parts = parts(v);
    let whole: i64 = parts.iter().map(|p| p.2).sum();
    (whole > 0).then(|| {
        let segments = parts
            .iter()
            .map(|(name, colour, b)| {
                let pct = *b as f64 * 100.0 / whole as f64;
                view! { <div class="budget-part" style:width=format!("{pct:.2}%") style:background=*colour title=format!("{name}: {}", bytes(*b))></div> }
            })
            .collect_view();
        let legend = parts
            .iter()
            .map(|(name, colour, b)| view! { <li><span class="swatch" style:background=*colour></span>{format!("{name} {}", bytes(*b))}</li> })
            .collect_view();
        view! {
            <div class="budget-bar" id="serving-budget">{segments}</div>
            <ul class="budget plan-legend">{legend}</ul>
        }
    })
}

fn facts(v: &ServingSummary) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(t) = v.kv_cache_tokens {
        out.push(format!(
            "KV cache: {t} tokens{}{}",
            v.kv_cache_blocks.map(|n| format!(" in {n} blocks")).unwrap_or_default(),
            v.kv_bytes_per_token
                .map(|p| format!(", {} a token", bytes(p)))
                .unwrap_or_default()
        ));
    }
    if let (Some(c), Some(t)) = (v.max_concurrency, v.concurrency_tokens) {
        out.push(format!("{c:.2}× requests of {t} tokens at once"));
    }
    let settings: Vec<String> = [
        v.version.as_ref().map(|x| format!("version {x}")),
        v.model.clone(),
        v.tensor_parallel_size.map(|t| format!("tensor parallel {t}")),
        v.dtype.as_ref().map(|d| format!("dtype {d}")),
        v.kv_cache_dtype.as_ref().map(|d| format!("KV cache dtype {d}")),
        v.gpu_memory_utilization.map(|u| format!("gpu_memory_utilization {u}")),
        v.mem_fraction_static.map(|m| format!("mem_fraction_static {m}")),
        v.max_model_len.map(|l| format!("max_model_len {l}")),
        v.max_num_seqs.map(|n| format!("max_num_seqs {n}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !settings.is_empty() {
        out.push(format!("{}: {}", v.engine.label(), settings.join(" · ")));
    }
    out
}

#[component]
pub fn ServingSection(serving: ServingSummary) -> impl IntoView {
    let v = serving;
    let failure = v.failure.clone();
    view! {
        <section class="verdict" class:alert=failure.is_some() id="verdict">
            <p class="verdict-text" id="serving-verdict">{v.verdict.clone()}</p>
        </section>
        <section class="panel" id="serving">
            <h2>{format!("{} startup: the GPU's budget", v.engine.label())}</h2>
            {budget_bar(&v)}
            <ul class="groups">{facts(&v).into_iter().map(|f| view! { <li>{f}</li> }).collect_view()}</ul>
            {failure.map(|f| view! {
                <h2>{format!("Why it stopped: {}", wire(&f.cause))}</h2>
                <p class="muted">{format!("line {}: {}", f.line, f.message)}</p>
                <ol class="remedies" id="serving-remedies">
                    {f.remedies.iter().map(|r| view! {
                        <li><code>{wire(&r.action)}</code>{format!(" — {}", r.note)}</li>
                    }).collect_view()}
                </ol>
            })}
            {v.notes.iter().map(|n| view! { <p class="muted source-note">{n.clone()}</p> }).collect_view()}
        </section>
    }
}
