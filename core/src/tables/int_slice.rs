//! [`IntSlice`]: a column of integers read as i64 whether it is held as u32 offsets from a base,
//! as u16 codes of a table of values, or as i64.
//!
//! A trace's sizes are held as u32 when every one is below 4 GiB (nearly always: a single
//! block of 4 GiB or more is rare), its timestamps as µs after the first when the trace
//! spans under 71 minutes, and its addresses as 512-byte units from a base when they lie
//! within 1 TiB of the first: 4 bytes an entry less for each (8 for the addresses) for as long
//! as the trace lives. Its sizes are codes of
//! `(size, stack)` pairs while there are few ([`crate::tables::SizesAndStacks`]). The
//! analyses read them through this type, so they read a stored report from before (i64) and one
//! from now alike.

use std::ops::Range;

use polars_core::prelude::*;

/// Integers read as i64, held as u32 offsets from a base or as i64.
#[derive(Debug, Clone, Copy)]
pub enum IntSlice<'a> {
    /// Value `i` is `base + (offsets[i] << shift)`.
    U32 {
        base: i64,
        shift: u32,
        offsets: &'a [u32],
    },
    /// Value `i` is `values[codes[i]]`.
    Coded {
        codes: &'a [u16],
        values: &'a [i64],
    },
    I64(&'a [i64]),
}

impl<'a> IntSlice<'a> {
    /// Column `name` of `df` as one contiguous slice: u32 or i64, without nulls, in one chunk.
    pub fn of(df: &'a DataFrame, name: &str) -> PolarsResult<IntSlice<'a>> {
        let column = df.column(name)?;
        match column.dtype() {
            DataType::UInt32 => Ok(IntSlice::U32 {
                base: 0,
                shift: 0,
                offsets: column.as_materialized_series().u32()?.cont_slice()?,
            }),
            DataType::Int64 => Ok(IntSlice::I64(column.as_materialized_series().i64()?.cont_slice()?)),
            other => polars_bail!(SchemaMismatch: "column `{name}` is {other}, not u32 or i64"),
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        match self {
            IntSlice::U32 { offsets, .. } => offsets.len(),
            IntSlice::Coded { codes, .. } => codes.len(),
            IntSlice::I64(v) => v.len(),
        }
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Value `i` (panics past the end, as indexing a slice does).
    #[inline]
    pub fn at(&self, i: usize) -> i64 {
        match self {
            IntSlice::U32 { base, shift, offsets } => base + ((offsets[i] as i64) << shift),
            IntSlice::Coded { codes, values } => values[codes[i] as usize],
            IntSlice::I64(v) => v[i],
        }
    }

    /// Values `from..from + out.len()` into `out` (panics past the end): one match for the
    /// whole run, where [`IntSlice::at`] matches for each value.
    pub fn read_into(&self, from: usize, out: &mut [i64]) {
        let to = from + out.len();
        match *self {
            IntSlice::U32 { base, shift, offsets } => {
                for (o, &v) in out.iter_mut().zip(&offsets[from..to]) {
                    *o = base + ((v as i64) << shift);
                }
            }
            IntSlice::Coded { codes, values } => {
                for (o, &c) in out.iter_mut().zip(&codes[from..to]) {
                    *o = values[c as usize];
                }
            }
            IntSlice::I64(v) => out.copy_from_slice(&v[from..to]),
        }
    }

    /// Value `i`, `None` past the end.
    #[inline]
    pub fn get(&self, i: usize) -> Option<i64> {
        match self {
            IntSlice::U32 { base, shift, offsets } => offsets.get(i).map(|&o| base + ((o as i64) << shift)),
            IntSlice::Coded { codes, values } => codes.get(i).map(|&c| values[c as usize]),
            IntSlice::I64(v) => v.get(i).copied(),
        }
    }

    pub fn first(&self) -> Option<i64> {
        self.get(0)
    }

    pub fn last(&self) -> Option<i64> {
        self.len().checked_sub(1).map(|i| self.at(i))
    }

    /// The number of values before the first for which `pred` is false (the values
    /// partitioned by it, as [`slice::partition_point`] takes them).
    pub fn partition_point(&self, mut pred: impl FnMut(i64) -> bool) -> usize {
        match self {
            IntSlice::U32 { base, shift, offsets } => offsets.partition_point(|&o| pred(base + ((o as i64) << shift))),
            IntSlice::Coded { codes, values } => codes.partition_point(|&c| pred(values[c as usize])),
            IntSlice::I64(v) => v.partition_point(|&x| pred(x)),
        }
    }

    /// The values in `range`.
    pub fn slice(&self, range: Range<usize>) -> IntSlice<'a> {
        match self {
            IntSlice::U32 { base, shift, offsets } => IntSlice::U32 {
                base: *base,
                shift: *shift,
                offsets: &offsets[range],
            },
            IntSlice::Coded { codes, values } => IntSlice::Coded {
                codes: &codes[range],
                values,
            },
            IntSlice::I64(v) => IntSlice::I64(&v[range]),
        }
    }

    /// The values in order.
    pub fn iter(&self) -> IntSliceIter<'a> {
        match self {
            IntSlice::U32 { base, shift, offsets } => IntSliceIter::U32(*base, *shift, offsets.iter()),
            IntSlice::Coded { codes, values } => IntSliceIter::Coded(codes.iter(), values),
            IntSlice::I64(v) => IntSliceIter::I64(v.iter()),
        }
    }

    /// Whether the values never decrease.
    pub fn is_sorted(&self) -> bool {
        match self {
            IntSlice::U32 { offsets, .. } => offsets.is_sorted(),
            IntSlice::Coded { .. } => self.iter().is_sorted(),
            IntSlice::I64(v) => v.is_sorted(),
        }
    }

    /// The values as a vector of i64.
    pub fn to_vec(&self) -> Vec<i64> {
        self.iter().collect()
    }
}

impl<'a> From<&'a [i64]> for IntSlice<'a> {
    fn from(values: &'a [i64]) -> Self {
        IntSlice::I64(values)
    }
}

