//! `SegmentBlocks`: one segment's blocks by address, as the segment-map replay changes them.
//!
//! The replay finds, frees, carves and merges blocks for nearly every trace entry it undoes.
//! A segment holds tens of blocks most of the time, a few hold thousands (an expandable segment, a fragmented large one, one a leak fills). Few
//! blocks are one vector sorted by address — a binary search, and a move of at most
//! [`TO_MAP`] blocks on an insert or a remove —, far cheaper than a `BTreeMap`'s range
//! searches at that size (they were most of the replay); many are [`BlockChunks`], short
//! sorted vectors whose cost barely grows with them (they were a `BTreeMap`, whose descents
//! were most of the replay of a segment that gathers a leaked block each iteration). A
//! segment moves to the chunks above
//! [`TO_MAP`] blocks and back below [`TO_VEC`]. Both hold the same map from address to block:
//! the tests apply random operations to both and to a plain `BTreeMap`.

use super::block::Block;
use super::block_chunks::BlockChunks;

/// Blocks above which a segment's blocks are [`BlockChunks`].
const TO_MAP: usize = 128;
/// Blocks below which they are a sorted vector again.
const TO_VEC: usize = 32;

/// A segment's blocks, keyed by address, at most one per address, in address order.
#[derive(Debug, Clone)]
pub(crate) enum SegmentBlocks {
    Few(Vec<(i64, Block)>),
    Many(BlockChunks),
}

impl Default for SegmentBlocks {
    fn default() -> SegmentBlocks {
        SegmentBlocks::Few(Vec::new())
    }
}

impl SegmentBlocks {
    /// One block.
    pub(crate) fn one(addr: i64, block: Block) -> SegmentBlocks {
        SegmentBlocks::Few(vec![(addr, block)])
    }

    /// The blocks `blocks` yields, `len` of them, in address order as a checkpoint keeps them:
    /// taken as they come, with no sort and no copy (building a stored checkpoint's state
    /// was a third of a segment map's time, most of it sorting and copying the blocks of a
    /// segment that holds many). Blocks out of order, which only a checkpoint not written
    /// here holds, are sorted as [`FromIterator`] does.
    pub(crate) fn from_address_order(mut blocks: impl Iterator<Item = (i64, Block)>, len: usize) -> SegmentBlocks {
        if len > TO_MAP {
            return match BlockChunks::from_rising(&mut blocks, len) {
                Ok(chunks) if chunks.len() > TO_MAP => SegmentBlocks::Many(chunks),
                Ok(chunks) => SegmentBlocks::Few(chunks.into_vec()),
                Err(taken) => taken.into_iter().chain(blocks).collect(),
            };
        }
        let v: Vec<(i64, Block)> = blocks.collect();
        match v.len() <= TO_MAP && v.windows(2).all(|w| w[0].0 < w[1].0) {
            true => SegmentBlocks::Few(v),
            false => v.into_iter().collect(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            SegmentBlocks::Few(v) => v.len(),
            SegmentBlocks::Many(m) => m.len(),
        }
    }

    /// `(address, block)` in address order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (i64, &Block)> + '_ {
        let (few, many) = match self {
            SegmentBlocks::Few(v) => (Some(v.iter().map(|(a, b)| (*a, b))), None),
            SegmentBlocks::Many(m) => (None, Some(m.iter())),
        };
        few.into_iter().flatten().chain(many.into_iter().flatten())
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &Block> + '_ {
        self.iter().map(|(_, b)| b)
    }

    /// The blocks, in address order.
    pub(crate) fn into_vec(self) -> Vec<(i64, Block)> {
        match self {
            SegmentBlocks::Few(v) => v,
            SegmentBlocks::Many(m) => m.into_vec(),
        }
    }

    pub(crate) fn get_mut(&mut self, addr: i64) -> Option<&mut Block> {
        match self {
            SegmentBlocks::Few(v) => {
                let i = v.binary_search_by_key(&addr, |e| e.0).ok()?;
                Some(&mut v[i].1)
            }
            SegmentBlocks::Many(m) => m.get_mut(addr),
        }
    }

