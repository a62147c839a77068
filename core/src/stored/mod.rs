//! What a stored report holds, owned in one place: each device's frames ([`frames`]: usage,
//! reserved, lifetimes with their categories, fragmentation, the script's metadata) and how they
//! are handed over while analyses run ([`Storable`]), the lifetimes' addresses read from the
//! trace as they are written ([`LifetimeAddresses`], made by the lifetimes analysis), the segment map's checkpoints as stored
//! frames ([`checkpoint_frame`]), and the layout's version ([`SCHEMA_VERSION`]). The server's
//! storage keeps these as blobs under its keys and encodes them as Parquet; it reads nothing
//! of [`crate::analysis`] but through this module.
//!
//! Invariant: a change to what these frames hold that an older reader would misread, or that
//! this code would misread in an older report, raises [`SCHEMA_VERSION`].

pub mod checkpoint_frame;
pub mod frames;

pub use crate::analysis::lifetime_addresses::{AddressForm, LifetimeAddresses};
pub use crate::analysis::segment_map::{EntryRows, SegmentCheckpoints, SegmentDetail, CHECKPOINTS};
pub use crate::analysis::DeviceEvents;
pub use checkpoint_frame::{stored_checkpoint, stored_objects, StoredCheckpoint, StoredObject};
pub use frames::{alloc_metadata, DeviceFrames, HandOver, Storable};

use memlens_api::AnalyzeOutput;

/// The stored layout written now. Raise it when a change means an older reader would misread
/// what this code writes, or this code an older report; keep reading what it can
/// ([`OLDEST_READABLE`]): a report outside the readable versions is analysed again from its
/// kept uploads when it is next opened, never lost.
pub const SCHEMA_VERSION: u32 = 2;
/// The oldest layout this code reads. Version 1 is every report stored before the version was
/// recorded, in each of the forms the server's `tests/old_reports.rs` writes.
pub const OLDEST_READABLE: u32 = 1;

/// A stored summary as today's reader answers it: reports stored before run overviews existed
/// get theirs from their files.
pub fn summary_as_read(mut summary: AnalyzeOutput) -> AnalyzeOutput {
    if summary.run.is_none() {
        summary.run = crate::analysis::run::run_overview(&summary.files);
    }
    summary
}
