//! `GET /api/compare?a=…&b=…`: two devices side by side, A − B; `GET /api/check`, the same
//! comparison held to a regression gate's limits. Each side is a report, a file
//! of it or a device of that file (`id`, `id:file`, `id:file:device`), so two runs, two ranks of
//! one run or two devices of one snapshot compare the same way. Only the two files named are
//! loaded.

use axum::extract::State;
use axum::Json;
use memlens_api::routes;
use memlens_api::{AnalyzeOutput, CheckOutcome, CheckParams, CompareParams, Comparison, DeviceSummary, SideRef};
use memlens_core::analysis::check::{check_run, checked_device, parse_thresholds, RunDelta};
use memlens_core::analysis::compare::{compare_runs, CompareSide, COMPARE_WIDTH};
use memlens_core::analysis::run::busiest_device;

use super::error::{internal, ApiError, Q};
use super::queries::{blocking, frames_of};
use super::state::{link_id, loaded_file, summary_of, Shared};
use memlens_core::pipeline::DeviceFrames;
use memlens_core::stacks::StackResolver;

/// The side `r` names, or a 400 that says what a side looks like.
fn side_ref(name: &str, value: &str) -> Result<SideRef, ApiError> {
    SideRef::parse(value).ok_or_else(|| {
        ApiError::BadRequest(format!(
            "{name}={value}: expected a report id, `id:file` or `id:file:device`"
        ))
    })
}

/// The file index and device summary a side names.
fn device_of<'a>(s: &'a AnalyzeOutput, r: &SideRef) -> Result<(usize, &'a DeviceSummary), ApiError> {
    let fi = r.file.unwrap_or(0);
    let f = s
        .files
        .get(fi)
        .ok_or_else(|| ApiError::BadRequest(format!("no file {fi} in report {}", r.report)))?;
    let d = match r.device {
        Some(w) => f.devices.iter().find(|d| d.device == w),
        None => busiest_device(f),
    };
    let d = d.ok_or_else(|| {
        ApiError::BadRequest(match r.device {
            Some(w) => format!("no device {w} in file {fi} of report {}", r.report),
            None => format!("file {fi} of report {} has no device", r.report),
        })
    })?;
    Ok((fi, d))
}

/// One side's data for the comparison.
fn side<'a>(
    s: &'a AnalyzeOutput,
    r: &SideRef,
    fi: usize,
    dev: i64,
    (devices, stacks): (&'a [DeviceFrames], &'a StackResolver),
) -> Result<CompareSide<'a>, ApiError> {
    let d = s.files[fi].devices.iter().find(|d| d.device == dev);
    let d = d.ok_or_else(|| ApiError::Internal(format!("device {dev} missing")))?;
    let (label, rank) = label(s, fi, dev);
    Ok(CompareSide {
        label,
        report: Some(r.report.clone()),
        file: &s.files[fi],
        file_index: fi,
        device: d,
        frames: frames_of(devices, dev)?,
        stacks,
        rank,
    })
}

/// What a side is called: its rank in a run of several, else its file and device.
fn label(s: &AnalyzeOutput, fi: usize, device: i64) -> (String, Option<u32>) {
    let file = &s.files[fi].file;
    match s.run.as_ref().and_then(|r| r.ranks.iter().find(|k| k.file_index == fi)) {
        Some(k) => (format!("rank {} · {file}", k.rank), Some(k.rank)),
        None => (format!("{file} · {}", memlens_api::device_label(device)), None),
    }
}

#[utoipa::path(get, path = routes::COMPARE, tag = "queries", params(CompareParams),
    responses((status = 200, body = Comparison), (status = 400, body = memlens_api::ErrorBody),
              (status = 404, body = memlens_api::ErrorBody)))]
pub async fn compare(State(st): State<Shared>, Q(q): Q<CompareParams>) -> Result<Json<Comparison>, ApiError> {
    let (ra, rb) = (side_ref("a", &q.a)?, side_ref("b", &q.b)?);
    let c = comparison(&st, ra, rb, q.width.unwrap_or(COMPARE_WIDTH)).await?;
    Ok(Json(c))
}

/// `GET /api/check`: a regression gate over two reports, as `memlens check` answers it.
#[utoipa::path(get, path = routes::CHECK, tag = "queries", params(CheckParams),
    responses((status = 200, body = CheckOutcome), (status = 400, body = memlens_api::ErrorBody),
              (status = 404, body = memlens_api::ErrorBody)))]
pub async fn check(State(st): State<Shared>, Q(q): Q<CheckParams>) -> Result<Json<CheckOutcome>, ApiError> {
    let thresholds = parse_thresholds(
        q.max_peak_increase.as_deref(),
        q.max_reserved_increase.as_deref(),
        q.max_category_increase.as_deref(),
    )
    .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let (new, baseline) = (side_ref("new", &q.new)?, side_ref("baseline", &q.baseline)?);
    let (new, baseline) = (checked_side(&st, new).await?, checked_side(&st, baseline).await?);
    // Only the aligned timelines depend on the width, and a check reports none of them.
    let c = comparison(&st, new, baseline, 1).await?;
    Ok(Json(check_run(RunDelta::from_comparison(&c), &thresholds)))
}

/// A side as a check takes it: a report id alone is its worst rank's busiest device.
async fn checked_side(st: &Shared, r: SideRef) -> Result<SideRef, ApiError> {
    if r.file.is_some() {
        return Ok(r);
    }
    let summary = summary_of(st, &link_id(&r.report)?).await?;
    let (file, device) = checked_device(&summary)
        .ok_or_else(|| ApiError::BadRequest(format!("report {} has no allocator snapshot with a device", r.report)))?;
    Ok(SideRef {
        file: Some(file),
        device: r.device.or(Some(device.device)),
        ..r
    })
}

/// The comparison of the two sides named, A − B; only the two files named are loaded.
async fn comparison(st: &Shared, ra: SideRef, rb: SideRef, width: usize) -> Result<Comparison, ApiError> {
    let (report_a, report_b) = (link_id(&ra.report)?, link_id(&rb.report)?);
    let (sa, sb) = (summary_of(st, &report_a).await?, summary_of(st, &report_b).await?);
    let ((fa, da), (fb, db)) = (device_of(&sa, &ra)?, device_of(&sb, &rb)?);
    let (dev_a, dev_b) = (da.device, db.device);
    let (la, lb) = (
        loaded_file(st, &report_a, fa).await?,
        loaded_file(st, &report_b, fb).await?,
    );
    let both = std::sync::Arc::new((sa, sb, la.clone(), lb.clone()));
    let c = blocking(both, move |(sa, sb, la, lb)| {
        let parts = |f: &crate::storage::reportdata::LoadedFile| -> Result<_, ApiError> {
            Ok((f.devices().map_err(internal)?, f.stacks().map_err(internal)?))
        };
        let ((devs_a, stacks_a), (devs_b, stacks_b)) = (parts(la)?, parts(lb)?);
        let a = side(sa, &ra, fa, dev_a, (&devs_a, &stacks_a))?;
        let b = side(sb, &rb, fb, dev_b, (&devs_b, &stacks_b))?;
        compare_runs(&a, &b, width).map_err(internal)
    })
    .await;
    st.reports.files.reweigh(&report_a, fa, &la);
    st.reports.files.reweigh(&report_b, fb, &lb);
    c
}
