//! The report view's state in one struct of signals and stored values (all `Copy`, so every
//! component and handler takes it by value), and the actions that read and change it: drawing,
//! fetching the level-of-detail timeline, the segment map and stacks.

use std::collections::HashMap;

use leptos::prelude::*;
use leptos::task::spawn_local;
use memlens_api::{
    Band, CategoryTimeline, DeviceParams, DeviceSummary, FileSummary, FlameGraph, FragmentationSeries, FrameView,
    GpuLogSummary, GpuSamplesParams, OomExplanation, SearchParams, SegmentMap, SegmentsParams, TimelineAxis,
    TimelineParams,
};

use super::prefetch;
use super::segment_layout::{bar_pixels, SEGMENT_ROWS};
use super::{context_2d, now_ms};
use crate::fragmentation_chart::draw_fragmentation;
use crate::timeline::{TimelineView, LEFT, RIGHT};
use crate::{browser, client};

pub const TIMELINE_H: f64 = 380.0;

/// An address as a search box takes it: `0x7f3a…`, or hex with a letter in it, optionally with
/// memory_viz's `_N` version suffix (the N-th allocation at that address); `None`: frame text.
pub fn parse_search_address(text: &str) -> Option<(i64, Option<usize>)> {
    let t = text.trim().to_ascii_lowercase();
    let (addr, version) = match t.rsplit_once('_') {
        Some((a, v)) if !v.is_empty() && v.chars().all(|c| c.is_ascii_digit()) => (a.to_owned(), v.parse().ok()),
        _ => (t.clone(), None),
    };
    let (hex, prefixed) = match addr.strip_prefix("0x") {
        Some(h) => (h.to_owned(), true),
        None => (addr.clone(), false),
    };
    let looks_hex = !hex.is_empty()
        && hex.chars().all(|c| c.is_ascii_hexdigit())
        && (prefixed || version.is_some() || hex.chars().any(|c| c.is_ascii_alphabetic()));
    looks_hex
        .then(|| i64::from_str_radix(&hex, 16).ok())
        .flatten()
        .map(|a| (a, version))
}
pub const FRAG_H: f64 = 120.0;

/// NVML's view of the shown device during its trace: (log, GPU, peak `used`, PyTorch's reserved peak).
pub type InTrace = Option<(usize, i64, i64, i64)>;

/// A drag on the timeline: (start x, panning, window start, window end).
pub type Drag = Option<(f64, bool, i64, i64)>;

#[derive(Clone, Copy)]
pub struct ReportState {
    pub id: StoredValue<String>,
    /// Which snapshot file of the report (a rank, in a run of several) this view shows.
    pub file: StoredValue<usize>,
    pub gpu_logs: StoredValue<Vec<GpuLogSummary>>,
    pub device: RwSignal<i64>,
    pub event_axis: RwSignal<bool>,
    pub dev_summary: Memo<Option<DeviceSummary>>,
    pub view: StoredValue<TimelineView, LocalStorage>,
    pub canvas: NodeRef<leptos::html::Canvas>,
    pub frag_canvas: NodeRef<leptos::html::Canvas>,
    pub seg_canvas: NodeRef<leptos::html::Canvas>,
    pub frag_data: RwSignal<Option<FragmentationSeries>>,
    pub cat_canvas: NodeRef<leptos::html::Canvas>,
    pub cat_data: RwSignal<Option<CategoryTimeline>>,
    pub flame_canvas: NodeRef<leptos::html::Canvas>,
    pub flame_data: RwSignal<Option<FlameGraph>>,
    /// The last search and how many allocations matched it.
    pub search: RwSignal<Option<(String, Result<usize, String>)>>,
    pub seg_map: RwSignal<Option<SegmentMap>>,
    pub hovered: RwSignal<Option<Band>>,
    pub pinned: RwSignal<bool>,
    pub stack_frames: RwSignal<Option<(u32, Vec<FrameView>)>>,
    pub show_internal: RwSignal<bool>,
    pub oom: RwSignal<Option<OomExplanation>>,
    pub stack_cache: StoredValue<HashMap<u32, Vec<FrameView>>, LocalStorage>,
    pub request_seq: StoredValue<u64>,
    pub seg_seq: StoredValue<u64>,
    /// The window the link asked for, used once.
    pub first_view: StoredValue<(Option<i64>, Option<i64>)>,
    pub full_range: StoredValue<(i64, i64)>,
    pub drag: StoredValue<Drag>,
    pub in_trace: RwSignal<InTrace>,
    /// The segment map to load once the first timeline is drawn (after this entry).
    pub pending_segments: StoredValue<Option<Option<usize>>>,
    /// Whether the first timeline reached the screen (or could not be had): the panels below
    /// it are built only then, so that nothing but the page's head and the timeline is laid
    /// out before the first paint.
    pub first_drawn: RwSignal<bool>,
}

