//! What an out-of-memory failure leaves to reason from, shared by the remedies of training and
//! of inference ([`super::oom_cause`], [`super::inference_remedies`]): what was live at the
//! failure by category, a generation's key/value cache there, and bytes written for people.

use memlens_api::{Category, CategoryBytes};

/// Bytes for people: `1.50 GiB`, `320.0 MiB`, `12 KiB`.
pub fn human(b: i64) -> String {
    let f = b as f64;
    if b.abs() >= 1 << 30 {
        format!("{:.2} GiB", f / (1u64 << 30) as f64)
    } else if b.abs() >= 1 << 20 {
        format!("{:.1} MiB", f / (1 << 20) as f64)
    } else {
        format!("{} KiB", (f / 1024.0).round())
    }
}

/// What was live at the failure, by category, when a snapshot says (text does not).
#[derive(Debug, Clone, Copy, Default)]
pub struct LiveAtFailure {
    pub parameter: i64,
    pub gradient: i64,
    pub optimizer_state: i64,
    pub activation: i64,
    pub input: i64,
    pub temporary: i64,
    /// Long-lived state that is none of the above (a KV cache, a workspace).
    pub cache: i64,
    pub other: i64,
    /// Layers the repeated blocks' activations show (for checkpointing), when seen.
    pub layers: Option<usize>,
    /// An Adam-style optimizer was creating its state when it failed: the state it will hold
    /// once made (2 × the parameters it steps), which `optimizer_state` may not reach yet.
    pub optimizer_state_to_come: Option<i64>,
    /// A generation's key/value cache at the failure, when the OOM is in one.
    pub kv: Option<KvAtFailure>,
}

/// A generation's key/value cache at an OOM ([`crate::analysis::kv_cache`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct KvAtFailure {
    /// What the cache held at the failure (a copy being replaced included).
    pub bytes_now: i64,
    /// The cache the rest of the generation holds as far as the snapshot says: every layer's
    /// tensors, at the length it had (a lower bound of the full length's).
    pub bytes_full: i64,
    /// The copy of one tensor a `torch.cat` growth makes (0 for a cache not grown by copy).
    pub growth_copy_full: i64,
    pub tensors_full: usize,
    /// Tokens a sequence at the failure, when the growth says.
    pub tokens_now: Option<i64>,
    /// Sequences generated at once, when the token ids say.
    pub sequences: Option<i64>,
    pub grown_by_copy: bool,
    /// The weights' bytes a value (4: fp32, 2: bf16/fp16), when the repeated blocks say.
    pub weight_dtype_bytes: Option<i64>,
}

impl LiveAtFailure {
    pub fn of(live: &[CategoryBytes]) -> LiveAtFailure {
        let mut l = LiveAtFailure::default();
        for c in live {
            let slot = match c.category {
                Category::Parameter => &mut l.parameter,
                Category::Gradient => &mut l.gradient,
                Category::OptimizerState => &mut l.optimizer_state,
                Category::Activation => &mut l.activation,
                Category::Input => &mut l.input,
                Category::Temporary => &mut l.temporary,
                Category::Cache => &mut l.cache,
                Category::Other => &mut l.other,
            };
            *slot += c.bytes;
        }
        l
    }
}
