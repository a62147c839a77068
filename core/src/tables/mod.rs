//! Canonical columnar tables: what every importer produces and every analysis reads.
//!
//! Importers fill plain column builders ([`SnapshotColumns`]), which need no polars (the
//! importers build, and are fuzzed, without it); with the `analysis` feature,
//! `SnapshotColumns::into_tables` (in [`dataframes`]) hands the vectors to polars without copying. Table schemas:
//!
//! | table | columns |
//! |---|---|
//! | `events` | `device` i32, `action` u8 ([`Action`]), `addr` i64 — or `addr_units` u32 and `addr_base` i64 (address = base + 512 × units) when every address is aligned and within 1 TiB of the first —, `size_stack` u16 (row in `size_stacks`, while the trace has at most 65,536 distinct `(size, stack)` pairs) — or `size` u32 (every size below 4 GiB) or i64 and, after the times, `stack` —, `stream` i64, `time_us` i64 (null when absent) — or `time_after_first_us` u32 and `first_time_us` i64 when every entry has one within 71 minutes of the first —, `stack` u16 (every stack id below 65,536) or u32 (only without `size_stack`), `device_free` i64 (null unless `oom`); a column of one value (one device, one stream, all null, a base) is a polars scalar column; the analyses read them through `DeviceEvents` as [`crate::tables::int_slice::IntSlice`]s (the stack ids as [`crate::tables::stack_ids::StackIds`]), whichever form |
//! | `size_stacks` | `size` i64, `stack` u32: the pairs `events.size_stack` names, one row per code ([`SizesAndStacks`]); empty when the events hold them apart. Held beside the frames of [`TABLE_NAMES`] (never stored: only the analyses read the trace) |
//! | `segments` | `device`, `address`, `total_size`, `allocated_size`, `active_size`, `requested_size`, `stream` (i64), `segment_type` str, `pool_a`/`pool_b` i64, `is_expandable` bool, `stack` u32 |
//! | `blocks` | `device` i64, `segment` u32 (row in `segments`), `address`, `size`, `requested_size` i64, `state` u8 ([`BlockState`]), `stack` u32 |
//! | `frames` | `frame` u32, `name` str, `filename` str, `line` i64 |
//! | `stack_frames` | `stack` u32, `depth` u32 (0 = innermost), `frame` u32 |
//! | `annotations` | `device` i64, `name` str, `stage` str, `time_us` i64 |
//! | `event_notes` | `row` u32 (row in `events`), `compile_context`, `user_metadata`, `action_name`, `category` str (null when default) |

use hashbrown::HashTable;
use rustc_hash::FxHashMap;

use memlens_api::SourceInfo;

/// Marker for "no `time_us`" in builders (becomes a null in `events.time_us`).
pub const NO_TIME: i64 = i64::MIN;

/// Trace entry actions, stored as `u8` in `events.action`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Action {
    Alloc = 0,
    FreeRequested = 1,
    FreeCompleted = 2,
    SegmentAlloc = 3,
    SegmentFree = 4,
    SegmentMap = 5,
    SegmentUnmap = 6,
    Snapshot = 7,
    Oom = 8,
    Annotate = 9,
    Other = 255,
}

impl Action {
    pub fn from_name(s: &str) -> Action {
        match s {
            "alloc" => Action::Alloc,
            "free_requested" => Action::FreeRequested,
            // `free` is MemoryViz's merged pair; accept it as the completing half.
            "free_completed" | "free" => Action::FreeCompleted,
            "segment_alloc" => Action::SegmentAlloc,
            "segment_free" => Action::SegmentFree,
            "segment_map" => Action::SegmentMap,
            "segment_unmap" => Action::SegmentUnmap,
            "snapshot" => Action::Snapshot,
            "oom" => Action::Oom,
            "annotate" => Action::Annotate,
            _ => Action::Other,
        }
    }
    pub fn from_code(c: u8) -> Action {
        match c {
            0 => Action::Alloc,
            1 => Action::FreeRequested,
            2 => Action::FreeCompleted,
            3 => Action::SegmentAlloc,
            4 => Action::SegmentFree,
            5 => Action::SegmentMap,
            6 => Action::SegmentUnmap,
            7 => Action::Snapshot,
            8 => Action::Oom,
            9 => Action::Annotate,
            _ => Action::Other,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::SegmentMap => "segment_map",
            Action::SegmentUnmap => "segment_unmap",
            Action::Snapshot => "snapshot",
            Action::Oom => "oom",
            Action::Annotate => "annotate",
            Action::Other => "other",
        }
    }
}

