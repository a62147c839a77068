//! A processed report as store objects, and loaded back for queries: `summary.json` plus, per
//! analysed snapshot, every canonical table and each device's derived frames as Parquet, and
//! per NVML log its samples. Everything goes through the [`ReportStore`]'s blob interface.
//!
//! ```text
//! summary.json                 AnalyzeOutput (what GET /api/reports/{id} returns)
//! f<i>/meta.json               SnapshotMeta (source facts, max_split_size, format)
//! f<i>/<table>.parquet         every table of TABLE_NAMES (events, …, event_notes)
//! f<i>/d<device>/user_metadata.parquet  alloc_idx, user_metadata (what the script set)
//! f<i>/d<device>/usage.parquet        time, allocated (reports stored before 2026-12 also have active, and reserved)
//! f<i>/d<device>/reserved.parquet     entry, reserved: reserved bytes at entry -1 (before the trace) and where they change
//! f<i>/d<device>/lifetimes.parquet
//! f<i>/d<device>/fragmentation.parquet
//! f<i>/d<device>/overview.json        the timeline's first view (whole range, default axis, 1500 wide)
//! f<i>/d<device>/segments/<k>.parquet, segments.json   the segment map's checkpoints and cursors
//! g<j>/samples.parquet        NVML log j's device samples (times already aligned)
//! chart.png, chart.svg         the first device's usage chart (else the first GPU log's)
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use memlens_api::{AnalyzeOutput, FileSummary, SegmentMap};
use memlens_core::analysis::run::run_overview;
use memlens_core::analysis::segment_checkpoint_frame::{
    frames_of_parts, stored_window_parts, StoredWindow, MAX_ENTRIES_PER_OBJECT,
};
use memlens_core::analysis::segment_detail::SegmentDetail;
use memlens_core::analysis::segment_map::{EntryRows, SegmentCheckpoints, CHECKPOINTS};
use memlens_core::analysis::DeviceEvents;
use memlens_core::columns::{held_bytes, lifetimes as lt_col};
use memlens_core::entry_steps::EntrySteps;
use memlens_core::pipeline::DeviceFrames;
use memlens_core::query::{Axis, CategoryIndex, TimelineIndex};
use memlens_core::stacks::StackResolver;
use memlens_core::tables::{SnapshotMeta, SnapshotTables, TABLE_NAMES};
use polars::prelude::*;
use rustc_hash::FxHashMap;

use crate::encode_pool::{self, EncodeJob};
use crate::free_memory;
use crate::parquet_object::{self, RowGroups};
use crate::store::{DataWriter, ReportStore, StoreError};
use crate::stored_segments::{DeviceObjects, SegmentAt, StoredSegments};

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("{key}: {source}")]
    Store { key: String, source: StoreError },
    #[error("{key}: missing from the report's data")]
    Missing { key: String },
    #[error("{key}: {source}")]
    Parquet { key: String, source: PolarsError },
    #[error("{key}: {source}")]
    Json { key: String, source: serde_json::Error },
    #[error("tables: {0}")]
    Polars(#[from] PolarsError),
}

pub const SUMMARY: &str = "summary.json";
pub const CHART_PNG: &str = "chart.png";
pub const CHART_SVG: &str = "chart.svg";

