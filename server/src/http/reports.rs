//! A report as a resource: its status while processing, its summary, editing its metadata and
//! deleting it with its owner token, and the server's upload limits.

use memlens_api::routes;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use memlens_api::{AnalyzeOutput, DeleteParams, ErrorBody, MetaPatch, ServerLimits, Status};

use super::error::{internal, ApiError, Q};
use super::state::{now, record, status_of, summary_of, ReportPath, Shared};
use crate::ids::{self, ReportId};
use crate::storage::store::ReportRecord;

#[utoipa::path(get, path = routes::REPORT_STATUS, tag = "reports", params(("id" = String, Path)),
    responses((status = 200, body = Status), (status = 404, body = ErrorBody), (status = 410, body = ErrorBody)))]
pub async fn status(State(st): State<Shared>, ReportPath(id): ReportPath) -> Result<Json<Status>, ApiError> {
    let rec = record(&st, &id).await?;
    Ok(Json(status_of(&st, &rec)))
}

#[utoipa::path(get, path = routes::REPORT, tag = "reports", params(("id" = String, Path)),
    responses((status = 200, body = AnalyzeOutput, description = "the same JSON as `memlens analyze --json`"),
              (status = 202, body = ErrorBody), (status = 404, body = ErrorBody), (status = 410, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn summary(State(st): State<Shared>, ReportPath(id): ReportPath) -> Result<Json<AnalyzeOutput>, ApiError> {
    Ok(Json(Arc::unwrap_or_clone(summary_of(&st, &id).await?)))
}

/// The owner token a request carries: `X-Delete-Token`, else `?token=` (empty when neither).
pub(super) fn owner_token(headers: &HeaderMap, q: DeleteParams) -> String {
    headers
        .get("x-delete-token")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or(q.token)
        .unwrap_or_default()
}

/// The report's record when the request carries its owner token (`X-Delete-Token` or
/// `?token=`): 404 for no such report, 403 for a wrong or missing token.
async fn owned(st: &Shared, id: &ReportId, q: DeleteParams, headers: &HeaderMap) -> Result<ReportRecord, ApiError> {
    let store = st.reports.store.clone();
    let id2 = id.clone();
    let rec = tokio::task::spawn_blocking(move || store.get(&id2))
        .await
        .map_err(internal)?
        .map_err(internal)?
        .ok_or(ApiError::NotFound)?;
    if !ids::token_matches(&owner_token(headers, q), &rec.delete_token_hash) {
        return Err(ApiError::Forbidden);
    }
    Ok(rec)
}

/// Edits what the report says about itself (title, notes, tags, job, host) and its expiry;
/// needs the owner token the upload answered with.
#[utoipa::path(patch, path = routes::REPORT, tag = "reports",
    params(("id" = String, Path), DeleteParams), request_body = MetaPatch,
    responses((status = 200, body = Status), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn edit_meta(
    State(st): State<Shared>,
    ReportPath(id): ReportPath,
    Q(q): Q<DeleteParams>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Json<Status>, ApiError> {
    let patch: MetaPatch = serde_json::from_slice(&body).map_err(|e| ApiError::BadRequest(format!("metadata: {e}")))?;
    let mut rec = owned(&st, &id, q, &headers).await?;
    let m = &mut rec.meta;
    for (field, value) in [
        (&mut m.title, patch.title),
        (&mut m.notes, patch.notes),
        (&mut m.job, patch.job),
        (&mut m.host, patch.host),
    ] {
        if value.is_some() {
            *field = value;
        }
    }
    if let Some(tags) = patch.tags {
        m.tags = tags;
    }
    rec.meta = std::mem::take(&mut rec.meta).bounded();
    if let Some(days) = patch.expires_in_days {
        rec.expires_at = match (days, st.config.retention_days) {
            (0, 0) => None,
            (0, r) | (r, 0) => Some(now() + r as i64 * 86_400),
            (d, r) => Some(now() + d.min(r) as i64 * 86_400),
        };
    }
    let (store, id2, meta, expires) = (st.reports.store.clone(), id.clone(), rec.meta.clone(), rec.expires_at);
    tokio::task::spawn_blocking(move || store.set_meta(&id2, &meta, expires))
        .await
        .map_err(internal)?
        .map_err(internal)?;
    Ok(Json(status_of(&st, &rec)))
}

#[utoipa::path(delete, path = routes::REPORT, tag = "reports",
    params(("id" = String, Path), DeleteParams),
    responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn delete_report(
    State(st): State<Shared>,
    ReportPath(id): ReportPath,
    Q(q): Q<DeleteParams>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    owned(&st, &id, q, &headers).await?;
    let store = st.reports.store.clone();
    let id2 = id.clone();
    tokio::task::spawn_blocking(move || store.delete(&id2))
        .await
        .map_err(internal)?
        .map_err(internal)?;
    st.reports.forget(&id);
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = routes::LIMITS, tag = "reports", responses((status = 200, body = ServerLimits)))]
pub async fn limits(State(st): State<Shared>) -> Json<ServerLimits> {
    Json(ServerLimits {
        max_upload_bytes: st.config.max_upload,
        retention_days: st.config.retention_days,
    })
}
