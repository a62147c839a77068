//! Memory pools: the caching allocator's default pool and its private ones — a
//! `torch.cuda.MemPool` (id `(0, n)`), a CUDA graph's pool (id `(n, 0)`) — each with what it
//! reserved at its peak and at the end. A segment's pool is known from the final segments
//! (`segment_pool_id`); a segment the trace maps and frees again is counted in the default
//! pool (trace entries do not carry pools). A private pool is named by the `pool=NAME` its
//! allocations' `user_metadata` carries, and gets its reserved bytes over time for drawing.

use std::sync::LazyLock;

use memlens_api::{AxisPoint, PoolKind, PoolSummary, POOL_SERIES_POINTS};
use polars_core::prelude::*;
use regex::Regex;
use rustc_hash::FxHashMap;

use crate::analysis::{device_segments, DeviceEvents};
use crate::tables::{Action, SnapshotTables};

fn kind_of(id: (i64, i64)) -> PoolKind {
    match id {
        (0, 0) => PoolKind::Default,
        (0, _) => PoolKind::MemPool,
        _ => PoolKind::GraphPool,
    }
}

/// `pool=kv_cache`, `pool_name: kv`, `"pool": "kv"`, `mempool=kv` in a `user_metadata` string.
static POOL_IN_METADATA: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?i)(?:^|[^a-z_])(?:mem)?pool(?:_name)?"?\s*[=:]\s*"?([^",;\s}]+)"#).expect("static regex")
});

/// The pool a `user_metadata` string names, if any.
pub fn pool_in_metadata(meta: &str) -> Option<&str> {
    Some(POOL_IN_METADATA.captures(meta)?.get(1)?.as_str())
}

/// Each private pool's name: the one most of the allocations and segments made in it name.
fn pool_names(
    t: &SnapshotTables,
    ev: &DeviceEvents,
    pool_at: &dyn Fn(i64) -> (i64, i64),
) -> PolarsResult<FxHashMap<(i64, i64), String>> {
    let mut votes: FxHashMap<((i64, i64), &str), usize> = FxHashMap::default();
    let (action, addr) = (ev.action(), ev.addr());
    for (i, m) in crate::analysis::device_notes(&t.event_notes, ev, "user_metadata")? {
        if !matches!(Action::from_code(action[i]), Action::Alloc | Action::SegmentAlloc) {
            continue;
        }
        let (Some(name), id) = (pool_in_metadata(m), pool_at(addr.at(i))) else {
            continue;
        };
        if id != (0, 0) {
            *votes.entry((id, name)).or_default() += 1;
        }
    }
    let mut best: FxHashMap<(i64, i64), (usize, &str)> = FxHashMap::default();
    for ((id, name), n) in votes {
        let b = best.entry(id).or_insert((0, name));
        if (n, std::cmp::Reverse(name)) > (b.0, std::cmp::Reverse(b.1)) {
            *b = (n, name);
        }
    }
    Ok(best.into_iter().map(|(id, (_, n))| (id, n.to_owned())).collect())
}

/// At most [`POOL_SERIES_POINTS`] points: runs of consecutive points, each as its first `x`
/// and its most bytes.
fn thin(points: Vec<AxisPoint>) -> Vec<AxisPoint> {
    if points.len() <= POOL_SERIES_POINTS {
        return points;
    }
    let run = points.len().div_ceil(POOL_SERIES_POINTS);
    points
        .chunks(run)
        .map(|c| AxisPoint {
            x: c[0].x,
            bytes: c.iter().map(|p| p.bytes).max().unwrap_or(0),
        })
        .collect()
}

/// Every pool of the device, the default one first.
pub fn memory_pools(t: &SnapshotTables, ev: &DeviceEvents) -> PolarsResult<Vec<PoolSummary>> {
    let (segs, _) = device_segments(t, ev.device)?;
    let addr = segs.column("address")?.i64()?;
    let total = segs.column("total_size")?.i64()?;
    let allocated = segs.column("allocated_size")?.i64()?;
    let pool_a = segs.column("pool_a")?.i64()?;
    let pool_b = segs.column("pool_b")?.i64()?;
    // Final state per pool, and which pool each final segment's range belongs to.
    let mut ranges: Vec<(i64, i64, (i64, i64))> = Vec::with_capacity(segs.height());
    let mut end_reserved: FxHashMap<(i64, i64), (i64, i64, usize)> = FxHashMap::default();
    end_reserved.insert((0, 0), (0, 0, 0));
    for i in 0..segs.height() {
        let id = (pool_a.get(i).unwrap_or(0), pool_b.get(i).unwrap_or(0));
        let (a, size) = (addr.get(i).unwrap_or(0), total.get(i).unwrap_or(0));
        ranges.push((a, a + size, id));
        let e = end_reserved.entry(id).or_default();
        e.0 += size;
        e.1 += allocated.get(i).unwrap_or(0);
        e.2 += 1;
    }
    ranges.sort_unstable();
    let pool_at = |a: i64| -> (i64, i64) {
        let i = ranges.partition_point(|r| r.0 <= a);
        match i.checked_sub(1).map(|j| ranges[j]) {
            Some((start, end, id)) if a >= start && a < end => id,
            _ => (0, 0),
        }
    };
    // Each segment event's change, by pool, in entry order, with the entry's place on the axis.
    let mut changes: Vec<((i64, i64), i64, i64)> = Vec::new();
    let time = ev.time();
    for (i, ((&action, a), size)) in ev.action().iter().zip(ev.addr()).zip(ev.size()).enumerate() {
        let sign = match Action::from_code(action) {
            Action::SegmentAlloc | Action::SegmentMap => 1,
            Action::SegmentFree | Action::SegmentUnmap => -1,
            _ => continue,
        };
        changes.push((pool_at(a), sign * size, time.at(i)));
    }
    let mut names = pool_names(t, ev, &pool_at)?;
    // Replayed from what each pool held before the trace (the end less the trace's changes).
    let mut running: FxHashMap<(i64, i64), i64> = end_reserved.iter().map(|(&id, e)| (id, e.0)).collect();
    for &(id, d, _) in &changes {
        *running.entry(id).or_default() -= d;
    }
    let mut peak: FxHashMap<(i64, i64), i64> = running.clone();
    let first_x = time.first().unwrap_or(0);
    let mut series: FxHashMap<(i64, i64), Vec<AxisPoint>> = running
        .iter()
        .filter(|(&id, _)| id != (0, 0))
        .map(|(&id, &r)| (id, vec![AxisPoint { x: first_x, bytes: r }]))
        .collect();
    for &(id, d, x) in &changes {
        let r = running.entry(id).or_default();
        *r += d;
        let p = peak.entry(id).or_default();
        *p = (*p).max(*r);
        if let Some(s) = series.get_mut(&id) {
            s.push(AxisPoint { x, bytes: *r });
        }
    }
    let mut out: Vec<PoolSummary> = peak
        .into_iter()
        .map(|(id, peak_reserved)| {
            let (end_total, end_alloc, count) = end_reserved.get(&id).copied().unwrap_or_default();
            PoolSummary {
                pool_id: [id.0, id.1],
                kind: kind_of(id),
                name: names.remove(&id),
                peak_reserved_bytes: peak_reserved,
                final_reserved_bytes: end_total,
                final_allocated_bytes: end_alloc,
                segments_at_end: count,
                reserved_series: series.remove(&id).map(thin).unwrap_or_default(),
            }
        })
        .collect();
    out.sort_by_key(|p| p.pool_id);
    Ok(out)
}
