//! Typed errors of the analysis library. Messages are written for the person who uploaded the
//! file: they name the problem, and callers prefix the file name.

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("cannot read: {0}")]
    Io(#[from] std::io::Error),
    #[error("the file is empty")]
    Empty,
    /// The message lists every analysed format of the format table.
    #[error(
        "unrecognised format (starts with {head}); expected {}",
        memlens_api::formats_sentence()
    )]
    UnknownFormat { head: String },
    /// Recognised, but nothing in it to analyse (kept aside with this reason).
    #[error("{0}")]
    KeptAside(String),
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

#[cfg(feature = "analysis")]
impl From<polars_core::error::PolarsError> for ImportError {
    fn from(e: polars_core::error::PolarsError) -> Self {
        ImportError::Internal(format!("table construction failed: {e}"))
    }
}

/// Errors from analyses over imported tables.
#[cfg(feature = "analysis")]
#[derive(Debug, thiserror::Error)]
pub enum AnalysisError {
    #[error("analysis failed: {0}")]
    Polars(#[from] polars_core::error::PolarsError),
    #[error("no device {0} in this report")]
    NoDevice(i64),
}

/// Errors from the pickle layer. Offsets are byte positions in the (decompressed) pickle.
#[derive(Debug, thiserror::Error)]
pub enum PickleError {
    #[error(
        "forbidden pickle opcode {name} (0x{op:02x}) at byte {offset}: a memory snapshot never imports or calls code"
    )]
    Forbidden { name: &'static str, op: u8, offset: u64 },
    #[error("unsupported pickle opcode {name} (0x{op:02x}) at byte {offset}")]
    Unsupported { name: &'static str, op: u8, offset: u64 },
    #[error("unsupported pickle protocol {protocol} at byte {offset} (expected 2 to 5)")]
    Protocol { protocol: u8, offset: u64 },
    #[error("not a pickle: first byte is 0x{first:02x}, expected the PROTO opcode 0x80")]
    NotPickle { first: u8 },
    #[error("input ends at byte {offset} inside {what} (file truncated?)")]
    Truncated { offset: u64, what: &'static str },
    #[error("{extra} trailing byte(s) after the STOP opcode at byte {offset}")]
    Trailing { offset: u64, extra: u64 },
    #[error("nesting deeper than {limit} levels at byte {offset}")]
    TooDeep { offset: u64, limit: u32 },
    #[error("length prefix {len} at byte {offset} exceeds the {remaining} bytes the input can still hold")]
    LengthTooLarge { offset: u64, len: u64, remaining: u64 },
    #[error("decoder memory budget of {limit} bytes exceeded at byte {offset}")]
    MemoryBudget { offset: u64, limit: usize },
    #[error("malformed pickle at byte {offset}: {msg}")]
    Malformed { offset: u64, msg: String },
    #[error("{0}")]
    Input(String),
}
