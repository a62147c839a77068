//! The store's Parquet objects: how a frame's rows are grouped ([`RowGroups`]), how it is
//! encoded ([`encode`]: plain or delta pages under zstd, assembled from polars' own lower-level writer)
//! and decoded into the form queries read ([`decode`]).

use polars::prelude::*;

/// How an object's rows are grouped in its Parquet file.
#[derive(Clone, Copy)]
pub enum RowGroups {
    /// polars' default, 262,144 rows a group: what the tables are written as.
    Default,
    /// One group: it decodes to one chunk per column, so a load has nothing to rechunk. For the
    /// device frames, which every timeline of a stored report loads. A 2 GB report (25 M
    /// entries): the server's peak while loading them 1.70 -> 1.33 GB and the first exact
    /// timeline after a restart 1.4 s -> 0.9 s, for an ingest peak of 2.82 GB instead of 2.44
    /// (polars' dictionary-encoding writer, used then, held a whole group's encoding state).
    /// Not for the tables, rarely loaded: one group each took that ingest to 3.05-3.2 GB.
    One,
}

/// A frame as Parquet bytes, each column plain- or delta-encoded (`deltas_pay`) and
/// zstd-compressed, never dictionary-encoded (hand-assembled
/// from polars' own lower-level writer, `polars-parquet`): polars' `ParquetWriter` tries a
/// dictionary for every integer column, a cardinality estimate and then a hash map over the
/// column, which took most of an ingest's storing stage and made its objects larger (zstd
/// finds the repeats in plain values better than in dictionary keys). A 2 GB report: storing
/// 5.9 -> 3.0 s, data 199 -> 134 MB, the ingest's peak 2.63 -> 2.39 GB; loads as fast.
pub fn encode(df: &DataFrame, groups: RowGroups) -> PolarsResult<Vec<u8>> {
    use polars_parquet::write::{
        get_dtype_encoding, CompressionOptions, Encoding, FileWriter, KeyValue, RowGroupIterator, StatisticsOptions,
        Version, WriteOptions,
    };
    let (columns, scalars) = without_scalars(df)?;
    let df = &columns;
    let schema = df.schema().to_arrow(CompatLevel::newest());
    let encodings: Vec<Vec<Encoding>> = schema
        .iter_values()
        .zip(df.columns())
        .map(|(f, column)| {
            get_dtype_encoding(&f.dtype)
                .into_iter()
                .map(|e| match e {
                    Encoding::RleDictionary if deltas_pay(column) => Encoding::DeltaBinaryPacked,
                    Encoding::RleDictionary => Encoding::Plain,
                    _ => e,
                })
                .collect()
        })
        .collect();
    // What polars' writer writes apart from the encodings.
    let options = WriteOptions {
        statistics: StatisticsOptions::default(),
        version: Version::V1,
        compression: CompressionOptions::Zstd(None),
        data_page_size: None,
    };
    let rows = match groups {
        RowGroups::Default => DEFAULT_ROW_GROUP,
        RowGroups::One => df.height().max(1),
    };
    // Each row group one chunk per column, made as the writer reaches it: what a part copies
    // (a rechunk, a column of nulls kept as one scalar made into an array) is held for that
    // part only, not for the whole frame at once.
    let batches = (0..df.height()).step_by(rows).flat_map(move |offset| {
        let mut part = df.slice(offset as i64, rows);
        part.rechunk_mut();
        part.iter_chunks(CompatLevel::newest(), false)
            .filter(|batch| !batch.is_empty())
            .collect::<Vec<_>>()
    });
    let row_groups = RowGroupIterator::try_new(batches.map(Ok), &schema, options, encodings.into())?;
    let mut writer = FileWriter::try_new(Vec::new(), schema, options)?;
    for group in row_groups {
        writer.write(u64::MAX, group?)?;
    }
    let scalars = (!scalars.is_empty())
        .then(|| serde_json::to_string(&scalars))
        .transpose()
        .map_err(|e| polars_err!(ComputeError: "one-value columns: {e}"))?;
    writer.end(scalars.map(|json| vec![KeyValue::new(SCALAR_COLUMNS.to_owned(), json)]))?;
    Ok(writer.into_inner())
}

/// The file metadata key under which a frame's one-value columns are stored.
const SCALAR_COLUMNS: &str = "memlens:scalar_columns";

/// A one-value (scalar) integer column, stored as its value in the file's metadata instead of
/// as a Parquet column: written as one, it was made into an array of its every row first (a
/// device's lifetimes have two such, the stream and the addresses' base: 8 bytes a row each,
/// 94 MB apiece on the 2 GB generated snapshot, at the top of the server's ingest).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct ScalarColumn {
    name: String,
    /// Its place among the frame's columns.
    at: usize,
    dtype: ScalarType,
    /// `None`: every row is null.
    value: Option<i64>,
}

