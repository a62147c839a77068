//! One device's trace entries, read from the `events` table: the runs of each device
//! ([`device_runs`]), the entries' streams in either stored form ([`Streams`]), and
//! [`DeviceEvents`], the slices every analysis reads.

use polars_core::prelude::*;

use crate::tables::columns::{addresses, events as ev_col, first_i64, size_stacks as ss_col, usage as usage_col, Col};
use crate::tables::int_slice::IntSlice;
use crate::tables::stack_ids::StackIds;
use crate::tables::{Action, SnapshotTables};

/// Consecutive rows of `events` on one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceRun {
    pub device: i64,
    pub first_row: usize,
    pub rows: usize,
}

/// The runs of equal devices in `events.device`, in row order (the events come device by
/// device, so usually one run per device). A trace of one device keeps the column as one
/// scalar (see `SnapshotColumns::into_tables`), read here as one run without materialising it.
pub fn device_runs(events: &DataFrame) -> PolarsResult<Vec<DeviceRun>> {
    let column = events.column(ev_col::DEVICE.name)?;
    if let Some(one) = column.as_scalar_column() {
        polars_ensure!(
            one.dtype() == &DataType::Int32,
            SchemaMismatch: "events column `device` is {}, not i32", one.dtype()
        );
        if one.is_empty() {
            return Ok(Vec::new());
        }
        let device = one.scalar().value().extract::<i64>();
        let device = device.ok_or_else(|| polars_err!(ComputeError: "events column `device` is null"))?;
        return Ok(vec![DeviceRun {
            device,
            first_row: 0,
            rows: one.len(),
        }]);
    }
    let mut runs: Vec<DeviceRun> = Vec::new();
    for (row, &d) in ev_col::DEVICE.slice(events)?.iter().enumerate() {
        match runs.last_mut() {
            Some(run) if run.device == i64::from(d) => run.rows += 1,
            _ => runs.push(DeviceRun {
                device: i64::from(d),
                first_row: row,
                rows: 1,
            }),
        }
    }
    Ok(runs)
}

/// The streams of consecutive trace entries: one for all of them (a trace on one stream keeps
/// its `stream` column as one scalar), or each entry's.
#[derive(Debug, Clone, Copy)]
pub enum Streams<'a> {
    /// `len` entries, all on `stream`.
    One {
        stream: i64,
        len: usize,
    },
    Each(&'a [i64]),
}

