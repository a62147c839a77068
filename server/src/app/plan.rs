//! `plan`: a training step's memory before it runs, from a model's `config.json` (a path or a
//! model's folder) or a bundled model's name — told apart here once — optionally calibrated
//! by a measured run's snapshot; or, with `serve`, a serving engine's startup, optionally
//! calibrated by a startup log of the same model — each a file on disk, or a stored report
//! ([`plan_with_report`], what `GET /api/plan` answers).

use memlens_core::pipeline::Pipeline;
use std::path::PathBuf;

use std::sync::Arc;

use memlens_api::{routes, Plan, PlanParams, ServingPlan};
use memlens_core::pipeline::{self, Input, KeepFrames};
use memlens_core::plan::calibrate::{calibrating_run, plan_by_busiest_device, CalibrationNeeds};

use super::error::{CommandError, Unusable};
use super::reports::{ReportError, Reports};
use crate::ids::ReportId;

/// A plan as a request names it: the plan's settings, with the config and the calibrating run as
/// paths on this machine.
#[derive(Debug, schemars::JsonSchema)]
pub struct PlanRequest {
    /// Path of the model's config.json, or of the model's folder holding it (a bundled model's
    /// name where no such path exists).
    pub config_path: Option<String>,
    #[serde(flatten)]
    pub settings: PlanParams,
}

/// A plan's answer: a training step's or, with `serve`, a serving engine's startup.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum PlanAnswer {
    Training(Box<Plan>),
    Serving(Box<ServingPlan>),
}

impl PlanRequest {
    /// The request from JSON whose lists (`train`, `lora_targets`) may also come as arrays (the
    /// settings hold them comma-separated); the error names the setting at fault.
    pub fn from_json(mut args: serde_json::Map<String, serde_json::Value>) -> Result<PlanRequest, CommandError> {
        for key in ["train", "lora_targets"] {
            if let Some(serde_json::Value::Array(items)) = args.get(key) {
                let joined: Option<Vec<&str>> = items.iter().map(serde_json::Value::as_str).collect();
                let joined = joined
                    .ok_or_else(|| CommandError::flag(key, "expected strings"))?
                    .join(",");
                args.insert(key.into(), serde_json::Value::String(joined));
            }
        }
        let config_path = match args.remove("config_path") {
            None => None,
            Some(serde_json::Value::String(path)) => Some(path),
            Some(_) => return Err(CommandError::flag("config_path", "expected a path")),
        };
        // The settings refuse unknown keys (a misspelt setting is not ignored), so they are read
        // on their own, not flattened.
        let settings =
            serde_json::from_value(serde_json::Value::Object(args)).map_err(|e| CommandError::flag("arguments", e))?;
        Ok(PlanRequest { config_path, settings })
    }

    /// The settings with `config_path` resolved: the config's text, or a bundled model's name.
    fn resolved(&self) -> Result<PlanParams, CommandError> {
        let mut q = self.settings.clone();
        if let Some(path) = &self.config_path {
            let (config, model) = config_or_name(path)?;
            q.config = config.or(q.config);
            q.model = model.or(q.model);
        }
        Ok(q)
    }
}

/// The plan a request asks for: a training step's, or with `serve` a serving engine's.
pub fn plan(req: &PlanRequest) -> Result<PlanAnswer, CommandError> {
    let q = req.resolved()?;
    let calibrate = q.calibrate.as_ref().map(PathBuf::from);
    Ok(if q.serve == Some(true) {
        PlanAnswer::Serving(Box::new(make_serving_plan(&q, calibrate.as_ref())?))
    } else {
        PlanAnswer::Training(Box::new(make_plan(&q, calibrate.as_ref())?))
    })
}

/// A model's `config.json`, from its path or from the model's folder (a Hugging Face checkout
/// or `save_pretrained` output) that holds it.
pub fn read_config(path: &std::path::Path) -> Result<String, CommandError> {
    let file = if path.is_dir() {
        path.join("config.json")
    } else {
        path.to_path_buf()
    };
    std::fs::read_to_string(&file).map_err(|error| CommandError::Unreadable { path: file, error })
}

/// What `--model` (or the MCP tool's `config_path`) names: a config.json or a model's folder
/// where that path exists, else a bundled model's name, resolved by the plan itself
/// ([`memlens_core::plan::model_shape`]). Returns the config's text or the name.
pub fn config_or_name(model: &str) -> Result<(Option<String>, Option<String>), CommandError> {
    let path = std::path::Path::new(model);
    if path.exists() {
        return Ok((Some(read_config(path)?), None));
    }
    if memlens_core::plan::presets::find(model).is_none() && looks_like_path(model) {
        // Meant as a path: say it is missing rather than that no model has that name.
        return Err(CommandError::Unreadable {
            path: path.to_path_buf(),
            error: std::io::Error::from(std::io::ErrorKind::NotFound),
        });
    }
    Ok((None, Some(model.to_owned())))
}

/// A `--model` that names a file (`….json`, `./…`, `/…`, `~…`), not a model.
fn looks_like_path(model: &str) -> bool {
    model.ends_with(".json") || model.starts_with(['.', '/', '~']) || model.contains('\\')
}

/// The calibrating run's batch size and sequence length, or what is missing, said once in both
/// spellings (the setting of the API and the MCP tool, the command line's flag).
fn calibrating_batch_and_length(q: &PlanParams) -> Result<(u64, u64), &'static str> {
    calibrating_run(q).map_err(|need| match need {
        CalibrationNeeds::RunBatchSize => {
            "calibrate needs run_batch_size (--run-batch-size): the batch size of the calibrating run"
        }
        CalibrationNeeds::RunSeqLen => {
            "calibrate needs run_seq_len (--run-seq-len, or seq_len): the calibrating run's sequence length"
        }
    })
}

