//! The OpenAPI document served at `/api/openapi.json`.

use utoipa::OpenApi;

use crate::http;

#[derive(OpenApi)]
#[openapi(
    info(title = "memlens", description = "GPU memory reports: uploads, summaries and level-of-detail queries."),
    paths(
        http::upload,
        http::limits,
        http::status,
        http::summary,
        http::delete_report,
        http::timeline,
        http::segments,
        http::fragmentation,
        http::peak,
        http::leaks,
        http::ooms,
        http::annotations,
        http::stack,
        http::allocations,
        http::gpu_samples,
        http::chart_png,
        http::chart_svg,
    ),
    tags((name = "reports"), (name = "queries"), (name = "charts"))
)]
struct ApiDoc;

pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}
