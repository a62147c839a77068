//! Did this change make memory worse? One room for runs side by side:
//!
//! - [`compare`]: two devices (of two runs, or two ranks) side by side, A − B, with
//!   `compare_verdict` its one-line verdict;
//! - [`check`]: a run held to limits on how far it may grow from a baseline's (CI's gate);
//! - [`run`]: the ranks of one job side by side (from file summaries only).

pub mod check;
pub mod compare;
pub(crate) mod compare_verdict;
pub mod run;
