//! An i64 column a decoder pushes value by value, held as 32-bit offsets from a base while
//! every value fits, and as i64 from the first that does not: a trace's timestamps (µs after
//! its first, for traces up to 71 minutes long) and its sizes (below 4 GiB) take half the
//! memory while the decoder's memo is alive beside them. The timestamps become the i64 column
//! the analyses read once the memo is gone ([`NarrowI64::into_vec`]); sizes that fit stay u32
//! for good ([`NarrowI64::into_u32_or_i64`]), at the top of the decoding's memory. The values
//! read back are always the ones pushed.

use crate::infra::fault_ahead::FaultAhead;

/// Where the offsets count from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Base {
    /// The first value pushed (timestamps).
    First,
    /// Zero (sizes, which are never negative).
    Zero,
    /// Device addresses: counted in 512-byte units (the caching allocator's alignment) from
    /// 1 TiB below the first, so every address within 1 TiB of it (a device's memory, and
    /// more) fits.
    Address,
}

/// log2 of the unit [`Base::Address`] counts in.
pub const ADDRESS_SHIFT: u32 = 9;

/// i64 values, narrow while they fit.
#[derive(Debug, PartialEq)]
pub enum NarrowI64 {
    /// Nothing pushed yet.
    Empty(Base),
    /// Each value is `base + (offset << shift)`.
    Narrow {
        base: i64,
        shift: u32,
        offsets: Vec<u32>,
    },
    Wide(Vec<i64>),
}

impl NarrowI64 {
    pub fn new(base: Base) -> NarrowI64 {
        NarrowI64::Empty(base)
    }

    /// Sizes ([`Base::Zero`]), room made for `n` of them while they fit.
    pub fn sizes_with_capacity(n: usize) -> NarrowI64 {
        NarrowI64::Narrow {
            base: 0,
            shift: 0,
            offsets: Vec::with_capacity(n),
        }
    }

    #[inline(always)]
    pub fn push(&mut self, v: i64) {
        match self {
            NarrowI64::Narrow { base, shift, offsets } => {
                let d = v.wrapping_sub(*base);
                match u32::try_from(d >> *shift) {
                    Ok(offset) if v >= *base && d & ((1 << *shift) - 1) == 0 => offsets.push(offset),
                    _ => self.widen_with(v),
                }
            }
            NarrowI64::Wide(values) => values.push(v),
            NarrowI64::Empty(_) => self.start_with(v),
        }
    }

    /// The first value: the base it sets, then the value pushed.
    #[cold]
    #[inline(never)]
    fn start_with(&mut self, v: i64) {
        let NarrowI64::Empty(base) = *self else {
            unreachable!("only an empty column starts")
        };
        let (base, shift) = match base {
            Base::First => (v, 0),
            Base::Zero => (0, 0),
            Base::Address => (v.saturating_sub(1 << 40), ADDRESS_SHIFT),
        };
        *self = NarrowI64::Narrow {
            base,
            shift,
            offsets: Vec::new(),
        };
        self.push(v);
    }

    /// Makes the column wide (the values so far as i64), then pushes `v`.
    #[cold]
    #[inline(never)]
    fn widen_with(&mut self, v: i64) {
        let mut values = std::mem::replace(self, NarrowI64::Wide(Vec::new())).into_vec();
        values.push(v);
        *self = NarrowI64::Wide(values);
    }

