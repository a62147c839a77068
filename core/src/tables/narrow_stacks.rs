//! Stack ids pushed one by one, held as u16 while every id is below 65,536 and as u32 from
//! the first that is not. Ids are interned in the order stacks are first met, so a column
//! widens at most once, at its 65,536th distinct stack. Traces hold far fewer: an allocation's lifetime
//! row then takes 2 bytes for its stack instead of 4, and so does a trace entry where the
//! trace has too many `(size, stack)` pairs to code them ([`super::SizesAndStacks`]).
//! `dataframes` and the lifetimes make it a u16 or u32 column; the analyses read either as
//! `crate::tables::stack_ids::StackIds`.

use crate::infra::fault_ahead::FaultAhead;

/// Stack ids, u16 while they fit.
#[derive(Debug, Clone, PartialEq)]
pub enum NarrowStacks {
    Narrow(Vec<u16>),
    Wide(Vec<u32>),
}

impl Default for NarrowStacks {
    fn default() -> Self {
        NarrowStacks::Narrow(Vec::new())
    }
}

impl NarrowStacks {
    /// Room made for `n` ids while they fit in 16 bits.
    pub fn with_capacity(n: usize) -> NarrowStacks {
        NarrowStacks::Narrow(Vec::with_capacity(n))
    }

    #[inline(always)]
    pub fn push(&mut self, id: u32) {
        match self {
            NarrowStacks::Narrow(ids) => match u16::try_from(id) {
                Ok(id) => ids.push(id),
                Err(_) => self.widen_with(id),
            },
            NarrowStacks::Wide(ids) => ids.push(id),
        }
    }

    /// The first id that does not fit: every id so far becomes u32, then `id` is pushed.
    #[cold]
    #[inline(never)]
    fn widen_with(&mut self, id: u32) {
        let NarrowStacks::Narrow(narrow) = self else {
            unreachable!("only narrow ids widen")
        };
        let mut wide: Vec<u32> = Vec::with_capacity(narrow.capacity().max(narrow.len() + 1));
        wide.extend(narrow.iter().map(|&v| u32::from(v)));
        wide.push(id);
        *self = NarrowStacks::Wide(wide);
    }

    pub fn len(&self) -> usize {
        match self {
            NarrowStacks::Narrow(ids) => ids.len(),
            NarrowStacks::Wide(ids) => ids.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Id `i` (panics past the end, as indexing a slice does).
    pub fn get(&self, i: usize) -> u32 {
        match self {
            NarrowStacks::Narrow(ids) => u32::from(ids[i]),
            NarrowStacks::Wide(ids) => ids[i],
        }
    }

    pub fn shrink_to_fit(&mut self) {
        match self {
            NarrowStacks::Narrow(ids) => ids.shrink_to_fit(),
            NarrowStacks::Wide(ids) => ids.shrink_to_fit(),
        }
    }

    /// [`FaultAhead::after_push`] for the vector the ids are in.
    #[inline]
    pub fn fault_ahead(&mut self, ahead: &mut FaultAhead) {
        match self {
            NarrowStacks::Narrow(ids) => ahead.after_push(ids),
            NarrowStacks::Wide(ids) => ahead.after_push(ids),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pushed(ids: &[u32]) -> NarrowStacks {
        let mut c = NarrowStacks::default();
        for &id in ids {
            c.push(id);
        }
        c
    }

    #[test]
    fn ids_below_65536_stay_16_bits() {
        let ids = [0, 1, 7, 65_535, 3];
        let c = pushed(&ids);
        assert!(matches!(&c, NarrowStacks::Narrow(v) if v == &[0u16, 1, 7, 65_535, 3]));
        assert_eq!((0..c.len()).map(|i| c.get(i)).collect::<Vec<_>>(), ids);
    }

    #[test]
    fn the_first_wide_id_widens_every_id_and_later_ones_stay_wide() {
        for ids in [
            vec![65_536],
            vec![4, 65_535, 65_536, 2],
            vec![0, u32::MAX, 1],
            (0..70_000u32).collect::<Vec<_>>(),
        ] {
            let c = pushed(&ids);
            assert!(
                matches!(&c, NarrowStacks::Wide(v) if v == &ids),
                "{:?}",
                &ids[..ids.len().min(4)]
            );
            assert_eq!(c.len(), ids.len());
        }
        assert!(NarrowStacks::with_capacity(8).is_empty());
    }
}
