//! Comparing two runs, A − B, into one [`Comparison`]: two files on disk, each through the
//! pipeline (stacks kept) on its chosen device — what `memlens diff` prints and `memlens check`
//! holds to its limits — or two sides of stored reports (`id`, `id:file`, `id:file:device`: two
//! runs, two ranks of one run or two devices of one snapshot), of which only the two files named
//! are loaded — what `GET /api/compare` and `GET /api/check` answer.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use memlens_api::{AnalyzeOutput, CheckOutcome, Comparison, DeviceSummary, FileSummary, SideRef, Thresholds};
use memlens_core::analysis::check::{check_run, checked_device, RunDelta};
use memlens_core::analysis::compare::{compare_runs, CompareSide, COMPARE_WIDTH};
use memlens_core::analysis::run::busiest_device;
use memlens_core::pipeline::{DeviceFrames, Input, KeepFrames, Pipeline};
use memlens_core::stacks::StackResolver;

use super::error::{CommandError, Unusable};
use super::reports::{ReportError, Reports};
use crate::ids::ReportId;

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

/// The device `wanted` names in `f`, or its busiest (the one every side defaults to).
fn chosen_device(f: &FileSummary, wanted: Option<i64>) -> Option<&DeviceSummary> {
    match wanted {
        Some(w) => f.devices.iter().find(|d| d.device == w),
        None => busiest_device(f),
    }
}

pub fn device_of(f: &FileSummary, wanted: Option<i64>) -> Result<&DeviceSummary, CommandError> {
    chosen_device(f, wanted).ok_or_else(|| match wanted {
        Some(w) => CommandError::unusable(&f.file, Unusable::NoDevice(w)),
        None => CommandError::unusable(&f.file, Unusable::NoDeviceWithAllocations),
    })
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

/// The file index and device summary a stored side names (default: file 0, its busiest device).
fn stored_device_of<'a>(s: &'a AnalyzeOutput, r: &SideRef) -> Result<(usize, &'a DeviceSummary), ReportError> {
    let fi = r.file.unwrap_or(0);
    let f = s
        .files
        .get(fi)
        .ok_or_else(|| ReportError::Invalid(format!("no file {fi} in report {}", r.report)))?;
    let d = chosen_device(f, r.device).ok_or_else(|| {
        ReportError::Invalid(match r.device {
            Some(w) => format!("no device {w} in file {fi} of report {}", r.report),
            None => format!("file {fi} of report {} has no device", r.report),
        })
    })?;
    Ok((fi, d))
}

/// What a stored side is called: its rank in a run of several, else its file and device.
fn stored_label(s: &AnalyzeOutput, fi: usize, device: i64) -> (String, Option<u32>) {
    let file = &s.files[fi].file;
    match s.run.as_ref().and_then(|r| r.ranks.iter().find(|k| k.file_index == fi)) {
        Some(k) => (format!("rank {} · {file}", k.rank), Some(k.rank)),
        None => (format!("{file} · {}", memlens_api::device_label(device)), None),
    }
}

/// One stored side's data for the comparison.
fn stored_side<'a>(
    s: &'a AnalyzeOutput,
    r: &SideRef,
    fi: usize,
    dev: i64,
    (devices, stacks): (&'a [DeviceFrames], &'a StackResolver),
) -> Result<CompareSide<'a>, ReportError> {
    let missing = |what: &str| ReportError::Internal(format!("{what} of device {dev} missing"));
    let d = s.files[fi]
        .devices
        .iter()
        .find(|d| d.device == dev)
        .ok_or_else(|| missing("the summary"))?;
    let (label, rank) = stored_label(s, fi, dev);
    Ok(CompareSide {
        label,
        report: Some(r.report.clone()),
        file: &s.files[fi],
        file_index: fi,
        device: d,
        frames: devices
            .iter()
            .find(|f| f.device == dev)
            .ok_or_else(|| missing("the frames"))?,
        stacks,
        rank,
    })
}

/// The report a side's id names; an id of any other shape names none.
fn report_of(r: &SideRef) -> Result<ReportId, ReportError> {
    ReportId::from_link(&r.report).ok_or(ReportError::NotFound)
}

/// The comparison of two sides of stored reports, A − B, its timelines `width` buckets wide;
/// only the two files named are loaded.
pub async fn compare_reports(
    reports: &Arc<Reports>,
    ra: SideRef,
    rb: SideRef,
    width: usize,
) -> Result<Comparison, ReportError> {
    let (report_a, report_b) = (report_of(&ra)?, report_of(&rb)?);
    let (sa, sb) = (
        reports.summary_of(&report_a).await?,
        reports.summary_of(&report_b).await?,
    );
    let ((fa, da), (fb, db)) = (stored_device_of(&sa, &ra)?, stored_device_of(&sb, &rb)?);
    let (dev_a, dev_b) = (da.device, db.device);
    let (la, lb) = (
        reports.loaded_file(&report_a, fa).await?,
        reports.loaded_file(&report_b, fb).await?,
    );
    let (la2, lb2) = (la.clone(), lb.clone());
    let c = tokio::task::spawn_blocking(move || {
        let internal = |e: crate::storage::reportdata::DataError| ReportError::Internal(e.to_string());
        let ((devs_a, stacks_a), (devs_b, stacks_b)) = (
            (la2.devices().map_err(internal)?, la2.stacks().map_err(internal)?),
            (lb2.devices().map_err(internal)?, lb2.stacks().map_err(internal)?),
        );
        let a = stored_side(&sa, &ra, fa, dev_a, (&devs_a, &stacks_a))?;
        let b = stored_side(&sb, &rb, fb, dev_b, (&devs_b, &stacks_b))?;
        compare_runs(&a, &b, width).map_err(|e| ReportError::Internal(e.to_string()))
    })
    .await
    .map_err(|e| ReportError::Internal(e.to_string()))?;
    reports.files.reweigh(&report_a, fa, &la);
    reports.files.reweigh(&report_b, fb, &lb);
    c
}

/// A stored side as a check takes it: a report id alone is its worst rank's busiest device.
async fn checked_side(reports: &Arc<Reports>, r: SideRef) -> Result<SideRef, ReportError> {
    if r.file.is_some() {
        return Ok(r);
    }
    let summary = reports.summary_of(&report_of(&r)?).await?;
    let (file, device) = checked_device(&summary)
        .ok_or_else(|| ReportError::Invalid(format!("report {} has no allocator snapshot with a device", r.report)))?;
    Ok(SideRef {
        file: Some(file),
        device: r.device.or(Some(device.device)),
        ..r
    })
}

/// A regression gate over two sides of stored reports (`new` − `baseline`), as `memlens check`
/// answers it.
pub async fn check_reports(
    reports: &Arc<Reports>,
    new: SideRef,
    baseline: SideRef,
    thresholds: &Thresholds,
) -> Result<CheckOutcome, ReportError> {
    let (new, baseline) = (
        checked_side(reports, new).await?,
        checked_side(reports, baseline).await?,
    );
    // Only the aligned timelines depend on the width, and a check reports none of them.
    let c = compare_reports(reports, new, baseline, 1).await?;
    Ok(check_run(RunDelta::from_comparison(&c), thresholds))
}
