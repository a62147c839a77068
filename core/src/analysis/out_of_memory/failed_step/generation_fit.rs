//! How much of a generation's batch fits when its prefill or a decode step ran out of memory
//! ([`OomFit`]). The weights and whatever lived before the request do not scale; the key/value
//! cache and the step's working set scale with the batch. The need is the larger of:
//! - **the prefill's**: its working set at the failure (with the request) plus the cache of
//!   every layer at the prompt's length (the layers the prefill has not reached yet add theirs
//!   before their own working set);
//! - **the last decode step's**: the cache at the generation's full length, plus, for a cache
//!   grown by `torch.cat`, the copy of one tensor each growth makes, plus the decode step's own
//!   working set when a decode step is what failed.
//!
//! The full length (prompt + `max_new_tokens`) is not in a snapshot: the cache is counted at the
//! length it had at the failure, which the rest of the generation only adds to — the need is a
//! lower bound and the fraction an upper bound, as `how` says.

use memlens_api::{GenerationFit, OomCause, OomFit, OomPhase};

use super::batch_fit::{failure_limit, Blocks};
use super::{live_at, FailedStep, Row};
use crate::analysis::kv_cache::KvCacheReading;
use crate::analysis::oom_cause::{human, KvAtFailure, OomFacts};
use crate::analysis::usage::Usage;

/// What the generation's fit reads beside the rows.
pub(super) struct GenerationStep<'a, 'u> {
    pub rows: &'a [Row],
    pub step: &'a FailedStep,
    pub usage: &'a Usage<'u>,
    pub oom: usize,
    pub facts: &'a OomFacts,
    pub cause: OomCause,
    pub blocks: Option<&'a Blocks>,
    pub kv: &'a KvCacheReading,
}

impl GenerationStep<'_, '_> {
    /// The cache at the failure, with what the rest of the generation adds to it as far as the
    /// snapshot says.
    pub(super) fn kv_at_failure(&self) -> KvAtFailure {
        let now = self.kv.after(self.oom as i64);
        // In the prefill, the layers not reached yet add a key and a value tensor each.
        let layers = self.weights().and_then(|w| w.layers).or(self.blocks.map(|b| b.layers));
        let tensors = match (self.step.phase, layers) {
            (OomPhase::Prefill, Some(l)) => (2 * l).max(now.tensors),
            _ => now.tensors,
        };
        let all_layers = now.bytes + (tensors - now.tensors) as i64 * now.largest_tensor;
        let copy = if self.kv.grown_by_copy() && tensors > 0 {
            all_layers / tensors as i64
        } else {
            0
        };
        KvAtFailure {
            bytes_now: now.bytes + now.growth_copy_bytes,
            bytes_full: all_layers,
            growth_copy_full: copy,
            tensors_full: tensors,
            tokens_now: now.tokens,
            sequences: self.kv.sequences,
            grown_by_copy: self.kv.grown_by_copy(),
            weight_dtype_bytes: self.weights().map(|w| w.dtype_bytes),
        }
    }

    pub(super) fn fit(&self, kv: &KvAtFailure) -> OomFit {
        let at = self.oom as i64;
        let start = self.step.failing.start;
        let before = |r: &Row| usize::try_from(r.alloc).map_or(true, |a| a < start);
        let fixed: i64 = self
            .rows
            .iter()
            .filter(|r| live_at(r, at) && before(r))
            .map(|r| r.size)
            .sum();
        let made: i64 = self
            .rows
            .iter()
            .filter(|r| live_at(r, at) && !before(r))
            .map(|r| r.size)
            .sum();
        // The step's working set: what the request made and holds, less the cache.
        let working = (made - kv.bytes_now).max(0) + self.facts.requested;
        let prefill = working + kv.bytes_full;
        let decode_working = if self.step.phase == OomPhase::Decode {
            working
        } else {
            0
        };
        let decode = kv.bytes_full + kv.growth_copy_full + decode_working;
        let scaled = prefill.max(decode);
        let limit = failure_limit(self.cause, self.facts, self.usage, self.oom);
        let overhead = (self.usage.reserved_before(self.oom) as f64
            / self.usage.allocated_before(self.oom).max(1) as f64)
            .max(1.0);
        let budget = (limit as f64 / overhead) as i64;
        let x = if fixed > budget {
            0.0
        } else {
            ((budget - fixed) as f64 / scaled.max(1) as f64).clamp(0.0, 1.0)
        };
        OomFit {
            batch_fraction: (x * 1000.0).floor() / 1000.0,
            limit_bytes: limit,
            fixed_bytes: fixed,
            batch_bytes: scaled,
            how: self.how(kv, fixed, prefill, decode),
            generation: Some(GenerationFit {
                budget_bytes: budget,
                prefill_bytes: prefill,
                decode_bytes: decode,
                cache_bytes: kv.bytes_full + kv.growth_copy_full,
                cache_tokens: kv.tokens_now.filter(|_| self.step.phase == OomPhase::Decode),
                prompt_tokens: self.kv.prompt_tokens(),
            }),
        }
    }

