//! Background processing of uploaded reports: run the core pipeline over the report's kept
//! uploads, write its tables, summary and chart through one [`DataWriter`] that is committed
//! only when everything succeeded, and keep live progress for the status endpoint.
//!
//! Tasks run on the blocking pool, at most `concurrency` at a time, never on the async workers.
//! Client-facing failures (input errors) name the file and the problem; internal failures are
//! logged and reported to clients only as "internal error".

//!
//! Beside it: [`pre_import`] (imports begun while an upload still arrives), [`worker`]
//! (`memlens worker` on a shared store's queue), [`priority`] (the task order).

pub mod follow_upload;
pub mod pre_import;
pub mod priority;
pub mod worker;

use std::collections::HashMap;
use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use memlens_api::{FileSummary, ReportState, Stage};
use memlens_core::analysis::categories::FrameRules;
use memlens_core::importers::ImportOptions;
use memlens_core::pipeline::{
    self, DeviceFrames, GpuLogOutput, HandOver, Input, Keep, Pipeline, PipelineSink, SinkError, SnapshotOutput,
    GZIP_RATIO,
};
use tokio::sync::Semaphore;

use crate::charts::{self, Chart};
use crate::ingest::follow_upload::UploadFollower;
use crate::ingest::pre_import::{Forgotten, PreImports};
use crate::metrics::Metrics;
use crate::storage::filecache::LoadedFiles;
use crate::storage::reportdata::{self, LoadedFile};
use crate::storage::store::{DataWriter, ReportId, ReportStore, StoreError, StoredFile};

/// Live progress of one task.
pub struct Progress {
    pub bytes_read: AtomicU64,
    pub bytes_total: AtomicU64,
    stage: Mutex<Stage>,
    /// When the task began (the stages' times are logged from it).
    began: Instant,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            bytes_read: AtomicU64::new(0),
            bytes_total: AtomicU64::new(0),
            stage: Mutex::new(Stage::Queued),
            began: Instant::now(),
        }
    }
}

impl Progress {
    fn set_stage(&self, s: Stage) {
        if let Ok(mut g) = self.stage.lock() {
            if *g != s {
                tracing::debug!(stage = ?s, "ingest stage begins {:.0} ms in", self.began.elapsed().as_secs_f64() * 1e3);
            }
            *g = s;
        }
    }
    pub fn stage(&self) -> Stage {
        self.stage.lock().map(|g| *g).unwrap_or(Stage::Processing)
    }
}

/// Counts bytes as the importer reads them.
struct CountingReader<R> {
    inner: R,
    progress: Arc<Progress>,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.progress.bytes_read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// How a task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IngestOutcome {
    Ready,
    /// The input is at fault (it would fail the same way again); shown to the uploader.
    InputError(String),
    /// The server is at fault (logged); a worker may retry it once.
    InternalError(String),
}

impl IngestOutcome {
    /// The state and the client-facing error it leaves the report in.
    pub fn state(&self) -> (ReportState, Option<String>) {
        match self {
            IngestOutcome::Ready => (ReportState::Ready, None),
            IngestOutcome::InputError(msg) => (ReportState::Failed, Some(msg.clone())),
            IngestOutcome::InternalError(_) => (
                ReportState::Failed,
                Some("internal error while processing the report".to_owned()),
            ),
        }
    }
}

/// Why a task failed.
enum IngestError {
    /// The input is at fault; the message is shown to the uploader.
    Input(String),
    /// The server is at fault; logged, never shown.
    Internal(String),
    /// The store's disk (or database) ran out of space while the report was written.
    DiskFull,
}

impl IngestError {
    /// An internal error, or [`IngestError::DiskFull`] when a [`StoreError`] in its chain says so.
    fn internal(e: &(dyn std::error::Error + 'static)) -> IngestError {
        let mut at = Some(e);
        while let Some(e) = at {
            if e.downcast_ref::<StoreError>().is_some_and(StoreError::is_disk_full) {
                return IngestError::DiskFull;
            }
            at = e.source();
        }
        IngestError::Internal(e.to_string())
    }
}

/// The pipeline's sink for one report: progress, and every table and chart into the data
/// writer.
struct StoreSink<'a> {
    progress: &'a Progress,
    data: &'a mut dyn DataWriter,
    /// The default chart is made from the first snapshot device, else the first GPU log.
    charted: bool,
    /// The report's snapshot file and its device frames while it has only one (a run of many
    /// ranks opens on its worst rank, known only at the end); kept only with a cache to fill.
    file_for_cache: Option<FileForCache>,
    keep_frames: bool,
    /// Frames encoded while their analyses still ran (the pipeline's [`ObjectSink`]).
    early: &'a reportdata::EarlyObjects,
}

