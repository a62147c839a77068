//! The report of a text a person was left with (an OOM message, a training log, a memory
//! summary, a vLLM or SGLang startup log): no trace to draw, so the page is its verdict (a
//! serving log's leads), each OOM's figures and remedies, the memory summary's counters, and
//! the code that captures a snapshot next time.

use leptos::prelude::*;
use memlens_api::{DeviceSummary, FileSummary, MemorySummaryFacts, OomExplanation, SummaryRow};

use crate::display::bytes;

/// A closed set's wire name (`smaller_batch`, `cuda`), as other tools read it.
fn wire<T: serde::Serialize>(t: &T) -> String {
    serde_json::to_value(t)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn oom_item(o: &OomExplanation) -> impl IntoView {
    let t = o.text.clone();
    let mut facts: Vec<String> = vec![format!("requested {}", bytes(o.requested_bytes))];
    if let Some(a) = o.allowed_bytes {
        facts.push(format!("cap {}", bytes(a)));
    }
    if let Some(t) = o.device_total_bytes {
        facts.push(format!("device {}", bytes(t)));
    }
    if let Some(f) = o.device_free_bytes {
        facts.push(format!("free {}", bytes(f)));
    }
    facts.push(format!("reserved {}", bytes(o.reserved_bytes)));
    facts.push(format!("allocated {}", bytes(o.allocated_bytes)));
    if let Some(n) = o.non_pytorch_bytes.filter(|n| *n > 0) {
        facts.push(format!("outside PyTorch {}", bytes(n)));
    }
    if let Some(g) = o.private_pool_bytes {
        facts.push(format!("private pools {}", bytes(g)));
    }
    let where_ = t
        .as_ref()
        .map(|t| {
            format!(
                "line {}{}{} · {}",
                t.line,
                t.rank.map(|r| format!(" · rank {r}")).unwrap_or_default(),
                t.exception.as_ref().map(|e| format!(" · {e}")).unwrap_or_default(),
                wire(&t.backend)
            )
        })
        .unwrap_or_default();
    view! {
        <li class="oom-text">
            <b>{format!("{} · {}", o.cause, o.phase.describe())}</b>
            <span class="muted">{format!(" — {where_}")}</span>
            <p>{facts.join(" · ")}</p>
            {(!o.processes.is_empty()).then(|| view! {
                <p class="processes">{o.processes.iter().map(|p| match (p.this_process, p.pid) {
                    (true, _) => format!("this process {}", bytes(p.bytes)),
                    (false, Some(pid)) => format!("process {pid} {}", bytes(p.bytes)),
                    (false, None) => format!("a process {}", bytes(p.bytes)),
                }).collect::<Vec<_>>().join(" · ")}</p>
            })}
            <ol class="remedies">
                {o.remedies.iter().map(|r| view! {
                    <li><code>{wire(&r.action)}</code>
                        {(r.saves_bytes > 0).then(|| format!(" ({})", bytes(r.saves_bytes)))}
                        {format!(" — {}", r.note)}</li>
                }).collect_view()}
            </ol>
            {(!o.stack.is_empty()).then(|| view! {
                <details><summary>"traceback"</summary><ol class="stack">{o.stack.iter().map(|f| view! { <li>{f.clone()}</li> }).collect_view()}</ol></details>
            })}
        </li>
    }
}

fn row(name: &'static str, r: Option<SummaryRow>, counts: bool) -> Option<impl IntoView> {
    let r = r?;
    let cell = move |v: i64| if counts { v.to_string() } else { bytes(v) };
    Some(view! {
        <tr><td>{name}</td><td>{cell(r.current)}</td><td>{cell(r.peak)}</td><td>{cell(r.allocated)}</td><td>{cell(r.freed)}</td></tr>
    })
}

fn summary_table(s: &MemorySummaryFacts) -> impl IntoView {
    view! {
        <table class="memory-summary" id="memory-summary">
            <tr><th>"metric"</th><th>"current"</th><th>"peak"</th><th>"allocated"</th><th>"freed"</th></tr>
            {row("allocated", s.allocated, false)}
            {row("active", s.active, false)}
            {row("requested", s.requested, false)}
            {row("reserved", s.reserved, false)}
            {row("non-releasable", s.non_releasable, false)}
            {row("allocations", s.allocations, true)}
            {row("segments", s.segments, true)}
        </table>
        <p class="muted">{format!("CUDA OOMs {} · cudaMalloc retries {} (printed values, rounded down in their unit)", s.num_ooms, s.num_alloc_retries)}</p>
    }
}

fn device_section(d: &DeviceSummary) -> impl IntoView {
    view! {
        <section class="panel">
            <h2>{memlens_api::device_label(d.device)}</h2>
            {(!d.ooms.is_empty()).then(|| view! { <ul class="groups" id="text-ooms">{d.ooms.iter().map(oom_item).collect_view()}</ul> })}
            {d.memory_summary.as_ref().map(summary_table)}
        </section>
    }
}

#[component]
pub fn TextReportView(file: FileSummary) -> impl IntoView {
    let first = file
        .focus_device
        .and_then(|f| file.devices.iter().find(|d| d.device == f))
        .or(file.devices.first())
        .cloned();
    let capture = file
        .devices
        .iter()
        .flat_map(|d| d.ooms.iter())
        .find_map(|o| o.text.as_ref().map(|t| t.capture_next_time.clone()));
    view! {
        <main class="report" id="report">
            <div class="report-head"><h1 id="report-title">{file.file.clone()}</h1></div>
            {file.serving.clone().map(|serving| view! { <super::serving::ServingSection serving=serving /> })}
            {first.filter(|_| file.serving.is_none()).map(|d| view! {
                <section class="verdict" class:alert=!d.ooms.is_empty() id="verdict">
                    <p class="verdict-text">{d.verdict.clone()}</p>
                </section>
            })}
            {file.devices.iter().map(device_section).collect_view()}
            {file.source.notes.iter().map(|n| view! { <p class="muted source-note">{n.clone()}</p> }).collect_view()}
            {capture.map(|c| view! {
                <section class="panel" id="capture-next-time">
                    <h2>"Next time, capture a snapshot"</h2>
                    <p>"A message gives totals; a snapshot taken at the failure shows what the memory is made of, how much of the batch fits and what each remedy saves."</p>
                    <pre><code>{c}</code></pre>
                </section>
            })}
        </main>
    }
}
