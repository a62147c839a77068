//! memlens-core: everything between an uploaded file and the numbers in a report, with no
//! HTTP. Pipeline: [`source`] opens (and un-gzips) → [`sniff`] names the format →
//! [`importers`] (one folder per format) fill the canonical [`tables`] (allocator history) and
//! [`samples`] (whole-GPU samples from NVML logs) → [`analysis`] functions
//! over polars frames → [`report`] assembles the summary the CLI and the server return.

pub mod analysis;
pub mod error;
pub mod importers;
pub mod report;
pub mod samples;
pub mod sniff;
pub mod source;
pub mod stacks;
pub mod tables;

pub use error::{AnalysisError, ImportError};
