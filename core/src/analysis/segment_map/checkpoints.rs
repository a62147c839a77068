//! Checkpoints of the segment-map replay: flat copies of the allocator state taken every
//! `n / CHECKPOINTS` entries (at most [`MAX_SPACING`] apart) on one backward pass (the
//! fragmentation replay's, at ingest), so that the map at any entry costs at most that many undo
//! steps from the checkpoint after it. A stored report keeps each checkpoint as an object of its
//! own together with the entries before it ([`super::checkpoint_frame`]), and answers a
//! segment map from that one object without loading the trace.
//!
//! Held until stored, a checkpoint's packed blocks are compressed (zstd, [`HELD_LEVEL`]): an
//! ingest of a GB-scale snapshot holds hundreds of states of up to hundreds of thousands of
//! blocks each, far smaller compressed (blocks of one size at regular addresses pack into runs
//! of equal bytes; a real trace's compress less). A state is taken for every stored object on
//! the replay, rather than one for every few objects rewound as they are stored: storing the
//! segment objects is then several times faster for a slightly longer replay
//! (`memlens-bench-segments`).

use memlens_api::SegmentMap;
use polars_core::prelude::*;

use super::blocks::SegmentBlocks;
use super::by_address::Segment;
use super::detail::SegmentDetail;
use super::entry_rows::EntryRows;
use super::packed_blocks::PackedBlocks;
use super::state::SegmentState;
use crate::analysis::DeviceEvents;
use crate::tables::SnapshotTables;

/// How many checkpoints a device's segment maps are answered from: a map then costs at most
/// 1/`CHECKPOINTS` of the trace in undo steps …
pub const CHECKPOINTS: usize = 128;
/// … but checkpoints are never closer than this many entries: undoing them takes well under a
/// millisecond, and a small trace is not stored as a hundred objects …
pub const MIN_SPACING: usize = 8192;
/// … nor farther apart than this: a map read back from a stored object rewinds at most this
/// many entries (a few milliseconds) on a trace of any length …
pub const MAX_SPACING: usize = 100_000;
/// … unless that would make more than this many times [`CHECKPOINTS`] (a device's trace of
/// more than 51.2 M entries): a report's objects stay a few hundred.
pub const MAX_SPACING_FACTOR: usize = 4;

/// The zstd level of the blocks of a held checkpoint: the fastest of the standard levels
/// (the replay thread that compresses them is an ingest's critical path).
pub const HELD_LEVEL: i32 = 1;

/// The entries between checkpoints of a device of `n` entries, for about `count` of them.
pub fn spacing(n: usize, count: usize) -> usize {
    let count = count.max(1);
    n.div_ceil(count)
        .min(MAX_SPACING)
        .max(n.div_ceil(count.saturating_mul(MAX_SPACING_FACTOR)))
        .max(MIN_SPACING)
}

