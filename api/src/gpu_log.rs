//! What the analyses say of an NVML-based log: whole-GPU memory over time, per GPU and per
//! process, as the driver sees it.

use serde::{Deserialize, Serialize};

use crate::*;

/// The summary of one NVML-based log: whole-GPU memory over time, as the driver sees it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
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
    /// What `used` counts, which differs between nvidia-smi and NVML's v1 API
    /// ([`UsedMeaning::note`] says it for people). Read from `used_note` in summaries stored
    /// before it was.
    #[serde(alias = "used_note")]
    pub used_meaning: UsedMeaning,
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct GpuPoint {
    pub time_us: i64,
    pub used_min: i64,
    pub used_max: i64,
}
