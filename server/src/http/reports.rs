//! A report as a resource: its status while processing, its summary, deleting it with its
//! token, and the server's upload limits.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use memlens_api::{AnalyzeOutput, DeleteParams, ErrorBody, ServerLimits, Status};

use super::error::{internal, ApiError, Q};
use super::state::{record, status_of, summary_of, Shared};
use crate::ids;

#[utoipa::path(get, path = "/api/reports/{id}/status", tag = "reports", params(("id" = String, Path)),
    responses((status = 200, body = Status), (status = 404, body = ErrorBody), (status = 410, body = ErrorBody)))]
pub async fn status(State(st): State<Shared>, Path(id): Path<String>) -> Result<Json<Status>, ApiError> {
    let rec = record(&st, &id).await?;
    Ok(Json(status_of(&st, &rec)))
}

#[utoipa::path(get, path = "/api/reports/{id}", tag = "reports", params(("id" = String, Path)),
    responses((status = 200, body = AnalyzeOutput, description = "the same JSON as `memlens analyze --json`"),
              (status = 202, body = ErrorBody), (status = 404, body = ErrorBody), (status = 410, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn summary(State(st): State<Shared>, Path(id): Path<String>) -> Result<Json<AnalyzeOutput>, ApiError> {
    Ok(Json(Arc::unwrap_or_clone(summary_of(&st, &id).await?)))
}

#[utoipa::path(delete, path = "/api/reports/{id}", tag = "reports",
    params(("id" = String, Path), DeleteParams),
    responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn delete_report(
    State(st): State<Shared>,
    Path(id): Path<String>,
    Q(q): Q<DeleteParams>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    if !ids::is_report_id(&id) {
        return Err(ApiError::NotFound);
    }
    let store = st.store.clone();
    let id2 = id.clone();
    let rec = tokio::task::spawn_blocking(move || store.get(&id2))
        .await
        .map_err(internal)?
        .map_err(internal)?
        .ok_or(ApiError::NotFound)?;
    let token = headers
        .get("x-delete-token")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or(q.token)
        .unwrap_or_default();
    if !ids::token_matches(&token, &rec.delete_token_hash) {
        return Err(ApiError::Forbidden);
    }
    let store = st.store.clone();
    let id2 = id.clone();
    tokio::task::spawn_blocking(move || store.delete(&id2))
        .await
        .map_err(internal)?
        .map_err(internal)?;
    st.forget(&id);
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/api/limits", tag = "reports", responses((status = 200, body = ServerLimits)))]
pub async fn limits(State(st): State<Shared>) -> Json<ServerLimits> {
    Json(ServerLimits {
        max_upload_bytes: st.config.max_upload,
        retention_days: st.config.retention_days,
    })
}
