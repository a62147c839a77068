//! A processed report as store objects, and loaded back for queries: `summary.json` plus, per
//! analysed snapshot, the tables its queries read ([`QUERY_TABLES`]: the stacks) and each
//! device's derived frames as Parquet, and per NVML log its samples. The trace and the rest of
//! the canonical tables are what the analyses read at ingest: their answers are the stored
//! frames and the segment map's checkpoints, and the upload they came from is kept. Everything goes through the [`ReportStore`](crate::storage::store::ReportStore)'s
//! blob interface: `write.rs` makes the objects at ingest (`early.rs` holds those encoded
//! while the analyses still run), `read.rs` reads them back, and
//! `loaded_file.rs` holds a stored file's parts for queries, loading each when first asked for.
//!
//! ```text
//! summary.json                 AnalyzeOutput (what GET /api/reports/{id} returns)
//! f<i>/meta.json               SnapshotMeta (source facts, max_split_size, format)
//! f<i>/<table>.parquet         the tables of QUERY_TABLES (frames, stack_frames); reports stored before 2026-12 have every table of TABLE_NAMES (events, …, event_notes)
//! f<i>/d<device>/user_metadata.parquet  alloc_idx, user_metadata (what the script set)
//! f<i>/d<device>/usage.parquet        time, allocated (reports stored before 2026-12 also have active, and reserved)
//! f<i>/d<device>/reserved.parquet     entry, reserved: reserved bytes at entry -1 (before the trace) and where they change
//! f<i>/d<device>/lifetimes.parquet
//! f<i>/d<device>/fragmentation.parquet
//! f<i>/d<device>/overview.json        the timeline's first view (whole range, default axis, 1500 wide)
//! f<i>/d<device>/segments/<k>.parquet, segments.json   the segment map's checkpoints and cursors
//! g<j>/samples.parquet        NVML log j's device samples (times already aligned)
//! chart.png, chart.svg         the first device's usage chart (else the first GPU log's)
//! ```

mod early;
mod loaded_file;
mod read;
pub mod stored_segments;
mod write;

pub use early::EarlyObjects;
pub use loaded_file::{LoadedFile, MakeRoom};
pub use read::{load, load_gpu_logs, read_object, read_summary, LoadedReport};
pub(crate) use read::{read_json, read_parquet};
pub use write::{segment_object_bytes, write_charts, write_file, write_gpu_log, write_summary};

use memlens_core::query::Axis;
use polars::prelude::PolarsError;

use crate::storage::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("{key}: {source}")]
    Store { key: String, source: StoreError },
    #[error("{key}: missing from the report's data")]
    Missing { key: String },
    #[error("{key}: {source}")]
    Parquet { key: String, source: PolarsError },
    #[error("{key}: {source}")]
    Json { key: String, source: serde_json::Error },
    #[error("tables: {0}")]
    Polars(#[from] PolarsError),
}

pub const SUMMARY: &str = "summary.json";

/// The canonical tables a stored report's queries read (the stacks: stack ids to frames).
/// The others, the trace above all, are read only by the analyses at ingest, so they are not
/// stored (it was a third of a report's bytes and of its storing stage): a report stored
/// before 2026-12 has them all, and reads them where it has no checkpoints or no
/// `user_metadata` object.
pub const QUERY_TABLES: [&str; 2] = ["frames", "stack_frames"];
pub const CHART_PNG: &str = "chart.png";
pub const CHART_SVG: &str = "chart.svg";

/// A device's first view: its whole range on its default axis at [`OVERVIEW_WIDTH`], as the
/// timeline query answers it (stored so that a page opened on a report whose frames are not
/// loaded draws at once: `timeline?overview=true`).
const OVERVIEW: &str = "overview.json";
pub const OVERVIEW_WIDTH: usize = 1500;

/// The axis a device's timeline opens on: time where the trace has timestamps.
pub fn default_axis(d: &memlens_api::DeviceSummary) -> Axis {
    match d.time_axis {
        memlens_api::TimeAxis::TimeUs => Axis::Time,
        memlens_api::TimeAxis::EventOrder => Axis::Event,
    }
}

/// The cursors of a device's stored segment checkpoints (absent in reports stored before them).
const SEGMENT_CHECKPOINTS: &str = "segments.json";

/// Each device's `user_metadata` map, stored beside its frames (alloc entry index, text).
const USER_METADATA: &str = "user_metadata.parquet";
/// A device's reserved bytes, as their changes ([`EntrySteps::frame`]).
const RESERVED: &str = "reserved.parquet";
const RESERVED_COLUMN: &str = "reserved";

#[cfg(test)]
pub(crate) mod tests;
