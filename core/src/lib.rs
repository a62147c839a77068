//! memlens-core: everything between an uploaded file and the numbers in a report, with no
//! HTTP. [`pipeline::run`] is the one entry point the CLI, the server and the benches call:
//! [`source`] opens (and un-gzips; [`infra::prefetch`] asks for a file ahead) → [`importers::sniff`] names the format from the format table →
//! [`importers`] (one folder per format; [`infra::fault_ahead`] faults their growing columns' pages in on another thread) fill the canonical [`tables`] (allocator history) and
//! [`samples`] (whole-GPU samples from NVML logs) and [`evidence`] (what an OOM message, a log, a
//! memory summary or an nvidia-smi screen says) → [`analysis`] functions over polars frames →
//! [`report`] assembles the summary the CLI and the server return. [`query`] answers
//! level-of-detail questions over the stored frames.

//!
//! Feature `analysis` (on by default) is everything from the polars frames on. Without it the
//! crate is the format readers alone — [`source`], [`importers`] producing column builders,
//! [`samples`]' and [`tables`]' builder types — which is what `core/fuzz/` builds.

#[cfg(feature = "analysis")]
pub mod analysis;
pub mod error;
pub mod evidence;
pub mod importers;
pub mod infra;
pub mod names;
#[cfg(feature = "analysis")]
pub mod pipeline;
#[cfg(feature = "analysis")]
pub mod plan;
#[cfg(feature = "analysis")]
pub mod query;
#[cfg(feature = "analysis")]
pub mod report;
pub mod samples;
pub mod source;
#[cfg(feature = "analysis")]
pub mod stacks;
#[cfg(feature = "analysis")]
pub mod stored;
pub mod tables;

#[cfg(feature = "analysis")]
pub use error::AnalysisError;
pub use error::ImportError;
