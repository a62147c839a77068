//! Fragmentation over time: reserved bytes that sit in free blocks, the largest free block,
//! and an index `1 − largest_free / free` (0: all free memory is one block; near 1: shattered).
//!
//! One backward replay of the segment state visits evenly spaced sample entries plus any
//! entries the caller needs exactly (the peak, every OOM), and on the way takes the segment
//! map's checkpoints when asked ([`crate::analysis::segment_map::checkpoints`]).

use memlens_api::FragmentationPoint;
use polars_core::prelude::*;
use rustc_hash::FxHashMap;

use crate::analysis::segment_map::checkpoints::{CheckpointTaker, SegmentCheckpoints};
use crate::analysis::segment_map::{SegmentState, StateStats};
use crate::analysis::usage::Usage;
use crate::analysis::DeviceEvents;
use crate::tables::SnapshotTables;

/// The fragmentation series and the exact states at requested entries.
pub struct Fragmentation {
    /// Columns `event_index` u32, `time` i64, `allocated`, `reserved`, `active`, `free`,
    /// `largest_free` i64, `fragmentation_index` f64, ascending by entry.
    pub frame: DataFrame,
    /// Stats right after each requested entry.
    pub at: FxHashMap<usize, StateStats>,
    /// The segment map's checkpoints, when asked for.
    pub checkpoints: Option<SegmentCheckpoints>,
}

/// `1 − largest/free`, 0 when nothing is free.
pub fn fragmentation_index(free: i64, largest: i64) -> f64 {
    if free <= 0 {
        0.0
    } else {
        1.0 - largest as f64 / free as f64
    }
}

pub fn point(ev: &DeviceEvents, idx: usize, s: &StateStats) -> FragmentationPoint {
    FragmentationPoint {
        event_index: idx,
        time_us: ev.time_us(idx),
        reserved_bytes: s.reserved,
        active_bytes: s.active,
        reserved_free_bytes: s.free,
        largest_free_block_bytes: s.largest_free,
        fragmentation_index: fragmentation_index(s.free, s.largest_free),
    }
}

/// The fragmentation series over `samples` evenly spaced entries and those in `exact`;
/// `usage` is asked for only once the replay is done (its `allocated` column is sampled too).
pub fn fragmentation_over_time<'u, 'e: 'u>(
    t: &SnapshotTables,
    ev: &DeviceEvents,
    usage: impl FnOnce() -> PolarsResult<&'u Usage<'e>>,
    samples: usize,
    exact: &[usize],
    checkpoints: Option<usize>,
) -> PolarsResult<Fragmentation> {
    let n = ev.len();
    let mut points: Vec<usize> = if n == 0 || samples == 0 {
        Vec::new()
    } else {
        let k = samples.min(n);
        (0..k)
            .map(|j| if k == 1 { n - 1 } else { j * (n - 1) / (k - 1) })
            .collect()
    };
    points.extend(exact.iter().copied().filter(|&i| i < n));
    points.sort_unstable();
    points.dedup();

    let mut state = SegmentState::at_end(t, ev)?;
    let mut taker = checkpoints.map(|count| CheckpointTaker::new(n, count));
    let mut stats = Vec::with_capacity(points.len());
    for &p in points.iter().rev() {
        if let Some(taker) = taker.as_mut() {
            taker.rewind_taking(&mut state, ev, p + 1)?;
        }
        state.rewind_to(ev, Some(p));
        stats.push(state.stats());
    }
    stats.reverse();
    let checkpoints = taker.map(|taker| taker.finish(&mut state, ev)).transpose()?;
    let at: FxHashMap<usize, StateStats> = exact
        .iter()
        .filter_map(|&i| points.binary_search(&i).ok().map(|j| (i, stats[j])))
        .collect();

    let usage = usage()?;
    let frame = DataFrame::new(
        points.len(),
        vec![
            Column::new(
                "event_index".into(),
                points.iter().map(|&p| p as u32).collect::<Vec<_>>(),
            ),
            Column::new(
                "time".into(),
                points.iter().map(|&p| ev.time().at(p)).collect::<Vec<_>>(),
            ),
            Column::new(
                "allocated".into(),
                points
                    .iter()
                    .map(|&p| usage.allocated_after(p).unwrap_or(0))
                    .collect::<Vec<_>>(),
            ),
            Column::new("reserved".into(), stats.iter().map(|s| s.reserved).collect::<Vec<_>>()),
            Column::new("active".into(), stats.iter().map(|s| s.active).collect::<Vec<_>>()),
            Column::new("free".into(), stats.iter().map(|s| s.free).collect::<Vec<_>>()),
            Column::new(
                "largest_free".into(),
                stats.iter().map(|s| s.largest_free).collect::<Vec<_>>(),
            ),
            Column::new(
                "fragmentation_index".into(),
                stats
                    .iter()
                    .map(|s| fragmentation_index(s.free, s.largest_free))
                    .collect::<Vec<_>>(),
            ),
        ],
    )?;
    Ok(Fragmentation { frame, at, checkpoints })
}