/// The plan, calibrated by the run's snapshot when one is given (its busiest device).
pub fn make_plan(q: &PlanParams, calibrate: Option<&PathBuf>) -> Result<Plan, CommandError> {
    let Some(path) = calibrate else {
        return Ok(memlens_core::plan::plan(q, None)?);
    };
    let (run_batch, run_seq) = calibrating_batch_and_length(q).map_err(CommandError::Usage)?;
    let name = path.display().to_string();
    let rules = memlens_core::analysis::categories::FrameRules::load(None)?;
    let mut sink = KeepFrames::default();
    let out = Pipeline::keeping_frames()
        .rules(&rules)
        .run(vec![Input::path(path)], &mut sink)?;
    let (Some(file), Some(frames)) = (out.files.first(), sink.files.first()) else {
        return Err(CommandError::unusable(name, Unusable::NoHistory));
    };
    match plan_by_busiest_device(q, &name, (run_batch, run_seq), file, frames, &out.gpu_logs)
        .map_err(|e| CommandError::analysis(&name, e))?
    {
        Some(plan) => Ok(plan?),
        None => Err(CommandError::unusable(name, Unusable::NothingToCalibrateBy)),
    }
}

/// The serving plan (`serve`), calibrated by a vLLM or SGLang startup log when one is given
/// (the log's startup as `memlens analyze` reads it).
pub fn make_serving_plan(q: &PlanParams, calibrate: Option<&PathBuf>) -> Result<ServingPlan, CommandError> {
    use memlens_core::plan::serve::{calibrate::LogCalibration, serve_plan};
    let Some(path) = calibrate else {
        return Ok(serve_plan(q, None)?);
    };
    let name = path.display().to_string();
    let rules = memlens_core::analysis::categories::FrameRules::load(None)?;
    let out = pipeline::run_with(vec![Input::path(path)], Default::default(), &rules)?;
    let Some(log) = out.files.into_iter().find_map(|f| f.serving) else {
        return Err(CommandError::unusable(name, Unusable::NoServingStartup));
    };
    Ok(serve_plan(q, Some(&LogCalibration { name, log }))?)
}

/// Why a plan calibrated by a stored report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum StoredPlanError {
    #[error(transparent)]
    Report(#[from] ReportError),
    /// The plan's settings or config (its error names the field at fault).
    #[error(transparent)]
    Plan(#[from] memlens_core::plan::PlanError),
    /// The report holds nothing to calibrate by, or the settings lack the run's (said in full).
    #[error("{0}")]
    Calibration(String),
}

/// The plan `q` asks for, calibrated by the stored report its `calibrate` names (a report link
/// or id): a training step's by the report's worst file's busiest device, or with `serve` a
/// serving engine's by the report's first startup log.
pub async fn plan_with_report(reports: &Arc<Reports>, q: PlanParams) -> Result<PlanAnswer, StoredPlanError> {
    let link = q.calibrate.clone().filter(|c| !c.is_empty());
    let Some(link) = link else {
        return Ok(if q.serve == Some(true) {
            PlanAnswer::Serving(Box::new(memlens_core::plan::serve::serve_plan(&q, None)?))
        } else {
            PlanAnswer::Training(Box::new(memlens_core::plan::plan(&q, None)?))
        });
    };
    let id = ReportId::from_link(&link).ok_or(ReportError::NotFound)?;
    let name = routes::fill(routes::REPORT_PAGE, &[&link]);
    if q.serve == Some(true) {
        use memlens_core::plan::serve::{calibrate::LogCalibration, serve_plan};
        let s = reports.summary_of(&id).await?;
        let Some(log) = s.files.iter().find_map(|f| f.serving.clone()) else {
            return Err(StoredPlanError::Calibration(format!(
                "report {link} holds no vLLM or SGLang startup log to calibrate a serving plan by"
            )));
        };
        return Ok(PlanAnswer::Serving(Box::new(serve_plan(
            &q,
            Some(&LogCalibration { name, log }),
        )?)));
    }
    let (run_batch, run_seq) = calibrating_batch_and_length(&q).map_err(|m| StoredPlanError::Calibration(m.into()))?;
    let s = reports.summary_of(&id).await?;
    // The file with the largest allocated peak (a run of ranks: its worst rank).
    let Some((fi, _)) = s
        .files
        .iter()
        .enumerate()
        .max_by_key(|(_, f)| f.devices.iter().map(|d| d.peak_allocated_bytes).max().unwrap_or(0))
    else {
        return Err(StoredPlanError::Calibration(format!(
            "report {link} has no file to calibrate by"
        )));
    };
    let plan = reports
        .with_file(&id, fi, move |f| {
            let frames = f.devices().map_err(|e| ReportError::Internal(e.to_string()))?;
            plan_by_busiest_device(&q, &name, (run_batch, run_seq), &s.files[fi], &frames, &s.gpu_logs)
                .map_err(|e| ReportError::Internal(e.to_string()))
        })
        .await?;
    match plan {
        Some(plan) => Ok(PlanAnswer::Training(Box::new(plan?))),
        None => Err(StoredPlanError::Calibration(format!(
            "report {link} has no allocator history to calibrate by"
        ))),
    }
}
