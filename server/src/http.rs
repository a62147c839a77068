//! The HTTP API (axum): uploads, status, summary, level-of-detail queries, charts, share
//! pages, health, metrics and the OpenAPI document.
//!
//! Invariants: uploads stream to disk and are cut off at `--max-upload` (413) whatever the
//! transfer encoding; CPU work runs on the blocking pool; 5xx causes are logged, clients get
//! "internal error"; every response carries `Referrer-Policy: no-referrer`; no endpoint lists
//! reports.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, FromRequest, Multipart, Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::StreamExt;
use memlens_api::{
    AnalyzeOutput, Created, DeviceSummary, ErrorBody, FragmentationSeries, GpuSeriesSummary, Peak, SearchResult,
    SegmentMap, Status,
};
use memlens_core::analysis::gpu_samples::gpu_series;
use memlens_core::analysis::DeviceEvents;
use serde::Deserialize;
use tokio::io::AsyncWriteExt;
use tower_http::services::{ServeDir, ServeFile};
use tower_http::set_header::SetResponseHeaderLayer;

use crate::ids;
use crate::ingest::Ingest;
use crate::metrics::Metrics;
use crate::query;
use crate::reportdata::{self, LoadedReport};
use crate::store::{ReportRecord, ReportState, ReportStore, StoredFile};
use memlens_api::{FrameView, Timeline};

/// Server settings the handlers need.
#[derive(Clone, Debug)]
pub struct HttpConfig {
    pub max_upload: u64,
    pub retention_days: u64,
    pub static_dir: PathBuf,
}

pub struct AppState {
    pub store: Arc<dyn ReportStore>,
    pub ingest: Arc<Ingest>,
    pub metrics: Arc<Metrics>,
    pub config: HttpConfig,
    cache: Mutex<Vec<(String, Arc<LoadedReport>)>>,
}

/// Loaded reports kept in memory for queries.
const CACHE_REPORTS: usize = 3;

impl AppState {
    pub fn new(
        store: Arc<dyn ReportStore>,
        ingest: Arc<Ingest>,
        metrics: Arc<Metrics>,
        config: HttpConfig,
    ) -> Arc<AppState> {
        Arc::new(AppState {
            store,
            ingest,
            metrics,
            config,
            cache: Mutex::new(Vec::new()),
        })
    }

    fn forget(&self, id: &str) {
        if let Ok(mut c) = self.cache.lock() {
            c.retain(|(k, _)| k != id);
        }
    }
}

type Shared = Arc<AppState>;

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
pub enum ApiError {
    NotFound,
    Gone,
    Forbidden,
    TooLarge(u64),
    BadRequest(String),
    /// Processing has not finished; carries the status.
    NotReady(Box<Status>),
    /// Processing failed; carries the status with its error.
    Failed(Box<Status>),
    /// Logged; the client sees only "internal error".
    Internal(String),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (code, error, status) = match self {
            ApiError::NotFound => (
                StatusCode::NOT_FOUND,
                "no such report (it may have been deleted)".to_owned(),
                None,
            ),
            ApiError::Gone => (StatusCode::GONE, "this report has expired".to_owned(), None),
            ApiError::Forbidden => (StatusCode::FORBIDDEN, "wrong or missing delete token".to_owned(), None),
            ApiError::TooLarge(limit) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("upload exceeds the limit of {limit} bytes"),
                None,
            ),
            ApiError::BadRequest(m) => (StatusCode::BAD_REQUEST, m, None),
            ApiError::NotReady(s) => (
                StatusCode::ACCEPTED,
                "the report is still being processed".to_owned(),
                Some(s),
            ),
            ApiError::Failed(s) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                s.error.clone().unwrap_or_else(|| "processing failed".into()),
                Some(s),
            ),
            ApiError::Internal(cause) => {
                tracing::error!("internal error: {cause}");
                (StatusCode::INTERNAL_SERVER_ERROR, "internal error".to_owned(), None)
            }
        };
        (
            code,
            Json(ErrorBody {
                error,
                status: status.map(|s| *s),
            }),
        )
            .into_response()
    }
}

