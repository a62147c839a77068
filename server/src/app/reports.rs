//! Stored reports by id, for every transport that reads the store: a report's record (a run
//! still gathering its ranks answers as a queued report), the status a client sees, its
//! summary (cached; a report in a layout this server does not read is queued to be analysed
//! again from its kept uploads), one of its snapshot files as loaded for queries, and its NVML
//! samples. A report of many ranks is never loaded whole: each query loads only the file it
//! names.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use memlens_api::{AnalyzeOutput, ReportState, Stage, Status};
use polars_core::prelude::DataFrame;

use super::runs::Runs;
use crate::ids::ReportId;
use crate::ingest::Ingest;
use crate::metrics::Metrics;
use crate::storage::filecache::LoadedFiles;
use crate::storage::reportdata::{self, DataError, LoadedFile};
use crate::storage::store::{ReportRecord, ReportStore};

/// Summaries kept in memory (small: a run of 64 ranks is 64 file summaries).
const CACHE_SUMMARIES: usize = 64;
/// Reports whose NVML samples are kept in memory.
const CACHE_GPU_LOGS: usize = 3;

/// Why a report cannot be read as asked.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("no such report")]
    NotFound,
    #[error("this report has expired")]
    Gone,
    /// Processing has not finished; carries the status.
    #[error("this report is not ready")]
    NotReady(Box<Status>),
    /// Processing failed; carries the status with its error.
    #[error("this report failed")]
    Failed(Box<Status>),
    /// An index past the report's snapshot files.
    #[error("no file {0} in this report")]
    NoFile(usize),
    /// What the request names is not in the report, or is not one of the things it may name
    /// (said in full).
    #[error("{0}")]
    Invalid(String),
    /// The store or a task failed (not the request's fault).
    #[error("{0}")]
    Internal(String),
}

fn internal(e: impl std::fmt::Display) -> ReportError {
    ReportError::Internal(e.to_string())
}

/// The store's reports as the transports read them, with the caches of summaries, loaded
/// files and NVML samples.
pub struct Reports {
    pub store: Arc<dyn ReportStore>,
    pub ingest: Arc<Ingest>,
    pub metrics: Arc<Metrics>,
    /// Runs gathering their ranks' uploads into one report.
    pub runs: Runs,
    /// Loaded files by report id and file index, shared with this process's ingest.
    pub files: Arc<LoadedFiles>,
    /// By report and its number of uploads: a recording that grew by a window (here or on
    /// another server of a shared store) is read anew.
    summaries: quick_cache::sync::Cache<(ReportId, usize), Arc<AnalyzeOutput>>,
    gpu_logs: quick_cache::sync::Cache<ReportId, Arc<Vec<DataFrame>>>,
}

/// Seconds since the Unix epoch.
pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

impl Reports {
    pub fn new(
        store: Arc<dyn ReportStore>,
        ingest: Arc<Ingest>,
        metrics: Arc<Metrics>,
        files: Arc<LoadedFiles>,
    ) -> Reports {
        Reports {
            store,
            ingest,
            metrics,
            runs: Runs::default(),
            files,
            summaries: quick_cache::sync::Cache::new(CACHE_SUMMARIES),
            gpu_logs: quick_cache::sync::Cache::new(CACHE_GPU_LOGS),
        }
    }

    /// Drops a report from the caches (after it was deleted).
    pub fn forget(&self, id: &ReportId) {
        self.summaries.retain(|(r, _), _| r != id);
        self.gpu_logs.remove(id);
        self.files.forget(id);
    }

    /// The index record of a report that exists and has not expired.
    pub async fn record(&self, id: &ReportId) -> Result<ReportRecord, ReportError> {
        let store = self.store.clone();
        let id2 = id.clone();
        let rec = tokio::task::spawn_blocking(move || store.get(&id2))
            .await
            .map_err(internal)?
            .map_err(internal)?;
        // A run still gathering its ranks is a queued report with the files so far.
        let rec = rec.or_else(|| self.runs.pending(id)).ok_or(ReportError::NotFound)?;
        if rec.expires_at.is_some_and(|e| e <= now()) {
            return Err(ReportError::Gone);
        }
        Ok(rec)
    }