impl ReportState {
    pub fn new(id: String, file_index: usize, file: FileSummary, gpu_logs: Vec<GpuLogSummary>) -> ReportState {
        let devices: Vec<i64> = file.devices.iter().map(|d| d.device).collect();
        let initial_device = browser::query_param("device")
            .and_then(|d| d.parse().ok())
            .filter(|d| devices.contains(d))
            .or(file.focus_device.filter(|d| devices.contains(d)))
            .or(devices.first().copied())
            .unwrap_or(0);
        let device = RwSignal::new(initial_device);
        let file = StoredValue::new(file);
        ReportState {
            id: StoredValue::new(id),
            file: StoredValue::new(file_index),
            gpu_logs: StoredValue::new(gpu_logs),
            device,
            event_axis: RwSignal::new(browser::query_param("axis").as_deref() == Some("event")),
            dev_summary: Memo::new(move |_| {
                file.with_value(|f| f.devices.iter().find(|d| d.device == device.get()).cloned())
            }),
            view: StoredValue::new_local(TimelineView::new()),
            canvas: NodeRef::new(),
            frag_canvas: NodeRef::new(),
            seg_canvas: NodeRef::new(),
            frag_data: RwSignal::new(None),
            cat_canvas: NodeRef::new(),
            cat_data: RwSignal::new(None),
            flame_canvas: NodeRef::new(),
            flame_data: RwSignal::new(None),
            search: RwSignal::new(None),
            seg_map: RwSignal::new(None),
            hovered: RwSignal::new(None),
            pinned: RwSignal::new(false),
            stack_frames: RwSignal::new(None),
            show_internal: RwSignal::new(false),
            oom: RwSignal::new(None),
            stack_cache: StoredValue::new_local(HashMap::new()),
            request_seq: StoredValue::new(0),
            seg_seq: StoredValue::new(0),
            first_view: StoredValue::new((
                browser::query_param("start").and_then(|s| s.parse::<i64>().ok()),
                browser::query_param("end").and_then(|s| s.parse::<i64>().ok()),
            )),
            full_range: StoredValue::new((0, 1)),
            drag: StoredValue::new(None),
            in_trace: RwSignal::new(None),
            pending_segments: StoredValue::new(None),
            first_drawn: RwSignal::new(false),
        }
    }

    /// Draws the timeline and fragmentation canvases from what is loaded.
    pub fn redraw(self) {
        let Some(c) = self.canvas.get_untracked() else { return };
        let Some(ctx) = context_2d(&c) else { return };
        let t0 = now_ms();
        self.view.with_value(|v| v.draw(&ctx));
        let t1 = now_ms();
        let _ = c.set_attribute("data-draw-ms", &format!("{:.2}", t1 - t0));
        let _ = c.set_attribute("data-drawn-at", &format!("{t1:.1}"));
        if let (Some(fc), Some(f)) = (self.frag_canvas.get_untracked(), self.frag_data.get_untracked()) {
            if let Some(fctx) = context_2d(&fc) {
                self.view.with_value(|v| draw_fragmentation(&fctx, v, &f, FRAG_H));
            }
        }
    }