/// Block states, stored as `u8` in `blocks.state` (the wire enum of `memlens-api`).
pub use memlens_api::BlockState;

use crate::infra::fault_ahead::FaultAhead;
pub use narrow_column::{Base, NarrowI64, ADDRESS_SHIFT};
pub use narrow_stacks::NarrowStacks;
pub use size_stacks::{PairCodes, SizesAndStacks};

/// Trace rows in arrival order (all devices; [`SnapshotColumns::device_ranges`] splits them).
#[derive(Debug, PartialEq)]
pub struct TraceRows {
    pub action: Vec<u8>,
    /// Narrow while every address is 512-byte aligned and within 1 TiB of the first
    /// ([`NarrowI64`]).
    pub addr: NarrowI64,
    /// Each entry's size and stack id: one code of a `(size, stack)` pair while there are at
    /// most 65,536 pairs, else apart ([`SizesAndStacks`]).
    pub size_stack: SizesAndStacks,
    /// One stream for every entry so far, or each entry's (most traces have one stream).
    pub stream: OneOrEach,
    /// Narrow while every timestamp is within 71 minutes after the first ([`NarrowI64`]).
    pub time_us: NarrowI64,
    /// Sparse `(row, device_free)`.
    pub device_free: Vec<(u32, i64)>,
    /// Sparse notes on rows whose strings are not the defaults.
    pub notes: Vec<EventNote>,
}

/// The strings a trace entry carries beyond its numbers, each `None` when default.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventNote {
    /// Row in the trace.
    pub row: u32,
    pub compile_context: Option<String>,
    /// What the script set with `_set_memory_metadata`.
    pub user_metadata: Option<String>,
    /// The action's name, when it is not one memlens knows.
    pub action_name: Option<String>,
    /// PyTorch's memory-profiler category, on the entries of a profiler-derived snapshot
    /// (`torch.cuda._memory_viz._profile_to_snapshot`): `parameter`, `activation`, ….
    pub category: Option<String>,
}

impl EventNote {
    /// Whether the entry carries anything beyond its numbers.
    pub fn is_empty(&self) -> bool {
        self.compile_context.is_none()
            && self.user_metadata.is_none()
            && self.action_name.is_none()
            && self.category.is_none()
    }
}

impl Default for TraceRows {
    fn default() -> Self {
        TraceRows {
            action: Vec::new(),
            addr: NarrowI64::new(Base::Address),
            size_stack: SizesAndStacks::default(),
            stream: OneOrEach::default(),
            time_us: NarrowI64::new(Base::First),
            device_free: Vec::new(),
            notes: Vec::new(),
        }
    }
}

impl TraceRows {
    pub fn len(&self) -> usize {
        self.action.len()
    }
    pub fn is_empty(&self) -> bool {
        self.action.is_empty()
    }
    pub fn push(&mut self, action: Action, addr: i64, size: i64, stream: i64, time_us: i64, stack: u32) {
        self.action.push(action as u8);
        self.addr.push(addr);
        self.size_stack.push(size, stack);
        self.stream.push(stream);
        self.time_us.push(time_us);
    }

