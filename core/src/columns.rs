//! Typed column handles: each canonical table's columns declared once, with their polars type,
//! so readers and writers use the same name and type. A handle used on the wrong frame is a
//! loud error naming the column (polars' "not found" or a dtype mismatch), never empty data.

use std::marker::PhantomData;

use polars::prelude::*;

/// A column of polars numeric type `T`.
pub struct Col<T: PolarsNumericType> {
    pub name: &'static str,
    _type: PhantomData<T>,
}

impl<T: PolarsNumericType> Clone for Col<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: PolarsNumericType> Copy for Col<T> {}

impl<T: PolarsNumericType> Col<T> {
    pub const fn new(name: &'static str) -> Self {
        Col {
            name,
            _type: PhantomData,
        }
    }
    /// The column in `df`, typed.
    pub fn of<'a>(&self, df: &'a DataFrame) -> PolarsResult<&'a ChunkedArray<T>> {
        df.column(self.name)?.as_materialized_series().unpack::<T>()
    }
    /// The column as one contiguous slice (an error if it has nulls or several chunks).
    pub fn slice<'a>(&self, df: &'a DataFrame) -> PolarsResult<&'a [T::Native]> {
        self.of(df)?.cont_slice()
    }
    /// A column of this name and type from `values` (no copy).
    pub fn build(&self, values: Vec<T::Native>) -> Column {
        ChunkedArray::<T>::from_vec(self.name.into(), values)
            .into_series()
            .into()
    }
}

/// `events`: one row per trace entry, grouped by device.
pub mod events {
    use super::Col;
    use polars::prelude::{Int32Type, Int64Type, UInt32Type, UInt8Type};

    pub const DEVICE: Col<Int32Type> = Col::new("device");
    /// `Action` code (see `tables`).
    pub const ACTION: Col<UInt8Type> = Col::new("action");
    pub const ADDR: Col<Int64Type> = Col::new("addr");
    pub const SIZE: Col<Int64Type> = Col::new("size");
    pub const STREAM: Col<Int64Type> = Col::new("stream");
    /// Null when the trace has no timestamps.
    pub const TIME_US: Col<Int64Type> = Col::new("time_us");
    pub const STACK: Col<UInt32Type> = Col::new("stack");
    /// Null unless `oom`.
    pub const DEVICE_FREE: Col<Int64Type> = Col::new("device_free");
}

/// Per-device `usage` frames: the state after every entry.
pub mod usage {
    use super::Col;
    use polars::prelude::Int64Type;

    /// The stored frame's time axis (µs, or the entry index).
    pub const TIME: Col<Int64Type> = Col::new("time");
    pub const ALLOCATED: Col<Int64Type> = Col::new("allocated");
    pub const RESERVED: Col<Int64Type> = Col::new("reserved");
}

/// Per-device `lifetimes` frames: one row per allocation.
pub mod lifetimes {
    use super::Col;
    use polars::prelude::{Int64Type, UInt32Type, UInt8Type};

    pub const ADDR: Col<Int64Type> = Col::new("addr");
    pub const SIZE: Col<Int64Type> = Col::new("size");
    pub const STREAM: Col<Int64Type> = Col::new("stream");
    pub const STACK: Col<UInt32Type> = Col::new("stack");
    /// Entry index of the alloc, `-1` before the trace.
    pub const ALLOC_IDX: Col<Int64Type> = Col::new("alloc_idx");
    /// Entry index of the free, `-1` when never freed.
    pub const FREE_IDX: Col<Int64Type> = Col::new("free_idx");
    /// Position in `Category::ALL` (added by the categories analysis).
    pub const CATEGORY: Col<UInt8Type> = Col::new("category");
    /// Position in `CategoryRule::ALL`.
    pub const CATEGORY_RULE: Col<UInt8Type> = Col::new("category_rule");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrong_name_or_type_is_an_error_not_empty_data() {
        let df = DataFrame::new(2, vec![events::ADDR.build(vec![1, 2])]).expect("frame");
        assert_eq!(events::ADDR.slice(&df).expect("addr"), &[1, 2]);
        let missing = events::SIZE.slice(&df).expect_err("no size column");
        assert!(missing.to_string().contains("size"), "{missing}");
        let wrong: Col<UInt32Type> = Col::new("addr");
        assert!(wrong.slice(&df).is_err());
    }
}