/// What an ingest keeps of each file: everything a stored report answers from. A trace of
/// 64 MiB or more lets go of its addresses before its usage series is made, which lowers the peak of a
/// GB-scale ingest (`memlens-bench-ingest`, BENCHMARKS.md); a smaller one keeps them and has
/// its usage series encoded while its fragmentation replay runs, which makes it ready sooner.
/// `write_file` reads no trace entry once every segment-map object is encoded early.
pub const KEEP: Keep = Keep {
    tables: true,
    segment_checkpoints: true,
    hand_over: HandOver::WhileOthersRun,
    release_addresses_from: Some(64 << 20),
};

/// The one snapshot file of a report just processed, as the cache will hold it.
struct FileForCache {
    summary: FileSummary,
    devices: Vec<DeviceFrames>,
}

impl PipelineSink for StoreSink<'_> {
    fn stage(&mut self, stage: Stage, _file: Option<&str>) {
        self.progress.set_stage(stage);
    }
    fn snapshot(&mut self, out: SnapshotOutput<'_>) -> Result<(), SinkError> {
        let early = self.early.take(out.index);
        reportdata::write_file(self.data, out.index, out.summary, out.tables, out.devices, early)?;
        if !self.charted {
            if let (Some(dev), Some(d)) = (out.devices.first(), out.summary.devices.first()) {
                self.chart(&Chart::Device(dev, d))?;
            }
        }
        // The cache's frames are read by queries, their lifetimes' addresses too: those built
        // apart from them are put in from the trace. A trace that let go of its addresses (a
        // large one) leaves its frames to be read back from the store when first asked for.
        if self.keep_frames {
            self.file_for_cache = None;
            if out.index == 0 && out.tables.holds_addresses() {
                DeviceFrames::fill_lifetime_addresses(out.tables, out.devices)?;
                self.file_for_cache = Some(FileForCache {
                    summary: out.summary.clone(),
                    devices: out.devices.iter_mut().map(std::mem::take).collect(),
                });
            }
        }
        Ok(())
    }
    fn gpu_log(&mut self, out: GpuLogOutput<'_>) -> Result<(), SinkError> {
        reportdata::write_gpu_log(self.data, out.index, &mut out.samples.samples)?;
        if !self.charted {
            if let Some(g) = out.summary.gpus.first() {
                self.chart(&Chart::Gpu(&out.samples.samples, out.summary, g))?;
            }
        }
        Ok(())
    }
}

impl StoreSink<'_> {
    fn chart(&mut self, chart: &Chart<'_>) -> Result<(), SinkError> {
        let (png, svg) = charts::render_png_and_svg(chart)?;
        reportdata::write_charts(self.data, &png, &svg)?;
        self.charted = true;
        Ok(())
    }
}

/// The task queue.
pub struct Ingest {
    store: Arc<dyn ReportStore>,
    permits: Arc<Semaphore>,
    progress: Mutex<HashMap<ReportId, Arc<Progress>>>,
    metrics: Arc<Metrics>,
    options: ImportOptions,
    category_rules: FrameRules,
    /// The server's loaded files, given the frames of each report this process processes.
    files: Option<Arc<LoadedFiles>>,
    /// Uploads imported while they arrive, taken by their reports' tasks.
    pre_imports: PreImports,
    /// Reports being processed here, each with whether it was queued again meanwhile (a
    /// window added to a recording): one report is processed by one task at a time, and a task
    /// records its outcome only when nothing was added since it read the report.
    running: Mutex<HashMap<ReportId, bool>>,
}