fn internal<E: std::fmt::Display>(e: E) -> ApiError {
    ApiError::Internal(e.to_string())
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

// ---------------------------------------------------------------------------------------------
// Router
// ---------------------------------------------------------------------------------------------

pub fn router(state: Shared) -> Router {
    let static_dir = state.config.static_dir.clone();
    let index = static_dir.join("index.html");
    Router::new()
        .route("/api/reports", post(upload).layer(DefaultBodyLimit::disable()))
        .route("/api/reports/{id}", get(summary).delete(delete_report))
        .route("/api/reports/{id}/status", get(status))
        .route("/api/reports/{id}/timeline", get(timeline))
        .route("/api/reports/{id}/segments", get(segments))
        .route("/api/reports/{id}/fragmentation", get(fragmentation))
        .route("/api/reports/{id}/peak", get(peak))
        .route("/api/reports/{id}/leaks", get(leaks))
        .route("/api/reports/{id}/ooms", get(ooms))
        .route("/api/reports/{id}/annotations", get(annotations))
        .route("/api/reports/{id}/stacks/{stack}", get(stack))
        .route("/api/reports/{id}/allocations", get(allocations))
        .route("/api/reports/{id}/gpu_samples", get(gpu_samples))
        .route("/api/reports/{id}/chart.png", get(chart_png))
        .route("/api/reports/{id}/chart.svg", get(chart_svg))
        .route("/api/limits", get(limits))
        .route("/api/openapi.json", get(openapi))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/r/{id}", get(report_page))
        .fallback_service(ServeDir::new(static_dir).fallback(ServeFile::new(index)))
        .layer(SetResponseHeaderLayer::overriding(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ))
        .with_state(state)
}

// ---------------------------------------------------------------------------------------------
// Uploads
// ---------------------------------------------------------------------------------------------

#[derive(Deserialize)]
pub struct UploadQuery {
    /// File name for a raw (non-multipart) body.
    name: Option<String>,
    /// Expire this report after N days (at most the server's retention, when it has one).
    expires_in_days: Option<u64>,
}

fn sanitize(name: &str) -> String {
    let base = name.rsplit(['/', '\\']).next().unwrap_or(name);
    let s: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .take(120)
        .collect();
    let s = s.trim_start_matches('.').to_owned();
    if s.is_empty() {
        "upload".to_owned()
    } else {
        s
    }
}

/// Streams chunks to `path`, counting against `budget`; returns the bytes written.
async fn stream_to_file<S, E>(
    mut chunks: S,
    path: &std::path::Path,
    budget: &mut u64,
    limit: u64,
) -> Result<u64, ApiError>
where
    S: futures_util::Stream<Item = Result<axum::body::Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let mut f = tokio::fs::File::create(path).await.map_err(internal)?;
    let mut written = 0u64;
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| ApiError::BadRequest(format!("upload interrupted: {e}")))?;
        written += chunk.len() as u64;
        if written > *budget {
            return Err(ApiError::TooLarge(limit));
        }
        f.write_all(&chunk).await.map_err(internal)?;
    }
    f.sync_all().await.map_err(internal)?;
    *budget -= written;
    Ok(written)
}

#[utoipa::path(post, path = "/api/reports", tag = "reports",
    params(("name" = Option<String>, Query, description = "file name of a raw body"),
           ("expires_in_days" = Option<u64>, Query, description = "expire the report after N days")),
    request_body(content = String, description = "multipart/form-data with one or more `file` fields, or a raw body", content_type = "multipart/form-data"),
    responses((status = 201, body = Created), (status = 400, body = ErrorBody), (status = 413, body = ErrorBody)))]
pub async fn upload(
    State(st): State<Shared>,
    Query(q): Query<UploadQuery>,
    headers: HeaderMap,
    req: Request,
) -> Response {
    let id = ids::new_report_id();
    let (parts, body) = req.into_parts();
    let (body, pump) = pump_body(body);
    let result = receive(&st, &id, &q, &headers, Request::from_parts(parts, body)).await;
    match result {
        Ok(created) => (StatusCode::CREATED, Json(created)).into_response(),
        Err(e) => {
            st.metrics
                .uploads_rejected
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if let Ok(dir) = st.store.incoming_dir(&id) {
                let _ = tokio::fs::remove_dir_all(dir).await;
            }
            // `receive` has dropped its end of the pump: let the pump discard what the client is
            // still sending (bounded), so that the client reads this answer instead of a reset.
            let declared = headers
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            if declared.is_some_and(|len| len > DRAIN_BYTES) {
                pump.abort(); // too much to drain: the connection is closed after the answer.
            } else {
                let _ = tokio::time::timeout(DRAIN_TIME, pump).await;
            }
            e.into_response()
        }
    }
}

/// How much of a rejected upload is read and discarded before answering, at most.
const DRAIN_BYTES: u64 = 64 << 20;
/// How long a rejected upload is drained before answering, at most.
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(5);

