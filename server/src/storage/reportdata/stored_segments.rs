//! Segment maps of a stored report, answered from its stored checkpoints: the one object
//! holding the state after the entry asked for and the entries before it
//! ([`memlens_core::stored::checkpoint_frame`]), read on first use and kept among the
//! few most recent. The trace itself is never loaded for them; a report stored before the
//! checkpoints were has none, and its maps are replayed from the trace as before.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use memlens_api::SegmentMap;
use memlens_core::stored::{stored_checkpoint, SegmentDetail, StoredCheckpoint};
use memlens_core::tables::int_slice::IntSlice;

use crate::storage::reportdata::DataError;

/// Decoded checkpoints kept per file (a cursor moving along the timeline mostly stays in one).
const KEPT: usize = 4;

/// Where a segment map is asked for.
#[derive(Debug, Clone, Copy)]
pub enum SegmentAt {
    /// Right after this entry.
    Entry(usize),
    /// After the last entry at or before this time (µs, or the entry index without times).
    Time(i64),
    /// After the last entry.
    End,
}

impl SegmentAt {
    /// The state's cursor (entries before it are applied) on a device whose entries sit at
    /// `times`.
    pub fn cursor(self, times: IntSlice<'_>) -> usize {
        match self {
            SegmentAt::Entry(e) => e.saturating_add(1).min(times.len()),
            SegmentAt::Time(t) => times.partition_point(|x| x <= t),
            SegmentAt::End => times.len(),
        }
    }
}

/// What a file keeps of its stored segment checkpoints.
#[derive(Default)]
pub struct StoredSegments {
    /// Each device's checkpoint cursors, `None` when it has none stored.
    cursors: Mutex<HashMap<i64, Arc<Option<Vec<usize>>>>>,
    /// The most recently used decoded checkpoints, most recent first.
    recent: Mutex<VecDeque<Decoded>>,
}

/// A decoded checkpoint: (device, position among the device's) and its contents.
type Decoded = ((i64, usize), Arc<StoredCheckpoint>);

/// How the file reads its stored objects (keys relative to the device's folder).
pub trait DeviceObjects {
    fn cursors(&self, device: i64) -> Result<Option<Vec<usize>>, DataError>;
    fn checkpoint(&self, device: i64, k: usize) -> Result<polars_core::prelude::DataFrame, DataError>;
}

impl StoredSegments {
    /// The map at `cursor` of `device`, with its time, from the checkpoint covering it; `None`
    /// when the device has no stored checkpoints. `bytes` counts what the decoded ones hold.
    pub fn map_at(
        &self,
        objects: &dyn DeviceObjects,
        bytes: &AtomicU64,
        device: i64,
        cursor: usize,
        time_us: Option<i64>,
        detail: SegmentDetail,
    ) -> Result<Option<SegmentMap>, DataError> {
        let cursors = {
            let mut known = self.cursors.lock().unwrap_or_else(|p| p.into_inner());
            match known.get(&device) {
                Some(c) => c.clone(),
                None => {
                    let c = Arc::new(objects.cursors(device)?);
                    known.insert(device, c.clone());
                    c
                }
            }
        };
        let Some(cursors) = cursors.as_ref() else {
            return Ok(None);
        };
        let k = cursors.partition_point(|&c| c < cursor);
        if k == cursors.len() {
            return Ok(None);
        }
        let cp = self.checkpoint(objects, bytes, device, k)?;
        if !cp.covers(cursor) {
            return Err(DataError::Polars(polars_core::prelude::PolarsError::ComputeError(
                format!("segment checkpoint {k} of device {device} does not hold entry {cursor}").into(),
            )));
        }
        Ok(Some(cp.map_at(cursor, device, time_us, detail)))
    }

    fn checkpoint(
        &self,
        objects: &dyn DeviceObjects,
        bytes: &AtomicU64,
        device: i64,
        k: usize,
    ) -> Result<Arc<StoredCheckpoint>, DataError> {
        let key = (device, k);
        {
            let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(i) = recent.iter().position(|(at, _)| *at == key) {
                let hit = recent.remove(i).expect("present");
                recent.push_front(hit.clone());
                return Ok(hit.1);
            }
        }
        let cp = Arc::new(stored_checkpoint(&objects.checkpoint(device, k)?)?);
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        bytes.fetch_add(cp.bytes() as u64, Ordering::Relaxed);
        recent.push_front((key, cp.clone()));
        while recent.len() > KEPT {
            if let Some((_, old)) = recent.pop_back() {
                bytes.fetch_sub(old.bytes() as u64, Ordering::Relaxed);
            }
        }
        Ok(cp)
    }
}
