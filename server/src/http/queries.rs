//! Level-of-detail queries over a ready report: timeline, segment map, fragmentation, the
//! summary-backed device views (peak, leaks, OOMs, annotations), the flame graph, stack frames, allocation search
//! NVML series and what-if predictions. The answers come from `memlens_core::query`; this file picks the file,
//! device or GPU a query names and runs CPU work on the blocking pool.

use memlens_api::routes;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::Json;
use memlens_api::{
    AnalyzeOutput, CategoryTimeline, DeviceParams, DeviceSummary, FileParams, FlameGraph, FragmentationSeries,
    FrameView, GpuSamplesParams, GpuSeries, GpuSeriesSummary, LeakCandidate, OomExplanation, Peak, PhaseRange,
    SearchParams, SearchResult, SegmentMap, SegmentsParams, Timeline, TimelineAxis, TimelineParams, WhatIfFile,
    WhatIfParams,
};
use memlens_core::analysis::gpu_samples::gpu_series;
use memlens_core::analysis::segment_map::detail::SegmentDetail;
use memlens_core::analysis::DeviceEvents;
use memlens_core::pipeline::DeviceFrames;
use memlens_core::query;

use super::error::{internal, ApiError, Q};
use super::state::{link_id, loaded_file, loaded_gpu_logs, summary_of, ReportPath, Shared};
use crate::ids::ReportId;
use crate::storage::reportdata::stored_segments::SegmentAt;
use crate::storage::reportdata::LoadedFile;

/// The `index`-th of `outer` (default the first), then the member of its `inner` list whose
/// `id` is `wanted` (default the first); errors name what was asked for.
fn pick_nested<'a, O, I>(
    outer: &'a [O],
    index: Option<usize>,
    inner: impl Fn(&'a O) -> &'a [I],
    id: impl Fn(&I) -> i64,
    wanted: Option<i64>,
    (outer_name, inner_name): (&str, &str),
) -> Result<(usize, &'a I), ApiError> {
    let i = index.unwrap_or(0);
    let o = outer
        .get(i)
        .ok_or_else(|| ApiError::BadRequest(format!("no {outer_name} {i} in this report")))?;
    let members = inner(o);
    let m = match wanted {
        Some(w) => members
            .iter()
            .find(|m| id(m) == w)
            .ok_or_else(|| ApiError::BadRequest(format!("no {inner_name} {w} in {outer_name} {i}")))?,
        None => members
            .first()
            .ok_or_else(|| ApiError::BadRequest(format!("{outer_name} {i} has no {inner_name}")))?,
    };
    Ok((i, m))
}

/// The snapshot file and device a query names.
pub fn pick(r: &AnalyzeOutput, file: Option<usize>, device: Option<i64>) -> Result<(usize, &DeviceSummary), ApiError> {
    pick_nested(&r.files, file, |f| &f.devices, |d| d.device, device, ("file", "device"))
}

/// The GPU log `log` (default 0) and its GPU `gpu` (default: the first).
pub fn pick_gpu(
    r: &AnalyzeOutput,
    log: Option<usize>,
    gpu: Option<i64>,
) -> Result<(usize, &GpuSeriesSummary), ApiError> {
    pick_nested(&r.gpu_logs, log, |l| &l.gpus, |g| g.gpu, gpu, ("GPU log", "GPU"))
}

/// A device's stored frames among a file's.
pub fn frames_of(devices: &[DeviceFrames], device: i64) -> Result<&DeviceFrames, ApiError> {
    devices
        .iter()
        .find(|d| d.device == device)
        .ok_or_else(|| ApiError::Internal(format!("frames of device {device} missing")))
}

/// Runs `query` over file `file` of report `id` on the blocking pool; the parts it reads are
/// loaded from the store if the cache does not hold them yet.
pub async fn with_file<T: Send + 'static>(
    st: &Shared,
    id: &ReportId,
    file: usize,
    query: impl FnOnce(&LoadedFile) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    st.reports.with_file(id, file, query).await
}

/// Runs `f` over loaded data on the blocking pool.
pub async fn blocking<D: Send + Sync + 'static, T: Send + 'static>(
    data: Arc<D>,
    f: impl FnOnce(&D) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(move || f(&data)).await.map_err(internal)?
}

#[utoipa::path(get, path = routes::TIMELINE, tag = "queries",
    params(("id" = String, Path), TimelineParams), responses((status = 200, body = Timeline)))]
