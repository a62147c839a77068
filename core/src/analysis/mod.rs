//! Analyses: functions over the canonical polars tables of one snapshot, per device, grouped
//! in rooms by the question they answer:
//!
//! - [`anatomy`]: what is the peak made of? — [`categories`] every allocation's category,
//!   `training_structure` the step's phases from the trace alone, `peak` what was live at
//!   the peak, [`jax_anatomy`] a JAX profile's peak;
//! - [`over_time`]: how does memory move, and what leaks? — [`usage`], [`lifetimes`],
//!   [`fragmentation`], [`leaks`], [`pools`], `stalls`;
//! - [`out_of_memory`]: why did I OOM, and what fits? — `oom` each OOM explained,
//!   [`oom_cause`] one classifier and remedy list for snapshots and texts, `failed_step` how
//!   much of the batch fits, [`jax_oom`] XLA's text;
//! - [`comparison`]: did this change make memory worse? — [`compare`] A − B, [`check`] a CI
//!   gate's limits, [`run`] the ranks of one job side by side;
//! - [`whatif`]: a measured run's peak under another setting.
//!
//! Beside the rooms: [`segment_map`] the allocator's segments and blocks at any event, by
//! replay, and [`lifetime_addresses`] their addresses; [`kv_cache`] a generation's key/value
//! cache; [`phases`] `record_function` ranges and iteration boundaries; [`serving`] a serving
//! engine's startup; [`gpu_samples`] whole-GPU memory from NVML logs, lined up with the
//! snapshots' clock; `interval_index` which of a run's ranges hold an instant, by binary search.
//! Each room's module re-exports its analyses here, so `analysis::usage` names the same module
//! as `analysis::over_time::usage`.
//!
//! [`DeviceEvents`] (in `device_events.rs`) is how every analysis reads one device's entries.
//!
//! Invariant: analyses read tables, never raw input, and never panic on odd but well-typed
//! data (frees without allocs, allocs without frees, missing timestamps, empty traces).

pub mod anatomy;
pub mod comparison;
mod device_events;
pub mod gpu_samples;
mod interval_index;
pub mod kv_cache;
pub mod lifetime_addresses;
pub(crate) mod loop_steps;
pub mod out_of_memory;
pub mod over_time;
pub mod phases;
mod rows_in_entry_order;
pub mod segment_map;
pub mod serving;
#[cfg(test)]
mod serving_tests;
pub(crate) mod text_evidence;
pub(crate) mod verdict;
pub mod whatif;

pub use anatomy::{categories, jax_anatomy};
pub(crate) use anatomy::{labels, peak, size_rules, training_structure};
pub(crate) use comparison::compare_verdict;
pub use comparison::{check, compare, run};
pub(crate) use out_of_memory::{failed_step, oom};
pub use out_of_memory::{failure_facts, jax_oom, oom_cause};
pub(crate) use over_time::stalls;
pub use over_time::{fragmentation, leaks, lifetimes, pools, usage};

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
