//! A processed file as store objects: the tables its queries read, each device's frames and first view, and the
//! segment map's stored checkpoints, encoded on the [`encode_pool`](crate::encode_pool) and put
//! through a [`DataWriter`]; the summary, charts and NVML samples beside them.

use memlens_api::{AnalyzeOutput, FileSummary};
use memlens_core::analysis::segment_checkpoint_frame::{stored_objects, StoredObject};
use memlens_core::analysis::segment_map::{EntryRows, SegmentCheckpoints};
use memlens_core::analysis::DeviceEvents;
use memlens_core::columns::held_bytes;
use memlens_core::pipeline::DeviceFrames;
use memlens_core::tables::{SnapshotTables, TABLE_NAMES};
use polars::prelude::*;
use rustc_hash::FxHashMap;

use super::{
    default_axis, DataError, CHART_PNG, CHART_SVG, OVERVIEW, OVERVIEW_WIDTH, QUERY_TABLES, RESERVED, RESERVED_COLUMN,
    SEGMENT_CHECKPOINTS, SUMMARY, USER_METADATA,
};
use crate::encode_pool::{self, EncodeJob};
use crate::parquet_object::{self, RowGroups};
use crate::store::DataWriter;

/// A device's usage and lifetimes objects (under [`device_dir`]).
pub(super) const USAGE: &str = "usage.parquet";
pub(super) const LIFETIMES: &str = "lifetimes.parquet";

/// Where snapshot `index`'s `device` keeps its objects.
pub(super) fn device_dir(index: usize, device: i64) -> String {
    format!("f{index}/d{device}")
}

/// A frame as a Parquet object under `key` ([`parquet_object::encode`]).
pub(super) fn parquet_bytes(key: &str, df: &DataFrame, groups: RowGroups) -> Result<Vec<u8>, DataError> {
    parquet_object::encode(df, groups).map_err(|source| DataError::Parquet {
        key: key.to_owned(),
        source,
    })
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
/// [`encode_pool`](crate::encode_pool) (the largest first), and put through `w` as it is ready.
pub fn write_file(
    w: &mut dyn DataWriter,
    index: usize,
    summary: &FileSummary,
    t: &mut SnapshotTables,
    devices: &mut [DeviceFrames],
    early: Vec<(String, Vec<u8>)>,
) -> Result<(), DataError> {
    put_json(w, &format!("f{index}/meta.json"), &t.meta())?;
    for (key, bytes) in &early {
        put(w, key, bytes)?;
    }
    let t = &*t;
    // Frames are cloned into their jobs (columns are shared, not copied).
    let mut frames: Vec<(String, DataFrame, RowGroups)> = TABLE_NAMES
        .iter()
        .zip(t.frames_ref())
        .filter(|(name, _)| QUERY_TABLES.contains(name))
        .map(|(name, df)| (format!("f{index}/{name}.parquet"), df.clone(), RowGroups::Default))
        .collect();
    let mut checkpoints = Vec::new();
    // Each device's checkpoint cursors, for its `segments.json`.
    let mut cursors: Vec<(String, Vec<usize>)> = Vec::new();
    for d in devices.iter_mut() {
        let dir = device_dir(index, d.device);
        let metadata = user_metadata_frame(&d.user_metadata)?;
        frames.push((format!("{dir}/{USER_METADATA}"), metadata, RowGroups::One));
        frames.push((format!("{dir}/{USAGE}"), d.usage.clone(), RowGroups::One));
        frames.push((
            format!("{dir}/{RESERVED}"),
            d.reserved.frame(RESERVED_COLUMN)?,
            RowGroups::One,
        ));
        frames.push((format!("{dir}/{LIFETIMES}"), d.lifetimes.clone(), RowGroups::One));
        frames.push((
            format!("{dir}/fragmentation.parquet"),
            d.fragmentation.clone(),
            RowGroups::One,
        ));
        if let Some(cp) = d.segment_checkpoints.take() {
            // Objects all encoded during the analyses need nothing of the trace (which may have
            // let go of its addresses by now: `PipelineSink::lets_addresses_go`), only their
            // cursors.
            let at: Vec<usize> = cp.cursors().collect();
            let all_early = (0..at.len()).all(|k| {
                let key = segment_object_key(&dir, k);
                early.iter().any(|(done, _)| *done == key)
            });
            if all_early {
                cursors.push((dir, at));
            } else {
                checkpoints.push((dir, DeviceEvents::new(t, d.device)?, cp));
            }
        }
    }
    frames.sort_by_key(|(_, df, _)| std::cmp::Reverse(held_bytes(df)));
    let mut jobs: Vec<EncodeJob<'_, DataError>> = frames
        .into_iter()
        .map(|(key, df, groups)| {
            let k = key.clone();
            EncodeJob::new(key, move || parquet_bytes(&k, &df, groups))
        })
        .collect();
    for d in devices.iter() {
        if let Some(ds) = summary.devices.iter().find(|s| s.device == d.device) {
            let key = format!("f{index}/d{}/{OVERVIEW}", d.device);
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
        put_json(w, &format!("{dir}/{SEGMENT_CHECKPOINTS}"), at)?;
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

/// The segment map's stored objects of a device (`{dir}/segments/{k}.parquet`, one a
/// checkpoint: [`stored_objects`]), and their cursors (for `{dir}/segments.json`).
fn segment_checkpoint_jobs<'a>(
    dir: &str,
    ev: &'a DeviceEvents,
    cp: &'a SegmentCheckpoints,
) -> (Vec<usize>, Vec<EncodeJob<'a, DataError>>) {
    let objects = stored_objects(cp, &EntryRows::of(ev));
    let cursors = objects.iter().map(|o| o.cursor).collect();
    let jobs = objects
        .into_iter()
        .enumerate()
        .map(|(k, object)| {
            let key = segment_object_key(dir, k);
            EncodeJob::new(key.clone(), move || segment_object_bytes(&key, &object))
        })
        .collect();
    (cursors, jobs)
}

/// The key of a device's stored checkpoint `k`, under the device's `dir`.
pub(super) fn segment_object_key(dir: &str, k: usize) -> String {
    format!("{dir}/segments/{k}.parquet")
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
    put_parquet(w, &format!("g{index}/samples.parquet"), samples)
}

pub fn write_summary(w: &mut dyn DataWriter, summary: &AnalyzeOutput) -> Result<(), DataError> {
    put_json(w, SUMMARY, summary)
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