impl<'a> Streams<'a> {
    /// The i64 column `name` of `df` (the events' or the lifetimes' `stream`), in either form.
    pub fn of(df: &'a DataFrame, name: &str) -> PolarsResult<Streams<'a>> {
        let column = df.column(name)?;
        match column.as_scalar_column() {
            Some(one) => {
                polars_ensure!(
                    one.dtype() == &DataType::Int64,
                    SchemaMismatch: "column `{name}` is {}, not i64", one.dtype()
                );
                let stream = one.scalar().value().extract::<i64>();
                let stream = stream.ok_or_else(|| polars_err!(ComputeError: "column `{name}` is null"))?;
                Ok(Streams::One { stream, len: one.len() })
            }
            None => Ok(Streams::Each(column.i64()?.cont_slice()?)),
        }
    }

    /// Entry `i`'s stream.
    #[inline]
    pub fn get(&self, i: usize) -> i64 {
        match self {
            Streams::One { stream, len } => {
                assert!(i < *len, "stream of entry {i} of {len}");
                *stream
            }
            Streams::Each(s) => s[i],
        }
    }
    /// Streams of entries `from..from + out.len()` into `out` (panics past the end): one match
    /// for the whole run, where [`Streams::get`] matches for each entry.
    pub fn read_into(&self, from: usize, out: &mut [i64]) {
        let to = from + out.len();
        match *self {
            Streams::One { stream, len } => {
                assert!(to <= len, "streams {from}..{to} of {len}");
                out.fill(stream);
            }
            Streams::Each(s) => out.copy_from_slice(&s[from..to]),
        }
    }
    pub fn len(&self) -> usize {
        match self {
            Streams::One { len, .. } => *len,
            Streams::Each(s) => s.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Entries `a` to before `b`.
    pub fn range(&self, a: usize, b: usize) -> Streams<'a> {
        match *self {
            Streams::One { stream, len } => {
                assert!(a <= b && b <= len, "streams {a}..{b} of {len}");
                Streams::One { stream, len: b - a }
            }
            Streams::Each(s) => Streams::Each(&s[a..b]),
        }
    }
}

/// One device's trace entries as plain slices (zero-copy views into the `events` table).
///
/// Invariant: [`DeviceEvents::new`] checks that every column the accessors read exists with its
/// type as one contiguous slice, so the accessors cannot fail; a table without them is an error
/// there, never an empty trace.
pub struct DeviceEvents {
    pub device: i64,
    pub frame: DataFrame,
    /// The `(size, stack)` pairs the frame's `size_stack` codes name, when it holds codes.
    size_stacks: Option<DataFrame>,
    /// Row of the device's first entry in the `events` table (entry `i` is row `offset + i`).
    pub offset: usize,
    time: Time,
    pub has_time: bool,
}

/// A device's `action` and sizes without the rest of its events ([`DeviceEvents::usage_columns`]).
pub struct UsageColumns {
    frame: DataFrame,
    /// The `(size, stack)` pairs the sizes' codes name, when they are codes.
    size_stacks: Option<DataFrame>,
}

impl UsageColumns {
    pub fn action(&self) -> &[u8] {
        ev_col::ACTION.slice(&self.frame).expect("taken from checked events")
    }
    /// The sizes, as [`DeviceEvents::size`] reads them.
    pub fn size(&self) -> IntSlice<'_> {
        match &self.size_stacks {
            Some(pairs) => IntSlice::Coded {
                codes: ev_col::SIZE_STACK
                    .slice(&self.frame)
                    .expect("taken from checked events"),
                values: ss_col::SIZE.slice(pairs).expect("taken from checked events"),
            },
            None => IntSlice::of(&self.frame, ev_col::SIZE).expect("taken from checked events"),
        }
    }
}

/// Where a device's time axis is.
enum Time {
    /// The events' `time_us`.
    Us,
    /// The events' µs after the first, which is this.
    AfterFirst(i64),
    /// Entry indices: the trace has no timestamps (or not on every entry). A polars array, so
    /// the stored usage frame's time column shares it ([`DeviceEvents::usage_time_columns`]).
    Order(Int64Chunked),
}

impl DeviceEvents {
    pub fn new(t: &SnapshotTables, device: i64) -> PolarsResult<DeviceEvents> {
        let (start, len) = device_runs(&t.events)?
            .into_iter()
            .find(|r| r.device == device)
            .map_or((t.events.height(), 0), |r| (r.first_row, r.rows));
        let frame = t.events.slice(start as i64, len);
        ev_col::ACTION.slice(&frame)?;
        addresses(&frame)?;
        let size_stacks = match frame.column(ev_col::SIZE_STACK.name) {
            Ok(_) => {
                let codes = ev_col::SIZE_STACK.slice(&frame)?;
                let pairs = t.size_stacks.height();
                ss_col::SIZE.slice(&t.size_stacks)?;
                ss_col::STACK.slice(&t.size_stacks)?;
                let code = codes.iter().copied().fold(0u16, u16::max);
                if !codes.is_empty() && usize::from(code) >= pairs {
                    polars_bail!(
                        OutOfBounds: "events column `{}` names pair {code} of a `size_stacks` table of {pairs}",
                        ev_col::SIZE_STACK.name
                    );
                }
                Some(t.size_stacks.clone())
            }
            Err(_) => {
                IntSlice::of(&frame, ev_col::SIZE)?;
                StackIds::of(&frame, ev_col::STACK)?;
                None
            }
        };
        Streams::of(&frame, ev_col::STREAM.name)?;
        // Typed without being read as a series: a column of nulls (no `oom` entry, or no
        // timestamps) is kept as one scalar, and materialising it would allocate 8 bytes per
        // entry for every `DeviceEvents` alive (200 MB each for 25 M entries).
        let column = frame.column(ev_col::DEVICE_FREE.name)?;
        polars_ensure!(
            column.dtype() == &DataType::Int64,
            SchemaMismatch: "events column `{}` is {}, not i64", ev_col::DEVICE_FREE.name, column.dtype()
        );
        let time = if len == 0 {
            Time::Order(Int64Chunked::from_vec(usage_col::TIME.name.into(), Vec::new()))
        } else if frame.column(ev_col::TIME_AFTER_FIRST_US).is_ok() {
            IntSlice::of(&frame, ev_col::TIME_AFTER_FIRST_US)?;
            Time::AfterFirst(first_i64(&frame, ev_col::FIRST_TIME_US)?.unwrap_or(0))
        } else {
            let column = frame.column(ev_col::TIME_US.name)?;
            polars_ensure!(
                column.dtype() == &DataType::Int64,
                SchemaMismatch: "events column `{}` is {}, not i64", ev_col::TIME_US.name, column.dtype()
            );
            if column.null_count() == 0 {
                ev_col::TIME_US.slice(&frame)?;
                Time::Us
            } else {
                Time::Order(Int64Chunked::from_vec(
                    usage_col::TIME.name.into(),
                    (0..len as i64).collect(),
                ))
            }
        };
        let has_time = !matches!(time, Time::Order(_));
        Ok(DeviceEvents {
            device,
            frame,
            size_stacks,
            offset: start,
            time,
            has_time,
        })
    }

