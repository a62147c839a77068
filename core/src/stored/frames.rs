//! Each analysed device's derived frames — usage after every entry, one row per allocation
//! (with its category), fragmentation samples — as the server stores them and the
//! level-of-detail queries and what-if read them.

use polars_core::prelude::*;
use rustc_hash::FxHashMap;

use super::checkpoint_frame::{stored_objects, StoredObject};
use crate::analysis::lifetime_addresses::LifetimeAddresses;
use crate::analysis::segment_map::checkpoints::SegmentCheckpoints;
use crate::analysis::segment_map::EntryRows;
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

/// One of a device's stored objects, handed over as soon as it is final
/// ([`crate::pipeline::ObjectSink`]): on the analysis thread that finished it, while the
/// device's other analyses may still run, so that a sink storing it can encode it in time that
/// thread would otherwise spend waiting; and once more, all that need the trace's addresses,
/// before a large trace lets go of them ([`crate::pipeline::Keep::release_addresses_from`]).
/// The same frames and checkpoints come again in the device's [`DeviceFrames`]: what a sink
/// was not handed, or could not encode, it encodes from there.
pub enum Storable<'a> {
    /// [`DeviceFrames::usage`], time axis first.
    Usage(DataFrame),
    /// [`DeviceFrames::lifetimes`]; where they were built without their address columns, what
    /// gives them from the trace ([`DeviceFrames::lifetime_addresses`] over its events).
    Lifetimes {
        lifetimes: &'a DataFrame,
        addresses: Option<(&'a LifetimeAddresses, &'a DeviceEvents)>,
    },
    /// The segment map's stored object `window` (in cursor order: [`stored_objects`]).
    SegmentWindow { window: usize, object: StoredObject<'a> },
}

/// When a device's objects are handed over while its analyses run ([`Storable`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum HandOver {
    /// None while the analyses run; only those that need the trace's addresses, before it
    /// lets go of them.
    #[default]
    Never,
    /// Each while the device's other analysis thread still runs: a wait filled, never the
    /// device's summary delayed.
    WhileOthersRun,
}

impl HandOver {
    /// Whether an object is handed now, the other thread running or not (`others_running`).
    pub fn now(self, others_running: impl Fn() -> bool) -> bool {
        match self {
            HandOver::Never => false,
            HandOver::WhileOthersRun => others_running(),
        }
    }
}

/// Hands each of a device's segment-map objects to `ready`, in cursor order, while `more` says
/// so.
pub fn hand_segment_objects<'a>(
    checkpoints: &'a SegmentCheckpoints,
    ev: &'a DeviceEvents,
    mut more: impl FnMut() -> bool,
    ready: impl Fn(Storable<'_>),
) {
    for (window, object) in stored_objects(checkpoints, &EntryRows::of(ev)).into_iter().enumerate() {
        if !more() {
            return;
        }
        ready(Storable::SegmentWindow { window, object });
    }
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

impl crate::analysis::StoredDevice for DeviceFrames {
    fn device(&self) -> i64 {
        self.device
    }
    fn usage(&self) -> &DataFrame {
        &self.usage
    }
    fn reserved(&self) -> &EntrySteps {
        &self.reserved
    }
    fn lifetimes(&self) -> &DataFrame {
        &self.lifetimes
    }
}
