//! The report of a snapshot: header (title, device picker, share), notes, cards, the timeline
//! panel, the segment map, NVML sections and the findings — laid out from small components
//! over one [`ReportState`].

use leptos::prelude::*;
use leptos::task::spawn_local;
use memlens_api::{FileSummary, GpuLogSummary, ReportMeta, RunOverview, SideRef, SkippedFile};

use super::budget::budget;
use super::cards::cards;
use super::category_chart::CategoryChart;
use super::devices::DeviceOverview;
use super::findings::{details, ooms_section};
use super::flame::FlamePanel;
use super::gpu_logs::gpu_logs_section;
use super::run_overview::RunOverviewPanel;
use super::segments::SegmentPanel;
use super::skipped_note;
use super::state::ReportState;
use super::timeline_panel::TimelinePanel;
use super::verdict::Verdict;
use super::whatif::WhatIfPanel;
use crate::{browser, client};

/// The device picker, shown when the snapshot has several devices.
#[component]
fn DeviceSelect(st: ReportState, devices: Vec<i64>) -> impl IntoView {
    (devices.len() > 1).then(|| {
        view! {
            <label>
                "device "
                <select id="device-select" on:change=move |ev| {
                    if let Ok(d) = event_target_value(&ev).parse::<i64>() {
                        st.device.set(d);
                    }
                }>
                    {devices
                        .iter()
                        .map(|&d| view! { <option value=d.to_string() selected=move || st.device.get() == d>{memlens_api::device_label(d)}</option> })
                        .collect_view()}
                </select>
            </label>
        }
    })
}

/// Copies the page's link (which carries the view) to the clipboard.
#[component]
fn ShareButton() -> impl IntoView {
    let copied = RwSignal::new(false);
    let share = move |_| {
        let Some(w) = web_sys::window() else { return };
        let href = w.location().href().unwrap_or_default();
        let _ = w.navigator().clipboard().write_text(&href);
        copied.set(true);
        spawn_local(async move {
            browser::sleep(2000).await;
            copied.set(false);
        });
    };
    view! { <button id="share" on:click=share>{move || if copied.get() { "link copied" } else { "Share" }}</button> }
}

/// What the report says about itself, under its title: tags, job, host, notes.
fn meta_line(meta: &ReportMeta) -> Option<impl IntoView> {
    let mut facts: Vec<String> = Vec::new();
    if let Some(j) = &meta.job {
        facts.push(format!("job {j}"));
    }
    if let Some(h) = &meta.host {
        facts.push(format!("on {h}"));
    }
    let any = !facts.is_empty() || !meta.tags.is_empty() || meta.notes.is_some();
    any.then(|| {
        view! {
            <div class="report-meta" id="report-meta">
                {meta.tags.iter().map(|t| view! { <span class="tag-chip">{t.clone()}</span> }).collect_view()}
                <span class="muted">{facts.join(" · ")}</span>
                {meta.notes.clone().map(|n| view! { <p class="notes">{n}</p> })}
            </div>
        }
    })
}

/// The report id in a pasted link (`…/r/{id}…`) or a bare id.
fn report_id_in(text: &str) -> Option<String> {
    let t = text.trim();
    let tail = match memlens_api::routes::Link::parse(t) {
        Some(memlens_api::routes::Link {
            page: memlens_api::routes::Page::Report { id },
            ..
        }) => id,
        _ => t.to_owned(),
    };
    let id: String = tail.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
    (id.len() == 32).then_some(id)
}

/// Links comparing the shown device with each other device of the same snapshot.
#[component]
fn CompareDevices(st: ReportState, devices: Vec<i64>) -> impl IntoView {
    (devices.len() > 1).then(|| {
        let side = move |d: i64| SideRef {
            report: st.id.get_value(),
            file: Some(st.file.get_value()),
            device: Some(d),
        };
        view! {
            <span class="compare-devices">
                {devices
                    .iter()
                    .map(|&d| {
                        let href = move || client::compare_page(&side(st.device.get()), &side(d));
                        view! { <a class="compare-device" href=href hidden=move || st.device.get() == d>{format!("vs {}", memlens_api::device_label(d))}</a> }
                    })
                    .collect_view()}
            </span>
        }
    })
}

