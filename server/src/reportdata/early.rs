//! Device frames encoded before their file's analyses end: a device's usage and lifetimes are
//! final while its fragmentation replay, the longest analysis, still runs on the other thread,
//! and the thread that found them would wait for it. [`EarlyObjects`] encodes them then (as
//! long as the replay runs), and [`write_file`](super::write_file) puts those bytes instead of
//! encoding the frames again in the storing stage.

use std::sync::Mutex;

use memlens_core::frames::stored_usage;
use memlens_core::pipeline::{EarlyFrames, FinalFrames};
use polars::prelude::*;

use super::write::{device_dir, parquet_bytes, LIFETIMES, USAGE};
use crate::parquet_object::RowGroups;

/// Objects encoded during the analyses, by key, until their file is written.
#[derive(Default)]
pub struct EarlyObjects {
    objects: Mutex<Vec<(String, Vec<u8>)>>,
}

impl EarlyObjects {
    /// The objects encoded for snapshot `index`, taken.
    pub fn take(&self, index: usize) -> Vec<(String, Vec<u8>)> {
        let prefix = format!("f{index}/");
        let Ok(mut objects) = self.objects.lock() else {
            return Vec::new();
        };
        let (mine, rest) = std::mem::take(&mut *objects)
            .into_iter()
            .partition(|(key, _)| key.starts_with(&prefix));
        *objects = rest;
        mine
    }

    fn keep(&self, key: String, bytes: Vec<u8>) {
        if let Ok(mut objects) = self.objects.lock() {
            objects.push((key, bytes));
        }
    }
}

impl EarlyFrames for EarlyObjects {
    fn frames_final(&self, index: usize, frames: FinalFrames<'_>) {
        // Without timestamps the stored usage's time axis is the entry order, a column made
        // for it: made here and again for the stored frame, it would be held twice at once.
        if !frames.events.has_time {
            return;
        }
        let dir = device_dir(index, frames.device);
        let usage = || stored_usage(frames.usage.clone(), frames.events);
        let jobs: [(&str, &dyn Fn() -> PolarsResult<DataFrame>); 2] =
            [(USAGE, &usage), (LIFETIMES, &|| Ok(frames.lifetimes.clone()))];
        for (name, frame) in jobs {
            if !(frames.others_running)() {
                return;
            }
            let key = format!("{dir}/{name}");
            // An error is left to the storing stage, which encodes the frame again and says.
            if let Ok(bytes) = frame()
                .map_err(Into::into)
                .and_then(|df| parquet_bytes(&key, &df, RowGroups::One))
            {
                self.keep(key, bytes);
            }
        }
    }
}