/// Reads the request body on its own task and hands it on through a small channel.
///
/// A client that streams a body writes all of it before it reads the answer; if the server
/// answered a rejected upload (413, 400) and closed the connection at once, the client would see
/// a broken pipe instead of the error. When the reader is dropped, the pump goes on reading and
/// discarding up to [`DRAIN_BYTES`] (the caller bounds the time), like a lingering close.
fn pump_body(body: Body) -> (Body, tokio::task::JoinHandle<()>) {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<axum::body::Bytes, axum::Error>>(4);
    let task = tokio::spawn(async move {
        let mut stream = body.into_data_stream();
        let mut receiver_gone = false;
        let mut drained = 0u64;
        while let Some(chunk) = stream.next().await {
            if receiver_gone {
                match chunk {
                    Ok(c) => drained += c.len() as u64,
                    Err(_) => return,
                }
                if drained > DRAIN_BYTES {
                    return;
                }
            } else if tx.send(chunk).await.is_err() {
                receiver_gone = true;
            }
        }
    });
    let rx_stream = futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) });
    (Body::from_stream(rx_stream), task)
}

async fn receive(
    st: &Shared,
    id: &str,
    q: &UploadQuery,
    headers: &HeaderMap,
    req: Request,
) -> Result<Created, ApiError> {
    let limit = st.config.max_upload;
    if let Some(len) = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
    {
        if len > limit.saturating_add(64 << 10) {
            return Err(ApiError::TooLarge(limit));
        }
    }
    let dir = st.store.incoming_dir(id).map_err(internal)?;
    let mut budget = limit;
    let mut files: Vec<StoredFile> = Vec::new();
    let is_multipart = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("multipart/form-data"));
    if is_multipart {
        let mut mp = Multipart::from_request(req, &())
            .await
            .map_err(|e| ApiError::BadRequest(format!("multipart: {e}")))?;
        loop {
            let field = match mp.next_field().await {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                        return Err(ApiError::TooLarge(limit));
                    }
                    return Err(ApiError::BadRequest(format!("multipart: {e}")));
                }
            };
            let Some(fname) = field.file_name().map(str::to_owned) else {
                continue;
            };
            let name = sanitize(&fname);
            let key = format!("{}-{name}", files.len());
            let size = stream_to_file(field, &dir.join(&key), &mut budget, limit).await?;
            files.push(StoredFile { name, key, size });
        }
    } else {
        let name = sanitize(q.name.as_deref().unwrap_or("upload"));
        let key = format!("0-{name}");
        let stream = req.into_body().into_data_stream();
        let size = stream_to_file(stream, &dir.join(&key), &mut budget, limit).await?;
        if size > 0 {
            files.push(StoredFile { name, key, size });
        }
    }
    if files.is_empty() {
        return Err(ApiError::BadRequest(
            "no file in the upload (send multipart `file` fields or a raw body)".into(),
        ));
    }
    let token = ids::new_delete_token();
    let created_at = now();
    let days = match (q.expires_in_days, st.config.retention_days) {
        (Some(d), 0) => Some(d),
        (Some(d), r) => Some(d.min(r)),
        (None, 0) => None,
        (None, r) => Some(r),
    };
    let record = ReportRecord {
        id: id.to_owned(),
        state: ReportState::Queued,
        created_at,
        expires_at: days.map(|d| created_at + (d as i64) * 86_400),
        error: None,
        files: files.clone(),
        delete_token_hash: ids::token_hash(&token),
    };
    let store = st.store.clone();
    let rec = record.clone();
    tokio::task::spawn_blocking(move || store.create(&rec))
        .await
        .map_err(internal)?
        .map_err(internal)?;
    st.metrics.uploads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    st.metrics
        .upload_bytes
        .fetch_add(files.iter().map(|f| f.size).sum(), std::sync::atomic::Ordering::Relaxed);
    st.ingest.enqueue(id.to_owned());
    Ok(Created {
        id: id.to_owned(),
        url: format!("/r/{id}"),
        delete_token: token,
    })
}

// ---------------------------------------------------------------------------------------------
// Status, summary, delete
// ---------------------------------------------------------------------------------------------

async fn record(st: &Shared, id: &str) -> Result<ReportRecord, ApiError> {
    if !ids::is_report_id(id) {
        return Err(ApiError::NotFound);
    }
    let store = st.store.clone();
    let id2 = id.to_owned();
    let rec = tokio::task::spawn_blocking(move || store.get(&id2))
        .await
        .map_err(internal)?
        .map_err(internal)?;
    let rec = rec.ok_or(ApiError::NotFound)?;
    if rec.expires_at.is_some_and(|e| e <= now()) {
        return Err(ApiError::Gone);
    }
    Ok(rec)
}

fn status_of(st: &Shared, rec: &ReportRecord) -> Status {
    let total: u64 = rec.files.iter().map(|f| f.size).sum();
    let (stage, read) = match (rec.state, st.ingest.progress(&rec.id)) {
        (ReportState::Ready, _) => ("ready".to_owned(), total),
        (ReportState::Failed, _) => ("failed".to_owned(), 0),
        (_, Some(p)) => (
            p.stage().to_owned(),
            p.bytes_read.load(std::sync::atomic::Ordering::Relaxed),
        ),
        (s, None) => (s.as_str().to_owned(), 0),
    };
    Status {
        id: rec.id.clone(),
        state: rec.state.as_str().to_owned(),
        stage,
        bytes_read: read.min(total),
        bytes_total: total,
        files: rec.files.iter().map(|f| f.name.clone()).collect(),
        error: rec.error.clone(),
        created_at: rec.created_at,
        expires_at: rec.expires_at,
    }
}