    pub fn len(&self) -> usize {
        self.frame.height()
    }
    /// Time of each entry: its timestamp (µs), or the entry index when the trace has no
    /// timestamps.
    pub fn time(&self) -> IntSlice<'_> {
        match &self.time {
            Time::Us => IntSlice::I64(self.col(ev_col::TIME_US)),
            Time::AfterFirst(first) => IntSlice::U32 {
                base: *first,
                shift: 0,
                offsets: self.col(Col::<UInt32Type>::new(ev_col::TIME_AFTER_FIRST_US)),
            },
            Time::Order(order) => IntSlice::I64(order.cont_slice().expect("one chunk without nulls")),
        }
    }
    /// [`DeviceEvents::time`] as a stored usage frame's time columns
    /// ([`crate::tables::columns::usage::times`] reads them): µs after the first (u32) and the first
    /// (one scalar) when the events hold them so, else one i64 column. Timestamps share the
    /// events table's memory instead of copying it.
    pub fn usage_time_columns(&self) -> PolarsResult<Vec<Column>> {
        Ok(match &self.time {
            Time::Us => {
                let mut c = self.frame.column(ev_col::TIME_US.name)?.clone();
                c.rename(usage_col::TIME.name.into());
                vec![c]
            }
            Time::AfterFirst(first) => {
                let mut c = self.frame.column(ev_col::TIME_AFTER_FIRST_US)?.clone();
                c.rename(usage_col::TIME_AFTER_FIRST.into());
                let first = Scalar::new(DataType::Int64, AnyValue::Int64(*first));
                vec![c, Column::new_scalar(usage_col::FIRST_TIME.into(), first, self.len())]
            }
            Time::Order(order) => vec![order.clone().into_series().into()],
        })
    }
    pub fn is_empty(&self) -> bool {
        self.frame.height() == 0
    }
    pub fn action(&self) -> &[u8] {
        self.col(ev_col::ACTION)
    }
    /// Addresses, held as 512-byte units after a base when they fit.
    pub fn addr(&self) -> IntSlice<'_> {
        addresses(&self.frame).expect("DeviceEvents::new checked these columns")
    }
    /// Sizes: codes of `(size, stack)` pairs, or held as u32 when every one is below 4 GiB.
    pub fn size(&self) -> IntSlice<'_> {
        match self.pairs(ss_col::SIZE) {
            Some((codes, values)) => IntSlice::Coded { codes, values },
            None => IntSlice::of(&self.frame, ev_col::SIZE).expect("DeviceEvents::new checked this column"),
        }
    }
    /// The columns a usage series is made from (`action` and the sizes), shared with these
    /// events, apart from the rest of them.
    pub fn usage_columns(&self) -> UsageColumns {
        let size = if self.size_stacks.is_some() {
            ev_col::SIZE_STACK.name
        } else {
            ev_col::SIZE
        };
        let columns = [ev_col::ACTION.name, size]
            .into_iter()
            .map(|name| {
                self.frame
                    .column(name)
                    .expect("DeviceEvents::new checked these columns")
                    .clone()
            })
            .collect();
        UsageColumns {
            frame: DataFrame::new(self.len(), columns).expect("columns of one frame"),
            size_stacks: self.size_stacks.clone(),
        }
    }
    pub fn stream(&self) -> Streams<'_> {
        Streams::of(&self.frame, ev_col::STREAM.name).expect("DeviceEvents::new checked this column")
    }
    /// Stack ids: codes of `(size, stack)` pairs, or held as u16 when every one is below 65,536.
    pub fn stack(&self) -> StackIds<'_> {
        match self.pairs(ss_col::STACK) {
            Some((codes, ids)) => StackIds::Coded { codes, ids },
            None => StackIds::of(&self.frame, ev_col::STACK).expect("DeviceEvents::new checked this column"),
        }
    }
    /// The entries' `size_stack` codes and column `c` of the pairs they name, when the trace
    /// holds codes.
    fn pairs<T: PolarsNumericType>(&self, c: Col<T>) -> Option<(&[u16], &[T::Native])> {
        let pairs = self.size_stacks.as_ref()?;
        let column = c.slice(pairs).expect("DeviceEvents::new checked this column");
        Some((self.col(ev_col::SIZE_STACK), column))
    }
    /// A column [`DeviceEvents::new`] checked.
    fn col<T: PolarsNumericType>(&self, c: Col<T>) -> &[T::Native] {
        c.slice(&self.frame).expect("DeviceEvents::new checked this column")
    }
    /// `device_free` of entry `i` (only `oom` entries have one).
    pub fn device_free(&self, i: usize) -> Option<i64> {
        self.frame
            .column(ev_col::DEVICE_FREE.name)
            .ok()?
            .get(i)
            .ok()?
            .extract::<i64>()
    }
    /// Time of entry `i`, when the trace has timestamps.
    pub fn time_us(&self, i: usize) -> Option<i64> {
        self.has_time.then(|| self.time().get(i)).flatten()
    }
    /// Indices of entries with `action`.
    pub fn indices_of(&self, action: Action) -> Vec<usize> {
        let a = action as u8;
        self.action()
            .iter()
            .enumerate()
            .filter(|(_, &x)| x == a)
            .map(|(i, _)| i)
            .collect()
    }
}

