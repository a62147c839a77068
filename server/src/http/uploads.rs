//! `POST /api/reports`: multipart or raw uploads streamed into the store's upload writers, cut
//! off at `--max-upload` (413) whatever the transfer encoding; without an upload token in force
//! 401, over the client's rate 429 ([`super::auth`]); rejected uploads are drained (bounded)
//! before the answer, and leave nothing in the store. Query parameters set the report's
//! metadata and expiry.

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Multipart, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt;
use memlens_api::routes;
use memlens_api::{Created, ErrorBody, ReportState, Status, UploadParams};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::auth::{admit, bearer, Refusal};
use super::error::{internal, store_error, ApiError, Q};
use super::state::{now, record, status_of, ReportPath, Shared};
use crate::app::runs::open_run;
use crate::ids::{self, JobId, ReportId};
use crate::storage::store::{BlobWriter, JobRecord, ReportRecord, StoredFile};
use memlens_core::names::upload_name;

/// How much of a rejected upload is read and discarded before answering, at most.
const DRAIN_BYTES: u64 = 64 << 20;
/// How long a rejected upload is drained before answering, at most.
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(5);
/// Upload keys reserved for each rank's upload into a run.
const KEYS_PER_UPLOAD: usize = 1000;
/// How long a refused upload's answer waits, at most, for the imports begun on its files to end.
const FORGET_TIME: std::time::Duration = std::time::Duration::from_secs(5);
/// Bytes gathered before one blocking write to the store.
const WRITE_BATCH: usize = 4 << 20;

#[utoipa::path(post, path = routes::REPORTS, tag = "reports",
    params(UploadParams),
    request_body(content = String, description = "multipart/form-data with one or more `file` fields, or a raw body", content_type = "multipart/form-data"),
    responses((status = 201, body = Created), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 413, body = ErrorBody), (status = 429, body = ErrorBody)))]
pub async fn upload(State(st): State<Shared>, Q(q): Q<UploadParams>, headers: HeaderMap, req: Request) -> Response {
    let id = ReportId::new();
    let (result, pump) = when_admitted(&st, &headers, req, |req| receive(&st, &id, &q, &headers, req)).await;
    match result {
        Ok(created) => (StatusCode::CREATED, Json(created)).into_response(),
        Err(e) => {
            st.reports.metrics.upload_rejected();
            let store = st.reports.store.clone();
            let id2 = id.clone();
            let imports = st.reports.ingest.forget_pre_imports(&id);
            let _ = tokio::task::spawn_blocking(move || store.discard_uploads(&id2)).await;
            // The imports that were reading the removed files are waited for (bounded): on a
            // full disk, the next upload would otherwise find the space still taken.
            let _ = tokio::time::timeout(FORGET_TIME, tokio::task::spawn_blocking(move || imports.wait())).await;
            // `receive` has dropped its end of the pump: let the pump discard what the client is
            // still sending (bounded), so that the client reads this answer instead of a reset.
            let_the_body_go(&headers, pump).await;
            e.into_response()
        }
    }
}

fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