/// A frame as a Parquet object under `key` ([`parquet_object::encode`]).
fn parquet_bytes(key: &str, df: &DataFrame, groups: RowGroups) -> Result<Vec<u8>, DataError> {
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

fn put_parquet(w: &mut dyn DataWriter, key: &str, df: &mut DataFrame) -> Result<(), DataError> {
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

/// Writes one analysed file's tables and device frames under `f<index>/`: every Parquet
/// object is encoded on the [`encode_pool`](crate::encode_pool) (the largest first), and put
/// through `w` as it is ready.
pub fn write_file(
    w: &mut dyn DataWriter,
    index: usize,
    summary: &FileSummary,
    t: &mut SnapshotTables,
    devices: &mut [DeviceFrames],
) -> Result<(), DataError> {
    put_json(w, &format!("f{index}/meta.json"), &t.meta())?;
    let t = &*t;
    // Frames are cloned into their jobs (columns are shared, not copied).
    let mut frames: Vec<(String, DataFrame, RowGroups)> = TABLE_NAMES
        .iter()
        .zip(t.frames_ref())
        .map(|(name, df)| (format!("f{index}/{name}.parquet"), df.clone(), RowGroups::Default))
        .collect();
    let mut checkpoints = Vec::new();
    for d in devices.iter_mut() {
        let dir = format!("f{index}/d{}", d.device);
        let metadata = user_metadata_frame(&d.user_metadata)?;
        frames.push((format!("{dir}/{USER_METADATA}"), metadata, RowGroups::One));
        frames.push((format!("{dir}/usage.parquet"), d.usage.clone(), RowGroups::One));
        frames.push((
            format!("{dir}/{RESERVED}"),
            d.reserved.frame(RESERVED_COLUMN)?,
            RowGroups::One,
        ));
        frames.push((format!("{dir}/lifetimes.parquet"), d.lifetimes.clone(), RowGroups::One));
        frames.push((
            format!("{dir}/fragmentation.parquet"),
            d.fragmentation.clone(),
            RowGroups::One,
        ));
        if let Some(cp) = d.segment_checkpoints.take() {
            checkpoints.push((dir, DeviceEvents::new(t, d.device)?, cp));
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
    let mut cursors = Vec::with_capacity(checkpoints.len());
    for (dir, ev, cp) in &checkpoints {
        let (at, device_jobs) = segment_checkpoint_jobs(dir, ev, cp);
        cursors.push((dir, at));
        jobs.extend(device_jobs);
    }
    encode_pool::put_all(w, jobs, encode_pool::encode_threads(), put)?;
    for (dir, at) in &cursors {
        put_json(w, &format!("{dir}/{SEGMENT_CHECKPOINTS}"), at)?;
    }
    Ok(())
}

/// A device's first view: its whole range on its default axis at [`OVERVIEW_WIDTH`], as the
/// timeline query answers it (stored so that a page opened on a report whose frames are not
/// loaded draws at once: `timeline?overview=true`).
const OVERVIEW: &str = "overview.json";
pub const OVERVIEW_WIDTH: usize = 1500;

/// The axis a device's timeline opens on: time where the trace has timestamps.
pub fn default_axis(d: &memlens_api::DeviceSummary) -> Axis {
    match d.time_axis {
        memlens_api::TimeAxis::TimeUs => Axis::Time,
        memlens_api::TimeAxis::EventOrder => Axis::Event,
    }
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

/// The segment map's stored objects of a device (`{dir}/segments/{k}.parquet`, see
/// [`stored_windows`]), and their cursors (for `{dir}/segments.json`): one job a window, its
/// parts made together ([`frames_of_parts`]).
fn segment_checkpoint_jobs<'a>(
    dir: &str,
    ev: &'a DeviceEvents,
    cp: &'a SegmentCheckpoints,
) -> (Vec<usize>, Vec<EncodeJob<'a, DataError>>) {
    let runs = stored_window_parts(cp.points(), &EntryRows::of(ev), MAX_ENTRIES_PER_OBJECT);
    let cursors = runs.iter().flatten().map(|w| w.cursor).collect();
    let mut k = 0;
    let jobs = runs
        .into_iter()
        .map(|parts| {
            let keys: Vec<String> = (k..k + parts.len())
                .map(|k| format!("{dir}/segments/{k}.parquet"))
                .collect();
            k += parts.len();
            EncodeJob::many(keys.clone(), move || segment_objects_bytes(&keys, &parts))
        })
        .collect();
    (cursors, jobs)
}

/// The stored objects of one window's parts, under `keys` (one a part; what
/// `memlens-bench-segments` reads back too).
pub fn segment_objects_bytes(keys: &[String], parts: &[StoredWindow<'_>]) -> Result<Vec<Vec<u8>>, DataError> {
    let frames = frames_of_parts(parts).map_err(|source| DataError::Parquet {
        key: keys.first().cloned().unwrap_or_default(),
        source,
    })?;
    keys.iter()
        .zip(&frames)
        .map(|(key, frame)| parquet_bytes(key, frame, RowGroups::Default))
        .collect()
}

/// The cursors of a device's stored segment checkpoints (absent in reports stored before them).
const SEGMENT_CHECKPOINTS: &str = "segments.json";

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

/// Reads one data object of a report; `None` when it has none by that key.
pub fn read_object(store: &dyn ReportStore, id: &str, key: &str) -> Result<Option<Vec<u8>>, DataError> {
    store.read_data(id, key).map_err(|source| DataError::Store {
        key: key.to_owned(),
        source,
    })
}

fn read_required(store: &dyn ReportStore, id: &str, key: &str) -> Result<Vec<u8>, DataError> {
    read_object(store, id, key)?.ok_or_else(|| DataError::Missing { key: key.to_owned() })
}

pub(crate) fn read_json<T: serde::de::DeserializeOwned>(
    store: &dyn ReportStore,
    id: &str,
    key: &str,
) -> Result<T, DataError> {
    let bytes = read_required(store, id, key)?;
    serde_json::from_slice(&bytes).map_err(|source| DataError::Json {
        key: key.to_owned(),
        source,
    })
}

pub(crate) fn read_parquet(store: &dyn ReportStore, id: &str, key: &str) -> Result<DataFrame, DataError> {
    let bytes = read_required(store, id, key)?;
    crate::parquet_object::decode(bytes).map_err(|source| DataError::Parquet {
        key: key.to_owned(),
        source,
    })
}

/// The stored summary; reports stored before run overviews existed get theirs from their files.
pub fn read_summary(store: &dyn ReportStore, id: &str) -> Result<AnalyzeOutput, DataError> {
    let mut summary: AnalyzeOutput = read_json(store, id, SUMMARY)?;
    if summary.run.is_none() {
        summary.run = run_overview(&summary.files);
    }
    Ok(summary)
}

/// One analysed file of a stored report, read from the store part by part as queries ask
/// for them: the timeline reads only its device frames, a stack only the two stack tables, and
/// only the segment map (and a chart of an old report) needs the trace itself. What is loaded
/// is kept until the file leaves the server's cache.
pub struct LoadedFile {
    store: Arc<dyn ReportStore>,
    id: String,
    index: usize,
    summary: FileSummary,
    stacks: Part<StackResolver>,
    tables: Part<SnapshotTables>,
    devices: Part<Vec<DeviceFrames>>,
    /// Segment-state checkpoints per device, built on the first segment-map query.
    checkpoints: Mutex<HashMap<i64, Arc<SegmentCheckpoints>>>,
    /// Timeline indexes per device and axis, built on the first timeline query.
    timeline_indexes: Mutex<HashMap<(i64, Axis), Arc<TimelineIndex>>>,
    /// Category indexes per device, built on the first category-timeline query.
    category_indexes: Mutex<HashMap<i64, Arc<Option<CategoryIndex>>>>,
    /// The stored segment checkpoints read so far.
    segments: StoredSegments,
    /// Set once a stored first view was answered and the view's indexes were sent to be
    /// built behind it ([`LoadedFile::claim_warming`]).
    warming: AtomicBool,
    /// What the loaded parts hold in memory, estimated as each is loaded (what the server's
    /// cache of loaded files is bounded by).
    bytes: AtomicU64,
    /// Told the bytes a large part is about to load, before it loads (the server's cache
    /// makes room for them: see [`LoadedFile::set_make_room`]).
    make_room: std::sync::OnceLock<MakeRoom>,
}

/// Called with the bytes (estimated) a part of a file is about to load.
pub type MakeRoom = Box<dyn Fn(u64) + Send + Sync>;

impl Drop for LoadedFile {
    fn drop(&mut self) {
        if self.bytes() > free_memory::TRIM_ABOVE {
            // Drop the parts first, then give the freed pages back.
            self.devices = Part::default();
            self.tables = Part::default();
            self.timeline_indexes = Mutex::new(HashMap::new());
            self.category_indexes = Mutex::new(HashMap::new());
            self.checkpoints = Mutex::new(HashMap::new());
            free_memory::give_back();
        }
    }
}

/// A part of a [`LoadedFile`], loaded on first use and then kept; a load that failed is tried
/// again on the next use. Concurrent first uses wait for one load.
struct Part<T>(Mutex<Option<Arc<T>>>);

impl<T> Default for Part<T> {
    fn default() -> Self {
        Part(Mutex::new(None))
    }
}

impl<T> Part<T> {
    fn get_or_load(
        &self,
        bytes: &AtomicU64,
        load: impl FnOnce() -> Result<(T, usize), DataError>,
    ) -> Result<Arc<T>, DataError> {
        let mut slot = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(v) = slot.as_ref() {
            return Ok(v.clone());
        }
        let (value, size) = load()?;
        let value = Arc::new(value);
        *slot = Some(value.clone());
        bytes.fetch_add(size as u64, Ordering::Relaxed);
        if size as u64 > free_memory::TRIM_ABOVE {
            free_memory::give_back();
        }
        Ok(value)
    }

    fn is_loaded(&self) -> bool {
        self.0.lock().map(|s| s.is_some()).unwrap_or(false)
    }
}

/// What a device's frames hold in memory, estimated.
fn device_frames_bytes(d: &DeviceFrames) -> usize {
    held_bytes(&d.usage)
        + d.reserved.bytes()
        + held_bytes(&d.lifetimes)
        + held_bytes(&d.fragmentation)
        + d.user_metadata.values().map(|m| m.len() + 16).sum::<usize>()
}

impl LoadedFile {
    /// File `index` of stored report `id` (summarised by `summary`); nothing is read yet.
    pub fn open(store: Arc<dyn ReportStore>, id: &str, index: usize, summary: &FileSummary) -> LoadedFile {
        LoadedFile {
            store,
            id: id.to_owned(),
            index,
            summary: summary.clone(),
            stacks: Part::default(),
            tables: Part::default(),
            devices: Part::default(),
            checkpoints: Mutex::new(HashMap::new()),
            timeline_indexes: Mutex::new(HashMap::new()),
            category_indexes: Mutex::new(HashMap::new()),
            segments: StoredSegments::default(),
            warming: AtomicBool::new(false),
            bytes: AtomicU64::new(0),
            make_room: std::sync::OnceLock::new(),
        }
    }

    /// File `index` of report `id` with its device frames already in memory (the ingest that
    /// just wrote them); its other parts load from the store when asked for.
    pub fn with_devices(
        store: Arc<dyn ReportStore>,
        id: &str,
        index: usize,
        summary: &FileSummary,
        devices: Vec<DeviceFrames>,
    ) -> LoadedFile {
        let f = LoadedFile::open(store, id, index, summary);
        let size = devices.iter().map(device_frames_bytes).sum::<usize>();
        if let Ok(mut slot) = f.devices.0.lock() {
            *slot = Some(Arc::new(devices));
            f.bytes.fetch_add(size as u64, Ordering::Relaxed);
        }
        f
    }

    /// Sets what this file tells before a large part loads (once; later calls are ignored).
    pub fn set_make_room(&self, make_room: MakeRoom) {
        let _ = self.make_room.set(make_room);
    }

    fn before_loading(&self, estimate: u64) {
        if let Some(make_room) = self.make_room.get() {
            make_room(estimate);
        }
    }

    /// What the device frames will hold once loaded, estimated from the summary: the usage
    /// columns per entry (time, allocated), the lifetimes' per allocation (addr, size, stack,
    /// 32-bit entry indexes, category and rule; a stream column where there are several), as
    /// [`device_frames_bytes`] counts them.
    pub fn frames_estimate(&self) -> u64 {
        self.summary
            .devices
            .iter()
            .map(|d| d.event_count as u64 * 16 + (d.alloc_count + d.frees_before_trace) as u64 * 38)
            .sum()
    }

    /// Estimated bytes of the parts loaded so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// The parts loaded so far, by name (`stacks`, `tables`, `devices`).
    pub fn loaded_parts(&self) -> Vec<&'static str> {
        [
            ("stacks", self.stacks.is_loaded()),
            ("tables", self.tables.is_loaded()),
            ("devices", self.devices.is_loaded()),
        ]
        .into_iter()
        .filter_map(|(name, loaded)| loaded.then_some(name))
        .collect()
    }

    fn parquet(&self, name: &str) -> Result<DataFrame, DataError> {
        read_parquet(self.store.as_ref(), &self.id, &format!("f{}/{name}", self.index))
    }

    /// The snapshot's canonical tables (the trace itself: the largest part).
    pub fn tables(&self) -> Result<Arc<SnapshotTables>, DataError> {
        self.tables.get_or_load(&self.bytes, || {
            let entries: u64 = self.summary.devices.iter().map(|d| d.event_count as u64).sum();
            self.before_loading(entries * 48);
            let tables = load_tables(self.store.as_ref(), &self.id, self.index, &self.summary)?;
            let size = tables.frames_ref().iter().map(|f| held_bytes(f)).sum();
            Ok((tables, size))
        })
    }

    /// The snapshot's stacks, from its two frame tables.
    pub fn stacks(&self) -> Result<Arc<StackResolver>, DataError> {
        self.stacks.get_or_load(&self.bytes, || {
            let (frames, stack_frames) = (self.parquet("frames.parquet")?, self.parquet("stack_frames.parquet")?);
            let size = held_bytes(&frames) + held_bytes(&stack_frames);
            Ok((StackResolver::new(&frames, &stack_frames)?, size))
        })
    }

    /// Every analysed device's frames.
    pub fn devices(&self) -> Result<Arc<Vec<DeviceFrames>>, DataError> {
        self.devices.get_or_load(&self.bytes, || {
            self.before_loading(self.frames_estimate());
            let mut devices = Vec::new();
            for d in &self.summary.devices {
                let dir = format!("d{}", d.device);
                let user_metadata = match read_object(
                    self.store.as_ref(),
                    &self.id,
                    &format!("f{}/{dir}/{USER_METADATA}", self.index),
                )? {
                    Some(bytes) => user_metadata_from(&format!("{dir}/{USER_METADATA}"), bytes)?,
                    // Stored before the map had its own object: found from the trace.
                    None => memlens_core::frames::alloc_metadata(&*self.tables()?, d.device)?,
                };
                // The two large frames are decoded side by side.
                let started = std::time::Instant::now();
                let (usage, lifetimes) = std::thread::scope(|scope| {
                    let usage = scope.spawn(|| self.parquet(&format!("{dir}/usage.parquet")));
                    let lifetimes = self.parquet(&format!("{dir}/lifetimes.parquet"));
                    (usage.join().unwrap_or_else(|p| std::panic::resume_unwind(p)), lifetimes)
                });
                tracing::debug!(report = %self.id, file = self.index, device = d.device,
                    "device frames read in {:.0} ms", started.elapsed().as_secs_f64() * 1e3);
                let mut lifetimes = lifetimes?;
                one_values_as_scalars(&mut lifetimes, &["stream"], &format!("{dir}/lifetimes.parquet"))?;
                // Stored before an allocation's times were read from the entry times: the
                // columns it had for them are not held; its entry indexes were 64-bit.
                for old in ["t_alloc", "t_free"] {
                    let _ = lifetimes.drop_in_place(old);
                }
                entry_indexes_as_i32(&mut lifetimes, &format!("{dir}/lifetimes.parquet"))?;
                let mut usage = usage?;
                let reserved = self.reserved_steps(&dir, &mut usage, d.initial_reserved_bytes)?;
                devices.push(DeviceFrames {
                    device: d.device,
                    usage,
                    reserved,
                    lifetimes,
                    fragmentation: self.parquet(&format!("{dir}/fragmentation.parquet"))?,
                    user_metadata,
                    segment_checkpoints: None,
                });
            }
            let size = devices.iter().map(device_frames_bytes).sum();
            Ok((devices, size))
        })
    }

    /// A device's reserved bytes as their changes: the object stored beside its usage, or, for
    /// a report stored before there was one, the usage's `reserved` column, which (with the
    /// `active` column such reports also have) is not held.
    fn reserved_steps(&self, dir: &str, usage: &mut DataFrame, initial: i64) -> Result<EntrySteps, DataError> {
        let key = format!("f{}/{dir}/{RESERVED}", self.index);
        let invalid = |source| DataError::Parquet {
            key: key.clone(),
            source,
        };
        if let Some(bytes) = read_object(self.store.as_ref(), &self.id, &key)? {
            let df = parquet_object::decode(bytes).map_err(invalid)?;
            return EntrySteps::from_frame(&df, RESERVED_COLUMN, usage.height()).map_err(invalid);
        }
        let key = format!("f{}/{dir}/usage.parquet", self.index);
        let invalid = |source| DataError::Parquet {
            key: key.clone(),
            source,
        };
        let column = usage.drop_in_place(RESERVED_COLUMN).map_err(invalid)?;
        let _ = usage.drop_in_place("active");
        let values = column.i64().map_err(invalid)?.rechunk();
        let values = values.cont_slice().map_err(invalid)?;
        Ok(EntrySteps::from_values(initial, values))
    }

    /// The segment map of `device` at `at`, listing what `detail` asks for, from the stored
    /// checkpoint that covers it (with the device frames for the time axis); `None` for a
    /// report stored before its checkpoints were, whose maps replay the trace
    /// ([`LoadedFile::checkpoints`]).
    pub fn stored_segment_map(
        &self,
        device: i64,
        at: SegmentAt,
        detail: SegmentDetail,
    ) -> Result<Option<SegmentMap>, DataError> {
        let devices = self.devices()?;
        let Some(frames) = devices.iter().find(|d| d.device == device) else {
            return Ok(None);
        };
        let times = memlens_core::columns::usage::TIME.slice(&frames.usage)?;
        let cursor = at.cursor(times);
        let has_time = self
            .summary
            .devices
            .iter()
            .any(|d| d.device == device && d.time_axis == memlens_api::TimeAxis::TimeUs);
        let time_us = cursor.checked_sub(1).filter(|_| has_time).map(|i| times[i]);
        self.segments.map_at(self, &self.bytes, device, cursor, time_us, detail)
    }

    /// The first view stored for `device` on `axis` at ingest ([`OVERVIEW_WIDTH`], the whole
    /// range), when one is stored and `axis` is the device's default; `None` also once the
    /// device's timeline index on that axis is built (then any width is answered as fast).
    pub fn stored_overview(&self, device: i64, axis: Axis) -> Result<Option<memlens_api::Timeline>, DataError> {
        let default = self
            .summary
            .devices
            .iter()
            .find(|d| d.device == device)
            .map(default_axis);
        // An index being built holds the map's lock (a page opened right after ingest finds
        // `prepare_first_view` at work): the stored view answers now instead of waiting on it.
        let built = match self.timeline_indexes.try_lock() {
            Ok(m) => m.contains_key(&(device, axis)),
            Err(std::sync::TryLockError::WouldBlock) => false,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().contains_key(&(device, axis)),
        };
        if default != Some(axis) || built {
            return Ok(None);
        }
        let key = format!("f{}/d{device}/{OVERVIEW}", self.index);
        match read_object(self.store.as_ref(), &self.id, &key)? {
            Some(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|source| DataError::Json { key, source }),
            None => Ok(None),
        }
    }

    /// The segment-state checkpoints of a device (built once, then shared; their bytes count
    /// towards the file's).
    pub fn checkpoints(&self, tables: &SnapshotTables, ev: &DeviceEvents) -> PolarsResult<Arc<SegmentCheckpoints>> {
        kept(&self.checkpoints, &self.bytes, ev.device, || {
            let cp = SegmentCheckpoints::build(tables, ev, CHECKPOINTS)?;
            let size = cp.bytes();
            Ok((cp, size))
        })
    }

    /// Builds what a report page's first view asks for — the focus device's timeline index on
    /// its default axis, then its category index — so that its first queries find them built.
    pub fn prepare_first_view(&self) -> Result<(), DataError> {
        let Some(d) = self
            .summary
            .focus_device
            .and_then(|f| self.summary.devices.iter().find(|d| d.device == f))
        else {
            return Ok(());
        };
        self.prepare_view(d.device, default_axis(d))
    }

    /// Builds device `device`'s timeline index on `axis` and its category index (loading its
    /// frames): what a page's first zoom and category view need.
    pub fn prepare_view(&self, device: i64, axis: Axis) -> Result<(), DataError> {
        let devices = self.devices()?;
        if let Some(frames) = devices.iter().find(|f| f.device == device) {
            self.timeline_index(frames, axis)?;
            self.category_index(frames)?;
        }
        Ok(())
    }

    /// `true` the first time only: the caller is to build the first view's indexes behind a
    /// stored first view just answered (a page opened after a restart), so that its first zoom
    /// finds them built instead of loading the frames and building them then (a 2 GB report:
    /// about a second).
    pub fn claim_warming(&self) -> bool {
        !self.warming.swap(true, Ordering::AcqRel)
    }

    /// The timeline index of a device's frames on `axis` (built once, then shared; its bytes
    /// count towards the file's).
    pub fn timeline_index(&self, frames: &DeviceFrames, axis: Axis) -> PolarsResult<Arc<TimelineIndex>> {
        kept(&self.timeline_indexes, &self.bytes, (frames.device, axis), || {
            let started = std::time::Instant::now();
            let ix = TimelineIndex::build(frames, axis)?;
            let size = ix.bytes();
            tracing::debug!(report = %self.id, file = self.index, device = frames.device,
                "timeline index built in {:.0} ms ({size} bytes)", started.elapsed().as_secs_f64() * 1e3);
            Ok((ix, size))
        })
    }

    /// The category index of a device's frames, `None` where it cannot be built (built once,
    /// then shared; its bytes count towards the file's).
    pub fn category_index(&self, frames: &DeviceFrames) -> PolarsResult<Arc<Option<CategoryIndex>>> {
        kept(&self.category_indexes, &self.bytes, frames.device, || {
            let ix = CategoryIndex::build(frames)?;
            let size = ix.as_ref().map_or(0, CategoryIndex::bytes);
            Ok((ix, size))
        })
    }
}

impl DeviceObjects for LoadedFile {
    fn cursors(&self, device: i64) -> Result<Option<Vec<usize>>, DataError> {
        let key = format!("f{}/d{device}/{SEGMENT_CHECKPOINTS}", self.index);
        if read_object(self.store.as_ref(), &self.id, &key)?.is_none() {
            return Ok(None);
        }
        read_json(self.store.as_ref(), &self.id, &key).map(Some)
    }

    fn checkpoint(&self, device: i64, k: usize) -> Result<DataFrame, DataError> {
        self.parquet(&format!("d{device}/segments/{k}.parquet"))
    }
}

/// The value kept under `key`, built by `build` (with its size, added to `bytes`) the first
/// time. The map stays locked while building: a second query for the same device waits
/// instead of building it again.
fn kept<K: std::hash::Hash + Eq, T>(
    map: &Mutex<HashMap<K, Arc<T>>>,
    bytes: &AtomicU64,
    key: K,
    build: impl FnOnce() -> PolarsResult<(T, usize)>,
) -> PolarsResult<Arc<T>> {
    let mut values = map.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(v) = values.get(&key) {
        return Ok(v.clone());
    }
    let (value, size) = build()?;
    let value = Arc::new(value);
    bytes.fetch_add(size as u64, Ordering::Relaxed);
    values.insert(key, value.clone());
    Ok(value)
}

/// Each device's `user_metadata` map, stored beside its frames (alloc entry index, text).
const USER_METADATA: &str = "user_metadata.parquet";
/// A device's reserved bytes, as their changes ([`EntrySteps::frame`]).
const RESERVED: &str = "reserved.parquet";
const RESERVED_COLUMN: &str = "reserved";

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

fn user_metadata_from(key: &str, bytes: Vec<u8>) -> Result<FxHashMap<i64, String>, DataError> {
    let parquet = |source| DataError::Parquet {
        key: key.to_owned(),
        source,
    };
    let df = crate::parquet_object::decode(bytes).map_err(parquet)?;
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

/// The canonical tables of one analysed file of a report.
/// Each of `columns` of `df` (read from the object `key`) held as one scalar when it has one
/// value throughout ([`memlens_core::columns::one_value_as_scalar`]).
/// A stored `lifetimes` frame's entry indexes as the 32 bits the analyses read (reports stored
/// before 2026-12 wrote 64).
fn entry_indexes_as_i32(lifetimes: &mut DataFrame, key: &str) -> Result<(), DataError> {
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

fn one_values_as_scalars(df: &mut DataFrame, columns: &[&str], key: &str) -> Result<(), DataError> {
    for &name in columns {
        let Ok(column) = df.column(name) else { continue };
        let column = memlens_core::columns::one_value_as_scalar(column.clone());
        if column.as_scalar_column().is_some() {
            df.with_column(column).map_err(|source| DataError::Parquet {
                key: key.to_owned(),
                source,
            })?;
        }
    }
    Ok(())
}

fn load_tables(store: &dyn ReportStore, id: &str, i: usize, fs: &FileSummary) -> Result<SnapshotTables, DataError> {
    // Reports written before `meta.json` and `event_notes` were stored still load: their
    // meta comes from the summary, their notes are empty.
    let meta_key = format!("f{i}/meta.json");
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
        let key = format!("f{i}/{name}.parquet");
        *slot = if name == "event_notes" && read_object(store, id, &key)?.is_none() {
            DataFrame::empty()
        } else {
            read_parquet(store, id, &key)?
        };
    }
    // A trace of one device, or on one stream, held that column as one scalar when it was
    // analysed (`SnapshotColumns::into_tables`): it is held so again, as the analyses read it.
    one_values_as_scalars(&mut frames[0], &["device", "stream"], &format!("f{i}/events.parquet"))?;
    Ok(SnapshotTables::from_frames(frames, meta))
}

/// The samples of each NVML log of a report, in `summary.gpu_logs` order.
pub fn load_gpu_logs(store: &dyn ReportStore, id: &str, summary: &AnalyzeOutput) -> Result<Vec<DataFrame>, DataError> {
    (0..summary.gpu_logs.len())
        .map(|j| read_parquet(store, id, &format!("g{j}/samples.parquet")))
        .collect()
}

/// Loads a report's published data, every part of every file of it.
pub fn load(store: &Arc<dyn ReportStore>, id: &str) -> Result<LoadedReport, DataError> {
    let summary = read_summary(store.as_ref(), id)?;
    let mut files = Vec::new();
    for (i, fs) in summary.files.iter().enumerate() {
        let f = LoadedFile::open(store.clone(), id, i, fs);
        f.tables()?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{LocalStore, ReportRecord, ReportState};
    use memlens_core::pipeline::{self, Input, PipelineSink, SnapshotOutput};

    fn store_with_report(id: &str) -> (tempfile::TempDir, Arc<dyn ReportStore>) {
        let root = tempfile::tempdir().expect("tmp");
        let store: Arc<dyn ReportStore> = Arc::new(LocalStore::open(root.path()).expect("open"));
        store.upload_writer(id, "0-x").expect("w").finish().expect("finish");
        store
            .create(&ReportRecord {
                id: id.to_owned(),
                state: ReportState::Queued,
                created_at: 0,
                expires_at: None,
                error: None,
                files: Vec::new(),
                delete_token_hash: String::new(),
                meta: Default::default(),
            })
            .expect("create");
        (root, store)
    }

    #[test]
    fn large_frames_come_back_contiguous() {
        let id = "00000000000000000000000000000001";
        let (_root, store) = store_with_report(id);
        let n = 3_000_000i64;
        let mut df = DataFrame::new(
            n as usize,
            vec![
                Column::new("a".into(), (0..n).collect::<Vec<i64>>()),
                Column::new(
                    "b".into(),
                    (0..n).map(|x| (x % 7 != 0).then_some(x)).collect::<Vec<Option<i64>>>(),
                ),
            ],
        )
        .expect("frame");
        let mut w = store.data_writer(id).expect("writer");
        put_parquet(w.as_mut(), "x.parquet", &mut df).expect("write");
        w.commit().expect("commit");
        let back = read_parquet(store.as_ref(), id, "x.parquet").expect("read");
        let a = back.column("a").expect("a").i64().expect("i64");
        assert_eq!(a.chunks().len(), 1);
        assert!(a.cont_slice().is_ok());
        assert_eq!(
            back.column("b").expect("b").null_count(),
            df.column("b").expect("b").null_count()
        );
    }

    /// Keeps what the pipeline hands over, as the server's ingest does.
    struct Keep<'a>(&'a mut dyn DataWriter, Vec<(Vec<DataFrame>, SnapshotMeta)>);
    impl PipelineSink for Keep<'_> {
        fn keeps_tables(&self) -> bool {
            true
        }
        fn keeps_segment_checkpoints(&self) -> bool {
            true
        }
        fn snapshot(&mut self, out: SnapshotOutput<'_>) -> Result<(), String> {
            self.1.push((
                out.tables.frames_mut().into_iter().map(|(_, df)| df.clone()).collect(),
                out.tables.meta(),
            ));
            write_file(self.0, out.index, out.summary, out.tables, out.devices).map_err(|e| e.to_string())
        }
    }

    /// Processes trace `name` into report `id` of `store` as the ingest does: what was
    /// written (each file's tables and meta) and the summary.
    fn process_into(
        store: &Arc<dyn ReportStore>,
        id: &str,
        name: &str,
    ) -> (Vec<(Vec<DataFrame>, SnapshotMeta)>, AnalyzeOutput) {
        let mut w = store.data_writer(id).expect("writer");
        let mut keep = Keep(w.as_mut(), Vec::new());
        let path = memlens_tests_trace(name);
        let out = pipeline::run(vec![Input::path(&path)], Default::default(), &mut keep).expect("run");
        let written = std::mem::take(&mut keep.1);
        write_summary(w.as_mut(), &out).expect("summary");
        w.commit().expect("commit");
        (written, out)
    }

    #[test]
    fn a_stored_report_loads_back_with_every_table_it_was_written_with() {
        let id = "00000000000000000000000000000002";
        let (_root, store) = store_with_report(id);
        // A snapshot with event notes (user_metadata / compile_context) and settings.
        let (written, _) = process_into(&store, id, "leak.pickle");
        let loaded = load(&store, id).expect("load");
        let (frames, meta) = &written[0];
        let tables = loaded.files[0].tables().expect("tables");
        let mut back = SnapshotTables::from_frames(tables.frames_ref().map(|f| f.clone()), tables.meta());
        assert_eq!(&back.meta(), meta);
        for ((name, got), want) in back.frames_mut().into_iter().zip(frames) {
            assert!(got.equals_missing(want), "{name} differs after a round trip");
        }
    }

    #[test]
    fn a_timeline_reads_only_the_device_frames_and_their_stored_user_metadata() {
        let id = "00000000000000000000000000000004";
        let (_root, store) = store_with_report(id);
        // traces/capture/labels.py: batches allocated under `_set_memory_metadata`.
        let (_, out) = process_into(&store, id, "labels.pickle");
        let f = LoadedFile::open(store.clone(), id, 0, &out.files[0]);
        assert_eq!(f.bytes(), 0);
        let devices = f.devices().expect("devices");
        assert_eq!(f.loaded_parts(), ["devices"], "the trace itself stays unread");
        let with_devices = f.bytes();
        assert!(with_devices > 0);
        // The timeline index is built once and weighs on the file.
        let index = f.timeline_index(&devices[0], Axis::Time).expect("index");
        let with_index = f.bytes();
        assert_eq!(with_index, with_devices + index.bytes() as u64);
        assert!(Arc::ptr_eq(
            &index,
            &f.timeline_index(&devices[0], Axis::Time).expect("index")
        ));
        assert_eq!(f.bytes(), with_index);
        // The stored map equals the one found from the trace.
        let tables = f.tables().expect("tables");
        assert!(f.bytes() > with_index);
        let mut any = false;
        for d in devices.iter() {
            let from_trace = memlens_core::frames::alloc_metadata(&tables, d.device).expect("metadata");
            any |= !from_trace.is_empty();
            assert_eq!(d.user_metadata, from_trace);
        }
        assert!(any, "labels.pickle sets user metadata on some allocations");
    }

    #[test]
    fn a_first_view_builds_the_focus_devices_indexes_that_its_queries_then_use() {
        let id = "00000000000000000000000000000005";
        let (_root, store) = store_with_report(id);
        // Two devices: the report opens on device 1, where the leak is.
        let (_, out) = process_into(&store, id, "leak.two_devices.pickle");
        let summary = &out.files[0];
        assert_eq!(summary.focus_device, Some(1));
        let f = LoadedFile::open(store.clone(), id, 0, summary);
        let devices = f.devices().expect("devices");
        let before = f.bytes();
        f.prepare_first_view().expect("first view");
        let prepared = f.bytes();
        let focus = devices.iter().find(|d| d.device == 1).expect("device 1");
        let (timeline, categories) = (
            f.timeline_index(focus, Axis::Time).expect("timeline index"),
            f.category_index(focus).expect("category index"),
        );
        let built = timeline.bytes() + categories.as_ref().as_ref().map_or(0, CategoryIndex::bytes);
        assert!(categories.is_some());
        assert_eq!(prepared, before + built as u64, "the first view built both");
        assert_eq!(f.bytes(), prepared, "and its queries found them built");
        assert_eq!(f.loaded_parts(), ["devices"]);
    }

    #[test]
    fn a_stored_report_answers_segment_maps_from_its_checkpoints_without_the_trace() {
        use crate::stored_segments::SegmentAt;
        use memlens_core::analysis::segment_detail::SegmentDetail;
        let id = "00000000000000000000000000000006";
        for name in ["expandable_oom_fragmentation.pickle", "leak.two_devices.pickle"] {
            let (_root, store) = store_with_report(id);
            let (_, out) = process_into(&store, id, name);
            let summary = &out.files[0];
            let stored = LoadedFile::open(store.clone(), id, 0, summary);
            let replayed = LoadedFile::open(store.clone(), id, 0, summary);
            let tables = replayed.tables().expect("tables");
            for d in &summary.devices {
                let ev = DeviceEvents::new(&tables, d.device).expect("device");
                let cp = SegmentCheckpoints::build_every(&tables, &ev, ev.len() / 16).expect("checkpoints");
                let n = ev.len();
                let mut asked = vec![
                    SegmentAt::End,
                    SegmentAt::Entry(0),
                    SegmentAt::Entry(n - 1),
                    SegmentAt::Entry(n + 5),
                    SegmentAt::Time(i64::MIN),
                    SegmentAt::Time(ev.time()[n / 2]),
                    SegmentAt::Time(i64::MAX),
                ];
                asked.extend((0..n).step_by((n / 40).max(1)).map(SegmentAt::Entry));
                for at in asked {
                    let detail = SegmentDetail::FULL;
                    let from_store = stored
                        .stored_segment_map(d.device, at, detail)
                        .expect("read")
                        .expect("stored checkpoints");
                    let from_trace = match at {
                        SegmentAt::Entry(e) => cp.map_at(&ev, Some(e), detail),
                        SegmentAt::Time(t) => cp.map_at_time(&ev, t, detail),
                        SegmentAt::End => cp.map_at(&ev, n.checked_sub(1), detail),
                    };
                    assert_eq!(Some(from_store), from_trace, "{name} device {} at {at:?}", d.device);
                }
            }
            assert_eq!(stored.loaded_parts(), ["devices"], "{name}: the trace stays unread");
        }
    }

    #[test]
    fn a_stored_report_answers_its_first_view_without_loading_its_frames() {
        let id = "00000000000000000000000000000007";
        for name in ["mlp_train.pickle", "leak.two_devices.pickle", "many_small.pickle.gz"] {
            let (_root, store) = store_with_report(id);
            let (_, out) = process_into(&store, id, name);
            let summary = &out.files[0];
            let stored = LoadedFile::open(store.clone(), id, 0, summary);
            let live = LoadedFile::open(store.clone(), id, 0, summary);
            let devices = live.devices().expect("frames");
            for d in &summary.devices {
                let axis = default_axis(d);
                let overview = stored
                    .stored_overview(d.device, axis)
                    .expect("read")
                    .expect("stored at ingest");
                let frames = devices.iter().find(|f| f.device == d.device).expect("device");
                let computed = memlens_core::query::timeline_on(
                    frames,
                    axis,
                    d.initial_allocated_bytes,
                    None,
                    None,
                    OVERVIEW_WIDTH,
                )
                .expect("timeline");
                assert_eq!(overview, computed, "{name} device {}", d.device);
                // Only the default axis is stored.
                let other = if axis == Axis::Time { Axis::Event } else { Axis::Time };
                assert_eq!(stored.stored_overview(d.device, other).expect("read"), None);
                // Once the index is built, any width is as fast: the stored view steps aside.
                stored.timeline_index(frames, axis).expect("index");
                assert_eq!(stored.stored_overview(d.device, axis).expect("read"), None);
            }
            assert_eq!(live.loaded_parts(), ["devices"], "{name}");
        }
        // Before the index is built, the stored view is read without any frames.
        let (_root, store) = store_with_report(id);
        let (_, out) = process_into(&store, id, "mlp_train.pickle");
        let fresh = LoadedFile::open(store.clone(), id, 0, &out.files[0]);
        let d = &out.files[0].devices[0];
        assert!(fresh
            .stored_overview(d.device, default_axis(d))
            .expect("read")
            .is_some());
        assert!(fresh.loaded_parts().is_empty(), "{:?}", fresh.loaded_parts());
        // While an index is being built (its map locked), the stored view answers at once.
        let building = fresh.timeline_indexes.lock().expect("lock");
        assert!(fresh
            .stored_overview(d.device, default_axis(d))
            .expect("read")
            .is_some());
        drop(building);
    }

    #[test]
    fn the_cache_lets_other_files_go_before_a_file_loads_its_frames() {
        use crate::filecache::LoadedFiles;
        let id = "00000000000000000000000000000008";
        let (_root, store) = store_with_report(id);
        let (_, out) = process_into(&store, id, "mlp_train.pickle");
        let summary = &out.files[0];
        let probe = LoadedFile::open(store.clone(), id, 0, summary);
        probe.devices().expect("frames");
        // Room for one file's frames, not two.
        let files = Arc::new(LoadedFiles::new(probe.bytes() * 3 / 2));
        let open = || LoadedFile::open(store.clone(), id, 0, summary);
        let a = files.get_or_open("a", 0, open);
        a.devices().expect("frames");
        files.reweigh("a", 0, &a);
        assert!(files.get("a", 0).is_some());
        let b = files.get_or_open("b", 0, open);
        let a_kept_when_b_loads = Arc::new(Mutex::new(None));
        {
            let (files, me, seen) = (files.clone(), Arc::downgrade(&b), a_kept_when_b_loads.clone());
            b.set_make_room(Box::new(move |extra| {
                let me = me.upgrade().expect("b");
                files.make_room("b", 0, &me, extra);
                *seen.lock().unwrap() = Some(files.get("a", 0).is_some());
            }));
        }
        b.devices().expect("frames");
        assert_eq!(
            *a_kept_when_b_loads.lock().unwrap(),
            Some(false),
            "a left before b loaded"
        );
        files.reweigh("b", 0, &b);
        assert!(files.get("b", 0).is_some(), "b, loaded, fits");
        // A file that could never fit leaves the cache as soon as it says what it will load.
        let c = files.get_or_open("c", 0, open);
        files.make_room("c", 0, &c, probe.bytes() * 2);
        assert!(files.get("c", 0).is_none());
    }

    #[test]
    fn a_file_about_to_load_takes_the_place_of_the_one_used_before_it() {
        use crate::filecache::LoadedFiles;
        let id = "0000000000000000000000000000000b";
        let (_root, store) = store_with_report(id);
        let (_, out) = process_into(&store, id, "mlp_train.pickle");
        let open = || LoadedFile::open(store.clone(), id, 0, &out.files[0]);
        // Files that have loaded nothing yet, weighed by what they are about to load: room for
        // one, not two.
        let files = LoadedFiles::new(1000);
        let a = files.get_or_open("a", 0, open);
        files.make_room("a", 0, &a, 600);
        // Weighed again once loaded (as `reweigh` does), then read by its queries.
        files.make_room("a", 0, &a, 580);
        for _ in 0..3 {
            assert!(files.get("a", 0).is_some(), "a is read by its queries");
        }
        let b = files.get_or_open("b", 0, open);
        files.make_room("b", 0, &b, 600);
        assert!(files.get("b", 0).is_some(), "the file about to load is kept");
        assert!(files.get("a", 0).is_none(), "the one used before it made room");
        // Used more recently than b, c stays when d comes; b goes.
        let c = files.get_or_open("c", 0, open);
        files.make_room("c", 0, &c, 300);
        assert!(files.get("b", 0).is_some() && files.get("c", 0).is_some());
        assert!(files.get("c", 0).is_some());
        let d = files.get_or_open("d", 0, open);
        files.make_room("d", 0, &d, 600);
        assert!(files.get("b", 0).is_none(), "the least recently used left");
        assert!(files.get("c", 0).is_some() && files.get("d", 0).is_some());
        // A file of nearly the whole budget is kept too, alone.
        let e = files.get_or_open("e", 0, open);
        files.make_room("e", 0, &e, 990);
        assert!(files.get("e", 0).is_some(), "a file of 99 % of the budget is kept");
        assert!(files.get("c", 0).is_none() && files.get("d", 0).is_none());
    }

    #[test]
    fn a_loaded_file_weighs_its_parts_without_making_their_one_value_columns() {
        let id = "0000000000000000000000000000000a";
        let (_root, store) = store_with_report(id);
        let (_, out) = process_into(&store, id, "mlp_train.pickle");
        let f = LoadedFile::open(store.clone(), id, 0, &out.files[0]);
        let (tables, devices) = (f.tables().expect("tables"), f.devices().expect("frames"));
        // One device on one stream: those columns stay scalars once weighed.
        let unmade = |df: &DataFrame, name: &str| {
            df.column(name)
                .expect(name)
                .as_scalar_column()
                .is_some_and(|s| s.lazy_as_materialized_series().is_none())
        };
        assert!(unmade(&tables.events, "device") && unmade(&tables.events, "stream"));
        assert!(unmade(&devices[0].lifetimes, "stream"));
        let entries = tables.events.height() as u64;
        assert!(f.bytes() > entries * 16, "{} bytes for {entries} entries", f.bytes());
    }

    #[test]
    fn an_ingest_takes_its_memory_out_of_the_cache_while_it_runs() {
        use crate::filecache::LoadedFiles;
        let id = "00000000000000000000000000000009";
        let (_root, store) = store_with_report(id);
        let (_, out) = process_into(&store, id, "mlp_train.pickle");
        let summary = &out.files[0];
        let open = || LoadedFile::open(store.clone(), id, 0, summary);
        let loaded = |files: &LoadedFiles, name: &str| {
            let f = files.get_or_open(name, 0, open);
            f.devices().expect("frames");
            files.reweigh(name, 0, &f);
        };
        let probe = open();
        probe.devices().expect("frames");
        // Room for two files' frames.
        let files = Arc::new(LoadedFiles::new(probe.bytes() * 5 / 2));
        loaded(&files, "a");
        loaded(&files, "b");
        assert!(files.get("a", 0).is_some() && files.get("b", 0).is_some());
        {
            // An ingest that needs room for one and a half: one file stays.
            let _ingest = files.reserve(probe.bytes() * 3 / 2);
            assert_eq!(
                [files.get("a", 0).is_some(), files.get("b", 0).is_some()]
                    .iter()
                    .filter(|&&kept| kept)
                    .count(),
                1
            );
            // One larger than the whole budget takes all of it, and files loaded meanwhile
            // are let go.
            let _other = files.reserve(probe.bytes() * 10);
            loaded(&files, "c");
            assert!(files.get("a", 0).is_none() && files.get("b", 0).is_none() && files.get("c", 0).is_none());
        }
        // Once the ingests end, the budget is whole again.
        loaded(&files, "a");
        loaded(&files, "b");
        assert!(files.get("a", 0).is_some() && files.get("b", 0).is_some());
    }

    /// Writes like the version before `meta.json`, `event_notes` and category columns.
    struct OldLayout<'a>(&'a mut dyn DataWriter);
    impl DataWriter for OldLayout<'_> {
        fn put(&mut self, key: &str, bytes: &[u8]) -> crate::store::StoreResult<()> {
            if key.ends_with("meta.json")
                || key.ends_with("event_notes.parquet")
                || key.ends_with(USER_METADATA)
                || key.ends_with(RESERVED)
            {
                return Ok(());
            }
            if key.ends_with("lifetimes.parquet") {
                // Its entry indexes were 64-bit.
                let mut df = crate::parquet_object::decode(bytes.to_vec()).expect("decode");
                for idx in ["alloc_idx", "free_idx"] {
                    let wide = df.column(idx).expect("idx").cast(&DataType::Int64).expect("cast");
                    df.with_column(wide).expect("column");
                }
                let bytes = crate::parquet_object::encode(&df, RowGroups::One).expect("encode");
                return self.0.put(key, &bytes);
            }
            self.0.put(key, bytes)
        }
        fn commit(self: Box<Self>) -> crate::store::StoreResult<()> {
            Ok(())
        }
    }
    struct WriteOld<'a>(OldLayout<'a>);
    impl PipelineSink for WriteOld<'_> {
        fn keeps_tables(&self) -> bool {
            true
        }
        fn snapshot(&mut self, out: SnapshotOutput<'_>) -> Result<(), String> {
            for d in out.devices.iter_mut() {
                let _ = d.lifetimes.drop_in_place("category");
                let _ = d.lifetimes.drop_in_place("category_rule");
                // The usage had reserved (and active) bytes as columns of their own.
                let reserved: Vec<i64> = d.reserved.values().collect();
                d.usage
                    .with_column(Column::new("active".into(), reserved.clone()))
                    .expect("column");
                d.usage
                    .with_column(Column::new("reserved".into(), reserved))
                    .expect("column");
                // The allocations' times had columns of their own (null outside the trace).
                let time = d.usage.column("time").expect("time").i64().expect("i64").clone();
                for (name, idx) in [("t_alloc", "alloc_idx"), ("t_free", "free_idx")] {
                    let wide = d
                        .lifetimes
                        .column(idx)
                        .expect("idx")
                        .cast(&DataType::Int64)
                        .expect("cast");
                    let at: Int64Chunked = wide
                        .i64()
                        .expect("i64")
                        .into_no_null_iter()
                        .map(|i| usize::try_from(i).ok().and_then(|i| time.get(i)))
                        .collect();
                    d.lifetimes
                        .with_column(at.with_name(name.into()).into_column())
                        .expect("column");
                }
            }
            write_file(&mut self.0, out.index, out.summary, out.tables, out.devices).map_err(|e| e.to_string())
        }
    }

    #[test]
    fn a_report_stored_by_the_previous_version_still_loads_and_answers() {
        let id = "00000000000000000000000000000003";
        let (_root, store) = store_with_report(id);
        let mut w = store.data_writer(id).expect("writer");
        let mut sink = WriteOld(OldLayout(w.as_mut()));
        let path = memlens_tests_trace("leak.pickle");
        let out = pipeline::run(vec![Input::path(&path)], Default::default(), &mut sink).expect("run");
        write_summary(w.as_mut(), &out).expect("summary");
        w.commit().expect("commit");
        let loaded = load(&store, id).expect("an old report loads");
        let f = &loaded.files[0];
        // Its allocations' own time columns are dropped as it loads; its timeline is the one
        // the pipeline's own frames draw, band times and all.
        let devices = f.devices().expect("devices");
        assert!(devices[0].lifetimes.column("t_alloc").is_err());
        assert_eq!(
            devices[0].lifetimes.column("free_idx").expect("free_idx").dtype(),
            &DataType::Int32
        );
        let mut fresh = memlens_core::pipeline::KeepFrames::default();
        pipeline::run(vec![Input::path(&path)], Default::default(), &mut fresh).expect("run");
        // Its reserved column is read as the changes and not held.
        assert_eq!(devices[0].usage.get_column_names(), ["time", "allocated"]);
        assert_eq!(devices[0].reserved, fresh.files[0][0].reserved);
        assert!(devices[0].reserved.changes().len() > 0);
        let draw = |d: &memlens_core::frames::DeviceFrames| {
            let t = memlens_core::query::timeline(d, true, 0, None, None, 200).expect("timeline");
            assert!(t.bands.iter().any(|b| b.t_alloc.is_some() && b.t_free.is_some()));
            serde_json::to_value(t).expect("json")
        };
        assert_eq!(draw(&devices[0]), draw(&fresh.files[0][0]));
        let tables = f.tables().expect("tables");
        assert_eq!(tables.event_notes.height(), 0);
        assert_eq!(tables.format, memlens_api::Format::PytorchSnapshot);
        // What-if on it replays the run unchanged (its allocations read as unplaced).
        let w = memlens_core::analysis::whatif::what_if_file(
            &loaded.summary.files[0],
            &f.devices().expect("devices"),
            &[],
            &memlens_api::WhatIfParams::default(),
        )
        .expect("what-if");
        assert_eq!(
            w.devices[0].predicted_peak_allocated_bytes,
            loaded.summary.files[0].devices[0].peak_allocated_bytes
        );
        // It has no stored segment checkpoints: its maps are replayed from the trace.
        let at = crate::stored_segments::SegmentAt::End;
        let detail = memlens_core::analysis::segment_detail::SegmentDetail::FULL;
        assert_eq!(f.stored_segment_map(0, at, detail).expect("read"), None);
    }

    fn memlens_tests_trace(name: &str) -> std::path::PathBuf {
        let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")));
        manifest.join("..").join("traces").join(name)
    }
}
