//! `BlockChunks`: the blocks of a segment that holds many, as short sorted vectors in address
//! order (a B+-tree's leaves without the tree): the replay's map for segments above
//! `blocks::TO_MAP` blocks.
//!
//! A segment with thousands of blocks (an expandable segment, a large one that fragments, one
//! that collects a leak every iteration) was a `BTreeMap`, and its descents were most of the
//! replay on such traces: five or six levels of pointer chasing for each of the three to five
//! look-ups, inserts and removes an undone entry makes. Here a look-up is a binary search over
//! the chunks' lower bounds (one contiguous vector) and one inside a chunk of at most
//! [`CHUNK`] blocks; an insert or a remove moves at most a chunk's blocks; a block's neighbours
//! sit next to it, or in the next or previous chunk.
//!
//! The replay churns: undoing an iteration carves tens of blocks out of one free range and
//! merges them back, all in one stretch of the segment. So the last look-up's chunk and its
//! two neighbours are tried first, and a chunk that empties stays, as a slot that the next split beside it fills,
//! rather than shifting the index of thousands of chunks each time (a first version that
//! shifted it was no faster than the `BTreeMap`). The index is rebuilt whole only once empty
//! or split chunks make it twice the size a fresh build has.
//!
//! On a generated GB-scale snapshot (`scripts/gen-snapshot`: one segment that gathers hundreds
//! of thousands of leaked blocks) the checkpoint build's replay runs two to three times as fast
//! as with a `BTreeMap` (`memlens-bench-segments`, versions run side by side).
//!
//! Invariants: `bounds` rise strictly; chunk `c` holds addresses from `bounds[c]` to before
//! `bounds[c + 1]`, rising, and a chunk that holds any starts at `bounds[c]`; at most [`CHUNK`]
//! blocks a chunk; `len` blocks, `empty` empty chunks. The tests check them after random
//! operations against a `BTreeMap`.

use std::cell::Cell;

use super::block::Block;

/// Most blocks a chunk holds; a fuller chunk splits in two.
const CHUNK: usize = 32;

/// Blocks keyed by address, at most one per address, in address order.
#[derive(Debug, Clone, Default)]
pub(crate) struct BlockChunks {
    bounds: Vec<i64>,
    chunks: Vec<Vec<(i64, Block)>>,
    len: usize,
    empty: usize,
    /// The chunk the last look-up found (any index: it is checked before it is used).
    last_chunk: Cell<usize>,
}

/// Where a block sits: chunk, then position in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct At {
    chunk: usize,
    pos: usize,
}

impl BlockChunks {
    /// The blocks of `sorted`, whose addresses rise strictly.
    pub(crate) fn from_sorted(sorted: Vec<(i64, Block)>) -> BlockChunks {
        let len = sorted.len();
        let chunks = BlockChunks::from_rising(&mut sorted.into_iter(), len);
        chunks.unwrap_or_else(|_| panic!("BlockChunks::from_sorted: addresses that do not rise"))
    }

