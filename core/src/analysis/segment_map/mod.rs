//! The allocator's segment map at any trace entry: the snapshot's final segments with later
//! entries undone ([`state`]), and the checkpoints a server stores so that a query undoes only
//! a short window ([`checkpoints`], written and read as bytes by
//! [`crate::stored::checkpoint_frame`]).
//!
//! Layers, each using only those below it: [`block`] → `block_chunks` → `blocks` (a
//! segment's blocks) → `by_address` (a state's segments) → [`state`] (the replay) →
//! [`checkpoints`] (→ the stored form, `crate::stored::checkpoint_frame`); [`entry_rows`] and [`detail`] (how much of a map a
//! view lists) sit beside them, and `packed_blocks` / `packed_entries` pack what a stored
//! checkpoint holds.

pub mod block;
mod block_chunks;
#[cfg(test)]
mod block_map_tests;
mod blocks;
mod by_address;
pub mod checkpoints;
pub mod detail;
pub mod entry_rows;
pub(crate) mod packed_blocks;
pub(crate) mod packed_entries;
pub mod state;

pub use checkpoints::{SegmentCheckpoints, CHECKPOINTS};
pub use detail::SegmentDetail;
pub use entry_rows::EntryRows;
pub use state::{segment_map_at, segment_map_at_time, SegmentState, StateStats};
