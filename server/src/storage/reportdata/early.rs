//! Device objects encoded before their file's analyses end, by whichever of a device's two
//! analysis threads is done first while the other still runs:
//! - a device's usage and lifetimes are final while its fragmentation replay, on the other
//!   thread, may still run (the bench file), and the thread that found them would wait for it;
//! - the segment map's checkpoints are taken while the other analyses may still run (a long
//!   trace: the 2 GB generated snapshot's replay ends about a second before them), and the
//!   replay's thread would sit idle.
//!
//! [`EarlyObjects`] encodes them then (as long as the other thread runs), and
//! [`write_file`](super::write_file) puts those bytes instead of encoding the objects again in
//! the storing stage.

use std::sync::Mutex;

use memlens_core::analysis::frames::stored_usage;
use memlens_core::analysis::segment_map::checkpoint_frame::stored_objects;
use memlens_core::analysis::segment_map::EntryRows;
use memlens_core::pipeline::{CheckpointsFinal, EarlyFrames, FinalFrames};
use polars::prelude::*;

use super::keys::FileKeys;
use super::write::{lifetimes_bytes, parquet_bytes, segment_object_bytes};
use crate::storage::parquet_object::RowGroups;

/// Objects encoded during the analyses, by key, until their file is written.
#[derive(Default)]
pub struct EarlyObjects {
    objects: Mutex<Vec<(String, Vec<u8>)>>,
}

impl EarlyObjects {
    /// The objects encoded for snapshot `index`, taken.
    pub fn take(&self, index: usize) -> Vec<(String, Vec<u8>)> {
        let prefix = FileKeys::of(index).prefix();
        let Ok(mut objects) = self.objects.lock() else {
            return Vec::new();
        };
        let (mine, rest) = std::mem::take(&mut *objects)
            .into_iter()
            .partition(|(key, _)| key.starts_with(&prefix));
        *objects = rest;
        mine
    }

    /// Whether the object under `key` is encoded and not taken yet.
    pub fn holds(&self, key: &str) -> bool {
        self.objects
            .lock()
            .is_ok_and(|objects| objects.iter().any(|(k, _)| k == key))
    }

    fn keep(&self, key: String, bytes: Vec<u8>) {
        if let Ok(mut objects) = self.objects.lock() {
            objects.push((key, bytes));
        }
    }
}

impl EarlyFrames for EarlyObjects {
    fn frames_final(&self, index: usize, frames: FinalFrames<'_>) {
        let dir = FileKeys::of(index).device(frames.device);
        // A run that makes the usage series later has it encoded in the storing stage.
        let usage = frames.usage.map(|u| move || stored_usage(u.clone(), frames.events));
        let mut jobs: Vec<(String, &dyn Fn() -> PolarsResult<DataFrame>)> = Vec::with_capacity(2);
        if let Some(usage) = &usage {
            jobs.push((dir.usage(), usage));
        }
        for (key, frame) in jobs {
            if !(frames.others_running)() {
                return;
            }
            // An error is left to the storing stage, which encodes the frame again and says.
            if let Ok(bytes) = frame()
                .map_err(Into::into)
                .and_then(|df| parquet_bytes(&key, &df, RowGroups::One))
            {
                self.keep(key, bytes);
            }
        }
        let key = dir.lifetimes();
        // Called again before the trace lets go of its addresses: what was encoded stays.
        if !(frames.others_running)() || self.holds(&key) {
            return;
        }
        let addresses = frames.lifetime_addresses.map(|a| (a, frames.events));
        if let Ok(bytes) = lifetimes_bytes(&key, frames.lifetimes, addresses) {
            self.keep(key, bytes);
        }
    }

    fn checkpoints_final(&self, index: usize, c: CheckpointsFinal<'_>) {
        let dir = FileKeys::of(index).device(c.device);
        for (k, object) in stored_objects(c.checkpoints, &EntryRows::of(c.events))
            .iter()
            .enumerate()
        {
            if !(c.others_running)() {
                return;
            }
            let key = dir.segment_window(k);
            // Called again before the trace lets go of its addresses: what was encoded stays.
            if self.holds(&key) {
                continue;
            }
            // As for the frames: an error is left to the storing stage.
            if let Ok(bytes) = segment_object_bytes(&key, object) {
                self.keep(key, bytes);
            }
        }
    }
}
