//! A processed report as store objects, and loaded back for queries: `summary.json` plus, per
//! analysed snapshot, the tables its queries read ([`QUERY_TABLES`]: the stacks) and each
//! device's derived frames as Parquet, and per NVML log its samples. The trace and the rest of
//! the canonical tables are what the analyses read at ingest: their answers are the stored
//! frames and the segment map's checkpoints, and the upload they came from is kept. Everything goes through the [`ReportStore`](crate::storage::store::ReportStore)'s
//! blob interface: `write.rs` makes the objects at ingest (`early.rs` holds those encoded
//! while the analyses still run), `read.rs` reads them back, and
//! `loaded_file.rs` holds a stored file's parts for queries, loading each when first asked for.
//!
//! The layout — every key, and the version each report records — is declared in [`keys`].

mod early;
pub mod keys;
mod loaded_file;
mod read;
pub mod stored_segments;
mod write;

pub use early::EarlyObjects;
pub use keys::{CHART_PNG, CHART_SVG};
pub use loaded_file::{LoadedFile, MakeRoom};
pub use read::{load, load_gpu_logs, read_object, read_summary, LoadedReport};
pub(crate) use read::{read_json, read_parquet};
pub use write::{segment_object_bytes, write_charts, write_file, write_gpu_log, write_summary};

use memlens_core::query::Axis;
use polars_core::prelude::PolarsError;

use crate::storage::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("{key}: {source}")]
    Store { key: String, source: StoreError },
    /// The report was stored in a layout this code does not read (see [`keys::SCHEMA_VERSION`]).
    #[error("stored in layout version {version}, which this server does not read")]
    Unreadable { version: u32 },
    #[error("{key}: missing from the report's data")]
    Missing { key: String },
    #[error("{key}: {source}")]
    Parquet { key: String, source: PolarsError },
    #[error("{key}: {source}")]
    Json { key: String, source: serde_json::Error },
    #[error("tables: {0}")]
    Polars(#[from] PolarsError),
}

/// The canonical tables a stored report's queries read (the stacks: stack ids to frames).
/// The others, the trace above all, are read only by the analyses at ingest, so they are not
/// stored (it was a third of a report's bytes and of its storing stage): a report stored
/// before 2026-12 has them all, and reads them where it has no checkpoints or no
/// `user_metadata` object.
pub const QUERY_TABLES: [&str; 2] = ["frames", "stack_frames"];

/// The width of a device's first view ([`keys::DeviceKeys::overview`]): its whole range on its
/// default axis, as the timeline query answers it (stored so that a page opened on a report
/// whose frames are not loaded draws at once: `timeline?overview=true`).
pub const OVERVIEW_WIDTH: usize = 1500;

/// The axis a device's timeline opens on: time where the trace has timestamps.
pub fn default_axis(d: &memlens_api::DeviceSummary) -> Axis {
    match d.time_axis {
        memlens_api::TimeAxis::TimeUs => Axis::Time,
        memlens_api::TimeAxis::EventOrder => Axis::Event,
    }
}

/// The column of a device's reserved-bytes object ([`EntrySteps::frame`]).
const RESERVED_COLUMN: &str = "reserved";

#[cfg(test)]
pub(crate) mod tests;