pub async fn timeline(
    State(st): State<Shared>,
    ReportPath(id): ReportPath,
    Q(q): Q<TimelineParams>,
) -> Result<Json<Timeline>, ApiError> {
    let s = summary_of(&st, &id).await?;
    let (fi, d) = pick(&s, q.file, q.device)?;
    let device = d.device;
    let initial = d.initial_allocated_bytes;
    let axis = axis_of(&q, d);
    let overview = q.overview == Some(true) && q.start.is_none() && q.end.is_none();
    let f = loaded_file(&st, &id, fi).await?;
    let (tl, stored) = blocking(f.clone(), move |f| {
        if overview {
            if let Some(tl) = f.stored_overview(device, axis).map_err(internal)? {
                return Ok((tl, true));
            }
        }
        let devices = f.devices().map_err(internal)?;
        let frames = frames_of(&devices, device)?;
        let index = f.timeline_index(frames, axis).map_err(internal)?;
        let tl = query::timeline_with(
            frames,
            axis,
            Some(&index),
            initial,
            q.start,
            q.end,
            q.width.unwrap_or(1000),
        )
        .map_err(internal)?;
        Ok((tl, false))
    })
    .await?;
    st.reports.files.reweigh(&id, fi, &f);
    // A file whose frames alone are over the cache's whole budget is loaded by each query and
    // dropped after: warming it would load its frames for nothing.
    if stored && st.reports.files.could_keep(f.frames_estimate()) && f.claim_warming() {
        st.reports.metrics.view_warm_begun();
        warm_view(st, id, fi, f, device, axis);
    }
    Ok(Json(tl))
}

/// One view is warmed at a time: pages opened together after a restart (a team following
/// several links) load their frames in turn, each making room in the cache before it loads,
/// instead of all at once over the cache's bound.
static WARMING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Builds a device's view indexes on the blocking pool behind a stored first view: the page
/// that asked for it zooms next.
fn warm_view(st: Shared, id: ReportId, file: usize, f: Arc<LoadedFile>, device: i64, axis: TimelineAxis) {
    tokio::task::spawn_blocking(move || {
        let _one_at_a_time = WARMING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // While it waited, the cache may have let the file go (or a query opened it again):
        // warm the one queries will find, so that it is kept.
        let f = match st.reports.files.get(&id, file) {
            Some(cached) => cached,
            None => {
                st.reports.files.insert(&id, file, f.clone());
                f
            }
        };
        let started = std::time::Instant::now();
        match f.prepare_view(device, axis) {
            Ok(()) => tracing::debug!(report = %id, file, device,
                "view indexes built behind the stored first view in {:.0} ms (the file holds {} bytes)",
                started.elapsed().as_secs_f64() * 1e3, f.bytes()),
            Err(e) => tracing::warn!(report = %id, file, device, "view indexes: {e}"),
        }
        st.reports.files.reweigh(&id, file, &f);
    });
}

/// The axis a timeline query asked for: traces without timestamps have only entry order.
fn axis_of(q: &TimelineParams, d: &DeviceSummary) -> TimelineAxis {
    match q.axis {
        Some(TimelineAxis::Event) => TimelineAxis::Event,
        _ => crate::storage::reportdata::default_axis(d),
    }
}

#[utoipa::path(get, path = routes::CATEGORIES, tag = "queries",
    params(("id" = String, Path), TimelineParams), responses((status = 200, body = CategoryTimeline)))]
pub async fn category_timeline(
    State(st): State<Shared>,
    ReportPath(id): ReportPath,
    Q(q): Q<TimelineParams>,
) -> Result<Json<CategoryTimeline>, ApiError> {
    let s = summary_of(&st, &id).await?;
    let (fi, d) = pick(&s, q.file, q.device)?;
    let (device, axis) = (d.device, axis_of(&q, d));
    let tl = with_file(&st, &id, fi, move |f| {
        let devices = f.devices().map_err(internal)?;
        let frames = frames_of(&devices, device)?;
        let timeline_index = f.timeline_index(frames, axis).map_err(internal)?;
        let category_index = f.category_index(frames).map_err(internal)?;
        let index = category_index.as_ref().as_ref().map(|c| (&*timeline_index, c));
        query::category_timeline_with(frames, axis, index, q.start, q.end, q.width.unwrap_or(1000)).map_err(internal)
    })
    .await?;
    Ok(Json(tl))
}

#[utoipa::path(get, path = routes::FLAME, tag = "queries",
    params(("id" = String, Path), TimelineParams), responses((status = 200, body = FlameGraph)))]
pub async fn flame(
    State(st): State<Shared>,
    ReportPath(id): ReportPath,
    Q(q): Q<TimelineParams>,
) -> Result<Json<FlameGraph>, ApiError> {
    let s = summary_of(&st, &id).await?;
    let (fi, d) = pick(&s, q.file, q.device)?;
    let (device, axis) = (d.device, axis_of(&q, d));
    let g = with_file(&st, &id, fi, move |f| {
        let (devices, stacks) = (f.devices().map_err(internal)?, f.stacks().map_err(internal)?);
        let frames = frames_of(&devices, device)?;
        let index = f.timeline_index(frames, axis).map_err(internal)?;
        query::flame_graph_with(frames, &stacks, axis, Some(&index), q.start, q.end).map_err(internal)
    })
    .await?;
    Ok(Json(g))
}

