//! The report page `/r/{id}`: waits for processing, then shows the report. A snapshot's report
//! ([`view`]) has summary cards, the flame-style timeline ([`timeline_panel`]: zoom by wheel,
//! drag-select and keys; pan by Shift-drag and arrows; each change fetches level-of-detail
//! data), hover/pin details with the stack and OOM explanations ([`panels`]), the segment map
//! at the cursor's time ([`segments`]), the fragmentation strip sharing the timeline's x axis,
//! the findings ([`findings`]) and a Share button whose link carries the view. NVML logs
//! uploaded with the snapshot add the whole GPU's `used` memory to the timeline and a section
//! of their own ([`gpu_logs`]); a report of NVML logs alone shows just those. A report of
//! several ranks opens with the run overview ([`run_overview`]: one bar per rank, each opening
//! its own view, any two opening the compare page) on its worst rank. Every report leads with
//! its [`verdict`]; a text (an OOM message, a log, a memory summary) has a page of its own
//! ([`text_report`]). [`state`] holds the view's state and actions.

mod budget;
mod cards;
mod category_chart;
mod devices;
mod findings;
mod flame;
mod gpu_logs;
mod panels;
mod prefetch;
mod run_overview;
mod segment_layout;
mod segments;
mod serving;
mod state;
mod text_report;
mod timeline_panel;
mod verdict;
mod view;
mod whatif;

pub(crate) use budget::colour;
use leptos::prelude::*;
use leptos::task::spawn_local;
use memlens_api::{AnalyzeOutput, ReportMeta, ReportState as Lifecycle, SkippedFile};
use wasm_bindgen::JsCast;

use crate::client;
use crate::display::bytes;
use crate::fetch::FetchError;
use crate::{browser, recent};

pub(crate) fn context_2d(c: &web_sys::HtmlCanvasElement) -> Option<web_sys::CanvasRenderingContext2d> {
    c.get_context("2d")
        .ok()
        .flatten()
        .and_then(|x| x.dyn_into::<web_sys::CanvasRenderingContext2d>().ok())
}

/// Sizes a chart canvas to its panel's width inside the padding (at least 400 px) and
/// `height`, clears it white, and hands back its context and width.
pub(crate) fn panel_canvas(
    c: &web_sys::HtmlCanvasElement,
    height: f64,
) -> Option<(web_sys::CanvasRenderingContext2d, f64)> {
    let ctx = context_2d(c)?;
    let width = c
        .parent_element()
        .map(|p| p.client_width() - 28)
        .unwrap_or(900)
        .max(400) as f64;
    c.set_width(width as u32);
    c.set_height(height as u32);
    ctx.set_fill_style_str("#fff");
    ctx.fill_rect(0.0, 0.0, width, height);
    Some((ctx, width))
}

/// `performance.now()`, for the timing attributes the speed bench reads.
pub(crate) fn now_ms() -> f64 {
    web_sys::window()
        .and_then(|w| w.performance())
        .map(|p| p.now())
        .unwrap_or(0.0)
}

/// Files the report kept but did not analyse, and why.
pub(crate) fn skipped_note(skipped: &[SkippedFile]) -> Option<impl IntoView> {
    (!skipped.is_empty()).then(|| {
        let text = skipped
            .iter()
            .map(|s| format!("{}: {}", s.file, s.reason))
            .collect::<Vec<_>>()
            .join("; ");
        view! { <p class="muted">"Kept but not analysed: " {text}</p> }
    })
}

/// Why a report cannot be shown.
fn error_page(title: &str, detail: String) -> AnyView {
    view! {
        <main class="report-error" id="report-error">
            <h1>{title.to_owned()}</h1>
            <p>{detail}</p>
            <p><a href="/">"Upload a trace"</a></p>
        </main>
    }
    .into_any()
}

#[derive(Clone, PartialEq)]
enum Load {
    Waiting(String),
    Ready(AnalyzeOutput, ReportMeta),
    Failed(String, String),
}

fn not_found(e: FetchError) -> Load {
    match e.status {
        404 => Load::Failed(
            "Report not found".into(),
            "This report was deleted, or the link is wrong.".into(),
        ),
        410 => Load::Failed(
            "Report expired".into(),
            "This report reached the end of its retention period and was removed.".into(),
        ),
        _ => Load::Failed("Cannot load this report".into(), e.message),
    }
}

