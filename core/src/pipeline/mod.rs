//! The one pipeline: a set of inputs in, an [`AnalyzeOutput`] out. The CLI (`memlens analyze`),
//! the server's ingest and the benches all run a [`Pipeline`] (or [`run`], which keeps
//! nothing); nothing else orchestrates imports.
//!
//! Order of work: every input is imported in turn; snapshots are analysed as they come, NVML
//! logs wait until all snapshots are read (their zone-less clocks are lined up with the
//! snapshots' time range), files recognised but holding nothing to analyse are kept aside in
//! `skipped`. The first input that cannot be read stops the run with an error naming it.
//!
//! A [`Pipeline`] is configured once — its import options, frame rules, what it keeps of each
//! file ([`Keep`]) and where each device's stored objects go as soon as they are final
//! ([`ObjectSink`]) — and then only feeds its [`PipelineSink`], which receives the stages as they
//! change and, when the pipeline keeps them, each file's tables and derived per-device frames
//! (the server stores them for its queries). The sink is asked nothing.

mod input;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use memlens_api::{AnalyzeOutput, FileSummary, Format, GpuLogSummary, SkippedFile, Stage};

use crate::analysis::categories::FrameRules;
use crate::analysis::gpu_samples::{link_process_gpus, ReservedSteps};
use crate::analysis::run::run_overview;
use crate::analysis::DeviceEvents;
use crate::error::{AnalysisError, ImportError};
use crate::importers::{ImportOptions, Imported};
use crate::infra::background_drop::drop_in_background;
use crate::report::{analyze_gpu_log, analyze_snapshot_with, snapshot_time_range, Keeping, OnReady};
use crate::samples::GpuSampleTables;
use crate::stacks::StackResolver;
use crate::tables::SnapshotTables;

pub use crate::importers::OpenInput;
use input::{begin_next_import, Next};
pub use input::{Input, PendingImport, GZIP_RATIO};

/// Why a run stopped.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// The input is at fault; the message names the file and the problem.
    #[error("{file}: {error}")]
    Input { file: String, error: ImportError },
    /// No input could be analysed (every one was kept aside, each with why).
    #[error("no file could be analysed ({0})")]
    NothingAnalysed(String),
    /// A bug or a resource failure while importing or analysing (not the input's fault).
    #[error("{file}: {message}")]
    Internal { file: String, message: String },
    /// The sink could not keep what it was given; its own error, so its caller can tell what
    /// failed (a full disk, say) by type.
    #[error("{0}")]
    Sink(#[source] SinkError),
}

/// What a [`PipelineSink`] fails with: its own error type, boxed (core knows no store).
pub type SinkError = Box<dyn std::error::Error + Send + Sync + 'static>;

impl PipelineError {
    /// Whether the uploader should see this message (else it is logged as an internal error).
    pub fn is_input_error(&self) -> bool {
        matches!(self, PipelineError::Input { .. } | PipelineError::NothingAnalysed(_))
    }
}

use crate::stored::frames::{alloc_metadata, hand_segment_objects, stored_usage_with};
pub use crate::stored::frames::{DeviceFrames, HandOver, Storable};

/// What a run hands its sink for each analysed snapshot.
pub struct SnapshotOutput<'a> {
    /// Position among the report's snapshots (`files[index]`).
    pub index: usize,
    pub summary: &'a FileSummary,
    pub tables: &'a mut SnapshotTables,
    pub devices: &'a mut [DeviceFrames],
}

/// What a run hands its sink for each NVML log.
pub struct GpuLogOutput<'a> {
    /// Position among the report's logs (`gpu_logs[index]`).
    pub index: usize,
    pub summary: &'a GpuLogSummary,
    /// Samples with times already lined up with the snapshots.
    pub samples: &'a mut GpuSampleTables,
}