    fn how(&self, kv: &KvAtFailure, fixed: i64, prefill: i64, decode: i64) -> String {
        let (length, past) = match (self.step.phase, kv.tokens_now) {
            (OomPhase::Decode, Some(t)) => (
                format!("the {t} tokens a sequence it held at the failure"),
                format!("{t}"),
            ),
            (OomPhase::Decode, None) => ("the length it had at the failure".to_owned(), "that".to_owned()),
            _ => ("the prompt's length".to_owned(), "the prompt".to_owned()),
        };
        let layers = if self.step.phase == OomPhase::Prefill && kv.tensors_full > 0 {
            format!(" over all {} of its key and value tensors", kv.tensors_full)
        } else {
            String::new()
        };
        let copy = if kv.grown_by_copy {
            format!(
                ", plus the {} copy torch.cat makes of one tensor at each growth",
                human(kv.growth_copy_full)
            )
        } else {
            String::new()
        };
        format!(
            "Generation: the weights and what lived before the request ({}) do not scale; the key/value cache and the \
             step's working set do. The prefill needs {} at this batch (its working set at the failure and the cache{}); \
             the last decode step needs {} (the cache at {}{}). The generation's full length (prompt + max_new_tokens) \
             is not in the snapshot: every token generated past {} adds to the cache, so this need is a lower bound and \
             the fraction an upper bound — at twice the tokens a sequence the cache doubles.",
            human(fixed),
            human(prefill),
            layers,
            human(decode),
            length,
            copy,
            past,
        )
    }
}

/// What the weights' sizes say of a decoder: its dtype and its layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct WeightLayout {
    /// Bytes a value: a norm's weight (hidden × b) squared over b is a square projection's
    /// size (hidden² × b) for one b of 4, 2, 1 — the one most sizes agree on.
    pub dtype_bytes: i64,
    /// Layers, where the norms (hidden × b) number 2 × layers + 1 (a pre-norm decoder: two a
    /// layer and a final one, as Llama, Mistral, Qwen and Gemma have).
    pub layers: Option<usize>,
}

impl GenerationStep<'_, '_> {
    fn weights(&self) -> Option<WeightLayout> {
        let mut count: rustc_hash::FxHashMap<i64, usize> = rustc_hash::FxHashMap::default();
        for r in self
            .rows
            .iter()
            .filter(|r| r.category == memlens_api::Category::Parameter)
        {
            *count.entry(r.size).or_default() += 1;
        }
        weight_layout(&count)
    }
}

/// [`WeightLayout`] from the parameters' sizes and how many have each.
pub(super) fn weight_layout(count: &rustc_hash::FxHashMap<i64, usize>) -> Option<WeightLayout> {
    // (matches, dtype, norm size) for each norm candidate (at least 256 values).
    let mut best: Option<(usize, i64, i64)> = None;
    for (&norm, &n) in count {
        for d in [4i64, 2, 1] {
            if norm % d != 0 || norm / d < 256 {
                continue;
            }
            let Some(&square) = count.get(&(norm / d * norm)) else {
                continue;
            };
            let matches = n + square;
            if best.is_none_or(|b| matches > b.0) {
                best = Some((matches, d, norm));
            }
        }
    }
    let (_, dtype_bytes, norm) = best?;
    let norms = count[&norm];
    Some(WeightLayout {
        dtype_bytes,
        layers: (norms % 2 == 1 && norms >= 3).then_some(norms / 2),
    })
}

#[cfg(test)]
mod tests {
    use super::weight_layout;
    use rustc_hash::FxHashMap;

    /// A Llama of hidden 1024, 8 layers, MLP 2816, vocabulary 32000: its parameters' sizes.
    fn llama(dtype: i64) -> FxHashMap<i64, usize> {
        let h = 1024;
        let mut c = FxHashMap::default();
        c.insert(h * dtype, 17); // two norms a layer and the final one
        c.insert(h * h * dtype, 32); // q, k, v, o (no GQA)
        c.insert(2816 * h * dtype, 24); // gate, up, down
        c.insert(32000 * h * dtype, 2); // embedding, lm_head
        c
    }

    #[test]
    fn the_weights_dtype_and_layers_are_read_from_their_sizes() {
        for dtype in [4, 2] {
            let w = weight_layout(&llama(dtype)).expect("a layout");
            assert_eq!((w.dtype_bytes, w.layers), (dtype, Some(8)), "dtype {dtype}");
        }
        // A model whose sizes hold no norm and square projection says nothing.
        let mut c = FxHashMap::default();
        c.insert(3 * 7 * 1000, 5);
        assert_eq!(weight_layout(&c), None);
    }
}
