//! [`StackIds`]: a column of stack ids read as u32 whether it is held as u16, as u32, or as u16
//! codes of a table of ids (a trace's `(size, stack)` pairs, [`crate::tables::SizesAndStacks`]).
//!
//! A trace's and its lifetimes' stack ids are u16 while every id is below 65,536
//! ([`crate::tables::NarrowStacks`]), 2 bytes a row less for as long as they live. The analyses
//! and the queries read them through this type, so they read a stored report from before
//! (u32) and one from now alike.

use polars_core::prelude::*;

/// Stack ids read as u32, held as u16 or u32.
#[derive(Debug, Clone, Copy)]
pub enum StackIds<'a> {
    U16(&'a [u16]),
    U32(&'a [u32]),
    /// Id `i` is `ids[codes[i]]`.
    Coded {
        codes: &'a [u16],
        ids: &'a [u32],
    },
}

impl<'a> StackIds<'a> {
    /// Column `name` of `df` as one contiguous slice: u16 or u32, without nulls, in one chunk.
    pub fn of(df: &'a DataFrame, name: &str) -> PolarsResult<StackIds<'a>> {
        let column = df.column(name)?;
        match column.dtype() {
            DataType::UInt16 => Ok(StackIds::U16(column.as_materialized_series().u16()?.cont_slice()?)),
            DataType::UInt32 => Ok(StackIds::U32(column.as_materialized_series().u32()?.cont_slice()?)),
            other => polars_bail!(SchemaMismatch: "column `{name}` is {other}, not u16 or u32"),
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        match self {
            StackIds::U16(v) => v.len(),
            StackIds::U32(v) => v.len(),
            StackIds::Coded { codes, .. } => codes.len(),
        }
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Id `i` (panics past the end, as indexing a slice does).
    #[inline]
    pub fn at(&self, i: usize) -> u32 {
        match self {
            StackIds::U16(v) => u32::from(v[i]),
            StackIds::U32(v) => v[i],
            StackIds::Coded { codes, ids } => ids[codes[i] as usize],
        }
    }

    /// Ids `from..from + out.len()` into `out` (panics past the end): one match for the whole
    /// run, where [`StackIds::at`] matches for each id.
    pub fn read_into(&self, from: usize, out: &mut [u32]) {
        let to = from + out.len();
        match *self {
            StackIds::U16(v) => {
                for (o, &id) in out.iter_mut().zip(&v[from..to]) {
                    *o = u32::from(id);
                }
            }
            StackIds::U32(v) => out.copy_from_slice(&v[from..to]),
            StackIds::Coded { codes, ids } => {
                for (o, &c) in out.iter_mut().zip(&codes[from..to]) {
                    *o = ids[c as usize];
                }
            }
        }
    }

    /// Id `i`, `None` past the end.
    #[inline]
    pub fn get(&self, i: usize) -> Option<u32> {
        (i < self.len()).then(|| self.at(i))
    }

    /// The ids in `range`.
    pub fn slice(&self, range: std::ops::Range<usize>) -> StackIds<'a> {
        match *self {
            StackIds::U16(v) => StackIds::U16(&v[range]),
            StackIds::U32(v) => StackIds::U32(&v[range]),
            StackIds::Coded { codes, ids } => StackIds::Coded {
                codes: &codes[range],
                ids,
            },
        }
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = u32> + 'a {
        // One of `narrow` and `wide` is empty: the iterator reads the other, the u16 values as
        // ids, or as codes of `ids` where there are any.
        let (narrow, wide, ids): (&'a [u16], &'a [u32], &'a [u32]) = match *self {
            StackIds::U16(v) => (v, &[], &[]),
            StackIds::U32(v) => (&[], v, &[]),
            StackIds::Coded { codes, ids } => (codes, &[], ids),
        };
        StackIdsIter {
            narrow: narrow.iter(),
            wide: wide.iter(),
            ids,
        }
    }
}

impl<'a> From<&'a [u32]> for StackIds<'a> {
    fn from(ids: &'a [u32]) -> Self {
        StackIds::U32(ids)
    }
}

/// The ids of a [`StackIds`], as u32.
struct StackIdsIter<'a> {
    narrow: std::slice::Iter<'a, u16>,
    wide: std::slice::Iter<'a, u32>,
    /// The ids the narrow values are codes of (empty: they are the ids).
    ids: &'a [u32],
}

impl Iterator for StackIdsIter<'_> {
    type Item = u32;
    #[inline]
    fn next(&mut self) -> Option<u32> {
        match self.narrow.next() {
            Some(&v) if self.ids.is_empty() => Some(u32::from(v)),
            Some(&c) => Some(self.ids[c as usize]),
            None => self.wide.next().copied(),
        }
    }
    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.narrow.len() + self.wide.len();
        (n, Some(n))
    }
}

impl ExactSizeIterator for StackIdsIter<'_> {}

/// The ids as a polars column named `name`: u16 or u32, as they were held.
pub fn stack_id_column(name: &str, ids: crate::tables::NarrowStacks) -> Column {
    match ids {
        crate::tables::NarrowStacks::Narrow(v) => UInt16Chunked::from_vec(name.into(), v).into_series().into(),
        crate::tables::NarrowStacks::Wide(v) => UInt32Chunked::from_vec(name.into(), v).into_series().into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::NarrowStacks;

    #[test]
    fn either_width_reads_the_same_ids() {
        for ids in [vec![0u32, 3, 65_535, 9], vec![0, 65_536, u32::MAX, 2], vec![]] {
            let mut pushed = NarrowStacks::default();
            ids.iter().for_each(|&id| pushed.push(id));
            let df = DataFrame::new(ids.len(), vec![stack_id_column("stack", pushed)]).expect("frame");
            let read = StackIds::of(&df, "stack").expect("u16 or u32");
            let narrow = ids.iter().all(|&id| id <= u32::from(u16::MAX));
            assert_eq!(matches!(read, StackIds::U16(_)), narrow, "{ids:?}");
            assert_eq!(read.len(), ids.len());
            assert_eq!(read.iter().collect::<Vec<_>>(), ids);
            assert_eq!((0..ids.len()).map(|i| read.at(i)).collect::<Vec<_>>(), ids);
            assert_eq!(read.get(ids.len()), None);
            if ids.len() > 2 {
                assert_eq!(read.slice(1..3).iter().collect::<Vec<_>>(), ids[1..3]);
            }
        }
    }

    #[test]
    fn codes_read_their_ids() {
        let (codes, ids) = ([2u16, 0, 2, 1], [7u32, 70_000, 3]);
        let read = StackIds::Coded {
            codes: &codes,
            ids: &ids,
        };
        assert_eq!(read.iter().collect::<Vec<_>>(), [3, 7, 3, 70_000]);
        assert_eq!((read.len(), read.at(3), read.get(4)), (4, 70_000, None));
        assert_eq!(read.slice(1..3).iter().collect::<Vec<_>>(), [7, 3]);
        assert_eq!(read.iter().len(), 4);
    }

    #[test]
    fn other_types_are_refused_by_name() {
        let df = DataFrame::new(1, vec![Column::new("stack".into(), vec![1i64])]).expect("frame");
        let err = StackIds::of(&df, "stack").expect_err("i64 is no stack id").to_string();
        assert!(err.contains("`stack`") && err.contains("u16 or u32"), "{err}");
    }
}
