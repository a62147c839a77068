//! One analysed file of a stored report held for queries: its parts (stacks, tables, device
//! frames) loaded from the store on first use and kept, the indexes built on them, and what
//! they weigh (what the server's cache of loaded files is bounded by).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use memlens_api::{FileSummary, SegmentMap};
use memlens_core::pipeline::DeviceFrames;
use memlens_core::query::{Axis, CategoryIndex, TimelineIndex};
use memlens_core::stacks::StackResolver;
use memlens_core::stored::{DeviceEvents, SegmentCheckpoints, SegmentDetail, CHECKPOINTS};
use memlens_core::tables::columns::held_bytes;
use memlens_core::tables::entry_steps::EntrySteps;
use memlens_core::tables::SnapshotTables;
use polars_core::prelude::*;

use super::keys::{DeviceKeys, FileKeys};
use super::read::{entry_indexes_as_i32, load_tables, one_values_as_scalars, user_metadata_from};
use super::{default_axis, read_json, read_object, read_parquet, DataError, RESERVED_COLUMN};
use crate::storage::parquet_object;
use crate::storage::reportdata::stored_segments::{DeviceObjects, SegmentAt, StoredSegments};
use crate::storage::store::{ReportId, ReportStore};
use memlens_core::infra::free_memory;

/// One analysed file of a stored report, read from the store part by part as queries ask
/// for them: the timeline reads only its device frames, a stack only the two stack tables, and
/// only the segment map (and a chart of an old report) needs the trace itself. What is loaded
/// is kept until the file leaves the server's cache.
pub struct LoadedFile {
    store: Arc<dyn ReportStore>,
    id: ReportId,
    index: usize,
    summary: FileSummary,
    stacks: Part<StackResolver>,
    tables: Part<SnapshotTables>,
    devices: Part<Vec<DeviceFrames>>,
    /// Segment-state checkpoints per device, built on the first segment-map query.
    checkpoints: Mutex<HashMap<i64, Arc<SegmentCheckpoints>>>,
    /// Timeline indexes per device and axis, built on the first timeline query.
    pub(super) timeline_indexes: Mutex<HashMap<(i64, Axis), Arc<TimelineIndex>>>,
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
            free_memory::trim_heap();
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
            free_memory::trim_heap();
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
    pub fn open(store: Arc<dyn ReportStore>, id: &ReportId, index: usize, summary: &FileSummary) -> LoadedFile {
        LoadedFile {
            store,
            id: id.clone(),
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
        id: &ReportId,
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
    /// columns per entry (time and allocated, counted as 8 bytes each though a PyTorch trace
    /// within 71 minutes holds each in 4), the lifetimes' per allocation (addr, size, stack,
    /// 32-bit entry indexes, category and rule; a stream column where there are several), as
    /// `device_frames_bytes` counts them.
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

    fn parquet(&self, key: &str) -> Result<DataFrame, DataError> {
        read_parquet(self.store.as_ref(), &self.id, key)
    }

    fn keys(&self) -> FileKeys {
        FileKeys::of(self.index)
    }

    /// The snapshot's canonical tables (the trace itself: the largest part), which only a
    /// report stored before 2026-12 has (see [`QUERY_TABLES`](super::QUERY_TABLES)): read
    /// where it has no checkpoints or no `user_metadata` object.
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
            let file = self.keys();
            let (frames, stack_frames) = (
                self.parquet(&file.table("frames"))?,
                self.parquet(&file.table("stack_frames"))?,
            );
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
                let dir = self.keys().device(d.device);
                let user_metadata = match read_object(self.store.as_ref(), &self.id, &dir.user_metadata())? {
                    Some(bytes) => user_metadata_from(&dir.user_metadata(), bytes)?,
                    // Stored before the map had its own object: found from the trace.
                    None => memlens_core::stored::alloc_metadata(&*self.tables()?, d.device)?,
                };
                // The two large frames are decoded side by side.
                let started = std::time::Instant::now();
                let (usage, lifetimes) = std::thread::scope(|scope| {
                    let usage = scope.spawn(|| self.parquet(&dir.usage()));
                    let lifetimes = self.parquet(&dir.lifetimes());
                    (usage.join().unwrap_or_else(|p| std::panic::resume_unwind(p)), lifetimes)
                });
                tracing::debug!(report = %self.id, file = self.index, device = d.device,
                    "device frames read in {:.0} ms", started.elapsed().as_secs_f64() * 1e3);
                let mut lifetimes = lifetimes?;
                one_values_as_scalars(&mut lifetimes, &["stream", "addr_base"], &dir.lifetimes())?;
                // Stored before an allocation's times were read from the entry times: the
                // columns it had for them are not held; its entry indexes were 64-bit.
                for old in ["t_alloc", "t_free"] {
                    let _ = lifetimes.drop_in_place(old);
                }
                entry_indexes_as_i32(&mut lifetimes, &dir.lifetimes())?;
                let mut usage = usage?;
                let reserved = self.reserved_steps(&dir, &mut usage, d.initial_reserved_bytes)?;
                devices.push(DeviceFrames {
                    device: d.device,
                    usage,
                    reserved,
                    lifetimes,
                    // Stored with their addresses.
                    lifetime_addresses: None,
                    fragmentation: self.parquet(&dir.fragmentation())?,
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
    fn reserved_steps(&self, dir: &DeviceKeys, usage: &mut DataFrame, initial: i64) -> Result<EntrySteps, DataError> {
        let key = dir.reserved();
        let invalid = |source| DataError::Parquet {
            key: key.clone(),
            source,
        };
        if let Some(bytes) = read_object(self.store.as_ref(), &self.id, &key)? {
            let df = parquet_object::decode(bytes).map_err(invalid)?;
            return EntrySteps::from_frame(&df, RESERVED_COLUMN, usage.height()).map_err(invalid);
        }
        let key = dir.usage();
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
        let times = memlens_core::tables::columns::usage::times(&frames.usage)?;
        let cursor = at.cursor(times);
        let has_time = self
            .summary
            .devices
            .iter()
            .any(|d| d.device == device && d.time_axis == memlens_api::TimeAxis::TimeUs);
        let time_us = cursor.checked_sub(1).filter(|_| has_time).map(|i| times.at(i));
        self.segments.map_at(self, &self.bytes, device, cursor, time_us, detail)
    }

    /// The first view stored for `device` on `axis` at ingest ([`OVERVIEW_WIDTH`](super::OVERVIEW_WIDTH), the whole
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
        let key = self.keys().device(device).overview();
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
        let key = self.keys().device(device).segment_cursors();
        if read_object(self.store.as_ref(), &self.id, &key)?.is_none() {
            return Ok(None);
        }
        read_json(self.store.as_ref(), &self.id, &key).map(Some)
    }

    fn checkpoint(&self, device: i64, k: usize) -> Result<DataFrame, DataError> {
        self.parquet(&self.keys().device(device).segment_window(k))
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