#[utoipa::path(get, path = "/api/reports/{id}/status", tag = "reports", params(("id" = String, Path)),
    responses((status = 200, body = Status), (status = 404, body = ErrorBody), (status = 410, body = ErrorBody)))]
pub async fn status(State(st): State<Shared>, Path(id): Path<String>) -> Result<Json<Status>, ApiError> {
    let rec = record(&st, &id).await?;
    Ok(Json(status_of(&st, &rec)))
}

/// The index record of a report that finished processing successfully.
async fn ready(st: &Shared, id: &str) -> Result<ReportRecord, ApiError> {
    let rec = record(st, id).await?;
    match rec.state {
        ReportState::Ready => Ok(rec),
        ReportState::Failed => Err(ApiError::Failed(Box::new(status_of(st, &rec)))),
        _ => Err(ApiError::NotReady(Box::new(status_of(st, &rec)))),
    }
}

/// The summary of a ready report (read from `summary.json`, without loading its tables).
async fn summary_of(st: &Shared, id: &str) -> Result<AnalyzeOutput, ApiError> {
    ready(st, id).await?;
    if let Some(r) = st
        .cache
        .lock()
        .ok()
        .and_then(|c| c.iter().find(|(k, _)| k == id).map(|(_, r)| r.clone()))
    {
        return Ok(r.summary.clone());
    }
    let dir = st.store.data_dir(id);
    tokio::task::spawn_blocking(move || reportdata::read_summary(&dir))
        .await
        .map_err(internal)?
        .map_err(internal)
}

/// The loaded data of a ready report.
async fn loaded(st: &Shared, id: &str) -> Result<Arc<LoadedReport>, ApiError> {
    ready(st, id).await?;
    if let Some(r) = st
        .cache
        .lock()
        .ok()
        .and_then(|c| c.iter().find(|(k, _)| k == id).map(|(_, r)| r.clone()))
    {
        return Ok(r);
    }
    let dir = st.store.data_dir(id);
    let report = tokio::task::spawn_blocking(move || reportdata::load(&dir))
        .await
        .map_err(internal)?
        .map_err(internal)?;
    let report = Arc::new(report);
    if let Ok(mut c) = st.cache.lock() {
        c.retain(|(k, _)| k != id);
        c.push((id.to_owned(), report.clone()));
        if c.len() > CACHE_REPORTS {
            c.remove(0);
        }
    }
    Ok(report)
}