impl Ingest {
    /// With `files` (the server's cache), each report processed here leaves its device frames
    /// there, so that its first queries need not read them back from the store.
    pub fn new(
        store: Arc<dyn ReportStore>,
        concurrency: usize,
        metrics: Arc<Metrics>,
        category_rules: FrameRules,
        files: Option<Arc<LoadedFiles>>,
    ) -> Arc<Ingest> {
        let options = ImportOptions::default();
        Arc::new(Ingest {
            store,
            permits: Arc::new(Semaphore::new(concurrency.max(1))),
            progress: Mutex::new(HashMap::new()),
            running: Mutex::new(HashMap::new()),
            metrics,
            options,
            category_rules,
            files,
            // As many uploads imported ahead as tasks run at once: each holds one file's tables
            // until its task takes them.
            pre_imports: PreImports::new(concurrency.max(1), options),
        })
    }

    /// Begins importing upload `key` of report `id` while it arrives (see [`crate::ingest::pre_import`]);
    /// `None` when it will be imported by its task instead (no free slot, a store that cannot
    /// read an upload back before it is finished, or a shared store's queue, whose task another
    /// process may claim).
    pub fn follow_upload(self: &Arc<Self>, id: &ReportId, key: &str, size_bound: u64) -> Option<UploadFollower> {
        if self.store.ingest_queue().is_some() {
            return None;
        }
        let feed = self.pre_imports.begin(self.store.as_ref(), id, key, size_bound)?;
        self.metrics.import_ahead_begun();
        Some(UploadFollower::new(self.clone(), id, key, feed, size_bound))
    }

    /// Takes what the import begun for upload `key` of report `id` will hold once `upto` bytes
    /// of it are in out of the cache's budget, from now until its task has the tables (the
    /// task's own reservation covers the rest), in place of what it took before: the files used
    /// least recently leave before the import grows, instead of staying beside it while the
    /// upload arrives. `head`, the upload's first bytes, says whether it is gzipped.
    fn reserve_for_pre_import(&self, id: &ReportId, key: &str, upto: u64, head: &[u8]) {
        if let Some(files) = &self.files {
            let gzip = head.starts_with(&[0x1f, 0x8b]);
            self.pre_imports.hold(id, key, files.reserve(peak_of(upto, gzip)));
        }
    }

    /// Forgets what was begun for the uploads of report `id` (refused, or never created); the
    /// imports' threads can be waited for through what is returned.
    pub fn forget_pre_imports(&self, id: &ReportId) -> Forgotten {
        self.pre_imports.forget(id)
    }

    /// Imports begun and not yet taken by a task.
    pub fn pre_imports_pending(&self) -> usize {
        self.pre_imports.pending()
    }

    pub fn progress(&self, id: &ReportId) -> Option<Arc<Progress>> {
        self.progress.lock().ok()?.get(id).cloned()
    }

    pub fn store(&self) -> &Arc<dyn ReportStore> {
        &self.store
    }

