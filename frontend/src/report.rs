//! The report page `/r/{id}`: summary cards, the flame-style timeline (zoom by wheel,
//! drag-select and keys; pan by Shift-drag and arrows; each change fetches level-of-detail data),
//! hover/pin details with the stack, OOM explanations, the segment map at the cursor's time,
//! the fragmentation chart sharing the timeline's x axis, leaks, and a Share button whose link
//! carries the view. NVML logs uploaded with the snapshot add the whole GPU's `used` memory to
//! the timeline and a section of their own; a report of NVML logs alone shows just those.

use std::collections::{HashMap, HashSet};

use leptos::prelude::*;
use leptos::task::spawn_local;
use memlens_api::{
    AnalyzeOutput, Band, DeviceSummary, FileSummary, FragmentationSeries, FrameView, GpuLogSummary, GpuSeries,
    GpuSeriesSummary, OomExplanation, SegmentMap, Status, Timeline,
};
use wasm_bindgen::JsCast;

use crate::api::{self, FetchError};
use crate::format::{axis_time, bytes, stack_colour};
use crate::timeline::{draw_fragmentation, TimelineView, LEFT, RIGHT};

const TIMELINE_H: f64 = 380.0;
const FRAG_H: f64 = 120.0;
const SEG_ROW: f64 = 14.0;

fn context_2d(c: &web_sys::HtmlCanvasElement) -> Option<web_sys::CanvasRenderingContext2d> {
    c.get_context("2d")
        .ok()
        .flatten()
        .and_then(|x| x.dyn_into::<web_sys::CanvasRenderingContext2d>().ok())
}

/// `performance.now()`, for the timing attributes the speed bench reads.
fn now_ms() -> f64 {
    web_sys::window()
        .and_then(|w| w.performance())
        .map(|p| p.now())
        .unwrap_or(0.0)
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
    Ready(AnalyzeOutput),
    Failed(String, String),
}