/// Reads the request body on its own task and hands it on through a small channel.
///
/// A client that streams a body writes all of it before it reads the answer; if the server
/// answered a rejected upload (413, 400) and closed the connection at once, the client would see
/// a broken pipe instead of the error. When the reader is dropped, the pump goes on reading and
/// discarding up to [`DRAIN_BYTES`] (the caller bounds the time), like a lingering close.
///
/// A body that sends nothing for `idle` ends the upload: the pump hands on an error and sets
/// `stalled` (the answer is then 408), so a client trickling nothing holds no slot for long.
fn pump_body(body: Body, idle: std::time::Duration, stalled: Arc<AtomicBool>) -> (Body, tokio::task::JoinHandle<()>) {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, axum::Error>>(4);
    let task = tokio::spawn(async move {
        let mut stream = body.into_data_stream();
        let mut receiver_gone = false;
        let mut drained = 0u64;
        loop {
            let chunk = match tokio::time::timeout(idle, stream.next()).await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => break,
                Err(_) => {
                    stalled.store(true, Ordering::Relaxed);
                    let msg = format!("no upload bytes arrived for {} s", idle.as_secs());
                    let _ = tx.send(Err(axum::Error::new(msg))).await;
                    return;
                }
            };
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

/// Writes `batch` to the store off the async workers.
async fn write_batch(writer: Box<dyn BlobWriter>, batch: Vec<u8>) -> Result<Box<dyn BlobWriter>, ApiError> {
    tokio::task::spawn_blocking(move || {
        let mut writer = writer;
        writer.write(&batch).map(|()| writer)
    })
    .await
    .map_err(internal)?
    .map_err(store_error)
}

/// Streams chunks into upload `key`, counting against `budget`; returns the bytes written.
/// With `import_ahead` (at most the upload's size, for its bounds), the upload is imported
/// while it arrives when the ingest can ([`crate::ingest::follow_upload`]): the handler says
/// what arrived and what is stored; the ingest makes room for the import.
async fn stream_to_store<S, E>(
    st: &Shared,
    id: &ReportId,
    key: &str,
    mut chunks: S,
    budget: &mut u64,
    limit: u64,
    import_ahead: Option<u64>,
) -> Result<u64, ApiError>
where
    S: futures_util::Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let (store, id2, key2) = (st.reports.store.clone(), id.clone(), key.to_owned());
    let mut writer = tokio::task::spawn_blocking(move || store.upload_writer(&id2, &key2))
        .await
        .map_err(internal)?
        .map_err(store_error)?;
    // Dropped on any early return below: the import ahead then fails and ends.
    let bound = import_ahead.map(|bound| bound.min(*budget));
    let mut follower = bound.and_then(|bound| st.reports.ingest.follow_upload(id, key, bound));
    let mut written = 0u64;
    let mut stored = 0u64;
    let mut batch = Vec::with_capacity(WRITE_BATCH);
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| ApiError::BadRequest(format!("upload interrupted: {e}")))?;
        written += chunk.len() as u64;
        if written > *budget {
            return Err(ApiError::TooLarge(limit));
        }
        batch.extend_from_slice(&chunk);
        if let Some(f) = &mut follower {
            f.arrived(&chunk, written).await.map_err(internal)?;
        }
        if batch.len() >= WRITE_BATCH {
            stored += batch.len() as u64;
            writer = write_batch(writer, std::mem::replace(&mut batch, Vec::with_capacity(WRITE_BATCH))).await?;
            if let Some(f) = &follower {
                f.stored(stored);
            }
        }
    }
    writer = write_batch(writer, batch).await?;
    if let Some(f) = follower {
        f.complete(written);
    }
    tokio::task::spawn_blocking(move || writer.finish())
        .await
        .map_err(internal)?
        .map_err(store_error)?;
    *budget -= written;
    Ok(written)
}

async fn receive(
    st: &Shared,
    id: &ReportId,
    q: &UploadParams,
    headers: &HeaderMap,
    req: Request,
) -> Result<Created, ApiError> {
    let limit = st.config.max_upload;
    if declared_length(headers).is_some_and(|len| len > limit.saturating_add(64 << 10)) {
        return Err(ApiError::TooLarge(limit));
    }
    let created_at = now();
    let days = match (q.expires_in_days, st.config.retention_days) {
        (Some(d), 0) => Some(d),
        (Some(d), r) => Some(d.min(r)),
        (None, 0) => None,
        (None, r) => Some(r),
    };
    let expires_at = days.map(|d| created_at + (d as i64) * 86_400);
    // The job it is a run of: found or made before the body is read.
    let job = match q.meta().job {
        Some(name) => Some(join_job(st, name, headers, created_at).await?),
        None => None,
    };
    let job_id = job.as_ref().map(|j| j.record.id.clone());
    // A rank of a run writes into the run's report, with upload keys of its own.
    let run = q.run.as_deref().map(str::trim).filter(|r| !r.is_empty());
    let slot = run.map(|key| {
        st.reports.runs.join(key, KEYS_PER_UPLOAD, || {
            open_run(q.meta(), job_id.clone(), created_at, expires_at)
        })
    });
    let id_owned = slot.as_ref().map_or_else(|| id.clone(), |s| s.id.clone());
    let id = &id_owned;
    let first_key = slot.as_ref().map_or(0, |s| s.first_key);
    // A run's report waits for its last rank: its uploads are imported by its job. Others are
    // imported while they arrive, bounded by the body's declared length (else the budget).
    let import_ahead = slot.is_none().then(|| declared_length(headers).unwrap_or(limit));
    let to = Receiving {
        id,
        first_key,
        import_ahead,
        window: q.window,
    };
    let files = receive_files(st, q, headers, req, to).await?;
    st.reports.metrics.upload_accepted(files.iter().map(|f| f.size).sum());
    let (record, token) = match slot {
        // The run's report is created once its last rank is in (or it goes quiet).
        Some(slot) => match st.reports.runs.arrived(id, files, q.world_size) {
            Some(run) => (Some(run.record()), slot.token),
            None => (None, slot.token),
        },
        None => {
            let token = ids::new_delete_token();
            let record = ReportRecord {
                id: id.clone(),
                state: ReportState::Queued,
                created_at,
                expires_at,
                error: None,
                files,
                delete_token_hash: ids::token_hash(&token),
                meta: q.meta(),
                job: job_id,
            };
            (Some(record), token)
        }
    };
    if let Some(record) = record {
        let store = st.reports.store.clone();
        tokio::task::spawn_blocking(move || store.create(&record))
            .await
            .map_err(internal)?
            .map_err(store_error)?;
        st.reports.ingest.enqueue(id.clone());
    }
    let (job_url, job_owner_token) = match job {
        Some(j) => (
            Some(routes::fill(routes::JOB_PAGE, &[&j.record.id.to_string()])),
            j.owner_token,
        ),
        None => (None, None),
    };
    Ok(Created {
        id: id.to_string(),
        url: routes::fill(routes::REPORT_PAGE, &[&id.to_string()]),
        delete_token: token,
        job_url,
        job_owner_token,
    })
}

