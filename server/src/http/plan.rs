//! `GET /api/plan`: the Plan page's budget from a model's config or a bundled model's name
//! (`memlens_core::plan`), calibrated by a report of a run of the same model when `calibrate`
//! names one — or, with `serve`, a serving engine's startup (`memlens_core::plan::serve`),
//! calibrated by a report of a startup log; `GET /api/plan/models`: the bundled models the
//! page's picker offers.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use memlens_api::routes;
use memlens_api::{Plan, PlanModel, PlanParams, ServingPlan};
use memlens_core::plan::calibrate::{calibrating_run, plan_by_busiest_device};

use super::error::{internal, ApiError, Q};
use super::queries::with_file;
use super::state::{link_id, summary_of, Shared};

/// The bundled models `model` takes by name, each with its parameter count.
#[utoipa::path(get, path = routes::PLAN_MODELS, tag = "queries", responses((status = 200, body = Vec<PlanModel>)))]
pub async fn models() -> Json<Vec<PlanModel>> {
    Json(memlens_core::plan::presets::models())
}

/// A training step's plan, or with `serve` a serving engine's startup ([`ServingPlan`]).
#[utoipa::path(get, path = routes::PLAN, tag = "queries",
    params(PlanParams), responses((status = 200, body = Plan, description = "a training step's plan; with serve=true a ServingPlan"), (status = 400, body = memlens_api::ErrorBody)))]
pub async fn plan(State(st): State<Shared>, Q(q): Q<PlanParams>) -> Result<Response, ApiError> {
    if q.serve == Some(true) {
        return serving_plan(&st, &q).await.map(|p| Json(p).into_response());
    }
    training_plan(st, q).await.map(|p| p.into_response())
}

/// The serving plan, calibrated by a report of a vLLM or SGLang startup log when `calibrate`
/// names one (its first file with a startup).
async fn serving_plan(st: &Shared, q: &PlanParams) -> Result<ServingPlan, ApiError> {
    use memlens_core::plan::serve::{calibrate::LogCalibration, serve_plan};
    let bad = |e: memlens_core::plan::PlanError| ApiError::BadRequest(e.to_string());
    let Some(link) = q.calibrate.clone().filter(|c| !c.is_empty()) else {
        return serve_plan(q, None).map_err(bad);
    };
    let id = link_id(&link)?;
    let s = summary_of(st, &id).await?;
    let Some(log) = s.files.iter().find_map(|f| f.serving.clone()) else {
        return Err(ApiError::BadRequest(format!(
            "report {link} holds no vLLM or SGLang startup log to calibrate a serving plan by"
        )));
    };
    let name = routes::fill(routes::REPORT_PAGE, &[&link]);
    serve_plan(q, Some(&LogCalibration { name, log })).map_err(bad)
}

/// A training step's plan, calibrated by a report of a run when `calibrate` names one.
async fn training_plan(st: Shared, q: PlanParams) -> Result<Json<Plan>, ApiError> {
    let bad = |e: memlens_core::plan::PlanError| ApiError::BadRequest(e.to_string());
    let Some(link) = q.calibrate.clone().filter(|c| !c.is_empty()) else {
        return memlens_core::plan::plan(&q, None).map(Json).map_err(bad);
    };
    let id = link_id(&link)?;
    let Ok((run_batch, run_seq)) = calibrating_run(&q) else {
        return Err(ApiError::BadRequest(
            "calibrate needs run_batch_size and run_seq_len: the calibrating run's batch and sequence length".into(),
        ));
    };
    let s = summary_of(&st, &id).await?;
    // The file with the largest allocated peak (a run of ranks: its worst rank).
    let Some((fi, _)) = s
        .files
        .iter()
        .enumerate()
        .max_by_key(|(_, f)| f.devices.iter().map(|d| d.peak_allocated_bytes).max().unwrap_or(0))
    else {
        return Err(ApiError::BadRequest(format!(
            "report {link} has no file to calibrate by"
        )));
    };
    let name = routes::fill(routes::REPORT_PAGE, &[&link]);
    let plan = with_file(&st, &id, fi, move |f| {
        let frames = f.devices().map_err(internal)?;
        plan_by_busiest_device(&q, &name, (run_batch, run_seq), &s.files[fi], &frames, &s.gpu_logs).map_err(internal)
    })
    .await?;
    match plan {
        Some(plan) => plan.map(Json).map_err(bad),
        None => Err(ApiError::BadRequest(format!(
            "report {link} has no allocator history to calibrate by"
        ))),
    }
}