    /// Fetches level-of-detail data for the current view (the latest request wins), then the
    /// same GPU's NVML series, and writes the view into the URL.
    pub fn fetch_timeline(self) {
        let seq = self.request_seq.get_value() + 1;
        self.request_seq.set_value(seq);
        let (start, end, width, ev) = self.view.with_value(|v| {
            (
                v.start,
                v.end,
                (v.width - LEFT - RIGHT).max(50.0) as usize,
                v.event_axis,
            )
        });
        let d = self.device.get_untracked();
        let id = self.id.get_value();
        let initial = start >= end;
        let params = TimelineParams {
            file: Some(self.file.get_value()),
            device: Some(d),
            width: Some(width),
            axis: Some(if ev { TimelineAxis::Event } else { TimelineAxis::Time }),
            start: (!initial).then_some(start),
            end: (!initial).then_some(end),
            overview: None,
        };
        let prefetched = prefetch::take(&id, &params);
        spawn_local(async move {
            let early = match prefetched {
                Some(answer) => answer.await.filter(|t| t.device == d),
                None => None,
            };
            let tl = match early {
                Some(tl) => tl,
                None => {
                    if !initial {
                        browser::sleep(40).await;
                        if self.request_seq.get_value() != seq {
                            return;
                        }
                    }
                    match client::timeline(&id, &params).await {
                        Ok(tl) => tl,
                        Err(_) => {
                            self.first_drawn.set(true);
                            self.load_pending_segments();
                            return;
                        }
                    }
                }
            };
            if self.request_seq.get_value() != seq {
                return;
            }
            // A prefetched answer of a guessed width is drawn now and asked for exactly next.
            let exact = tl.width == width;
            self.full_range.set_value((tl.full_start, tl.full_end));
            let arrived = now_ms();
            self.view.update_value(|v| {
                if initial {
                    v.start = tl.start;
                    v.end = tl.end;
                    v.origin = tl.full_start;
                }
                v.hovered = None;
                v.pinned = None;
                v.data = Some(tl);
            });
            if let Some(c) = self.canvas.get_untracked() {
                let _ = c.set_attribute("data-data-at", &format!("{arrived:.1}"));
            }
            self.redraw();
            // How long drawing took once this answer arrived (read by the speed bench).
            if let Some(c) = self.canvas.get_untracked() {
                let _ = c.set_attribute("data-data-to-drawn-ms", &format!("{:.2}", now_ms() - arrived));
                // When the first drawing reached the screen (read by the speed bench).
                if c.get_attribute("data-painted-at").is_none() {
                    spawn_local(async move {
                        browser::after_next_paint().await;
                        let _ = c.set_attribute("data-painted-at", &format!("{:.1}", now_ms()));
                        self.first_drawn.set(true);
                    });
                }
            }
            self.load_pending_segments();
            if !exact {
                self.fetch_timeline();
                return;
            }
            // The link carries the view as soon as it is drawn.
            let (s, e) = self.view.with_value(|v| (v.start, v.end));
            let mut q = vec![
                ("file", self.file.get_value().to_string()),
                ("device", d.to_string()),
                ("start", s.to_string()),
                ("end", e.to_string()),
            ];
            if ev {
                q.push(("axis", "event".into()));
            }
            browser::set_query(&q);
            self.fetch_categories(seq, &params).await;
            self.fetch_flame(seq, &params).await;
            self.fetch_gpu_line(seq, d, width, ev, initial).await;
        });
    }

    /// The same window by category.
    async fn fetch_categories(self, seq: u64, params: &TimelineParams) {
        let (start, end) = self.view.with_value(|v| (v.start, v.end));
        let params = TimelineParams {
            start: Some(start),
            end: Some(end),
            ..*params
        };
        if let Ok(c) = client::category_timeline(&self.id.get_value(), &params).await {
            if self.request_seq.get_value() == seq {
                self.cat_data.set(Some(c));
            }
        }
    }

    /// The same window's flame graph (bytes × lifetime by stack).
    async fn fetch_flame(self, seq: u64, params: &TimelineParams) {
        let (start, end) = self.view.with_value(|v| (v.start, v.end));
        let params = TimelineParams {
            start: Some(start),
            end: Some(end),
            ..*params
        };
        if let Ok(g) = client::flame(&self.id.get_value(), &params).await {
            if self.request_seq.get_value() == seq {
                self.flame_data.set(Some(g));
            }
        }
    }