#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
enum ScalarType {
    I64,
    I32,
    U32,
    U16,
    U8,
}

impl ScalarType {
    fn of(dtype: &DataType) -> Option<ScalarType> {
        Some(match dtype {
            DataType::Int64 => ScalarType::I64,
            DataType::Int32 => ScalarType::I32,
            DataType::UInt32 => ScalarType::U32,
            DataType::UInt16 => ScalarType::U16,
            DataType::UInt8 => ScalarType::U8,
            _ => return None,
        })
    }

    fn dtype(self) -> DataType {
        match self {
            ScalarType::I64 => DataType::Int64,
            ScalarType::I32 => DataType::Int32,
            ScalarType::U32 => DataType::UInt32,
            ScalarType::U16 => DataType::UInt16,
            ScalarType::U8 => DataType::UInt8,
        }
    }
}

/// `df` less its one-value integer columns, and those columns (none when every column is one:
/// a Parquet file keeps its rows' count in its columns).
fn without_scalars(df: &DataFrame) -> PolarsResult<(DataFrame, Vec<ScalarColumn>)> {
    let mut scalars = Vec::new();
    if df.height() > 0 {
        for (at, column) in df.columns().iter().enumerate() {
            let (Some(scalar), Some(dtype)) = (column.as_scalar_column(), ScalarType::of(column.dtype())) else {
                continue;
            };
            let value = scalar.scalar().value();
            scalars.push(ScalarColumn {
                name: column.name().to_string(),
                at,
                dtype,
                value: (!value.is_null()).then(|| value.extract::<i64>()).flatten(),
            });
        }
    }
    if scalars.is_empty() || scalars.len() == df.width() {
        return Ok((df.clone(), Vec::new()));
    }
    let names: Vec<&str> = scalars.iter().map(|c| c.name.as_str()).collect();
    Ok((df.drop_many(names), scalars))
}

/// The one-value columns [`encode`] kept in `bytes`' metadata, put back in their places as
/// scalar columns of `df`.
fn with_scalars(df: &mut DataFrame, scalars: Vec<ScalarColumn>) -> PolarsResult<()> {
    let height = df.height();
    for c in scalars {
        let dtype = c.dtype.dtype();
        let value = match c.value {
            None => AnyValue::Null,
            Some(v) => AnyValue::Int64(v)
                .strict_cast(&dtype)
                .ok_or_else(|| polars_err!(ComputeError: "one-value column `{}`: {v} is no {dtype}", c.name))?,
        };
        let value = value.into_static();
        let column = Column::new_scalar(c.name.into(), Scalar::new(dtype, value), height);
        df.insert_column(c.at.min(df.width()), column)?;
    }
    Ok(())
}

/// Whether `column` is stored as deltas (bit-packed) rather than plain values: entry indexes
/// (32-bit), 64-bit and unsigned 32-bit columns that never decrease (times, and times held as
/// µs after the first), and running totals
/// ([`RUNNING_TOTALS`]), whose changes are the trace's sizes. Either way zstd compresses the
/// pages after. Deltas make such columns a fraction of their plain size and decode faster, but
/// decode slower than plain values where they jump about (addresses, sizes). Measured with
/// `memlens-bench-store` on the 2 GB generated snapshot, plain / these deltas / deltas for
/// every integer column: stored 137 / 46 / 15 MiB, storing 4.0 / 2.8 / 2.8 s, its frames read
/// back in 0.72-0.84 / 0.51 / 0.42 s, its tables in 1.36-1.43 / 1.16 / 2.56 s. The bench
/// report: 28.5 / 20.9 / 19.9 MiB. The running totals as deltas too (the trace's tables no
/// longer stored; a slower machine, two runs each): the 2 GB snapshot stored 39.4 -> 6.0 MiB,
/// storing 1.63-2.06 -> 1.50-1.64 s, its frames read back in 0.79-0.93 -> 0.58-0.63 s; the
/// bench report 14.3 -> 13.0 MiB, frames read back in 0.082 -> 0.068-0.077 s (deltas for
/// every 64-bit column as well: 13.5 MiB, 0.066-0.075 s).
fn deltas_pay(column: &Column) -> bool {
    if column.as_scalar_column().is_some() {
        return false;
    }
    match column.dtype() {
        DataType::Int32 => true,
        DataType::Int64 if RUNNING_TOTALS.contains(&column.name().as_str()) => true,
        DataType::Int64 => column.i64().is_ok_and(never_decreases),
        DataType::UInt32 if RUNNING_TOTALS.contains(&column.name().as_str()) => true,
        DataType::UInt32 => column.u32().is_ok_and(never_decreases),
        _ => false,
    }
}

