//! What is the peak made of? One room for the peak's anatomy, whatever the code that made it:
//!
//! - [`categories`]: every allocation placed in a category (parameter, gradient, optimizer
//!   state, activation, temporary, input, cache, other) from labels, frames, the step's
//!   structure and sizes; `labels` what the entries and the user's rules say outright;
//! - `training_structure`: the forward, backward and optimizer step told from the trace
//!   alone; `size_rules` what sizes say beside lives;
//! - `peak`: when usage peaked and what was live, grouped by stack;
//! - [`jax_anatomy`]: a JAX device memory profile's peak by kind and by program.

pub mod categories;
pub mod jax_anatomy;
pub(crate) mod labels;
pub(crate) mod peak;
pub(crate) mod size_rules;
pub(crate) mod training_structure;