    /// Searches the device's allocations by address (`0x…` or memory_viz's `addr_version`) or
    /// frame text, and marks the matches on the timeline.
    pub fn search(self, text: String) {
        let text = text.trim().to_owned();
        if text.is_empty() {
            self.view.update_value(|v| {
                v.matches.clear();
                v.match_spans.clear();
            });
            self.search.set(None);
            self.redraw();
            return;
        }
        let address = parse_search_address(&text);
        let params = SearchParams {
            file: Some(self.file.get_value()),
            device: Some(self.device.get_untracked()),
            addr: address.map(|(a, _)| format!("0x{a:x}")),
            stack: address.is_none().then(|| text.clone()),
            limit: Some(5_000),
        };
        let id = self.id.get_value();
        let ev = self.view.with_value(|v| v.event_axis);
        spawn_local(async move {
            let answer = client::allocations(&id, &params).await;
            let found = match answer {
                Ok(mut r) => {
                    // `addr_N`: the N-th allocation at that address, in time order.
                    if let Some((_, Some(version))) = address {
                        r.allocations.sort_by_key(|b| b.t_alloc);
                        r.allocations = r.allocations.into_iter().skip(version).take(1).collect();
                        r.total = r.allocations.len();
                    }
                    self.view.update_value(|v| {
                        v.matches = r.allocations.iter().map(|b| (b.addr, b.t_alloc)).collect();
                        // On the event axis the spans are not drawn (their times are µs).
                        v.match_spans = if ev {
                            Vec::new()
                        } else {
                            r.allocations.iter().map(|b| (b.t_alloc, b.t_free)).collect()
                        };
                    });
                    Ok(r.total)
                }
                Err(e) => Err(e.message),
            };
            self.search.set(Some((text, found)));
            self.redraw();
        });
    }

    /// The same GPU in an NVML log of this report, over the same window (time axis only).
    async fn fetch_gpu_line(self, seq: u64, d: i64, width: usize, event_axis: bool, initial: bool) {
        let gpu = self.gpu_logs.with_value(|logs| gpu_of_device(logs, d));
        let (Some((log, label)), false) = (gpu, event_axis) else {
            return;
        };
        let (start, end) = self.view.with_value(|v| (v.start, v.end));
        let params = GpuSamplesParams {
            log: Some(log),
            gpu: Some(d),
            start: Some(start),
            end: Some(end),
            width: Some(width),
        };
        let Ok(g) = client::gpu_samples(&self.id.get_value(), &params).await else {
            return;
        };
        if initial {
            let (fs, fe) = self.full_range.get_value();
            let peak = g
                .points
                .iter()
                .filter(|p| p.time_us >= fs && p.time_us <= fe)
                .map(|p| p.used_max)
                .max();
            let reserved = self.dev_summary.get_untracked().map(|s| s.peak_reserved_bytes);
            self.in_trace.set(peak.zip(reserved).map(|(p, r)| (log, d, p, r)));
        }
        if self.request_seq.get_value() == seq {
            self.view.update_value(|v| v.gpu = Some((g, label)));
            self.redraw();
        }
    }