#[utoipa::path(get, path = "/api/reports/{id}", tag = "reports", params(("id" = String, Path)),
    responses((status = 200, body = AnalyzeOutput, description = "the same JSON as `memlens analyze --json`"),
              (status = 202, body = ErrorBody), (status = 404, body = ErrorBody), (status = 410, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn summary(State(st): State<Shared>, Path(id): Path<String>) -> Result<Json<AnalyzeOutput>, ApiError> {
    Ok(Json(summary_of(&st, &id).await?))
}

#[derive(Deserialize)]
pub struct DeleteQuery {
    token: Option<String>,
}

#[utoipa::path(delete, path = "/api/reports/{id}", tag = "reports",
    params(("id" = String, Path), ("token" = Option<String>, Query, description = "the delete token (or the X-Delete-Token header)")),
    responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn delete_report(
    State(st): State<Shared>,
    Path(id): Path<String>,
    Query(q): Query<DeleteQuery>,
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
    if !ids::constant_time_eq(&ids::token_hash(&token), &rec.delete_token_hash) {
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

// ---------------------------------------------------------------------------------------------
// Queries
// ---------------------------------------------------------------------------------------------

#[derive(Deserialize, Default)]
pub struct DeviceQuery {
    /// Index of the analysed file within the report (default 0).
    file: Option<usize>,
    device: Option<i64>,
}

/// The `index`-th of `outer` (default the first), then the member of its `inner` list whose
/// `id` is `wanted` (default the first); errors name what was asked for.
fn pick_nested<'a, O, I>(
    outer: &'a [O],
    index: Option<usize>,
    inner: impl Fn(&'a O) -> &'a [I],
    id: impl Fn(&I) -> i64,
    wanted: Option<i64>,
    (outer_name, inner_name): (&str, &str),
) -> Result<(usize, &'a I), ApiError> {
    let i = index.unwrap_or(0);
    let o = outer
        .get(i)
        .ok_or_else(|| ApiError::BadRequest(format!("no {outer_name} {i} in this report")))?;
    let members = inner(o);
    let m = match wanted {
        Some(w) => members
            .iter()
            .find(|m| id(m) == w)
            .ok_or_else(|| ApiError::BadRequest(format!("no {inner_name} {w} in {outer_name} {i}")))?,
        None => members
            .first()
            .ok_or_else(|| ApiError::BadRequest(format!("{outer_name} {i} has no {inner_name}")))?,
    };
    Ok((i, m))
}

fn pick(r: &AnalyzeOutput, q_file: Option<usize>, q_device: Option<i64>) -> Result<(usize, &DeviceSummary), ApiError> {
    pick_nested(
        &r.files,
        q_file,
        |f| &f.devices,
        |d| d.device,
        q_device,
        ("file", "device"),
    )
}

#[derive(Deserialize)]
pub struct TimelineQuery {
    file: Option<usize>,
    device: Option<i64>,
    start: Option<i64>,
    end: Option<i64>,
    width: Option<usize>,
    /// `time` (default when the trace has timestamps) or `event` (entry order).
    axis: Option<String>,
}

#[utoipa::path(get, path = "/api/reports/{id}/timeline", tag = "queries",
    params(("id" = String, Path), ("device" = Option<i64>, Query), ("start" = Option<i64>, Query), ("end" = Option<i64>, Query),
           ("width" = Option<usize>, Query, description = "pixel buckets (default 1000)"), ("file" = Option<usize>, Query),
           ("axis" = Option<String>, Query, description = "`time` (µs) or `event` (entry order)")),
    responses((status = 200, body = Timeline)))]
pub async fn timeline(
    State(st): State<Shared>,
    Path(id): Path<String>,
    Query(q): Query<TimelineQuery>,
) -> Result<Json<Timeline>, ApiError> {
    let r = loaded(&st, &id).await?;
    let (fi, d) = pick(&r.summary, q.file, q.device)?;
    let device = d.device;
    let has_time = matches!(d.time_axis, memlens_api::TimeAxis::TimeUs);
    let initial = (d.initial_allocated_bytes, d.initial_reserved_bytes);
    let axis = match q.axis.as_deref() {
        None | Some("time") if has_time => query::Axis::Time,
        None | Some("event") | Some("time") => query::Axis::Event,
        Some(other) => return Err(ApiError::BadRequest(format!("unknown axis `{other}` (time or event)"))),
    };
    let tl = tokio::task::spawn_blocking(move || {
        let dev = r.files[fi]
            .device(device)
            .ok_or_else(|| ApiError::Internal(format!("device {device} frames missing")))?;
        query::timeline_on(dev, axis, initial, q.start, q.end, q.width.unwrap_or(1000)).map_err(internal)
    })
    .await
    .map_err(internal)??;
    Ok(Json(tl))
}

#[derive(Deserialize)]
pub struct SegmentsQuery {
    file: Option<usize>,
    device: Option<i64>,
    /// State right after this trace entry.
    event: Option<usize>,
    /// State at this time (µs); the last entry at or before it.
    time: Option<i64>,
}

#[utoipa::path(get, path = "/api/reports/{id}/segments", tag = "queries",
    params(("id" = String, Path), ("device" = Option<i64>, Query), ("event" = Option<usize>, Query), ("time" = Option<i64>, Query), ("file" = Option<usize>, Query)),
    responses((status = 200, body = SegmentMap)))]
pub async fn segments(
    State(st): State<Shared>,
    Path(id): Path<String>,
    Query(q): Query<SegmentsQuery>,
) -> Result<Json<SegmentMap>, ApiError> {
    let r = loaded(&st, &id).await?;
    let (fi, d) = pick(&r.summary, q.file, q.device)?;
    let device = d.device;
    let map = tokio::task::spawn_blocking(move || {
        let f = &r.files[fi];
        let ev = DeviceEvents::new(&f.tables, device).map_err(internal)?;
        let cp = f.checkpoints(&ev).map_err(internal)?;
        match (q.event, q.time) {
            (Some(e), _) => cp.map_at(&ev, Some(e)),
            (None, Some(time)) => cp.map_at_time(&ev, time),
            (None, None) => cp.map_at(&ev, ev.len().checked_sub(1)),
        }
        .ok_or_else(|| ApiError::Internal("no segment checkpoint covers the entry".into()))
    })
    .await
    .map_err(internal)??;
    Ok(Json(map))
}

#[utoipa::path(get, path = "/api/reports/{id}/fragmentation", tag = "queries",
    params(("id" = String, Path), ("device" = Option<i64>, Query), ("file" = Option<usize>, Query)),
    responses((status = 200, body = FragmentationSeries)))]
