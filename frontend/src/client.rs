//! Typed calls of the memlens API: one function per endpoint, paths from the route table
//! (`memlens_api::routes`) and query strings serialised from the parameter types of
//! `memlens-api` (the same types the server deserialises), so no URL is assembled by hand.

use memlens_api::routes::{self, Page};
use memlens_api::{
    AnalyzeOutput, CategoryTimeline, ChartParams, CompareParams, Comparison, DeviceParams, FileParams, FlameGraph,
    FragmentationSeries, FrameView, GpuSamplesParams, GpuSeries, JobView, SearchParams, SearchResult, SegmentMap,
    SegmentsParams, ServerLimits, SideRef, Status, Thresholds, Timeline, TimelineParams, WhatIfFile, WhatIfParams,
};
use serde::Serialize;

use crate::fetch::{get_json, FetchError};

/// Uploads files into a new report; `on_progress(sent, total)` follows the upload.
pub async fn upload(
    files: Vec<web_sys::File>,
    on_progress: impl Fn(f64, f64) + 'static,
) -> Result<memlens_api::Created, FetchError> {
    crate::fetch::upload_to(routes::REPORTS, files, on_progress).await
}

/// `path` with `params` as its query string (nothing when they are all unset).
fn url<P: Serialize>(path: &str, params: &P) -> String {
    match serde_urlencoded::to_string(params) {
        Ok(q) if !q.is_empty() => format!("{path}?{q}"),
        _ => path.to_owned(),
    }
}

fn report_path(template: &str, id: &str) -> String {
    routes::report(template, id)
}

pub async fn limits() -> Result<ServerLimits, FetchError> {
    get_json(routes::LIMITS).await
}

pub async fn status(id: &str) -> Result<Status, FetchError> {
    get_json(&report_path(routes::REPORT_STATUS, id)).await
}

pub async fn summary(id: &str) -> Result<AnalyzeOutput, FetchError> {
    get_json(&report_path(routes::REPORT, id)).await
}

pub async fn timeline(id: &str, params: &TimelineParams) -> Result<Timeline, FetchError> {
    get_json(&url(&report_path(routes::TIMELINE, id), params)).await
}

pub async fn flame(id: &str, params: &TimelineParams) -> Result<FlameGraph, FetchError> {
    get_json(&url(&report_path(routes::FLAME, id), params)).await
}

pub async fn allocations(id: &str, params: &SearchParams) -> Result<SearchResult, FetchError> {
    get_json(&url(&report_path(routes::ALLOCATIONS, id), params)).await
}

pub async fn category_timeline(id: &str, params: &TimelineParams) -> Result<CategoryTimeline, FetchError> {
    get_json(&url(&report_path(routes::CATEGORIES, id), params)).await
}

pub async fn gpu_samples(id: &str, params: &GpuSamplesParams) -> Result<GpuSeries, FetchError> {
    get_json(&url(&report_path(routes::GPU_SAMPLES, id), params)).await
}

pub async fn fragmentation(id: &str, params: &DeviceParams) -> Result<FragmentationSeries, FetchError> {
    get_json(&url(&report_path(routes::FRAGMENTATION, id), params)).await
}

pub async fn segments(id: &str, params: &SegmentsParams) -> Result<SegmentMap, FetchError> {
    get_json(&url(&report_path(routes::SEGMENTS, id), params)).await
}

pub async fn stack(id: &str, file: usize, stack: u32) -> Result<Vec<FrameView>, FetchError> {
    let params = FileParams { file: Some(file) };
    get_json(&url(&routes::fill(routes::STACK, &[id, &stack.to_string()]), &params)).await
}

/// A job's runs.
pub async fn job(id: &str) -> Result<JobView, FetchError> {
    get_json(&routes::fill(routes::JOB, &[id])).await
}

/// Sets a job's thresholds with its owner token.
pub async fn set_job_thresholds(id: &str, token: &str, thresholds: &Thresholds) -> Result<JobView, FetchError> {
    let body = serde_json::to_string(thresholds).map_err(|e| FetchError {
        status: 0,
        message: e.to_string(),
    })?;
    crate::fetch::patch_json(&routes::fill(routes::JOB, &[id]), token, &body).await
}

/// Two sides compared, A − B.
pub async fn compare(params: &CompareParams) -> Result<Comparison, FetchError> {
    get_json(&url(routes::COMPARE, params)).await
}

pub async fn whatif(id: &str, params: &WhatIfParams) -> Result<WhatIfFile, FetchError> {
    get_json(&url(&report_path(routes::WHATIF, id), params)).await
}

/// The address of a chart image (for `<img src>`).
pub fn chart_svg_url(id: &str, params: &ChartParams) -> String {
    url(&report_path(routes::CHART_SVG, id), params)
}

/// The share page of a report.
pub fn report_page(id: &str) -> String {
    Page::Report { id: id.to_owned() }.path()
}

/// The page of one snapshot file (a rank) of a report.
pub fn report_file_page(id: &str, file: usize) -> String {
    format!("{}?file={file}", report_page(id))
}

/// The share page of a comparison.
pub fn compare_page(a: &SideRef, b: &SideRef) -> String {
    Page::Compare {
        a: a.to_string(),
        b: b.to_string(),
    }
    .path()
}

/// A plan's budget (`GET /api/plan?…`).
pub async fn plan(params: &memlens_api::PlanParams) -> Result<memlens_api::Plan, FetchError> {
    get_json(&url(routes::PLAN, params)).await
}

/// A serving plan (`GET /api/plan?serve=true&…`).
pub async fn serving_plan(params: &memlens_api::PlanParams) -> Result<memlens_api::ServingPlan, FetchError> {
    get_json(&url(routes::PLAN, params)).await
}

/// The bundled models the plan knows by name (the Plan page's picker).
pub async fn plan_models() -> Result<Vec<memlens_api::PlanModel>, FetchError> {
    get_json(routes::PLAN_MODELS).await
}

/// The Plan page with these settings (shareable: the settings are the query).
pub fn plan_page(params: &memlens_api::PlanParams) -> String {
    url(routes::PLAN_PAGE, params)
}
