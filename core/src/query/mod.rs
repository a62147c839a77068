//! Level-of-detail queries over a loaded report: the timeline (per-pixel min/max of allocated
//! and reserved bytes, the largest allocation bands in the window and one aggregated band for
//! the rest), the same window by category ([`category_timeline`]), its flame graph of bytes ×
//! lifetime by stack ([`flame_graph`]), allocation search, and stack frames.
//!
//! A timeline's payload is bounded by `width` and [`MAX_BANDS`]: zooming in until a window
//! holds at most `MAX_BANDS` allocations shows every one of them as its own band. Without an
//! index ([`timeline_on`]) it costs a pass over the window's entries and over every
//! allocation; with the device's [`TimelineIndex`] ([`timeline_with`], what the server asks)
//! about `width` × a few hundred steps plus the allocations live at the window's start, with
//! the same answer.

pub use memlens_api::TimelineAxis as Axis;
mod band_index;
mod categories;
mod category_index;
mod flame;
mod largest;
mod pyramid;
mod row_list;
pub(crate) mod series;
mod step_buckets;
mod timeline_index;

pub use categories::{category_timeline, category_timeline_with};
pub use category_index::CategoryIndex;
pub use flame::{flame_graph, flame_graph_with, MAX_NODES as MAX_FLAME_NODES};
use memlens_api::{Band, FragmentationSeries, FrameView, TimeAxis, Timeline};
use polars_core::prelude::*;
use pyramid::{BucketRuns, Positions, NO_BLOCKS};
use series::on_series;
pub use timeline_index::TimelineIndex;
use timeline_index::{axis_positions, AxisEnds};

use crate::analysis::Streams;
use crate::stacks::StackResolver;
use crate::stored::frames::DeviceFrames;
use crate::tables::columns::{lifetimes as lt_col, usage as usage_col};
use crate::tables::entry_steps::EntrySteps;
use crate::tables::int_slice::IntSlice;
use crate::tables::stack_ids::StackIds;

/// Most allocations drawn as their own band in one response.
pub const MAX_BANDS: usize = 2_000;
/// Widest timeline accepted.
pub const MAX_WIDTH: usize = 8_192;

/// Per-bucket min/max of a step series sampled at `time` (value holds until the next entry);
/// `before` is the value before the first entry.
pub fn bucket_min_max(
    time: IntSlice<'_>,
    values: IntSlice<'_>,
    before: i64,
    start: i64,
    end: i64,
    width: usize,
) -> (Vec<i64>, Vec<i64>) {
    let positions = Positions::Times(time);
    let n = positions.len().min(values.len());
    on_series!(values, |values| {
        if positions.sorted() {
            let runs = BucketRuns::of_sorted(positions, n, start, end, width);
            pyramid::bucket_min_max_sorted(&runs, values, &NO_BLOCKS, before)
        } else {
            pyramid::bucket_min_max_by_entries(positions, values, before, start, end, width)
        }
    })
}

/// [`bucket_min_max`] of a series held as its changes (the value before the first entry is
/// the series' own).
pub fn bucket_min_max_steps(
    time: IntSlice<'_>,
    steps: &EntrySteps,
    start: i64,
    end: i64,
    width: usize,
) -> (Vec<i64>, Vec<i64>) {
    step_buckets::bucket_min_max_of_steps(Positions::Times(time), steps, None, start, end, width)
}

/// The timeline of one device between `start` and `end` (defaults: the whole trace), from
/// `initial_allocated`, the allocated bytes before its first entry (the summary's; reserved
/// bytes carry their own).
pub fn timeline(
    dev: &DeviceFrames,
    has_time: bool,
    initial_allocated: i64,
    start: Option<i64>,
    end: Option<i64>,
    width: usize,
) -> PolarsResult<Timeline> {
    timeline_on(
        dev,
        if has_time { Axis::Time } else { Axis::Event },
        initial_allocated,
        start,
        end,
        width,
    )
}

/// The rows of `lifetimes` a timeline of the whole trace draws as bands: the largest
/// [`MAX_BANDS`] allocations (every allocation overlaps the whole trace), the larger first
/// among equals the earlier row, as every timeline picks them.
pub fn largest_allocations(lifetimes: &DataFrame) -> PolarsResult<Vec<usize>> {
    let mut largest = largest::LargestRows::new(IntSlice::of(lifetimes, lt_col::SIZE)?, MAX_BANDS);
    largest.extend(0..lifetimes.height());
    Ok(largest.into_rows())
}

