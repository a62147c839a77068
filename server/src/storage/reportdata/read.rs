//! A stored report read back: its objects, its summary, a file's tables, and the conversions
//! that let reports stored by earlier versions load as the analyses now read them.

use std::sync::Arc;

use memlens_api::{AnalyzeOutput, FileSummary};
use memlens_core::tables::columns::lifetimes as lt_col;
use memlens_core::tables::{SnapshotMeta, SnapshotTables, TABLE_NAMES};
use polars_core::prelude::*;
use rustc_hash::FxHashMap;

use super::keys::{self, FileKeys, Schema, SCHEMA, SUMMARY};
use super::{DataError, LoadedFile};
use crate::storage::store::{ReportId, ReportStore};

/// Reads one data object of a report; `None` when it has none by that key.
pub fn read_object(store: &dyn ReportStore, id: &ReportId, key: &str) -> Result<Option<Vec<u8>>, DataError> {
    store.read_data(id, key).map_err(|source| DataError::Store {
        key: key.to_owned(),
        source,
    })
}

fn read_required(store: &dyn ReportStore, id: &ReportId, key: &str) -> Result<Vec<u8>, DataError> {
    read_object(store, id, key)?.ok_or_else(|| DataError::Missing { key: key.to_owned() })
}

pub(crate) fn read_json<T: serde::de::DeserializeOwned>(
    store: &dyn ReportStore,
    id: &ReportId,
    key: &str,
) -> Result<T, DataError> {
    let bytes = read_required(store, id, key)?;
    serde_json::from_slice(&bytes).map_err(|source| DataError::Json {
        key: key.to_owned(),
        source,
    })
}

pub(crate) fn read_parquet(store: &dyn ReportStore, id: &ReportId, key: &str) -> Result<DataFrame, DataError> {
    let bytes = read_required(store, id, key)?;
    crate::storage::parquet_object::decode(bytes).map_err(|source| DataError::Parquet {
        key: key.to_owned(),
        source,
    })
}

/// The stored summary; reports stored before run overviews existed get theirs from their files.
/// A report of a layout this code does not read is [`DataError::Unreadable`]: its caller
/// analyses it again from its kept uploads.
pub fn read_summary(store: &dyn ReportStore, id: &ReportId) -> Result<AnalyzeOutput, DataError> {
    let schema = read_schema(store, id)?;
    if !schema.is_readable() {
        return Err(DataError::Unreadable {
            version: schema.version,
        });
    }
    let summary: AnalyzeOutput = read_json(store, id, SUMMARY)?;
    Ok(memlens_core::stored::summary_as_read(summary))
}

/// The layout a report was written in: version 1 when it records none (stored before the
/// version was).
fn read_schema(store: &dyn ReportStore, id: &ReportId) -> Result<Schema, DataError> {
    match read_object(store, id, SCHEMA)? {
        Some(_) => read_json(store, id, SCHEMA),
        None => Ok(Schema { version: 1 }),
    }
}

pub(super) fn user_metadata_from(key: &str, bytes: Vec<u8>) -> Result<FxHashMap<i64, String>, DataError> {
    let parquet = |source| DataError::Parquet {
        key: key.to_owned(),
        source,
    };
    let df = crate::storage::parquet_object::decode(bytes).map_err(parquet)?;
    let idx = df.column("alloc_idx").and_then(|c| c.i64().cloned()).map_err(parquet)?;
    let text = df
        .column("user_metadata")
        .and_then(|c| c.str().cloned())
        .map_err(parquet)?;
    Ok(idx
        .iter()
        .zip(text.iter())
        .filter_map(|(i, t)| Some((i?, t?.to_owned())))
        .collect())
}

/// A whole report, loaded for queries.
pub struct LoadedReport {
    pub summary: AnalyzeOutput,
    pub files: Vec<LoadedFile>,
    /// Samples of each NVML log, in `summary.gpu_logs` order.
    pub gpu_logs: Vec<DataFrame>,
}

