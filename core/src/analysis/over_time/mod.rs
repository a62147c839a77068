//! How does memory move over the run, and what leaks? One room for memory over time:
//!
//! - [`usage`]: allocated (requested bytes) and reserved over time, with memory that existed
//!   before recording counted; [`lifetimes`] one row per allocation;
//! - [`fragmentation`]: reserved-but-free memory and the largest free block over time;
//! - [`leaks`]: allocations piling up across iterations;
//! - [`pools`]: the allocator's default and private pools (MemPool, CUDA graph);
//! - `stalls`: frees that waited on another stream (`record_stream`).

pub mod fragmentation;
pub mod leaks;
pub mod lifetimes;
pub mod pools;
pub(crate) mod stalls;
pub mod usage;
