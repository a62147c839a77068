//! Background processing of uploaded reports: import every file, run the analyses, write the
//! report's data atomically, and keep live progress for the status endpoint.
//!
//! Jobs run on the blocking pool, at most `concurrency` at a time, never on the async workers.
//! Client-facing failures ([`IngestError::Input`]) name the file and the problem; internal
//! failures are logged and reported to clients only as "internal error".

use std::collections::HashMap;
use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use memlens_api::{AnalyzeOutput, SkippedFile};
use memlens_core::analysis::gpu_samples::link_process_gpus;
use memlens_core::analysis::DeviceEvents;
use memlens_core::importers::{import_on_thread, ImportOptions, Imported};
use memlens_core::report::{analyze_gpu_log, analyze_snapshot, snapshot_time_range};
use memlens_core::source::Source;
use memlens_core::ImportError;
use polars::prelude::Column;
use tokio::sync::Semaphore;

use crate::charts::{self, Chart};
use crate::metrics::Metrics;
use crate::reportdata::{self, DeviceFrames};
use crate::store::{ReportState, ReportStore};

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// The input is at fault; the message is shown to the uploader.
    #[error("{0}")]
    Input(String),
    /// The server is at fault; logged, never shown.
    #[error("{0}")]
    Internal(String),
}

/// Live progress of one job.
#[derive(Default)]
pub struct Progress {
    pub bytes_read: AtomicU64,
    pub bytes_total: AtomicU64,
    pub stage: Mutex<&'static str>,
}

impl Progress {
    fn set_stage(&self, s: &'static str) {
        if let Ok(mut g) = self.stage.lock() {
            *g = s;
        }
    }
    pub fn stage(&self) -> &'static str {
        self.stage.lock().map(|g| *g).unwrap_or("processing")
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

/// The job queue.
pub struct Ingest {
    store: Arc<dyn ReportStore>,
    permits: Arc<Semaphore>,
    progress: Mutex<HashMap<String, Arc<Progress>>>,
    metrics: Arc<Metrics>,
    options: ImportOptions,
}

impl Ingest {
    pub fn new(store: Arc<dyn ReportStore>, concurrency: usize, metrics: Arc<Metrics>) -> Arc<Ingest> {
        Arc::new(Ingest {
            store,
            permits: Arc::new(Semaphore::new(concurrency.max(1))),
            progress: Mutex::new(HashMap::new()),
            metrics,
            options: ImportOptions::default(),
        })
    }

    pub fn progress(&self, id: &str) -> Option<Arc<Progress>> {
        self.progress.lock().ok()?.get(id).cloned()
    }

    /// Queues a report for processing.
    pub fn enqueue(self: &Arc<Self>, id: String) {
        let progress = Arc::new(Progress::default());
        progress.set_stage("queued");
        if let Ok(mut m) = self.progress.lock() {
            m.insert(id.clone(), progress.clone());
        }
        let this = self.clone();
        tokio::spawn(async move {
            let Ok(_permit) = this.permits.clone().acquire_owned().await else {
                return;
            };
            let job = this.clone();
            let id2 = id.clone();
            let result = tokio::task::spawn_blocking(move || job.run(&id2, &progress)).await;
            if let Err(e) = result {
                tracing::error!(report = %id, "ingest task failed: {e}");
                let _ = this
                    .store
                    .set_state(&id, ReportState::Failed, Some("internal error while processing"));
            }
            if let Ok(mut m) = this.progress.lock() {
                m.remove(&id);
            }
        });
    }

    fn run(&self, id: &str, progress: &Arc<Progress>) {
        let started = Instant::now();
        if let Err(e) = self.store.set_state(id, ReportState::Processing, None) {
            tracing::error!(report = %id, "cannot mark processing: {e}");
        }
        progress.set_stage("processing");
        let outcome = self.process(id, progress);
        let (state, error) = match &outcome {
            Ok(()) => (ReportState::Ready, None),
            Err(IngestError::Input(msg)) => (ReportState::Failed, Some(msg.clone())),
            Err(IngestError::Internal(msg)) => {
                tracing::error!(report = %id, "processing failed: {msg}");
                (
                    ReportState::Failed,
                    Some("internal error while processing the report".to_owned()),
                )
            }
        };
        if let Err(e) = self.store.set_state(id, state, error.as_deref()) {
            tracing::error!(report = %id, "cannot record the outcome: {e}");
        }
        self.metrics
            .record_ingest(started.elapsed().as_secs_f64(), outcome.is_ok());
    }

