//! The category view of a device's timeline: per pixel column, the bytes of each category at
//! the moment the column's total peaks (so the stacked values add up to the allocated line).

use memlens_api::{Category, CategorySeries, CategoryTimeline, TimeAxis, TimelineAxis};
use polars::prelude::*;

use crate::analysis::whatif::categories_of;
use crate::columns::lifetimes as lt_col;
use crate::frames::DeviceFrames;

/// The category timeline of `dev` between `start` and `end` (defaults: the whole trace).
pub fn category_timeline(
    dev: &DeviceFrames,
    axis: TimelineAxis,
    start: Option<i64>,
    end: Option<i64>,
    width: usize,
) -> PolarsResult<CategoryTimeline> {
    let n_entries = dev.usage.height();
    let positions = super::axis_positions(dev, axis)?;
    let (full_start, full_end) = positions.full_range();
    let start = start.unwrap_or(full_start);
    let end = end.unwrap_or(full_end).max(start + 1);
    let width = width.clamp(1, super::MAX_WIDTH);
    let lt = &dev.lifetimes;
    let cats = categories_of(lt)?;
    let alloc = lt_col::ALLOC_IDX.slice(lt)?;
    let free = lt_col::FREE_IDX.slice(lt)?;
    let size = lt_col::SIZE.slice(lt)?;
    let k = Category::ALL.len();
    let slot = |c: Category| Category::ALL.iter().position(|&x| x == c).unwrap_or(k - 1);
    // Per-entry deltas by category; allocations older than the trace are live from the start.
    let mut live = vec![0i64; k];
    let mut deltas: Vec<(usize, usize, i64)> = Vec::with_capacity(2 * size.len());
    for r in 0..size.len() {
        let s = slot(cats[r].0);
        if alloc[r] < 0 {
            live[s] += size[r];
        } else {
            deltas.push((alloc[r] as usize, s, size[r]));
        }
        if free[r] >= 0 {
            deltas.push((free[r] as usize, s, -size[r]));
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