/// Where each device's stored objects go as soon as they are final ([`Storable`],
/// [`Pipeline::objects`]), on the device's analysis threads. The pipeline only hands
/// them over: it asks nothing back.
pub trait ObjectSink: Sync {
    /// Snapshot `index` (as in [`SnapshotOutput::index`]), device `device`: one of its objects.
    fn ready(&self, index: usize, device: i64, object: Storable<'_>);
}

/// What a pipeline keeps of each file, said once ([`Pipeline::keep`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Keep {
    /// Each file's tables and per-device frames, handed to [`PipelineSink::snapshot`] and
    /// [`PipelineSink::gpu_log`] (building per-device frames costs a copy of each time axis).
    pub tables: bool,
    /// Each device's frames carry the segment map's checkpoints (taken on the fragmentation
    /// replay; what a stored report answers segment maps from).
    pub segment_checkpoints: bool,
    /// With [`Pipeline::objects`]: when each device's objects are handed over while its
    /// analyses run.
    pub hand_over: HandOver,
    /// With [`Pipeline::objects`]: a trace holding this many bytes or more
    /// ([`crate::tables::columns::held_bytes`] of its events) lets go of its addresses before
    /// [`PipelineSink::snapshot`], which then reads no trace entry. Before they go, every
    /// device's objects that need them (its lifetimes, its segment-map objects) are handed over
    /// once more; each usage series is made only after
    /// ([`crate::report::Keeping::usage_later`]), so that the series, the addresses and the
    /// lifetimes are never all held at once. A smaller trace is kept whole.
    pub release_addresses_from: Option<u64>,
}

impl Keep {
    /// Each file's tables and per-device frames, nothing more (what-if, compare, benches).
    pub const FRAMES: Keep = Keep {
        tables: true,
        segment_checkpoints: false,
        hand_over: HandOver::Never,
        release_addresses_from: None,
    };
}

/// Receives progress and, when the pipeline [`Keep::tables`], each file's tables. It only
/// receives: what is kept is the [`Pipeline`]'s configuration.
pub trait PipelineSink {
    /// The run moved to `stage` (for the input `file`, when there is one).
    fn stage(&mut self, _stage: Stage, _file: Option<&str>) {}
    fn snapshot(&mut self, _out: SnapshotOutput<'_>) -> Result<(), SinkError> {
        Ok(())
    }
    fn gpu_log(&mut self, _out: GpuLogOutput<'_>) -> Result<(), SinkError> {
        Ok(())
    }
}

/// What a device's stored frames take from the trace, taken before the trace lets go of its
/// addresses ([`Keep::release_addresses_from`]): their columns are shared, not copied.
struct TakenFromTrace {
    /// The stored usage's time axis ([`DeviceEvents::usage_time_columns`]).
    time: Vec<polars_core::prelude::Column>,
    /// What the usage series is made from, when the analyses left it to be made.
    usage_columns: crate::analysis::UsageColumns,
    user_metadata: rustc_hash::FxHashMap<i64, String>,
}

/// A sink that receives nothing but the stages (the CLI).
pub struct NoSink;
impl PipelineSink for NoSink {}

/// A sink that keeps each snapshot's per-device frames, in `files` order (what-if, benches),
/// and with `with_stacks` each file's stack resolver too (compare), from a pipeline that keeps
/// them ([`Pipeline::keeping_frames`]).
#[derive(Default)]
pub struct KeepFrames {
    pub with_stacks: bool,
    pub files: Vec<Vec<DeviceFrames>>,
    pub stacks: Vec<StackResolver>,
}

impl PipelineSink for KeepFrames {
    fn snapshot(&mut self, out: SnapshotOutput<'_>) -> Result<(), SinkError> {
        let t = &*out.tables;
        DeviceFrames::fill_lifetime_addresses(t, out.devices)?;
        self.files.push(out.devices.iter_mut().map(std::mem::take).collect());
        if self.with_stacks {
            self.stacks.push(StackResolver::new(&t.frames, &t.stack_frames)?);
        }
        Ok(())
    }
}

/// The pipeline, configured once: import options, the frame rules of the categories, what it
/// keeps of each file and where each device's stored objects go. [`Pipeline::run`] then only
/// feeds its sink.
#[derive(Clone, Copy, Default)]
pub struct Pipeline<'a> {
    options: ImportOptions,
    rules: Option<&'a FrameRules>,
    keep: Keep,
    objects: Option<&'a dyn ObjectSink>,
}