    /// The blocks `blocks` yields (about `len` of them), put into chunks as they come, for
    /// blocks in address order without a sorted copy first (a stored checkpoint's). At the
    /// first whose address does not rise strictly, the blocks taken so far, that one last, are
    /// given back instead, and the rest stay in `blocks`.
    pub(crate) fn from_rising(
        blocks: &mut impl Iterator<Item = (i64, Block)>,
        len: usize,
    ) -> Result<BlockChunks, Vec<(i64, Block)>> {
        let mut chunks: Vec<Vec<(i64, Block)>> = Vec::with_capacity(len.div_ceil(CHUNK / 2));
        let (mut bounds, mut taken, mut last) = (Vec::with_capacity(chunks.capacity()), 0, None);
        // Each chunk half full, so that inserts split rarely at first; room for a whole one is
        // taken with its first block (none is left over after the last).
        let mut chunk = Vec::new();
        for (addr, block) in blocks {
            if last.is_some_and(|before| addr <= before) {
                let mut so_far: Vec<(i64, Block)> = chunks.into_iter().flatten().collect();
                so_far.extend(chunk);
                so_far.push((addr, block));
                return Err(so_far);
            }
            if chunk.is_empty() {
                bounds.push(addr);
                chunk.reserve_exact(CHUNK + 1);
            }
            chunk.push((addr, block));
            (taken, last) = (taken + 1, Some(addr));
            if chunk.len() == CHUNK / 2 {
                chunks.push(std::mem::take(&mut chunk));
            }
        }
        if !chunk.is_empty() {
            chunks.push(chunk);
        }
        Ok(BlockChunks {
            bounds,
            chunks,
            len: taken,
            empty: 0,
            last_chunk: Cell::new(0),
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// `(address, block)` in address order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (i64, &Block)> + '_ {
        self.chunks.iter().flatten().map(|(a, b)| (*a, b))
    }

    /// The blocks, in address order.
    pub(crate) fn into_vec(self) -> Vec<(i64, Block)> {
        self.chunks.into_iter().flatten().collect()
    }

    /// The chunk whose range holds `addr`.
    fn chunk_of(&self, addr: i64) -> Option<usize> {
        // The replay works on one stretch of a segment for many entries in a row: the chunk
        // of the last look-up, or one beside it, usually holds the next one.
        let hint = self.last_chunk.get();
        let holds = |c: usize| {
            self.bounds.get(c).is_some_and(|&lower| lower <= addr)
                && self.bounds.get(c + 1).is_none_or(|&upper| addr < upper)
        };
        for near in [hint, hint.wrapping_add(1), hint.wrapping_sub(1)] {
            if holds(near) {
                self.last_chunk.set(near);
                return Some(near);
            }
        }
        let chunk = self.bounds.partition_point(|&f| f <= addr).checked_sub(1)?;
        self.last_chunk.set(chunk);
        Some(chunk)
    }

    /// The block at exactly `addr`.
    fn find(&self, addr: i64) -> Option<At> {
        let chunk = self.chunk_of(addr)?;
        let pos = self.chunks[chunk].binary_search_by_key(&addr, |e| e.0).ok()?;
        Some(At { chunk, pos })
    }

    fn at_mut(&mut self, at: At) -> &mut (i64, Block) {
        &mut self.chunks[at.chunk][at.pos]
    }

    /// The position after `at`, if any.
    fn next(&self, at: At) -> Option<At> {
        if at.pos + 1 < self.chunks[at.chunk].len() {
            return Some(At { pos: at.pos + 1, ..at });
        }
        let chunk = (at.chunk + 1..self.chunks.len()).find(|&c| !self.chunks[c].is_empty())?;
        Some(At { chunk, pos: 0 })
    }

    /// The last block of the last chunk up to `chunk` that holds any.
    fn last_up_to(&self, chunk: usize) -> Option<At> {
        let chunk = (0..=chunk).rev().find(|&c| !self.chunks[c].is_empty())?;
        Some(At {
            chunk,
            pos: self.chunks[chunk].len() - 1,
        })
    }

    /// The position before `at`, if any.
    fn prev(&self, at: At) -> Option<At> {
        if at.pos > 0 {
            return Some(At { pos: at.pos - 1, ..at });
        }
        self.last_up_to(at.chunk.checked_sub(1)?)
    }

    pub(crate) fn get_mut(&mut self, addr: i64) -> Option<&mut Block> {
        let at = self.find(addr)?;
        Some(&mut self.at_mut(at).1)
    }

    /// The block that starts last at or before `addr`.
    pub(crate) fn last_at_or_before_mut(&mut self, addr: i64) -> Option<(i64, &mut Block)> {
        let chunk = self.chunk_of(addr)?;
        let at = match self.chunks[chunk].partition_point(|e| e.0 <= addr) {
            0 => self.last_up_to(chunk.checked_sub(1)?)?,
            n => At { chunk, pos: n - 1 },
        };
        let (a, b) = self.at_mut(at);
        Some((*a, b))
    }

    /// Puts `block` at `addr`, replacing the block that started there.
    pub(crate) fn insert(&mut self, addr: i64, block: Block) {
        if self.chunks.is_empty() {
            *self = BlockChunks::from_sorted(vec![(addr, block)]);
            return;
        }
        // Before every block: into the first chunk, whose range then starts at `addr`.
        let chunk = self.chunk_of(addr).unwrap_or(0);
        let blocks = &mut self.chunks[chunk];
        match blocks.binary_search_by_key(&addr, |e| e.0) {
            Ok(pos) => {
                blocks[pos].1 = block;
                return;
            }
            Err(pos) => blocks.insert(pos, (addr, block)),
        }
        if blocks.len() == 1 {
            self.empty -= 1;
        }
        self.len += 1;
        self.bounds[chunk] = blocks[0].0;
        if blocks.len() > CHUNK {
            self.split(chunk);
        }
    }

    /// Splits a full chunk in two, into an empty chunk beside it where there is one.
    fn split(&mut self, chunk: usize) {
        let upper = self.chunks[chunk].split_off(CHUNK / 2);
        let next = chunk + 1;
        if next < self.chunks.len() && self.chunks[next].is_empty() {
            // Its range now starts at the upper half, which lies before it.
            self.bounds[next] = upper[0].0;
            self.chunks[next].extend(upper);
            self.empty -= 1;
        } else if chunk > 0 && self.chunks[chunk - 1].is_empty() {
            let lower = std::mem::replace(&mut self.chunks[chunk], upper);
            self.bounds[chunk] = self.chunks[chunk][0].0;
            self.chunks[chunk - 1].extend(lower);
            self.bounds[chunk - 1] = self.chunks[chunk - 1][0].0;
            self.empty -= 1;
        } else {
            self.bounds.insert(next, upper[0].0);
            self.chunks.insert(next, upper);
            self.rebuild_when_sparse();
        }
    }

    /// Takes out the block at `addr` (the replay removes blocks only by merging them).
    #[cfg(test)]
    pub(crate) fn remove(&mut self, addr: i64) -> Option<Block> {
        let at = self.find(addr)?;
        Some(self.remove_at(at))
    }

    /// Takes out the block at `at` (when that leaves the index sparse, every block moves).
    fn remove_at(&mut self, at: At) -> Block {
        let blocks = &mut self.chunks[at.chunk];
        let (_, block) = blocks.remove(at.pos);
        self.len -= 1;
        match blocks.first() {
            // The chunk keeps its range, empty.
            None => self.empty += 1,
            Some(&(first, _)) => self.bounds[at.chunk] = first,
        }
        self.rebuild_when_sparse();
        block
    }

    /// Builds the index afresh once it holds twice the chunks a fresh build has, or many empty
    /// ones (a rebuild moves every block once, and takes that many splits or removals to come
    /// again).
    fn rebuild_when_sparse(&mut self) {
        let fresh = self.len.div_ceil(CHUNK / 2);
        if self.chunks.len() > 2 * fresh + 8 || self.empty > fresh / 2 + 8 {
            *self = BlockChunks::from_sorted(std::mem::take(self).into_vec());
        }
    }

    /// `SegmentBlocks::free_block`: the block at `addr` made free (no request, no stack) and
    /// merged with the free blocks right after and before it; one of no size is not merged.
    pub(crate) fn free_block(&mut self, addr: i64) {
        use memlens_api::BlockState::Inactive;
        let Some(at) = self.find(addr) else {
            return;
        };
        let cur = &mut self.at_mut(at).1;
        cur.set_free();
        if cur.size <= 0 {
            return;
        }
        let end = addr + cur.size;
        if let Some(next) = self.next(at) {
            let (n, b) = &self.chunks[next.chunk][next.pos];
            if *n == end && b.state == Inactive {
                let size = b.size;
                self.at_mut(at).1.size += size;
                // A rebuild moves every block: `at` is found again.
                self.remove_at(next);
            }
        }
        let Some(at) = self.find(addr) else {
            return;
        };
        if let Some(prev) = self.prev(at) {
            let (p, b) = &self.chunks[prev.chunk][prev.pos];
            if b.state == Inactive && p + b.size == addr {
                let size = self.at_mut(at).1.size;
                self.at_mut(prev).1.size += size;
                self.remove_at(at);
            }
        }
    }

    /// Panics unless the invariants of the module hold.
    #[cfg(test)]
    pub(crate) fn check(&self) {
        assert_eq!(self.bounds.len(), self.chunks.len());
        assert!(self.bounds.windows(2).all(|w| w[0] < w[1]), "bounds do not rise");
        assert_eq!(self.len, self.chunks.iter().map(Vec::len).sum::<usize>());
        assert_eq!(self.empty, self.chunks.iter().filter(|c| c.is_empty()).count());
        for (c, chunk) in self.chunks.iter().enumerate() {
            assert!(chunk.len() <= CHUNK, "chunk {c} holds {}", chunk.len());
            if let (Some(first), Some(last)) = (chunk.first(), chunk.last()) {
                assert_eq!(self.bounds[c], first.0, "chunk {c}");
                assert!(
                    self.bounds.get(c + 1).is_none_or(|&b| last.0 < b),
                    "chunk {c} reaches past its range"
                );
            }
        }
        let addrs: Vec<i64> = self.iter().map(|(a, _)| a).collect();
        assert!(addrs.windows(2).all(|w| w[0] < w[1]), "addresses do not rise");
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use memlens_api::BlockState;

    use super::super::block_map_tests::{block, block_map_by_own_methods, random_step, same_blocks, STATES};
    use super::*;
    use crate::infra::testing::Lcg;

    block_map_by_own_methods!(BlockChunks);

    /// Thousands of blocks (chunks split, empty and are rebuilt), from random inserts,
    /// removes, frees and look-ups: always what a plain `BTreeMap` holds and answers, with the
    /// invariants intact.
    #[test]
    fn many_blocks_hold_and_answer_what_a_map_does() {
        for seed in 0..12u64 {
            let mut rng = Lcg(seed);
            let start: Vec<(i64, Block)> = (0..500)
                .map(|i| (1024 * i, block(512, STATES[i as usize % 3])))
                .collect();
            let mut want: BTreeMap<i64, Block> = start.iter().cloned().collect();
            let mut ours = BlockChunks::from_sorted(start);
            let span = 4000u64;
            let (mut most, mut chunks_most) = (0, 0);
            for step in 0..30_000 {
                let at = format!("seed {seed} step {step}");
                let addr = 512 * rng.below(span) as i64;
                // Three inserts to a remove early on, so that chunks split and the map grows
                // to thousands; the reverse later.
                let grow = (step < 15_000) == (rng.below(4) > 0);
                let op = rng.below(5);
                random_step(&mut ours, &mut want, &mut rng, op, addr, grow, &at);
                assert_eq!(ours.len(), want.len(), "{at}");
                (most, chunks_most) = (most.max(ours.len()), chunks_most.max(ours.chunks.len()));
                if step % 211 == 0 {
                    ours.check();
                    same_blocks(&ours, &want, &at);
                }
            }
            // Nine blocks in ten taken out: chunks empty, and the index is rebuilt smaller.
            let addrs: Vec<i64> = want.keys().copied().collect();
            for addr in addrs {
                if rng.below(10) > 0 {
                    assert_eq!(ours.remove(addr), want.remove(&addr), "seed {seed} draining");
                }
            }
            ours.check();
            assert!(most > 2_000, "seed {seed}: at most {most} blocks");
            let chunks = ours.chunks.len();
            assert!(
                chunks < chunks_most / 2,
                "seed {seed}: the index kept {chunks} of {chunks_most} chunks"
            );
            assert_eq!(ours.into_vec(), want.into_iter().collect::<Vec<_>>(), "seed {seed}");
        }
    }

    /// A chunk emptied by removals takes the half of a split beside it, after or before it,
    /// and the index does not grow.
    #[test]
    fn an_emptied_chunk_takes_the_half_of_the_next_split_beside_it() {
        for (emptied, filled) in [(1usize, 0usize), (1, 2)] {
            let step = 1024i64;
            let start: Vec<(i64, Block)> = (0..224).map(|i| (step * i, block(512, BlockState::Inactive))).collect();
            let mut want: BTreeMap<i64, Block> = start.iter().cloned().collect();
            let mut ours = BlockChunks::from_sorted(start);
            let half = (CHUNK / 2) as i64;
            let chunks = ours.chunks.len();
            for i in half * emptied as i64..half * (emptied as i64 + 1) {
                assert_eq!(ours.remove(step * i), want.remove(&(step * i)));
            }
            assert!(ours.chunks[emptied].is_empty());
            // Blocks between those of the filled chunk, until it splits.
            for i in half * filled as i64..half * (filled as i64 + 1) {
                for off in [256, 512] {
                    ours.insert(step * i + off, block(256, BlockState::ActiveAllocated));
                    want.insert(step * i + off, block(256, BlockState::ActiveAllocated));
                }
            }
            ours.check();
            assert_eq!(ours.chunks.len(), chunks, "filling chunk {filled}");
            assert_eq!(ours.empty, 0, "filling chunk {filled}");
            let got: Vec<(i64, Block)> = ours.iter().map(|(a, b)| (a, b.clone())).collect();
            assert_eq!(got, want.into_iter().collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_block_before_every_other_starts_the_first_chunk() {
        let b = |size| block(size, BlockState::Inactive);
        let mut ours = BlockChunks::from_sorted((1..200).map(|i| (512 * i, b(512))).collect());
        ours.insert(0, b(512));
        ours.check();
        assert_eq!(ours.iter().next().map(|(a, _)| a), Some(0));
        assert_eq!(ours.last_at_or_before_mut(-1).map(|(a, _)| a), None);
        // Freeing every block merges them all into one.
        for i in 0..200 {
            ours.free_block(512 * i);
        }
        ours.check();
        assert_eq!(ours.len(), 1);
        assert_eq!(
            ours.iter().map(|(a, b)| (a, b.size)).collect::<Vec<_>>(),
            vec![(0, 512 * 200)]
        );
    }
}
