//! Why did it run out of memory, and what should change to fit? One room for every OOM,
//! whatever the evidence:
//!
//! - `oom`: each OOM of a snapshot explained from the trace at the failure (what was live,
//!   the step's phase, the allocator's state there);
//! - [`oom_cause`]: the one classifier and the one list of remedies, for snapshot and text
//!   OOMs alike; [`failure_facts`] what a failure leaves to reason from (live bytes by
//!   category, a generation's KV cache); `inference_remedies` the remedies of an inference run;
//! - `failed_step`: how much of the batch fits — the failed step's whole need extrapolated
//!   (repeated blocks, a CNN's pyramid of stages, a generation's cache at full length);
//! - [`jax_oom`]: XLA's out-of-memory text and the BFC allocator's dump, in JAX's terms.

pub(crate) mod failed_step;
pub mod failure_facts;
pub(crate) mod inference_remedies;
pub mod jax_oom;
pub(crate) mod oom;
pub mod oom_cause;
#[cfg(test)]
mod oom_cause_tests;
