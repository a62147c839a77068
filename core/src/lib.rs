//! memlens-core: everything between an uploaded file and the numbers in a report, with no
//! HTTP. [`pipeline::run`] is the one entry point the CLI, the server and the benches call:
//! [`source`] opens (and un-gzips) → [`importers::sniff`] names the format from the format table →
//! [`importers`] (one folder per format) fill the canonical [`tables`] (allocator history) and
//! [`samples`] (whole-GPU samples from NVML logs) → [`analysis`] functions over polars frames →
//! [`report`] assembles the summary the CLI and the server return. [`query`] answers
//! level-of-detail questions over the stored frames.

pub mod analysis;
pub mod columns;
pub mod error;
pub mod frames;
pub mod importers;
pub mod pipeline;
pub mod query;
pub mod report;
pub mod samples;
pub mod source;
pub mod stacks;
pub mod tables;

pub use error::{AnalysisError, ImportError};