    /// Gives back the capacity reserved past the rows (pages a [`FaultAhead`] had faulted in).
    pub fn shrink_to_fit(&mut self) {
        self.action.shrink_to_fit();
        self.addr.shrink_to_fit();
        self.size_stack.shrink_to_fit();
        self.time_us.shrink_to_fit();
    }

    /// [`FaultAhead::after_push`] for each column a row adds to (`ahead` holds their states,
    /// kept by the caller: they are no part of the rows).
    #[inline]
    pub fn fault_ahead(&mut self, ahead: &mut [FaultAhead; 5]) {
        if self.action.len().is_multiple_of(crate::infra::fault_ahead::STEP) {
            let [action, addr, time_us, size_stack @ ..] = ahead;
            action.after_push(&mut self.action);
            self.addr.fault_ahead(addr);
            self.time_us.fault_ahead(time_us);
            self.size_stack.fault_ahead(size_stack);
        }
    }
}

/// i64 values pushed one by one, held as one value and a count while they are all the same,
/// and as a vector from the first that differs: a column that is usually one value (a trace's
/// stream) costs nothing per row until it is not. `dataframes` makes it a polars scalar or an
/// array.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OneOrEach {
    /// The value of every row while `each` is empty.
    one: Option<i64>,
    len: usize,
    each: Vec<i64>,
}

impl OneOrEach {
    pub fn push(&mut self, value: i64) {
        if self.each.is_empty() {
            match self.one {
                Some(one) if one == value => {
                    self.len += 1;
                    return;
                }
                None => {
                    self.one = Some(value);
                    self.len = 1;
                    return;
                }
                Some(one) => {
                    self.each.reserve(self.len * 2);
                    self.each.resize(self.len, one);
                }
            }
        }
        self.each.push(value);
        self.len += 1;
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Row `i`'s value.
    pub fn get(&self, i: usize) -> Option<i64> {
        if self.each.is_empty() {
            self.one.filter(|_| i < self.len)
        } else {
            self.each.get(i).copied()
        }
    }
    /// The one value of every row, or every row's value.
    pub fn into_parts(self) -> Result<(i64, usize), Vec<i64>> {
        match self.one {
            Some(one) if self.each.is_empty() => Ok((one, self.len)),
            _ => Err(self.each),
        }
    }
}

/// Interned frames and stacks (a stack is a list of frame ids, innermost first).
#[derive(Debug)]
pub struct FrameTable {
    pub names: Vec<String>,
    pub files: Vec<String>,
    pub lines: Vec<i64>,
    frame_ids: FxHashMap<(String, String, i64), u32>,
    /// Flat frame ids of all stacks; stack `s` is `flat[offsets[s]..offsets[s+1]]`.
    pub flat: Vec<u32>,
    pub offsets: Vec<u32>,
    /// Stack ids by their frames, which are `flat`'s (no second copy of each stack): an
    /// importer looks up one stack per trace entry, millions of short slices, and a map keyed
    /// by boxed slices spent more on hashing them generically and comparing them through
    /// `memcmp` than on anything else it did per entry.
    stack_ids: HashTable<u32>,
    /// The frames of the stack being lowered, kept between stacks (an importer lowers millions).
    pub(crate) pending: Vec<u32>,
}

impl FrameTable {
    pub fn new() -> Self {
        let mut t = FrameTable {
            names: Vec::new(),
            files: Vec::new(),
            lines: Vec::new(),
            frame_ids: FxHashMap::default(),
            flat: Vec::new(),
            offsets: vec![0],
            stack_ids: HashTable::new(),
            pending: Vec::new(),
        };
        t.intern_stack(&[]);
        t
    }
    /// The id of the empty stack (no frames recorded).
    pub fn empty_stack(&self) -> u32 {
        0
    }
    pub fn intern_frame(&mut self, name: &str, file: &str, line: i64) -> u32 {
        let key = (name.to_owned(), file.to_owned(), line);
        if let Some(&id) = self.frame_ids.get(&key) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.to_owned());
        self.files.push(file.to_owned());
        self.lines.push(line);
        self.frame_ids.insert(key, id);
        id
    }
    pub fn intern_stack(&mut self, frames: &[u32]) -> u32 {
        let hash = stack_hash(frames);
        let (flat, offsets) = (&self.flat, &self.offsets);
        if let Some(&id) = self
            .stack_ids
            .find(hash, |&id| same_frames(stack_in(flat, offsets, id), frames))
        {
            return id;
        }
        let id = (self.offsets.len() - 1) as u32;
        self.flat.extend_from_slice(frames);
        self.offsets.push(self.flat.len() as u32);
        let (flat, offsets) = (&self.flat, &self.offsets);
        self.stack_ids
            .insert_unique(hash, id, |&id| stack_hash(stack_in(flat, offsets, id)));
        id
    }
    pub fn stack_count(&self) -> usize {
        self.offsets.len() - 1
    }
}