/// Opens the compare page of this view (its file and device) against another report.
#[component]
fn CompareWith(st: ReportState) -> impl IntoView {
    let other = RwSignal::new(String::new());
    let problem = RwSignal::new(None::<&'static str>);
    let go = move |_| match report_id_in(&other.get_untracked()) {
        Some(b) => {
            let a = SideRef {
                report: st.id.get_value(),
                file: Some(st.file.get_value()),
                device: Some(st.device.get_untracked()),
            };
            let b = SideRef {
                report: b,
                file: None,
                device: None,
            };
            browser::navigate(&client::compare_page(&a, &b));
        }
        None => problem.set(Some("paste a report link or its 32-character id")),
    };
    view! {
        <div class="compare-with">
            <input id="compare-with" placeholder="compare with: a report's link or id" prop:value=move || other.get()
                on:input=move |ev| { other.set(event_target_value(&ev)); problem.set(None); } />
            <button id="compare-go" on:click=go>"Compare"</button>
            {move || problem.get().map(|p| view! { <span class="muted">{p}</span> })}
        </div>
    }
}

#[component]
pub fn ReportView(
    id: String,
    file_index: usize,
    file: FileSummary,
    gpu_logs: Vec<GpuLogSummary>,
    skipped: Vec<SkippedFile>,
    run: Option<RunOverview>,
    meta: ReportMeta,
) -> impl IntoView {
    let devices: Vec<i64> = file.devices.iter().map(|d| d.device).collect();
    let name = match run
        .as_ref()
        .and_then(|r| r.ranks.iter().find(|k| k.file_index == file_index))
    {
        Some(k) => format!("rank {} · {}", k.rank, file.file),
        None => file.file.clone(),
    };
    let name = match &meta.title {
        Some(t) => format!("{t} — {name}"),
        None => name,
    };
    let notes = file.source.notes.clone();
    // A JAX device memory profile is one instant: no history to draw over time.
    let one_instant = file.format == memlens_api::Format::JaxDeviceMemoryProfile;
    let file_for_overview = file.clone();
    let st = ReportState::new(id.clone(), file_index, file, gpu_logs.clone());

    // Device or axis changes: reset the view and load everything for it.
    Effect::new(move |_| {
        let d = st.device.get();
        let ev = st.event_axis.get();
        let summary = st.dev_summary.get();
        st.reset_for_device(d, ev, summary);
    });

    view! {
        <main class="report" id="report">
            <div class="report-head">
                <h1 id="report-title">{name}</h1>
                <div class="actions">
                    <DeviceSelect st=st devices=devices.clone() />
                    <CompareDevices st=st devices=devices />
                    <CompareWith st=st />
                    <ShareButton />
                </div>
            </div>
            <Verdict st=st />
            {run.map(|r| view! { <RunOverviewPanel id=id.clone() run=r shown=file_index /> })}
            <DeviceOverview st=st file=file_for_overview />
            {meta_line(&meta)}
            {skipped_note(&skipped)}
            {notes.into_iter().map(|n| view! { <p class="muted source-note">{n}</p> }).collect_view()}
            {move || st.dev_summary.get().filter(|s| s.trace_truncated).map(|s| view! {
                <p class="alert-text" id="truncated-note">{format!(
                    "History incomplete: this trace frees {} allocation(s) it never saw made — the ring buffer (max_entries) dropped the start of the run, or recording began late. Memory from before its first entry is counted from the final state; what happened to it earlier is not in the trace.",
                    s.frees_before_trace
                )}</p>
            })}
            {move || st.dev_summary.get().map(|s| cards(&s))}
            // An OOM's remedies come next: what the reader came for.
            {move || st.dev_summary.get().filter(|s| !s.ooms.is_empty()).map(|s| ooms_section(&s))}
            {move || st.dev_summary.get().and_then(|s| budget(&s))}
            <WhatIfPanel st=st />
            {one_instant.then(|| view! {
                <p class="muted" id="one-instant-note">
                    "One instant: a JAX device memory profile holds the buffers live when it was taken, with no \
                     history, so the timeline below is that instant alone. The flame graph shows every buffer by \
                     its Python stack; two profiles of one run compare (Compare with…) to show what grew."
                </p>
            })}
            <TimelinePanel st=st />
            // Built once the first timeline is on screen (see `ReportState::first_drawn`).
            {move || st.first_drawn.get().then(|| view! {
                <FlamePanel st=st />
                <CategoryChart st=st />
                <SegmentPanel st=st />
                {(!gpu_logs.is_empty()).then(|| gpu_logs_section(&id, &gpu_logs, Some(st.in_trace)))}
                {move || st.dev_summary.get().map(|s| details(st, &s))}
            })}
        </main>
    }
}