#[utoipa::path(get, path = routes::SEGMENTS, tag = "queries",
    params(("id" = String, Path), SegmentsParams), responses((status = 200, body = SegmentMap)))]
pub async fn segments(
    State(st): State<Shared>,
    ReportPath(id): ReportPath,
    Q(q): Q<SegmentsParams>,
) -> Result<Json<SegmentMap>, ApiError> {
    let s = summary_of(&st, &id).await?;
    let (fi, d) = pick(&s, q.file, q.device)?;
    let device = d.device;
    let map = with_file(&st, &id, fi, move |f| {
        let detail = SegmentDetail {
            max_segments: q.max_segments,
            width: q.width,
        };
        let at = match (q.event, q.time) {
            (Some(e), _) => SegmentAt::Entry(e),
            (None, Some(time)) => SegmentAt::Time(time),
            (None, None) => SegmentAt::End,
        };
        if let Some(map) = f.stored_segment_map(device, at, detail).map_err(internal)? {
            return Ok(map);
        }
        // Stored before its checkpoints were: replayed from the trace.
        let tables = f.tables().map_err(internal)?;
        let ev = DeviceEvents::new(&tables, device).map_err(internal)?;
        let cp = f.checkpoints(&tables, &ev).map_err(internal)?;
        match (q.event, q.time) {
            (Some(e), _) => cp.map_at(&ev, Some(e), detail),
            (None, Some(time)) => cp.map_at_time(&ev, time, detail),
            (None, None) => cp.map_at(&ev, ev.len().checked_sub(1), detail),
        }
        .map_err(internal)?
        .ok_or_else(|| ApiError::Internal("no segment checkpoint covers the entry".into()))
    })
    .await?;
    Ok(Json(map))
}

#[utoipa::path(get, path = routes::FRAGMENTATION, tag = "queries",
    params(("id" = String, Path), DeviceParams), responses((status = 200, body = FragmentationSeries)))]
pub async fn fragmentation(
    State(st): State<Shared>,
    ReportPath(id): ReportPath,
    Q(q): Q<DeviceParams>,
) -> Result<Json<FragmentationSeries>, ApiError> {
    let s = summary_of(&st, &id).await?;
    let (fi, d) = pick(&s, q.file, q.device)?;
    let device = d.device;
    let series = with_file(&st, &id, fi, move |f| {
        query::fragmentation_series(frames_of(&f.devices().map_err(internal)?, device)?).map_err(internal)
    })
    .await?;
    Ok(Json(series))
}

/// The summary of one device of a ready report.
async fn device_summary(st: &Shared, id: &ReportId, q: &DeviceParams) -> Result<DeviceSummary, ApiError> {
    let r = summary_of(st, id).await?;
    Ok(pick(&r, q.file, q.device)?.1.clone())
}

#[utoipa::path(get, path = routes::PEAK, tag = "queries", params(("id" = String, Path), DeviceParams), responses((status = 200, body = Peak)))]
pub async fn peak(
    State(st): State<Shared>,
    ReportPath(id): ReportPath,
    Q(q): Q<DeviceParams>,
) -> Result<Json<Peak>, ApiError> {
    let d = device_summary(&st, &id, &q).await?;
    Ok(Json(Peak {
        device: d.device,
        peak_allocated_bytes: d.peak_allocated_bytes,
        peak_time_us: d.peak_time_us,
        peak_event_index: d.peak_event_index,
        peak_reserved_bytes: d.peak_reserved_bytes,
        peak_stacks: d.peak_stacks,
        fragmentation_at_peak: d.fragmentation_at_peak,
    }))
}

#[utoipa::path(get, path = routes::LEAKS, tag = "queries", params(("id" = String, Path), DeviceParams), responses((status = 200, body = [LeakCandidate])))]
pub async fn leaks(
    State(st): State<Shared>,
    ReportPath(id): ReportPath,
    Q(q): Q<DeviceParams>,
) -> Result<Json<Vec<LeakCandidate>>, ApiError> {
    Ok(Json(device_summary(&st, &id, &q).await?.leaks))
}

#[utoipa::path(get, path = routes::OOMS, tag = "queries", params(("id" = String, Path), DeviceParams), responses((status = 200, body = [OomExplanation])))]
pub async fn ooms(
    State(st): State<Shared>,
    ReportPath(id): ReportPath,
    Q(q): Q<DeviceParams>,
) -> Result<Json<Vec<OomExplanation>>, ApiError> {
    Ok(Json(device_summary(&st, &id, &q).await?.ooms))
}