/// The device's entries whose `event_notes` row has a string in `column` (`user_metadata`,
/// `category`, …): `(entry index on the device, the string)`, in note order. A column that a
/// stored report predates reads as empty.
pub fn device_notes<'a>(
    event_notes: &'a DataFrame,
    ev: &DeviceEvents,
    column: &str,
) -> PolarsResult<Vec<(usize, &'a str)>> {
    let (Ok(rows), Ok(values)) = (event_notes.column("row"), event_notes.column(column)) else {
        return Ok(Vec::new());
    };
    let (rows, values) = (rows.u32()?, values.str()?);
    Ok(rows
        .iter()
        .zip(values.iter())
        .filter_map(|(row, v)| {
            let i = (row? as usize).checked_sub(ev.offset).filter(|&i| i < ev.len())?;
            Some((i, v?))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::columns::{events, one_or_each_column, one_value_as_scalar};
    use crate::tables::OneOrEach;

    #[test]
    fn one_value_throughout_becomes_a_scalar_and_reads_back_the_same() {
        let one = one_value_as_scalar(events::STREAM.build(vec![5, 5, 5]));
        assert!(one.as_scalar_column().is_some());
        assert_eq!(one.len(), 3);
        let df = DataFrame::new(3, vec![one]).expect("frame");
        let streams = Streams::of(&df, "stream").expect("streams");
        assert_eq!((streams.len(), streams.get(2)), (3, 5));
        assert_eq!(streams.range(1, 3).len(), 2);
        for kept in [
            events::STREAM.build(vec![5, 6, 5]),
            Int64Chunked::from_iter_options("stream".into(), [Some(5), None].into_iter()).into_column(),
            events::STREAM.build(vec![]),
        ] {
            assert!(one_value_as_scalar(kept).as_scalar_column().is_none());
        }
        let each = DataFrame::new(3, vec![events::STREAM.build(vec![5, 6, 5])]).expect("frame");
        let streams = Streams::of(&each, "stream").expect("streams");
        assert_eq!((0..3).map(|i| streams.get(i)).collect::<Vec<_>>(), [5, 6, 5]);
        // A stream builder of one value becomes the scalar, of several the array.
        let mut built = OneOrEach::default();
        built.push(1);
        built.push(1);
        assert!(one_or_each_column("stream", built.clone()).as_scalar_column().is_some());
        built.push(2);
        assert_eq!(
            one_or_each_column("stream", built)
                .i64()
                .expect("i64")
                .cont_slice()
                .expect("slice"),
            &[1, 1, 2]
        );

        // The device runs of a one-device trace (a scalar) and of two devices (an array).
        let run = |device, first_row, rows| DeviceRun {
            device,
            first_row,
            rows,
        };
        let one = DataFrame::new(4, vec![one_value_as_scalar(events::DEVICE.build(vec![3; 4]))]).expect("frame");
        assert_eq!(device_runs(&one).expect("runs"), [run(3, 0, 4)]);
        let two = DataFrame::new(4, vec![events::DEVICE.build(vec![0, 0, 1, 1])]).expect("frame");
        assert_eq!(device_runs(&two).expect("runs"), [run(0, 0, 2), run(1, 2, 2)]);
    }
}