impl<'a> Pipeline<'a> {
    /// A pipeline that keeps nothing: the summaries alone.
    pub fn new() -> Pipeline<'a> {
        Pipeline::default()
    }

    /// A pipeline that keeps each file's tables and per-device frames ([`Keep::FRAMES`]).
    pub fn keeping_frames() -> Pipeline<'a> {
        Pipeline::new().keep(Keep::FRAMES)
    }

    pub fn options(self, options: ImportOptions) -> Pipeline<'a> {
        Pipeline { options, ..self }
    }

    /// User frame rules for the categories (default: none beyond the built-in ones).
    pub fn rules(self, rules: &'a FrameRules) -> Pipeline<'a> {
        Pipeline {
            rules: Some(rules),
            ..self
        }
    }

    pub fn keep(self, keep: Keep) -> Pipeline<'a> {
        Pipeline { keep, ..self }
    }

    /// Where each device's stored objects go as soon as they are final, before its other
    /// analyses end (only when the pipeline [`Keep::tables`]). They still come in
    /// [`PipelineSink::snapshot`] after.
    pub fn objects(self, objects: &'a dyn ObjectSink) -> Pipeline<'a> {
        Pipeline {
            objects: Some(objects),
            ..self
        }
    }

    /// Runs the pipeline over `inputs`, feeding `sink`.
    pub fn run(&self, inputs: Vec<Input>, sink: &mut dyn PipelineSink) -> Result<AnalyzeOutput, PipelineError> {
        match self.rules {
            Some(rules) => run_pipeline(self, rules, inputs, sink),
            None => run_pipeline(self, &FrameRules::default(), inputs, sink),
        }
    }
}

/// Runs a pipeline that keeps nothing over `inputs`.
pub fn run(inputs: Vec<Input>, options: ImportOptions) -> Result<AnalyzeOutput, PipelineError> {
    Pipeline::new().options(options).run(inputs, &mut NoSink)
}

/// [`run`], with user frame rules for the categories.
pub fn run_with(
    inputs: Vec<Input>,
    options: ImportOptions,
    rules: &FrameRules,
) -> Result<AnalyzeOutput, PipelineError> {
    Pipeline::new().options(options).rules(rules).run(inputs, &mut NoSink)
}

