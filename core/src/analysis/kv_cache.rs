//! A generation's key/value cache, read from the allocations the categories placed as
//! `kv_cache` (P25): its bytes at a moment, how many tokens a sequence it holds, how many
//! sequences are generated at once, and what one token of one sequence costs.
//!
//! - **Grown by `torch.cat`** (Hugging Face's `DynamicCache`, most hand-written caches): every
//!   step makes each key and value tensor again, one token of every sequence longer, and frees
//!   the old one just after. Such a pair (same stack, the new one larger, the old freed within a
//!   few entries) tells the growth a step — one token of every sequence — so a tensor's tokens
//!   are its size over that growth. At a moment, an old tensor whose successor already exists
//!   is the copy being replaced, not the cache.
//! - **Sequences**: generation's own int64 token ids and attention mask (batch × length, made
//!   by `transformers/generation/`) grow by 8 bytes a sequence every step.
//! - A cache allocated once at full length (`StaticCache`, paged blocks) shows neither growth:
//!   its bytes are read, its tokens are not.

use memlens_api::{CategoryRule, KvCacheSummary};
use polars_core::prelude::*;
use rustc_hash::FxHashMap;

use super::whatif::categories_of;
use crate::stacks::StackResolver;
use crate::tables::columns::lifetimes as lt_col;
use crate::tables::int_slice::IntSlice;
use crate::tables::stack_ids::StackIds;

/// Entries between the new tensor's allocation and the old one's free, at most, for the pair to
/// be one growth (the free is requested, then completed).
const PAIR_GAP: i64 = 4;

/// The least a key/value cache holds to be summarised: a frame named for a cache that made a
/// few bytes (a length, a flag) is no model's cache.
pub const MIN_CACHE_BYTES: i64 = 1 << 20;

/// One allocation of the cache.
#[derive(Debug, Clone, Copy)]
struct CacheRow {
    alloc: i64,
    /// Entry index of its free; -1 when never freed.
    free: i64,
    size: i64,
    /// Entry index at which a larger tensor of the same stack replacing it was made.
    replaced_at: Option<i64>,
}

impl CacheRow {
    /// Live once entry `entry` is done.
    fn live_after(&self, entry: i64) -> bool {
        self.alloc <= entry && (self.free < 0 || self.free > entry)
    }
}

/// The cache at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KvAt {
    /// The cache's tensors live then, without old copies being replaced.
    pub bytes: i64,
    pub tensors: usize,
    /// Old tensors whose larger successor was already made.
    pub growth_copy_bytes: i64,
    /// The largest of its tensors.
    pub largest_tensor: i64,
    /// Tokens a sequence, when the growth says.
    pub tokens: Option<i64>,
}

/// What the snapshot says of its key/value cache (see the module's list).
#[derive(Debug, Clone, Default)]
pub struct KvCacheReading {
    rows: Vec<CacheRow>,
    /// Bytes one step adds to one tensor (one token of every sequence), when grown by copy.
    pub growth_per_tensor: Option<i64>,
    /// Sequences generated at once, when generation's token ids show it.
    pub sequences: Option<i64>,
    /// The trace holds the whole history (it frees nothing made before it): its first cache
    /// tensor is the prefill's.
    complete: bool,
}

/// Whether a frame is Hugging Face generation's own code (its loop, its logits processors and
/// stopping criteria), not the model it calls.
pub fn is_generation_frame(frame: &str) -> bool {
    frame.contains("transformers/generation/")
}

