//! The store's Parquet objects: how a frame's rows are grouped ([`RowGroups`]), how it is
//! encoded ([`encode`]: plain or delta pages under zstd, assembled from polars' own lower-level writer)
//! and decoded into the form queries read ([`decode`]).

use polars_core::prelude::*;

/// How an object's rows are grouped in its Parquet file.
#[derive(Clone, Copy)]
pub enum RowGroups {
    /// polars' default, 262,144 rows a group: what the tables are written as.
    Default,
    /// One group: it decodes to one chunk per column, so a load has nothing to rechunk. For the
    /// device frames, which every timeline of a stored report loads: loading them peaks lower
    /// and the first timeline after a restart comes sooner. Not for the tables, rarely loaded,
    /// where one group each raised a GB-scale ingest's peak.
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
    encode_with_paged(df, &[], groups)
}

/// A column an encoder reads a page at a time as it reaches it, never held whole (the
/// lifetimes' addresses, read from the trace: [`memlens_core::analysis::lifetime_addresses`]).
pub struct PagedColumn<'a> {
    /// Its place among the frame's columns.
    pub at: usize,
    pub name: PlSmallStr,
    /// UInt32 or Int64.
    pub dtype: DataType,
    pub len: usize,
    /// Rows `range`, of `dtype`, in one chunk.
    pub read: ReadRows<'a>,
    /// Stored as deltas, as [`deltas_pay`] says of a column.
    pub deltas: bool,
}

/// What reads a run of a [`PagedColumn`]'s rows.
pub type ReadRows<'a> = &'a (dyn Fn(std::ops::Range<usize>) -> Series + Sync);

/// One column of a frame being encoded: `df`'s own, or one read a page at a time.
enum Part<'a> {
    Held(Column),
    Paged(&'a PagedColumn<'a>),
}

