//! Memory pools: the caching allocator's default pool and its private ones — a
//! `torch.cuda.MemPool` (id `(0, n)`), a CUDA graph's pool (id `(n, 0)`) — each with what it
//! reserved at its peak and at the end. A segment's pool is known from the final segments
//! (`segment_pool_id`); a segment the trace maps and frees again is counted in the default
//! pool (trace entries do not carry pools).

use memlens_api::{PoolKind, PoolSummary};
use polars::prelude::*;
use rustc_hash::FxHashMap;

use super::{device_segments, DeviceEvents};
use crate::tables::{Action, SnapshotTables};

fn kind_of(id: (i64, i64)) -> PoolKind {
    match id {
        (0, 0) => PoolKind::Default,
        (0, _) => PoolKind::MemPool,
        _ => PoolKind::GraphPool,
    }
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
    // Each segment event's change, by pool, in entry order.
    let mut changes: Vec<((i64, i64), i64)> = Vec::new();
    for ((&action, &a), &size) in ev.action().iter().zip(ev.addr()).zip(ev.size()) {
        let sign = match Action::from_code(action) {
            Action::SegmentAlloc | Action::SegmentMap => 1,
            Action::SegmentFree | Action::SegmentUnmap => -1,
            _ => continue,
        };
        changes.push((pool_at(a), sign * size));
    }
    // Replayed from what each pool held before the trace (the end less the trace's changes).
    let mut running: FxHashMap<(i64, i64), i64> = end_reserved.iter().map(|(&id, e)| (id, e.0)).collect();
    for &(id, d) in &changes {
        *running.entry(id).or_default() -= d;
    }
    let mut peak: FxHashMap<(i64, i64), i64> = running.clone();
    for &(id, d) in &changes {
        let r = running.entry(id).or_default();
        *r += d;
        let p = peak.entry(id).or_default();
        *p = (*p).max(*r);
    }
    let mut out: Vec<PoolSummary> = peak
        .into_iter()
        .map(|(id, peak_reserved)| {
            let (end_total, end_alloc, count) = end_reserved.get(&id).copied().unwrap_or_default();
            PoolSummary {
                pool_id: [id.0, id.1],
                kind: kind_of(id),
                name: None,
                peak_reserved_bytes: peak_reserved,
                final_reserved_bytes: end_total,
                final_allocated_bytes: end_alloc,
                segments_at_end: count,
            }
        })
        .collect();
    out.sort_by_key(|p| p.pool_id);
    Ok(out)
}
