//! What the handlers share: the store, the ingest queue, metrics, settings and the cache of
//! loaded reports; and the lookups every report endpoint starts with (record → ready →
//! summary or loaded data).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use memlens_api::{AnalyzeOutput, ReportState, Stage, Status};

use super::error::{internal, ApiError};
use crate::ids;
use crate::ingest::Ingest;
use crate::metrics::Metrics;
use crate::reportdata::{self, LoadedReport};
use crate::store::{ReportRecord, ReportStore};

/// Server settings the handlers need.
#[derive(Clone, Debug)]
pub struct HttpConfig {
    pub max_upload: u64,
    pub retention_days: u64,
    pub static_dir: PathBuf,
}

/// Loaded reports kept in memory for queries.
const CACHE_REPORTS: usize = 3;

pub struct AppState {
    pub store: Arc<dyn ReportStore>,
    pub ingest: Arc<Ingest>,
    pub metrics: Arc<Metrics>,
    pub config: HttpConfig,
    /// Loaded reports by id. `get_or_insert_with` makes concurrent requests for a report that
    /// is not loaded wait for one load instead of each loading it.
    cache: quick_cache::sync::Cache<String, Arc<LoadedReport>>,
}

pub type Shared = Arc<AppState>;

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
            cache: quick_cache::sync::Cache::new(CACHE_REPORTS),
        })
    }

    /// Drops a report from the cache (after it was deleted).
    pub fn forget(&self, id: &str) {
        self.cache.remove(id);
    }

    fn cached(&self, id: &str) -> Option<Arc<LoadedReport>> {
        self.cache.get(id)
    }
}

pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The index record of a report that exists and has not expired.
pub async fn record(st: &Shared, id: &str) -> Result<ReportRecord, ApiError> {
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
        id: rec.id.clone(),
        state: rec.state,
        stage,
        bytes_read: read.min(total),
        bytes_total: total,
        files: rec.files.iter().map(|f| f.name.clone()).collect(),
        error: rec.error.clone(),
        created_at: rec.created_at,
        expires_at: rec.expires_at,
    }
}

/// The index record of a report that finished processing successfully.
pub async fn ready(st: &Shared, id: &str) -> Result<ReportRecord, ApiError> {
    let rec = record(st, id).await?;
    match rec.state {
        ReportState::Ready => Ok(rec),
        ReportState::Failed => Err(ApiError::Failed(Box::new(status_of(st, &rec)))),
        _ => Err(ApiError::NotReady(Box::new(status_of(st, &rec)))),
    }
}

/// The summary of a ready report (read from `summary.json`, without loading its tables).
pub async fn summary_of(st: &Shared, id: &str) -> Result<AnalyzeOutput, ApiError> {
    ready(st, id).await?;
    if let Some(r) = st.cached(id) {
        return Ok(r.summary.clone());
    }
    let store = st.store.clone();
    let id = id.to_owned();
    tokio::task::spawn_blocking(move || reportdata::read_summary(store.as_ref(), &id))
        .await
        .map_err(internal)?
        .map_err(internal)
}

/// The loaded data of a ready report (loaded once however many requests ask at the same time).
pub async fn loaded(st: &Shared, id: &str) -> Result<Arc<LoadedReport>, ApiError> {
    ready(st, id).await?;
    if let Some(r) = st.cached(id) {
        return Ok(r);
    }
    let st2 = st.clone();
    let id = id.to_owned();
    tokio::task::spawn_blocking(move || {
        st2.cache.get_or_insert_with(&id, || {
            reportdata::load(st2.store.as_ref(), &id)
                .map(Arc::new)
                .map_err(internal)
        })
    })
    .await
    .map_err(internal)?
}
