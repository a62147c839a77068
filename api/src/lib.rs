//! Wire types shared by the memlens server, the CLI's `--json` output and the WASM frontend.
//!
//! Invariant: this crate depends on `serde` only, so it compiles for `wasm32-unknown-unknown`
//! and never pulls tokio, polars or anything with system dependencies into the frontend.

use serde::{Deserialize, Serialize};

mod compare;
mod enums;
mod formats;
mod meta;
mod params;
mod stacks;
mod text;

pub use meta::{MetaPatch, ReportMeta};
pub use stacks::{stack_headline, FlameGraph, FlameNode, FreeStall, ModuleGroup, StackGroup};
pub use text::{bytes_label, device_label, HOST_DEVICE};

pub use compare::{
    AlignedTimelines, CategoryDelta, CategorySteady, CompareAxis, ComparedRun, Comparison, RankPeak, RankSource,
    RunOverview, Side, SideRef, StackDelta,
};

pub use enums::{
    ActivationDtype, BlockState, Category, CategoryRule, NoStackReason, OomCause, OptimizerKind, PoolKind, ReportState,
    SampleClock, Stage, TimelineAxis,
};
pub use formats::{analysed_formats_sentence, Format, FormatInfo, FORMATS};
pub use params::{
    ChartParams, CompareParams, DeleteParams, DeviceParams, FileParams, GpuSamplesParams, SearchParams, SegmentsParams,
    TimelineParams, UploadParams, WhatIfParams,
};

/// What `memlens analyze --json` prints: one entry per input file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AnalyzeOutput {
    /// Allocator snapshots, one summary each.
    pub files: Vec<FileSummary>,
    /// NVML-based logs (nvidia-smi CSV, dmon, pynvml JSON lines), one summary each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_logs: Vec<GpuLogSummary>,
    /// Files recognised but not analysed (a format this version cannot import yet).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedFile>,
    /// With several snapshot files: the ranks of one job side by side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunOverview>,
}

/// A file a report kept but could not analyse, and why.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SkippedFile {
    pub file: String,
    pub reason: String,
}

/// The summary of one analysed input file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FileSummary {
    /// The file name as given.
    pub file: String,
    /// The sniffed format, e.g. `pytorch_snapshot`.
    pub format: Format,
    /// Whether the input was gzip-compressed.
    pub gzip: bool,
    /// Facts about the snapshot's shape (PyTorch version era, settings).
    pub source: SourceInfo,
    /// One summary per device that has a trace or segments.
    pub devices: Vec<DeviceSummary>,
    /// The device a report opens on: the one with OOMs (the most), else the one with the
    /// largest leak, else the highest peak.
    #[serde(default)]
    pub focus_device: Option<i64>,
}

/// The summary of one NVML-based log: whole-GPU memory over time, as the driver sees it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GpuLogSummary {
    pub file: String,
    /// `nvidia_smi_csv`, `nvidia_smi_dmon`, `nvidia_smi_pmon` or `nvml_jsonl`.
    pub format: Format,
    pub gzip: bool,
    /// `epoch`, or `local_time` (nvidia-smi writes wall-clock time without a zone).
    pub clock: SampleClock,
    /// Minutes added to the log's local times so they line up with the snapshots of the same
    /// report (0: read as UTC).
    pub clock_offset_minutes: i64,
    /// What `used` counts, which differs between nvidia-smi and NVML's v1 API.
    pub used_note: String,
    /// Lines skipped because the log was cut off mid-line.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_lines: Vec<String>,
    /// What the reader noticed: the column that told GPUs apart when it was not `index`, one
    /// GPU sampled twice at one instant (naming the lines).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    pub gpus: Vec<GpuSeriesSummary>,
    /// Processes the log saw on the GPUs (per-process logs, pynvml process lists).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<ProcessSummary>,
}

/// One process on one GPU, over an NVML log.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProcessSummary {
    pub pid: i64,
    pub name: Option<String>,
    /// The GPU index: from the log, or matched by bus id with a GPU log of the same report.
    pub gpu: Option<i64>,
    pub bus_id: Option<String>,
    pub sample_count: usize,
    pub first_time_us: i64,
    pub last_time_us: i64,
    pub peak_used_bytes: Option<i64>,
    pub peak_time_us: Option<i64>,
}

