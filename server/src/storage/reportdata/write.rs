//! A processed file as store objects: the tables its queries read, each device's frames and first view, and the
//! segment map's stored checkpoints, encoded on the [`encode_pool`](crate::storage::encode_pool) and put
//! through a [`DataWriter`]; the summary, charts and NVML samples beside them.

use memlens_api::{AnalyzeOutput, FileSummary};
use memlens_core::pipeline::DeviceFrames;
use memlens_core::stored::{
    stored_objects, AddressForm, DeviceEvents, EntryRows, LifetimeAddresses, SegmentCheckpoints, StoredObject,
};
use memlens_core::tables::columns::events as ev_col;
use memlens_core::tables::columns::held_bytes;
use memlens_core::tables::{SnapshotTables, TABLE_NAMES};
use polars_core::prelude::*;
use rustc_hash::FxHashMap;

use super::keys::{self, DeviceKeys, FileKeys, Schema, CHART_PNG, CHART_SVG, SCHEMA, SUMMARY};
use super::{default_axis, DataError, OVERVIEW_WIDTH, QUERY_TABLES, RESERVED_COLUMN};
use crate::storage::encode_pool::{self, EncodeJob};
use crate::storage::parquet_object::{self, PagedColumn, ReadRows, RowGroups};
use crate::storage::store::DataWriter;

/// A frame as a Parquet object under `key` ([`parquet_object::encode`]).
pub(super) fn parquet_bytes(key: &str, df: &DataFrame, groups: RowGroups) -> Result<Vec<u8>, DataError> {
    parquet_object::encode(df, groups).map_err(|source| DataError::Parquet {
        key: key.to_owned(),
        source,
    })
}

/// A device's lifetimes as their Parquet object under `key`: where they were built without
/// their addresses (`addresses`), those are read from `ev`, the trace they were built from, a
/// page at a time as the writer reaches them, never held whole
/// ([`parquet_object::encode_with_paged`]); the object is the same bytes either way.
pub(super) fn lifetimes_bytes(
    key: &str,
    lifetimes: &DataFrame,
    addresses: Option<(&LifetimeAddresses, &DeviceEvents)>,
) -> Result<Vec<u8>, DataError> {
    let Some((addresses, ev)) = addresses else {
        return parquet_bytes(key, lifetimes, RowGroups::One);
    };
    let parquet = |source| DataError::Parquet {
        key: key.to_owned(),
        source,
    };
    let column = addresses.column(ev, lifetimes).map_err(parquet)?;
    let n = column.len();
    let mut df = lifetimes.clone();
    let units = |rows| UInt32Chunked::from_vec(ev_col::ADDR_UNITS.into(), column.units(rows)).into_series();
    let wide = |rows| Int64Chunked::from_vec(ev_col::ADDR.name.into(), column.wide(rows)).into_series();
    let (name, dtype, read): (&str, DataType, ReadRows<'_>) = match column.form() {
        AddressForm::Units { base } => {
            let base = Column::new_scalar(
                ev_col::ADDR_BASE.into(),
                Scalar::new(DataType::Int64, AnyValue::Int64(base)),
                n,
            );
            df.insert_column(0, base).map_err(parquet)?;
            (ev_col::ADDR_UNITS, DataType::UInt32, &units)
        }
        AddressForm::Wide => (ev_col::ADDR.name, DataType::Int64, &wide),
    };
    let paged = PagedColumn {
        at: 0,
        name: name.into(),
        dtype,
        len: n,
        read,
        // As `deltas_pay` says of a held column of addresses.
        deltas: column.never_decrease(),
    };
    parquet_object::encode_with_paged(&df, &[paged], RowGroups::One).map_err(parquet)
}

fn put(w: &mut dyn DataWriter, key: &str, bytes: &[u8]) -> Result<(), DataError> {
    w.put(key, bytes).map_err(|source| DataError::Store {
        key: key.to_owned(),
        source,
    })
}

pub(super) fn put_parquet(w: &mut dyn DataWriter, key: &str, df: &mut DataFrame) -> Result<(), DataError> {
    let bytes = parquet_bytes(key, df, RowGroups::Default)?;
    put(w, key, &bytes)
}