/// Stack `id`'s frames in a table's `flat` ids (stack `s` is `flat[offsets[s]..offsets[s+1]]`).
fn stack_in<'a>(flat: &'a [u32], offsets: &[u32], id: u32) -> &'a [u32] {
    &flat[offsets[id as usize] as usize..offsets[id as usize + 1] as usize]
}

/// A stack's hash: its frame ids folded in with one multiply each (FxHash's step), the
/// rotation last so that the bits the table indexes by depend on every id.
fn stack_hash(frames: &[u32]) -> u64 {
    const K: u64 = 0xf135_7aea_2e62_a9c5;
    let mut h = (frames.len() as u64).wrapping_mul(K);
    for &f in frames {
        h = (h ^ u64::from(f)).wrapping_mul(K);
    }
    h.rotate_left(26)
}

/// Slice equality as a loop: stacks are a few ids long, where a call to `memcmp` (what `==`
/// on `[u32]` becomes) costs more than the comparison.
fn same_frames(a: &[u32], b: &[u32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// Two tables are equal when they hold the same frames and stacks under the same ids (the
/// lookups follow from those, the scratch is nobody's business).
impl PartialEq for FrameTable {
    fn eq(&self, other: &Self) -> bool {
        (&self.names, &self.files, &self.lines, &self.flat, &self.offsets)
            == (&other.names, &other.files, &other.lines, &other.flat, &other.offsets)
    }
}

impl Default for FrameTable {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Debug, Default, PartialEq)]
pub struct SegmentRows {
    pub device: Vec<i64>,
    pub address: Vec<i64>,
    pub total_size: Vec<i64>,
    pub allocated_size: Vec<i64>,
    pub active_size: Vec<i64>,
    pub requested_size: Vec<i64>,
    pub stream: Vec<i64>,
    pub segment_type: Vec<String>,
    pub pool_a: Vec<i64>,
    pub pool_b: Vec<i64>,
    pub is_expandable: Vec<bool>,
    pub stack: Vec<u32>,
}

impl SegmentRows {
    pub fn len(&self) -> usize {
        self.address.len()
    }
    pub fn is_empty(&self) -> bool {
        self.address.is_empty()
    }
    #[allow(clippy::too_many_arguments)]
    pub fn push(
        &mut self,
        device: i64,
        address: i64,
        total: i64,
        allocated: i64,
        active: i64,
        requested: i64,
        stream: i64,
        seg_type: String,
        pool: (i64, i64),
        expandable: bool,
        stack: u32,
    ) {
        self.device.push(device);
        self.address.push(address);
        self.total_size.push(total);
        self.allocated_size.push(allocated);
        self.active_size.push(active);
        self.requested_size.push(requested);
        self.stream.push(stream);
        self.segment_type.push(seg_type);
        self.pool_a.push(pool.0);
        self.pool_b.push(pool.1);
        self.is_expandable.push(expandable);
        self.stack.push(stack);
    }
}

#[derive(Debug, Default, PartialEq)]
pub struct BlockRows {
    pub device: Vec<i64>,
    pub segment: Vec<u32>,
    pub address: Vec<i64>,
    pub size: Vec<i64>,
    pub requested_size: Vec<i64>,
    pub state: Vec<u8>,
    pub stack: Vec<u32>,
}

impl BlockRows {
    #[allow(clippy::too_many_arguments)]
    pub fn push(
        &mut self,
        device: i64,
        segment: u32,
        address: i64,
        size: i64,
        requested: i64,
        state: BlockState,
        stack: u32,
    ) {
        self.device.push(device);
        self.segment.push(segment);
        self.address.push(address);
        self.size.push(size);
        self.requested_size.push(requested);
        self.state.push(state as u8);
        self.stack.push(stack);
    }
}

#[derive(Debug, Default, PartialEq)]
pub struct AnnotationRows {
    pub device: Vec<i64>,
    pub name: Vec<String>,
    pub stage: Vec<String>,
    pub time_us: Vec<i64>,
}

impl AnnotationRows {
    pub fn push(&mut self, device: i64, name: String, stage: String, time_us: i64) {
        self.device.push(device);
        self.name.push(name);
        self.stage.push(stage);
        self.time_us.push(time_us);
    }
}

/// Everything an importer extracted from a snapshot, as column builders.
#[derive(Debug, Default, PartialEq)]
pub struct SnapshotColumns {
    pub trace: TraceRows,
    /// `(device, (first row, end row))` for each `device_traces` list.
    pub device_ranges: Vec<(i64, (u32, u32))>,
    pub frames: FrameTable,
    pub segments: SegmentRows,
    pub blocks: BlockRows,
    pub annotations: AnnotationRows,
    pub max_split_size: Option<i64>,
    pub source: SourceInfo,
    /// The format the tables came from (allocator snapshots, or Nsight's driver allocations).
    pub format: memlens_api::Format,
}

/// The names of a snapshot's tables, in [`SnapshotTables::frames_mut`] order: what a stored
/// report writes and loads back, every one of them.
pub const TABLE_NAMES: [&str; 7] = [
    "events",
    "segments",
    "blocks",
    "frames",
    "stack_frames",
    "annotations",
    "event_notes",
];

/// What a snapshot's tables carry beside their frames (stored next to them).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SnapshotMeta {
    pub source: SourceInfo,
    pub max_split_size: Option<i64>,
    pub format: memlens_api::Format,
}

