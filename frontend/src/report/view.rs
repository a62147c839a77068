//! The report of a snapshot: header (title, device picker, share), notes, cards, the timeline
//! panel, the segment map, NVML sections and the findings — laid out from small components
//! over one [`ReportState`].

use leptos::prelude::*;
use leptos::task::spawn_local;
use memlens_api::{FileSummary, GpuLogSummary, SkippedFile};

use super::budget::budget;
use super::cards::cards;
use super::category_chart::CategoryChart;
use super::findings::details;
use super::gpu_logs::gpu_logs_section;
use super::segments::SegmentPanel;
use super::skipped_note;
use super::state::ReportState;
use super::timeline_panel::TimelinePanel;
use super::whatif::WhatIfPanel;
use crate::api;

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
                        .map(|&d| view! { <option value=d.to_string() selected=move || st.device.get() == d>{format!("cuda:{d}")}</option> })
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
            api::sleep(2000).await;
            copied.set(false);
        });
    };
    view! { <button id="share" on:click=share>{move || if copied.get() { "link copied" } else { "Share" }}</button> }
}

#[component]
pub fn ReportView(
    id: String,
    file: FileSummary,
    gpu_logs: Vec<GpuLogSummary>,
    skipped: Vec<SkippedFile>,
) -> impl IntoView {
    let devices: Vec<i64> = file.devices.iter().map(|d| d.device).collect();
    let name = file.file.clone();
    let notes = file.source.notes.clone();
    let st = ReportState::new(id.clone(), file, gpu_logs.clone());

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
                    <DeviceSelect st=st devices=devices />
                    <ShareButton />
                </div>
            </div>
            {skipped_note(&skipped)}
            {notes.into_iter().map(|n| view! { <p class="muted source-note">{n}</p> }).collect_view()}
            {move || st.dev_summary.get().map(|s| cards(&s))}
            {move || st.dev_summary.get().and_then(|s| budget(&s))}
            <WhatIfPanel st=st />
            <TimelinePanel st=st />
            <CategoryChart st=st />
            <SegmentPanel st=st />
            {(!gpu_logs.is_empty()).then(|| gpu_logs_section(&id, &gpu_logs, Some(st.in_trace)))}
            {move || st.dev_summary.get().map(|s| details(&s))}
        </main>
    }
}
