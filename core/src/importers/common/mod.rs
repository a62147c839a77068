//! What several importers share: the capped, line-numbered reader of text formats ([`lines`]),
//! NVML logs' timestamp and unit parsing ([`nvml`]), and the lowering of Nsight Systems' driver
//! allocations into the snapshot tables ([`nsys`]).

pub mod lines;
pub mod nsys;
pub mod nvml;