/// A stored `lifetimes` frame's entry indexes as the 32 bits the analyses read (reports stored
/// before 2026-12 wrote 64).
pub(super) fn entry_indexes_as_i32(lifetimes: &mut DataFrame, key: &str) -> Result<(), DataError> {
    let invalid = |source| DataError::Parquet {
        key: key.to_owned(),
        source,
    };
    for name in [lt_col::ALLOC_IDX.name, lt_col::FREE_IDX.name] {
        let column = lifetimes.column(name).map_err(invalid)?;
        if column.dtype() != &DataType::Int32 {
            let narrowed = column.strict_cast(&DataType::Int32).map_err(invalid)?;
            lifetimes.with_column(narrowed).map_err(invalid)?;
        }
    }
    Ok(())
}

/// Each of `columns` of `df` (read from the object `key`) held as one scalar when it has one
/// value throughout ([`memlens_core::tables::columns::one_value_as_scalar`]).
pub(super) fn one_values_as_scalars(df: &mut DataFrame, columns: &[&str], key: &str) -> Result<(), DataError> {
    for &name in columns {
        let Ok(column) = df.column(name) else { continue };
        let column = memlens_core::tables::columns::one_value_as_scalar(column.clone());
        if column.as_scalar_column().is_some() {
            df.with_column(column).map_err(|source| DataError::Parquet {
                key: key.to_owned(),
                source,
            })?;
        }
    }
    Ok(())
}

/// The canonical tables of one analysed file of a report stored before 2026-12 (later
/// reports store only [`QUERY_TABLES`](super::QUERY_TABLES): this finds their trace missing).
pub(super) fn load_tables(
    store: &dyn ReportStore,
    id: &ReportId,
    i: usize,
    fs: &FileSummary,
) -> Result<SnapshotTables, DataError> {
    // Reports written before `meta.json` and `event_notes` were stored still load: their
    // meta comes from the summary, their notes are empty.
    let file = FileKeys::of(i);
    let meta_key = file.meta();
    let meta: SnapshotMeta = match read_object(store, id, &meta_key)? {
        Some(_) => read_json(store, id, &meta_key)?,
        None => SnapshotMeta {
            source: fs.source.clone(),
            max_split_size: None,
            format: fs.format,
        },
    };
    let mut frames: [DataFrame; 7] = Default::default();
    for (slot, name) in frames.iter_mut().zip(TABLE_NAMES) {
        let key = file.table(name);
        *slot = if name == "event_notes" && read_object(store, id, &key)?.is_none() {
            DataFrame::empty()
        } else {
            read_parquet(store, id, &key)?
        };
    }
    // A trace of one device, or on one stream, held that column as one scalar when it was
    // analysed (`SnapshotColumns::into_tables`): it is held so again, as the analyses read it.
    one_values_as_scalars(&mut frames[0], &["device", "stream"], &file.table("events"))?;
    Ok(SnapshotTables::from_frames(frames, meta))
}

/// The samples of each NVML log of a report, in `summary.gpu_logs` order.
pub fn load_gpu_logs(
    store: &dyn ReportStore,
    id: &ReportId,
    summary: &AnalyzeOutput,
) -> Result<Vec<DataFrame>, DataError> {
    (0..summary.gpu_logs.len())
        .map(|j| read_parquet(store, id, &keys::gpu_samples(j)))
        .collect()
}

/// Loads a report's published data: every file's stacks and device frames, and the NVML
/// samples (the trace tables of a report stored before 2026-12 only when asked for,
/// [`LoadedFile::tables`]).
pub fn load(store: &Arc<dyn ReportStore>, id: &ReportId) -> Result<LoadedReport, DataError> {
    let summary = read_summary(store.as_ref(), id)?;
    let mut files = Vec::new();
    for (i, fs) in summary.files.iter().enumerate() {
        let f = LoadedFile::open(store.clone(), id, i, fs);
        f.stacks()?;
        f.devices()?;
        files.push(f);
    }
    let gpu_logs = load_gpu_logs(store.as_ref(), id, &summary)?;
    Ok(LoadedReport {
        summary,
        files,
        gpu_logs,
    })
}
