//! The memory and IO machinery under the domain: none of it knows what a trace is.
//!
//! - [`prefetch`] asks the kernel for a file's pages ahead of the reader;
//! - [`fault_ahead`] faults a growing column's pages in on another thread, so the importer
//!   that fills it does not stall on page faults;
//! - [`background_drop`] frees large values on another thread, off the critical path;
//! - [`free_memory`] hands freed heap back to the operating system between ingests;
//! - `varint` packs the stored row lists and checkpoints.

pub mod background_drop;
pub mod fault_ahead;
pub mod free_memory;
pub mod prefetch;
#[cfg(test)]
pub(crate) mod testing;
#[cfg(feature = "analysis")]
pub(crate) mod varint;
