//! `/r/{id}`, `/compare/{a}/{b}`, `/j/{id}` and `/plan`: the frontend's page with link-preview tags (`og:title`,
//! and for a report `og:image` when it has a chart).

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use memlens_api::routes;
use memlens_api::{ReportState, SideRef};

use super::state::{link_id, record, summary_of, Shared};
use crate::ids::ReportId;
use crate::storage::reportdata::{self, CHART_PNG};

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Whether the report's data has a default chart (reports of per-process logs alone have none).
async fn has_chart(st: &Shared, id: &ReportId) -> bool {
    let (store, id) = (st.reports.store.clone(), id.clone());
    tokio::task::spawn_blocking(move || reportdata::read_object(store.as_ref(), &id, CHART_PNG))
        .await
        .ok()
        .and_then(Result::ok)
        .flatten()
        .is_some()
}

/// The frontend's page with `tags` added to its head.
async fn page_with(st: &Shared, tags: String) -> Response {
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
    Html(html.replacen("</head>", &format!("{tags}</head>"), 1)).into_response()
}

fn title_tags(title: &str) -> String {
    format!(
        "<meta property=\"og:title\" content=\"{}\" />\n<meta property=\"og:type\" content=\"website\" />\n",
        escape(title)
    )
}

/// The share page of a report (any path id: the page itself says when there is no such report).
pub async fn report_page(State(st): State<Shared>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    let id = link_id(&id).ok();
    let rec = match &id {
        Some(id) => record(&st, id).await.ok(),
        None => None,
    };
    let name = rec.as_ref().map(|r| {
        r.meta
            .title
            .clone()
            .or_else(|| r.files.first().map(|f| f.name.clone()))
            .unwrap_or_else(|| "report".to_owned())
    });
    let image = match &rec {
        Some(r) if r.state == ReportState::Ready && has_chart(&st, &r.id).await => {
            let id = &r.id;
            Some(format!(
                "http://{host}{}",
                routes::report(routes::CHART_PNG, &id.to_string())
            ))
        }
        _ => None,
    };
    let title = name.map_or_else(|| "memlens report".to_owned(), |n| format!("memlens: {n}"));
    let mut tags = title_tags(&title);
    if let Some(notes) = rec.as_ref().and_then(|r| r.meta.notes.as_ref()) {
        tags += &format!("<meta property=\"og:description\" content=\"{}\" />\n", escape(notes));
    }
    if let Some(img) = image {
        tags += &format!(
            "<meta property=\"og:image\" content=\"{0}\" />\n<meta name=\"twitter:card\" content=\"summary_large_image\" />\n<meta name=\"twitter:image\" content=\"{0}\" />\n",
            escape(&img)
        );
    }
    page_with(&st, tags).await
}

/// The Plan page (`/plan?config=…&batch_size=…`): its settings live in the query.
pub async fn plan_page(State(st): State<Shared>) -> Response {
    page_with(&st, title_tags("memlens plan: will it fit?")).await
}

/// The page of a job; its title names the job.
pub async fn job_page(State(st): State<Shared>, Path(id): Path<String>) -> Response {
    let name = match crate::ids::JobId::from_link(&id) {
        Some(id) => {
            let store = st.reports.store.clone();
            tokio::task::spawn_blocking(move || store.job(&id))
                .await
                .ok()
                .and_then(Result::ok)
                .flatten()
                .map(|j| j.name)
        }
        None => None,
    };
    let title = name.map_or_else(|| "memlens job".to_owned(), |n| format!("memlens job: {n}"));
    page_with(&st, title_tags(&title)).await
}

/// The share page of a comparison; its title names the two sides' files.
pub async fn compare_page(State(st): State<Shared>, Path((a, b)): Path<(String, String)>) -> Response {
    let mut names = Vec::new();
    for side in [&a, &b] {
        let name = match SideRef::parse(side).and_then(|r| Some((link_id(&r.report).ok()?, r))) {
            Some((id, r)) => summary_of(&st, &id)
                .await
                .ok()
                .and_then(|s| s.files.get(r.file.unwrap_or(0)).map(|f| f.file.clone())),
            None => None,
        };
        names.push(name.unwrap_or_else(|| "report".to_owned()));
    }
    page_with(&st, title_tags(&format!("memlens: {} vs {}", names[0], names[1]))).await
}