    /// Queues a report for processing. With a shared store this is nothing: the report's row
    /// is the task, and workers claim it from the index.
    pub fn enqueue(self: &Arc<Self>, id: ReportId) {
        if self.store.ingest_queue().is_some() {
            return;
        }
        {
            let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(again) = running.get_mut(&id) {
                *again = true; // the task processing it goes round once more
                return;
            }
            running.insert(id.clone(), false);
        }
        let this = self.clone();
        tokio::spawn(async move {
            let Ok(_permit) = this.permits.clone().acquire_owned().await else {
                return;
            };
            let task = this.clone();
            let id2 = id.clone();
            let result = tokio::task::spawn_blocking(move || loop {
                if let Err(e) = task.store.set_state(&id2, ReportState::Processing, None) {
                    tracing::error!(report = %id2, "cannot mark processing: {e}");
                }
                let (state, error) = task.process_report(&id2).state();
                // The outcome is recorded, and the task ends, under the lock an enqueue takes.
                let mut running = task.running.lock().unwrap_or_else(|p| p.into_inner());
                if running.get(&id2) == Some(&true) {
                    running.insert(id2.clone(), false);
                    continue;
                }
                if let Err(e) = task.store.set_state(&id2, state, error.as_deref()) {
                    tracing::error!(report = %id2, "cannot record the outcome: {e}");
                }
                running.remove(&id2);
                drop(running);
                if state == ReportState::Ready {
                    task.prepare_first_view(&id2);
                }
                break;
            })
            .await;
            if let Err(e) = result {
                tracing::error!(report = %id, "ingest task failed: {e}");
                this.running.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
                let store = this.store.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    store.set_state(&id, ReportState::Failed, Some("internal error while processing"))
                })
                .await;
            }
        });
    }

    /// Processes a report (on this thread, with a lower-priority thread of its own for the
    /// pipeline): its data is written and committed, or nothing is. Live progress is kept
    /// meanwhile; the caller records the outcome in the index.
    /// For a report this server just processed and keeps in memory, builds what a page opened
    /// on it asks for first. Called once its outcome is recorded: the page opened when it reads
    /// as ready finds them built, or waits for this build instead of starting its own.
    pub fn prepare_first_view(&self, id: &ReportId) {
        let Some(f) = self.files.as_ref().and_then(|files| files.get(id, 0)) else {
            return;
        };
        if let Err(e) = f.prepare_first_view() {
            tracing::warn!(report = %id, "first view indexes: {e}");
        }
        if let Some(files) = &self.files {
            files.reweigh(id, 0, &f);
        }
    }

    pub fn process_report(&self, id: &ReportId) -> IngestOutcome {
        let progress = Arc::new(Progress::default());
        if let Ok(mut m) = self.progress.lock() {
            m.insert(id.clone(), progress.clone());
        }
        let outcome = self.run(id, &progress);
        // Whatever was imported ahead and not taken (a task that stopped early) goes too.
        drop(self.pre_imports.forget(id));
        if let Ok(mut m) = self.progress.lock() {
            m.remove(id);
        }
        outcome
    }

    fn run(&self, id: &ReportId, progress: &Arc<Progress>) -> IngestOutcome {
        let started = Instant::now();
        progress.set_stage(Stage::Processing);
        let outcome = std::thread::scope(|scope| {
            let thread = std::thread::Builder::new()
                .name("memlens-ingest".into())
                .spawn_scoped(scope, || {
                    crate::ingest::priority::lower_to(crate::ingest::priority::INGEST);
                    self.process(id, progress)
                });
            match thread {
                Ok(j) => j
                    .join()
                    .unwrap_or_else(|_| Err(IngestError::Internal("the ingest thread panicked".into()))),
                Err(e) => Err(IngestError::Internal(format!("cannot start the ingest thread: {e}"))),
            }
        });
        self.metrics
            .record_ingest(started.elapsed().as_secs_f64(), outcome.is_ok());
        match outcome {
            Ok(()) => IngestOutcome::Ready,
            Err(IngestError::Input(msg)) => IngestOutcome::InputError(msg),
            Err(IngestError::Internal(msg)) => {
                tracing::error!(report = %id, "processing failed: {msg}");
                IngestOutcome::InternalError(msg)
            }
            Err(IngestError::DiskFull) => IngestOutcome::InputError(
                "the server's disk filled up while writing this report, so nothing of it was kept; \
                 free space (or delete reports) and upload it again"
                    .to_owned(),
            ),
        }
    }

    fn process(&self, id: &ReportId, progress: &Arc<Progress>) -> Result<(), IngestError> {
        let internal = |e: &(dyn std::error::Error + 'static)| IngestError::internal(e);
        let record = self
            .store
            .get(id)
            .map_err(|e| internal(&e))?
            .ok_or_else(|| IngestError::Internal(format!("report {id} vanished from the index")))?;
        progress
            .bytes_total
            .store(record.files.iter().map(|f| f.size).sum(), Ordering::Relaxed);
        // Dropped before the report just processed goes into the cache.
        let reservation = self
            .files
            .as_ref()
            .map(|files| files.reserve(self.peak_bytes(id, &record.files)));
        // A recording's windows are one input, in window order; other files one each.
        let mut windows: Vec<&StoredFile> = record.files.iter().filter(|f| f.window.is_some()).collect();
        windows.sort_by_key(|f| f.window);
        let recording = windows.first().map(|first| {
            let name = match windows.len() {
                1 => first.name.clone(),
                n => format!("{} ({n} windows)", first.name),
            };
            let opens = windows
                .iter()
                .map(|f| {
                    let (store, id2, key, p) = (self.store.clone(), id.clone(), f.key.clone(), progress.clone());
                    let open: pipeline::OpenInput = Box::new(move || {
                        let inner = store.open_upload(&id2, &key).map_err(std::io::Error::other)?;
                        Ok(Box::new(CountingReader { inner, progress: p }) as Box<dyn Read + Send>)
                    });
                    (f.size, open)
                })
                .collect();
            Input::windows(name, opens)
        });
        let inputs = recording
            .into_iter()
            .chain(record.files.iter().filter(|f| f.window.is_none()).map(|f| {
                if let Some(import) = self.pre_imports.take(id, &f.key) {
                    // Read while it arrived: its bytes are in.
                    tracing::debug!(report = %id, "upload {} imported while it arrived", f.key);
                    progress.bytes_read.fetch_add(f.size, Ordering::Relaxed);
                    return Input::begun(f.name.clone(), import);
                }
                let (store, id2, key, p) = (self.store.clone(), id.clone(), f.key.clone(), progress.clone());
                Input::reader(
                    f.name.clone(),
                    f.size,
                    Box::new(move || {
                        let inner = store.open_upload(&id2, &key).map_err(std::io::Error::other)?;
                        Ok(Box::new(CountingReader { inner, progress: p }) as Box<dyn Read + Send>)
                    }),
                )
            }))
            .collect();
        // Dropped without commit on any error: the report's data stays as it was.
        let mut data = self.store.data_writer(id).map_err(|e| internal(&e))?;
        let early = reportdata::EarlyObjects::default();
        let mut sink = StoreSink {
            progress,
            data: data.as_mut(),
            charted: false,
            file_for_cache: None,
            keep_frames: self.files.is_some(),
            early: &early,
        };
        let pipeline = Pipeline::new()
            .options(self.options)
            .rules(&self.category_rules)
            .keep(KEEP)
            .objects(&early);
        let out = pipeline.run(inputs, &mut sink).map_err(|e| {
            if e.is_input_error() {
                IngestError::Input(e.to_string())
            } else {
                IngestError::internal(&e)
            }
        })?;
        let file_for_cache = sink.file_for_cache.take().filter(|_| out.files.len() == 1);
        reportdata::write_summary(data.as_mut(), &out).map_err(|e| internal(&e))?;
        data.commit().map_err(|e| internal(&e))?;
        drop(reservation);
        if let (Some(files), Some(f)) = (&self.files, file_for_cache) {
            let loaded = LoadedFile::with_devices(self.store.clone(), id, 0, &f.summary, f.devices);
            files.insert(id, 0, Arc::new(loaded));
        }
        progress.set_stage(Stage::Ready);
        Ok(())
    }
}

