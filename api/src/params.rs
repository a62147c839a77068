//! Query parameters of the HTTP API, defined once: the server deserialises them, the frontend
//! serialises them into URLs (a `None` field is left out of the query string; a missing one
//! reads as `None`).

use serde::{Deserialize, Serialize};

use crate::TimelineAxis;

/// `?file=&device=`: which snapshot of the report (default 0) and which device (default the first).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct DeviceParams {
    /// Index of the analysed file within the report (default 0).
    pub file: Option<usize>,
    pub device: Option<i64>,
}

/// `?file=`: which snapshot of the report (default 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct FileParams {
    pub file: Option<usize>,
}

/// The level-of-detail timeline of a window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct TimelineParams {
    pub file: Option<usize>,
    pub device: Option<i64>,
    pub start: Option<i64>,
    pub end: Option<i64>,
    /// Pixel buckets (default 1000).
    pub width: Option<usize>,
    /// `time` (default when the trace has timestamps) or `event` (entry order).
    pub axis: Option<TimelineAxis>,
    /// `/timeline` only, for the whole range (no `start`/`end`): `true` lets the server answer
    /// at another width when that answer is ready sooner — the device's first view stored at
    /// ingest, while the report's frames are not loaded. The answer's `width` says which; it
    /// is exact for that width. Ignored by the other queries.
    pub overview: Option<bool>,
}

/// The segment map after an entry or at a time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct SegmentsParams {
    pub file: Option<usize>,
    pub device: Option<i64>,
    /// State right after this trace entry.
    pub event: Option<usize>,
    /// State at this time (µs): after the last entry at or before it.
    pub time: Option<i64>,
    /// Level of detail: only the largest this many segments (by size, then address) are listed;
    /// the totals still cover them all. Default: every segment.
    pub max_segments: Option<usize>,
    /// Level of detail: the pixels the largest listed segment is drawn across. Neighbouring
    /// blocks smaller than one pixel are merged into one entry per pixel (see
    /// `BlockView::block_count`). Default: every block.
    pub width: Option<usize>,
}

/// Allocation search by address or frame text.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct SearchParams {
    pub file: Option<usize>,
    pub device: Option<i64>,
    /// Exact address, decimal or `0x` hex.
    pub addr: Option<String>,
    /// Case-insensitive substring of any frame (`file:line:function`).
    pub stack: Option<String>,
    pub limit: Option<usize>,
}

/// A chart of a snapshot device, or of a GPU of an NVML log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct ChartParams {
    pub file: Option<usize>,
    pub device: Option<i64>,
    /// NVML log: chart that log's GPU instead of a snapshot device.
    pub log: Option<usize>,
    pub gpu: Option<i64>,
}

impl ChartParams {
    /// No parameter given: the report's stored default chart.
    pub fn is_default(&self) -> bool {
        *self == ChartParams::default()
    }
}

/// A GPU's `used` series from an NVML log, over a window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct GpuSamplesParams {
    /// Index into `gpu_logs` (default 0).
    pub log: Option<usize>,
    pub gpu: Option<i64>,
    pub start: Option<i64>,
    pub end: Option<i64>,
    /// Pixel buckets (default 1000).
    pub width: Option<usize>,
}

/// A what-if scenario (`memlens whatif --batch-size N --set key=value …` reads the same keys).
/// Unknown keys are refused: a misspelt setting must not be ignored silently.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams, schemars::JsonSchema))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct WhatIfParams {
    /// Snapshot file of the report (HTTP only; default 0).
    pub file: Option<usize>,
    /// One device (HTTP only; default: every device).
    pub device: Option<i64>,
    /// The batch size the run used (needed to scale by batch size).
    pub run_batch_size: Option<u64>,
    /// The batch size to predict for.
    pub batch_size: Option<u64>,
    /// Activation checkpointing of repeated blocks.
    pub activation_checkpointing: Option<bool>,
    /// Keep activations in this type (assumed fp32 in the run unless `run_activations` says).
    pub activations: Option<crate::ActivationDtype>,
    /// The element type of the run's activations (default fp32).
    pub run_activations: Option<crate::ActivationDtype>,
    /// Swap the optimizer.
    pub optimizer: Option<crate::OptimizerKind>,
    /// DeepSpeed ZeRO stage 1, 2 or 3 (0: none).
    pub zero_stage: Option<u8>,
    /// Data-parallel GPUs the state is sharded over (with `zero_stage`).
    pub gpus: Option<u64>,
    /// Optimizer state offloaded to CPU memory.
    pub optimizer_offload: Option<bool>,
    /// `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`: the cache holds what is active, not
    /// the free-but-split blocks.
    pub expandable_segments: Option<bool>,
    /// A GPU's memory in bytes, for the largest batch that fits.
    pub gpu_memory_bytes: Option<i64>,
}