fn put_json<T: serde::Serialize>(w: &mut dyn DataWriter, key: &str, value: &T) -> Result<(), DataError> {
    let bytes = serde_json::to_vec(value).map_err(|source| DataError::Json {
        key: key.to_owned(),
        source,
    })?;
    put(w, key, &bytes)
}

/// Writes one analysed file's tables and device frames under `f<index>/`: the objects
/// `early` already holds (encoded during the analyses: [`EarlyObjects`](super::EarlyObjects))
/// are put as they are; every other Parquet object is encoded on the
/// [`encode_pool`](crate::storage::encode_pool) (the largest first), and put through `w` as it is ready.
pub fn write_file(
    w: &mut dyn DataWriter,
    index: usize,
    summary: &FileSummary,
    t: &mut SnapshotTables,
    devices: &mut [DeviceFrames],
    early: Vec<(String, Vec<u8>)>,
) -> Result<(), DataError> {
    let file = FileKeys::of(index);
    put_json(w, &file.meta(), &t.meta())?;
    for (key, bytes) in &early {
        put(w, key, bytes)?;
    }
    let t = &*t;
    // Frames are cloned into their jobs (columns are shared, not copied).
    let mut frames: Vec<(String, DataFrame, RowGroups)> = TABLE_NAMES
        .iter()
        .zip(t.frames_ref())
        .filter(|(name, _)| QUERY_TABLES.contains(name))
        .map(|(name, df)| (file.table(name), df.clone(), RowGroups::Default))
        .collect();
    // Lifetimes built apart from their addresses, not encoded early (before the trace let go
    // of them), read them from the trace as they are encoded.
    let lifetimes_key = |d: &DeviceFrames| file.device(d.device).lifetimes();
    let lifetime_events: Vec<Option<DeviceEvents>> = devices
        .iter()
        .map(|d| {
            let apart = d.lifetime_addresses.is_some() && !early.iter().any(|(k, _)| *k == lifetimes_key(d));
            apart.then(|| DeviceEvents::new(t, d.device)).transpose()
        })
        .collect::<PolarsResult<_>>()?;
    let mut checkpoints = Vec::new();
    // Each device's checkpoint cursors, for its `segments.json`.
    let mut cursors: Vec<(DeviceKeys, Vec<usize>)> = Vec::new();
    for d in devices.iter_mut() {
        let dir = file.device(d.device);
        let metadata = user_metadata_frame(&d.user_metadata)?;
        frames.push((dir.user_metadata(), metadata, RowGroups::One));
        frames.push((dir.usage(), d.usage.clone(), RowGroups::One));
        frames.push((dir.reserved(), d.reserved.frame(RESERVED_COLUMN)?, RowGroups::One));
        frames.push((dir.fragmentation(), d.fragmentation.clone(), RowGroups::One));
        if let Some(cp) = d.segment_checkpoints.take() {
            // Objects all encoded during the analyses need nothing of the trace (which may have
            // let go of its addresses by now: `Keep::release_addresses_from`), only their
            // cursors.
            let at: Vec<usize> = cp.cursors().collect();
            let all_early = (0..at.len()).all(|k| {
                let key = dir.segment_window(k);
                early.iter().any(|(done, _)| *done == key)
            });
            if all_early {
                cursors.push((dir, at));
            } else {
                checkpoints.push((dir, DeviceEvents::new(t, d.device)?, cp));
            }
        }
    }
    let mut sized: Vec<(usize, EncodeJob<'_, DataError>)> = frames
        .into_iter()
        .map(|(key, df, groups)| {
            let k = key.clone();
            (
                held_bytes(&df),
                EncodeJob::new(key, move || parquet_bytes(&k, &df, groups)),
            )
        })
        .collect();
    for (d, ev) in devices.iter().zip(&lifetime_events) {
        let key = lifetimes_key(d);
        let addresses = d.lifetime_addresses.as_ref().zip(ev.as_ref());
        let bytes = held_bytes(&d.lifetimes) + addresses.map_or(0, |_| 4 * d.lifetimes.height());
        let k = key.clone();
        sized.push((
            bytes,
            EncodeJob::new(key, move || lifetimes_bytes(&k, &d.lifetimes, addresses)),
        ));
    }
    sized.sort_by_key(|(bytes, _)| std::cmp::Reverse(*bytes));
    let mut jobs: Vec<EncodeJob<'_, DataError>> = sized.into_iter().map(|(_, job)| job).collect();
    for d in devices.iter() {
        if let Some(ds) = summary.devices.iter().find(|s| s.device == d.device) {
            let key = file.device(d.device).overview();
            jobs.push(EncodeJob::new(key.clone(), move || overview_bytes(&key, d, ds)));
        }
    }
    for (dir, ev, cp) in &checkpoints {
        let (at, device_jobs) = segment_checkpoint_jobs(dir, ev, cp);
        cursors.push((dir.clone(), at));
        jobs.extend(device_jobs);
    }
    // What was encoded during the analyses is put as it is.
    jobs.retain(|job| !early.iter().any(|(done, _)| *done == job.key));
    encode_pool::put_all(w, jobs, encode_pool::encode_threads(), put)?;
    for (dir, at) in &cursors {
        put_json(w, &dir.segment_cursors(), at)?;
    }
    Ok(())
}

fn overview_bytes(key: &str, d: &DeviceFrames, ds: &memlens_api::DeviceSummary) -> Result<Vec<u8>, DataError> {
    let tl = memlens_core::query::timeline_on(
        d,
        default_axis(ds),
        ds.initial_allocated_bytes,
        None,
        None,
        OVERVIEW_WIDTH,
    )?;
    serde_json::to_vec(&tl).map_err(|source| DataError::Json {
        key: key.to_owned(),
        source,
    })
}

/// The segment map's stored objects of a device (one a checkpoint: [`stored_objects`]), and
/// their cursors (for its [`DeviceKeys::segment_cursors`]).
fn segment_checkpoint_jobs<'a>(
    dir: &DeviceKeys,
    ev: &'a DeviceEvents,
    cp: &'a SegmentCheckpoints,
) -> (Vec<usize>, Vec<EncodeJob<'a, DataError>>) {
    let objects = stored_objects(cp, &EntryRows::of(ev));
    let cursors = objects.iter().map(|o| o.cursor).collect();
    let jobs = objects
        .into_iter()
        .enumerate()
        .map(|(k, object)| {
            let key = dir.segment_window(k);
            EncodeJob::new(key.clone(), move || segment_object_bytes(&key, &object))
        })
        .collect();
    (cursors, jobs)
}

