//! `analyze`: files through the pipeline as one report, with the user's category rules.

use std::path::{Path, PathBuf};

use memlens_api::AnalyzeOutput;
use memlens_core::pipeline::{run_with, Input, NoSink};

use super::error::CommandError;

/// The analysis of `files` as one report (what `--json` prints), with the user's category
/// rules; the error names the file and the problem.
pub fn analyze_files(files: &[PathBuf], category_rules: Option<&Path>) -> Result<AnalyzeOutput, CommandError> {
    let rules = memlens_core::analysis::categories::FrameRules::load(category_rules)?;
    let inputs = files.iter().map(|p| Input::path(p)).collect();
    Ok(run_with(inputs, Default::default(), &rules, &mut NoSink)?)
}