/// One GPU's samples in an NVML log.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GpuSeriesSummary {
    /// The GPU index the log uses (nvidia-smi order, which can differ from CUDA's).
    pub gpu: i64,
    pub name: Option<String>,
    pub bus_id: Option<String>,
    pub sample_count: usize,
    /// First and last sample (µs since the epoch, after the clock offset).
    pub start_time_us: i64,
    pub end_time_us: i64,
    /// Median time between samples.
    pub median_interval_ms: Option<f64>,
    pub total_bytes: Option<i64>,
    /// Memory the driver and firmware keep for themselves (nvidia-smi `memory.reserved`).
    pub driver_reserved_bytes: Option<i64>,
    pub min_used_bytes: Option<i64>,
    pub peak_used_bytes: Option<i64>,
    /// When `used` first reached its peak.
    pub peak_time_us: Option<i64>,
    pub peak_util_gpu_pct: Option<f64>,
    /// Memory outside PyTorch's allocator at its highest while a snapshot of the same report
    /// ran on this GPU: `used` − PyTorch's reserved at the same instant (the CUDA context,
    /// NCCL, cuBLAS/cuDNN workspaces, other libraries such as CuPy, other processes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub non_pytorch_peak_bytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub non_pytorch_peak_time_us: Option<i64>,
}

/// A GPU's `used` memory over a window, at most about one point per pixel.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GpuSeries {
    pub log: usize,
    pub gpu: i64,
    pub start: i64,
    pub end: i64,
    /// `true` when points are per-pixel aggregates rather than the samples themselves.
    pub aggregated: bool,
    pub points: Vec<GpuPoint>,
}

/// One sample, or the samples of one pixel column (time = the first of them).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GpuPoint {
    pub time_us: i64,
    pub used_min: i64,
    pub used_max: i64,
}

/// What the importer learnt about the producer of the file.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SourceInfo {
    /// `true` when trace entries carry `time_us` (PyTorch ≥ 2.2); otherwise times are event indices.
    pub has_time_us: bool,
    /// `expandable_segments` from `allocator_settings`, when present.
    pub expandable_segments: Option<bool>,
    /// The raw `PYTORCH_CUDA_ALLOC_CONF` string, when present.
    pub alloc_conf: Option<String>,
    /// Number of `external_annotations` entries (`record_function` START/END markers).
    pub annotation_count: usize,
    /// Number of distinct stack traces (frame lists) in the file.
    pub stack_count: usize,
    /// Top-level keys the importer did not know and ignored.
    pub ignored_keys: Vec<String>,
    /// What the producer can and cannot see, for formats other than PyTorch snapshots.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The distributed rank the script wrote into `user_metadata` (`rank=3`), when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
}

/// Per-device headline numbers.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeviceSummary {
    pub device: i64,
    /// `time_us` or `event_order` (PyTorch < 2.2 snapshots have no timestamps).
    pub time_axis: TimeAxis,
    pub event_count: usize,
    /// Number of `alloc` trace entries.
    pub alloc_count: usize,
    /// Peak of requested bytes (PyTorch's `requested_bytes.all.peak`).
    pub peak_allocated_bytes: i64,
    /// When the peak was first reached (µs since the Unix epoch); `None` without timestamps.
    pub peak_time_us: Option<i64>,
    /// Index of the trace entry that reached the peak; `None` when the peak predates the trace.
    pub peak_event_index: Option<usize>,
    /// Peak of reserved bytes (PyTorch's `reserved_bytes.all.peak`).
    pub peak_reserved_bytes: i64,
    /// Requested bytes live before the first trace entry (allocated before recording began).
    pub initial_allocated_bytes: i64,
    pub initial_reserved_bytes: i64,
    pub final_allocated_bytes: i64,
    pub final_reserved_bytes: i64,
    /// Live allocations at the peak, grouped by folded stack, largest first.
    pub peak_stacks: Vec<StackGroup>,
    /// Live allocations at the peak, grouped by the model-code frame that asked, largest first.
    #[serde(default)]
    pub peak_modules: Vec<ModuleGroup>,
    /// Fragmentation at the peak.
    pub fragmentation_at_peak: Option<FragmentationPoint>,
    pub oom_count: usize,
    pub ooms: Vec<OomExplanation>,
    pub leaks: Vec<LeakCandidate>,
    /// Iterations the leak analysis used, and where they came from.
    pub iterations: IterationInfo,
    /// `record_function` ranges of this device, in start order.
    pub phases: Vec<PhaseRange>,
    /// What the memory is made of: every category with allocations, in `Category` order.
    #[serde(default)]
    pub categories: Vec<CategorySummary>,
    /// The trace does not reach back to the start of the run: it frees memory it never saw
    /// allocated (the ring buffer, `max_entries`, dropped its start, or recording began late).
    /// What predates it is counted from the final state.
    #[serde(default)]
    pub trace_truncated: bool,
    /// With a truncated trace: when its history is complete from (its first entry, µs; `None`
    /// without timestamps), and how many of its frees are of memory from before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub complete_from_us: Option<i64>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub frees_before_trace: usize,
    /// The allocator's pools on this device, the default one first.
    #[serde(default)]
    pub pools: Vec<PoolSummary>,
    /// Frees that waited on another stream (`record_stream`) for a millisecond or more, by the
    /// stack that allocated the block, most bytes × wait first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_free_stalls: Vec<FreeStall>,
    /// The most bytes those stalled frees held at once (freed, not yet reusable).
    #[serde(default, skip_serializing_if = "is_zero_bytes")]
    pub pending_free_peak_bytes: i64,
}