    /// The block that starts last at or before `addr`.
    pub(crate) fn last_at_or_before_mut(&mut self, addr: i64) -> Option<(i64, &mut Block)> {
        match self {
            SegmentBlocks::Few(v) => {
                let i = v.partition_point(|e| e.0 <= addr).checked_sub(1)?;
                let (a, b) = &mut v[i];
                Some((*a, b))
            }
            SegmentBlocks::Many(m) => m.last_at_or_before_mut(addr),
        }
    }

    /// Puts `block` at `addr`, replacing the block that started there.
    pub(crate) fn insert(&mut self, addr: i64, block: Block) {
        match self {
            SegmentBlocks::Few(v) => {
                match v.binary_search_by_key(&addr, |e| e.0) {
                    Ok(i) => v[i].1 = block,
                    Err(i) => v.insert(i, (addr, block)),
                }
                if v.len() > TO_MAP {
                    *self = SegmentBlocks::Many(BlockChunks::from_sorted(std::mem::take(v)));
                }
            }
            SegmentBlocks::Many(m) => {
                m.insert(addr, block);
            }
        }
    }

    /// Takes out the block at `addr` (the replay removes blocks only by merging them:
    /// [`SegmentBlocks::free_block`]).
    #[cfg(test)]
    pub(crate) fn remove(&mut self, addr: i64) -> Option<Block> {
        let removed = match self {
            SegmentBlocks::Few(v) => {
                let i = v.binary_search_by_key(&addr, |e| e.0).ok()?;
                return Some(v.remove(i).1);
            }
            SegmentBlocks::Many(m) => m.remove(addr),
        };
        self.few_again();
        removed
    }

    /// Moves every block of `other` in (at addresses after these, when segments join).
    pub(crate) fn append(&mut self, other: SegmentBlocks) {
        for (a, b) in other.into_vec() {
            self.insert(a, b);
        }
    }

    /// Back to a vector once the map holds few blocks.
    fn few_again(&mut self) {
        if let SegmentBlocks::Many(m) = self {
            if m.len() < TO_VEC {
                *self = SegmentBlocks::Few(std::mem::take(m).into_vec());
            }
        }
    }

    /// Makes the block at `addr` free (no request, no stack) and merges it with the free blocks
    /// right before and after it. A block of no size is freed but not merged.
    pub(crate) fn free_block(&mut self, addr: i64) {
        use memlens_api::BlockState::Inactive;
        match self {
            SegmentBlocks::Few(v) => {
                let Ok(i) = v.binary_search_by_key(&addr, |e| e.0) else {
                    return;
                };
                let cur = &mut v[i].1;
                cur.set_free();
                if cur.size <= 0 {
                    return;
                }
                let next = v.get(i + 1).map(|(n, b)| (*n, b.size, b.state));
                if let Some((n, size, state)) = next {
                    if n == addr + v[i].1.size && state == Inactive {
                        v[i].1.size += size;
                        v.remove(i + 1);
                    }
                }
                let prev = i.checked_sub(1).map(|j| (v[j].0, v[j].1.size, v[j].1.state));
                if let Some((p, size, state)) = prev {
                    if state == Inactive && p + size == addr {
                        v[i - 1].1.size += v[i].1.size;
                        v.remove(i);
                    }
                }
            }
            SegmentBlocks::Many(m) => {
                m.free_block(addr);
                self.few_again();
            }
        }
    }
}