impl KvCacheReading {
    /// Reads the cache from lifetimes that carry their category columns; `None` when what is
    /// placed as `kv_cache` never held [`MIN_CACHE_BYTES`] at once.
    pub fn read(lifetimes: &DataFrame, stacks: &StackResolver, complete: bool) -> PolarsResult<Option<KvCacheReading>> {
        let placed = categories_of(lifetimes)?;
        if !placed.iter().any(|p| p.1 == CategoryRule::KvCache) {
            return Ok(None);
        }
        let alloc = lt_col::ALLOC_IDX.slice(lifetimes)?;
        let free = lt_col::FREE_IDX.slice(lifetimes)?;
        let size = IntSlice::of(lifetimes, lt_col::SIZE)?;
        let stack = StackIds::of(lifetimes, lt_col::STACK)?;
        let mut cache: Vec<(CacheRow, u32)> = Vec::new();
        // Generation's own allocations by stack, for the sequences.
        let mut generation: FxHashMap<u32, Vec<(i64, i64)>> = FxHashMap::default();
        let mut is_generation: FxHashMap<u32, bool> = FxHashMap::default();
        for r in 0..lifetimes.height() {
            let s = stack.at(r);
            let row = CacheRow {
                alloc: i64::from(alloc[r]),
                free: i64::from(free[r]),
                size: size.at(r),
                replaced_at: None,
            };
            if placed[r].1 == CategoryRule::KvCache {
                cache.push((row, s));
            } else if *is_generation
                .entry(s)
                .or_insert_with(|| stacks.frames(s).first().is_some_and(|f| is_generation_frame(f)))
            {
                generation.entry(s).or_default().push((row.alloc, row.size));
            }
        }
        cache.sort_by_key(|(r, _)| r.alloc);
        let growth = pair_growths(&mut cache);
        let reading = KvCacheReading {
            rows: cache.into_iter().map(|(r, _)| r).collect(),
            growth_per_tensor: growth,
            sequences: sequences_of(generation),
            complete,
        };
        Ok((reading.max_bytes() >= MIN_CACHE_BYTES).then_some(reading))
    }

    /// The prompt's tokens a sequence: the first tensor the cache made (the prefill's) over the
    /// growth a step, when grown by copy and the trace holds its start (a ring buffer that
    /// dropped the start leaves a later step's tensor first).
    pub fn prompt_tokens(&self) -> Option<i64> {
        let g = self.growth_per_tensor.filter(|&g| g > 0 && self.complete)?;
        let first = self.rows.iter().find(|r| r.alloc >= 0)?;
        (first.size % g == 0).then_some(first.size / g)
    }

    /// Whether the cache was grown by `torch.cat`.
    pub fn grown_by_copy(&self) -> bool {
        self.growth_per_tensor.is_some()
    }

    /// The cache once entry `entry` is done (an OOM entry allocates nothing: what it failed
    /// beside).
    pub fn after(&self, entry: i64) -> KvAt {
        let mut out = KvAt::default();
        let live = || self.rows.iter().filter(move |r| r.live_after(entry));
        for r in live() {
            if r.replaced_at.is_some_and(|n| n <= entry) {
                out.growth_copy_bytes += r.size;
            } else {
                out.bytes += r.size;
                out.largest_tensor = out.largest_tensor.max(r.size);
            }
        }
        // The cache's bookkeeping (its lengths, a few bytes) is no key or value tensor.
        out.tensors = live()
            .filter(|r| r.replaced_at.is_none_or(|n| n > entry) && r.size * 1024 >= out.largest_tensor)
            .count();
        out.tokens = self
            .growth_per_tensor
            .filter(|_| out.largest_tensor > 0)
            .map(|g| (out.largest_tensor as f64 / g as f64).round() as i64);
        out
    }

    /// The most the cache held at once, copies included.
    fn max_bytes(&self) -> i64 {
        let mut events: Vec<(i64, i64)> = Vec::with_capacity(self.rows.len() * 2);
        for r in &self.rows {
            events.push((r.alloc, r.size));
            if r.free >= 0 {
                events.push((r.free, -r.size));
            }
        }
        events.sort_by_key(|e| (e.0, e.1 < 0));
        let (mut cur, mut max) = (0i64, 0i64);
        for (_, d) in events {
            cur += d;
            max = max.max(cur);
        }
        max
    }

    /// Bytes one token of one sequence costs over all the cache's tensors, at a moment where
    /// the tokens and sequences are known.
    pub fn bytes_per_token(&self, at: &KvAt) -> Option<i64> {
        let tokens = at.tokens.filter(|&t| t > 0)?;
        let seqs = self.sequences.filter(|&b| b > 0)?;
        Some((at.bytes as f64 / (tokens * seqs) as f64).round() as i64)
    }

