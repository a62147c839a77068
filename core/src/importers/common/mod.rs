//! What several importers share: the capped, line-numbered reader of text formats ([`lines`]),
//! NVML logs' timestamp and unit parsing ([`nvml`]), and the lowering of Nsight Systems' driver
//! allocations into the snapshot tables ([`nsys`]), sizes as PyTorch prints them ([`sizes`]) and
//! a pasted text or log read as numbered lines ([`text_lines`]).

pub mod lines;
pub mod nsys;
pub mod nvml;
pub mod sizes;
pub mod text_lines;
