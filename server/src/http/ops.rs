//! Operations: `/healthz`, Prometheus `/metrics`, and the OpenAPI document built from the
//! routes.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::state::Shared;

pub async fn healthz() -> &'static str {
    "ok"
}

pub async fn metrics(State(st): State<Shared>) -> Response {
    st.reports
        .metrics
        .set_imports_ahead_pending(st.reports.ingest.pre_imports_pending());
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        st.reports.metrics.render(),
    )
        .into_response()
}

/// The document [`super::router`] collected from the routes' annotations.
pub async fn openapi(
    axum::Extension(doc): axum::Extension<Arc<utoipa::openapi::OpenApi>>,
) -> Json<utoipa::openapi::OpenApi> {
    Json(doc.as_ref().clone())
}
