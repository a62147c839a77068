//! What several importers share: the capped, line-numbered reader of text formats ([`lines`]),
//! NVML logs' timestamp and unit parsing ([`nvml`]), and the lowering of Nsight Systems' driver
//! allocations into the snapshot tables ([`nsys`]), sizes as PyTorch prints them ([`sizes`]) and
//! a pasted text or log read as numbered lines ([`text_lines`]); what is wrong with a log's line
//! ([`line_problem`]).

pub mod line_problem;
pub mod lines;
pub mod nsys;
pub mod nvml;
pub mod sizes;
pub mod text_lines;
