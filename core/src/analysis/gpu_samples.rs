//! Analyses of whole-GPU samples from NVML-based logs ([`crate::samples`]): a per-GPU summary
//! (peak `used` and when, totals, sampling interval), level-of-detail series for drawing, and
//! lining up zone-less nvidia-smi times with the snapshots of the same report.

use memlens_api::{GpuLogSummary, GpuPoint, GpuSeriesSummary, ProcessSummary};
use polars_core::prelude::*;

use crate::error::AnalysisError;
use crate::samples::GpuSampleTables;
use crate::tables::entry_steps::EntrySteps;
use crate::tables::int_slice::IntSlice;

/// Time zones are whole quarter hours within ±14 h of UTC.
const ZONE_STEP_MINUTES: i64 = 15;
const MAX_ZONE_MINUTES: i64 = 14 * 60;

/// The shift (minutes) that makes a zone-less log span `log` overlap the snapshot spans
/// `snapshots` (both µs, read as UTC): 0 when they overlap as they are or at no shift at all,
/// otherwise the time-zone offset with the largest overlap (the smallest on a tie).
pub fn align_local_clock(log: (i64, i64), snapshots: &[(i64, i64)]) -> i64 {
    let overlap = |minutes: i64| -> i64 {
        let off = minutes * 60_000_000;
        snapshots
            .iter()
            .map(|&(s, e)| ((log.1 + off).min(e) - (log.0 + off).max(s)).max(0))
            .sum()
    };
    if overlap(0) > 0 {
        return 0;
    }
    let mut best = (0i64, 0i64);
    for k in 1..=MAX_ZONE_MINUTES / ZONE_STEP_MINUTES {
        for minutes in [k * ZONE_STEP_MINUTES, -k * ZONE_STEP_MINUTES] {
            let o = overlap(minutes);
            if o > best.1 {
                best = (minutes, o);
            }
        }
    }
    best.0
}

/// Adds `minutes` to every sample time (GPU and process samples).
pub fn shift_clock(t: &mut GpuSampleTables, minutes: i64) -> PolarsResult<()> {
    if minutes == 0 {
        return Ok(());
    }
    let shifted: Int64Chunked = t
        .samples
        .column("time_us")?
        .i64()?
        .apply_values(|v| v + minutes * 60_000_000);
    t.samples.with_column(shifted.into_column())?;
    for p in &mut t.processes {
        p.time_us += minutes * 60_000_000;
    }
    Ok(())
}

/// First and last sample time over all GPUs and processes.
pub fn time_range(t: &GpuSampleTables) -> PolarsResult<Option<(i64, i64)>> {
    let time = t.samples.column("time_us")?.i64()?;
    let procs = t.processes.iter().map(|p| p.time_us);
    let lo = time.min().into_iter().chain(procs.clone()).min();
    let hi = time.max().into_iter().chain(procs).max();
    Ok(lo.zip(hi))
}

/// Per (process, GPU): how many samples, when, and its peak.
fn summarize_processes(t: &GpuSampleTables) -> Vec<ProcessSummary> {
    let mut out: Vec<ProcessSummary> = Vec::new();
    for p in &t.processes {
        let gpu = p.gpu.map(i64::from);
        let i = match out
            .iter()
            .position(|s| s.pid == p.pid && s.gpu == gpu && s.bus_id == p.bus_id)
        {
            Some(i) => i,
            None => {
                out.push(ProcessSummary {
                    pid: p.pid,
                    name: None,
                    gpu,
                    bus_id: p.bus_id.clone(),
                    sample_count: 0,
                    first_time_us: p.time_us,
                    last_time_us: p.time_us,
                    peak_used_bytes: None,
                    peak_time_us: None,
                });
                out.len() - 1
            }
        };
        let s = &mut out[i];
        s.sample_count += 1;
        s.first_time_us = s.first_time_us.min(p.time_us);
        s.last_time_us = s.last_time_us.max(p.time_us);
        if s.name.is_none() {
            s.name = p.name.clone();
        }
        if let Some(u) = p.used_bytes {
            if s.peak_used_bytes.is_none_or(|peak| u > peak) {
                s.peak_used_bytes = Some(u);
                s.peak_time_us = Some(p.time_us);
            }
        }
    }
    out
}

/// Gives processes known only by bus id the GPU index another log of the report uses for it.
pub fn link_process_gpus(logs: &mut [GpuLogSummary]) {
    let by_bus: Vec<(String, i64)> = logs
        .iter()
        .flat_map(|l| l.gpus.iter())
        .filter_map(|g| Some((g.bus_id.clone()?, g.gpu)))
        .collect();
    for p in logs.iter_mut().flat_map(|l| l.processes.iter_mut()) {
        if p.gpu.is_none() {
            p.gpu = p
                .bus_id
                .as_deref()
                .and_then(|b| by_bus.iter().find(|(bus, _)| bus.eq_ignore_ascii_case(b)))
                .map(|(_, g)| *g);
        }
    }
}

