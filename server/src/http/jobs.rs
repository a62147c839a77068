//! `GET /api/jobs/{id}`: a job's runs in upload order, each with its peaks and categories and
//! whether it broke the job's limits against the last analysed run before it;
//! `PATCH /api/jobs/{id}` sets those limits (with the job's owner token).

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::Json;
use memlens_api::routes;
use memlens_api::{
    AnalyzeOutput, CategoryBytes, DeleteParams, DeviceSummary, JobRegression, JobRun, JobView, ReportState, Thresholds,
};
use memlens_core::analysis::check::{check_run, checked_device, RunDelta};

use super::error::{internal, ApiError, Q};
use super::state::{now, summary_of, Shared};
use crate::ids::{self, JobId};
use crate::storage::store::{JobRecord, ReportRecord};

/// The job a link names, and its reports.
async fn job_and_runs(st: &Shared, id: &str) -> Result<(JobRecord, Vec<ReportRecord>), ApiError> {
    let id = JobId::from_link(id).ok_or(ApiError::NoSuchJob)?;
    let store = st.reports.store.clone();
    tokio::task::spawn_blocking(move || -> Result<_, ApiError> {
        let job = store.job(&id).map_err(internal)?.ok_or(ApiError::NoSuchJob)?;
        let runs = store.job_reports(&id).map_err(internal)?;
        Ok((job, runs))
    })
    .await
    .map_err(internal)?
}

/// The device a run is held to its limits on, with its summary.
struct Measured {
    summary: std::sync::Arc<AnalyzeOutput>,
    file: usize,
    device: i64,
}

impl Measured {
    fn device(&self) -> Option<&DeviceSummary> {
        self.summary
            .files
            .get(self.file)?
            .devices
            .iter()
            .find(|d| d.device == self.device)
    }
}

async fn view(st: &Shared, job: JobRecord, reports: Vec<ReportRecord>) -> JobView {
    let thresholds = job.thresholds.clone().unwrap_or_else(Thresholds::default_gate);
    let mut runs = Vec::with_capacity(reports.len());
    let mut before: Option<(String, Measured)> = None;
    for r in reports {
        let expired = r.expires_at.is_some_and(|e| e <= now());
        let measured = match (r.state, expired) {
            (ReportState::Ready, false) => summary_of(st, &r.id).await.ok().and_then(|summary| {
                let (file, d) = checked_device(&summary)?;
                let device = d.device;
                Some(Measured {
                    file,
                    device,
                    summary: summary.clone(),
                })
            }),
            _ => None,
        };
        let device = measured.as_ref().and_then(Measured::device);
        let regression = match (device, before.as_ref().and_then(|(id, m)| Some((id, m.device()?)))) {
            (Some(d), Some((before_id, b))) => {
                let outcome = check_run(RunDelta::from_summaries(("", d), ("", b)), &thresholds);
                (!outcome.passed).then(|| JobRegression {
                    against: before_id.clone(),
                    verdict: outcome.verdict,
                    violations: outcome.violations,
                })
            }
            _ => None,
        };
        runs.push(JobRun {
            id: r.id.to_string(),
            url: routes::fill(routes::REPORT_PAGE, &[&r.id.to_string()]),
            created_at: r.created_at,
            title: r.meta.title.clone(),
            state: if expired { ReportState::Failed } else { r.state },
            peak_allocated_bytes: device.map(|d| d.peak_allocated_bytes),
            peak_reserved_bytes: device.map(|d| d.peak_reserved_bytes),
            by_category: device
                .map(|d| {
                    d.categories
                        .iter()
                        .filter(|c| c.bytes_at_peak != 0)
                        .map(|c| CategoryBytes {
                            category: c.category,
                            bytes: c.bytes_at_peak,
                        })
                        .collect()
                })
                .unwrap_or_default(),
            regression,
        });
        if let Some(m) = measured {
            before = Some((r.id.to_string(), m));
        }
    }
    JobView {
        url: routes::fill(routes::JOB_PAGE, &[&job.id.to_string()]),
        id: job.id.to_string(),
        name: job.name,
        thresholds,
        runs,
    }
}

#[utoipa::path(get, path = routes::JOB, tag = "jobs", params(("id" = String, Path)),
    responses((status = 200, body = JobView), (status = 404, body = memlens_api::ErrorBody)))]
pub async fn job(State(st): State<Shared>, Path(id): Path<String>) -> Result<Json<JobView>, ApiError> {
    let (job, runs) = job_and_runs(&st, &id).await?;
    Ok(Json(view(&st, job, runs).await))
}

/// Sets the limits each run is held to; needs the owner token the job's first upload answered
/// with (`X-Delete-Token` or `?token=`).
#[utoipa::path(patch, path = routes::JOB, tag = "jobs",
    params(("id" = String, Path), DeleteParams), request_body = Thresholds,
    responses((status = 200, body = JobView), (status = 400, body = memlens_api::ErrorBody),
              (status = 403, body = memlens_api::ErrorBody), (status = 404, body = memlens_api::ErrorBody)))]
pub async fn edit_thresholds(
    State(st): State<Shared>,
    Path(id): Path<String>,
    Q(q): Q<DeleteParams>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Json<JobView>, ApiError> {
    let (mut job, runs) = job_and_runs(&st, &id).await?;
    if !ids::token_matches(&super::reports::owner_token(&headers, q), &job.owner_token_hash) {
        return Err(ApiError::Forbidden);
    }
    let thresholds: Thresholds =
        serde_json::from_slice(&body).map_err(|e| ApiError::BadRequest(format!("thresholds: {e}")))?;
    let store = st.reports.store.clone();
    let (id2, t2) = (job.id.clone(), thresholds.clone());
    tokio::task::spawn_blocking(move || store.set_job_thresholds(&id2, &t2))
        .await
        .map_err(internal)?
        .map_err(internal)?;
    job.thresholds = Some(thresholds);
    Ok(Json(view(&st, job, runs).await))
}