pub async fn fragmentation(
    State(st): State<Shared>,
    Path(id): Path<String>,
    Query(q): Query<DeviceQuery>,
) -> Result<Json<FragmentationSeries>, ApiError> {
    let r = loaded(&st, &id).await?;
    let (fi, d) = pick(&r.summary, q.file, q.device)?;
    let dev = r.files[fi]
        .device(d.device)
        .ok_or_else(|| ApiError::Internal("device frames missing".into()))?;
    let df = &dev.fragmentation;
    let i64s = |n: &str| -> Result<Vec<i64>, ApiError> {
        Ok(df
            .column(n)
            .map_err(internal)?
            .i64()
            .map_err(internal)?
            .into_no_null_iter()
            .collect())
    };
    Ok(Json(FragmentationSeries {
        device: d.device,
        event_index: df
            .column("event_index")
            .map_err(internal)?
            .u32()
            .map_err(internal)?
            .into_no_null_iter()
            .collect(),
        time: i64s("time")?,
        allocated: i64s("allocated")?,
        reserved: i64s("reserved")?,
        active: i64s("active")?,
        free: i64s("free")?,
        largest_free: i64s("largest_free")?,
        fragmentation_index: df
            .column("fragmentation_index")
            .map_err(internal)?
            .f64()
            .map_err(internal)?
            .into_no_null_iter()
            .collect(),
    }))
}

/// The summary of one device of a ready report.
async fn device_summary(st: &Shared, id: &str, q: &DeviceQuery) -> Result<DeviceSummary, ApiError> {
    let r = summary_of(st, id).await?;
    Ok(pick(&r, q.file, q.device)?.1.clone())
}

#[utoipa::path(get, path = "/api/reports/{id}/peak", tag = "queries", params(("id" = String, Path), ("device" = Option<i64>, Query), ("file" = Option<usize>, Query)), responses((status = 200, body = Peak)))]
pub async fn peak(
    State(st): State<Shared>,
    Path(id): Path<String>,
    Query(q): Query<DeviceQuery>,
) -> Result<Json<Peak>, ApiError> {
    let d = device_summary(&st, &id, &q).await?;
    Ok(Json(Peak {
        device: d.device,
        peak_allocated_bytes: d.peak_allocated_bytes,
        peak_time_us: d.peak_time_us,
        peak_event_index: d.peak_event_index,
        peak_reserved_bytes: d.peak_reserved_bytes,
        peak_stacks: d.peak_stacks,
        fragmentation_at_peak: d.fragmentation_at_peak,
    }))
}

#[utoipa::path(get, path = "/api/reports/{id}/leaks", tag = "queries", params(("id" = String, Path), ("device" = Option<i64>, Query), ("file" = Option<usize>, Query)), responses((status = 200, body = [memlens_api::LeakCandidate])))]
pub async fn leaks(
    State(st): State<Shared>,
    Path(id): Path<String>,
    Query(q): Query<DeviceQuery>,
) -> Result<Json<Vec<memlens_api::LeakCandidate>>, ApiError> {
    Ok(Json(device_summary(&st, &id, &q).await?.leaks))
}

#[utoipa::path(get, path = "/api/reports/{id}/ooms", tag = "queries", params(("id" = String, Path), ("device" = Option<i64>, Query), ("file" = Option<usize>, Query)), responses((status = 200, body = [memlens_api::OomExplanation])))]
pub async fn ooms(
    State(st): State<Shared>,
    Path(id): Path<String>,
    Query(q): Query<DeviceQuery>,
) -> Result<Json<Vec<memlens_api::OomExplanation>>, ApiError> {
    Ok(Json(device_summary(&st, &id, &q).await?.ooms))
}

#[utoipa::path(get, path = "/api/reports/{id}/annotations", tag = "queries", params(("id" = String, Path), ("device" = Option<i64>, Query), ("file" = Option<usize>, Query)), responses((status = 200, body = [memlens_api::PhaseRange])))]
pub async fn annotations(
    State(st): State<Shared>,
    Path(id): Path<String>,
    Query(q): Query<DeviceQuery>,
) -> Result<Json<Vec<memlens_api::PhaseRange>>, ApiError> {
    Ok(Json(device_summary(&st, &id, &q).await?.phases))
}

#[derive(Deserialize)]
pub struct FileQuery {
    file: Option<usize>,
}

#[utoipa::path(get, path = "/api/reports/{id}/stacks/{stack}", tag = "queries",
    params(("id" = String, Path), ("stack" = u32, Path), ("file" = Option<usize>, Query)), responses((status = 200, body = [FrameView])))]