/// Adds the next window of a recording to the report its window 0 made (the owner token as
/// `X-Delete-Token`), and analyses the report again with it. A window the report already has
/// (a retried upload) is answered as it is.
#[utoipa::path(post, path = routes::REPORT_WINDOWS, tag = "reports",
    params(("id" = String, Path), UploadParams),
    request_body(content = String, description = "the window's snapshot: multipart/form-data with one `file` field, or a raw body", content_type = "multipart/form-data"),
    responses((status = 200, body = Status), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 413, body = ErrorBody)))]
pub async fn add_window(
    State(st): State<Shared>,
    ReportPath(id): ReportPath,
    Q(q): Q<UploadParams>,
    headers: HeaderMap,
    req: Request,
) -> Response {
    let (result, pump) = when_admitted(&st, &headers, req, |req| receive_window(&st, &id, &q, &headers, req)).await;
    match result {
        Ok(status) => {
            // A window the report already had was answered without reading it.
            let_the_body_go(&headers, pump).await;
            Json(status).into_response()
        }
        Err(e) => {
            st.reports.metrics.upload_rejected();
            let (store, id) = (st.reports.store.clone(), id.clone());
            let _ = tokio::task::spawn_blocking(move || store.discard_uploads(&id)).await;
            let_the_body_go(&headers, pump).await;
            e.into_response()
        }
    }
}

/// Runs `receive` on the request once its client is admitted (upload token, rate, uploads in
/// progress), its body read on a pump of its own ([`pump_body`]); a body that stalled is
/// answered as such. The pump is handed back for [`let_the_body_go`].
async fn when_admitted<T, F: std::future::Future<Output = Result<T, ApiError>>>(
    st: &Shared,
    headers: &HeaderMap,
    req: Request,
    receive: impl FnOnce(Request) -> F,
) -> (Result<T, ApiError>, tokio::task::JoinHandle<()>) {
    // The peer's address (absent only when the router is served without connect info).
    let client = req
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map_or(std::net::IpAddr::from([0, 0, 0, 0]), |c| c.0.ip());
    let (parts, body) = req.into_parts();
    let stalled = Arc::new(AtomicBool::new(false));
    let (body, pump) = pump_body(body, st.config.body_timeout, stalled.clone());
    let result = match admit(&st.upload_auth, &st.upload_limit, headers, client) {
        Ok(_slot) => receive(Request::from_parts(parts, body)).await,
        Err(Refusal::Unauthorized) => Err(ApiError::Unauthorized),
        Err(Refusal::RateLimited(wait)) => Err(ApiError::TooMany(wait)),
        Err(Refusal::TooManyAtOnce(n)) => Err(ApiError::TooManyAtOnce(n)),
    };
    let result = match result {
        Err(_) if stalled.load(Ordering::Relaxed) => Err(ApiError::BodyTimeout(st.config.body_timeout.as_secs())),
        r => r,
    };
    (result, pump)
}

/// After a refusal: the rest of the body is read and dropped (bounded), so that the client,
/// still sending, reads the answer instead of a reset; a body too large to drain is cut off.
async fn let_the_body_go(headers: &HeaderMap, pump: tokio::task::JoinHandle<()>) {
    if declared_length(headers).is_some_and(|len| len > DRAIN_BYTES) {
        pump.abort(); // too much to drain: the connection is closed after the answer.
    } else {
        let _ = tokio::time::timeout(DRAIN_TIME, pump).await;
    }
}

