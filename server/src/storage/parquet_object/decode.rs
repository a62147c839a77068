//! Parquet objects back into frames, each column one contiguous chunk, one-value columns
//! back in their places.

use polars_core::prelude::*;

use super::scalars::{ScalarColumn, SCALAR_COLUMNS};

/// A stored object's frame, each column one contiguous chunk.
///
/// Read with polars' own lower-level reader (`polars-parquet`), as [`encode`](super::encode) writes: its
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

/// The one-value columns [`encode`](super::encode) kept in `bytes`' metadata, put back in their places as
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
