//! Device objects encoded before their file's analyses end: the pipeline hands each over as
//! soon as it is final ([`Storable`]) — the ingest asks for them while the device's other
//! analysis thread still runs ([`HandOver::WhileOthersRun`](memlens_core::pipeline::HandOver)),
//! so the thread that would wait encodes instead — and, before a large trace lets go of its
//! addresses, those that need them.
//!
//! [`EarlyObjects`] encodes them by key, and [`write_file`](super::write_file) puts those
//! bytes instead of encoding the objects again in the storing stage.

use std::sync::Mutex;

use memlens_core::pipeline::{ObjectSink, Storable};

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

impl ObjectSink for EarlyObjects {
    fn ready(&self, index: usize, device: i64, object: Storable<'_>) {
        let dir = FileKeys::of(index).device(device);
        let (key, bytes) = match object {
            Storable::Usage(frame) => {
                let key = dir.usage();
                let bytes = parquet_bytes(&key, &frame, RowGroups::One);
                (key, bytes)
            }
            Storable::Lifetimes { lifetimes, addresses } => {
                let key = dir.lifetimes();
                // Handed again before the trace lets go of its addresses: what was encoded stays.
                if self.holds(&key) {
                    return;
                }
                let bytes = lifetimes_bytes(&key, lifetimes, addresses);
                (key, bytes)
            }
            Storable::SegmentWindow { window, object } => {
                let key = dir.segment_window(window);
                if self.holds(&key) {
                    return;
                }
                let bytes = segment_object_bytes(&key, &object);
                (key, bytes)
            }
        };
        // An error is left to the storing stage, which encodes the object again and says.
        if let Ok(bytes) = bytes {
            self.keep(key, bytes);
        }
    }
}