/// A state kept flat, segments and blocks in address order: about half the bytes of its
/// B-trees, and rebuilt into them in one sorted pass.
#[derive(Debug, Clone, PartialEq)]
pub struct FlatState {
    /// The state is the one right after entry `cursor - 1`.
    pub cursor: usize,
    pub(crate) segs: Vec<(i64, FlatSegment)>,
    /// Every segment's blocks, one segment after the other, packed (about 7 bytes a block).
    pub(crate) blocks: PackedBlocks,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FlatSegment {
    pub(crate) size: i64,
    pub(crate) stream: i64,
    pub(crate) expandable: bool,
    pub(crate) blocks: u32,
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
                    blocks: SegmentBlocks::from_address_order(
                        blocks.by_ref().take(seg.blocks as usize),
                        seg.blocks as usize,
                    ),
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

/// A checkpoint as it is held until stored: a [`FlatState`] with its packed blocks compressed.
#[derive(Debug, Clone)]
struct HeldState {
    cursor: usize,
    segs: Vec<(i64, FlatSegment)>,
    /// The packed blocks' bytes, zstd-compressed.
    blocks: Vec<u8>,
    block_count: usize,
    packed_len: usize,
    /// Where the last block ends ([`PackedBlocks::end`]).
    end: i64,
}

impl HeldState {
    /// `state`, its blocks compressed by `compressor` (one for every state a replay takes: a
    /// compressor's context is megabytes to set up).
    fn of(state: &SegmentState, compressor: &mut zstd::bulk::Compressor<'_>) -> PolarsResult<HeldState> {
        let flat = FlatState::of(state);
        let packed = flat.blocks.as_bytes();
        let mut blocks = compressor
            .compress(packed)
            .map_err(|e| polars_err!(ComputeError: "compressing a segment checkpoint: {e}"))?;
        // Made with room for the compressor's worst case.
        blocks.shrink_to_fit();
        Ok(HeldState {
            cursor: flat.cursor,
            block_count: flat.blocks.len(),
            packed_len: packed.len(),
            end: flat.blocks.end(),
            blocks,
            segs: flat.segs,
        })
    }

    fn flat(&self) -> PolarsResult<FlatState> {
        let packed = zstd::bulk::decompress(&self.blocks, self.packed_len)
            .map_err(|e| polars_err!(ComputeError: "a held segment checkpoint: {e}"))?;
        polars_ensure!(
            packed.len() == self.packed_len,
            ComputeError: "a held segment checkpoint decompressed to {} bytes, not {}", packed.len(), self.packed_len
        );
        // Bytes packed and compressed by this process a moment ago: not checked again block by
        // block (that was a fifth of storing a GB-scale report's segment objects).
        let blocks = PackedBlocks::of_own_bytes(packed, self.block_count, self.end);
        Ok(FlatState {
            cursor: self.cursor,
            segs: self.segs.clone(),
            blocks,
        })
    }

    fn bytes(&self) -> usize {
        self.segs.capacity() * std::mem::size_of::<(i64, FlatSegment)>() + self.blocks.capacity()
    }
}

/// Takes checkpoints of a state while it is rewound: at the end state, then every `every`
/// entries down to the state before the first entry.
pub struct CheckpointTaker {
    every: usize,
    /// The cursor of the next checkpoint to take.
    next: Option<usize>,
    /// Taken so far, in descending cursor order.
    points: Vec<HeldState>,
    /// Compresses each one's blocks ([`HELD_LEVEL`]); made with the first.
    compressor: Option<zstd::bulk::Compressor<'static>>,
}

impl CheckpointTaker {
    /// For a device of `n` entries, about `count` checkpoints ([`spacing`]).
    pub fn new(n: usize, count: usize) -> CheckpointTaker {
        CheckpointTaker::every(n, spacing(n, count))
    }

    /// For a device of `n` entries, one checkpoint every `every` entries.
    pub fn every(n: usize, every: usize) -> CheckpointTaker {
        CheckpointTaker {
            every: every.max(1),
            next: Some(n),
            points: Vec::new(),
            compressor: None,
        }
    }

    /// Rewinds `state` (at or above the next checkpoint) down to the last checkpoint at or
    /// above cursor `down_to`, taking each on the way.
    pub fn rewind_taking(&mut self, state: &mut SegmentState, ev: &DeviceEvents, down_to: usize) -> PolarsResult<()> {
        while let Some(c) = self.next.filter(|&c| c >= down_to) {
            state.rewind_to(ev, c.checked_sub(1));
            let compressor = match &mut self.compressor {
                Some(c) => c,
                None => self.compressor.insert(
                    zstd::bulk::Compressor::new(HELD_LEVEL)
                        .map_err(|e| polars_err!(ComputeError: "a compressor for segment checkpoints: {e}"))?,
                ),
            };
            self.points.push(HeldState::of(state, compressor)?);
            self.next = (c > 0).then(|| c.saturating_sub(self.every));
        }
        Ok(())
    }

    /// Takes the rest, down to the state before the first entry.
    pub fn finish(mut self, state: &mut SegmentState, ev: &DeviceEvents) -> PolarsResult<SegmentCheckpoints> {
        self.rewind_taking(state, ev, 0)?;
        self.points.reverse();
        Ok(SegmentCheckpoints { points: self.points })
    }
}

/// A device's checkpoints, in ascending cursor order (the first is the state before the first
/// entry, the last the end state).
pub struct SegmentCheckpoints {
    points: Vec<HeldState>,
}

impl SegmentCheckpoints {
    /// One backward pass over the whole trace, keeping about `count` states ([`spacing`]).
    pub fn build(t: &SnapshotTables, ev: &DeviceEvents, count: usize) -> PolarsResult<SegmentCheckpoints> {
        let mut state = SegmentState::at_end(t, ev)?;
        CheckpointTaker::new(ev.len(), count).finish(&mut state, ev)
    }

    /// One backward pass, keeping a state every `every` entries.
    pub fn build_every(t: &SnapshotTables, ev: &DeviceEvents, every: usize) -> PolarsResult<SegmentCheckpoints> {
        let mut state = SegmentState::at_end(t, ev)?;
        CheckpointTaker::every(ev.len(), every).finish(&mut state, ev)
    }

    pub fn len(&self) -> usize {
        self.points.len()
    }

    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// The checkpoints' cursors, ascending.
    pub fn cursors(&self) -> impl Iterator<Item = usize> + '_ {
        self.points.iter().map(|p| p.cursor)
    }

    /// Checkpoint `k`'s state, made flat again.
    pub fn state(&self, k: usize) -> PolarsResult<FlatState> {
        self.points
            .get(k)
            .ok_or_else(|| polars_err!(ComputeError: "no segment checkpoint {k}"))?
            .flat()
    }

    /// What the checkpoints hold in memory.
    pub fn bytes(&self) -> usize {
        self.points.iter().map(HeldState::bytes).sum()
    }

    /// The segment map right after entry `idx` (`None`: before the first entry), listing what
    /// `detail` asks for; `None` where no checkpoint covers it (none taken).
    pub fn map_at(
        &self,
        ev: &DeviceEvents,
        idx: Option<usize>,
        detail: SegmentDetail,
    ) -> PolarsResult<Option<SegmentMap>> {
        let target = idx.map_or(0, |i| i.saturating_add(1).min(ev.len()));
        let k = self.points.partition_point(|p| p.cursor < target);
        if k == self.points.len() {
            return Ok(None);
        }
        let start = self.state(k)?;
        let time = target.checked_sub(1).and_then(|i| ev.time_us(i));
        Ok(Some(map_from(
            &start,
            &EntryRows::of(ev),
            target,
            ev.device,
            time,
            detail,
        )))
    }

    /// The segment map at time `time`: after the last entry at or before it.
    pub fn map_at_time(&self, ev: &DeviceEvents, time: i64, detail: SegmentDetail) -> PolarsResult<Option<SegmentMap>> {
        let n = ev.time().partition_point(|x| x <= time);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_are_n_over_count_apart_within_the_bounds() {
        // A small trace: never closer than MIN_SPACING.
        assert_eq!(spacing(1_000, CHECKPOINTS), MIN_SPACING);
        assert_eq!(spacing(0, CHECKPOINTS), MIN_SPACING);
        // n / count where that lies between the bounds.
        assert_eq!(spacing(5_000_000, CHECKPOINTS), 5_000_000usize.div_ceil(128));
        // A long trace: no farther apart than MAX_SPACING …
        assert_eq!(spacing(12_800_000, CHECKPOINTS), MAX_SPACING);
        assert_eq!(spacing(35_000_000, CHECKPOINTS), MAX_SPACING);
        // … unless that would make more than MAX_SPACING_FACTOR × count of them.
        assert_eq!(spacing(51_200_000, CHECKPOINTS), MAX_SPACING);
        assert_eq!(spacing(100_000_000, CHECKPOINTS), 100_000_000usize.div_ceil(512));
        for n in [1, 8191, 8193, 1 << 20, 12_800_001, 51_200_001, 1 << 31] {
            let every = spacing(n, CHECKPOINTS);
            assert!(n.div_ceil(every) <= CHECKPOINTS * MAX_SPACING_FACTOR, "{n}");
            assert!(every >= MIN_SPACING, "{n}");
        }
    }
}