/// The addresses a timeline's bands show: the lifetimes' columns, or, for lifetimes built
/// apart from them, those kept of the largest allocations while the trace held them
/// ([`crate::analysis::lifetime_addresses::LifetimeAddresses::keep_addresses_of`]).
enum BandAddresses<'a> {
    Held(IntSlice<'a>),
    Kept(&'a crate::analysis::lifetime_addresses::LifetimeAddresses),
}

impl BandAddresses<'_> {
    fn of(dev: &DeviceFrames) -> PolarsResult<BandAddresses<'_>> {
        Ok(match &dev.lifetime_addresses {
            Some(kept) => BandAddresses::Kept(kept),
            None => BandAddresses::Held(crate::tables::columns::addresses(&dev.lifetimes)?),
        })
    }

    fn at(&self, row: usize) -> PolarsResult<i64> {
        match self {
            BandAddresses::Held(addr) => Ok(addr.at(row)),
            BandAddresses::Kept(kept) => kept
                .kept_at(row)
                .ok_or_else(|| polars_err!(ComputeError: "the address of allocation {row} was not kept")),
        }
    }
}

/// A band's alloc and free on the timeline's axis (`None`: outside the trace).
pub type BandEnds = (Option<i64>, Option<i64>);

/// The timeline on a chosen axis, by a pass over every entry and allocation in the window
/// (what [`timeline_with`] answers from its index).
pub fn timeline_on(
    dev: &DeviceFrames,
    axis: Axis,
    initial_allocated: i64,
    start: Option<i64>,
    end: Option<i64>,
    width: usize,
) -> PolarsResult<Timeline> {
    timeline_with(dev, axis, None, initial_allocated, start, end, width)
}

