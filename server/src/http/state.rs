//! What the handlers share: the store, the ingest queue, metrics, settings and the caches of
//! summaries and loaded files; and the lookups every report endpoint starts with (record →
//! ready → summary, or one loaded file, or the NVML samples). A report of many ranks is never
//! loaded whole: each query loads only the file it names.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use memlens_api::{AnalyzeOutput, ReportState, Stage, Status};
use polars_core::prelude::DataFrame;

use super::auth::{UploadAuth, UploadLimit};
use super::error::{internal, ApiError};
use super::runs::Runs;
use crate::ids::ReportId;
use crate::ingest::Ingest;
use crate::metrics::Metrics;
use crate::storage::filecache::LoadedFiles;
use crate::storage::reportdata::{self, DataError, LoadedFile};
use crate::storage::store::{ReportRecord, ReportStore};

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

/// Summaries kept in memory (small: a run of 64 ranks is 64 file summaries).
const CACHE_SUMMARIES: usize = 64;
/// Reports whose NVML samples are kept in memory.
const CACHE_GPU_LOGS: usize = 3;

pub struct AppState {
    pub store: Arc<dyn ReportStore>,
    /// Who may upload, and how often.
    pub upload_auth: UploadAuth,
    pub upload_limit: UploadLimit,
    /// Runs gathering their ranks' uploads into one report.
    pub runs: Runs,
    pub ingest: Arc<Ingest>,
    pub metrics: Arc<Metrics>,
    pub config: HttpConfig,
    /// Loaded files by report id and file index, shared with this process's ingest.
    pub files: Arc<LoadedFiles>,
    /// By report and its number of uploads: a recording that grew by a window (here or on
    /// another server of a shared store) is read anew.
    summaries: quick_cache::sync::Cache<(ReportId, usize), Arc<AnalyzeOutput>>,
    gpu_logs: quick_cache::sync::Cache<ReportId, Arc<Vec<DataFrame>>>,
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
        store: Arc<dyn ReportStore>,
        ingest: Arc<Ingest>,
        metrics: Arc<Metrics>,
        config: HttpConfig,
        files: Arc<LoadedFiles>,
        (upload_auth, upload_limit): (UploadAuth, UploadLimit),
    ) -> Arc<AppState> {
        Arc::new(AppState {
            store,
            upload_auth,
            upload_limit,
            runs: Runs::default(),
            ingest,
            metrics,
            config,
            files,
            summaries: quick_cache::sync::Cache::new(CACHE_SUMMARIES),
            gpu_logs: quick_cache::sync::Cache::new(CACHE_GPU_LOGS),
        })
    }

    /// Drops a report from the caches (after it was deleted).
    pub fn forget(&self, id: &ReportId) {
        self.summaries.retain(|(r, _), _| r != id);
        self.gpu_logs.remove(id);
        self.files.forget(id);
    }
}

pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The index record of a report that exists and has not expired.
pub async fn record(st: &Shared, id: &ReportId) -> Result<ReportRecord, ApiError> {
    let store = st.store.clone();
    let id2 = id.clone();
    let rec = tokio::task::spawn_blocking(move || store.get(&id2))
        .await
        .map_err(internal)?
        .map_err(internal)?;
    // A run still gathering its ranks is a queued report with the files so far.
    let rec = rec.or_else(|| st.runs.pending(id)).ok_or(ApiError::NotFound)?;
    if rec.expires_at.is_some_and(|e| e <= now()) {
        return Err(ApiError::Gone);
    }
    Ok(rec)
}

/// The status a client sees: the index state plus live progress while processing.
pub fn status_of(st: &Shared, rec: &ReportRecord) -> Status {
    let total: u64 = rec.files.iter().map(|f| f.size).sum();
    let (stage, read) = match (rec.state, st.ingest.progress(&rec.id)) {
        (ReportState::Ready, _) => (Stage::Ready, total),
        (ReportState::Failed, _) => (Stage::Failed, 0),
        (_, Some(p)) => (p.stage(), p.bytes_read.load(std::sync::atomic::Ordering::Relaxed)),
        (ReportState::Queued, None) => (Stage::Queued, 0),
        (ReportState::Processing, None) => (Stage::Processing, 0),
    };
    Status {
        id: rec.id.to_string(),
        state: rec.state,
        stage,
        bytes_read: read.min(total),
        bytes_total: total,
        files: rec.files.iter().map(|f| f.name.clone()).collect(),
        error: rec.error.clone(),
        created_at: rec.created_at,
        expires_at: rec.expires_at,
        meta: rec.meta.clone(),
        windows: rec.files.iter().filter(|f| f.window.is_some()).count() as u32,
    }
}