/// The rows of one GPU: (time, used) with missing `used` values dropped, in time order.
fn used_of(samples: &DataFrame, gpu: i64) -> PolarsResult<(Vec<i64>, Vec<i64>)> {
    let g = samples.column("gpu")?.i32()?;
    let time = samples.column("time_us")?.i64()?;
    let used = samples.column("used_bytes")?.i64()?;
    let mut ts = Vec::new();
    let mut us = Vec::new();
    for ((g, t), u) in g.iter().zip(time.iter()).zip(used.iter()) {
        if let (Some(g), Some(t), Some(u)) = (g, t, u) {
            if g as i64 == gpu {
                ts.push(t);
                us.push(u);
            }
        }
    }
    Ok((ts, us))
}

/// Summarises each GPU of a log.
pub fn summarize_gpu_log(
    t: &GpuSampleTables,
    file: &str,
    format: memlens_api::Format,
    gzip: bool,
    clock_offset_minutes: i64,
) -> Result<GpuLogSummary, AnalysisError> {
    let df = &t.samples;
    let g = df.column("gpu")?.i32()?;
    let time = df.column("time_us")?.i64()?;
    let used = df.column("used_bytes")?.i64()?;
    let total = df.column("total_bytes")?.i64()?;
    let reserved = df.column("driver_reserved_bytes")?.i64()?;
    let util = df.column("util_gpu_pct")?.f64()?;
    let mut gpus = Vec::new();
    for info in &t.gpus {
        let rows: Vec<usize> = (0..df.height()).filter(|&i| g.get(i) == Some(info.gpu)).collect();
        let Some((&first, &last)) = rows.first().zip(rows.last()) else {
            continue;
        };
        let times: Vec<i64> = rows.iter().filter_map(|&i| time.get(i)).collect();
        let mut gaps: Vec<i64> = times.windows(2).map(|w| w[1] - w[0]).collect();
        gaps.sort_unstable();
        let median_interval_ms = gaps.get(gaps.len() / 2).map(|&us| us as f64 / 1000.0);
        let mut peak: Option<(i64, i64)> = None;
        for &i in &rows {
            if let (Some(u), Some(t)) = (used.get(i), time.get(i)) {
                if peak.is_none_or(|(p, _)| u > p) {
                    peak = Some((u, t));
                }
            }
        }
        let last_known = |c: &Int64Chunked| rows.iter().rev().find_map(|&i| c.get(i));
        gpus.push(GpuSeriesSummary {
            gpu: info.gpu as i64,
            name: info.name.clone(),
            bus_id: info.bus_id.clone(),
            sample_count: rows.len(),
            start_time_us: time.get(first).unwrap_or(0),
            end_time_us: time.get(last).unwrap_or(0),
            median_interval_ms,
            total_bytes: last_known(total),
            driver_reserved_bytes: last_known(reserved),
            min_used_bytes: rows.iter().filter_map(|&i| used.get(i)).min(),
            peak_used_bytes: peak.map(|p| p.0),
            peak_time_us: peak.map(|p| p.1),
            peak_util_gpu_pct: rows.iter().filter_map(|&i| util.get(i)).reduce(f64::max),
            non_pytorch_peak_bytes: None,
            non_pytorch_peak_time_us: None,
        });
    }
    Ok(GpuLogSummary {
        file: file.to_owned(),
        format,
        gzip,
        clock: t.clock,
        clock_offset_minutes,
        used_meaning: t.used_meaning,
        skipped_lines: t.skipped_lines.clone(),
        notes: t.notes.clone(),
        gpus,
        processes: summarize_processes(t),
    })
}

