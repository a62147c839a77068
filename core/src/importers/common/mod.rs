//! What several importers share: the capped, line-numbered reader of text formats ([`lines`]),
//! NVML logs' timestamp and unit parsing ([`nvml`]), and the lowering of Nsight Systems' driver
//! allocations into the snapshot tables ([`nsys`]), sizes as PyTorch prints them ([`sizes`]) and
//! the scan of a text for every kind of evidence it holds ([`text_evidence`]).

pub mod lines;
pub mod nsys;
pub mod nvml;
pub mod sizes;
pub mod text_evidence;