    /// Device or axis changed: resets the view to the link's window (once) or the whole trace,
    /// sizes the canvases and loads everything for it.
    pub fn reset_for_device(self, d: i64, ev: bool, summary: Option<DeviceSummary>) {
        let width = self
            .canvas
            .get()
            .map(|c| c.parent_element().map(|p| p.client_width()).unwrap_or(900))
            .unwrap_or(900) as f64;
        prefetch::remember_canvas_width(width);
        let (qs, qe) = self.first_view.get_value();
        self.first_view.set_value((None, None));
        self.search.set(None);
        self.view.update_value(|v| {
            v.matches.clear();
            v.match_spans.clear();
            v.width = width.max(400.0);
            v.height = TIMELINE_H;
            v.event_axis = ev;
            v.data = None;
            v.leak_stacks = summary
                .as_ref()
                .map(|s| s.leaks.iter().filter_map(|l| l.stack_id).collect())
                .unwrap_or_default();
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
        for (c, h) in [(self.canvas.get(), TIMELINE_H), (self.frag_canvas.get(), FRAG_H)] {
            if let Some(c) = c {
                c.set_width(width.max(400.0) as u32);
                c.set_height(h as u32);
            }
        }
        self.redraw();
        self.fetch_timeline();
        let id = self.id.get_value();
        spawn_local(async move {
            let params = DeviceParams {
                file: Some(self.file.get_value()),
                device: Some(d),
            };
            if let Ok(f) = client::fragmentation(&id, &params).await {
                self.frag_data.set(Some(f));
                self.redraw();
            }
        });
        // The segment map waits for the first timeline: on a report the server has not
        // loaded yet, it reads the whole trace, which would delay the timeline's answer.
        self.pending_segments
            .set_value(summary.as_ref().map(|s| s.event_count.checked_sub(1)));
    }

    /// Loads the segment map that [`ReportState::reset_for_device`] left for after the first
    /// timeline.
    fn load_pending_segments(self) {
        if let Some(event) = self.pending_segments.get_value() {
            self.pending_segments.set_value(None);
            self.load_segments_after(event);
        }
    }

    /// The segment map at the timeline position `t` (an entry on the event axis, else a time).
    pub fn load_segments_at(self, t: i64) {
        if self.view.with_value(|v| v.event_axis) {
            self.load_segments_after(Some(t.max(0) as usize));
        } else {
            self.load_segments(SegmentsParams {
                time: Some(t),
                ..SegmentsParams::default()
            });
        }
    }

    /// The segment map right after entry `event` (`None`: the default, the end).
    pub fn load_segments_after(self, event: Option<usize>) {
        self.load_segments(SegmentsParams {
            event,
            ..SegmentsParams::default()
        });
    }

    fn load_segments(self, params: SegmentsParams) {
        let id = self.id.get_value();
        // Only what the panel draws: its largest segments, blocks merged below a pixel.
        let canvas = self.seg_canvas.get_untracked();
        let params = SegmentsParams {
            file: Some(self.file.get_value()),
            device: Some(self.device.get_untracked()),
            max_segments: Some(SEGMENT_ROWS),
            width: Some(bar_pixels(canvas.as_ref())),
            ..params
        };
        spawn_local(async move {
            if let Ok(m) = client::segments(&id, &params).await {
                self.seg_map.set(Some(m));
            }
        });
    }

    /// Fetches the stack of `band` (cached) and shows it.
    pub fn show_stack(self, band: &Band) {
        let stack = band.stack_id;
        if let Some(v) = self.stack_cache.with_value(|c| c.get(&stack).cloned()) {
            self.stack_frames.set(Some((stack, v)));
            return;
        }
        let (id, file) = (self.id.get_value(), self.file.get_value());
        spawn_local(async move {
            if let Ok(frames) = client::stack(&id, file, stack).await {
                self.stack_cache.update_value(|c| {
                    c.insert(stack, frames.clone());
                });
                self.stack_frames.set(Some((stack, frames)));
            }
        });
    }

    /// The band at index `hit` of the loaded timeline.
    pub fn band(self, hit: Option<usize>) -> Option<Band> {
        hit.and_then(|i| {
            self.view
                .with_value(|v| v.data.as_ref().and_then(|d| d.bands.get(i).cloned()))
        })
    }
}

/// The first NVML log with a GPU of this index: (log index, label for the timeline line).
pub fn gpu_of_device(logs: &[GpuLogSummary], device: i64) -> Option<(usize, String)> {
    logs.iter().enumerate().find_map(|(i, l)| {
        l.gpus.iter().any(|g| g.gpu == device).then(|| {
            (
                i,
                format!(
                    "- - GPU {device} used, whole device ({}); shaded above reserved: outside PyTorch",
                    l.format
                ),
            )
        })
    })
}