/// A GPU's `used` memory in `[start, end]`: the samples themselves when there are at most
/// `2 × width` of them, else per-pixel min/max (with the sample just before the window, so a
/// line can be drawn from the left edge). Returns (start, end, aggregated, points).
pub fn gpu_series(
    samples: &DataFrame,
    gpu: i64,
    start: Option<i64>,
    end: Option<i64>,
    width: usize,
) -> PolarsResult<(i64, i64, bool, Vec<GpuPoint>)> {
    let (ts, us) = used_of(samples, gpu)?;
    let start = start.unwrap_or_else(|| ts.first().copied().unwrap_or(0));
    let end = end.unwrap_or_else(|| ts.last().copied().unwrap_or(0)).max(start);
    let lo = ts.partition_point(|&t| t < start).saturating_sub(1);
    let hi = ts.partition_point(|&t| t <= end);
    let hi = (hi + 1).min(ts.len());
    let (ts, us) = (&ts[lo..hi], &us[lo..hi]);
    let width = width.clamp(1, 10_000);
    if ts.len() <= 2 * width {
        let points = ts
            .iter()
            .zip(us)
            .map(|(&time_us, &u)| GpuPoint {
                time_us,
                used_min: u,
                used_max: u,
            })
            .collect();
        return Ok((start, end, false, points));
    }
    let span = (end - start).max(1) as i128;
    let mut points: Vec<GpuPoint> = Vec::with_capacity(width + 2);
    let mut current_bucket = i64::MIN;
    for (&t, &u) in ts.iter().zip(us) {
        let bucket = if t < start {
            -1
        } else if t > end {
            width as i64
        } else {
            ((t - start) as i128 * width as i128 / span) as i64
        };
        match points.last_mut() {
            Some(p) if bucket == current_bucket => {
                p.used_min = p.used_min.min(u);
                p.used_max = p.used_max.max(u);
            }
            _ => {
                current_bucket = bucket;
                points.push(GpuPoint {
                    time_us: t,
                    used_min: u,
                    used_max: u,
                });
            }
        }
    }
    Ok((start, end, true, points))
}

/// PyTorch's reserved bytes on one device over a snapshot's trace, as `(time µs, reserved)` at
/// each change (the value holds until the next).
pub struct ReservedSteps {
    pub device: i64,
    pub steps: Vec<(i64, i64)>,
}

impl ReservedSteps {
    /// The change points of `reserved` (the value after each entry at `time`), from the value
    /// before the first entry.
    pub fn from_entry_steps(device: i64, time: IntSlice, reserved: &EntrySteps) -> ReservedSteps {
        let mut steps = Vec::new();
        if let Some(t0) = time.first() {
            steps.push((t0, reserved.initial()));
            steps.extend(reserved.changes().filter_map(|(i, r)| Some((time.get(i)?, r))));
        }
        if let (Some(t_end), Some(&(_, r))) = (time.last(), steps.last()) {
            steps.push((t_end, r));
        }
        ReservedSteps { device, steps }
    }

    fn span(&self) -> Option<(i64, i64)> {
        Some((self.steps.first()?.0, self.steps.last()?.0))
    }

    fn at(&self, t: i64) -> i64 {
        let i = self.steps.partition_point(|&(s, _)| s <= t);
        self.steps[i.saturating_sub(1)].1
    }
}

/// Memory outside PyTorch on each GPU of a log while a snapshot ran there: its peak of
/// `used − reserved` over the samples inside the snapshot's span (the GPU index taken as the
/// CUDA device's).
pub fn add_non_pytorch_memory(
    summary: &mut GpuLogSummary,
    t: &GpuSampleTables,
    reserved: &[ReservedSteps],
) -> PolarsResult<()> {
    let df = &t.samples;
    let gpu = df.column("gpu")?.i32()?;
    let time = df.column("time_us")?.i64()?;
    let used = df.column("used_bytes")?.i64()?;
    for g in &mut summary.gpus {
        let Some(r) = reserved.iter().find(|r| r.device == g.gpu) else {
            continue;
        };
        let Some((lo, hi)) = r.span() else { continue };
        let mut best: Option<(i64, i64)> = None;
        for i in 0..df.height() {
            let (Some(gi), Some(ti), Some(ui)) = (gpu.get(i), time.get(i), used.get(i)) else {
                continue;
            };
            if i64::from(gi) != g.gpu || ti < lo || ti > hi {
                continue;
            }
            let outside = ui - r.at(ti);
            if best.is_none_or(|(b, _)| outside > b) {
                best = Some((outside, ti));
            }
        }
        if let Some((bytes, at)) = best {
            g.non_pytorch_peak_bytes = Some(bytes.max(0));
            g.non_pytorch_peak_time_us = Some(at);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000_000;

    #[test]
    fn local_clocks_shift_by_whole_zones_only_when_needed() {
        let snap = [(1_000 * MIN, 1_010 * MIN)];
        assert_eq!(align_local_clock((1_000 * MIN, 1_020 * MIN), &snap), 0);
        // The log was written at UTC+5:30: its local times are 330 minutes ahead.
        assert_eq!(align_local_clock((1_330 * MIN, 1_340 * MIN), &snap), -330);
        assert_eq!(align_local_clock((670 * MIN, 680 * MIN), &snap), 330);
        // Nothing overlaps within ±14 h: leave the times alone.
        assert_eq!(align_local_clock((5_000 * MIN, 5_010 * MIN), &snap), 0);
        assert_eq!(align_local_clock((1_330 * MIN, 1_340 * MIN), &[]), 0);
    }
}