/// The timeline on a chosen axis, answered from `index` where it was built for this device
/// and axis (the same answer, in time that does not grow with the trace).
pub fn timeline_with(
    dev: &DeviceFrames,
    axis: Axis,
    index: Option<&TimelineIndex>,
    initial_allocated: i64,
    start: Option<i64>,
    end: Option<i64>,
    width: usize,
) -> PolarsResult<Timeline> {
    let index = index.filter(|ix| ix.fits(dev, axis));
    let positions = axis_positions(dev, axis)?;
    let has_time = axis == Axis::Time;
    let allocated = usage_col::allocated(&dev.usage)?;
    let (full_start, full_end) = positions.full_range();
    let start = start.unwrap_or(full_start);
    let end = end.unwrap_or(full_end).max(start + 1);
    let width = width.clamp(1, MAX_WIDTH);
    let pyramid_allocated = index.and_then(TimelineIndex::allocated).unwrap_or(&NO_BLOCKS);
    // Whether the positions never decrease: the index knows, else both series ask.
    let sorted = index
        .map(TimelineIndex::positions_sorted)
        .unwrap_or_else(|| positions.sorted());
    let ((allocated_min, allocated_max), (reserved_min, reserved_max)) = if sorted {
        // Each bucket's entries, found once for both series.
        let n = positions.len().min(allocated.len()).min(dev.reserved.len());
        let runs = BucketRuns::of_sorted(positions, n, start, end, width);
        (
            on_series!(allocated, |values| pyramid::bucket_min_max_sorted(
                &runs,
                values,
                pyramid_allocated,
                initial_allocated
            )),
            // The reserved bytes' changes start from their own value before the trace.
            step_buckets::bucket_min_max_of_steps_in(&runs, &dev.reserved),
        )
    } else {
        (
            on_series!(allocated, |values| pyramid::bucket_min_max_by_entries(
                positions,
                values,
                initial_allocated,
                start,
                end,
                width
            )),
            step_buckets::bucket_min_max_of_steps(positions, &dev.reserved, Some(false), start, end, width),
        )
    };

    // Allocations overlapping the window: the largest MAX_BANDS, in alloc order.
    let lt = &dev.lifetimes;
    let size = IntSlice::of(lt, lt_col::SIZE)?;
    let addr = BandAddresses::of(dev)?;
    let stream = Streams::of(lt, lt_col::STREAM.name)?;
    let stack = StackIds::of(lt, lt_col::STACK)?;
    let alloc_idx = lt_col::ALLOC_IDX.slice(lt)?;
    let indexed = match index {
        Some(ix) => AxisEnds::with_index(dev, ix)?,
        None => None,
    };
    let (hits, total, ends): (Vec<usize>, usize, Vec<BandEnds>) = match indexed {
        Some((bands, axis_ends)) => {
            let found = bands.overlapping(&axis_ends, size, start, end, MAX_BANDS);
            let ends = found.largest.iter().map(|&i| axis_ends.band_ends(i)).collect();
            (found.largest, found.total, ends)
        }
        None => {
            let axis_ends = AxisEnds::of(dev, axis)?;
            // The largest MAX_BANDS of the overlapping allocations, kept as they are found:
            // never a list of every one (8 bytes an allocation, 67 MB for a 2 GB snapshot's
            // first view, which every ingest draws), and most passed over with one comparison
            // (putting each of a long trace's allocations through a selection was a visible
            // part of its ingest).
            let mut largest = largest::LargestRows::new(size, MAX_BANDS);
            let mut total = 0usize;
            for i in 0..lt.height() {
                let (a, f) = axis_ends.band_ends(i);
                if a.unwrap_or(i64::MIN) <= end && f.unwrap_or(i64::MAX) >= start {
                    total += 1;
                    largest.offer(i);
                }
            }
            let hits = largest.into_rows();
            let ends = hits.iter().map(|&i| axis_ends.band_ends(i)).collect();
            (hits, total, ends)
        }
    };
    let mut drawn: Vec<(usize, BandEnds)> = hits.into_iter().zip(ends).collect();
    drawn.sort_unstable_by_key(|&(i, (a, _))| (a.unwrap_or(i64::MIN), i));

    // Bytes of the drawn bands per bucket (difference array), to derive the aggregated rest.
    let span = (end - start).max(1) as i128;
    let bucket_of = |t: i64| -> i64 { ((t.clamp(start, end) - start) as i128 * width as i128 / span) as i64 };
    let mut diff = vec![0i64; width + 1];
    let bands: Vec<Band> = drawn
        .into_iter()
        .map(|(i, (a, f))| {
            // Live in every bucket from its alloc's to its free's, both included (an allocation
            // freed inside a bucket still counts towards that bucket's maximum).
            let b0 = bucket_of(a.unwrap_or(start)).clamp(0, width as i64 - 1) as usize;
            let last = f.map_or(width - 1, |f| (bucket_of(f) as usize).min(width - 1)).max(b0);
            diff[b0] += size.at(i);
            diff[last + 1] -= size.at(i);
            Ok(Band {
                addr: addr.at(i)?,
                size: size.at(i),
                t_alloc: a,
                t_free: f,
                stack_id: stack.at(i),
                stream: stream.get(i),
                user_metadata: dev.user_metadata.get(&i64::from(alloc_idx[i])).cloned(),
            })
        })
        .collect::<PolarsResult<_>>()?;
    let mut running = 0i64;
    let rest_max: Vec<i64> = (0..width)
        .map(|b| {
            running += diff[b];
            (allocated_max[b] - running).max(0)
        })
        .collect();
    Ok(Timeline {
        device: dev.device,
        time_axis: if has_time {
            TimeAxis::TimeUs
        } else {
            TimeAxis::EventOrder
        },
        start,
        end,
        width,
        allocated_min,
        allocated_max,
        reserved_min,
        reserved_max,
        bands,
        allocations_in_window: total,
        rest_max,
        full_start,
        full_end,
    })
}

/// The stored fragmentation samples of a device, as sent to the browser.
pub fn fragmentation_series(dev: &DeviceFrames) -> PolarsResult<FragmentationSeries> {
    let df = &dev.fragmentation;
    let i64s = |n: &str| -> PolarsResult<Vec<i64>> { Ok(df.column(n)?.i64()?.into_no_null_iter().collect()) };
    Ok(FragmentationSeries {
        device: dev.device,
        event_index: df.column("event_index")?.u32()?.into_no_null_iter().collect(),
        time: i64s("time")?,
        allocated: i64s("allocated")?,
        reserved: i64s("reserved")?,
        active: i64s("active")?,
        free: i64s("free")?,
        largest_free: i64s("largest_free")?,
        fragmentation_index: df.column("fragmentation_index")?.f64()?.into_no_null_iter().collect(),
    })
}

/// A stack's frames for display, each raw, marked when the folded stack leaves it out.
pub fn stack_frames(stacks: &StackResolver, stack: u32) -> Vec<FrameView> {
    stacks
        .frames_with_folding(stack)
        .into_iter()
        .map(|(frame, internal)| FrameView { frame, internal })
        .collect()
}