/// A stored object of the segment map, under `key` (what `memlens-bench-segments` reads back
/// too).
pub fn segment_object_bytes(key: &str, object: &StoredObject<'_>) -> Result<Vec<u8>, DataError> {
    let frame = object.frame().map_err(|source| DataError::Parquet {
        key: key.to_owned(),
        source,
    })?;
    parquet_bytes(key, &frame, RowGroups::Default)
}

/// Writes one NVML log's samples under `g<index>/`.
pub fn write_gpu_log(w: &mut dyn DataWriter, index: usize, samples: &mut DataFrame) -> Result<(), DataError> {
    put_parquet(w, &keys::gpu_samples(index), samples)
}

/// Writes the summary, and the version of the layout everything was written in: the last
/// objects of a report before its commit.
pub fn write_summary(w: &mut dyn DataWriter, summary: &AnalyzeOutput) -> Result<(), DataError> {
    put_json(w, SUMMARY, summary)?;
    put_json(w, SCHEMA, &Schema::NOW)
}

/// Writes the report's default chart (PNG and SVG).
pub fn write_charts(w: &mut dyn DataWriter, png: &[u8], svg: &str) -> Result<(), DataError> {
    put(w, CHART_PNG, png)?;
    put(w, CHART_SVG, svg.as_bytes())
}

fn user_metadata_frame(m: &FxHashMap<i64, String>) -> PolarsResult<DataFrame> {
    let mut rows: Vec<(&i64, &String)> = m.iter().collect();
    rows.sort_unstable();
    DataFrame::new(
        rows.len(),
        vec![
            Column::new("alloc_idx".into(), rows.iter().map(|r| *r.0).collect::<Vec<i64>>()),
            Column::new(
                "user_metadata".into(),
                rows.iter().map(|r| r.1.as_str()).collect::<Vec<&str>>(),
            ),
        ],
    )
}