impl FromIterator<(i64, Block)> for SegmentBlocks {
    /// Of two blocks at one address, the later one stays (as inserting them one by one would
    /// leave).
    fn from_iter<I: IntoIterator<Item = (i64, Block)>>(iter: I) -> SegmentBlocks {
        let mut pairs: Vec<(i64, Block)> = iter.into_iter().collect();
        pairs.sort_by_key(|e| e.0);
        let mut v: Vec<(i64, Block)> = Vec::with_capacity(pairs.len());
        for pair in pairs {
            match v.last_mut() {
                Some(last) if last.0 == pair.0 => *last = pair,
                _ => v.push(pair),
            }
        }
        match v.len() > TO_MAP {
            true => SegmentBlocks::Many(BlockChunks::from_sorted(v)),
            false => SegmentBlocks::Few(v),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use memlens_api::BlockState;

    use super::super::block_map_tests::{block, block_map_by_own_methods, random_step, same_blocks};
    use super::*;
    use crate::infra::testing::Lcg;

    block_map_by_own_methods!(SegmentBlocks);

    /// Random inserts, removes, frees, look-ups and joins, on blocks that tile a range and
    /// on blocks that do not: the vector, the chunks and the switch between them always hold
    /// what a plain `BTreeMap` holds, and answer as it does.
    #[test]
    fn few_or_many_blocks_hold_and_answer_what_a_map_does() {
        let mut was_many = false;
        for seed in 0..40u64 {
            let mut rng = Lcg(seed);
            let mut ours = SegmentBlocks::default();
            let mut want: BTreeMap<i64, Block> = BTreeMap::new();
            // Up to 400 blocks of 512 bytes: the vector, the chunks and both switches.
            let span = 200 + 200 * (seed % 2) as i64;
            for step in 0..4000 {
                let at = format!("seed {seed} step {step}");
                let addr = 512 * rng.below(span as u64) as i64;
                match rng.below(6) {
                    5 => {
                        // A segment splitting and joining again.
                        let (low, high): (Vec<_>, Vec<_>) =
                            ours.clone().into_vec().into_iter().partition(|e| e.0 < addr);
                        let mut joined: SegmentBlocks = low.into_iter().collect();
                        joined.append(high.into_iter().collect());
                        ours = joined;
                    }
                    op => {
                        let grow = rng.below(3) > 0 || want.len() < 8;
                        random_step(&mut ours, &mut want, &mut rng, op, addr, grow, &at);
                    }
                }
                was_many |= matches!(ours, SegmentBlocks::Many(_));
                assert_eq!(ours.len(), want.len(), "{at}");
                if step % 97 == 0 {
                    same_blocks(&ours, &want, &at);
                }
            }
            same_blocks(&ours, &want, &format!("seed {seed}"));
        }
        assert!(was_many, "the chunks were never used");
    }

    #[test]
    fn blocks_of_one_address_keep_the_last_as_inserting_them_would() {
        let b = |size| block(size, BlockState::Inactive);
        let ours: SegmentBlocks = vec![(1024, b(512)), (0, b(1024)), (1024, b(2048))]
            .into_iter()
            .collect();
        let got: Vec<(i64, i64)> = ours.iter().map(|(a, b)| (a, b.size)).collect();
        assert_eq!(got, vec![(0, 1024), (1024, 2048)]);
        let many: SegmentBlocks = (0..300).map(|i| (512 * i, b(512))).collect();
        assert!(matches!(many, SegmentBlocks::Many(_)));
        assert_eq!(many.len(), 300);
    }

    /// Blocks in address order, as a checkpoint keeps them, taken as they come; blocks out of
    /// order or at one address twice anywhere (first, last, in a chunk's middle, at a chunk's
    /// edge) sorted and kept as collecting them does: the same blocks, the same form, and
    /// chunks whose invariants hold.
    #[test]
    fn blocks_in_address_order_are_taken_as_they_come_and_others_as_collecting_them() {
        let b = |size| block(size, BlockState::ActiveAllocated);
        for n in [0usize, 1, 2, 31, 128, 129, 130, 300, 1000] {
            let rising: Vec<(i64, Block)> = (0..n as i64).map(|i| (512 * i, b(512 + i))).collect();
            let mut orders = vec![("rising", rising.clone())];
            for at in [0, 1, 15, 16, 17, n / 2, n.saturating_sub(2), n.saturating_sub(1)] {
                if at + 1 < n {
                    let mut swapped = rising.clone();
                    swapped.swap(at, at + 1);
                    orders.push(("swapped", swapped));
                    let mut twice = rising.clone();
                    twice[at + 1].0 = twice[at].0;
                    orders.push(("twice", twice));
                }
            }
            for (how, blocks) in orders {
                let at = format!("{n} blocks, {how}");
                let want: SegmentBlocks = blocks.clone().into_iter().collect();
                let ours = SegmentBlocks::from_address_order(blocks.into_iter(), n);
                let pairs = |m: &SegmentBlocks| m.iter().map(|(a, b)| (a, b.clone())).collect::<Vec<_>>();
                assert_eq!(pairs(&ours), pairs(&want), "{at}");
                assert_eq!(matches!(ours, SegmentBlocks::Many(_)), ours.len() > TO_MAP, "{at}");
                if let SegmentBlocks::Many(chunks) = &ours {
                    chunks.check();
                }
            }
        }
    }
}