    pub fn len(&self) -> usize {
        match self {
            NarrowI64::Empty(_) => 0,
            NarrowI64::Narrow { offsets, .. } => offsets.len(),
            NarrowI64::Wide(values) => values.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Value `i` (below [`NarrowI64::len`]).
    pub fn get(&self, i: usize) -> i64 {
        match self {
            NarrowI64::Empty(_) => panic!("value {i} of an empty column"),
            NarrowI64::Narrow { base, shift, offsets } => base + (i64::from(offsets[i]) << shift),
            NarrowI64::Wide(values) => values[i],
        }
    }

    /// The values as i64, in order.
    pub fn into_vec(self) -> Vec<i64> {
        match self {
            NarrowI64::Empty(_) => Vec::new(),
            NarrowI64::Narrow { base, shift, offsets } => {
                offsets.iter().map(|&o| base + (i64::from(o) << shift)).collect()
            }
            NarrowI64::Wide(values) => values,
        }
    }

    /// The values as they are (u32 when every one fits with a base of zero), else as i64: a
    /// column a reader takes either way ([`crate::tables::int_slice::IntSlice`]) is kept narrow.
    pub fn into_u32_or_i64(self) -> Result<Vec<u32>, Vec<i64>> {
        match self {
            NarrowI64::Narrow {
                base: 0,
                shift: 0,
                offsets,
            } => Ok(offsets),
            NarrowI64::Empty(Base::Zero) => Ok(Vec::new()),
            other => Err(other.into_vec()),
        }
    }

    pub fn shrink_to_fit(&mut self) {
        match self {
            NarrowI64::Empty(_) => {}
            NarrowI64::Narrow { offsets, .. } => offsets.shrink_to_fit(),
            NarrowI64::Wide(values) => values.shrink_to_fit(),
        }
    }

    /// [`FaultAhead::after_push`] for the vector the values are in.
    #[inline]
    pub fn fault_ahead(&mut self, ahead: &mut FaultAhead) {
        match self {
            NarrowI64::Empty(_) => {}
            NarrowI64::Narrow { offsets, .. } => ahead.after_push(offsets),
            NarrowI64::Wide(values) => ahead.after_push(values),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pushed(base: Base, values: &[i64]) -> NarrowI64 {
        let mut c = NarrowI64::new(base);
        for &v in values {
            c.push(v);
        }
        c
    }

    #[test]
    fn values_that_fit_stay_narrow_and_read_back_as_pushed() {
        let times = [
            1_700_000_000_000_000,
            1_700_000_000_000_005,
            1_700_000_000_000_000 + u32::MAX as i64,
        ];
        let c = pushed(Base::First, &times);
        assert!(matches!(c, NarrowI64::Narrow { .. }), "{c:?}");
        assert_eq!((0..3).map(|i| c.get(i)).collect::<Vec<_>>(), times);
        assert_eq!(c.into_vec(), times);
        let sizes = [0, 512, u32::MAX as i64];
        let c = pushed(Base::Zero, &sizes);
        assert!(matches!(c, NarrowI64::Narrow { .. }), "{c:?}");
        assert_eq!(c.into_vec(), sizes);
        let kept = pushed(Base::Zero, &sizes).into_u32_or_i64();
        assert_eq!(kept, Ok(vec![0, 512, u32::MAX]), "sizes that fit stay u32");
        let times = pushed(Base::First, &times).into_u32_or_i64();
        assert!(times.is_err(), "offsets from a first value are widened");
    }

    #[test]
    fn a_value_that_does_not_fit_widens_the_column_keeping_every_value() {
        for (base, values) in [
            // Before the first timestamp, after 71 minutes, no timestamp.
            (Base::First, vec![1_000_000, 999_999, 5]),
            (Base::First, vec![0, 1 << 33, 7]),
            (Base::First, vec![7, i64::MIN, i64::MAX]),
            // A segment of 4 GiB, a negative size a hostile file wrote.
            (Base::Zero, vec![512, 1 << 32, 512]),
            (Base::Zero, vec![512, -1]),
        ] {
            let c = pushed(base, &values);
            assert!(matches!(c, NarrowI64::Wide(_)), "{values:?}: {c:?}");
            assert_eq!(c.len(), values.len());
            assert_eq!((0..values.len()).map(|i| c.get(i)).collect::<Vec<_>>(), values);
            assert_eq!(c.into_vec(), values);
            assert_eq!(pushed(base, &values).into_u32_or_i64(), Err(values));
        }
    }

    #[test]
    fn aligned_addresses_within_a_tebibyte_of_the_first_stay_narrow() {
        let first = 0x7f3a_0000_0000i64;
        let addresses = [
            first,
            first + 512,
            first - (1 << 39),
            first + (1 << 40) - 512,
            first + 3 * (1 << 21),
        ];
        let c = pushed(Base::Address, &addresses);
        assert!(matches!(c, NarrowI64::Narrow { shift: 9, .. }), "{c:?}");
        assert_eq!((0..5).map(|i| c.get(i)).collect::<Vec<_>>(), addresses);
        assert_eq!(pushed(Base::Address, &addresses).into_vec(), addresses);
        assert!(pushed(Base::Address, &addresses).into_u32_or_i64().is_err());
        for odd in [first + 16, first + (1 << 41), first - (1 << 40) - 512, i64::MIN, 0] {
            let values = [first, odd, first + 512];
            let c = pushed(Base::Address, &values);
            assert!(matches!(c, NarrowI64::Wide(_)), "{odd:#x}: {c:?}");
            assert_eq!(c.into_vec(), values);
        }
    }

    #[test]
    fn an_empty_column_has_no_values() {
        let c = NarrowI64::new(Base::First);
        assert!(c.is_empty());
        assert!(c.into_vec().is_empty());
        assert_eq!(NarrowI64::new(Base::Zero).into_u32_or_i64(), Ok(Vec::new()));
    }
}
