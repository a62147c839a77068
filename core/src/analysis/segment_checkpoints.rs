//! Checkpoints of the segment-map replay: flat copies of the allocator state taken every
//! `n / CHECKPOINTS` entries on one backward pass (the fragmentation replay's, at ingest), so
//! that the map at any entry costs at most that many undo steps from the checkpoint after it.
//! A stored report keeps each checkpoint as an object of its own together with the entries
//! before it ([`super::segment_checkpoint_frame`]), and answers a segment map from that one
//! object without loading the trace.

use memlens_api::SegmentMap;
use polars::prelude::*;

use super::packed_blocks::PackedBlocks;
use super::segment_detail::SegmentDetail;
use super::segment_map::{EntryRows, Segment, SegmentState};
use super::DeviceEvents;
use crate::tables::SnapshotTables;

/// How many checkpoints a device's segment maps are answered from: a map then costs at most
/// 1/`CHECKPOINTS` of the trace in undo steps …
pub const CHECKPOINTS: usize = 128;
/// … but checkpoints are never closer than this many entries: undoing them takes well under a
/// millisecond, and a small trace is not stored as a hundred objects.
pub const MIN_SPACING: usize = 8192;

/// A state kept flat, segments and blocks in address order: about half the bytes of its
/// B-trees, and rebuilt into them in one sorted pass.
#[derive(Debug, Clone, PartialEq)]
pub struct FlatState {
    /// The state is the one right after entry `cursor - 1`.
    pub cursor: usize,
    pub(super) segs: Vec<(i64, FlatSegment)>,
    /// Every segment's blocks, one segment after the other, packed (about 7 bytes a block).
    pub(super) blocks: PackedBlocks,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct FlatSegment {
    pub(super) size: i64,
    pub(super) stream: i64,
    pub(super) expandable: bool,
    pub(super) blocks: u32,
}

impl FlatState {
    pub fn of(state: &SegmentState) -> FlatState {
        let mut blocks = PackedBlocks::with_capacity(state.segs.values().map(|s| s.blocks.len()).sum());
        let segs = state
            .segs
            .iter()
            .map(|(&a, seg)| {
                for (ba, b) in seg.blocks.iter() {
                    blocks.push(ba, b);
                }
                let flat = FlatSegment {
                    size: seg.size,
                    stream: seg.stream,
                    expandable: seg.expandable,
                    blocks: seg.blocks.len() as u32,
                };
                (a, flat)
            })
            .collect();
        FlatState {
            cursor: state.cursor,
            segs,
            blocks,
        }
    }

    pub fn state(&self) -> SegmentState {
        let mut blocks = self.blocks.iter();
        let segs = self
            .segs
            .iter()
            .map(|(a, seg)| {
                let segment = Segment {
                    size: seg.size,
                    stream: seg.stream,
                    expandable: seg.expandable,
                    blocks: blocks.by_ref().take(seg.blocks as usize).collect(),
                };
                (*a, segment)
            })
            .collect();
        SegmentState {
            segs,
            cursor: self.cursor,
        }
    }

    pub fn bytes(&self) -> usize {
        self.segs.capacity() * std::mem::size_of::<(i64, FlatSegment)>() + self.blocks.bytes()
    }
}

/// Takes checkpoints of a state while it is rewound: at the end state, then every `every`
/// entries down to the state before the first entry.
pub struct CheckpointTaker {
    every: usize,
    /// The cursor of the next checkpoint to take.
    next: Option<usize>,
    /// Taken so far, in descending cursor order.
    points: Vec<FlatState>,
}

impl CheckpointTaker {
    /// For a device of `n` entries, about `count` checkpoints (fewer where they would be
    /// closer than [`MIN_SPACING`]).
    pub fn new(n: usize, count: usize) -> CheckpointTaker {
        CheckpointTaker::every(n, n.div_ceil(count.max(1)).max(MIN_SPACING))
    }

    /// For a device of `n` entries, one checkpoint every `every` entries.
    pub fn every(n: usize, every: usize) -> CheckpointTaker {
        CheckpointTaker {
            every: every.max(1),
            next: Some(n),
            points: Vec::new(),
        }
    }

    /// Rewinds `state` (at or above the next checkpoint) down to the last checkpoint at or
    /// above cursor `down_to`, taking each on the way.
    pub fn rewind_taking(&mut self, state: &mut SegmentState, ev: &DeviceEvents, down_to: usize) {
        while let Some(c) = self.next.filter(|&c| c >= down_to) {
            state.rewind_to(ev, c.checked_sub(1));
            self.points.push(FlatState::of(state));
            self.next = (c > 0).then(|| c.saturating_sub(self.every));
        }
    }

    /// Takes the rest, down to the state before the first entry.
    pub fn finish(mut self, state: &mut SegmentState, ev: &DeviceEvents) -> SegmentCheckpoints {
        self.rewind_taking(state, ev, 0);
        self.points.reverse();
        SegmentCheckpoints { points: self.points }
    }
}

/// A device's checkpoints, in ascending cursor order (the last is the end state).
pub struct SegmentCheckpoints {
    points: Vec<FlatState>,
}

impl SegmentCheckpoints {
    /// One backward pass over the whole trace, keeping about `count` states.
    pub fn build(t: &SnapshotTables, ev: &DeviceEvents, count: usize) -> PolarsResult<SegmentCheckpoints> {
        let mut state = SegmentState::at_end(t, ev)?;
        Ok(CheckpointTaker::new(ev.len(), count).finish(&mut state, ev))
    }

    /// One backward pass, keeping a state every `every` entries.
    pub fn build_every(t: &SnapshotTables, ev: &DeviceEvents, every: usize) -> PolarsResult<SegmentCheckpoints> {
        let mut state = SegmentState::at_end(t, ev)?;
        Ok(CheckpointTaker::every(ev.len(), every).finish(&mut state, ev))
    }

    pub fn points(&self) -> &[FlatState] {
        &self.points
    }

    /// What the checkpoints hold in memory.
    pub fn bytes(&self) -> usize {
        self.points.iter().map(FlatState::bytes).sum()
    }

    /// The segment map right after entry `idx` (`None`: before the first entry), listing what
    /// `detail` asks for.
    pub fn map_at(&self, ev: &DeviceEvents, idx: Option<usize>, detail: SegmentDetail) -> Option<SegmentMap> {
        let target = idx.map_or(0, |i| i.saturating_add(1).min(ev.len()));
        let start = self.points.get(self.points.partition_point(|p| p.cursor < target))?;
        let time = target.checked_sub(1).and_then(|i| ev.time_us(i));
        Some(map_from(start, &EntryRows::of(ev), target, ev.device, time, detail))
    }

    /// The segment map at time `time`: after the last entry at or before it.
    pub fn map_at_time(&self, ev: &DeviceEvents, time: i64, detail: SegmentDetail) -> Option<SegmentMap> {
        let n = ev.time().partition_point(|&x| x <= time);
        self.map_at(ev, n.checked_sub(1), detail)
    }
}

/// The map at cursor `target` (at or below `start`'s), rewound from `start` over `rows`.
pub fn map_from(
    start: &FlatState,
    rows: &EntryRows<'_>,
    target: usize,
    device: i64,
    time_us: Option<i64>,
    detail: SegmentDetail,
) -> SegmentMap {
    let mut state = start.state();
    state.rewind_over(rows, target.checked_sub(1));
    state.view(device, time_us, detail)
}
