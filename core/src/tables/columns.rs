//! Typed column handles: each canonical table's columns declared once, with their polars type,
//! so readers and writers use the same name and type. A handle used on the wrong frame is a
//! loud error naming the column (polars' "not found" or a dtype mismatch), never empty data.

use std::marker::PhantomData;

use polars_core::prelude::*;

use crate::tables::int_slice::IntSlice;
use crate::tables::{NarrowI64, OneOrEach};

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

/// The first value of i64 column `name` — the base a narrow column's one-scalar neighbour
/// holds —, `None` when the frame has no rows; an error naming the column when it is not i64.
pub fn first_i64(df: &DataFrame, name: &str) -> PolarsResult<Option<i64>> {
    let column = df.column(name)?;
    if column.is_empty() {
        return Ok(None);
    }
    match column.get(0)? {
        AnyValue::Int64(v) => Ok(Some(v)),
        other => polars_bail!(SchemaMismatch: "column `{name}` holds {other}, not an i64"),
    }
}

/// The addresses of a frame holding them as 512-byte units after a base (`addr_units` u32 and
/// `addr_base`, one scalar) or as `addr` (i64): the events and the lifetimes alike.
pub fn addresses(df: &DataFrame) -> PolarsResult<IntSlice<'_>> {
    narrow_or_wide(
        df,
        events::ADDR_UNITS,
        events::ADDR_BASE,
        crate::tables::ADDRESS_SHIFT,
        events::ADDR,
    )
}

/// Column `units` of `df` (u32), each value `base + (unit << shift)` with the base its
/// one-scalar neighbour `base` holds (a frame without rows reads no value), or, without that
/// column, `wide` (i64): a series held narrow where it fits, read either way.
fn narrow_or_wide<'a>(
    df: &'a DataFrame,
    units: &str,
    base: &str,
    shift: u32,
    wide: Col<Int64Type>,
) -> PolarsResult<IntSlice<'a>> {
    match df.column(units) {
        Ok(column) => {
            polars_ensure!(
                column.dtype() == &DataType::UInt32,
                SchemaMismatch: "column `{units}` is {}, not u32", column.dtype()
            );
            Ok(IntSlice::U32 {
                base: first_i64(df, base)?.unwrap_or(0),
                shift,
                offsets: column.as_materialized_series().u32()?.cont_slice()?,
            })
        }
        Err(_) => Ok(IntSlice::I64(wide.slice(df)?)),
    }
}

/// Address columns for a frame of `n` rows ([`addresses`] reads them): 512-byte units after a
/// base (u32) and the base (one scalar) when every address is aligned and within 1 TiB of the
/// first; else `addr` (i64).
pub fn address_columns(addr: NarrowI64, n: usize) -> Vec<Column> {
    match addr {
        NarrowI64::Narrow {
            base,
            shift: crate::tables::ADDRESS_SHIFT,
            offsets,
        } => vec![
            UInt32Chunked::from_vec(events::ADDR_UNITS.into(), offsets)
                .into_series()
                .into(),
            Column::new_scalar(
                events::ADDR_BASE.into(),
                Scalar::new(DataType::Int64, AnyValue::Int64(base)),
                n,
            ),
        ],
        other => vec![events::ADDR.build(other.into_vec())],
    }
}

/// The heap bytes a frame's columns hold, a one-value (scalar) column counted as nothing:
/// polars' own `DataFrame::estimated_size` makes such a column into a full array to measure
/// it and keeps that array as long as the column lives (8 bytes a row for a trace's device,
/// stream and `device_free`).
pub fn held_bytes(df: &DataFrame) -> usize {
    df.columns()
        .iter()
        .map(|c| match c.as_scalar_column() {
            Some(_) => 0,
            None => c.as_materialized_series().estimated_size(),
        })
        .sum()
}

/// `column` (of i32 or i64) as one scalar when it has rows, no nulls and one value throughout (the device of a
/// trace of one device, the stream of a trace on one stream): polars reads it the same, and it
/// holds no memory per row. Readers that want a slice of such a column read it with
/// [`crate::analysis::device_runs`] or [`crate::analysis::Streams`], which never materialise it.
pub fn one_value_as_scalar(column: Column) -> Column {
    if column.is_empty() || column.as_scalar_column().is_some() || column.null_count() > 0 {
        return column;
    }
    let Ok(first) = column.get(0).map(|v| v.into_static()) else {
        return column;
    };
    // A plain pass over the values (polars' comparison kernels would start its thread pool).
    fn one_value<T: PartialEq>(values: PolarsResult<&[T]>) -> bool {
        values.is_ok_and(|v| v.iter().all(|x| *x == v[0]))
    }
    let same = match column.dtype() {
        DataType::Int32 => column.i32().is_ok_and(|c| one_value(c.cont_slice())),
        DataType::Int64 => column.i64().is_ok_and(|c| one_value(c.cont_slice())),
        _ => false,
    };
    if !same {
        return column;
    }
    Column::new_scalar(
        column.name().clone(),
        Scalar::new(column.dtype().clone(), first),
        column.len(),
    )
}