/// Allocation search by exact address or by a substring of any frame of the stack.
pub fn search_allocations(
    dev: &DeviceFrames,
    stacks: &StackResolver,
    addr: Option<i64>,
    stack_substring: Option<&str>,
    limit: usize,
) -> PolarsResult<(usize, Vec<Band>)> {
    let lt = &dev.lifetimes;
    let a = crate::tables::columns::addresses(lt)?;
    let size = IntSlice::of(lt, lt_col::SIZE)?;
    let stream = Streams::of(lt, lt_col::STREAM.name)?;
    let stack = StackIds::of(lt, lt_col::STACK)?;
    let ends = AxisEnds::of(dev, Axis::Time)?;
    let alloc_idx = lt_col::ALLOC_IDX.slice(lt)?;
    let needle = stack_substring.map(str::to_lowercase);
    let mut stack_match: std::collections::HashMap<u32, bool> = std::collections::HashMap::new();
    let mut total = 0;
    let mut out = Vec::new();
    for (i, &alloc) in alloc_idx.iter().enumerate() {
        if addr.is_some_and(|x| x != a.at(i)) {
            continue;
        }
        if let Some(n) = &needle {
            let m = *stack_match.entry(stack.at(i)).or_insert_with(|| {
                stacks
                    .frames(stack.at(i))
                    .iter()
                    .any(|f| f.to_lowercase().contains(n.as_str()))
            });
            if !m {
                continue;
            }
        }
        total += 1;
        if out.len() < limit {
            let (t_alloc, t_free) = ends.band_ends(i);
            out.push(Band {
                addr: a.at(i),
                size: size.at(i),
                t_alloc,
                t_free,
                stack_id: stack.at(i),
                stream: stream.get(i),
                user_metadata: dev.user_metadata.get(&i64::from(alloc)).cloned(),
            });
        }
    }
    Ok((total, out))
}

/// A deterministic pseudo-random sequence (xorshift64) for the query tests.
#[cfg(test)]
pub(crate) fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

/// `n` entry times for the query tests: each a step of up to `max_step` after the one before,
/// one in `hold_one_in` the same as it (runs of equal times).
#[cfg(test)]
pub(crate) fn test_times(next: &mut impl FnMut() -> u64, n: usize, hold_one_in: u64, max_step: u64) -> Vec<i64> {
    let mut t = 1_000i64;
    (0..n)
        .map(|_| {
            if !next().is_multiple_of(hold_one_in) {
                t += (next() % max_step) as i64;
            }
            t
        })
        .collect()
}

/// Timeline windows over the times `first..last` for the query tests, as (start, end, width):
/// the whole range at widths 1 and 1500, a wider one at 8192, then `zooms` random zooms from
/// 1e-5 of the range to all of it, at widths up to 3000.
#[cfg(test)]
pub(crate) fn test_windows(
    next: &mut impl FnMut() -> u64,
    first: i64,
    last: i64,
    zooms: usize,
) -> Vec<(i64, i64, usize)> {
    let mut windows = vec![(first, last, 1), (first, last, 1500), (first - 500, last + 500, 8192)];
    for _ in 0..zooms {
        let span = ((last - first) as f64 * 10f64.powf(-5.0 * (next() % 1000) as f64 / 1000.0)) as i64 + 1;
        let start = first + (next() % (last - first) as u64) as i64 - span / 2;
        windows.push((start, start + span, 1 + (next() % 3000) as usize));
    }
    windows
}

/// A window on the times `first..last` as the same share of `positions` (the entry indices,
/// or the times themselves).
#[cfg(test)]
pub(crate) fn test_window_on(positions: Positions<'_>, (start, end): (i64, i64), first: i64, last: i64) -> (i64, i64) {
    match positions {
        Positions::Times(_) => (start, end),
        Positions::EntryIndex(n) => (
            (start - first) * n as i64 / (last - first),
            (end - first) * n as i64 / (last - first),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_carry_values_across_empty_buckets() {
        let time = [10, 20, 30, 90];
        let vals = [5, 7, 3, 1];
        let (mn, mx) = bucket_min_max(time[..].into(), vals[..].into(), 0, 0, 100, 4);
        // buckets [0,25) [25,50) [50,75) [75,100]
        assert_eq!(mx, vec![7, 7, 3, 3]);
        assert_eq!(mn, vec![0, 3, 3, 1]);
    }
}