fn is_zero_bytes(n: &i64) -> bool {
    *n == 0
}

/// One memory pool of a device.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PoolSummary {
    /// `segment_pool_id`: `[0, 0]` the default pool, `[0, n]` a MemPool, `[n, 0]` a CUDA graph's.
    pub pool_id: [i64; 2],
    pub kind: PoolKind,
    /// The pool's name, when the snapshot says it: `pool=NAME` (or `pool_name`, `mempool`) in
    /// the `user_metadata` of what was allocated in it (`_set_memory_metadata("pool=kv_cache")`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The most the pool reserved at once (segments freed before the end count in the default pool).
    pub peak_reserved_bytes: i64,
    pub final_reserved_bytes: i64,
    pub final_allocated_bytes: i64,
    pub segments_at_end: usize,
    /// A private pool's reserved bytes over the trace, for drawing its envelope: one point per
    /// change, or the most of each of at most [`POOL_SERIES_POINTS`] runs of changes. `x` is on
    /// the device's time axis (µs, or the entry index without timestamps). Empty for the
    /// default pool, which is the device's reserved less the private ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reserved_series: Vec<AxisPoint>,
}

/// How many points a pool's `reserved_series` has at most.
pub const POOL_SERIES_POINTS: usize = 256;

/// A value at one place on a device's time axis.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AxisPoint {
    pub x: i64,
    pub bytes: i64,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One category's share of a device's memory.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CategorySummary {
    pub category: Category,
    /// Requested bytes of this category live at the allocated peak.
    pub bytes_at_peak: i64,
    /// The most requested bytes of this category live at any one time.
    pub max_bytes: i64,
    /// The steady state: this category's most bytes within one training iteration, median over
    /// the iterations (`None` without iterations).
    #[serde(default)]
    pub steady_bytes: Option<i64>,
    /// Allocations placed in this category.
    pub count: usize,
    /// The rules that placed them, with how many allocations and bytes each.
    pub rules: Vec<RuleShare>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RuleShare {
    pub rule: CategoryRule,
    pub count: usize,
    /// Σ requested bytes of those allocations (over the whole run, not at one time).
    pub bytes: i64,
}

/// The x axis of a device's trace.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum TimeAxis {
    TimeUs,
    EventOrder,
}

/// Fragmentation of the cached segments at one instant.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FragmentationPoint {
    pub event_index: usize,
    pub time_us: Option<i64>,
    pub reserved_bytes: i64,
    /// Bytes in blocks handed out (block sizes, after rounding).
    pub active_bytes: i64,
    /// Reserved bytes in free (inactive) blocks.
    pub reserved_free_bytes: i64,
    pub largest_free_block_bytes: i64,
    /// `1 - largest_free / reserved_free`: 0 when all free memory is one block, near 1 when it is shattered.
    pub fragmentation_index: f64,
}

