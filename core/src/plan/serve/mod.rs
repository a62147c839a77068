//! The serving plan (`memlens plan --serve`): a vLLM or SGLang startup predicted from a model's
//! config before it runs, in the same figures a startup log gives (`files[].serving`), so the
//! log's analysis (`analysis::serving`) explains it and computes its remedies.
//!
//! - [`settings`]: the plan's settings, each from the request, the calibrating log or the
//!   engine's default.
//! - [`engine`]: what each engine (and vLLM version) does by default and how it draws its
//!   budget: utilization, the profile run's dummy batch, what it counts outside PyTorch.
//! - [`layout`]: the KV cache's bytes per token from the attention layout (GQA heads per GPU,
//!   MLA's latent, sliding windows).
//! - [`weights`]: the weights per GPU, tensor by tensor (`plan::params`), sharded by tensor
//!   parallelism and stored in their type.
//! - [`profile`]: the profile run's activation peak (the engine's dummy batch and sampler) and
//!   the CUDA graphs.
//! - [`budget`]: the startup those terms give: the KV cache's bytes and tokens, what fits.
//! - [`calibrate`]: a startup log's measured terms in place of the estimate's (what if the
//!   utilization, `max_model_len`, KV dtype or tensor parallelism changed).

pub mod budget;
pub mod calibrate;
pub mod engine;
pub mod layout;
pub mod profile;
pub mod settings;
pub mod weights;

pub use budget::serve_plan;