/// The index record of a report that finished processing successfully.
pub async fn ready(st: &Shared, id: &ReportId) -> Result<ReportRecord, ApiError> {
    let rec = record(st, id).await?;
    match rec.state {
        ReportState::Ready => Ok(rec),
        ReportState::Failed => Err(ApiError::Failed(Box::new(status_of(st, &rec)))),
        _ => Err(ApiError::NotReady(Box::new(status_of(st, &rec)))),
    }
}

/// The summary of a ready report (read from `summary.json`, without loading its tables). A
/// report stored in a layout this server does not read is queued to be analysed again from
/// its kept uploads, and answered as not ready meanwhile.
pub async fn summary_of(st: &Shared, id: &ReportId) -> Result<Arc<AnalyzeOutput>, ApiError> {
    let uploads = ready(st, id).await?.files.len();
    let key = (id.clone(), uploads);
    if let Some(s) = st.summaries.get(&key) {
        return Ok(s);
    }
    if uploads > 1 {
        // What an earlier version of a grown recording left here, summary and files, goes.
        let stale = std::sync::atomic::AtomicBool::new(false);
        st.summaries.retain(|(r, n), _| {
            let keep = r != id || *n == uploads;
            stale.fetch_or(!keep, std::sync::atomic::Ordering::Relaxed);
            keep
        });
        if stale.into_inner() {
            st.files.forget(id);
        }
    }
    let st2 = st.clone();
    let id2 = id.clone();
    let read = tokio::task::spawn_blocking(move || {
        // Loads of one key run one at a time: the first to find the layout unreadable queues
        // the report, and those after it find it no longer ready.
        st2.summaries
            .get_or_insert_with(&key, || match reportdata::read_summary(st2.store.as_ref(), &id2) {
                Ok(summary) => Ok(Arc::new(summary)),
                Err(DataError::Unreadable { version }) => Err(analyse_again(&st2, &id2, version)),
                Err(e) => Err(Some(internal(e))),
            })
    })
    .await
    .map_err(internal)?;
    match read {
        Ok(summary) => Ok(summary),
        Err(Some(e)) => Err(e),
        Err(None) => Err(ApiError::NotReady(Box::new(status_of(st, &record(st, id).await?)))),
    }
}

/// Queues a ready report stored in an unreadable layout `version` to be analysed again from
/// its kept uploads (once, however many readers found it so). `None` once queued.
fn analyse_again(st: &Shared, id: &ReportId, version: u32) -> Option<ApiError> {
    match st.store.get(id) {
        Ok(Some(rec)) if rec.state == ReportState::Ready => {}
        Ok(_) => return None,
        Err(e) => return Some(internal(e)),
    }
    tracing::info!(report = %id, "stored in layout version {version}: analysing it again from its uploads");
    if let Err(e) = st.store.set_state(id, ReportState::Queued, None) {
        return Some(internal(e));
    }
    // On the runtime's blocking pool: its handle is at hand.
    st.ingest.enqueue(id.clone());
    None
}

/// One snapshot file of a ready report, as the cache holds it (opened once however many
/// requests ask at the same time; its parts load as queries read them); an index past the
/// report's files is a 400.
pub async fn loaded_file(st: &Shared, id: &ReportId, file: usize) -> Result<Arc<LoadedFile>, ApiError> {
    let summary = summary_of(st, id).await?;
    if summary.files.get(file).is_none() {
        return Err(ApiError::BadRequest(format!("no file {file} in this report")));
    }
    let f = st.files.get_or_open(id, file, || {
        st.metrics.file_loaded();
        LoadedFile::open(st.store.clone(), id, file, &summary.files[file])
    });
    // Before a large part loads, the cache lets other files go (weakly held: a file must not
    // keep the cache, nor itself, alive).
    let (files, me, id2) = (Arc::downgrade(&st.files), Arc::downgrade(&f), id.clone());
    f.set_make_room(Box::new(move |extra| {
        if let (Some(files), Some(me)) = (files.upgrade(), me.upgrade()) {
            files.make_room(&id2, file, &me, extra);
        }
    }));
    Ok(f)
}

/// The NVML samples of a ready report, one frame per log.
pub async fn loaded_gpu_logs(st: &Shared, id: &ReportId) -> Result<Arc<Vec<DataFrame>>, ApiError> {
    let summary = summary_of(st, id).await?;
    if let Some(g) = st.gpu_logs.get(id) {
        return Ok(g);
    }
    let st2 = st.clone();
    let id = id.clone();
    tokio::task::spawn_blocking(move || {
        st2.gpu_logs.get_or_insert_with(&id, || {
            reportdata::load_gpu_logs(st2.store.as_ref(), &id, &summary)
                .map(Arc::new)
                .map_err(internal)
        })
    })
    .await
    .map_err(internal)?
}