/// A column of i64 `values` named `name`: one scalar when they are one value (a trace's
/// stream, usually), else an array. [`crate::analysis::Streams`] reads either form.
pub fn one_or_each_column(name: &str, values: OneOrEach) -> Column {
    match values.into_parts() {
        Ok((one, len)) => Column::new_scalar(name.into(), Scalar::new(DataType::Int64, AnyValue::Int64(one)), len),
        Err(each) => Int64Chunked::from_vec(name.into(), each).into_series().into(),
    }
}

/// `events`: one row per trace entry, grouped by device.
pub mod events {
    use super::Col;
    use polars_core::prelude::{Int32Type, Int64Type, UInt16Type, UInt8Type};

    pub const DEVICE: Col<Int32Type> = Col::new("device");
    /// `Action` code (see `tables`).
    pub const ACTION: Col<UInt8Type> = Col::new("action");
    /// A trace whose addresses are all 512-byte aligned and within 1 TiB of the first holds
    /// [`ADDR_UNITS`] and [`ADDR_BASE`] instead; read either with
    /// [`crate::analysis::DeviceEvents::addr`].
    pub const ADDR: Col<Int64Type> = Col::new("addr");
    /// u32: the address is `ADDR_BASE + 512 × this`.
    pub const ADDR_UNITS: &str = "addr_units";
    /// i64, one scalar.
    pub const ADDR_BASE: &str = "addr_base";
    /// u32 when every size is below 4 GiB, else i64: read it as a [`crate::tables::int_slice::IntSlice`].
    /// A trace of at most 65,536 distinct `(size, stack)` pairs holds [`SIZE_STACK`] instead of
    /// this and [`STACK`]; read either with [`crate::analysis::DeviceEvents::size`].
    pub const SIZE: &str = "size";
    /// u16: the entry's row in the `size_stacks` table ([`super::size_stacks`]).
    pub const SIZE_STACK: Col<UInt16Type> = Col::new("size_stack");
    pub const STREAM: Col<Int64Type> = Col::new("stream");
    /// Null when the trace has no timestamps. A trace whose entries all have one, within 71
    /// minutes of the first, holds [`TIME_AFTER_FIRST_US`] and [`FIRST_TIME_US`] instead.
    pub const TIME_US: Col<Int64Type> = Col::new("time_us");
    /// u32: µs after [`FIRST_TIME_US`]; read with [`crate::analysis::DeviceEvents::time`].
    pub const TIME_AFTER_FIRST_US: &str = "time_after_first_us";
    /// i64, one scalar: the first entry's time.
    pub const FIRST_TIME_US: &str = "first_time_us";
    /// u16 when every stack id is below 65,536, else u32: read it as a
    /// [`crate::tables::stack_ids::StackIds`] (with [`crate::analysis::DeviceEvents::stack`], which
    /// also reads [`SIZE_STACK`]).
    pub const STACK: &str = "stack";
    /// Null unless `oom`.
    pub const DEVICE_FREE: Col<Int64Type> = Col::new("device_free");
}

/// `size_stacks`: the distinct `(size, stack)` pairs of a trace's entries, one row per code of
/// `events.size_stack` (empty when the events hold `size` and `stack` apart).
pub mod size_stacks {
    use super::Col;
    use polars_core::prelude::{Int64Type, UInt32Type};

    pub const SIZE: Col<Int64Type> = Col::new("size");
    pub const STACK: Col<UInt32Type> = Col::new("stack");
}

/// Per-device `usage` frames: the state after every entry.
pub mod usage {
    use super::Col;
    use polars_core::prelude::Int64Type;

    /// The stored frame's time axis (µs, or the entry index) as i64: a trace without
    /// timestamps or one whose times span more than 71 minutes (and every report stored before
    /// 2026-12-04). A trace whose events hold their times narrow has [`TIME_AFTER_FIRST`] and
    /// [`FIRST_TIME`] instead: read either with [`times`].
    pub const TIME: Col<Int64Type> = Col::new("time");
    /// u32: µs after [`FIRST_TIME`] (the events' own column, shared).
    pub const TIME_AFTER_FIRST: &str = "time_after_first";
    /// i64, one scalar: the first entry's time.
    pub const FIRST_TIME: &str = "first_time";
    /// Allocated bytes after each entry, i64: a series whose range does not fit u32 units (and
    /// every report stored before 2026-12-04). Otherwise held as [`ALLOCATED_UNITS`]: read
    /// either with [`allocated`].
    pub const ALLOCATED: Col<Int64Type> = Col::new("allocated");
    /// u32: allocated bytes after each entry as units after [`ALLOCATED_BASE`], the unit
    /// `1 << ALLOCATED_SHIFT` bytes (every request a multiple of it).
    pub const ALLOCATED_UNITS: &str = "allocated_units";
    /// i64, one scalar: the least value.
    pub const ALLOCATED_BASE: &str = "allocated_base";
    /// i64, one scalar: log2 of the unit, at most [`ALLOCATED_MAX_SHIFT`].
    pub const ALLOCATED_SHIFT: &str = "allocated_shift";
    /// The largest unit: 512 bytes, what the caching allocator rounds blocks to.
    pub const ALLOCATED_MAX_SHIFT: u32 = 9;

