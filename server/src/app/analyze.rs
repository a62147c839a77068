//! `analyze`: files read as one report (what `memlens analyze --json` prints), and a pasted
//! text (an OOM message, a log, `memory_summary()`) read as a file of its own.

use std::path::{Path, PathBuf};

use memlens_api::AnalyzeOutput;
use memlens_core::pipeline::{run, run_with, Input};

use super::error::CommandError;

/// Files of one run to read as one report.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct AnalyzeRequest {
    /// Paths of the files on this machine.
    #[schemars(length(min = 1))]
    pub paths: Vec<PathBuf>,
}

/// A text as the job left it: the OOM error message, a training log holding it,
/// `torch.cuda.memory_summary()` output or an nvidia-smi screen.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct ExplainTextRequest {
    /// The text as the job left it.
    pub text: String,
}

/// The analysis of `files` as one report (what `--json` prints), with the user's category
/// rules; the error names the file and the problem.
pub fn analyze_files(files: &[PathBuf], category_rules: Option<&Path>) -> Result<AnalyzeOutput, CommandError> {
    let rules = memlens_core::analysis::categories::FrameRules::load(category_rules)?;
    let inputs = files.iter().map(|p| Input::path(p)).collect();
    Ok(run_with(inputs, Default::default(), &rules)?)
}

/// [`analyze_files`] for a request; a request of no file is a usage error.
pub fn analyze(req: &AnalyzeRequest) -> Result<AnalyzeOutput, CommandError> {
    if req.paths.is_empty() {
        return Err(CommandError::Usage("paths: give at least one file"));
    }
    analyze_files(&req.paths, None)
}

/// The pasted text read as a file, reported as "the pasted text" (not the scratch file it was
/// kept in while read).
pub fn explain_text(req: &ExplainTextRequest) -> Result<AnalyzeOutput, CommandError> {
    let dir = tempfile::tempdir().map_err(CommandError::Scratch)?;
    let path = dir.path().join("pasted.txt");
    std::fs::write(&path, req.text.as_bytes()).map_err(CommandError::Scratch)?;
    let mut input = Input::path(&path);
    input.name = "the pasted text".into();
    Ok(run(vec![input], Default::default())?)
}
