//! The server API's own payloads: timelines, status, errors, limits, search, what-if answers.

use serde::{Deserialize, Serialize};

use crate::*;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct FrameView {
    /// `file:line:function`.
    pub frame: String,
    /// Interpreter or dispatcher internals, folded by default.
    pub internal: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct ErrorBody {
    pub error: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct Created {
    pub id: String,
    /// The share link.
    pub url: String,
    /// Needed to delete the report; shown once.
    pub delete_token: String,
    /// The job's page (`/j/ID`), when the upload named a job (`?job=`): the same for every
    /// upload of that name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_url: Option<String>,
    /// Edits the job's thresholds; only in the answer to the upload that made the job, once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_owner_token: Option<String>,
}

/// What this server accepts, so that a client can refuse an upload before sending it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct ServerLimits {
    /// The most bytes one upload (all its files together) may have; larger ones get 413.
    pub max_upload_bytes: u64,
    /// Reports expire after this many days; 0 keeps them until deleted.
    pub retention_days: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
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
    /// Windows of a recording taken window by window (0: not one): the report grows as they
    /// arrive, and a page open on it looks again when this changes.
    #[serde(default)]
    pub windows: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct SearchResult {
    pub total: usize,
    pub allocations: Vec<Band>,
}

/// What-if answers: per analysed file and device, the predicted allocated peak.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct WhatIfOutput {
    pub files: Vec<WhatIfFile>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct WhatIfFile {
    pub file: String,
    pub devices: Vec<WhatIfDevice>,
}

/// One device's prediction under a scenario, with the assumptions it rests on.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct CategoryBytes {
    pub category: Category,
    pub bytes: i64,
}

/// A window of a device's timeline by category: per pixel column, each category's bytes at the
/// moment the column's total peaks (stacked, they add up to the allocated line).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct CategorySeries {
    pub category: Category,
    /// One value per pixel column.
    pub bytes: Vec<i64>,
}
