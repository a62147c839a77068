//! Each analysed device's derived frames — usage after every entry, one row per allocation
//! (with its category), fragmentation samples — as the server stores them and the
//! level-of-detail queries and what-if read them.

use polars::prelude::*;
use rustc_hash::FxHashMap;

use crate::analysis::lifetime_addresses::LifetimeAddresses;
use crate::analysis::segment_map::checkpoints::SegmentCheckpoints;
use crate::analysis::{device_notes, DeviceEvents};
use crate::tables::entry_steps::EntrySteps;
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
    /// `Some` while the lifetimes hold no address columns: what gives each its address from the
    /// trace they were built from ([`DeviceFrames::fill_addresses`], or read a page at a time
    /// as they are stored). `None` once they hold them (a stored report's, read back).
    pub lifetime_addresses: Option<LifetimeAddresses>,
    pub fragmentation: DataFrame,
    /// The `user_metadata` of the device's allocations that carry one, by the alloc's entry
    /// index (lifetimes' `alloc_idx`), from the snapshot's `event_notes`.
    pub user_metadata: FxHashMap<i64, String>,
    /// The segment map's checkpoints, when the sink asked for them
    /// ([`crate::pipeline::Keep::segment_checkpoints`]); stored as objects of
    /// their own and never loaded back with the frames.
    pub segment_checkpoints: Option<SegmentCheckpoints>,
}

impl DeviceFrames {
    /// Puts the lifetimes' address columns in (first, as lifetimes built with them hold them),
    /// read from `ev`, the trace they were built from, where they were built apart from them.
    pub fn fill_addresses(&mut self, ev: &DeviceEvents) -> PolarsResult<()> {
        self.lifetimes = self.whole_lifetimes(ev)?;
        self.lifetime_addresses = None;
        Ok(())
    }

    /// [`DeviceFrames::fill_addresses`] for each of `devices`, from `t`, the tables they were
    /// analysed from (for frames kept whole, whose queries read the lifetimes' addresses).
    pub fn fill_lifetime_addresses(t: &SnapshotTables, devices: &mut [DeviceFrames]) -> PolarsResult<()> {
        for d in devices {
            let ev = DeviceEvents::new(t, d.device)?;
            d.fill_addresses(&ev)?;
        }
        Ok(())
    }

    /// The lifetimes with their address columns (first), read from `ev` where they were built
    /// apart from them.
    pub fn whole_lifetimes(&self, ev: &DeviceEvents) -> PolarsResult<DataFrame> {
        let mut lifetimes = self.lifetimes.clone();
        if let Some(addresses) = &self.lifetime_addresses {
            let columns = addresses.column(ev, &self.lifetimes)?.columns();
            for (at, column) in columns.into_iter().enumerate() {
                lifetimes.insert_column(at, column)?;
            }
        }
        Ok(lifetimes)
    }
}

/// [`DeviceFrames::usage`] from a device's `allocated` series (its analyses' usage frame): the
/// events' time axis put first.
pub fn stored_usage(allocated: DataFrame, ev: &DeviceEvents) -> PolarsResult<DataFrame> {
    stored_usage_with(allocated, ev.usage_time_columns()?)
}

/// [`stored_usage`] with the time axis already taken from the events
/// ([`DeviceEvents::usage_time_columns`]).
pub fn stored_usage_with(mut allocated: DataFrame, time: Vec<Column>) -> PolarsResult<DataFrame> {
    for (at, column) in time.into_iter().enumerate() {
        allocated.insert_column(at, column)?;
    }
    Ok(allocated)
}

/// A device's usage and lifetimes as soon as they are final, while the rest of its analyses
/// (the fragmentation replay, the longest, on a thread of its own) still run: what
/// [`crate::report::Keeping::frames_final`] is called with, so that a sink storing them can
/// encode them in time the analysis thread would spend waiting. The same frames come again in
/// the device's [`DeviceFrames`].
pub struct FinalFrames<'a> {
    pub device: i64,
    /// The device's events: the stored usage's time axis is theirs
    /// ([`DeviceEvents::usage_time_columns`]).
    pub events: &'a DeviceEvents,
    /// `allocated` after every entry, without the `time` column [`DeviceFrames::usage`] has
    /// first; `None` when the run makes it later ([`crate::report::Keeping::usage_later`]).
    pub usage: Option<&'a DataFrame>,
    /// Without their address columns where `lifetime_addresses` gives them.
    pub lifetimes: &'a DataFrame,
    /// What gives each lifetime its address from `events` ([`DeviceFrames::lifetime_addresses`]).
    pub lifetime_addresses: Option<&'a LifetimeAddresses>,
    /// Whether the device's other analyses are still running (work beyond that point delays
    /// the device's summary instead of filling a wait).
    pub others_running: &'a dyn Fn() -> bool,
    /// The pipeline's last call for this device, before the trace lets go of its addresses
    /// ([`crate::pipeline::Keep::release_addresses_from`]): the last that can read them.
    pub last_chance: bool,
}

/// A device's segment-map checkpoints as soon as the fragmentation replay has taken them, while
/// the device's other analyses still run on the thread beside it: what
/// [`crate::report::Keeping::checkpoints_final`] is called with, on the replay's thread, so that
/// a sink storing them can encode them in time that thread would spend idle (on a long trace
/// the replay ends first). The same checkpoints come again in the device's [`DeviceFrames`].
pub struct CheckpointsFinal<'a> {
    pub device: i64,
    /// The device's events: each stored checkpoint holds the entries before it.
    pub events: &'a DeviceEvents,
    pub checkpoints: &'a SegmentCheckpoints,
    /// Whether the device's other analyses are still running (work beyond that point delays
    /// the device's summary instead of filling a wait).
    pub others_running: &'a dyn Fn() -> bool,
    /// The pipeline's last call for this device (see [`FinalFrames::last_chance`]).
    pub last_chance: bool,
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
