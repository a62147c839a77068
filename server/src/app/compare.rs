//! Comparing two runs on disk: each file through the pipeline (stacks kept), each on its chosen
//! device, into one [`Comparison`] (A − B) — what `memlens diff` prints and `memlens check`
//! holds to its limits.

use memlens_core::pipeline::Pipeline;
use std::path::{Path, PathBuf};

use memlens_api::{Comparison, DeviceSummary, FileSummary};
use memlens_core::analysis::compare::{compare_runs, CompareSide, COMPARE_WIDTH};
use memlens_core::analysis::run::busiest_device;
use memlens_core::pipeline::{Input, KeepFrames};

use super::error::{CommandError, Unusable};

/// Two snapshot files to compare (A − B), each on a device of its own.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct CompareRequest {
    /// Path of snapshot A.
    pub a: PathBuf,
    /// Path of snapshot B (the same path compares two devices of one file).
    pub b: PathBuf,
    /// A's device (default: its busiest).
    pub device_a: Option<i64>,
    /// B's device (default: its busiest).
    pub device_b: Option<i64>,
}

/// [`compare_files`] for a request, with the default category rules.
pub fn compare(req: &CompareRequest) -> Result<Comparison, CommandError> {
    compare_files((&req.a, req.device_a), (&req.b, req.device_b), None)
}

pub fn device_of(f: &FileSummary, wanted: Option<i64>) -> Result<&DeviceSummary, CommandError> {
    match wanted {
        Some(w) => f
            .devices
            .iter()
            .find(|d| d.device == w)
            .ok_or_else(|| CommandError::unusable(&f.file, Unusable::NoDevice(w))),
        None => busiest_device(f).ok_or_else(|| CommandError::unusable(&f.file, Unusable::NoDeviceWithAllocations)),
    }
}

/// The comparison of files `a` and `b` (A − B), each on its chosen device (default: its
/// busiest); the same path twice compares two devices of one file.
pub fn compare_files(
    (a, device_a): (&Path, Option<i64>),
    (b, device_b): (&Path, Option<i64>),
    category_rules: Option<&Path>,
) -> Result<Comparison, CommandError> {
    let rules = memlens_core::analysis::categories::FrameRules::load(category_rules)?;
    let same = a == b;
    let mut inputs = vec![Input::path(a)];
    if !same {
        inputs.push(Input::path(b));
    }
    let mut sink = KeepFrames {
        with_stacks: true,
        ..KeepFrames::default()
    };
    let out = Pipeline::keeping_frames().rules(&rules).run(inputs, &mut sink)?;
    let n = if same { 1 } else { 2 };
    if out.files.len() != n {
        let not = if same { a } else { b };
        return Err(CommandError::unusable(
            not.display().to_string(),
            Unusable::NotASnapshot,
        ));
    }
    let side = |fi: usize, wanted: Option<i64>| -> Result<CompareSide<'_>, CommandError> {
        let f = &out.files[fi];
        let d = device_of(f, wanted)?;
        let frames = sink.files[fi]
            .iter()
            .find(|fr| fr.device == d.device)
            .ok_or_else(|| CommandError::unusable(&f.file, Unusable::NoFrames(d.device)))?;
        Ok(CompareSide {
            label: format!("{} · {}", f.file, memlens_api::device_label(d.device)),
            report: None,
            file: f,
            file_index: fi,
            device: d,
            frames,
            stacks: &sink.stacks[fi],
            rank: None,
        })
    };
    let a = side(0, device_a)?;
    let b = side(n - 1, device_b)?;
    Ok(compare_runs(&a, &b, COMPARE_WIDTH)?)
}
