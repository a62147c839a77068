//! Trace entries' sizes and stack ids pushed one by one, held as one u16 code an entry — a row
//! of a table of the distinct `(size, stack)` pairs met — while there are at most 65,536 of
//! them, and as two columns of their own ([`NarrowI64`] sizes, [`NarrowStacks`] ids) from the
//! first pair that does not fit.
//!
//! A call site allocates the same few sizes again and again (a layer's activations, its
//! gradients, the optimizer's state), so a trace has few distinct pairs. One code takes 2 bytes
//! an entry where a u32 size and a u16 stack id take 6, in the decoder's builders and for as
//! long as the trace lives. `dataframes` makes
//! the codes the events' `size_stack` column and the pairs the `size_stacks` table; the
//! analyses read the sizes as a [`crate::tables::int_slice::IntSlice`] and the ids as
//! [`crate::tables::stack_ids::StackIds`] either way.

use rustc_hash::FxHashMap;

use super::{Base, NarrowI64, NarrowStacks};
use crate::infra::fault_ahead::FaultAhead;

/// Most distinct pairs a u16 code can name.
pub const MAX_PAIRS: usize = 1 << 16;

/// Sizes and stack ids, coded as pairs while they fit.
#[derive(Debug, PartialEq)]
pub enum SizesAndStacks {
    Paired(PairCodes),
    /// Each entry's size and stack id.
    Apart {
        size: NarrowI64,
        stack: NarrowStacks,
    },
}

/// The distinct `(size, stack)` pairs in the order they were met, and each entry's code (its
/// pair's place in that order).
#[derive(Debug, Default, PartialEq)]
pub struct PairCodes {
    pub codes: Vec<u16>,
    pub sizes: Vec<i64>,
    pub stacks: Vec<u32>,
    index: FxHashMap<(i64, u32), u16>,
}

impl Default for SizesAndStacks {
    fn default() -> Self {
        SizesAndStacks::Paired(PairCodes::default())
    }
}

impl SizesAndStacks {
    #[inline]
    pub fn push(&mut self, size: i64, stack: u32) {
        match self {
            SizesAndStacks::Paired(p) => match p.index.get(&(size, stack)) {
                Some(&code) => p.codes.push(code),
                None if p.sizes.len() < MAX_PAIRS => {
                    let code = p.sizes.len() as u16;
                    p.index.insert((size, stack), code);
                    p.sizes.push(size);
                    p.stacks.push(stack);
                    p.codes.push(code);
                }
                None => self.split_with(size, stack),
            },
            SizesAndStacks::Apart { size: s, stack: k } => {
                s.push(size);
                k.push(stack);
            }
        }
    }

    /// The first pair that does not fit: every entry so far gets its size and id apart, then
    /// this one is pushed.
    #[cold]
    #[inline(never)]
    fn split_with(&mut self, size: i64, stack: u32) {
        let SizesAndStacks::Paired(p) = self else {
            unreachable!("only paired entries split")
        };
        let (mut sizes, mut stacks) = (
            NarrowI64::new(Base::Zero),
            NarrowStacks::with_capacity(p.codes.len() + 1),
        );
        for &c in &p.codes {
            sizes.push(p.sizes[c as usize]);
            stacks.push(p.stacks[c as usize]);
        }
        sizes.push(size);
        stacks.push(stack);
        *self = SizesAndStacks::Apart {
            size: sizes,
            stack: stacks,
        };
    }

    pub fn len(&self) -> usize {
        match self {
            SizesAndStacks::Paired(p) => p.codes.len(),
            SizesAndStacks::Apart { size, .. } => size.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entry `i`'s size and stack id (panics past the end, as indexing a slice does).
    pub fn get(&self, i: usize) -> (i64, u32) {
        match self {
            SizesAndStacks::Paired(p) => {
                let c = p.codes[i] as usize;
                (p.sizes[c], p.stacks[c])
            }
            SizesAndStacks::Apart { size, stack } => (size.get(i), stack.get(i)),
        }
    }

    pub fn shrink_to_fit(&mut self) {
        match self {
            SizesAndStacks::Paired(p) => {
                p.codes.shrink_to_fit();
                // Only pushing looks pairs up: the index goes with the builder.
                p.index = FxHashMap::default();
            }
            SizesAndStacks::Apart { size, stack } => {
                size.shrink_to_fit();
                stack.shrink_to_fit();
            }
        }
    }

    /// [`FaultAhead::after_push`] for the vectors an entry adds to: the codes (`ahead[0]`), or
    /// the sizes and the ids.
    #[inline]
    pub fn fault_ahead(&mut self, ahead: &mut [FaultAhead; 2]) {
        match self {
            SizesAndStacks::Paired(p) => ahead[0].after_push(&mut p.codes),
            SizesAndStacks::Apart { size, stack } => {
                size.fault_ahead(&mut ahead[0]);
                stack.fault_ahead(&mut ahead[1]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pushed(pairs: &[(i64, u32)]) -> SizesAndStacks {
        let mut c = SizesAndStacks::default();
        for &(size, stack) in pairs {
            c.push(size, stack);
        }
        c
    }

    fn read(c: &SizesAndStacks) -> Vec<(i64, u32)> {
        (0..c.len()).map(|i| c.get(i)).collect()
    }

    #[test]
    fn repeated_pairs_share_one_code() {
        let pairs = [(512, 0), (8 << 20, 1), (512, 0), (512, 1), (8 << 20, 1), (1 << 40, 7)];
        let c = pushed(&pairs);
        let SizesAndStacks::Paired(p) = &c else {
            panic!("four pairs are coded")
        };
        assert_eq!(p.codes, [0, 1, 0, 2, 1, 3]);
        assert_eq!(p.sizes, [512, 8 << 20, 512, 1 << 40]);
        assert_eq!(p.stacks, [0, 1, 1, 7]);
        assert_eq!(read(&c), pairs);
    }

    #[test]
    fn the_pair_past_the_last_code_splits_every_entry_apart() {
        // 65,536 distinct pairs, a repeat, then one more pair.
        let mut pairs: Vec<(i64, u32)> = (0..MAX_PAIRS as i64).map(|i| (i * 512, (i % 3) as u32)).collect();
        pairs.push((0, 0));
        let c = pushed(&pairs);
        assert!(matches!(&c, SizesAndStacks::Paired(p) if p.sizes.len() == MAX_PAIRS));
        pairs.extend([(5 << 32, 70_000), (512, 1)]);
        let mut c = pushed(&pairs);
        assert!(matches!(&c, SizesAndStacks::Apart { .. }));
        assert_eq!(read(&c), pairs);
        c.shrink_to_fit();
        assert_eq!(c.len(), pairs.len());
        assert_eq!(c.get(pairs.len() - 2), (5 << 32, 70_000));
    }

    #[test]
    fn shrinking_keeps_the_pairs() {
        let mut c = pushed(&[(1, 2), (3, 4), (1, 2)]);
        c.shrink_to_fit();
        assert_eq!(read(&c), [(1, 2), (3, 4), (1, 2)]);
        assert!(SizesAndStacks::default().is_empty());
    }
}