/// About what an ingest holds at its peak, for each byte of a snapshot as the importer reads
/// it, rounded up from the largest ratio `memlens-bench-store` measures (BENCHMARKS.md; small
/// files have the largest, the binary's baseline included). Re-measure it when the ingest's
/// memory changes: a reservation far above what the ingest holds pushes reports out of the
/// cache for nothing, one below lets the cache and the ingest together over the budget.
const PEAK_PER_BYTE: f64 = 0.8;

impl Ingest {
    /// What processing `files` of report `id` will hold at its peak, roughly (the cache makes
    /// room for it while the ingest runs): gzipped uploads, known by their first two bytes,
    /// count as [`GZIP_RATIO`] times their size.
    fn peak_bytes(&self, id: &ReportId, files: &[StoredFile]) -> u64 {
        files
            .iter()
            .map(|f| {
                let mut magic = [0u8; 2];
                let gzip = self
                    .store
                    .open_upload(id, &f.key)
                    .and_then(|mut r| r.read_exact(&mut magic).map_err(Into::into))
                    .is_ok_and(|()| magic == [0x1f, 0x8b]);
                peak_of(f.size, gzip)
            })
            .sum()
    }
}

/// What importing and analysing an upload of `size` bytes holds at its peak, roughly.
fn peak_of(size: u64, gzip: bool) -> u64 {
    let content = if gzip { size.saturating_mul(GZIP_RATIO) } else { size };
    (content as f64 * PEAK_PER_BYTE) as u64
}
