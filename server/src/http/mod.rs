//! The HTTP API (axum), one module per resource: [`uploads`] (who may upload: [`auth`]; ranks
//! of one job gathering into one report: `crate::app::runs`), [`reports`] (status, summary,
//! delete, limits), [`queries`] (level-of-detail), [`compare`] (two runs or ranks, A − B; the regression gate), [`jobs`] (the runs of a job), [`charts`], [`pages`] (share pages) and
//! [`ops`] (health, metrics, OpenAPI). [`state`] holds what handlers share, [`error`] the JSON
//! errors and the query extractor.
//!
//! The OpenAPI document is collected from the routes themselves (utoipa-axum), so a route
//! cannot be served undocumented or documented but not served.
//!
//! Invariants: handlers reach storage only through [`crate::storage::store::ReportStore`] (no filesystem
//! access except the built frontend's static files); uploads are cut off at `--max-upload`
//! (413) whatever the transfer encoding; CPU work runs on the blocking pool; 5xx causes are
//! logged, clients get "internal error"; every response carries `Referrer-Policy: no-referrer`;
//! no endpoint lists reports; API answers are gzipped for clients that accept gzip.

pub mod auth;
pub mod charts;
pub mod compare;
pub mod error;
pub mod jobs;
pub mod ops;
pub mod pages;
pub mod plan;
pub mod queries;
pub mod reports;
pub mod security;
pub mod state;
pub mod static_files;
pub mod uploads;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::routing::get;
use axum::Router;
pub use error::ApiError;
use memlens_api::routes;
pub use state::{AppState, HttpConfig, Shared};
use tower_http::compression::CompressionLayer;
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::CompressionLevel;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

#[derive(OpenApi)]
#[openapi(
    info(title = "memlens", description = "GPU memory reports: uploads, summaries and level-of-detail queries."),
    tags((name = "reports"), (name = "queries"), (name = "charts"), (name = "jobs"))
)]
struct ApiDoc;

/// The documented API routes and their OpenAPI document.
pub fn api_routes() -> (Router<Shared>, utoipa::openapi::OpenApi) {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(uploads::upload))
        .routes(routes!(uploads::add_window))
        .layer(DefaultBodyLimit::disable())
        .routes(routes!(reports::summary, reports::delete_report, reports::edit_meta))
        .routes(routes!(reports::status))
        .routes(routes!(reports::limits))
        .routes(routes!(queries::timeline))
        .routes(routes!(queries::category_timeline))
        .routes(routes!(queries::flame))
        .routes(routes!(queries::segments))
        .routes(routes!(queries::fragmentation))
        .routes(routes!(queries::peak))
        .routes(routes!(queries::leaks))
        .routes(routes!(queries::ooms))
        .routes(routes!(queries::annotations))
        .routes(routes!(queries::stack))
        .routes(routes!(queries::allocations))
        .routes(routes!(queries::gpu_samples))
        .routes(routes!(queries::whatif))
        .routes(routes!(plan::plan))
        .routes(routes!(plan::models))
        .routes(routes!(compare::compare))
        .routes(routes!(compare::check))
        .routes(routes!(jobs::job, jobs::edit_thresholds))
        .routes(routes!(charts::chart_png))
        .routes(routes!(charts::chart_svg))
        .split_for_parts()
}

/// The OpenAPI document served at `/api/openapi.json`.
pub fn openapi_document() -> utoipa::openapi::OpenApi {
    api_routes().1
}

/// The answer to a request shed under load: 503, retry in a second.
async fn overloaded(_: tower::BoxError) -> axum::response::Response {
    use axum::response::IntoResponse;
    let body = axum::Json(memlens_api::ErrorBody {
        error: "the server is busy; retry in a moment".to_owned(),
        status: None,
    });
    (
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        [(axum::http::header::RETRY_AFTER, "1")],
        body,
    )
        .into_response()
}

pub fn router(state: Shared) -> Router {
    let static_dir = state.config.static_dir.clone();
    let index = static_dir.join("index.html");
    let (api, doc) = api_routes();
    // Load shedding: beyond `max_in_flight` API requests at once, answer 503 at once.
    let api = api.layer(
        tower::ServiceBuilder::new()
            .layer(axum::error_handling::HandleErrorLayer::new(overloaded))
            .load_shed()
            .concurrency_limit(state.config.max_in_flight),
    );
    // API answers are gzipped for clients that accept it (a timeline answer is ~280 KiB of
    // JSON, a tenth of that gzipped), at the fastest level: the answer waits on it. Images
    // and answers of 32 bytes or less go out as they are (tower-http's default predicate).
    let api = api.layer(CompressionLayer::new().quality(CompressionLevel::Fastest));
    let router = api
        .route(routes::OPENAPI, get(ops::openapi))
        .layer(axum::Extension(Arc::new(doc)))
        .route(routes::HEALTHZ, get(ops::healthz))
        .route(routes::METRICS, get(ops::metrics))
        .route(routes::REPORT_PAGE, get(pages::report_page))
        .route(routes::COMPARE_PAGE, get(pages::compare_page))
        .route(routes::JOB_PAGE, get(pages::job_page))
        .route(routes::PLAN_PAGE, get(pages::plan_page))
        .merge(static_files::service(&static_dir));
    // Without a built UI (API-only runs) the policy still holds; it pins no inline script.
    let index_html = std::fs::read_to_string(&index).unwrap_or_default();
    let mut router = router;
    for (name, value) in security::headers(&index_html) {
        router = router.layer(SetResponseHeaderLayer::overriding(name, value));
    }
    router.with_state(state)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// The router serves exactly the API templates of the one route table, each documented.
    #[test]
    fn the_documented_routes_are_the_route_table() {
        let served: BTreeSet<String> = openapi_document().paths.paths.keys().cloned().collect();
        let table: BTreeSet<String> = routes::API.iter().map(|p| (*p).to_owned()).collect();
        assert_eq!(served, table);
    }
}