pub async fn stack(
    State(st): State<Shared>,
    Path((id, stack)): Path<(String, u32)>,
    Query(q): Query<FileQuery>,
) -> Result<Json<Vec<FrameView>>, ApiError> {
    let r = loaded(&st, &id).await?;
    let f = r
        .files
        .get(q.file.unwrap_or(0))
        .ok_or_else(|| ApiError::BadRequest("no such file in this report".into()))?;
    Ok(Json(query::stack_frames(&f.stacks, stack)))
}

#[derive(Deserialize)]
pub struct SearchQuery {
    file: Option<usize>,
    device: Option<i64>,
    /// Exact address, decimal or `0x` hex.
    addr: Option<String>,
    /// Case-insensitive substring of any frame (`file:line:function`).
    stack: Option<String>,
    limit: Option<usize>,
}

#[utoipa::path(get, path = "/api/reports/{id}/allocations", tag = "queries",
    params(("id" = String, Path), ("device" = Option<i64>, Query), ("addr" = Option<String>, Query), ("stack" = Option<String>, Query), ("limit" = Option<usize>, Query), ("file" = Option<usize>, Query)),
    responses((status = 200, body = SearchResult)))]
pub async fn allocations(
    State(st): State<Shared>,
    Path(id): Path<String>,
    Query(q): Query<SearchQuery>,
) -> Result<Json<SearchResult>, ApiError> {
    let addr = match q.addr.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(a) => {
            let parsed = match a.strip_prefix("0x").or_else(|| a.strip_prefix("0X")) {
                Some(h) => i64::from_str_radix(h, 16),
                None => a.parse::<i64>(),
            };
            Some(parsed.map_err(|_| ApiError::BadRequest(format!("`{a}` is not an address")))?)
        }
    };
    if addr.is_none() && q.stack.as_deref().is_none_or(str::is_empty) {
        return Err(ApiError::BadRequest("give `addr` or `stack`".into()));
    }
    let r = loaded(&st, &id).await?;
    let (fi, d) = pick(&r.summary, q.file, q.device)?;
    let device = d.device;
    let limit = q.limit.unwrap_or(200).min(5_000);
    let (total, allocations) = tokio::task::spawn_blocking(move || {
        let f = &r.files[fi];
        let dev = f
            .device(device)
            .ok_or_else(|| ApiError::Internal("device frames missing".into()))?;
        query::search_allocations(dev, &f.stacks, addr, q.stack.as_deref(), limit).map_err(internal)
    })
    .await
    .map_err(internal)??;
    Ok(Json(SearchResult { total, allocations }))
}

#[derive(Deserialize)]
pub struct ChartQuery {
    /// Snapshot file and device (default: the first).
    file: Option<usize>,
    device: Option<i64>,
    /// NVML log and GPU: chart that log instead of a snapshot device.
    log: Option<usize>,
    gpu: Option<i64>,
}

/// The GPU log `log` (default 0) and its GPU `gpu` (default: the first).
fn pick_gpu(r: &AnalyzeOutput, log: Option<usize>, gpu: Option<i64>) -> Result<(usize, &GpuSeriesSummary), ApiError> {
    pick_nested(&r.gpu_logs, log, |l| &l.gpus, |g| g.gpu, gpu, ("GPU log", "GPU"))
}

async fn chart(st: Shared, id: String, q: ChartQuery, svg: bool) -> Result<Response, ApiError> {
    let r = loaded(&st, &id).await?;
    let (ctype, name) = if svg {
        ("image/svg+xml", "chart.svg")
    } else {
        ("image/png", "chart.png")
    };
    let default = q.file.is_none() && q.device.is_none() && q.log.is_none() && q.gpu.is_none();
    let stored = if default {
        tokio::fs::read(st.store.data_dir(&id).join(name)).await.ok()
    } else {
        None
    };
    let body: Vec<u8> = match stored {
        Some(bytes) => bytes,
        None => {
            let gpu_chart = q.log.is_some() || q.gpu.is_some() || r.summary.files.is_empty();
            let target = if gpu_chart {
                let (li, g) = pick_gpu(&r.summary, q.log, q.gpu)?;
                (true, li, g.gpu)
            } else {
                let (fi, d) = pick(&r.summary, q.file, q.device)?;
                (false, fi, d.device)
            };
            tokio::task::spawn_blocking(move || -> Result<Vec<u8>, ApiError> {
                let (is_gpu, index, which) = target;
                let chart = if is_gpu {
                    let log = &r.summary.gpu_logs[index];
                    let g = log
                        .gpus
                        .iter()
                        .find(|g| g.gpu == which)
                        .ok_or_else(|| ApiError::Internal("GPU summary missing".into()))?;
                    let samples = r
                        .gpu_logs
                        .get(index)
                        .ok_or_else(|| ApiError::Internal("GPU samples missing".into()))?;
                    crate::charts::Chart::Gpu(samples, log, g)
                } else {
                    let d = r.summary.files[index]
                        .devices
                        .iter()
                        .find(|d| d.device == which)
                        .ok_or_else(|| ApiError::Internal("device summary missing".into()))?;
                    let dev = r.files[index]
                        .device(which)
                        .ok_or_else(|| ApiError::Internal("device frames missing".into()))?;
                    crate::charts::Chart::Device(dev, d)
                };
                if svg {
                    crate::charts::render_svg(&chart)
                        .map(String::into_bytes)
                        .map_err(internal)
                } else {
                    crate::charts::render_png(&chart).map_err(internal)
                }
            })
            .await
            .map_err(internal)??
        }
    };
    Ok((
        [
            (header::CONTENT_TYPE, ctype),
            (header::CACHE_CONTROL, "private, max-age=3600"),
        ],
        Body::from(body),
    )
        .into_response())
}

