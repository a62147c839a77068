//! `/r/{id}`: the frontend's page with link-preview tags (`og:title`, and `og:image` when the
//! report has a chart).

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use memlens_api::ReportState;

use super::state::{record, Shared};
use crate::ids;
use crate::reportdata::{self, CHART_PNG};

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Whether the report's data has a default chart (reports of per-process logs alone have none).
async fn has_chart(st: &Shared, id: &str) -> bool {
    if !ids::is_report_id(id) {
        return false;
    }
    let (store, id) = (st.store.clone(), id.to_owned());
    tokio::task::spawn_blocking(move || reportdata::read_object(store.as_ref(), &id, CHART_PNG))
        .await
        .ok()
        .and_then(Result::ok)
        .flatten()
        .is_some()
}

pub async fn report_page(State(st): State<Shared>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let index = st.config.static_dir.join("index.html");
    let html = match tokio::fs::read_to_string(&index).await {
        Ok(h) => h,
        Err(e) => {
            tracing::error!("cannot read {}: {e}", index.display());
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the frontend is not built (run the start command)",
            )
                .into_response();
        }
    };
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    let (title, image) = match record(&st, &id).await {
        Ok(rec) if rec.state == ReportState::Ready && has_chart(&st, &id).await => {
            let name = rec.files.first().map_or("report".to_owned(), |f| f.name.clone());
            (
                format!("memlens: {name}"),
                Some(format!("http://{host}/api/reports/{id}/chart.png")),
            )
        }
        _ => ("memlens report".to_owned(), None),
    };
    let mut tags = format!(
        "<meta property=\"og:title\" content=\"{}\" />\n<meta property=\"og:type\" content=\"website\" />\n",
        escape(&title)
    );
    if let Some(img) = image {
        tags += &format!(
            "<meta property=\"og:image\" content=\"{0}\" />\n<meta name=\"twitter:card\" content=\"summary_large_image\" />\n<meta name=\"twitter:image\" content=\"{0}\" />\n",
            escape(&img)
        );
    }
    let html = html.replacen("</head>", &format!("{tags}</head>"), 1);
    Html(html).into_response()
}
