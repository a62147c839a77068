//! The category view of a device's timeline: per pixel column, the bytes of each category at
//! the moment the column's total peaks (so the stacked values add up to the allocated line).
//! Answered by a scan ([`category_timeline`]) or from the device's indexes
//! ([`category_timeline_with`], what the server asks; see [`super::category_index`]).

use memlens_api::{Category, CategorySeries, CategoryTimeline, TimeAxis, TimelineAxis};
use polars_core::prelude::*;

use super::category_index::{slot_of, CategoryIndex};
use super::pyramid::{BucketRuns, MinMaxPyramid, Positions};
use super::series::on_series;
use super::TimelineIndex;
use crate::analysis::whatif::categories_of;
use crate::stored::frames::DeviceFrames;
use crate::tables::columns::{lifetimes as lt_col, usage as usage_col};
use crate::tables::int_slice::IntSlice;

/// The category timeline of `dev` between `start` and `end` (defaults: the whole trace), by a
/// pass over every allocation and the entries up to the window's end.
pub fn category_timeline(
    dev: &DeviceFrames,
    axis: TimelineAxis,
    start: Option<i64>,
    end: Option<i64>,
    width: usize,
) -> PolarsResult<CategoryTimeline> {
    category_timeline_with(dev, axis, None, start, end, width)
}

/// The category timeline, answered from the device's indexes where they were built for it
/// (the same answer, in time that does not grow with the trace).
pub fn category_timeline_with(
    dev: &DeviceFrames,
    axis: TimelineAxis,
    index: Option<(&TimelineIndex, &CategoryIndex)>,
    start: Option<i64>,
    end: Option<i64>,
    width: usize,
) -> PolarsResult<CategoryTimeline> {
    let positions = super::axis_positions(dev, axis)?;
    let (full_start, full_end) = positions.full_range();
    let start = start.unwrap_or(full_start);
    let end = end.unwrap_or(full_end).max(start + 1);
    let width = width.clamp(1, super::MAX_WIDTH);
    let indexed = index
        .filter(|(tl, cats)| tl.fits(dev, axis) && cats.fits(dev))
        .and_then(|(tl, cats)| tl.allocated().map(|allocated| (allocated, cats)));
    let (mut best_total, mut best) = match indexed {
        Some((pyramid, cats)) => peaks_from_index(dev, positions, pyramid, cats, start, end, width)?,
        None => peaks_by_scan(dev, positions, start, end, width)?,
    };
    // Columns without entries hold the state of the column before them.
    for b in 1..width {
        if best_total[b] == i64::MIN {
            best_total[b] = best_total[b - 1];
            best[b] = best[b - 1].clone();
        }
    }
    let series = Category::ALL
        .iter()
        .enumerate()
        .filter(|(s, _)| best.iter().any(|col| col[*s] != 0))
        .map(|(s, &category)| CategorySeries {
            category,
            bytes: best.iter().map(|col| col[s].max(0)).collect(),
        })
        .collect();
    Ok(CategoryTimeline {
        device: dev.device,
        time_axis: match axis {
            TimelineAxis::Time => TimeAxis::TimeUs,
            TimelineAxis::Event => TimeAxis::EventOrder,
        },
        start,
        end,
        width,
        series,
    })
}

/// Per column, the categories' total at its peak and each category's bytes then
/// (`i64::MIN` and nothing for a column without entries).
type Peaks = (Vec<i64>, Vec<Vec<i64>>);

/// The columns' peaks by replaying every allocation's alloc and free up to `end`.
fn peaks_by_scan(
    dev: &DeviceFrames,
    positions: Positions<'_>,
    start: i64,
    end: i64,
    width: usize,
) -> PolarsResult<Peaks> {
    let n_entries = dev.usage.height();
    let lt = &dev.lifetimes;
    let cats = categories_of(lt)?;
    let alloc = lt_col::ALLOC_IDX.slice(lt)?;
    let free = lt_col::FREE_IDX.slice(lt)?;
    let size = IntSlice::of(lt, lt_col::SIZE)?;
    let k = Category::ALL.len();
    // Per-entry deltas by category; allocations older than the trace are live from the start.
    let mut live = vec![0i64; k];
    let mut deltas: Vec<(usize, usize, i64)> = Vec::with_capacity(2 * size.len());
    for r in 0..size.len() {
        let s = slot_of(cats[r].0);
        if alloc[r] < 0 {
            live[s] += size.at(r);
        } else {
            deltas.push((alloc[r] as usize, s, size.at(r)));
        }
        if free[r] >= 0 {
            deltas.push((free[r] as usize, s, -size.at(r)));
        }
    }
    deltas.sort_unstable_by_key(|d| d.0);
    let span = (end - start).max(1) as i128;
    let bucket =
        |t: i64| ((t.clamp(start, end) - start) as i128 * width as i128 / span).min(width as i128 - 1) as usize;
    let mut best_total = vec![i64::MIN; width];
    let mut best = vec![vec![0i64; k]; width];
    let mut total: i64 = live.iter().sum();
    let mut d = 0;
    for e in 0..n_entries.min(positions.len()) {
        let t = positions.at(e);
        while d < deltas.len() && deltas[d].0 == e {
            live[deltas[d].1] += deltas[d].2;
            total += deltas[d].2;
            d += 1;
        }
        if t < start {
            continue;
        }
        if t > end {
            break;
        }
        let b = bucket(t);
        if total > best_total[b] {
            best_total[b] = total;
            best[b].clone_from(&live);
        }
    }
    Ok((best_total, best))
}

/// The columns' peaks from the indexes: per column, its entries' first peak of allocated bytes
/// (the pyramid), and the categories' state after that entry (the nearest checkpoint).
fn peaks_from_index(
    dev: &DeviceFrames,
    positions: Positions<'_>,
    pyramid: &MinMaxPyramid,
    cats: &CategoryIndex,
    start: i64,
    end: i64,
    width: usize,
) -> PolarsResult<Peaks> {
    let allocated = usage_col::allocated(&dev.usage)?;
    let n = dev.usage.height().min(positions.len()).min(allocated.len());
    let runs = BucketRuns::of_sorted(positions, n, start, end, width);
    let mut best_total = vec![i64::MIN; width];
    let mut best = vec![vec![0i64; Category::ALL.len()]; width];
    let mut from = runs.first;
    for (b, &to) in runs.ends.iter().enumerate() {
        if from < to {
            let e = on_series!(allocated, |values| pyramid.first_max(values, from, to));
            best_total[b] = allocated.at(e) + cats.offset;
            best[b] = cats.state_after(dev, e)?;
        }
        from = to;
    }
    Ok((best_total, best))
}