#[derive(Deserialize)]
pub struct GpuSamplesQuery {
    log: Option<usize>,
    gpu: Option<i64>,
    start: Option<i64>,
    end: Option<i64>,
    width: Option<usize>,
}

#[utoipa::path(get, path = "/api/reports/{id}/gpu_samples", tag = "queries",
    params(("id" = String, Path), ("log" = Option<usize>, Query, description = "index into `gpu_logs` (default 0)"),
           ("gpu" = Option<i64>, Query), ("start" = Option<i64>, Query), ("end" = Option<i64>, Query),
           ("width" = Option<usize>, Query, description = "pixel buckets (default 1000)")),
    responses((status = 200, body = memlens_api::GpuSeries)))]
pub async fn gpu_samples(
    State(st): State<Shared>,
    Path(id): Path<String>,
    Query(q): Query<GpuSamplesQuery>,
) -> Result<Json<memlens_api::GpuSeries>, ApiError> {
    let r = loaded(&st, &id).await?;
    let (li, g) = pick_gpu(&r.summary, q.log, q.gpu)?;
    let gpu = g.gpu;
    let series = tokio::task::spawn_blocking(move || {
        let samples = r
            .gpu_logs
            .get(li)
            .ok_or_else(|| ApiError::Internal("GPU samples missing".into()))?;
        let (start, end, aggregated, points) =
            gpu_series(samples, gpu, q.start, q.end, q.width.unwrap_or(1000)).map_err(internal)?;
        Ok::<_, ApiError>(memlens_api::GpuSeries {
            log: li,
            gpu,
            start,
            end,
            aggregated,
            points,
        })
    })
    .await
    .map_err(internal)??;
    Ok(Json(series))
}

#[utoipa::path(get, path = "/api/reports/{id}/chart.png", tag = "charts", params(("id" = String, Path), ("device" = Option<i64>, Query), ("file" = Option<usize>, Query), ("log" = Option<usize>, Query), ("gpu" = Option<i64>, Query)), responses((status = 200, content_type = "image/png")))]
pub async fn chart_png(
    State(st): State<Shared>,
    Path(id): Path<String>,
    Query(q): Query<ChartQuery>,
) -> Result<Response, ApiError> {
    chart(st, id, q, false).await
}

#[utoipa::path(get, path = "/api/reports/{id}/chart.svg", tag = "charts", params(("id" = String, Path), ("device" = Option<i64>, Query), ("file" = Option<usize>, Query), ("log" = Option<usize>, Query), ("gpu" = Option<i64>, Query)), responses((status = 200, content_type = "image/svg+xml")))]
pub async fn chart_svg(
    State(st): State<Shared>,
    Path(id): Path<String>,
    Query(q): Query<ChartQuery>,
) -> Result<Response, ApiError> {
    chart(st, id, q, true).await
}

// ---------------------------------------------------------------------------------------------
// Pages, health, metrics, OpenAPI
// ---------------------------------------------------------------------------------------------

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// `/r/{id}`: the frontend's page with link-preview tags for this report.
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
    // Reports of per-process logs alone have no chart to preview.
    let has_chart = ids::is_report_id(&id)
        && tokio::fs::try_exists(st.store.data_dir(&id).join("chart.png"))
            .await
            .unwrap_or(false);
    let (title, image) = match record(&st, &id).await {
        Ok(rec) if rec.state == ReportState::Ready && has_chart => {
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

#[utoipa::path(get, path = "/api/limits", tag = "reports",
    responses((status = 200, body = memlens_api::ServerLimits)))]
pub async fn limits(State(st): State<Shared>) -> Json<memlens_api::ServerLimits> {
    Json(memlens_api::ServerLimits {
        max_upload_bytes: st.config.max_upload,
        retention_days: st.config.retention_days,
    })
}

pub async fn healthz() -> &'static str {
    "ok"
}

pub async fn metrics(State(st): State<Shared>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        st.metrics.render(),
    )
        .into_response()
}

pub async fn openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(crate::openapi::document())
}
