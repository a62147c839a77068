//! Test support shared by `segment_blocks` and `block_chunks`: a random step applied alike to
//! a map of blocks and to a plain `BTreeMap`, the reference, and the check that both hold the
//! same blocks.

use std::collections::BTreeMap;

use memlens_api::BlockState;

use super::block::Block;
use crate::infra::testing::Lcg;

/// What the tests do to a map of blocks.
pub(crate) trait BlockMap {
    fn insert(&mut self, addr: i64, block: Block);
    fn remove(&mut self, addr: i64) -> Option<Block>;
    fn free_block(&mut self, addr: i64);
    fn last_at_or_before_mut(&mut self, addr: i64) -> Option<(i64, &mut Block)>;
    fn get_mut(&mut self, addr: i64) -> Option<&mut Block>;
    /// The blocks in address order.
    fn pairs(&self) -> Vec<(i64, Block)>;
}

/// A map of blocks as a [`BlockMap`], by its own methods of the same names (invoked in each
/// map's own tests, so this module imports neither).
macro_rules! block_map_by_own_methods {
    ($($map:ident),*) => {$(
        impl $crate::analysis::segment_map::block_map_tests::BlockMap for $map {
            fn insert(&mut self, addr: i64, block: $crate::analysis::segment_map::block::Block) {
                $map::insert(self, addr, block)
            }
            fn remove(&mut self, addr: i64) -> Option<$crate::analysis::segment_map::block::Block> {
                $map::remove(self, addr)
            }
            fn free_block(&mut self, addr: i64) {
                $map::free_block(self, addr)
            }
            fn last_at_or_before_mut(&mut self, addr: i64) -> Option<(i64, &mut $crate::analysis::segment_map::block::Block)> {
                $map::last_at_or_before_mut(self, addr)
            }
            fn get_mut(&mut self, addr: i64) -> Option<&mut $crate::analysis::segment_map::block::Block> {
                $map::get_mut(self, addr)
            }
            fn pairs(&self) -> Vec<(i64, $crate::analysis::segment_map::block::Block)> {
                self.iter().map(|(a, b)| (a, b.clone())).collect()
            }
        }
    )*};
}
pub(crate) use block_map_by_own_methods;

pub(crate) const STATES: [BlockState; 3] = [
    BlockState::Inactive,
    BlockState::ActiveAllocated,
    BlockState::ActivePendingFree,
];

pub(crate) fn block(size: i64, state: BlockState) -> Block {
    Block {
        size,
        requested: size,
        state,
        stack: 7,
    }
}

/// Step `op` (0–4) at `addr`, on `ours` and on `want` alike: an insert when `grow` or else a
/// remove (0, 1), a free (2), a look-up of the block at or before (3), a change of a block
/// found by address (4); what both answer must be equal.
pub(crate) fn random_step(
    ours: &mut impl BlockMap,
    want: &mut BTreeMap<i64, Block>,
    rng: &mut Lcg,
    op: u64,
    addr: i64,
    grow: bool,
    at: &str,
) {
    match op {
        0 | 1 if grow => {
            let b = block(512 * (1 + rng.below(3) as i64), STATES[rng.below(3) as usize]);
            ours.insert(addr, b.clone());
            want.insert(addr, b);
        }
        0 | 1 => assert_eq!(ours.remove(addr), want.remove(&addr), "{at}"),
        2 => {
            ours.free_block(addr);
            free_block_in_map(want, addr);
        }
        3 => {
            let got = ours.last_at_or_before_mut(addr).map(|(a, b)| (a, b.clone()));
            let exp = want.range(..=addr).next_back().map(|(&a, b)| (a, b.clone()));
            assert_eq!(got, exp, "{at}");
        }
        _ => {
            if let Some(b) = ours.get_mut(addr) {
                b.stack += 1;
            }
            if let Some(b) = want.get_mut(&addr) {
                b.stack += 1;
            }
        }
    }
}

/// Panics unless `ours` holds what `want` holds, in address order.
pub(crate) fn same_blocks(ours: &impl BlockMap, want: &BTreeMap<i64, Block>, at: &str) {
    let exp: Vec<(i64, Block)> = want.iter().map(|(&a, b)| (a, b.clone())).collect();
    assert_eq!(ours.pairs(), exp, "{at}");
}

/// `SegmentBlocks::free_block` on a plain map: the reference.
fn free_block_in_map(blocks: &mut BTreeMap<i64, Block>, addr: i64) {
    use memlens_api::BlockState::Inactive;
    let mut from = blocks.range_mut(addr..);
    let Some((&at, cur)) = from.next() else {
        return;
    };
    if at != addr {
        return;
    }
    cur.set_free();
    if cur.size <= 0 {
        return;
    }
    let next_free = match from.next() {
        Some((&n, next)) if n == addr + cur.size && next.state == Inactive => Some((n, next.size)),
        _ => None,
    };
    if let Some((_, next_size)) = next_free {
        cur.size += next_size;
    }
    let merged = cur.size;
    if let Some((n, _)) = next_free {
        blocks.remove(&n);
    }
    if let Some((&p, prev)) = blocks.range_mut(..addr).next_back() {
        if prev.state == Inactive && p + prev.size == addr {
            prev.size += merged;
            blocks.remove(&addr);
        }
    }
}
