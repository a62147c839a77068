//! Lowering decoded pickle values into the canonical snapshot columns.
//!
//! Two halves: [`TraceLowering`] is the VM's append hook that turns each trace-entry dict into a
//! row the moment it is appended to its list (so the 2.7 M-entry benchmark never exists as an
//! object tree), and [`lower_root`] walks the small rest of the snapshot (segments, blocks,
//! settings, annotations) by schema once decoding is done. Frame lists shared through the
//! pickle memo become shared stack ids (`frames`); the rows' columns are filled beside the
//! decoder (`row_pipe`).

mod frames;
mod root;
mod row_pipe;
mod trace;

use frames::FrameKeys;
pub use root::lower_root;
pub use trace::TraceLowering;
