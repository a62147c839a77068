//! Assembling a file's summary from the analyses: what `memlens analyze --json` prints and the
//! server stores. Snapshots are summarised per device; NVML logs per GPU, after their clock is
//! lined up with the snapshots of the same report.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, OnceLock};

use memlens_api::{DeviceSummary, FileSummary, FreeStall, GpuLogSummary, TimeAxis};
use polars_core::prelude::*;

use crate::analysis::categories::{
    add_category_columns, autograd_windows, categorize, category_budget, explicit_labels, Evidence, FrameRules,
    Placement,
};
use crate::analysis::fragmentation::{fragmentation_over_time, point};
use crate::analysis::gpu_samples::{
    add_non_pytorch_memory, align_local_clock, shift_clock, summarize_gpu_log, time_range, ReservedSteps,
};
use crate::analysis::leaks::leak_candidates;
use crate::analysis::lifetime_addresses::LifetimeAddresses;
use crate::analysis::lifetimes::{allocation_lifetimes_apart, allocation_lifetimes_with, Addresses};
use crate::analysis::loop_steps::loop_steps;
use crate::analysis::oom::explain_ooms;
use crate::analysis::peak::{live_groups_at, live_modules_at, no_stack_reason_of, NoStackEvidence};
use crate::analysis::phases::{phase_ranges, with_inferred_optimizer_steps};
use crate::analysis::pools::memory_pools;
use crate::analysis::run::metadata_rank;
use crate::analysis::segment_map::checkpoints::{SegmentCheckpoints, CHECKPOINTS};
use crate::analysis::stalls::pending_free_stalls;
use crate::analysis::usage::{peak_allocated_entry, usage_over_time, Usage, UsageSeries};
use crate::analysis::{devices, DeviceEvents};
use crate::error::AnalysisError;
use crate::samples::{GpuSampleTables, SampleClock};
use crate::stacks::StackResolver;
use crate::stored::frames::{hand_segment_objects, stored_usage, HandOver, Storable};
use crate::tables::entry_steps::EntrySteps;
use crate::tables::{Action, SnapshotTables};

/// How many fragmentation samples each device gets.
pub const FRAGMENTATION_SAMPLES: usize = 256;
/// How many stack groups a summary lists at the peak and at each OOM.
pub const TOP_STACKS: usize = 10;

/// Everything the analyses computed for one device: the summary plus the frames the server
/// stores for its queries.
pub struct DeviceAnalysis {
    pub summary: DeviceSummary,
    /// `allocated` after every entry (row `i` is the device's entry `i`; the time axis is the
    /// events' `time_us`, see [`DeviceEvents::time`]), when the run keeps the frames
    /// ([`Keeping::frames`]).
    pub usage: Option<DataFrame>,
    /// What makes the usage series from the events' `action` and `size` (for a run that
    /// keeps the frames but makes the series later, [`Keeping::usage_later`]).
    pub usage_series: UsageSeries,
    /// Reserved bytes after every entry, as their changes.
    pub reserved: EntrySteps,
    /// Without their addresses: a run that keeps no frames reads none, and one that keeps them
    /// has them read from the trace as they are written ([`DeviceAnalysis::lifetime_addresses`]).
    pub lifetimes: DataFrame,
    /// What gives each lifetime its address from the trace, when the run keeps the frames.
    pub lifetime_addresses: Option<LifetimeAddresses>,
    pub fragmentation: DataFrame,
    /// The segment map's checkpoints, when the run keeps them ([`Keeping::checkpoints`]).
    pub segment_checkpoints: Option<SegmentCheckpoints>,
}

