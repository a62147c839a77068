//! `GET /api/compare?a=…&b=…`: two devices side by side, A − B; `GET /api/check`, the same
//! comparison held to a regression gate's limits. Each side is a report, a file of it or a
//! device of that file (`id`, `id:file`, `id:file:device`); the application layer compares them
//! (`app::compare::compare_reports`, `check_reports`).

use axum::extract::State;
use axum::Json;
use memlens_api::routes;
use memlens_api::{CheckOutcome, CheckParams, CompareParams, Comparison, SideRef};
use memlens_core::analysis::check::parse_thresholds;
use memlens_core::analysis::compare::COMPARE_WIDTH;

use super::error::{ApiError, Q};
use super::state::Shared;
use crate::app::compare::{check_reports, compare_reports};

/// The side `r` names, or a 400 that says what a side looks like.
fn side_ref(name: &str, value: &str) -> Result<SideRef, ApiError> {
    SideRef::parse(value).ok_or_else(|| {
        ApiError::BadRequest(format!(
            "{name}={value}: expected a report id, `id:file` or `id:file:device`"
        ))
    })
}

#[utoipa::path(get, path = routes::COMPARE, tag = "queries", params(CompareParams),
    responses((status = 200, body = Comparison), (status = 400, body = memlens_api::ErrorBody),
              (status = 404, body = memlens_api::ErrorBody)))]
pub async fn compare(State(st): State<Shared>, Q(q): Q<CompareParams>) -> Result<Json<Comparison>, ApiError> {
    let (ra, rb) = (side_ref("a", &q.a)?, side_ref("b", &q.b)?);
    Ok(Json(
        compare_reports(&st.reports, ra, rb, q.width.unwrap_or(COMPARE_WIDTH)).await?,
    ))
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
    Ok(Json(check_reports(&st.reports, new, baseline, &thresholds).await?))
}