    /// The allocated bytes of a stored usage frame, held as [`ALLOCATED_UNITS`] or as
    /// [`ALLOCATED`].
    pub fn allocated(df: &polars_core::prelude::DataFrame) -> polars_core::prelude::PolarsResult<super::IntSlice<'_>> {
        use polars_core::prelude::*;
        let shift = match df.column(ALLOCATED_UNITS) {
            Ok(_) => super::first_i64(df, ALLOCATED_SHIFT)?.unwrap_or(0),
            Err(_) => 0,
        };
        polars_ensure!(
            (0..=i64::from(ALLOCATED_MAX_SHIFT)).contains(&shift),
            ComputeError: "column `{ALLOCATED_SHIFT}` is {shift}, not 0 to {ALLOCATED_MAX_SHIFT}"
        );
        super::narrow_or_wide(df, ALLOCATED_UNITS, ALLOCATED_BASE, shift as u32, ALLOCATED)
    }

    /// The time axis of a stored usage frame, held narrow ([`TIME_AFTER_FIRST`] and
    /// [`FIRST_TIME`]) or as [`TIME`].
    pub fn times(df: &polars_core::prelude::DataFrame) -> polars_core::prelude::PolarsResult<super::IntSlice<'_>> {
        super::narrow_or_wide(df, TIME_AFTER_FIRST, FIRST_TIME, 0, TIME)
    }
}

/// Per-device `lifetimes` frames: one row per allocation.
pub mod lifetimes {
    use super::Col;
    use polars_core::prelude::{Int32Type, Int64Type, UInt8Type};

    /// Held as the trace holds its addresses (`addr_units` and `addr_base` while they fit, as
    /// in reports stored before 2026-12-04 `addr`): read them with [`super::addresses`].
    pub const ADDR: Col<Int64Type> = Col::new("addr");
    /// u32 when every size is below 4 GiB, else i64 (and i64 in reports stored before): read
    /// it as a [`crate::tables::int_slice::IntSlice`].
    pub const SIZE: &str = "size";
    pub const STREAM: Col<Int64Type> = Col::new("stream");
    /// u16 when every stack id is below 65,536, else u32 (and u32 in reports stored before):
    /// read it as a [`crate::tables::stack_ids::StackIds`].
    pub const STACK: &str = "stack";
    /// Entry index of the alloc, `-1` before the trace (32 bits: a device's trace holds fewer
    /// than 2^31 entries, see [`crate::analysis::lifetimes::MAX_ENTRIES`]).
    pub const ALLOC_IDX: Col<Int32Type> = Col::new("alloc_idx");
    /// Entry index of the free, `-1` when never freed.
    pub const FREE_IDX: Col<Int32Type> = Col::new("free_idx");
    /// Position in `Category::ALL` (added by the categories analysis).
    pub const CATEGORY: Col<UInt8Type> = Col::new("category");
    /// Position in `CategoryRule::ALL`.
    pub const CATEGORY_RULE: Col<UInt8Type> = Col::new("category_rule");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_bytes_counts_arrays_and_leaves_scalars_unmade() {
        let n = 1_000_000;
        let scalar = one_value_as_scalar(events::STREAM.build(vec![7; n]));
        let df = DataFrame::new(n, vec![scalar, events::ADDR.build(vec![1; n])]).expect("frame");
        assert_eq!(held_bytes(&df), n * 8);
        let stream = df.column("stream").expect("stream");
        assert!(stream
            .as_scalar_column()
            .is_some_and(|s| s.lazy_as_materialized_series().is_none()));
    }

    #[test]
    fn a_wrong_name_or_type_is_an_error_not_empty_data() {
        let df = DataFrame::new(2, vec![events::ADDR.build(vec![1, 2])]).expect("frame");
        assert_eq!(events::ADDR.slice(&df).expect("addr"), &[1, 2]);
        let missing = events::TIME_US.slice(&df).expect_err("no time column");
        assert!(missing.to_string().contains("time_us"), "{missing}");
        let wrong: Col<UInt32Type> = Col::new("addr");
        assert!(wrong.slice(&df).is_err());
    }
}
