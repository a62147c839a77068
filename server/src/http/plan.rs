//! `GET /api/plan`: the Plan page's budget from a model's config or a bundled model's name,
//! calibrated by a report of a run of the same model when `calibrate` names one — or, with
//! `serve`, a serving engine's startup calibrated by a report of a startup log (the application
//! layer's `app::plan::plan_with_report`); `GET /api/plan/models`: the bundled models the page's
//! picker offers.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use memlens_api::routes;
use memlens_api::{Plan, PlanModel, PlanParams};

use super::error::{ApiError, Q};
use super::state::Shared;
use crate::app::plan::{plan_with_report, PlanAnswer, StoredPlanError};

/// The bundled models `model` takes by name, each with its parameter count.
#[utoipa::path(get, path = routes::PLAN_MODELS, tag = "queries", responses((status = 200, body = Vec<PlanModel>)))]
pub async fn models() -> Json<Vec<PlanModel>> {
    Json(memlens_core::plan::presets::models())
}

/// A training step's plan, or with `serve` a serving engine's startup ([`memlens_api::ServingPlan`]), each
/// calibrated by the stored report `calibrate` names.
#[utoipa::path(get, path = routes::PLAN, tag = "queries",
    params(PlanParams), responses((status = 200, body = Plan, description = "a training step's plan; with serve=true a ServingPlan"), (status = 400, body = memlens_api::ErrorBody)))]
pub async fn plan(State(st): State<Shared>, Q(q): Q<PlanParams>) -> Result<Response, ApiError> {
    Ok(match plan_with_report(&st.reports, q).await? {
        PlanAnswer::Training(p) => Json(p).into_response(),
        PlanAnswer::Serving(p) => Json(p).into_response(),
    })
}

impl From<StoredPlanError> for ApiError {
    fn from(e: StoredPlanError) -> ApiError {
        match e {
            StoredPlanError::Report(e) => e.into(),
            StoredPlanError::Plan(e) => ApiError::BadRequest(e.to_string()),
            StoredPlanError::Calibration(message) => ApiError::BadRequest(message),
        }
    }
}