#[cfg(feature = "analysis")]
pub mod columns;
#[cfg(feature = "analysis")]
mod dataframes;
#[cfg(feature = "analysis")]
pub mod entry_steps;
#[cfg(feature = "analysis")]
pub mod int_slice;
mod narrow_column;
mod narrow_stacks;
mod size_stacks;
#[cfg(feature = "analysis")]
pub mod stack_ids;
pub mod windows;
#[cfg(feature = "analysis")]
pub use dataframes::SnapshotTables;

#[cfg(test)]
mod tests {
    use super::OneOrEach;

    #[test]
    fn one_or_each_holds_one_value_until_another_arrives() {
        let mut v = OneOrEach::default();
        assert!(v.is_empty());
        assert_eq!(v.get(0), None);
        for _ in 0..3 {
            v.push(7);
        }
        assert_eq!((v.len(), v.get(2), v.get(3)), (3, Some(7), None));
        assert_eq!(v.clone().into_parts(), Ok((7, 3)));
        v.push(9);
        v.push(7);
        assert_eq!(v.len(), 5);
        assert_eq!(
            (0..6).map(|i| v.get(i)).collect::<Vec<_>>(),
            [Some(7), Some(7), Some(7), Some(9), Some(7), None]
        );
        assert_eq!(v.into_parts(), Err(vec![7, 7, 7, 9, 7]));
        assert_eq!(OneOrEach::default().into_parts(), Err(vec![]));
    }
}