/// Whether `c` has no nulls and its values never decrease.
fn never_decreases<T: PolarsNumericType>(c: &ChunkedArray<T>) -> bool {
    let mut last = None;
    c.null_count() == 0
        && c.downcast_iter().all(|chunk| {
            chunk.values().iter().all(|&v| {
                let up = last.is_none_or(|l| v >= l);
                last = Some(v);
                up
            })
        })
}

/// Columns that are running totals of the trace's sizes: the allocated bytes after each entry
/// (`usage`), in bytes or in units. Their deltas are one request's size, never the whole total.
const RUNNING_TOTALS: [&str; 2] = [
    memlens_core::columns::usage::ALLOCATED.name,
    memlens_core::columns::usage::ALLOCATED_UNITS,
];

/// Rows a row group holds unless one group is asked for (polars' default).
const DEFAULT_ROW_GROUP: usize = 512 * 512;

/// A stored object's frame, each column one contiguous chunk.
pub fn decode(bytes: Vec<u8>) -> PolarsResult<DataFrame> {
    let mut reader = ParquetReader::new(std::io::Cursor::new(bytes));
    let scalars: Vec<ScalarColumn> = match reader
        .get_metadata()?
        .key_value_metadata
        .iter()
        .flatten()
        .find(|kv| kv.key == SCALAR_COLUMNS)
        .and_then(|kv| kv.value.as_deref())
    {
        Some(json) => serde_json::from_str(json).map_err(|e| polars_err!(ComputeError: "one-value columns: {e}"))?,
        None => Vec::new(),
    };
    let mut df = reader.finish()?;
    // Parquet row groups come back as chunks; queries read columns as contiguous slices.
    // Device frames are written as one row group (nothing to do here); the tables, and frames
    // stored before, hold many, rechunked one column at a time: each column's chunks go as soon
    // as its copy is made and, being small, go back to the system at once (else the arenas
    // keep them all: a 2 GB report's tables took 1.45 GB more than they hold while loading).
    let names: Vec<PlSmallStr> = df.get_column_names_owned();
    for name in names {
        let column = df.column(&name)?;
        if column.n_chunks() < 2 {
            continue;
        }
        let bytes = column.as_materialized_series().estimated_size() as u64;
        let whole = column.rechunk();
        df.with_column(whole)?;
        if bytes > memlens_core::free_memory::TRIM_ABOVE {
            memlens_core::free_memory::give_back();
        }
    }
    // A column of nothing but nulls (`device_free` without an OOM, `time_us` without
    // timestamps) is kept as one scalar, as the pipeline built it, not 8 bytes per row.
    let height = df.height();
    let all_null: Vec<(PlSmallStr, DataType)> = df
        .columns()
        .iter()
        .filter(|c| height > 0 && c.null_count() == height && c.as_scalar_column().is_none())
        .map(|c| (c.name().clone(), c.dtype().clone()))
        .collect();
    for (name, dtype) in all_null {
        df.with_column(Column::full_null(name, height, &dtype))?;
    }
    with_scalars(&mut df, scalars)?;
    Ok(df)
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;

    #[test]
    fn device_frames_are_one_row_group_and_tables_several() {
        // More rows than polars' default groups hold.
        let n = 3_000_000i64;
        let frame =
            || DataFrame::new(n as usize, vec![Column::new("a".into(), (0..n).collect::<Vec<i64>>())]).expect("frame");
        let chunks = |groups| {
            let bytes = encode(&frame(), groups).expect("write");
            let back = ParquetReader::new(Cursor::new(bytes)).finish().expect("read");
            back.column("a").expect("a").as_materialized_series().n_chunks()
        };
        assert_eq!(chunks(RowGroups::One), 1);
        let several = chunks(RowGroups::Default);
        assert!(several > 1, "{several} chunks");
        // Decoded, either is one contiguous chunk per column, with the values written.
        let bytes = encode(&frame(), RowGroups::Default).expect("write");
        let back = decode(bytes).expect("decode");
        let a = back.column("a").expect("a").as_materialized_series();
        assert_eq!(a.n_chunks(), 1);
        assert!(back.equals(&frame()));
    }

    #[test]
    fn one_value_columns_are_kept_in_the_metadata_and_read_back_as_scalars_in_their_places() {
        let n = 100_000;
        let scalar = |name: &str, dtype: DataType, value: AnyValue<'static>| {
            Column::new_scalar(name.into(), Scalar::new(dtype, value), n)
        };
        let frame = DataFrame::new(
            n,
            vec![
                scalar("addr_base", DataType::Int64, AnyValue::Int64(0x7e00_0000_0000)),
                Column::new("addr_units".into(), (0..n as u32).collect::<Vec<_>>()),
                scalar("stream", DataType::Int64, AnyValue::Int64(-7)),
                scalar("device_free", DataType::Int64, AnyValue::Null),
                Column::new("size".into(), (0..n as i64).map(|i| i * 512).collect::<Vec<_>>()),
                scalar("stack", DataType::UInt16, AnyValue::UInt16(65_535)),
                scalar("device", DataType::Int32, AnyValue::Int32(3)),
            ],
        )
        .expect("frame");
        for groups in [RowGroups::One, RowGroups::Default] {
            let bytes = encode(&frame, groups).expect("write");
            // Stored as values, not as columns of a value a row.
            let columns = ParquetReader::new(Cursor::new(bytes.clone())).finish().expect("read");
            assert_eq!(columns.get_column_names(), ["addr_units", "size"]);
            let back = decode(bytes).expect("decode");
            assert_eq!(back.get_column_names(), frame.get_column_names());
            assert!(back.equals_missing(&frame));
            for name in ["addr_base", "stream", "device_free", "stack", "device"] {
                let c = back.column(name).expect(name);
                assert!(c.as_scalar_column().is_some(), "{name}");
                assert_eq!(c.dtype(), frame.column(name).expect(name).dtype(), "{name}");
            }
        }
        // A frame of nothing but one-value columns keeps them as columns: a Parquet file's
        // rows are counted in its columns.
        let only = DataFrame::new(n, vec![scalar("stream", DataType::Int64, AnyValue::Int64(1))]).expect("frame");
        let back = decode(encode(&only, RowGroups::One).expect("write")).expect("decode");
        assert!(back.equals(&only) && back.height() == n);
    }

    #[test]
    fn objects_are_plain_or_delta_encoded_and_read_back_as_written() {
        let n = 300_000usize;
        let frame = DataFrame::new(
            n,
            vec![
                // Few values: polars' own writer would make each of these a dictionary.
                Column::new("size".into(), (0..n).map(|i| (i % 7) as i64 * 512).collect::<Vec<_>>()),
                Column::new("action".into(), (0..n).map(|i| (i % 3) as u8).collect::<Vec<_>>()),
                Column::new("stack".into(), (0..n).map(|i| (i % 50) as u32).collect::<Vec<_>>()),
                Column::new(
                    "time".into(),
                    (0..n).map(|i| (i % 5 != 0).then_some(i as i64)).collect::<Vec<_>>(),
                ),
                Column::new("name".into(), (0..n).map(|i| format!("f{}", i % 4)).collect::<Vec<_>>()),
                Column::new("flag".into(), (0..n).map(|i| i % 2 == 0).collect::<Vec<_>>()),
                // Delta-encoded: entry indexes, times that never decrease, running totals.
                Column::new(
                    "free_idx".into(),
                    (0..n)
                        .map(|i| if i % 9 == 0 { -1 } else { i as i32 * 3 })
                        .collect::<Vec<_>>(),
                ),
                Column::new(
                    "t".into(),
                    (0..n).map(|i| 1_700_000_000_000 + (i / 4) as i64).collect::<Vec<_>>(),
                ),
                Column::new(
                    "t_after_first".into(),
                    (0..n).map(|i| (i / 3) as u32).collect::<Vec<_>>(),
                ),
                // A running total, which goes down as well as up, in bytes and in units.
                Column::new(
                    "allocated".into(),
                    (0..n)
                        .map(|i| (1 << 30) + ((i % 11) as i64 - 5) * 4096)
                        .collect::<Vec<_>>(),
                ),
                Column::new(
                    "allocated_units".into(),
                    (0..n)
                        .map(|i| {
                            if i % 2 == 0 {
                                u32::MAX - (i % 13) as u32
                            } else {
                                (i % 7) as u32
                            }
                        })
                        .collect::<Vec<_>>(),
                ),
            ],
        )
        .expect("frame");
        let delta: Vec<&str> = frame
            .columns()
            .iter()
            .filter(|c| deltas_pay(c))
            .map(|c| c.name().as_str())
            .collect();
        assert_eq!(
            delta,
            ["free_idx", "t", "t_after_first", "allocated", "allocated_units"]
        );
        for groups in [RowGroups::Default, RowGroups::One] {
            let bytes = encode(&frame, groups).expect("write");
            let back = ParquetReader::new(Cursor::new(bytes.clone())).finish().expect("read");
            assert!(back.equals_missing(&frame));
            let meta = polars_parquet::read::read_metadata(&mut Cursor::new(bytes)).expect("metadata");
            for column in meta.row_groups.iter().flat_map(|g| g.parquet_columns()) {
                assert_eq!(column.dictionary_page_offset(), None, "{:?}", column.descriptor());
            }
        }
        // An empty frame keeps its columns and their types.
        let empty = frame.slice(0, 0);
        let bytes = encode(&empty, RowGroups::Default).expect("write");
        let back = ParquetReader::new(Cursor::new(bytes)).finish().expect("read");
        assert_eq!(back.schema(), empty.schema());
        assert_eq!(back.height(), 0);
    }
}