#[utoipa::path(get, path = routes::ANNOTATIONS, tag = "queries", params(("id" = String, Path), DeviceParams), responses((status = 200, body = [PhaseRange])))]
pub async fn annotations(
    State(st): State<Shared>,
    ReportPath(id): ReportPath,
    Q(q): Q<DeviceParams>,
) -> Result<Json<Vec<PhaseRange>>, ApiError> {
    Ok(Json(device_summary(&st, &id, &q).await?.phases))
}

#[utoipa::path(get, path = routes::STACK, tag = "queries",
    params(("id" = String, Path), ("stack" = u32, Path), FileParams), responses((status = 200, body = [FrameView])))]
pub async fn stack(
    State(st): State<Shared>,
    Path((id, stack)): Path<(String, u32)>,
    Q(q): Q<FileParams>,
) -> Result<Json<Vec<FrameView>>, ApiError> {
    let id = link_id(&id)?;
    let frames = with_file(&st, &id, q.file.unwrap_or(0), move |f| {
        let stacks = f.stacks().map_err(internal)?;
        Ok(query::stack_frames(&stacks, stack))
    })
    .await?;
    Ok(Json(frames))
}

/// An address as given: decimal or `0x` hex.
fn parse_address(a: &str) -> Result<i64, ApiError> {
    match a.strip_prefix("0x").or_else(|| a.strip_prefix("0X")) {
        Some(h) => i64::from_str_radix(h, 16),
        None => a.parse::<i64>(),
    }
    .map_err(|_| ApiError::BadRequest(format!("`{a}` is not an address")))
}

#[utoipa::path(get, path = routes::ALLOCATIONS, tag = "queries",
    params(("id" = String, Path), SearchParams), responses((status = 200, body = SearchResult)))]
pub async fn allocations(
    State(st): State<Shared>,
    ReportPath(id): ReportPath,
    Q(q): Q<SearchParams>,
) -> Result<Json<SearchResult>, ApiError> {
    let addr = match q.addr.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(a) => Some(parse_address(a)?),
    };
    if addr.is_none() && q.stack.as_deref().is_none_or(str::is_empty) {
        return Err(ApiError::BadRequest("give `addr` or `stack`".into()));
    }
    let s = summary_of(&st, &id).await?;
    let (fi, d) = pick(&s, q.file, q.device)?;
    let device = d.device;
    let limit = q.limit.unwrap_or(200).min(5_000);
    let (total, allocations) = with_file(&st, &id, fi, move |f| {
        let (devices, stacks) = (f.devices().map_err(internal)?, f.stacks().map_err(internal)?);
        query::search_allocations(frames_of(&devices, device)?, &stacks, addr, q.stack.as_deref(), limit)
            .map_err(internal)
    })
    .await?;
    Ok(Json(SearchResult { total, allocations }))
}

#[utoipa::path(get, path = routes::GPU_SAMPLES, tag = "queries",
    params(("id" = String, Path), GpuSamplesParams), responses((status = 200, body = GpuSeries)))]
pub async fn gpu_samples(
    State(st): State<Shared>,
    ReportPath(id): ReportPath,
    Q(q): Q<GpuSamplesParams>,
) -> Result<Json<GpuSeries>, ApiError> {
    let s = summary_of(&st, &id).await?;
    let (li, g) = pick_gpu(&s, q.log, q.gpu)?;
    let gpu = g.gpu;
    let logs = loaded_gpu_logs(&st, &id).await?;
    let series = blocking(logs, move |logs| {
        let samples = logs
            .get(li)
            .ok_or_else(|| ApiError::Internal("GPU samples missing".into()))?;
        let (start, end, aggregated, points) =
            gpu_series(samples, gpu, q.start, q.end, q.width.unwrap_or(1000)).map_err(internal)?;
        Ok(GpuSeries {
            log: li,
            gpu,
            start,
            end,
            aggregated,
            points,
        })
    })
    .await?;
    Ok(Json(series))
}

#[utoipa::path(get, path = routes::WHATIF, tag = "queries",
    params(("id" = String, Path), WhatIfParams), responses((status = 200, body = WhatIfFile), (status = 400, body = memlens_api::ErrorBody)))]
pub async fn whatif(
    State(st): State<Shared>,
    ReportPath(id): ReportPath,
    Q(q): Q<WhatIfParams>,
) -> Result<Json<WhatIfFile>, ApiError> {
    let s = summary_of(&st, &id).await?;
    let fi = q.file.unwrap_or(0);
    if s.files.get(fi).is_none() {
        return Err(ApiError::BadRequest(format!("no file {fi} in this report")));
    }
    if let Some(d) = q.device {
        pick(&s, Some(fi), Some(d))?;
    }
    Ok(Json(crate::app::whatif::what_if_report(&st.reports, &id, fi, q).await?))
}