    /// The summary at the peak (entry `peak`; the end of the trace when the peak predates it).
    pub fn summary(&self, peak: Option<usize>) -> KvCacheSummary {
        let at = self.after(peak.map_or(i64::MAX - 1, |p| p as i64));
        let per_token = self.bytes_per_token(&at);
        let how = match (self.growth_per_tensor, self.sequences) {
            (Some(g), Some(b)) => format!(
                "Grown by torch.cat: each step makes every key and value tensor again, {g} bytes (one token of each of \
                 the {b} sequences) longer; the sequences from generation's token ids, which grow by 8 bytes a sequence \
                 a step."
            ),
            (Some(g), None) => format!(
                "Grown by torch.cat, {g} bytes a tensor a step (one token of every sequence); no token ids of \
                 generation's own grow in the trace to tell how many sequences share it."
            ),
            (None, _) => "Allocated once, not grown step by step (a static cache, paged blocks, or a trace that \
                          ends before any step grew it): its tokens are not read from its sizes."
                .to_owned(),
        };
        KvCacheSummary {
            bytes_at_peak: at.bytes,
            tensors_at_peak: at.tensors,
            growth_copy_bytes_at_peak: at.growth_copy_bytes,
            max_bytes: self.max_bytes(),
            grown_by_copy: self.grown_by_copy(),
            tokens_at_peak: at.tokens,
            sequences: self.sequences,
            bytes_per_token: per_token,
            bytes_per_sequence: per_token.zip(at.tokens).map(|(p, t)| p * t),
            how,
        }
    }
}

/// Marks each cache tensor replaced by a larger one of the same stack made just before its free
/// (a `torch.cat` growing it), and returns the growth a step when such pairs are common: the
/// most frequent size difference, found in at least four pairs.
fn pair_growths(cache: &mut [(CacheRow, u32)]) -> Option<i64> {
    let allocs: Vec<i64> = cache.iter().map(|(r, _)| r.alloc).collect();
    let mut diffs: FxHashMap<i64, usize> = FxHashMap::default();
    for i in 0..cache.len() {
        let (old, stack) = cache[i];
        if old.free < 0 {
            continue;
        }
        let from = allocs.partition_point(|&a| a < old.free - PAIR_GAP);
        let to = allocs.partition_point(|&a| a < old.free);
        let successor = (from..to)
            .rev()
            .find(|&j| j != i && cache[j].1 == stack && cache[j].0.size > old.size);
        if let Some(j) = successor {
            cache[i].0.replaced_at = Some(cache[j].0.alloc);
            *diffs.entry(cache[j].0.size - old.size).or_default() += 1;
        }
    }
    diffs
        .into_iter()
        .filter(|&(_, n)| n >= 4)
        .max_by_key(|&(d, n)| (n, d))
        .map(|(d, _)| d)
}

/// Sequences from generation's int64 tensors that grow by a constant every step (its token ids
/// and attention mask, batch × length): the growth over 8 bytes. The stack showing the most
/// such steps wins.
fn sequences_of(generation: FxHashMap<u32, Vec<(i64, i64)>>) -> Option<i64> {
    let mut best: Option<(usize, i64)> = None;
    for (_, mut rows) in generation {
        rows.sort_by_key(|r| r.0);
        let mut counts: FxHashMap<i64, usize> = FxHashMap::default();
        for w in rows.windows(2) {
            let d = w[1].1 - w[0].1;
            if d > 0 && d % 8 == 0 && w[1].1 % d == 0 {
                *counts.entry(d).or_default() += 1;
            }
        }
        if let Some((d, n)) = counts.into_iter().max_by_key(|&(d, n)| (n, d)) {
            if n >= 3 && best.is_none_or(|b| n > b.0) {
                best = Some((n, d / 8));
            }
        }
    }
    best.map(|b| b.1)
}