fn run_pipeline(
    pipeline: &Pipeline<'_>,
    rules: &FrameRules,
    inputs: Vec<Input>,
    sink: &mut dyn PipelineSink,
) -> Result<AnalyzeOutput, PipelineError> {
    let options = pipeline.options;
    let keep = pipeline.keep;
    let mut out = AnalyzeOutput::default();
    // NVML logs wait until every snapshot is read: their clocks are lined up with them.
    let mut logs: Vec<WaitingLog> = Vec::new();
    let mut snapshot_ranges = Vec::new();
    let mut reserved_steps: Vec<ReservedSteps> = Vec::new();
    let mut queue: VecDeque<Next> = inputs.into_iter().map(Next::Waiting).collect();
    while let Some(next) = queue.pop_front() {
        sink.stage(Stage::Importing, Some(next.name()));
        let (name, imported) = next.import(options);
        let imported = match imported {
            Ok(i) => {
                begin_next_import(&mut queue, options);
                i
            }
            Err(ImportError::KeptAside(reason)) => {
                out.skipped.push(SkippedFile { file: name, reason });
                continue;
            }
            Err(ImportError::Internal(message)) => return Err(PipelineError::Internal { file: name, message }),
            Err(error) => return Err(PipelineError::Input { file: name, error }),
        };
        let tables = match imported.data {
            Imported::Snapshot(t) => t,
            Imported::GpuSamples(t) => {
                logs.push((name, imported.format, imported.gzip, t));
                continue;
            }
            Imported::Text(evidence) => {
                // No table to store: the summary is the whole file.
                sink.stage(Stage::Analysing, Some(&name));
                out.files.push(crate::analysis::text_evidence::text_file_summary(
                    &evidence,
                    &name,
                    imported.format,
                    imported.gzip,
                ));
                continue;
            }
        };
        // The importer's working buffers are freed by now: on a GB-scale trace about as many
        // bytes as the trace holds, resident until given back (`free_memory`).
        crate::infra::free_memory::trim_heap_after(crate::tables::columns::held_bytes(&tables.events) as u64);
        sink.stage(Stage::Analysing, Some(&name));
        let internal = |e: AnalysisError| PipelineError::Internal {
            file: name.clone(),
            message: e.to_string(),
        };
        snapshot_ranges.extend(snapshot_time_range(&tables).map_err(internal)?);
        // Whether the usage series is made after the trace lets go of its addresses.
        let trace_bytes = crate::tables::columns::held_bytes(&tables.events) as u64;
        let lets_go = keep.tables
            && pipeline.objects.is_some()
            && keep.release_addresses_from.is_some_and(|from| trace_bytes >= from);
        let (summary, analyses) = {
            let index = out.files.len();
            let objects = pipeline.objects.filter(|_| keep.tables);
            let ready = objects.map(|o| move |device: i64, object: Storable<'_>| o.ready(index, device, object));
            let keeping = Keeping {
                frames: keep.tables,
                usage_later: lets_go,
                checkpoints: keep.tables && keep.segment_checkpoints,
                ready: ready.as_ref().map(|f| f as OnReady<'_>),
                hand_over: keep.hand_over,
            };
            analyze_snapshot_with(&tables, &name, imported.gzip, rules, keeping).map_err(internal)?
        };
        // PyTorch's reserved over time, for the memory outside it an NVML log of the run shows.
        for a in &analyses {
            let ev = DeviceEvents::new(&tables, a.summary.device).map_err(|e| internal(e.into()))?;
            if ev.has_time {
                reserved_steps.push(ReservedSteps::from_entry_steps(
                    a.summary.device,
                    ev.time(),
                    &a.reserved,
                ));
            }
        }
        if keep.tables {
            let objects = pipeline.objects.filter(|_| lets_go);
            hand_snapshot_to(sink, objects, out.files.len(), &name, &summary, tables, analyses)?;
        } else {
            // Nothing keeps them: their memory (a GB on a GB-scale trace) is handed back on a
            // thread of its own, not before the next file or the caller's answer. (A sink that
            // keeps tables has them freed here, where its memory accounting expects it.)
            let bytes = crate::tables::columns::held_bytes(&tables.events);
            drop_in_background((tables, analyses), bytes);
        }
        out.files.push(summary);
    }
    analyse_gpu_logs(sink, keep.tables, logs, &snapshot_ranges, &reserved_steps, &mut out)?;
    join_evidence(out)
}

/// A GPU log waiting for every snapshot of the run: its name, format, whether it was gzipped,
/// and its samples.
type WaitingLog = (String, Format, bool, Box<GpuSampleTables>);

/// Each NVML log analysed against the snapshots' time range and reserved steps, handed to a
/// sink that keeps tables, and its summary added to `out`.
fn analyse_gpu_logs(
    sink: &mut dyn PipelineSink,
    keep_tables: bool,
    logs: Vec<WaitingLog>,
    snapshot_ranges: &[(i64, i64)],
    reserved_steps: &[ReservedSteps],
    out: &mut AnalyzeOutput,
) -> Result<(), PipelineError> {
    for (name, format, gzip, mut samples) in logs {
        sink.stage(Stage::Analysing, Some(&name));
        let summary =
            analyze_gpu_log(&mut samples, &name, format, gzip, snapshot_ranges, reserved_steps).map_err(|e| {
                PipelineError::Internal {
                    file: name.clone(),
                    message: e.to_string(),
                }
            })?;
        if keep_tables {
            sink.stage(Stage::Storing, Some(&name));
            sink.gpu_log(GpuLogOutput {
                index: out.gpu_logs.len(),
                summary: &summary,
                samples: &mut samples,
            })
            .map_err(PipelineError::Sink)?;
        }
        out.gpu_logs.push(summary);
    }
    Ok(())
}

/// What the files of one run say together: the processes' GPUs linked, OOM messages joined to
/// their snapshots and JAX profiles, the memory outside PyTorch led with, the run's overview;
/// an error when nothing could be analysed.
fn join_evidence(mut out: AnalyzeOutput) -> Result<AnalyzeOutput, PipelineError> {
    link_process_gpus(&mut out.gpu_logs);
    crate::analysis::text_evidence::join_messages_to_snapshots(&mut out.files);
    crate::analysis::jax_oom::join_profiles_to_messages(&mut out.files);
    crate::analysis::verdict::lead_with_memory_outside(&mut out.files, &out.gpu_logs);
    out.run = run_overview(&out.files);
    if out.files.is_empty() && out.gpu_logs.is_empty() {
        let reasons: Vec<String> = out
            .skipped
            .iter()
            .map(|s| format!("{}: {}", s.file, s.reason))
            .collect();
        return Err(PipelineError::NothingAnalysed(reasons.join("; ")));
    }
    Ok(out)
}

/// Hands snapshot `index`'s tables and each device's frames to `sink` (of a pipeline that
/// keeps tables): what the frames take from the trace is taken while it is whole; with
/// `letting_go` (the trace lets go of its addresses) the objects that need its addresses are
/// handed to it a last time, the trace lets them go, and only then is each usage series made.
fn hand_snapshot_to(
    sink: &mut dyn PipelineSink,
    letting_go: Option<&dyn ObjectSink>,
    index: usize,
    name: &str,
    summary: &FileSummary,
    mut tables: Box<SnapshotTables>,
    mut analyses: Vec<crate::report::DeviceAnalysis>,
) -> Result<(), PipelineError> {
    let internal = |e: AnalysisError| PipelineError::Internal {
        file: name.to_owned(),
        message: e.to_string(),
    };
    sink.stage(Stage::Storing, Some(name));
    // What each device's stored frames take from the trace, taken while it is whole.
    let mut taken = Vec::with_capacity(analyses.len());
    for a in analyses.iter_mut() {
        let device = a.summary.device;
        let ev = DeviceEvents::new(&tables, device).map_err(|e| internal(e.into()))?;
        // The stored first view's bands are the largest allocations: their addresses
        // are kept while the trace holds them.
        if let Some(addresses) = a.lifetime_addresses.as_mut() {
            let rows = crate::query::largest_allocations(&a.lifetimes).map_err(|e| internal(e.into()))?;
            addresses
                .keep_addresses_of(&ev, &a.lifetimes, &rows)
                .map_err(|e| internal(e.into()))?;
        }
        // The last hand-over of what needs the trace's addresses, before they go.
        if let Some(objects) = letting_go {
            if let Some(checkpoints) = a.segment_checkpoints.as_ref() {
                hand_segment_objects(checkpoints, &ev, || true, |o| objects.ready(index, device, o));
            }
            let lifetimes = Storable::Lifetimes {
                lifetimes: &a.lifetimes,
                addresses: a.lifetime_addresses.as_ref().map(|l| (l, &ev)),
            };
            objects.ready(index, device, lifetimes);
        }
        taken.push(TakenFromTrace {
            time: ev.usage_time_columns().map_err(|e| internal(e.into()))?,
            usage_columns: ev.usage_columns(),
            user_metadata: alloc_metadata(&tables, device).map_err(|e| internal(e.into()))?,
        });
    }
    if letting_go.is_some() {
        tables.release_addresses();
    }
    let mut devices = Vec::with_capacity(analyses.len());
    for (a, taken) in analyses.into_iter().zip(taken) {
        let usage = match a.usage {
            Some(usage) => usage,
            None => a
                .usage_series
                .frame(taken.usage_columns.action(), &taken.usage_columns.size())
                .map_err(|e| internal(e.into()))?,
        };
        drop(taken.usage_columns);
        let usage = stored_usage_with(usage, taken.time).map_err(|e| internal(e.into()))?;
        devices.push(DeviceFrames {
            device: a.summary.device,
            usage,
            reserved: a.reserved,
            lifetimes: a.lifetimes,
            lifetime_addresses: a.lifetime_addresses,
            fragmentation: a.fragmentation,
            user_metadata: taken.user_metadata,
            segment_checkpoints: a.segment_checkpoints,
        });
    }
    sink.snapshot(SnapshotOutput {
        index,
        summary,
        tables: &mut tables,
        devices: &mut devices,
    })
    .map_err(PipelineError::Sink)
}

/// Analyses files on disk as one report (what `memlens analyze` prints).
pub fn analyze_paths(paths: &[PathBuf]) -> Result<AnalyzeOutput, PipelineError> {
    run(paths.iter().map(|p| Input::path(p)).collect(), ImportOptions::default())
}

/// Analyses one allocator snapshot (or Nsight export) on disk; an NVML log or a format kept
/// aside is an error naming the file.
pub fn summarize_file(path: &Path) -> Result<FileSummary, PipelineError> {
    let out = analyze_paths(&[path.to_owned()])?;
    out.files.into_iter().next().ok_or_else(|| PipelineError::Input {
        file: path.display().to_string(),
        error: ImportError::Log("an NVML log, not an allocator snapshot".into()),
    })
}
