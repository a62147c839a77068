//! Typed errors of the analysis library. Messages are written for the person who uploaded the
//! file: they name the problem, and callers prefix the file name.

use crate::importers::pytorch_snapshot::pickle::PickleError;

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("cannot read: {0}")]
    Io(#[from] std::io::Error),
    #[error("the file is empty")]
    Empty,
    /// The message lists every analysed format of the format table.
    #[error(
        "unrecognised format (starts with {head}); expected {}",
        memlens_api::analysed_formats_sentence()
    )]
    UnknownFormat { head: String },
    #[error("recognised as {format}, which this version of memlens cannot import yet")]
    NotSupported { format: &'static str },
    #[error("gzip: {0}")]
    Gzip(String),
    #[error("gzip: decompressed data exceeds the limit of {limit} bytes (a compression bomb, or raise the limit)")]
    DecompressedTooLarge { limit: u64 },
    #[error("pickle: {0}")]
    Pickle(#[from] PickleError),
    #[error("line {line}: {message}")]
    Line { line: usize, message: String },
    #[error("{0}")]
    Log(String),
    #[error("Nsight Systems export: {0}")]
    Nsys(String),
    #[error("snapshot: {0}")]
    Snapshot(String),
    #[error("internal error while importing: {0}")]
    Internal(String),
}

impl From<polars::error::PolarsError> for ImportError {
    fn from(e: polars::error::PolarsError) -> Self {
        ImportError::Internal(format!("table construction failed: {e}"))
    }
}

/// Errors from analyses over imported tables.
#[derive(Debug, thiserror::Error)]
pub enum AnalysisError {
    #[error("analysis failed: {0}")]
    Polars(#[from] polars::error::PolarsError),
    #[error("no device {0} in this report")]
    NoDevice(i64),
}