async fn receive_window(
    st: &Shared,
    id: &ReportId,
    q: &UploadParams,
    headers: &HeaderMap,
    req: Request,
) -> Result<Status, ApiError> {
    let window = q
        .window
        .ok_or_else(|| ApiError::BadRequest("which window is this? (`?window=K`)".into()))?;
    let rec = record(st, id).await?;
    let token = headers
        .get("x-delete-token")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !ids::token_matches(token, &rec.delete_token_hash) {
        return Err(ApiError::Forbidden);
    }
    if !rec.files.iter().any(|f| f.window.is_some()) {
        return Err(ApiError::BadRequest(
            "this report is not a recording taken window by window (its window 0 is uploaded with `?window=0`)".into(),
        ));
    }
    if rec.files.iter().any(|f| f.window == Some(window)) {
        return Ok(status_of(st, &rec));
    }
    let limit = st.config.max_upload;
    if declared_length(headers).is_some_and(|len| len > limit.saturating_add(64 << 10)) {
        return Err(ApiError::TooLarge(limit));
    }
    let to = Receiving {
        id,
        first_key: rec.files.len(),
        import_ahead: None,
        window: Some(window),
    };
    let files = receive_files(st, q, headers, req, to).await?;
    let (store, id2) = (st.reports.store.clone(), id.clone());
    tokio::task::spawn_blocking(move || store.add_uploads(&id2, &files))
        .await
        .map_err(internal)?
        .map_err(store_error)?;
    st.reports.forget(id);
    st.reports.ingest.enqueue(id.clone());
    Ok(status_of(st, &record(st, id).await?))
}

/// Where one upload's files go: the report, the first upload key of this upload, how many
/// bytes may be imported while they arrive (`None`: none), and the window of a recording they
/// are.
struct Receiving<'a> {
    id: &'a ReportId,
    first_key: usize,
    import_ahead: Option<u64>,
    window: Option<u32>,
}

/// The key of the `n`th file of an upload: a window's is named by its window, so that two
/// windows arriving at once never share one.
fn upload_key(to: &Receiving<'_>, n: usize, name: &str) -> String {
    match to.window {
        Some(w) => format!("w{w:06}-{name}"),
        None => format!("{}-{name}", to.first_key + n),
    }
}

/// Streams the request's files (multipart `file` fields, or a raw body) into the store, within
/// the upload budget.
async fn receive_files(
    st: &Shared,
    q: &UploadParams,
    headers: &HeaderMap,
    req: Request,
    to: Receiving<'_>,
) -> Result<Vec<StoredFile>, ApiError> {
    let limit = st.config.max_upload;
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
            let name = upload_name(&fname, q.rank);
            let key = upload_key(&to, files.len(), &name);
            let size = stream_to_store(st, to.id, &key, field, &mut budget, limit, to.import_ahead).await?;
            files.push(StoredFile {
                name,
                key,
                size,
                window: to.window,
            });
        }
    } else {
        let name = upload_name(q.name.as_deref().unwrap_or("upload"), q.rank);
        let key = upload_key(&to, 0, &name);
        let stream = req.into_body().into_data_stream();
        let size = stream_to_store(st, to.id, &key, stream, &mut budget, limit, to.import_ahead).await?;
        if size > 0 {
            files.push(StoredFile {
                name,
                key,
                size,
                window: to.window,
            });
        }
    }
    if files.is_empty() {
        return Err(ApiError::BadRequest(
            "no file in the upload (send multipart `file` fields or a raw body)".into(),
        ));
    }
    if files.is_empty() {
        return Err(ApiError::BadRequest(
            "no file in the upload (send multipart `file` fields or a raw body)".into(),
        ));
    }
    if to.window.is_some() && files.len() > 1 {
        return Err(ApiError::BadRequest("a window of a recording is one file".into()));
    }
    st.reports.metrics.upload_accepted(files.iter().map(|f| f.size).sum());
    Ok(files)
}

/// A job as an upload joins it: its record, and the owner token when this upload made it.
struct JoinedJob {
    record: JobRecord,
    owner_token: Option<String>,
}

/// The job `name` of the upload's scope (its upload token's, or the open server's), made now
/// when it has no run yet.
async fn join_job(st: &Shared, name: String, headers: &HeaderMap, now: i64) -> Result<JoinedJob, ApiError> {
    let scope = match bearer(headers) {
        Some(t) if st.upload_auth.required() => ids::token_hash(t),
        _ => String::new(),
    };
    let owner_token = ids::new_delete_token();
    let new = JobRecord {
        id: JobId::new(),
        scope,
        name,
        created_at: now,
        owner_token_hash: ids::token_hash(&owner_token),
        thresholds: None,
    };
    let store = st.reports.store.clone();
    let new2 = new.clone();
    let record = tokio::task::spawn_blocking(move || store.job_named(&new2))
        .await
        .map_err(internal)?
        .map_err(store_error)?;
    let made = record.id == new.id;
    Ok(JoinedJob {
        record,
        owner_token: made.then_some(owner_token),
    })
}
