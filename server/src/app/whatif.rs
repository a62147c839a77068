//! `whatif`: a run's predicted allocated peak under a scenario (the keys of
//! [`WhatIfParams`]), each device's with the assumptions it rests on. The scenario is read once
//! from `key=value` settings, whichever transport gave them (`--set`, the MCP tool's `set`).

use memlens_core::pipeline::Pipeline;
use std::path::{Path, PathBuf};

use std::sync::Arc;

use memlens_api::{WhatIfFile, WhatIfOutput, WhatIfParams};
use memlens_core::analysis::whatif::what_if_file;
use memlens_core::pipeline::{Input, KeepFrames};

use super::error::CommandError;
use super::reports::{ReportError, Reports};
use crate::ids::ReportId;

/// A run's snapshot and the changes to predict its peak under.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct WhatIfRequest {
    /// Path of the run's snapshot.
    pub path: PathBuf,
    /// The batch size the run used.
    #[schemars(range(min = 1))]
    pub run_batch_size: Option<u64>,
    /// The changes (the settings of `WhatIfParams`; a value may also come as text, as `--set`
    /// writes it).
    #[serde(default)]
    #[schemars(with = "WhatIfParams")]
    pub set: serde_json::Map<String, serde_json::Value>,
}

impl WhatIfRequest {
    /// The scenario this request names, read as `--set` reads its `key=value` pairs (the error
    /// names the setting at fault as `set.KEY=VALUE`).
    pub fn scenario(&self) -> Result<WhatIfParams, CommandError> {
        let mut pairs: Vec<(String, String)> = self
            .set
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (k.clone(), v)
            })
            .collect();
        if let Some(b) = self.run_batch_size {
            pairs.push(("run_batch_size".into(), b.to_string()));
        }
        scenario_of(&pairs).map_err(|e| match e {
            CommandError::Flag { flag, problem } => CommandError::Flag {
                flag: flag.replace("--set ", "set."),
                problem,
            },
            other => other,
        })
    }
}

/// The prediction a request asks for.
pub fn what_if(req: &WhatIfRequest) -> Result<WhatIfOutput, CommandError> {
    predict(std::slice::from_ref(&req.path), &req.scenario()?, None)
}

/// The scenario `key=value` pairs name (the keys of `WhatIfParams`); the error names the
/// setting at fault.
pub fn scenario_of(pairs: &[(String, String)]) -> Result<WhatIfParams, CommandError> {
    let parse = |pairs: &[(String, String)]| -> Result<WhatIfParams, serde::de::value::Error> {
        let query = serde_urlencoded::to_string(pairs).map_err(serde::de::Error::custom)?;
        serde_urlencoded::from_str(&query)
    };
    parse(pairs).map_err(|e| {
        // Name the setting at fault: the parser's message does not.
        match pairs.iter().find(|p| parse(std::slice::from_ref(*p)).is_err()) {
            Some((k, v)) => CommandError::flag(format!("--set {k}={v}"), e),
            None => CommandError::flag("--set", e),
        }
    })
}

/// The prediction for `files` (a run's snapshots, and NVML logs of it) under scenario `s`.
pub fn predict(
    files: &[PathBuf],
    s: &WhatIfParams,
    category_rules: Option<&Path>,
) -> Result<WhatIfOutput, CommandError> {
    let rules = memlens_core::analysis::categories::FrameRules::load(category_rules)?;
    let mut sink = KeepFrames::default();
    let inputs = files.iter().map(|p| Input::path(p)).collect();
    let out = Pipeline::keeping_frames().rules(&rules).run(inputs, &mut sink)?;
    let mut predicted = Vec::new();
    for (f, frames) in out.files.iter().zip(&sink.files) {
        predicted.push(what_if_file(f, frames, &out.gpu_logs, s).map_err(|e| CommandError::analysis(&f.file, e))?);
    }
    Ok(WhatIfOutput { files: predicted })
}

/// The prediction for file `file` of stored report `id` under scenario `s` (each device, or
/// the one `s.device` names): its frames loaded from the store if the cache does not hold them.
pub async fn what_if_report(
    reports: &Arc<Reports>,
    id: &ReportId,
    file: usize,
    s: WhatIfParams,
) -> Result<WhatIfFile, ReportError> {
    let summary = reports.summary_of(id).await?;
    reports
        .with_file(id, file, move |f| {
            let internal = |e: &dyn std::fmt::Display| ReportError::Internal(e.to_string());
            let frames = f.devices().map_err(|e| internal(&e))?;
            what_if_file(&summary.files[file], &frames, &summary.gpu_logs, &s).map_err(|e| internal(&e))
        })
        .await
}
