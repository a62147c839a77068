//! What the handlers share: the store's reports (the application layer's [`Reports`], with
//! their caches), who may upload and the server's settings; and the lookups every report
//! endpoint starts with (record → ready → summary, or one loaded file, or the NVML samples),
//! each [`Reports`]' answer with its error as HTTP's.

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use memlens_api::{AnalyzeOutput, Status};
use polars_core::prelude::DataFrame;

use super::auth::{UploadAuth, UploadLimit};
use super::error::ApiError;
pub use crate::app::reports::now;
use crate::app::reports::{ReportError, Reports};
use crate::ids::ReportId;
use crate::storage::reportdata::LoadedFile;
use crate::storage::store::ReportRecord;

/// Server settings the handlers need.
#[derive(Clone, Debug)]
pub struct HttpConfig {
    pub max_upload: u64,
    pub retention_days: u64,
    pub static_dir: PathBuf,
    /// API requests served at once; more are answered 503 with `Retry-After` at once.
    pub max_in_flight: usize,
    /// An upload whose body sends nothing for this long is dropped (408).
    pub body_timeout: std::time::Duration,
}

pub struct AppState {
    /// The store's reports, with their caches (the application layer's).
    pub reports: Arc<Reports>,
    /// Who may upload, and how often.
    pub upload_auth: UploadAuth,
    pub upload_limit: UploadLimit,
    pub config: HttpConfig,
}

pub type Shared = Arc<AppState>;

/// The report a request's path names (`/api/reports/{id}/…`, `/r/{id}`): an id of any shape
/// but a minted one is a 404, as an unknown one is, so a path never reaches the store with a
/// name it could misuse.
pub struct ReportPath(pub ReportId);

impl<S: Send + Sync> FromRequestParts<S> for ReportPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(id) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::NotFound)?;
        link_id(&id).map(ReportPath)
    }
}

/// The report id a link names; any other shape is a 404.
pub fn link_id(id: &str) -> Result<ReportId, ApiError> {
    ReportId::from_link(id).ok_or(ApiError::NotFound)
}

impl AppState {
    pub fn new(
        reports: Arc<Reports>,
        config: HttpConfig,
        (upload_auth, upload_limit): (UploadAuth, UploadLimit),
    ) -> Arc<AppState> {
        Arc::new(AppState {
            reports,
            upload_auth,
            upload_limit,
            config,
        })
    }
}

impl From<ReportError> for ApiError {
    fn from(e: ReportError) -> ApiError {
        match e {
            ReportError::NotFound => ApiError::NotFound,
            ReportError::Gone => ApiError::Gone,
            ReportError::NotReady(status) => ApiError::NotReady(status),
            ReportError::Failed(status) => ApiError::Failed(status),
            ReportError::NoFile(_) => ApiError::BadRequest(e.to_string()),
            ReportError::Invalid(message) => ApiError::BadRequest(message),
            ReportError::Internal(message) => ApiError::Internal(message),
        }
    }
}

/// [`Reports::record`] for a handler.
pub async fn record(st: &Shared, id: &ReportId) -> Result<ReportRecord, ApiError> {
    Ok(st.reports.record(id).await?)
}

/// [`Reports::status_of`] for a handler.
pub fn status_of(st: &Shared, rec: &ReportRecord) -> Status {
    st.reports.status_of(rec)
}

/// [`Reports::ready`] for a handler.
pub async fn ready(st: &Shared, id: &ReportId) -> Result<ReportRecord, ApiError> {
    Ok(st.reports.ready(id).await?)
}

/// [`Reports::summary_of`] for a handler.
pub async fn summary_of(st: &Shared, id: &ReportId) -> Result<Arc<AnalyzeOutput>, ApiError> {
    Ok(st.reports.summary_of(id).await?)
}

/// [`Reports::loaded_file`] for a handler: an index past the report's files is a 400.
pub async fn loaded_file(st: &Shared, id: &ReportId, file: usize) -> Result<Arc<LoadedFile>, ApiError> {
    Ok(st.reports.loaded_file(id, file).await?)
}

/// [`Reports::loaded_gpu_logs`] for a handler.
pub async fn loaded_gpu_logs(st: &Shared, id: &ReportId) -> Result<Arc<Vec<DataFrame>>, ApiError> {
    Ok(st.reports.loaded_gpu_logs(id).await?)
}