#[component]
pub fn ReportPage(id: String) -> impl IntoView {
    let load = RwSignal::new(Load::Waiting("loading…".into()));
    let rid = id.clone();
    spawn_local(async move {
        loop {
            match api::get_json::<Status>(&format!("/api/reports/{rid}/status")).await {
                Ok(s) if s.state == "ready" => break,
                Ok(s) if s.state == "failed" => {
                    let name = s.files.join(", ");
                    load.set(Load::Failed(
                        "This report could not be processed".into(),
                        format!("{} — {name}", s.error.unwrap_or_default()),
                    ));
                    return;
                }
                Ok(s) => load.set(Load::Waiting(format!(
                    "processing: {} ({} of {})",
                    s.stage,
                    bytes(s.bytes_read as i64),
                    bytes(s.bytes_total as i64)
                ))),
                Err(e) => {
                    if matches!(e.status, 404 | 410) {
                        api::forget_report(&rid);
                    }
                    load.set(not_found(e));
                    return;
                }
            }
            api::sleep(400).await;
        }
        match api::get_json::<AnalyzeOutput>(&format!("/api/reports/{rid}")).await {
            Ok(s) => {
                let name = s
                    .files
                    .first()
                    .map(|f| f.file.clone())
                    .or_else(|| s.gpu_logs.first().map(|g| g.file.clone()))
                    .unwrap_or_else(|| "report".to_owned());
                api::remember_report(&rid, &name);
                load.set(Load::Ready(s));
            }
            Err(e) => load.set(not_found(e)),
        }
    });
    move || match load.get() {
        Load::Waiting(msg) => view! { <main class="waiting"><p id="report-waiting">{msg}</p></main> }.into_any(),
        Load::Failed(title, detail) => error_page(&title, detail),
        Load::Ready(summary) => match summary.files.first().cloned() {
            Some(file) => view! {
                <ReportView id=id.clone() file=file gpu_logs=summary.gpu_logs.clone() skipped=summary.skipped.clone() />
            }
            .into_any(),
            None if !summary.gpu_logs.is_empty() => gpu_logs_page(&id, &summary),
            None => error_page("Nothing to show", "the report has no analysed file".into()),
        },
    }
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

/// Fetches the stack of a band and keeps it.
fn fetch_stack(
    id: &str,
    stack: u32,
    cache: StoredValue<HashMap<u32, Vec<FrameView>>, LocalStorage>,
    out: RwSignal<Option<(u32, Vec<FrameView>)>>,
) {
    if let Some(v) = cache.with_value(|c| c.get(&stack).cloned()) {
        out.set(Some((stack, v)));
        return;
    }
    let url = format!("/api/reports/{id}/stacks/{stack}");
    spawn_local(async move {
        if let Ok(frames) = api::get_json::<Vec<FrameView>>(&url).await {
            cache.update_value(|c| {
                c.insert(stack, frames.clone());
            });
            out.set(Some((stack, frames)));
        }
    });
}

#[component]
fn ReportView(
    id: String,
    file: FileSummary,
    gpu_logs: Vec<GpuLogSummary>,
    skipped: Vec<memlens_api::SkippedFile>,
) -> impl IntoView {
    let devices: Vec<i64> = file.devices.iter().map(|d| d.device).collect();
    let initial_device = api::query_param("device")
        .and_then(|d| d.parse().ok())
        .filter(|d| devices.contains(d))
        .or(devices.first().copied())
        .unwrap_or(0);
    let device = RwSignal::new(initial_device);
    let event_axis = RwSignal::new(api::query_param("axis").as_deref() == Some("event"));
    let file_sv = StoredValue::new(file.clone());
    let dev_summary =
        Memo::new(move |_| file_sv.with_value(|f| f.devices.iter().find(|d| d.device == device.get()).cloned()));

    let view_sv = StoredValue::new_local(TimelineView::new());
    let canvas = NodeRef::<leptos::html::Canvas>::new();
    let frag_canvas = NodeRef::<leptos::html::Canvas>::new();
    let seg_canvas = NodeRef::<leptos::html::Canvas>::new();
    let frag_data = RwSignal::new(None::<FragmentationSeries>);
    let seg_map = RwSignal::new(None::<SegmentMap>);
    let hovered = RwSignal::new(None::<Band>);
    let pinned = RwSignal::new(false);
    let stack_frames = RwSignal::new(None::<(u32, Vec<FrameView>)>);
    let show_internal = RwSignal::new(false);
    let oom = RwSignal::new(None::<OomExplanation>);
    let copied = RwSignal::new(false);
    let stack_cache = StoredValue::new_local(HashMap::<u32, Vec<FrameView>>::new());
    let request_seq = StoredValue::new(0u64);
    let first_view = StoredValue::new((
        api::query_param("start").and_then(|s| s.parse::<i64>().ok()),
        api::query_param("end").and_then(|s| s.parse::<i64>().ok()),
    ));
    let full_range = StoredValue::new((0i64, 1i64));
    let drag = StoredValue::new(None::<(f64, bool, i64, i64)>);
    let id_sv = StoredValue::new(id.clone());
    let seg_seq = StoredValue::new(0u64);
    let gpu_logs_sv = StoredValue::new(gpu_logs.clone());
    // (log, GPU, peak NVML `used` during this device's trace, PyTorch's reserved peak).
    let in_trace = RwSignal::new(None::<(usize, i64, i64, i64)>);

    // Draws both canvases from what is loaded.
    let redraw = move || {
        let Some(c) = canvas.get_untracked() else { return };
        let Some(ctx) = context_2d(&c) else { return };
        let t0 = now_ms();
        view_sv.with_value(|v| v.draw(&ctx));
        let t1 = now_ms();
        let _ = c.set_attribute("data-draw-ms", &format!("{:.2}", t1 - t0));
        let _ = c.set_attribute("data-drawn-at", &format!("{t1:.1}"));
        if let (Some(fc), Some(f)) = (frag_canvas.get_untracked(), frag_data.get_untracked()) {
            if let Some(fctx) = context_2d(&fc) {
                view_sv.with_value(|v| draw_fragmentation(&fctx, v, &f, FRAG_H));
            }
        }
    };

    // Fetches level-of-detail data for the current view (latest request wins).
    let fetch_timeline = move || {
        let seq = request_seq.get_value() + 1;
        request_seq.set_value(seq);
        let (start, end, width, ev) = view_sv.with_value(|v| {
            (
                v.start,
                v.end,
                (v.width - LEFT - RIGHT).max(50.0) as usize,
                v.event_axis,
            )
        });
        let d = device.get_untracked();
        let id = id_sv.get_value();
        let axis = if ev { "event" } else { "time" };
        let initial = start >= end;
        spawn_local(async move {
            if !initial {
                api::sleep(40).await;
                if request_seq.get_value() != seq {
                    return;
                }
            }
            let range = if initial {
                String::new()
            } else {
                format!("&start={start}&end={end}")
            };
            let url = format!("/api/reports/{id}/timeline?device={d}&width={width}&axis={axis}{range}");
            let Ok(tl) = api::get_json::<Timeline>(&url).await else {
                return;
            };
            if request_seq.get_value() != seq {
                return;
            }
            full_range.set_value((tl.full_start, tl.full_end));
            let arrived = now_ms();
            view_sv.update_value(|v| {
                if initial {
                    v.start = tl.start;
                    v.end = tl.end;
                    v.origin = tl.full_start;
                }
                v.hovered = None;
                v.pinned = None;
                v.data = Some(tl);
            });
            if let Some(c) = canvas.get_untracked() {
                let _ = c.set_attribute("data-data-at", &format!("{arrived:.1}"));
            }
            redraw();
            // How long drawing took once this answer arrived (read by the speed bench).
            if let Some(c) = canvas.get_untracked() {
                let _ = c.set_attribute("data-data-to-drawn-ms", &format!("{:.2}", now_ms() - arrived));
            }
            // The same GPU in an NVML log of this report, over the same window (time axis only).
            let gpu = gpu_logs_sv.with_value(|logs| gpu_of_device(logs, d));
            if let (Some((li, label)), false) = (gpu, ev) {
                let (s, e) = view_sv.with_value(|v| (v.start, v.end));
                let url = format!("/api/reports/{id}/gpu_samples?log={li}&gpu={d}&start={s}&end={e}&width={width}");
                if let Ok(g) = api::get_json::<GpuSeries>(&url).await {
                    if initial {
                        let (fs, fe) = full_range.get_value();
                        let peak = g
                            .points
                            .iter()
                            .filter(|p| p.time_us >= fs && p.time_us <= fe)
                            .map(|p| p.used_max)
                            .max();
                        let reserved = dev_summary.get_untracked().map(|s| s.peak_reserved_bytes);
                        in_trace.set(peak.zip(reserved).map(|(p, r)| (li, d, p, r)));
                    }
                    if request_seq.get_value() == seq {
                        view_sv.update_value(|v| v.gpu = Some((g, label)));
                        redraw();
                    }
                }
            }
            let (s, e) = view_sv.with_value(|v| (v.start, v.end));
            let mut q = vec![
                ("device", d.to_string()),
                ("start", s.to_string()),
                ("end", e.to_string()),
            ];
            if ev {
                q.push(("axis", "event".into()));
            }
            api::set_query(&q);
        });
    };

    // Device or axis changes: reset the view and load everything for it.
    Effect::new(move |_| {
        let d = device.get();
        let ev = event_axis.get();
        let summary = dev_summary.get();
        let width = canvas
            .get()
            .map(|c| c.parent_element().map(|p| p.client_width()).unwrap_or(900))
            .unwrap_or(900) as f64;
        let (qs, qe) = first_view.get_value();
        first_view.set_value((None, None));
        view_sv.update_value(|v| {
            v.width = width.max(400.0);
            v.height = TIMELINE_H;
            v.event_axis = ev;
            v.data = None;
            v.leak_stacks = summary
                .as_ref()
                .map(|s| s.leaks.iter().filter_map(|l| l.stack_id).collect())
                .unwrap_or_else(HashSet::new);
            v.phases = summary.as_ref().map(|s| s.phases.clone()).unwrap_or_default();
            v.summary = summary.clone();
            match (qs, qe) {
                (Some(s), Some(e)) if e > s => {
                    v.start = s;
                    v.end = e;
                }
                _ => {
                    v.start = 0;
                    v.end = 0;
                }
            }
        });
        if let Some(c) = canvas.get() {
            c.set_width(width.max(400.0) as u32);
            c.set_height(TIMELINE_H as u32);
        }
        if let Some(c) = frag_canvas.get() {
            c.set_width(width.max(400.0) as u32);
            c.set_height(FRAG_H as u32);
        }
        redraw();
        fetch_timeline();
        let id = id_sv.get_value();
        spawn_local(async move {
            if let Ok(f) =
                api::get_json::<FragmentationSeries>(&format!("/api/reports/{id}/fragmentation?device={d}")).await
            {
                frag_data.set(Some(f));
                redraw();
            }
        });
        if let Some(s) = &summary {
            load_segments(id_sv.get_value(), d, s.event_count.checked_sub(1), None, seg_map);
        }
    });

    // Segment map redraw.
    Effect::new(move |_| {
        let Some(map) = seg_map.get() else { return };
        if let Some(c) = seg_canvas.get() {
            draw_segments(&c, &map);
        }
    });

    let canvas_xy = move |ev: &web_sys::MouseEvent| -> (f64, f64) {
        let Some(c) = canvas.get_untracked() else {
            return (0.0, 0.0);
        };
        let r = c.get_bounding_client_rect();
        (ev.client_x() as f64 - r.left(), ev.client_y() as f64 - r.top())
    };

    let on_wheel = move |ev: web_sys::WheelEvent| {
        ev.prevent_default();
        let (x, _) = canvas_xy(&ev);
        let factor = if ev.delta_y() > 0.0 { 1.25 } else { 0.8 };
        let full = full_range.get_value();
        view_sv.update_value(|v| v.zoom_at(x, factor, full));
        redraw();
        fetch_timeline();
    };
    let on_down = move |ev: web_sys::MouseEvent| {
        let (x, _) = canvas_xy(&ev);
        let (s, e) = view_sv.with_value(|v| (v.start, v.end));
        drag.set_value(Some((x, ev.shift_key() || ev.button() == 1, s, e)));
        if let Some(c) = canvas.get_untracked() {
            let _ = c.focus();
        }
    };
    let on_move = move |ev: web_sys::MouseEvent| {
        let (x, y) = canvas_xy(&ev);
        match drag.get_value() {
            Some((x0, true, s, e)) => {
                view_sv.update_value(|v| {
                    let dt = ((x0 - x) / (v.width - LEFT - RIGHT) * (e - s) as f64) as i64;
                    v.start = s + dt;
                    v.end = e + dt;
                });
                redraw();
            }
            Some((x0, false, _, _)) => {
                view_sv.update_value(|v| v.selection = Some((x0, x)));
                redraw();
            }
            None => {
                let hit = view_sv.with_value(|v| v.band_at(x, y));
                let changed = view_sv.with_value(|v| v.hovered != hit);
                view_sv.update_value(|v| {
                    v.hovered = hit;
                    v.cursor_x = Some(x);
                });
                // The segment map follows the cursor once it rests for a moment (unless pinned).
                if !pinned.get_untracked() {
                    let seq = seg_seq.get_value() + 1;
                    seg_seq.set_value(seq);
                    let (t, ev_axis) = view_sv.with_value(|v| (v.x_to_time(x), v.event_axis));
                    let d = device.get_untracked();
                    let id = id_sv.get_value();
                    spawn_local(async move {
                        api::sleep(300).await;
                        if seg_seq.get_value() == seq {
                            if ev_axis {
                                load_segments(id, d, Some(t.max(0) as usize), None, seg_map);
                            } else {
                                load_segments(id, d, None, Some(t), seg_map);
                            }
                        }
                    });
                }
                if changed && !pinned.get_untracked() {
                    let band =
                        hit.and_then(|i| view_sv.with_value(|v| v.data.as_ref().and_then(|d| d.bands.get(i).cloned())));
                    if let Some(b) = &band {
                        fetch_stack(&id_sv.get_value(), b.stack_id, stack_cache, stack_frames);
                    }
                    hovered.set(band);
                }
                redraw();
            }
        }
    };
    let on_up = move |ev: web_sys::MouseEvent| {
        let (x, y) = canvas_xy(&ev);
        let Some((x0, panning, _, _)) = drag.get_value() else {
            return;
        };
        drag.set_value(None);
        if panning {
            fetch_timeline();
            return;
        }
        view_sv.update_value(|v| v.selection = None);
        if (x - x0).abs() > 5.0 {
            view_sv.update_value(|v| {
                let (a, b) = (v.x_to_time(x0.min(x)), v.x_to_time(x0.max(x)));
                v.start = a;
                v.end = b.max(a + 2);
            });
            redraw();
            fetch_timeline();
            return;
        }
        // A click: an OOM marker explains itself; a band is pinned; the segment map follows.
        if let Some(i) = view_sv.with_value(|v| v.oom_at(x)) {
            oom.set(view_sv.with_value(|v| v.summary.as_ref().and_then(|s| s.ooms.get(i).cloned())));
            return;
        }
        let hit = view_sv.with_value(|v| v.band_at(x, y));
        view_sv.update_value(|v| v.pinned = hit);
        pinned.set(hit.is_some());
        let band = hit.and_then(|i| view_sv.with_value(|v| v.data.as_ref().and_then(|d| d.bands.get(i).cloned())));
        if let Some(b) = &band {
            fetch_stack(&id_sv.get_value(), b.stack_id, stack_cache, stack_frames);
        }
        hovered.set(band);
        let (t, ev_axis) = view_sv.with_value(|v| (v.x_to_time(x), v.event_axis));
        let d = device.get_untracked();
        if ev_axis {
            load_segments(id_sv.get_value(), d, Some(t.max(0) as usize), None, seg_map);
        } else {
            load_segments(id_sv.get_value(), d, None, Some(t), seg_map);
        }
        redraw();
    };
    let on_leave = move |_| {
        view_sv.update_value(|v| v.cursor_x = None);
        redraw();
    };
    let on_key = move |ev: web_sys::KeyboardEvent| {
        let full = full_range.get_value();
        let mid = view_sv.with_value(|v| (v.width - LEFT - RIGHT) / 2.0 + LEFT);
        let ok = match ev.key().as_str() {
            "+" | "=" => {
                view_sv.update_value(|v| v.zoom_at(mid, 0.7, full));
                true
            }
            "-" | "_" => {
                view_sv.update_value(|v| v.zoom_at(mid, 1.4, full));
                true
            }
            "ArrowLeft" => {
                view_sv.update_value(|v| v.pan(-0.2));
                true
            }
            "ArrowRight" => {
                view_sv.update_value(|v| v.pan(0.2));
                true
            }
            "0" | "Home" => {
                view_sv.update_value(|v| {
                    v.start = full.0;
                    v.end = full.1;
                });
                true
            }
            "Escape" => {
                view_sv.update_value(|v| v.pinned = None);
                pinned.set(false);
                hovered.set(None);
                true
            }
            _ => false,
        };
        if ok {
            ev.prevent_default();
            redraw();
            fetch_timeline();
        }
    };
    let reset = move |_| {
        let full = full_range.get_value();
        view_sv.update_value(|v| {
            v.start = full.0;
            v.end = full.1;
        });
        redraw();
        fetch_timeline();
    };
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

    let name = file.file.clone();
    let multi = devices.len() > 1;
    let device_options = devices.clone();
    view! {
        <main class="report" id="report">
            <div class="report-head">
                <h1 id="report-title">{name}</h1>
                <div class="actions">
                    <Show when=move || multi>
                        <label>
                            "device "
                            <select id="device-select" on:change=move |ev| {
                                let v = event_target_value(&ev);
                                if let Ok(d) = v.parse::<i64>() {
                                    device.set(d);
                                }
                            }>
                                {device_options
                                    .iter()
                                    .map(|d| {
                                        let d = *d;
                                        view! { <option value=d.to_string() selected=move || device.get() == d>{format!("cuda:{d}")}</option> }
                                    })
                                    .collect_view()}
                            </select>
                        </label>
                    </Show>
                    <button id="share" on:click=share>{move || if copied.get() { "link copied" } else { "Share" }}</button>
                </div>
            </div>
            {(!skipped.is_empty()).then(|| {
                let text = skipped.iter().map(|s| format!("{}: {}", s.file, s.reason)).collect::<Vec<_>>().join("; ");
                view! { <p class="muted">"Kept but not analysed: " {text}</p> }
            })}
            {file.source.notes.iter().map(|n| view! { <p class="muted source-note">{n.clone()}</p> }).collect_view()}
            {move || dev_summary.get().map(|s| cards(&s))}
            <section class="panel">
                <div class="toolbar">
                    <button on:click=reset>"Reset zoom"</button>
                    <label>
                        <input type="checkbox" id="event-axis" prop:checked=move || event_axis.get() on:change=move |ev| {
                            let on = event_target_checked(&ev);
                            event_axis.set(on);
                        } />
                        " event order"
                    </label>
                    <span class="muted">"wheel or drag to zoom · Shift-drag or ←/→ to pan · +/− · 0 resets · click pins"</span>
                </div>
                <div class="canvas-wrap">
                    <canvas
                        id="timeline"
                        node_ref=canvas
                        tabindex="0"
                        on:wheel=on_wheel
                        on:mousedown=on_down
                        on:mousemove=on_move
                        on:mouseup=on_up
                        on:mouseleave=on_leave
                        on:keydown=on_key
                    ></canvas>
                    <canvas id="fragmentation" node_ref=frag_canvas></canvas>
                </div>
                {move || hovered.get().map(|b| band_panel(&b, view_sv.with_value(|v| (v.origin, v.event_axis)), stack_frames.get(), show_internal))}
                {move || oom.get().map(|o| oom_panel(&o, oom))}
            </section>
            <section class="panel">
                <h2>"Segment map"</h2>
                {move || seg_map.get().map(|m| {
                    let when = match (m.event_index, m.time_us) {
                        (Some(i), Some(t)) => format!("after entry {i} (t = {})", axis_time(t, view_sv.with_value(|v| v.origin), false)),
                        (Some(i), None) => format!("after entry {i}"),
                        _ => "before the first entry".to_owned(),
                    };
                    view! {
                        <p class="muted" id="segment-summary">
                            {format!("{when}: {} segments, {} reserved, {} active, {} free (largest {}), {} rounding waste, {} pending free — follows the cursor; click pins",
                                m.segments.len(), bytes(m.reserved_bytes), bytes(m.active_bytes), bytes(m.free_bytes), bytes(m.largest_free_block_bytes), bytes(m.rounding_waste_bytes), bytes(m.pending_free_bytes))}
                        </p>
                    }
                })}
                <canvas id="segments" node_ref=seg_canvas></canvas>
            </section>
            {(!gpu_logs.is_empty()).then(|| gpu_logs_section(&id, &gpu_logs, Some(in_trace)))}
            {move || dev_summary.get().map(|s| details(&s))}
        </main>
    }
}

/// The first NVML log with a GPU of this index: (log index, label for the timeline line).
fn gpu_of_device(logs: &[GpuLogSummary], device: i64) -> Option<(usize, String)> {
    logs.iter().enumerate().find_map(|(i, l)| {
        l.gpus
            .iter()
            .any(|g| g.gpu == device)
            .then(|| (i, format!("- - GPU {device} used, whole device ({})", l.format)))
    })
}

fn gpu_cards(g: &GpuSeriesSummary, beside_trace: Option<AnyView>) -> impl IntoView {
    let of_total = g.total_bytes.map_or(String::new(), |t| format!("of {}", bytes(t)));
    let span = format!(
        "{} samples over {:.1} s{}",
        g.sample_count,
        (g.end_time_us - g.start_time_us) as f64 / 1e6,
        g.median_interval_ms
            .map_or(String::new(), |ms| format!(", every {ms:.0} ms"))
    );
    view! {
        <div class="cards">
            <div class="card gpu-peak"><div class="k">{format!("GPU {} peak used", g.gpu)}</div><div class="v">{g.peak_used_bytes.map_or("n/a".into(), bytes)}</div><div class="s">{of_total}</div></div>
            <div class="card"><div class="k">"lowest used"</div><div class="v">{g.min_used_bytes.map_or("n/a".into(), bytes)}</div><div class="s">{span}</div></div>
            {g.driver_reserved_bytes.map(|r| view! { <div class="card"><div class="k">"driver reserved"</div><div class="v">{bytes(r)}</div><div class="s">"not counted in used"</div></div> })}
            {beside_trace}
        </div>
    }
}

/// One section per NVML log: per GPU its cards and chart. `in_trace` (with a snapshot) carries
/// the NVML peak during the shown device's trace, compared with PyTorch's reserved peak.
fn gpu_logs_section(
    id: &str,
    logs: &[GpuLogSummary],
    in_trace: Option<RwSignal<Option<(usize, i64, i64, i64)>>>,
) -> impl IntoView {
    logs.iter()
        .enumerate()
        .map(|(li, l)| {
            let clock = match (l.clock.as_str(), l.clock_offset_minutes) {
                ("local_time", 0) => "local times without a zone, read as UTC".to_owned(),
                ("local_time", m) => format!("local times without a zone, shifted {m:+} min to line up with the snapshot"),
                _ => "epoch times".to_owned(),
            };
            let gpus = l
                .gpus
                .iter()
                .map(|g| {
                    let gpu = g.gpu;
                    let beside = in_trace.map(|sig| {
                        (move || {
                            sig.get().filter(|(l, g, _, _)| *l == li && *g == gpu).map(|(_, _, used, reserved)| {
                                view! {
                                    <div class="card" id="gpu-in-trace">
                                        <div class="k">"during the trace"</div>
                                        <div class="v">{bytes(used)}</div>
                                        <div class="s">{if used >= reserved {
                                            format!("peak used: {} beyond PyTorch's reserved peak of {} (CUDA context, NCCL/cuBLAS workspaces, other processes)", bytes(used - reserved), bytes(reserved))
                                        } else {
                                            format!("peak used: below PyTorch's reserved peak of {}; the log's samples missed or lagged that moment", bytes(reserved))
                                        }}</div>
                                    </div>
                                }
                            })
                        })
                        .into_any()
                    });
                    let src = format!("/api/reports/{id}/chart.svg?log={li}&gpu={}", g.gpu);
                    let name = g.name.clone().map_or(String::new(), |n| format!(" — {n}"));
                    view! {
                        <h3>{format!("GPU {}{name}", g.gpu)}</h3>
                        {gpu_cards(g, beside)}
                        <img class="gpu-chart" src=src alt=format!("GPU {} used memory over time", g.gpu) />
                    }
                })
                .collect_view();
            view! {
                <section class="panel gpu-log">
                    <h2>{format!("{} ({})", l.file, l.format)}</h2>
                    <p class="muted">{format!("{clock}. {}", l.used_note)}</p>
                    {gpus}
                    {(!l.processes.is_empty()).then(|| processes_view(&l.processes))}
                    {(!l.skipped_lines.is_empty()).then(|| view! { <p class="muted">{format!("skipped: {}", l.skipped_lines.join("; "))}</p> })}
                </section>
            }
        })
        .collect_view()
}

/// The processes an NVML log saw: which process held how much of which GPU.
fn processes_view(processes: &[memlens_api::ProcessSummary]) -> impl IntoView {
    let items = processes
        .iter()
        .map(|p| {
            let gpu = match (p.gpu, &p.bus_id) {
                (Some(g), _) => format!("GPU {g}"),
                (None, Some(b)) => format!("bus {b}"),
                (None, None) => "an unnamed GPU".to_owned(),
            };
            let text = format!(
                "pid {} ({}) on {gpu}: peak {} — {} samples over {:.1} s",
                p.pid,
                p.name.as_deref().unwrap_or("name not logged"),
                p.peak_used_bytes.map_or("n/a".into(), bytes),
                p.sample_count,
                (p.last_time_us - p.first_time_us) as f64 / 1e6
            );
            view! { <li>{text}</li> }
        })
        .collect_view();
    view! {
        <h3>"Processes"</h3>
        <ul class="groups processes">{items}</ul>
    }
}

/// A report of NVML logs only.
fn gpu_logs_page(id: &str, summary: &AnalyzeOutput) -> AnyView {
    let title = summary
        .gpu_logs
        .iter()
        .map(|l| l.file.clone())
        .collect::<Vec<_>>()
        .join(", ");
    let skipped = summary.skipped.clone();
    view! {
        <main class="report" id="report">
            <div class="report-head"><h1 id="report-title">{title}</h1></div>
            {(!skipped.is_empty()).then(|| {
                let text = skipped.iter().map(|s| format!("{}: {}", s.file, s.reason)).collect::<Vec<_>>().join("; ");
                view! { <p class="muted">"Kept but not analysed: " {text}</p> }
            })}
            <p class="muted">"GPU-level samples only: upload a PyTorch memory snapshot of the same run to see what was allocated."</p>
            {gpu_logs_section(id, &summary.gpu_logs, None)}
        </main>
    }
    .into_any()
}

fn load_segments(id: String, device: i64, event: Option<usize>, time: Option<i64>, out: RwSignal<Option<SegmentMap>>) {
    let q = match (event, time) {
        (Some(e), _) => format!("&event={e}"),
        (None, Some(t)) => format!("&time={t}"),
        _ => String::new(),
    };
    spawn_local(async move {
        if let Ok(m) = api::get_json::<SegmentMap>(&format!("/api/reports/{id}/segments?device={device}{q}")).await {
            out.set(Some(m));
        }
    });
}

fn cards(s: &DeviceSummary) -> impl IntoView {
    let when = s
        .peak_time_us
        .map(|_| "during the trace".to_owned())
        .unwrap_or_else(|| match s.peak_event_index {
            Some(i) => format!("at entry {i}"),
            None => "before the trace".to_owned(),
        });
    let frag = s
        .fragmentation_at_peak
        .as_ref()
        .map(|f| {
            format!(
                "{:.2} ({} free, largest {})",
                f.fragmentation_index,
                bytes(f.reserved_free_bytes),
                bytes(f.largest_free_block_bytes)
            )
        })
        .unwrap_or_else(|| "n/a".into());
    let leak_bytes: i64 = s.leaks.iter().map(|l| l.bytes_per_iteration).sum();
    view! {
        <div class="cards">
            <div class="card" id="card-peak"><div class="k">"peak allocated"</div><div class="v" id="peak-value">{bytes(s.peak_allocated_bytes)}</div><div class="s">{when}</div></div>
            <div class="card"><div class="k">"peak reserved"</div><div class="v">{bytes(s.peak_reserved_bytes)}</div><div class="s">{format!("{} allocations", s.alloc_count)}</div></div>
            <div class="card" class:alert=!s.ooms.is_empty()><div class="k">"OOMs"</div><div class="v">{s.oom_count.to_string()}</div><div class="s">{s.ooms.last().map(|o| o.cause.clone()).unwrap_or_default()}</div></div>
            <div class="card" class:alert=!s.leaks.is_empty()><div class="k">"leak candidates"</div><div class="v">{s.leaks.len().to_string()}</div><div class="s">{if s.leaks.is_empty() { "none".to_owned() } else { format!("+{} per iteration", bytes(leak_bytes)) }}</div></div>
            <div class="card"><div class="k">"fragmentation at peak"</div><div class="v small">{frag}</div></div>
        </div>
    }
}

fn frames_view(frames: Vec<FrameView>, show_internal: RwSignal<bool>) -> impl IntoView {
    let hidden = frames.iter().filter(|f| f.internal).count();
    view! {
        <ol class="stack">
            {move || {
                let all = show_internal.get();
                frames.iter().filter(|f| all || !f.internal).map(|f| view! { <li class:internal=f.internal>{f.frame.clone()}</li> }).collect_view()
            }}
        </ol>
        {(hidden > 0).then(|| view! {
            <button class="link" on:click=move |_| show_internal.update(|v| *v = !*v)>
                {move || if show_internal.get() { format!("fold {hidden} internal frames") } else { format!("show {hidden} internal frames") }}
            </button>
        })}
    }
}

fn band_panel(
    b: &Band,
    (origin, event_axis): (i64, bool),
    frames: Option<(u32, Vec<FrameView>)>,
    show_internal: RwSignal<bool>,
) -> impl IntoView {
    let life = format!(
        "{} → {}",
        b.t_alloc
            .map_or_else(|| "before recording".to_owned(), |t| axis_time(t, origin, event_axis)),
        b.t_free.map_or_else(
            || "still live at the end".to_owned(),
            |t| axis_time(t, origin, event_axis)
        ),
    );
    let frames = frames.filter(|(s, _)| *s == b.stack_id).map(|(_, f)| f);
    view! {
        <div class="detail" id="band-detail">
            <div class="swatch" style:background=stack_colour(b.stack_id, 0.9)></div>
            <b>{bytes(b.size)}</b>
            {format!(" at 0x{:x} · {life} · stream {} · stack #{}", b.addr, b.stream, b.stack_id)}
            {match frames {
                Some(f) if f.is_empty() => view! { <p class="muted">"no stack recorded (allocated before recording, or recorded without context)"</p> }.into_any(),
                Some(f) => frames_view(f, show_internal).into_any(),
                None => view! { <p class="muted">"loading the stack…"</p> }.into_any(),
            }}
        </div>
    }
}

fn oom_panel(o: &OomExplanation, sig: RwSignal<Option<OomExplanation>>) -> impl IntoView {
    view! {
        <div class="detail oom" id="oom-detail">
            <button class="close" on:click=move |_| sig.set(None)>"×"</button>
            <h3>{format!("Out of memory: {} requested ({})", bytes(o.requested_bytes), o.cause)}</h3>
            <p>{format!(
                "reserved {} · allocated {} · reserved but free {} · largest free block {}{}",
                bytes(o.reserved_bytes),
                bytes(o.allocated_bytes),
                bytes(o.reserved_free_bytes),
                bytes(o.largest_free_block_bytes),
                o.device_free_bytes.map(|d| format!(" · device free {}", bytes(d))).unwrap_or_default()
            )}</p>
            <p class="remedy">{o.remedy.clone()}</p>
            <h4>"Live at the failure"</h4>
            <ul>{o.live_stacks.iter().map(|g| view! { <li>{format!("{} in {} allocation(s) — {}", bytes(g.bytes), g.count, g.stack.first().cloned().unwrap_or_else(|| "(no stack)".into()))}</li> }).collect_view()}</ul>
        </div>
    }
}

fn details(s: &DeviceSummary) -> impl IntoView {
    view! {
        <section class="panel">
            <h2>"At the peak"</h2>
            <ul class="groups">
                {s.peak_stacks.iter().map(|g| view! {
                    <li><b>{bytes(g.bytes)}</b>{format!(" in {} allocation(s) — {}", g.count, g.stack.iter().take(3).cloned().collect::<Vec<_>>().join(" ← "))}</li>
                }).collect_view()}
            </ul>
            <h2>"Leak candidates"</h2>
            {if s.leaks.is_empty() {
                view! { <p class="muted">{format!("No allocation piled up across iterations ({} iterations from {}).", s.iterations.count, s.iterations.source)}</p> }.into_any()
            } else {
                view! {
                    <ul class="groups" id="leaks">
                        {s.leaks.iter().map(|l| view! {
                            <li><b>{format!("+{} per iteration", bytes(l.bytes_per_iteration))}</b>
                                {format!(" — {} live in {} allocation(s) over {} iterations — {}", bytes(l.bytes), l.count, l.iterations_seen, l.stack.iter().take(3).cloned().collect::<Vec<_>>().join(" ← "))}</li>
                        }).collect_view()}
                    </ul>
                }.into_any()
            }}
            <h2>"OOMs"</h2>
            {if s.ooms.is_empty() {
                view! { <p class="muted">"No allocation failed."</p> }.into_any()
            } else {
                view! {
                    <ul class="groups">
                        {s.ooms.iter().map(|o| view! { <li><b>{format!("{} requested", bytes(o.requested_bytes))}</b>{format!(" — {}", o.remedy)}</li> }).collect_view()}
                    </ul>
                }.into_any()
            }}
        </section>
    }
}

/// Segments as bars (rows sorted by address, width relative to the largest), their blocks
/// coloured by state: allocated (by stack), pending free (red), free gaps (light), rounding
/// waste (dark sliver at the block's end).
fn draw_segments(c: &web_sys::HtmlCanvasElement, m: &SegmentMap) {
    let Some(ctx) = context_2d(c) else { return };
    let width = c.parent_element().map(|p| p.client_width()).unwrap_or(900).max(400) as f64;
    let rows = m.segments.len().min(80);
    let height = (rows as f64 * SEG_ROW + 24.0).max(40.0);
    c.set_width(width as u32);
    c.set_height(height as u32);
    ctx.set_fill_style_str("#fff");
    ctx.fill_rect(0.0, 0.0, width, height);
    let mut segs: Vec<&memlens_api::SegmentView> = m.segments.iter().collect();
    segs.sort_by(|a, b| b.size.cmp(&a.size).then(a.address.cmp(&b.address)));
    let largest = segs.first().map_or(1, |s| s.size).max(1) as f64;
    let usable = width - 170.0;
    ctx.set_font("10px sans-serif");
    for (r, s) in segs.iter().take(rows).enumerate() {
        let y = 4.0 + r as f64 * SEG_ROW;
        ctx.set_fill_style_str("#333");
        let _ = ctx.fill_text(
            &format!("{} {}", bytes(s.size), if s.expandable { "exp" } else { "" }),
            2.0,
            y + 10.0,
        );
        let x0 = 100.0;
        for b in &s.blocks {
            let bx = x0 + (b.address - s.address) as f64 / largest * usable;
            let bw = (b.size as f64 / largest * usable).max(0.5);
            let fill = match b.state.as_str() {
                "inactive" => "#e8ebf0".to_owned(),
                "active_pending_free" => "#d62728".to_owned(),
                _ => stack_colour(b.stack_id, 0.85),
            };
            ctx.set_fill_style_str(&fill);
            ctx.fill_rect(bx, y, bw, SEG_ROW - 3.0);
            if b.state != "inactive" && b.size > b.requested_bytes {
                let ww = ((b.size - b.requested_bytes) as f64 / largest * usable).max(0.5);
                ctx.set_fill_style_str("#222");
                ctx.fill_rect(bx + bw - ww, y, ww, SEG_ROW - 3.0);
            }
        }
    }
    if m.segments.len() > rows {
        ctx.set_fill_style_str("#555");
        let _ = ctx.fill_text(
            &format!("… {} smaller segments not drawn", m.segments.len() - rows),
            2.0,
            height - 6.0,
        );
    }
}