/// Where a device's stored objects go as they become final ([`Keeping::ready`]): the device,
/// and the object.
pub type OnReady<'a> = &'a (dyn Fn(i64, Storable<'_>) + Sync);

/// What a run keeps of each device's analyses beyond its summary and frames.
#[derive(Clone, Copy, Default)]
pub struct Keeping<'a> {
    /// The device's frames beyond those every run makes: the whole usage series
    /// ([`DeviceAnalysis::usage`]).
    pub frames: bool,
    /// With `frames`: the whole usage series is left to the caller, made from
    /// [`DeviceAnalysis::usage_series`] once the analyses are over (the pipeline makes it after
    /// the trace has let go of its addresses: it is not held beside them and the lifetimes).
    pub usage_later: bool,
    /// The segment map's checkpoints the fragmentation replay takes (what a stored report
    /// answers segment maps from).
    pub checkpoints: bool,
    /// With `frames`: handed each of the device's stored objects as it becomes final, as
    /// `hand_over` says ([`Storable`]): its usage and lifetimes on the analysis thread, its
    /// segment-map objects on the replay's thread.
    pub ready: Option<OnReady<'a>>,
    pub hand_over: HandOver,
}

/// Runs every analysis for one device.
pub fn analyze_device(
    t: &SnapshotTables,
    device: i64,
    stacks: &StackResolver,
    rules: &FrameRules,
) -> Result<DeviceAnalysis, AnalysisError> {
    analyze_device_keeping(t, device, stacks, rules, Keeping::default())
}

/// [`analyze_device`], keeping what `keeping` asks for.
pub fn analyze_device_keeping(
    t: &SnapshotTables,
    device: i64,
    stacks: &StackResolver,
    rules: &FrameRules,
    keeping: Keeping<'_>,
) -> Result<DeviceAnalysis, AnalysisError> {
    let ev = DeviceEvents::new(t, device)?;
    let count = keeping.checkpoints.then_some(CHECKPOINTS);
    // The fragmentation replay (the longest analysis) runs on a second thread from the start:
    // it finds the peak it samples on its own and needs the usage only at its end. This
    // thread finds the usage, then the rest. The pending-free stalls, which need nothing
    // else, go to whichever thread is free first: the second on the bench file, this one on
    // a long trace whose replay outlasts the rest. A run that keeps the checkpoints is handed
    // their objects on the replay's thread, while this one still runs ([`Keeping::ready`]).
    let usage_slot: OnceLock<Usage> = OnceLock::new();
    let stalls_taken = AtomicBool::new(false);
    let take_stalls = || !stalls_taken.swap(true, Ordering::AcqRel);
    let (ready, usage_ready) = mpsc::channel::<()>();
    let replay_done = AtomicBool::new(false);
    // Set once this thread has nothing left but to wait for the replay's.
    let rest_done = AtomicBool::new(false);
    let (ev, slot, done, rest) = (&ev, &usage_slot, &replay_done, &rest_done);
    std::thread::scope(|scope| {
        let second = scope.spawn(move || {
            let mut exact = ev.indices_of(Action::Oom);
            exact.extend(peak_allocated_entry(ev.action(), ev.size()));
            let usage = || match usage_ready.recv() {
                Ok(()) => Ok(slot.get().expect("set before it is announced")),
                // This thread's usage failed, and says why itself.
                Err(_) => Err(PolarsError::ComputeError("no usage to sample".into())),
            };
            let fragmentation = fragmentation_over_time(t, ev, usage, FRAGMENTATION_SAMPLES, &exact, count);
            let stalls = take_stalls().then(|| pending_free_stalls(ev, stacks));
            let checkpoints = fragmentation.as_ref().ok().and_then(|f| f.checkpoints.as_ref());
            let handing = keeping.hand_over != HandOver::Never;
            if let (Some(ready), Some(checkpoints), true) = (keeping.ready, checkpoints, handing) {
                let others_running = || !rest.load(Ordering::Acquire);
                hand_segment_objects(
                    checkpoints,
                    ev,
                    || keeping.hand_over.now(others_running),
                    |object| ready(ev.device, object),
                );
            }
            done.store(true, Ordering::Release);
            (fragmentation, stalls)
        });
        let usage = usage_over_time(t, ev).map(|u| slot.get_or_init(|| u));
        if usage.is_ok() {
            let _ = ready.send(());
        }
        drop(ready);
        let second = || {
            let mine = take_stalls().then(|| pending_free_stalls(ev, stacks));
            rest.store(true, Ordering::Release);
            match second.join() {
                Ok((frag, theirs)) => frag.map(|f| (f, mine.or(theirs).expect("one thread found the stalls"))),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        };
        // However this thread ends (an analysis's error too), the replay's thread stops
        // filling a wait that is over.
        let _rest_done = SetOnDrop(rest);
        let others_running = || !done.load(Ordering::Acquire);
        let hand_now = || keeping.hand_over.now(others_running);
        let frames = FramesOut {
            keep: keeping.frames,
            usage_now: keeping.frames && !keeping.usage_later,
            ready: keeping.ready.map(|f| (f, &hand_now as &dyn Fn() -> bool)),
        };
        analyze_device_with(t, ev, stacks, rules, usage?, frames, second)
    })
}

/// Sets its flag when dropped.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// What [`analyze_device_with`] makes of a device's frames beyond its analyses' own.
struct FramesOut<'a> {
    /// Whether the frames are kept ([`Keeping::frames`]).
    keep: bool,
    /// Whether the whole usage series is made here (not [`Keeping::usage_later`]).
    usage_now: bool,
    /// Handed the usage and lifetimes once they are final, each when the second says so
    /// ([`Keeping::ready`], [`Keeping::hand_over`]; only when `keep`).
    ready: Option<(OnReady<'a>, &'a dyn Fn() -> bool)>,
}

/// [`analyze_device`] with the usage found; `second` gives the fragmentation replay, found
/// elsewhere, and the pending-free stalls (found here when the replay's thread has not);
/// the usage and lifetimes are handed over ([`FramesOut::ready`]) before waiting for it.
fn analyze_device_with(
    t: &SnapshotTables,
    ev: &DeviceEvents,
    stacks: &StackResolver,
    rules: &FrameRules,
    usage: &Usage,
    frames: FramesOut<'_>,
    second: impl FnOnce() -> PolarsResult<(crate::analysis::fragmentation::Fragmentation, (Vec<FreeStall>, i64))>,
) -> Result<DeviceAnalysis, AnalysisError> {
    let device = ev.device;
    // No analysis reads a lifetime's address: a run that keeps the frames has them read from
    // the trace as they are written, not held beside it through the analyses.
    let (mut lifetimes, lifetime_addresses) = if frames.keep {
        let (lifetimes, addresses) = allocation_lifetimes_apart(t, ev)?;
        (lifetimes, Some(addresses))
    } else {
        (allocation_lifetimes_with(t, ev, Addresses::Left)?, None)
    };
    // Their working maps are freed by now: given back before the analyses below, beside the
    // trace and the lifetimes, grow the heap again (`free_memory`).
    crate::infra::free_memory::trim_heap_after(crate::tables::columns::held_bytes(&lifetimes) as u64);
    let expandable = t.source.expandable_segments == Some(true)
        || t.segments
            .column("is_expandable")?
            .bool()?
            .iter()
            .any(|v| v == Some(true));
    let phases = phase_ranges(t, device)?;
    // The category analysis also reads optimizer steps inferred from frames.
    let structure = with_inferred_optimizer_steps(&phases, ev, stacks);
    // Without timestamps (snapshots of PyTorch before 2.1) entry order is the time axis: no
    // ranges or inferred optimizer steps are read there, but backward passes the stacks show are.
    let backward = crate::analysis::categories::BackwardEvidence::new(ev, stacks);
    let training = crate::analysis::categories::structure(&structure, ev.time(), usage, &backward);
    let steps = loop_steps(&structure, training.as_ref(), ev, usage);
    let (mut leaks, note) = leak_candidates(ev, &lifetimes, steps.as_ref().map(|s| &s.spans[..]), stacks)?;
    let iterations = match &steps {
        Some(steps) => steps.info(ev, usage),
        None => memlens_api::IterationInfo {
            source: "none".to_owned(),
            count: 0,
            note,
            evidence: memlens_api::IterationEvidence::None,
            range_name: None,
            steps: Vec::new(),
        },
    };
    let pytorch = t.format.is_pytorch_snapshot();
    let labels = explicit_labels(&t.event_notes, ev)?;
    let evidence = Evidence { labels: &labels, rules };
    let frees_before_trace = frees_of_earlier_memory(&lifetimes)?;
    let autograd = if ev.has_time {
        autograd_windows(&structure, training.as_ref())
    } else {
        Vec::new()
    };
    let no_stack = NoStackEvidence::new(stacks.any_recorded(), &autograd, &phases, ev.time());
    for l in leaks.iter_mut().filter(|l| l.stack.is_empty()) {
        if let Some(id) = l.stack_id {
            l.no_stack_reason = Some(no_stack_reason_of(&lifetimes, id, &no_stack)?);
        }
    }
    let peak_idx = usage.peak_allocated_idx;
    let Placement {
        placed,
        iteration_ends: ends,
    } = if t.format == memlens_api::Format::JaxDeviceMemoryProfile {
        crate::analysis::jax_anatomy::placement(&lifetimes, stacks, rules)?
    } else {
        categorize(
            ev,
            training.as_ref(),
            &lifetimes,
            &structure,
            stacks,
            pytorch,
            &evidence,
        )?
    };
    // What an OOM's failed step made, placed by where in the step it was made.
    let placed = crate::analysis::failed_step::place_failed_steps(ev, stacks, &phases, &lifetimes, placed)?;
    let categories = category_budget(&lifetimes, &placed, peak_idx, &ends)?;
    let peak_stacks = live_groups_at(&lifetimes, peak_idx, TOP_STACKS, stacks, &no_stack)?;
    let peak_modules = live_modules_at(&lifetimes, peak_idx, TOP_STACKS, stacks)?;
    // What needs nothing of the replay is done before waiting for it (on a long trace, the
    // replay's thread is the last to finish).
    add_category_columns(&mut lifetimes, &placed)?;
    // From here on the columns say what the placements said (2 bytes an allocation, let go
    // before the usage series, the ingest's peak, is made).
    drop(placed);
    let alloc_count = ev.action().iter().filter(|&&a| a == Action::Alloc as u8).count();
    let pools = memory_pools(t, ev)?;
    // The whole usage series is made only for a run that keeps it, and only now: through the
    // analyses above it was not held beside the trace and the lifetimes.
    let usage_frame = frames.usage_now.then(|| usage.frame()).transpose()?;
    if let (Some((ready, now)), true) = (frames.ready, frames.keep) {
        // A run that makes the usage series later has it encoded in the storing stage; one
        // that cannot be made here is made again there, and fails there.
        if let Some(usage) = usage_frame.as_ref().filter(|_| now()) {
            if let Ok(stored) = stored_usage(usage.clone(), ev) {
                ready(device, Storable::Usage(stored));
            }
        }
        if now() {
            ready(
                device,
                Storable::Lifetimes {
                    lifetimes: &lifetimes,
                    addresses: lifetime_addresses.as_ref().map(|a| (a, ev)),
                },
            );
        }
    }
    let kv_cache = crate::analysis::kv_cache::KvCacheReading::read(&lifetimes, stacks, frees_before_trace == 0)?;
    let (mut frag, (stalls, pending_peak)) = second()?;
    let ooms = explain_ooms(
        ev,
        usage,
        &frag,
        &lifetimes,
        stacks,
        expandable,
        &no_stack,
        &phases,
        kv_cache.as_ref(),
    )?;
    let mut summary = DeviceSummary {
        device,
        time_axis: if ev.has_time {
            TimeAxis::TimeUs
        } else {
            TimeAxis::EventOrder
        },
        event_count: ev.len(),
        alloc_count,
        peak_allocated_bytes: usage.peak_allocated,
        peak_time_us: peak_idx.and_then(|i| ev.time_us(i)),
        peak_event_index: peak_idx,
        peak_reserved_bytes: usage.peak_reserved,
        initial_allocated_bytes: usage.initial_allocated,
        initial_reserved_bytes: usage.initial_reserved(),
        final_allocated_bytes: usage.final_allocated,
        final_reserved_bytes: usage.final_reserved(),
        peak_stacks,
        peak_modules,
        fragmentation_at_peak: peak_idx.and_then(|i| frag.at.get(&i).map(|s| point(ev, i, s))),
        oom_count: ooms.len(),
        ooms,
        leaks,
        iterations,
        phases,
        categories,
        trace_truncated: frees_before_trace > 0,
        complete_from_us: (frees_before_trace > 0).then(|| ev.time_us(0)).flatten(),
        frees_before_trace,
        pools,
        pending_free_stalls: stalls,
        pending_free_peak_bytes: pending_peak,
        memory_summary: None,
        kv_cache: kv_cache.map(|k| k.summary(peak_idx)),
        verdict: String::new(),
    };
    summary.verdict = if t.format == memlens_api::Format::JaxDeviceMemoryProfile {
        crate::analysis::jax_anatomy::verdict(&summary)
    } else {
        crate::analysis::verdict::device_verdict(&summary)
    };
    Ok(DeviceAnalysis {
        summary,
        usage: usage_frame,
        usage_series: usage.series(),
        reserved: usage.reserved.clone(),
        lifetimes,
        lifetime_addresses,
        fragmentation: frag.frame,
        segment_checkpoints: frag.checkpoints.take(),
    })
}

/// Frees in the trace of allocations made before its first entry: the sign that the trace
/// starts mid-run.
fn frees_of_earlier_memory(lifetimes: &DataFrame) -> PolarsResult<usize> {
    let alloc = crate::tables::columns::lifetimes::ALLOC_IDX.slice(lifetimes)?;
    let free = crate::tables::columns::lifetimes::FREE_IDX.slice(lifetimes)?;
    Ok(alloc.iter().zip(free).filter(|(&a, &f)| a < 0 && f >= 0).count())
}

/// The device a report opens on: a GPU before pinned host memory; the one with the most OOMs,
/// else the one whose leaks grow most per iteration, else the highest allocated peak (the
/// lowest-numbered among equals).
pub fn focus_device(devices: &[DeviceSummary]) -> Option<i64> {
    let leak = |d: &DeviceSummary| d.leaks.iter().map(|l| l.bytes_per_iteration).sum::<i64>();
    devices
        .iter()
        .max_by_key(|d| {
            (
                // Pinned host memory is never where a report opens while a GPU is there.
                d.device != memlens_api::HOST_DEVICE,
                d.oom_count,
                leak(d),
                d.peak_allocated_bytes,
                std::cmp::Reverse(d.device),
            )
        })
        .map(|d| d.device)
}

/// Analyses every device of a snapshot: the file summary and each device's frames.
pub fn analyze_snapshot(
    t: &SnapshotTables,
    file: &str,
    gzip: bool,
    rules: &FrameRules,
) -> Result<(FileSummary, Vec<DeviceAnalysis>), AnalysisError> {
    analyze_snapshot_with(t, file, gzip, rules, Keeping::default())
}

/// [`analyze_snapshot`], keeping of each device what `keeping` asks for.
pub fn analyze_snapshot_with(
    t: &SnapshotTables,
    file: &str,
    gzip: bool,
    rules: &FrameRules,
    keeping: Keeping<'_>,
) -> Result<(FileSummary, Vec<DeviceAnalysis>), AnalysisError> {
    let stacks = StackResolver::new(&t.frames, &t.stack_frames)?;
    let analyses = devices(t)?
        .into_iter()
        .map(|d| analyze_device_keeping(t, d, &stacks, rules, keeping))
        .collect::<Result<Vec<_>, _>>()?;
    let mut source = t.source.clone();
    source.rank = metadata_rank(&t.event_notes)?;
    let devices: Vec<DeviceSummary> = analyses.iter().map(|a| a.summary.clone()).collect();
    let summary = FileSummary {
        file: file.to_owned(),
        format: t.format,
        gzip,
        source,
        focus_device: focus_device(&devices),
        devices,
        serving: None,
    };
    Ok((summary, analyses))
}

/// The span of a snapshot's timestamps (µs), `None` without `time_us`.
///
/// One pass over the column (the NVML logs of a report are lined up with it, and it is found
/// before every snapshot's analyses, so on their way); a trace without timestamps holds one
/// null scalar there, which is read as that, never materialised as a column.
pub fn snapshot_time_range(t: &SnapshotTables) -> Result<Option<(i64, i64)>, AnalysisError> {
    use crate::tables::columns::events as ev_col;
    if let Ok(after_first) = t.events.column(ev_col::TIME_AFTER_FIRST_US) {
        // Times held as µs after the first: every entry has one.
        let first = crate::tables::columns::first_i64(&t.events, ev_col::FIRST_TIME_US)?;
        let after_first = after_first.u32()?.cont_slice()?;
        let span = after_first.iter().fold(None, |span: Option<(u32, u32)>, &v| {
            Some(span.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))))
        });
        return Ok(first
            .zip(span)
            .map(|(first, (lo, hi))| (first + i64::from(lo), first + i64::from(hi))));
    }
    let column = t.events.column(ev_col::TIME_US.name)?;
    if let Column::Scalar(s) = column {
        return Ok(s.scalar().value().extract::<i64>().map(|v| (v, v)));
    }
    let time = column.i64()?;
    if time.null_count() > 0 {
        return Ok(time.min().zip(time.max()));
    }
    let mut range: Option<(i64, i64)> = None;
    for chunk in time.downcast_iter() {
        let values = chunk.values().as_slice();
        let Some(&first) = values.first() else { continue };
        let (lo, hi) = values
            .iter()
            .fold((first, first), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        range = Some(range.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))));
    }
    Ok(range)
}

/// Lines an NVML log up with the snapshots of the same report and summarises it.
///
/// nvidia-smi writes local time without a zone; such logs are read as UTC and then shifted by
/// the whole time-zone offset that makes them overlap `snapshot_ranges` (see
/// [`align_local_clock`]). Logs with epoch times are left as they are.
pub fn analyze_gpu_log(
    t: &mut GpuSampleTables,
    file: &str,
    format: memlens_api::Format,
    gzip: bool,
    snapshot_ranges: &[(i64, i64)],
    reserved: &[ReservedSteps],
) -> Result<GpuLogSummary, AnalysisError> {
    let offset = match (t.clock, time_range(t)?) {
        (SampleClock::LocalNoZone, Some(range)) => align_local_clock(range, snapshot_ranges),
        _ => 0,
    };
    shift_clock(t, offset)?;
    let mut summary = summarize_gpu_log(t, file, format, gzip, offset)?;
    add_non_pytorch_memory(&mut summary, t, reserved)?;
    Ok(summary)
}