    /// The status a client sees: the index state plus live progress while processing.
    pub fn status_of(&self, rec: &ReportRecord) -> Status {
        let total: u64 = rec.files.iter().map(|f| f.size).sum();
        let (stage, read) = match (rec.state, self.ingest.progress(&rec.id)) {
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
    pub async fn ready(&self, id: &ReportId) -> Result<ReportRecord, ReportError> {
        let rec = self.record(id).await?;
        match rec.state {
            ReportState::Ready => Ok(rec),
            ReportState::Failed => Err(ReportError::Failed(Box::new(self.status_of(&rec)))),
            _ => Err(ReportError::NotReady(Box::new(self.status_of(&rec)))),
        }
    }

    /// The summary of a ready report (read from `summary.json`, without loading its tables). A
    /// report stored in a layout this server does not read is queued to be analysed again from
    /// its kept uploads, and answered as not ready meanwhile.
    pub async fn summary_of(self: &Arc<Self>, id: &ReportId) -> Result<Arc<AnalyzeOutput>, ReportError> {
        let uploads = self.ready(id).await?.files.len();
        let key = (id.clone(), uploads);
        if let Some(s) = self.summaries.get(&key) {
            return Ok(s);
        }
        if uploads > 1 {
            self.forget_earlier_versions(id, uploads);
        }
        let me = self.clone();
        let id2 = id.clone();
        let read = tokio::task::spawn_blocking(move || {
            // Loads of one key run one at a time: the first to find the layout unreadable queues
            // the report, and those after it find it no longer ready.
            me.summaries
                .get_or_insert_with(&key, || match reportdata::read_summary(me.store.as_ref(), &id2) {
                    Ok(summary) => Ok(Arc::new(summary)),
                    Err(DataError::Unreadable { version }) => Err(me.analyse_again(&id2, version)),
                    Err(e) => Err(Some(internal(e))),
                })
        })
        .await
        .map_err(internal)?;
        match read {
            Ok(summary) => Ok(summary),
            Err(Some(e)) => Err(e),
            Err(None) => Err(ReportError::NotReady(Box::new(self.status_of(&self.record(id).await?)))),
        }
    }

    /// What an earlier version of a grown recording (fewer than `uploads` uploads) left in the
    /// caches, summary and files, goes.
    fn forget_earlier_versions(&self, id: &ReportId, uploads: usize) {
        let stale = std::sync::atomic::AtomicBool::new(false);
        self.summaries.retain(|(r, n), _| {
            let keep = r != id || *n == uploads;
            stale.fetch_or(!keep, std::sync::atomic::Ordering::Relaxed);
            keep
        });
        if stale.into_inner() {
            self.files.forget(id);
        }
    }

    /// Queues a ready report stored in an unreadable layout `version` to be analysed again from
    /// its kept uploads (once, however many readers found it so). `None` once queued.
    fn analyse_again(&self, id: &ReportId, version: u32) -> Option<ReportError> {
        match self.store.get(id) {
            Ok(Some(rec)) if rec.state == ReportState::Ready => {}
            Ok(_) => return None,
            Err(e) => return Some(internal(e)),
        }
        tracing::info!(report = %id, "stored in layout version {version}: analysing it again from its uploads");
        if let Err(e) = self.store.set_state(id, ReportState::Queued, None) {
            return Some(internal(e));
        }
        // On the runtime's blocking pool: its handle is at hand.
        self.ingest.enqueue(id.clone());
        None
    }

    /// One snapshot file of a ready report, as the cache holds it (opened once however many
    /// requests ask at the same time; its parts load as queries read them).
    pub async fn loaded_file(self: &Arc<Self>, id: &ReportId, file: usize) -> Result<Arc<LoadedFile>, ReportError> {
        let summary = self.summary_of(id).await?;
        if summary.files.get(file).is_none() {
            return Err(ReportError::NoFile(file));
        }
        let f = self.files.get_or_open(id, file, || {
            self.metrics.file_loaded();
            LoadedFile::open(self.store.clone(), id, file, &summary.files[file])
        });
        // Before a large part loads, the cache lets other files go (weakly held: a file must not
        // keep the cache, nor itself, alive).
        let (files, me, id2) = (Arc::downgrade(&self.files), Arc::downgrade(&f), id.clone());
        f.set_make_room(Box::new(move |extra| {
            if let (Some(files), Some(me)) = (files.upgrade(), me.upgrade()) {
                files.make_room(&id2, file, &me, extra);
            }
        }));
        Ok(f)
    }

    /// Runs `query` over file `file` of report `id` on the blocking pool (the parts it reads are
    /// loaded from the store if the cache does not hold them yet); the cache weighs the file
    /// again after.
    pub async fn with_file<T: Send + 'static, E: From<ReportError> + Send + 'static>(
        self: &Arc<Self>,
        id: &ReportId,
        file: usize,
        query: impl FnOnce(&LoadedFile) -> Result<T, E> + Send + 'static,
    ) -> Result<T, E> {
        let f = self.loaded_file(id, file).await?;
        let f2 = f.clone();
        let out = tokio::task::spawn_blocking(move || query(&f2))
            .await
            .map_err(|e| E::from(internal(e)));
        self.files.reweigh(id, file, &f);
        out?
    }

    /// The NVML samples of a ready report, one frame per log.
    pub async fn loaded_gpu_logs(self: &Arc<Self>, id: &ReportId) -> Result<Arc<Vec<DataFrame>>, ReportError> {
        let summary = self.summary_of(id).await?;
        if let Some(g) = self.gpu_logs.get(id) {
            return Ok(g);
        }
        let me = self.clone();
        let id = id.clone();
        tokio::task::spawn_blocking(move || {
            me.gpu_logs.get_or_insert_with(&id, || {
                reportdata::load_gpu_logs(me.store.as_ref(), &id, &summary)
                    .map(Arc::new)
                    .map_err(internal)
            })
        })
        .await
        .map_err(internal)?
    }
}

/// Creates the reports of runs that went quiet, every few seconds, for as long as the server
/// runs.
pub async fn close_quiet_runs(reports: Arc<Reports>) {
    loop {
        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        for g in reports.runs.quiet(std::time::Instant::now()) {
            tracing::info!(report = %g.id, files = g.files.len(), "run went quiet; creating its report");
            let (store, rec) = (reports.store.clone(), g.record());
            let id = rec.id.clone();
            match tokio::task::spawn_blocking(move || store.create(&rec)).await {
                Ok(Ok(())) => reports.ingest.enqueue(id),
                Ok(Err(e)) => tracing::error!("creating the report of a quiet run: {e}"),
                Err(e) => tracing::error!("creating the report of a quiet run: {e}"),
            }
        }
    }
}
