//! Memory usage over time: requested ("allocated") and reserved bytes after every trace entry.
//!
//! Accounting follows PyTorch's own counters: `alloc` adds its requested `size`,
//! `free_completed` removes it (`requested_bytes`); `segment_alloc`/`segment_map` add and
//! `segment_free`/`segment_unmap` remove reserved bytes (`reserved_bytes`). Memory that existed
//! before recording began — blocks allocated earlier, frees whose alloc fell out of the ring
//! buffer, segments mapped earlier — is recovered from the snapshot's final state: the value
//! before the first entry is the final state (Σ segment `requested_size` / `total_size`) minus
//! everything the trace added.
//!
//! Reserved bytes change only on segment events, so they are held as their changes
//! ([`EntrySteps`]), not one value per entry.

use polars::prelude::*;

use super::{device_segments, sum_i64, DeviceEvents};
use crate::columns::usage as usage_col;
use crate::entry_steps::EntrySteps;
use crate::tables::{Action, SnapshotTables};

/// One device's usage series and its landmarks.
pub struct Usage {
    /// Column `allocated` (requested bytes): the value right after each entry (row `i` pairs
    /// with entry `i` of the device's events, whose `time_us` is the time axis).
    pub frame: DataFrame,
    /// Reserved bytes after each entry, as their changes.
    pub reserved: EntrySteps,
    pub initial_allocated: i64,
    pub final_allocated: i64,
    pub peak_allocated: i64,
    /// First entry that reached the allocated peak (`None`: the peak predates the trace).
    pub peak_allocated_idx: Option<usize>,
    pub peak_reserved: i64,
    pub peak_reserved_idx: Option<usize>,
}

impl Usage {
    pub fn allocated(&self) -> &[i64] {
        usage_col::ALLOCATED
            .slice(&self.frame)
            .expect("usage_over_time builds this column")
    }
    /// Allocated bytes just before entry `i`.
    pub fn allocated_before(&self, i: usize) -> i64 {
        if i == 0 {
            self.initial_allocated
        } else {
            self.allocated().get(i - 1).copied().unwrap_or(self.final_allocated)
        }
    }
    /// Reserved bytes before the first entry.
    pub fn initial_reserved(&self) -> i64 {
        self.reserved.initial()
    }
    /// Reserved bytes after the last entry.
    pub fn final_reserved(&self) -> i64 {
        self.reserved.last()
    }
    pub fn reserved_before(&self, i: usize) -> i64 {
        self.reserved.before(i)
    }
}

/// Per-entry change of requested and reserved bytes.
pub fn deltas(action: u8, size: i64) -> (i64, i64) {
    match Action::from_code(action) {
        Action::Alloc => (size, 0),
        Action::FreeCompleted => (-size, 0),
        Action::SegmentAlloc | Action::SegmentMap => (0, size),
        Action::SegmentFree | Action::SegmentUnmap => (0, -size),
        _ => (0, 0),
    }
}

/// The entry after which the allocated bytes are highest above where the trace starts (the
/// first such entry), `None` when they never rise above it: [`Usage::peak_allocated_idx`]
/// without the series, from the two columns it needs, so the fragmentation replay can sample
/// the peak without waiting for the usage.
pub fn peak_allocated_entry(action: &[u8], size: &[i64]) -> Option<usize> {
    let (mut now, mut peak, mut at) = (0i64, 0i64, None);
    for (i, (&a, &s)) in action.iter().zip(size).enumerate() {
        now += deltas(a, s).0;
        if now > peak {
            peak = now;
            at = Some(i);
        }
    }
    at
}

pub fn usage_over_time(t: &SnapshotTables, ev: &DeviceEvents) -> PolarsResult<Usage> {
    let (segs, _) = device_segments(t, ev.device)?;
    let final_allocated = sum_i64(&segs, "requested_size")?;
    let final_reserved = sum_i64(&segs, "total_size")?;
    let (action, size) = (ev.action(), ev.size());
    let (mut sum_a, mut sum_r) = (0i64, 0i64);
    for (&a, &s) in action.iter().zip(size) {
        let (da, dr) = deltas(a, s);
        sum_a += da;
        sum_r += dr;
    }
    // Without segments (a trace-only dump) the trace is all we know: start from zero.
    let (initial_allocated, initial_reserved) = if segs.height() == 0 {
        (0, 0)
    } else {
        ((final_allocated - sum_a).max(0), (final_reserved - sum_r).max(0))
    };

    let n = action.len();
    let mut allocated = Vec::with_capacity(n);
    let mut reserved = EntrySteps::starting_at(initial_reserved);
    let (mut a_now, mut r_now) = (initial_allocated, initial_reserved);
    let (mut peak_a, mut peak_a_idx, mut peak_r, mut peak_r_idx) = (a_now, None, r_now, None);
    for i in 0..n {
        let (da, dr) = deltas(action[i], size[i]);
        a_now += da;
        r_now += dr;
        if a_now > peak_a {
            peak_a = a_now;
            peak_a_idx = Some(i);
        }
        if r_now > peak_r {
            peak_r = r_now;
            peak_r_idx = Some(i);
        }
        allocated.push(a_now);
        reserved.push(r_now);
    }
    let frame = DataFrame::new(n, vec![usage_col::ALLOCATED.build(allocated)])?;
    Ok(Usage {
        frame,
        reserved,
        initial_allocated,
        final_allocated: if n == 0 { initial_allocated } else { a_now },
        peak_allocated: peak_a,
        peak_allocated_idx: peak_a_idx,
        peak_reserved: peak_r,
        peak_reserved_idx: peak_r_idx,
    })
}