/// `?a=&b=`: the two sides of a comparison, each `report`, `report:file` or
/// `report:file:device` (see [`crate::SideRef`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct CompareParams {
    pub a: String,
    pub b: String,
    /// Pixel buckets of the aligned timelines (default 600).
    pub width: Option<usize>,
}

/// `GET /api/check`: report `new` held to limits against report `baseline` (each a report id,
/// `id:file` or `id:file:device`; a report id alone is its worst rank's busiest device).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct CheckParams {
    pub new: String,
    pub baseline: String,
    /// How far the allocated peak may grow: `5%` (the default) or bytes (`512MiB`).
    pub max_peak_increase: Option<String>,
    /// How far the reserved peak may grow (unchecked when absent).
    pub max_reserved_increase: Option<String>,
    /// `CATEGORY=LIMIT` pairs separated by commas (`activation=10%,temporary=1GiB`).
    pub max_category_increase: Option<String>,
}

/// Options of an upload.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct UploadParams {
    /// File name of a raw (non-multipart) body.
    pub name: Option<String>,
    /// Expire this report after N days (at most the server's retention, when it has one).
    pub expires_in_days: Option<u64>,
    /// What the report says about itself (see `ReportMeta`); `tags` comma-separated.
    pub title: Option<String>,
    pub notes: Option<String>,
    pub tags: Option<String>,
    pub job: Option<String>,
    pub host: Option<String>,
    /// The job's run id: uploads with the same one (one per rank) make one report, created when
    /// `world_size` of them have arrived (or when none came for a while).
    pub run: Option<String>,
    /// This upload's rank in the run (its files are named by it when they are not already).
    pub rank: Option<u32>,
    pub world_size: Option<u32>,
    /// This upload is window K of a recording taken window by window
    /// (`memlens.torch.record(every_steps=N)`): window 0 makes the report, later ones go to
    /// `POST /api/reports/{id}/windows`, and the windows are analysed as one snapshot.
    pub window: Option<u32>,
}

impl UploadParams {
    /// The metadata the upload sets.
    pub fn meta(&self) -> crate::ReportMeta {
        crate::ReportMeta {
            title: self.title.clone(),
            notes: self.notes.clone(),
            tags: self
                .tags
                .as_deref()
                .map(|t| t.split(',').map(str::to_owned).collect())
                .unwrap_or_default(),
            job: self.job.clone(),
            host: self.host.clone(),
        }
        .bounded()
    }
}

/// The delete token, when not sent as the `X-Delete-Token` header.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct DeleteParams {
    pub token: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_parameters_stay_out_of_the_query_and_read_back_as_unset() {
        let p = TimelineParams {
            device: Some(1),
            width: Some(800),
            axis: Some(TimelineAxis::Event),
            ..TimelineParams::default()
        };
        let q = serde_urlencoded::to_string(p).expect("encode");
        assert_eq!(q, "device=1&width=800&axis=event");
        assert_eq!(serde_urlencoded::from_str::<TimelineParams>(&q).expect("decode"), p);
        assert_eq!(
            serde_urlencoded::to_string(DeviceParams::default()).expect("encode"),
            ""
        );
        assert!(serde_urlencoded::from_str::<TimelineParams>("axis=sideways").is_err());
    }
}