/// Why an allocation failed, in numbers, and what to do about it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OomExplanation {
    pub event_index: usize,
    pub time_us: Option<i64>,
    /// Bytes the failing request asked for (already rounded by the allocator).
    pub requested_bytes: i64,
    /// Bytes CUDA reported free on the device at the failure.
    pub device_free_bytes: Option<i64>,
    pub reserved_bytes: i64,
    pub allocated_bytes: i64,
    /// Reserved bytes sitting in free blocks of cached segments.
    pub reserved_free_bytes: i64,
    pub largest_free_block_bytes: i64,
    /// `fragmentation`, `capacity`, `limit` or `unknown`.
    pub cause: OomCause,
    /// One or more concrete remedies, in plain words.
    pub remedy: String,
    /// What was live at the failure, grouped by stack, largest first.
    pub live_stacks: Vec<StackGroup>,
    /// What was live at the failure, by category (see `DeviceSummary::categories`).
    #[serde(default)]
    pub live_categories: Vec<CategoryBytes>,
    /// The stack of the failing request.
    pub stack: Vec<String>,
}

/// Allocations still live at the end that piled up over iterations.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeakCandidate {
    pub stack_id: Option<u32>,
    /// The folded stack (see [`StackGroup::stack`]).
    pub stack: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_stack_reason: Option<NoStackReason>,
    /// Bytes (requested) live at the end from this stack.
    pub bytes: i64,
    /// Allocations live at the end from this stack.
    pub count: usize,
    /// How many distinct iterations those allocations were made in (without iterations: at how
    /// many separate moments of the run they were made).
    pub iterations_seen: usize,
    /// Average bytes added per iteration (or per moment of growth).
    pub bytes_per_iteration: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct IterationInfo {
    /// `annotations:<name>` when taken from `record_function` ranges, `allocation_pattern` when
    /// taken from the repeating allocation rhythm, `none` when the run shows no iteration.
    pub source: String,
    /// Iterations found (0 with `none`).
    pub count: usize,
    /// With `none`: what leak detection did instead, in plain words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A `record_function` range from `external_annotations`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PhaseRange {
    pub device: i64,
    pub name: String,
    pub start_us: i64,
    /// `None` when the END marker is missing (range still open at dump time).
    pub end_us: Option<i64>,
}

