//! Each analysed device's derived frames — usage after every entry, one row per allocation
//! (with its category), fragmentation samples — as the server stores them and the
//! level-of-detail queries and what-if read them.

use polars::prelude::*;
use rustc_hash::FxHashMap;

use crate::analysis::segment_checkpoints::SegmentCheckpoints;
use crate::analysis::{device_notes, DeviceEvents};
use crate::entry_steps::EntrySteps;
use crate::tables::{Action, SnapshotTables};

/// One analysed device's derived frames, as stored for level-of-detail queries.
#[derive(Default)]
pub struct DeviceFrames {
    pub device: i64,
    /// `time` (µs, or the entry index without timestamps) and `allocated` after every entry.
    pub usage: DataFrame,
    /// Reserved bytes after every entry, as their changes (they change only on segment events).
    pub reserved: EntrySteps,
    pub lifetimes: DataFrame,
    pub fragmentation: DataFrame,
    /// The `user_metadata` of the device's allocations that carry one, by the alloc's entry
    /// index (lifetimes' `alloc_idx`), from the snapshot's `event_notes`.
    pub user_metadata: FxHashMap<i64, String>,
    /// The segment map's checkpoints, when the sink asked for them
    /// ([`crate::pipeline::PipelineSink::keeps_segment_checkpoints`]); stored as objects of
    /// their own and never loaded back with the frames.
    pub segment_checkpoints: Option<SegmentCheckpoints>,
}

/// The `user_metadata` of a device's alloc entries, by entry index on the device.
pub fn alloc_metadata(t: &SnapshotTables, device: i64) -> PolarsResult<FxHashMap<i64, String>> {
    if t.event_notes.height() == 0 {
        return Ok(FxHashMap::default());
    }
    let ev = DeviceEvents::new(t, device)?;
    let action = ev.action();
    Ok(device_notes(&t.event_notes, &ev, "user_metadata")?
        .into_iter()
        .filter(|&(i, _)| action[i] == Action::Alloc as u8)
        .map(|(i, m)| (i as i64, m.to_owned()))
        .collect())
}
