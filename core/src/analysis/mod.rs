//! Analyses: functions over the canonical polars tables of one snapshot, per device.
//!
//! - [`usage`]: allocated (requested bytes) and reserved over time, with memory that existed
//!   before recording counted;
//! - [`lifetimes`]: one row per allocation (alloc → free, or live at the end), and
//!   [`lifetime_addresses`]: their addresses read from the trace when they are written;
//! - [`peak`]: when usage peaked and what was live, grouped by stack;
//! - [`segment_map`]: the allocator's segments and blocks at any event, by replay;
//! - [`fragmentation`]: reserved-but-free memory and the largest free block over time;
//! - [`out_of_memory`]: the room for "why did I OOM, and what fits?" — [`oom`] each OOM
//!   explained, [`oom_cause`] one classifier and remedy list for snapshots and texts,
//!   [`failed_step`] how much of the batch fits, [`jax_oom`] XLA's text;
//! - [`kv_cache`]: a generation's key/value cache: its bytes, tokens, sequences, bytes a token;
//! - [`leaks`]: allocations piling up across iterations;
//! - [`phases`]: `record_function` ranges and iteration boundaries;
//! - [`size_rules`]: what sizes say beside lives (gradients, state made before recording,
//!   autocast's weight copies), over the categories' first placement;
//! - [`interval_index`]: which of a run's ranges hold an instant, by binary search (never a
//!   scan of the ranges for each entry);
//! - [`pools`]: the allocator's default and private pools (MemPool, CUDA graph);
//! - [`stalls`]: frees that waited on another stream (`record_stream`);
//! - [`run`]: the ranks of one job side by side (from file summaries only);
//! - [`compare`]: two devices (of two runs, or two ranks) side by side, A − B.
//! - [`gpu_samples`]: whole-GPU memory from NVML logs (not per device of a snapshot), lined up
//!   with the snapshots' clock.
//!
//! [`DeviceEvents`] (in `device_events.rs`) is how every analysis reads one device's entries.
//!
//! Invariant: analyses read tables, never raw input, and never panic on odd but well-typed
//! data (frees without allocs, allocs without frees, missing timestamps, empty traces).

pub mod categories;
pub mod check;
pub mod compare;
mod compare_verdict;
mod device_events;
pub mod fragmentation;
pub mod gpu_samples;
mod interval_index;
pub mod jax_anatomy;
pub mod kv_cache;
pub(crate) mod labels;
pub mod leaks;
pub mod lifetime_addresses;
pub mod lifetimes;
pub(crate) mod loop_steps;
pub mod out_of_memory;
pub(crate) mod peak;
pub mod phases;
pub mod pools;
mod rows_in_entry_order;
pub mod run;
pub mod segment_map;
pub mod serving;
#[cfg(test)]
mod serving_tests;
mod size_rules;
pub(crate) mod stalls;
pub(crate) mod text_evidence;
mod training_structure;
pub mod usage;
pub(crate) mod verdict;
pub mod whatif;

pub(crate) use out_of_memory::{failed_step, oom};
pub use out_of_memory::{failure_facts, jax_oom, oom_cause};

use polars_core::prelude::*;

pub use device_events::{device_notes, device_runs, DeviceEvents, DeviceRun, Streams, UsageColumns};

use crate::tables::SnapshotTables;

/// Smallest block the caching allocator hands out; every request rounds up to a multiple.
pub const MIN_BLOCK: i64 = 512;
/// Requests up to this size are served from the small pool.
pub const SMALL_SIZE: i64 = 1 << 20;

/// The block size the allocator uses for a request of `size` bytes (default settings).
pub fn round_size(size: i64) -> i64 {
    if size < MIN_BLOCK {
        MIN_BLOCK
    } else {
        (size + MIN_BLOCK - 1) / MIN_BLOCK * MIN_BLOCK
    }
}

/// The devices of a snapshot: every device with a trace list or a segment, ascending.
pub fn devices(t: &SnapshotTables) -> PolarsResult<Vec<i64>> {
    // One value per run of equal devices (the events come device by device): never a copy of
    // the whole column, which was 8 bytes per entry held through every analysis.
    let mut out: Vec<i64> = device_runs(&t.events)?.into_iter().map(|r| r.device).collect();
    out.extend(t.segments.column("device")?.i64()?.into_no_null_iter());
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The segments and blocks of one device from the snapshot (the state at the end of the trace).
pub fn device_segments(t: &SnapshotTables, device: i64) -> PolarsResult<(DataFrame, DataFrame)> {
    let of_device = |df: &DataFrame| -> PolarsResult<DataFrame> {
        let mask = df.column("device")?.as_materialized_series().i64()?.equal(device);
        df.filter(&mask)
    };
    Ok((of_device(&t.segments)?, of_device(&t.blocks)?))
}

/// Sum of an i64 column (0 for an empty frame).
pub(crate) fn sum_i64(df: &DataFrame, name: &str) -> PolarsResult<i64> {
    Ok(df.column(name)?.i64()?.sum().unwrap_or(0))
}

/// What the analyses over a stored report (what-if, compare) read of one device's frames: its
/// id, usage after every entry, reserved bytes where they change, and one row per allocation.
/// [`crate::stored::DeviceFrames`] is the one holder; the analyses name only this, so that
/// what a report stores is owned by `stored` and the analyses do not depend on it.
pub trait StoredDevice {
    fn device(&self) -> i64;
    fn usage(&self) -> &polars_core::prelude::DataFrame;
    fn reserved(&self) -> &crate::tables::entry_steps::EntrySteps;
    fn lifetimes(&self) -> &polars_core::prelude::DataFrame;
}
