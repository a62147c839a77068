//! [`IntSlice`]: a column of integers read as i64 whether it is held as u32 or as i64.
//!
//! A trace's sizes are held as u32 when every one is below 4 GiB (nearly always: a single
//! block of 4 GiB or more is rare), which is 4 bytes an entry less for as long as the trace
//! lives: 133 MiB on a 35 M-entry snapshot. The analyses read them through this type, so they
//! read a stored report from before (i64) and one from now (u32) alike.

use std::ops::Range;

use polars::prelude::*;

/// Integers read as i64, held as u32 or i64.
#[derive(Debug, Clone, Copy)]
pub enum IntSlice<'a> {
    U32(&'a [u32]),
    I64(&'a [i64]),
}

impl<'a> IntSlice<'a> {
    /// Column `name` of `df` as one contiguous slice: u32 or i64, without nulls, in one chunk.
    pub fn of(df: &'a DataFrame, name: &str) -> PolarsResult<IntSlice<'a>> {
        let column = df.column(name)?;
        match column.dtype() {
            DataType::UInt32 => Ok(IntSlice::U32(column.as_materialized_series().u32()?.cont_slice()?)),
            DataType::Int64 => Ok(IntSlice::I64(column.as_materialized_series().i64()?.cont_slice()?)),
            other => polars_bail!(SchemaMismatch: "column `{name}` is {other}, not u32 or i64"),
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        match self {
            IntSlice::U32(v) => v.len(),
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
            IntSlice::U32(v) => v[i] as i64,
            IntSlice::I64(v) => v[i],
        }
    }

    /// The values in `range`.
    pub fn slice(&self, range: Range<usize>) -> IntSlice<'a> {
        match self {
            IntSlice::U32(v) => IntSlice::U32(&v[range]),
            IntSlice::I64(v) => IntSlice::I64(&v[range]),
        }
    }

    /// The values in order.
    pub fn iter(&self) -> IntSliceIter<'a> {
        match self {
            IntSlice::U32(v) => IntSliceIter::U32(v.iter()),
            IntSlice::I64(v) => IntSliceIter::I64(v.iter()),
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
    U32(std::slice::Iter<'a, u32>),
    I64(std::slice::Iter<'a, i64>),
}

impl Iterator for IntSliceIter<'_> {
    type Item = i64;
    #[inline]
    fn next(&mut self) -> Option<i64> {
        match self {
            IntSliceIter::U32(it) => it.next().map(|&v| v as i64),
            IntSliceIter::I64(it) => it.next().copied(),
        }
    }
    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            IntSliceIter::U32(it) => it.size_hint(),
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
        let (n, w) = (IntSlice::U32(&narrow), IntSlice::from(&wide[..]));
        assert_eq!(n.to_vec(), w.to_vec());
        assert_eq!(n.at(2), 4_294_967_295);
        assert_eq!(n.slice(1..3).to_vec(), vec![512, u32::MAX as i64]);
        assert_eq!(w.slice(0..1).iter().len(), 1);
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