    fn process(&self, id: &str, progress: &Arc<Progress>) -> Result<(), IngestError> {
        let internal = |e: &dyn std::fmt::Display| IngestError::Internal(e.to_string());
        let record = self
            .store
            .get(id)
            .map_err(|e| internal(&e))?
            .ok_or_else(|| IngestError::Internal(format!("report {id} vanished from the index")))?;
        progress
            .bytes_total
            .store(record.files.iter().map(|f| f.size).sum(), Ordering::Relaxed);
        let staging = self.store.staging_dir(id).map_err(|e| internal(&e))?;
        let mut out = AnalyzeOutput {
            files: Vec::new(),
            gpu_logs: Vec::new(),
            skipped: Vec::new(),
        };
        // NVML logs wait until every snapshot is read: their clocks are lined up with them.
        let mut gpu_logs = Vec::new();
        let mut snapshot_ranges = Vec::new();
        let mut first_error: Option<String> = None;
        for f in &record.files {
            progress.set_stage("importing");
            let path = self.store.upload_path(id, &f.key);
            let p = progress.clone();
            let limits = self.options.source;
            let size = f.size;
            let imported = import_on_thread(
                move || {
                    let file = std::fs::File::open(&path)?;
                    Source::from_reader(
                        Box::new(CountingReader {
                            inner: file,
                            progress: p,
                        }),
                        size,
                        limits,
                    )
                },
                self.options,
            );
            let imported = match imported {
                Ok(i) => i,
                Err(ImportError::NotSupported { format }) => {
                    out.skipped.push(SkippedFile {
                        file: f.name.clone(),
                        reason: format!("{format} is not supported yet"),
                    });
                    continue;
                }
                Err(ImportError::Internal(msg)) => return Err(IngestError::Internal(format!("{}: {msg}", f.name))),
                Err(e) => {
                    first_error.get_or_insert_with(|| format!("{}: {e}", f.name));
                    continue;
                }
            };
            progress.set_stage("analysing");
            let mut tables = match imported.data {
                Imported::Snapshot(t) => t,
                Imported::GpuSamples(t) => {
                    gpu_logs.push((f.name.clone(), imported.format, imported.gzip, t));
                    continue;
                }
            };
            snapshot_ranges.extend(snapshot_time_range(&tables).map_err(|e| internal(&e))?);
            let (summary, analyses) =
                analyze_snapshot(&tables, &f.name, imported.gzip).map_err(|e| internal(&format!("{}: {e}", f.name)))?;
            progress.set_stage("storing");
            let mut frames = Vec::with_capacity(analyses.len());
            for a in analyses {
                // The stored usage series carries its time axis (µs, or entry index).
                let mut usage = a.usage;
                let ev = DeviceEvents::new(&tables, a.summary.device).map_err(|e| internal(&e))?;
                usage
                    .insert_column(0, Column::new("time".into(), ev.time()))
                    .map_err(|e| internal(&e))?;
                frames.push(DeviceFrames {
                    device: a.summary.device,
                    usage,
                    lifetimes: a.lifetimes,
                    fragmentation: a.fragmentation,
                });
            }
            reportdata::write_file(&staging, out.files.len(), &mut tables, &mut frames).map_err(|e| internal(&e))?;
            if out.files.is_empty() {
                if let (Some(dev), Some(d)) = (frames.first(), summary.devices.first()) {
                    charts::write_charts(&staging, &Chart::Device(dev, d)).map_err(|e| internal(&e))?;
                }
            }
            out.files.push(summary);
        }
        for (name, format, gzip, mut t) in gpu_logs {
            let summary = analyze_gpu_log(&mut t, &name, format.name(), gzip, &snapshot_ranges)
                .map_err(|e| internal(&format!("{name}: {e}")))?;
            reportdata::write_gpu_log(&staging, out.gpu_logs.len(), &mut t.samples).map_err(|e| internal(&e))?;
            if out.files.is_empty() && out.gpu_logs.is_empty() {
                if let Some(g) = summary.gpus.first() {
                    charts::write_charts(&staging, &Chart::Gpu(&t.samples, &summary, g)).map_err(|e| internal(&e))?;
                }
            }
            out.gpu_logs.push(summary);
        }
        link_process_gpus(&mut out.gpu_logs);
        if let Some(err) = first_error {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(IngestError::Input(err));
        }
        if out.files.is_empty() && out.gpu_logs.is_empty() {
            let _ = std::fs::remove_dir_all(&staging);
            let reasons: Vec<String> = out
                .skipped
                .iter()
                .map(|s| format!("{}: {}", s.file, s.reason))
                .collect();
            return Err(IngestError::Input(format!(
                "no file could be analysed ({})",
                reasons.join("; ")
            )));
        }
        reportdata::write_summary(&staging, &out).map_err(|e| internal(&e))?;
        self.store.commit_data(id, &staging).map_err(|e| internal(&e))?;
        progress.set_stage("ready");
        Ok(())
    }
}
