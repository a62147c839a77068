//! What a command that reads files fails with ([`CommandError`]): each error names the file or
//! the flag at fault; the command prints it on one line and exits 2.

use std::path::PathBuf;

use memlens_core::analysis::categories::FrameRulesError;
use memlens_core::pipeline::PipelineError;

/// Why a command could not answer.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// An input could not be read or analysed (the pipeline's error names it).
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    /// The user's category rules (their error names the file and line).
    #[error(transparent)]
    CategoryRules(#[from] FrameRulesError),
    /// A file the command reads itself.
    #[error("{}: {error}", path.display())]
    Unreadable { path: PathBuf, error: std::io::Error },
    /// An input was read, but holds nothing this command can use.
    #[error("{file}: {problem}")]
    Unusable { file: String, problem: Unusable },
    /// An analysis of a read input failed (a bug or a resource, not the input's fault).
    #[error("{file}: {error}")]
    Analysis {
        file: String,
        error: polars_core::error::PolarsError,
    },
    /// Comparing two analysed runs failed.
    #[error(transparent)]
    Compare(#[from] memlens_core::error::AnalysisError),
    /// The plan's settings or config (its error names the field at fault).
    #[error(transparent)]
    Plan(#[from] memlens_core::plan::PlanError),
    /// A flag's value (`flag` as given, `--set batch_size=x`) is not one the command takes.
    #[error("{flag}: {problem}")]
    Flag { flag: String, problem: String },
    /// Flags that only go together, or a setting the command refuses (said in full).
    #[error("{0}")]
    Usage(&'static str),
    /// A check's limit as text (`5%`, `512MiB`, `activation=10%`).
    #[error(transparent)]
    Threshold(#[from] memlens_core::analysis::check::ThresholdError),
    /// A pasted text could not be kept in a scratch file to be read.
    #[error("the pasted text could not be kept for reading: {0}")]
    Scratch(std::io::Error),
}

/// What an input that was read lacks for the command.
#[derive(Debug, thiserror::Error)]
pub enum Unusable {
    #[error("not an allocator snapshot")]
    NotASnapshot,
    #[error("no device {0}")]
    NoDevice(i64),
    #[error("no device with allocations")]
    NoDeviceWithAllocations,
    #[error("device {0} has no frames")]
    NoFrames(i64),
    #[error("no allocator history to calibrate by")]
    NoHistory,
    #[error("no allocator snapshot with a device")]
    NoSnapshotWithDevice,
    #[error("no device with allocations to calibrate by")]
    NothingToCalibrateBy,
    #[error("not a vLLM or SGLang startup log: a serving plan is calibrated by one")]
    NoServingStartup,
}

impl CommandError {
    pub fn unusable(file: impl Into<String>, problem: Unusable) -> CommandError {
        CommandError::Unusable {
            file: file.into(),
            problem,
        }
    }
    pub fn analysis(file: impl Into<String>, error: polars_core::error::PolarsError) -> CommandError {
        CommandError::Analysis {
            file: file.into(),
            error,
        }
    }
    pub fn flag(flag: impl Into<String>, problem: impl std::fmt::Display) -> CommandError {
        CommandError::Flag {
            flag: flag.into(),
            problem: problem.to_string(),
        }
    }
}
