//! Query parameters of the HTTP API, defined once: the server deserialises them, the frontend
//! serialises them into URLs.

use serde::{Deserialize, Serialize};

use crate::TimelineAxis;

/// `?file=&device=`: which snapshot of the report (default 0) and which device (default the first).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct DeviceParams {
    /// Index of the analysed file within the report (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<i64>,
}

/// `?file=`: which snapshot of the report (default 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct FileParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<usize>,
}

/// The level-of-detail timeline of a window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct TimelineParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<i64>,
    /// Pixel buckets (default 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<usize>,
    /// `time` (default when the trace has timestamps) or `event` (entry order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub axis: Option<TimelineAxis>,
}

/// The segment map after an entry or at a time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct SegmentsParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<i64>,
    /// State right after this trace entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<usize>,
    /// State at this time (µs): after the last entry at or before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<i64>,
}

/// Allocation search by address or frame text.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct SearchParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<i64>,
    /// Exact address, decimal or `0x` hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<String>,
    /// Case-insensitive substring of any frame (`file:line:function`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

/// A chart of a snapshot device, or of a GPU of an NVML log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct ChartParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<i64>,
    /// NVML log: chart that log's GPU instead of a snapshot device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<i64>,
    /// Pixel buckets (default 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<usize>,
}

/// Options of an upload.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct UploadParams {
    /// File name of a raw (non-multipart) body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Expire this report after N days (at most the server's retention, when it has one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in_days: Option<u64>,
}

/// The delete token, when not sent as the `X-Delete-Token` header.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct DeleteParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}