/// The allocator's segments at one instant (`segment_map_at`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SegmentMap {
    pub device: i64,
    /// The state right after this trace entry (`None`: before the first entry).
    pub event_index: Option<usize>,
    pub time_us: Option<i64>,
    /// In address order; with `max_segments`, only the largest segments.
    pub segments: Vec<SegmentView>,
    /// Every segment of the state, listed or not.
    pub segment_count: usize,
    /// Every block of the state (free gaps included), listed or merged.
    pub block_count: usize,
    pub reserved_bytes: i64,
    pub active_bytes: i64,
    /// Bytes lost to rounding: Σ (block size − requested size) over active blocks.
    pub rounding_waste_bytes: i64,
    pub free_bytes: i64,
    pub largest_free_block_bytes: i64,
    pub pending_free_bytes: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SegmentView {
    pub address: i64,
    pub size: i64,
    pub stream: i64,
    pub expandable: bool,
    /// Blocks in address order; `inactive` blocks are free gaps.
    pub blocks: Vec<BlockView>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BlockView {
    pub address: i64,
    pub size: i64,
    /// The request, or for merged blocks `size` less their rounding waste.
    pub requested_bytes: i64,
    /// `active_allocated`, `active_pending_free` or `inactive`; for merged blocks the state
    /// holding most of their bytes.
    pub state: BlockState,
    /// The block's stack; for merged blocks that of their largest active block (0 if none).
    pub stack_id: u32,
    /// How many neighbouring allocator blocks this entry stands for: 1, or more where a map
    /// asked for at a pixel `width` merged blocks smaller than a pixel.
    #[serde(default = "one_block")]
    pub block_count: u32,
}

fn one_block() -> u32 {
    1
}

// ---------------------------------------------------------------------------------------------
// Server API payloads
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Timeline {
    pub device: i64,
    /// `time_us` or `event_order`.
    pub time_axis: TimeAxis,
    pub start: i64,
    pub end: i64,
    /// Bucket `i` covers `[start + i·(end−start)/width, start + (i+1)·(end−start)/width)`.
    pub width: usize,
    pub allocated_min: Vec<i64>,
    pub allocated_max: Vec<i64>,
    pub reserved_min: Vec<i64>,
    pub reserved_max: Vec<i64>,
    /// The largest allocations live in the window, in allocation order.
    pub bands: Vec<Band>,
    /// Allocations live in the window.
    pub allocations_in_window: usize,
    /// Per bucket: bytes held by allocations not drawn as bands (the aggregated band).
    pub rest_max: Vec<i64>,
    /// Data range of the whole device, for zooming out.
    pub full_start: i64,
    pub full_end: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Band {
    pub addr: i64,
    /// Requested bytes.
    pub size: i64,
    /// `None`: allocated before recording began.
    pub t_alloc: Option<i64>,
    /// `None`: still live at the end.
    pub t_free: Option<i64>,
    pub stack_id: u32,
    pub stream: i64,
    /// What the script set with `_set_memory_metadata` when it was allocated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_metadata: Option<String>,
}

/// One stack frame for display.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FrameView {
    /// `file:line:function`.
    pub frame: String,
    /// Interpreter or dispatcher internals, folded by default.
    pub internal: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    pub error: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Created {
    pub id: String,
    /// The share link.
    pub url: String,
    /// Needed to delete the report; shown once.
    pub delete_token: String,
}

/// What this server accepts, so that a client can refuse an upload before sending it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ServerLimits {
    /// The most bytes one upload (all its files together) may have; larger ones get 413.
    pub max_upload_bytes: u64,
    /// Reports expire after this many days; 0 keeps them until deleted.
    pub retention_days: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Status {
    pub id: String,
    /// `queued`, `processing`, `ready` or `failed`.
    pub state: ReportState,
    /// What the pipeline is doing: `queued`, `importing`, `analysing`, `storing`, `ready`.
    pub stage: Stage,
    pub bytes_read: u64,
    pub bytes_total: u64,
    pub files: Vec<String>,
    pub error: Option<String>,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    #[serde(default)]
    pub meta: ReportMeta,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FragmentationSeries {
    pub device: i64,
    pub event_index: Vec<u32>,
    pub time: Vec<i64>,
    pub allocated: Vec<i64>,
    pub reserved: Vec<i64>,
    pub active: Vec<i64>,
    pub free: Vec<i64>,
    pub largest_free: Vec<i64>,
    pub fragmentation_index: Vec<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Peak {
    pub device: i64,
    pub peak_allocated_bytes: i64,
    pub peak_time_us: Option<i64>,
    pub peak_event_index: Option<usize>,
    pub peak_reserved_bytes: i64,
    pub peak_stacks: Vec<StackGroup>,
    pub fragmentation_at_peak: Option<FragmentationPoint>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SearchResult {
    pub total: usize,
    pub allocations: Vec<Band>,
}

/// What-if answers: per analysed file and device, the predicted allocated peak.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WhatIfOutput {
    pub files: Vec<WhatIfFile>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WhatIfFile {
    pub file: String,
    pub devices: Vec<WhatIfDevice>,
}

/// One device's prediction under a scenario, with the assumptions it rests on.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WhatIfDevice {
    pub device: i64,
    /// The run's own allocated peak (requested bytes).
    pub peak_allocated_bytes: i64,
    /// The predicted allocated peak under the scenario.
    pub predicted_peak_allocated_bytes: i64,
    /// What the allocator would reserve for it: the run's reserved ÷ allocated at its peak, or
    /// with `expandable_segments` its active ÷ allocated (block rounding only).
    pub predicted_peak_reserved_bytes: i64,
    /// Each category's predicted bytes at the predicted peak.
    pub predicted_by_category: Vec<CategoryBytes>,
    /// The largest batch whose predicted reserved peak fits `gpu_memory_bytes` with the memory
    /// outside the allocator (when given, with the run's batch size).
    pub max_batch_size: Option<u64>,
    /// What the prediction assumes, in plain words, one line each.
    pub assumptions: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CategoryBytes {
    pub category: Category,
    pub bytes: i64,
}

/// A window of a device's timeline by category: per pixel column, each category's bytes at the
/// moment the column's total peaks (stacked, they add up to the allocated line).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CategoryTimeline {
    pub device: i64,
    pub time_axis: TimeAxis,
    pub start: i64,
    pub end: i64,
    pub width: usize,
    /// Categories with bytes in the window, in `Category` order.
    pub series: Vec<CategorySeries>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CategorySeries {
    pub category: Category,
    /// One value per pixel column.
    pub bytes: Vec<i64>,
}
