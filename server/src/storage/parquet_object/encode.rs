//! Frames into Parquet bytes: row groups, plain or delta pages under zstd, one-value columns
//! kept in the metadata, columns read a page at a time.

use polars_core::prelude::*;

use super::scalars::{ScalarColumn, ScalarType, SCALAR_COLUMNS};

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
/// lifetimes' addresses, read from the trace: [`memlens_core::stored::lifetime_addresses`]).
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

/// Whether `column` is stored as deltas (bit-packed) rather than plain values: entry indexes
/// (32-bit), 64-bit and unsigned 32-bit columns that never decrease (times, and times held as
/// µs after the first), and running totals
/// ([`RUNNING_TOTALS`]), whose changes are the trace's sizes. Either way zstd compresses the
/// pages after. Deltas make such columns a fraction of their plain size and decode faster, but
/// decode slower than plain values where they jump about (addresses, sizes): measured with
/// `memlens-bench-store`, deltas for these columns store several times smaller and read back
/// faster, and deltas for every integer column read the tables back slower.
pub(super) fn deltas_pay(column: &Column) -> bool {
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