/// Polls the status until the report is ready (or failed), then loads its summary. A report
/// already ready (every shared link after the first minute) is opened in one round trip: the
/// status, the summary and the first timeline ([`prefetch`]) are asked for together.
async fn wait_and_load(id: String, load: RwSignal<Load>, growing: RwSignal<u32>) {
    prefetch::start(&id);
    let (status, summary) = futures_util::future::join(client::status(&id), client::summary(&id)).await;
    if let (Ok(s), Ok(summary)) = (status, summary) {
        if s.state == Lifecycle::Ready {
            show_summary(&id, summary, s.meta, load);
            watch_growth(id, s.windows, growing).await;
            return;
        }
    }
    let (meta, windows);
    loop {
        match client::status(&id).await {
            Ok(s) if s.state == Lifecycle::Ready => {
                (meta, windows) = (s.meta, s.windows);
                break;
            }
            Ok(s) if s.state == Lifecycle::Failed => {
                let name = s.files.join(", ");
                load.set(Load::Failed(
                    "This report could not be processed".into(),
                    format!("{} — {name}", s.error.unwrap_or_default()),
                ));
                return;
            }
            Ok(s) => load.set(Load::Waiting(format!(
                "processing: {} ({} of {})",
                s.stage.name(),
                bytes(s.bytes_read as i64),
                bytes(s.bytes_total as i64)
            ))),
            Err(e) => {
                if matches!(e.status, 404 | 410) {
                    recent::forget_report(&id);
                }
                load.set(not_found(e));
                return;
            }
        }
        browser::sleep(400).await;
    }
    match client::summary(&id).await {
        Ok(s) => show_summary(&id, s, meta, load),
        Err(e) => return load.set(not_found(e)),
    }
    watch_growth(id, windows, growing).await;
}

/// How often a page open on a recording that grows window by window looks for a new window.
const GROWTH_POLL_MS: i32 = 3_000;

/// A report recorded window by window (`windows` so far) grows while its job runs: the page
/// says so, and reloads once a newer version of it is ready (the view is kept in the URL).
async fn watch_growth(id: String, windows: u32, growing: RwSignal<u32>) {
    if windows == 0 {
        return;
    }
    growing.set(windows);
    loop {
        browser::sleep(GROWTH_POLL_MS).await;
        match client::status(&id).await {
            Ok(s) if s.windows > windows && s.state == Lifecycle::Ready => {
                if let Some(w) = web_sys::window() {
                    let _ = w.location().reload();
                }
                return;
            }
            Ok(_) => {}
            Err(_) => return,
        }
    }
}

/// The report is ready: remember it among the recent ones and show it.
fn show_summary(id: &str, s: AnalyzeOutput, meta: ReportMeta, load: RwSignal<Load>) {
    let name = s
        .files
        .first()
        .map(|f| f.file.clone())
        .or_else(|| s.gpu_logs.first().map(|g| g.file.clone()))
        .unwrap_or_else(|| "report".to_owned());
    recent::remember_report(id, &name);
    load.set(Load::Ready(s, meta));
}

/// The snapshot file the page shows: the link's `?file=`, else in a run of several ranks the
/// worst rank's, else the first.
fn file_to_show(summary: &AnalyzeOutput) -> usize {
    browser::query_param("file")
        .and_then(|f| f.parse::<usize>().ok())
        .filter(|&f| f < summary.files.len())
        .or_else(|| {
            let run = summary.run.as_ref()?;
            run.ranks
                .iter()
                .find(|r| r.rank == run.worst_rank)
                .map(|r| r.file_index)
        })
        .unwrap_or(0)
}

#[component]
pub fn ReportPage(id: String) -> impl IntoView {
    let load = RwSignal::new(Load::Waiting("loading…".into()));
    let growing = RwSignal::new(0u32);
    spawn_local(wait_and_load(id.clone(), load, growing));
    let banner = move || {
        let n = growing.get();
        (n > 0).then(|| {
            view! {
                <p class="growing" id="report-growing" data-windows=n.to_string()>
                    {format!("Recorded window by window: {n} window{} so far. This page refreshes when the next is analysed.", if n == 1 { "" } else { "s" })}
                </p>
            }
        })
    };
    let page = move || match load.get() {
        Load::Waiting(msg) => view! { <main class="waiting"><p id="report-waiting">{msg}</p></main> }.into_any(),
        Load::Failed(title, detail) => error_page(&title, detail),
        Load::Ready(summary, meta) => match summary.files.get(file_to_show(&summary)).cloned() {
            Some(file) if file.format.is_text_evidence() => {
                view! { <text_report::TextReportView file=file /> }.into_any()
            }
            Some(file) => view! {
                <view::ReportView id=id.clone() file_index=file_to_show(&summary) file=file meta=meta
                    gpu_logs=summary.gpu_logs.clone() skipped=summary.skipped.clone() run=summary.run.clone() />
            }
            .into_any(),
            None if !summary.gpu_logs.is_empty() => gpu_logs::gpu_logs_page(&id, &summary),
            None => error_page("Nothing to show", "the report has no analysed file".into()),
        },
    };
    view! { {banner} {page} }
}