impl<'a> IntoIterator for IntSlice<'a> {
    type Item = i64;
    type IntoIter = IntSliceIter<'a>;
    fn into_iter(self) -> IntSliceIter<'a> {
        self.iter()
    }
}

/// The values of an [`IntSlice`], as i64.
#[derive(Debug, Clone)]
pub enum IntSliceIter<'a> {
    U32(i64, u32, std::slice::Iter<'a, u32>),
    Coded(std::slice::Iter<'a, u16>, &'a [i64]),
    I64(std::slice::Iter<'a, i64>),
}

impl Iterator for IntSliceIter<'_> {
    type Item = i64;
    #[inline]
    fn next(&mut self) -> Option<i64> {
        match self {
            IntSliceIter::U32(base, shift, it) => it.next().map(|&v| *base + ((v as i64) << *shift)),
            IntSliceIter::Coded(it, values) => it.next().map(|&c| values[c as usize]),
            IntSliceIter::I64(it) => it.next().copied(),
        }
    }
    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            IntSliceIter::U32(_, _, it) => it.size_hint(),
            IntSliceIter::Coded(it, _) => it.size_hint(),
            IntSliceIter::I64(it) => it.size_hint(),
        }
    }
}

impl ExactSizeIterator for IntSliceIter<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn either_width_reads_the_same_values() {
        let narrow = [0u32, 512, u32::MAX];
        let wide = [0i64, 512, u32::MAX as i64];
        let n = IntSlice::U32 {
            base: 0,
            shift: 0,
            offsets: &narrow,
        };
        let w = IntSlice::from(&wide[..]);
        assert_eq!(n.to_vec(), w.to_vec());
        assert_eq!(n.at(2), 4_294_967_295);
        assert_eq!(n.slice(1..3).to_vec(), vec![512, u32::MAX as i64]);
        assert_eq!(w.slice(0..1).iter().len(), 1);
        assert_eq!((n.get(3), w.get(3)), (None, None));
        for t in [-1, 0, 511, 512, 513, i64::MAX] {
            assert_eq!(n.partition_point(|x| x <= t), w.partition_point(|x| x <= t), "{t}");
        }
    }

    #[test]
    fn offsets_read_back_from_their_base() {
        let first = 1_700_000_000_000_000i64;
        let offsets = [0u32, 5, 5, 90];
        let t = IntSlice::U32 {
            base: first,
            shift: 0,
            offsets: &offsets,
        };
        assert_eq!(t.to_vec(), vec![first, first + 5, first + 5, first + 90]);
        assert_eq!(t.slice(1..2).at(0), first + 5);
        assert_eq!(t.partition_point(|x| x <= first + 5), 3);
        assert_eq!(t.get(3), Some(first + 90));
        let base = 0x7f00_0000_0000;
        let a = IntSlice::U32 {
            base,
            shift: 9,
            offsets: &offsets,
        };
        assert_eq!(a.to_vec(), vec![base, base + 5 * 512, base + 5 * 512, base + 90 * 512]);
        assert_eq!(a.partition_point(|x| x < base + 512), 1);
    }

    #[test]
    fn codes_read_their_values() {
        let values = [512i64, 8 << 20, 1 << 40];
        let codes = [1u16, 0, 0, 2, 1];
        let c = IntSlice::Coded {
            codes: &codes,
            values: &values,
        };
        let want = [8 << 20, 512, 512, 1 << 40, 8 << 20];
        assert_eq!(c.to_vec(), want);
        assert_eq!(
            (c.len(), c.at(3), c.get(5), c.last()),
            (5, 1 << 40, None, Some(8 << 20))
        );
        assert_eq!(c.slice(1..4).to_vec(), want[1..4]);
        assert_eq!(c.iter().len(), 5);
        // Over the values in entry order, as for the other forms.
        let sorted = IntSlice::Coded {
            codes: &[0, 0, 1, 2],
            values: &values,
        };
        assert_eq!(sorted.partition_point(|x| x <= 512), 2);
        assert_eq!(sorted.partition_point(|x| x < 1 << 40), 3);
    }

    #[test]
    fn reads_u32_and_i64_columns_and_refuses_others() {
        let df = DataFrame::new(
            2,
            vec![
                Column::new("a".into(), [1u32, 2]),
                Column::new("b".into(), [3i64, 4]),
                Column::new("c".into(), [5i32, 6]),
            ],
        )
        .unwrap();
        assert_eq!(IntSlice::of(&df, "a").unwrap().to_vec(), vec![1, 2]);
        assert_eq!(IntSlice::of(&df, "b").unwrap().to_vec(), vec![3, 4]);
        let err = IntSlice::of(&df, "c").unwrap_err().to_string();
        assert!(err.contains("`c` is i32"), "{err}");
    }
}