/// [`encode`] of `df` with the `paged` columns put in their places (in order of place): the
/// same bytes as of the frame holding them, each page of theirs read as the writer reaches it.
pub fn encode_with_paged(df: &DataFrame, paged: &[PagedColumn<'_>], groups: RowGroups) -> PolarsResult<Vec<u8>> {
    use polars_parquet::write::{
        array_to_columns, get_dtype_encoding, to_parquet_schema, CompressionOptions, Compressor, DynIter,
        DynStreamingIterator, Encoding, FallibleStreamingIterator, FileWriter, KeyValue, StatisticsOptions, Version,
        WriteOptions,
    };
    let height = df.height();
    for p in paged {
        polars_ensure!(p.len == height, ShapeMismatch: "column `{}` has {} rows, the frame {height}", p.name, p.len);
    }
    let mut parts: Vec<Part<'_>> = df.columns().iter().cloned().map(Part::Held).collect();
    for p in paged {
        parts.insert(p.at.min(parts.len()), Part::Paged(p));
    }
    let (parts, scalars) = without_scalars(parts, height);
    let fields = parts.iter().map(|part| match part {
        Part::Held(c) => Field::new(c.name().clone(), c.dtype().clone()),
        Part::Paged(p) => Field::new(p.name.clone(), p.dtype.clone()),
    });
    let schema = Schema::from_iter(fields).to_arrow(CompatLevel::newest());
    let encodings: Vec<Vec<Encoding>> = schema
        .iter_values()
        .zip(&parts)
        .map(|(f, part)| {
            let deltas = match part {
                Part::Held(column) => deltas_pay(column),
                Part::Paged(p) => p.deltas,
            };
            get_dtype_encoding(&f.dtype)
                .into_iter()
                .map(|e| match e {
                    Encoding::RleDictionary if deltas => Encoding::DeltaBinaryPacked,
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
    let types = to_parquet_schema(&schema)?.fields().to_vec();
    let rows = match groups {
        RowGroups::Default => DEFAULT_ROW_GROUP,
        RowGroups::One => height.max(1),
    };
    let mut writer = FileWriter::try_new(Vec::new(), schema, options)?;
    for offset in (0..height).step_by(rows) {
        let group_rows = rows.min(height - offset);
        // Each column's pages made as the writer reaches it: what a held column's part copies
        // (a rechunk, a column of nulls kept as one scalar made into an array) is held for that
        // column of that group only, and a paged column's rows a page at a time.
        let columns = parts
            .iter()
            .zip(&types)
            .zip(&encodings)
            .map(move |((part, type_), encoding)| {
                let pages: DynIter<'_, _> = match part {
                    Part::Held(column) => {
                        let array = column
                            .slice(offset as i64, group_rows)
                            .rechunk()
                            .as_materialized_series()
                            .to_arrow(0, CompatLevel::newest());
                        let mut leaves = array_to_columns(array, type_.clone(), options, encoding)?;
                        polars_ensure!(leaves.len() == 1, ComputeError: "column `{}` is nested", column.name());
                        leaves.remove(0)
                    }
                    Part::Paged(p) => {
                        // The pages polars' writer cuts a whole column of this type into (about a
                        // MiB of values each), each read alone.
                        let per_page = PAGE_BYTES / (if p.dtype == DataType::UInt32 { 4 } else { 8 } + 1);
                        let (type_, encoding) = (type_.clone(), encoding.clone());
                        DynIter::new((offset..offset + group_rows).step_by(per_page).flat_map(move |from| {
                            let to = (from + per_page).min(offset + group_rows);
                            let page = (p.read)(from..to).to_arrow(0, CompatLevel::newest());
                            match array_to_columns(page, type_.clone(), options, &encoding) {
                                Ok(leaves) => leaves.into_iter().flatten().collect::<Vec<_>>(),
                                Err(e) => vec![Err(e)],
                            }
                        }))
                    }
                };
                let pages = DynIter::new(pages.map(|page| {
                    page.map_err(|e| polars_parquet::parquet::error::ParquetError::OutOfSpec(e.to_string()))
                }));
                let compressed =
                    Compressor::new(pages, options.compression, vec![]).map_err(|e| polars_err!(ComputeError: "{e}"));
                Ok(DynStreamingIterator::new(compressed))
            });
        writer.write(u64::MAX, DynIter::new(columns))?;
    }
    let scalars = (!scalars.is_empty())
        .then(|| serde_json::to_string(&scalars))
        .transpose()
        .map_err(|e| polars_err!(ComputeError: "one-value columns: {e}"))?;
    writer.end(scalars.map(|json| vec![KeyValue::new(SCALAR_COLUMNS.to_owned(), json)]))?;
    Ok(writer.into_inner())
}

/// The bytes of values polars' writer puts in a page (`row_slice_ranges`' default).
const PAGE_BYTES: usize = 1024 * 1024;

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

/// `parts` less their one-value integer columns, and those columns (none when every column is
/// one: a Parquet file keeps its rows' count in its columns).
fn without_scalars(parts: Vec<Part<'_>>, height: usize) -> (Vec<Part<'_>>, Vec<ScalarColumn>) {
    let mut scalars = Vec::new();
    if height > 0 {
        for (at, part) in parts.iter().enumerate() {
            let Part::Held(column) = part else { continue };
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
    if scalars.is_empty() || scalars.len() == parts.len() {
        return (parts, Vec::new());
    }
    let kept = parts
        .into_iter()
        .filter(|part| !matches!(part, Part::Held(c) if scalars.iter().any(|s| s.name == c.name().as_str())))
        .collect();
    (kept, scalars)
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
/// decode slower than plain values where they jump about (addresses, sizes): measured with
/// `memlens-bench-store`, deltas for these columns store several times smaller and read back
/// faster, and deltas for every integer column read the tables back slower.
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
    memlens_core::tables::columns::usage::ALLOCATED.name,
    memlens_core::tables::columns::usage::ALLOCATED_UNITS,
];

/// Rows a row group holds unless one group is asked for (polars' default).
const DEFAULT_ROW_GROUP: usize = 512 * 512;

/// A stored object's frame, each column one contiguous chunk.
///
/// Read with polars' own lower-level reader (`polars-parquet`), as [`encode`] writes: its
/// flat columns need none of polars-io's reader (projections, predicates, hive partitions, the
/// group-by kernels its `parquet` feature compiles into polars-core, every codec).
pub fn decode(bytes: Vec<u8>) -> PolarsResult<DataFrame> {
    use polars_parquet::read::{column_iter_to_arrays, infer_schema, read_metadata, BasicDecompressor, PageReader};
    let bytes = polars_buffer::Buffer::from(bytes);
    let metadata = read_metadata(&mut std::io::Cursor::new(bytes.as_slice()))?;
    let scalars: Vec<ScalarColumn> = match metadata
        .key_value_metadata
        .iter()
        .flatten()
        .find(|kv| kv.key == SCALAR_COLUMNS)
        .and_then(|kv| kv.value.as_deref())
    {
        Some(json) => serde_json::from_str(json).map_err(|e| polars_err!(ComputeError: "one-value columns: {e}"))?,
        None => Vec::new(),
    };
    let schema = infer_schema(&metadata)?;
    let mut columns = Vec::with_capacity(schema.len());
    for field in schema.iter_values() {
        // A column's row groups, each decoded into one chunk or more.
        let mut chunks = Vec::with_capacity(metadata.row_groups.len());
        for group in &metadata.row_groups {
            let parts = group
                .columns_under_root_iter(&field.name)
                .ok_or_else(|| polars_err!(ComputeError: "column `{}` is missing from a row group", field.name))?;
            let (pages, types): (Vec<_>, Vec<_>) = parts
                .map(|part| {
                    let range = part.byte_range();
                    let chunk = bytes.clone().sliced(range.start as usize..range.end as usize);
                    let pages = PageReader::new(std::io::Cursor::new(chunk), part, vec![], usize::MAX);
                    (
                        BasicDecompressor::new(pages, vec![]),
                        &part.descriptor().descriptor.primitive_type,
                    )
                })
                .unzip();
            chunks.extend(column_iter_to_arrays(pages, types, field.clone(), None)?.0);
        }
        let series = if chunks.is_empty() {
            Series::new_empty(field.name.clone(), &DataType::from_arrow_field(field))
        } else {
            Series::try_from((field, chunks))?
        };
        // Parquet row groups come back as chunks; queries read columns as contiguous slices.
        // Device frames are written as one row group (nothing to do here); the tables, and
        // frames stored before, hold many, rechunked one column at a time: each column's chunks
        // go as soon as its copy is made and, being small, go back to the system at once (else
        // the arenas keep them all: a GB-scale report's tables took far more than they hold
        // while loading).
        let series = if series.n_chunks() < 2 {
            series
        } else {
            let bytes = series.estimated_size() as u64;
            let whole = series.rechunk();
            drop(series);
            if bytes > memlens_core::infra::free_memory::TRIM_ABOVE {
                memlens_core::infra::free_memory::trim_heap();
            }
            whole
        };
        columns.push(series.into_column());
    }
    let mut df = DataFrame::new(metadata.num_rows, columns)?;
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
        let row_groups = |groups| {
            let bytes = encode(&frame(), groups).expect("write");
            let metadata = polars_parquet::read::read_metadata(&mut Cursor::new(bytes.as_slice())).expect("read");
            metadata.row_groups.len()
        };
        assert_eq!(row_groups(RowGroups::One), 1);
        let several = row_groups(RowGroups::Default);
        assert!(several > 1, "{several} row groups");
        // Decoded, either is one contiguous chunk per column, with the values written.
        let bytes = encode(&frame(), RowGroups::Default).expect("write");
        let back = decode(bytes).expect("decode");
        let a = back.column("a").expect("a").as_materialized_series();
        assert_eq!(a.n_chunks(), 1);
        assert!(back.equals(&frame()));
    }

    #[test]
    fn a_column_read_a_page_at_a_time_is_stored_as_the_same_bytes_as_held() {
        // Several of polars' pages (about a MiB of values each) and more than one row group,
        // beside a one-value column and columns of other types; values that rise (deltas) and
        // values that jump about (plain).
        let n = 600_000usize;
        let units: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2_654_435_761) >> 8).collect();
        let rising: Vec<i64> = (0..n as i64).map(|i| 0x7e00_0000_0000 + i * 512).collect();
        let rest = || {
            vec![
                Column::new_scalar(
                    "addr_base".into(),
                    Scalar::new(DataType::Int64, AnyValue::Int64(0x7e00_0000_0000)),
                    n,
                ),
                Column::new("size".into(), (0..n as u32).map(|i| i % 977).collect::<Vec<_>>()),
                Column::new("alloc_idx".into(), (0..n as i32).collect::<Vec<_>>()),
            ]
        };
        let read_units = |rows: std::ops::Range<usize>| Series::new("addr_units".into(), &units[rows]);
        let read_rising = |rows: std::ops::Range<usize>| Series::new("addr".into(), &rising[rows]);
        let cases: [(&str, DataType, ReadRows<'_>, Column, bool); 2] = [
            (
                "addr_units",
                DataType::UInt32,
                &read_units,
                Column::new("addr_units".into(), &units),
                false,
            ),
            (
                "addr",
                DataType::Int64,
                &read_rising,
                Column::new("addr".into(), &rising),
                true,
            ),
        ];
        for (name, dtype, read, held, deltas) in cases {
            let mut whole = rest();
            whole.insert(0, held.clone());
            let whole = DataFrame::new(n, whole).expect("frame");
            assert_eq!(deltas_pay(&held), deltas, "{name}");
            let apart = DataFrame::new(n, rest()).expect("frame");
            let paged = PagedColumn {
                at: 0,
                name: name.into(),
                dtype,
                len: n,
                read,
                deltas,
            };
            for groups in [RowGroups::One, RowGroups::Default] {
                let want = encode(&whole, groups).expect("held");
                let got = encode_with_paged(&apart, std::slice::from_ref(&paged), groups).expect("paged");
                assert!(got == want, "{name}: {} bytes against {}", got.len(), want.len());
            }
            assert!(decode(encode(&whole, RowGroups::One).expect("held"))
                .expect("decode")
                .equals_missing(&whole));
        }
        // A paged column of another length than the frame's is refused.
        let short = PagedColumn {
            at: 0,
            name: "addr".into(),
            dtype: DataType::Int64,
            len: n - 1,
            read: &read_rising,
            deltas: true,
        };
        let apart = DataFrame::new(n, rest()).expect("frame");
        assert!(encode_with_paged(&apart, &[short], RowGroups::One).is_err());
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
            let metadata = polars_parquet::read::read_metadata(&mut Cursor::new(bytes.as_slice())).expect("read");
            let schema = polars_parquet::read::infer_schema(&metadata).expect("schema");
            assert_eq!(schema.iter_names().collect::<Vec<_>>(), ["addr_units", "size"]);
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
            let back = decode(bytes.clone()).expect("read");
            assert!(back.equals_missing(&frame));
            let meta = polars_parquet::read::read_metadata(&mut Cursor::new(bytes)).expect("metadata");
            for column in meta.row_groups.iter().flat_map(|g| g.parquet_columns()) {
                assert_eq!(column.dictionary_page_offset(), None, "{:?}", column.descriptor());
            }
        }
        // An empty frame keeps its columns and their types.
        let empty = frame.slice(0, 0);
        let bytes = encode(&empty, RowGroups::Default).expect("write");
        let back = decode(bytes).expect("read");
        assert_eq!(back.schema(), empty.schema());
        assert_eq!(back.height(), 0);
    }
}
