//! The allocator's segment map at any trace entry, rebuilt by replay.
//!
//! The snapshot's `segments` are the exact state after the last entry; earlier states come
//! from undoing entries backwards from there (as PyTorch's "Allocator State History" does):
//! undoing an `alloc` frees its block and merges it with free neighbours, undoing a
//! `free_completed` carves the block back out of the free space (its size is the allocator's
//! rounding of the request, or the whole gap when the remainder would be too small to split),
//! undoing `segment_alloc`/`segment_map` removes the range and `segment_free`/`segment_unmap`
//! puts it back (merging with an adjacent expandable range). States are therefore exact at the
//! end of the trace and estimated, to within allocator rounding, before it.

use memlens_api::{BlockView, SegmentMap};
use polars_core::prelude::*;

use super::block::Block;
use super::blocks::SegmentBlocks;
use super::by_address::{Segment, SegmentsByAddress};
use super::detail::{listed_segments, pixel_bytes, segment_view, SegmentDetail, SegmentKey};
use super::entry_rows::EntryRows;
use crate::analysis::{device_segments, round_size, DeviceEvents, MIN_BLOCK, SMALL_SIZE};
use crate::tables::{Action, BlockState, SnapshotTables};

/// Aggregates of one state.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StateStats {
    pub reserved: i64,
    pub active: i64,
    pub free: i64,
    pub largest_free: i64,
    pub rounding_waste: i64,
    pub pending_free: i64,
}

/// A replayable allocator state for one device.
#[derive(Clone)]
pub struct SegmentState {
    pub(crate) segs: SegmentsByAddress,
    /// Entries `>= cursor` have been undone: the state is the one right after entry `cursor - 1`.
    pub(crate) cursor: usize,
}

impl SegmentState {
    /// The state after the last entry, from the snapshot.
    pub fn at_end(t: &SnapshotTables, ev: &DeviceEvents) -> PolarsResult<SegmentState> {
        let (segs, blocks) = device_segments(t, ev.device)?;
        let s_addr = segs.column("address")?.i64()?;
        let s_size = segs.column("total_size")?.i64()?;
        let s_stream = segs.column("stream")?.i64()?;
        let s_exp = segs.column("is_expandable")?.bool()?;
        let map = (0..segs.height())
            .map(|i| {
                let segment = Segment {
                    size: s_size.get(i).unwrap_or(0),
                    stream: s_stream.get(i).unwrap_or(0),
                    expandable: s_exp.get(i).unwrap_or(false),
                    blocks: SegmentBlocks::default(),
                };
                (s_addr.get(i).unwrap_or(0), segment)
            })
            .collect();
        let b_addr = blocks.column("address")?.i64()?;
        let b_size = blocks.column("size")?.i64()?;
        let b_req = blocks.column("requested_size")?.i64()?;
        let b_state = blocks.column("state")?.u8()?;
        let b_stack = blocks.column("stack")?.u32()?;
        let mut state = SegmentState {
            segs: map,
            cursor: ev.len(),
        };
        for i in 0..blocks.height() {
            let a = b_addr.get(i).unwrap_or(0);
            let blk = Block {
                size: b_size.get(i).unwrap_or(0),
                requested: b_req.get(i).unwrap_or(0),
                state: BlockState::from_code(b_state.get(i).unwrap_or(0)),
                stack: b_stack.get(i).unwrap_or(0),
            };
            if let Some(seg) = state.seg_mut(a) {
                seg.blocks.insert(a, blk);
            }
        }
        Ok(state)
    }

    /// The state is the one right after entry `cursor() - 1`.
    pub fn cursor(&self) -> usize {
        self.cursor
    }

    fn seg_key(&self, addr: i64) -> Option<i64> {
        self.segs.start_holding(addr)
    }

    fn seg_mut(&mut self, addr: i64) -> Option<&mut Segment> {
        self.segs.holding_mut(addr)
    }

    /// Undoes entries until the state is the one right after entry `idx` (`None`: before all).
    pub fn rewind_to(&mut self, ev: &DeviceEvents, idx: Option<usize>) {
        self.rewind_over(&EntryRows::of(ev), idx);
    }

    /// [`SegmentState::rewind_to`] reading the entries from `rows`, which hold every entry
    /// from the target up to the state's cursor; it stops at the first entry `rows` holds.
    pub fn rewind_over(&mut self, rows: &EntryRows<'_>, idx: Option<usize>) {
        let target = idx.map_or(0, |i| i + 1).max(rows.first);
        if self.cursor > rows.end() {
            return;
        }
        while self.cursor > target {
            self.cursor -= 1;
            let i = self.cursor - rows.first;
            let action = Action::from_code(rows.action[i]);
            self.undo(
                action,
                rows.addr.at(i),
                rows.size.at(i),
                rows.stack.at(i),
                rows.stream.get(i),
            );
        }
    }

    fn undo(&mut self, action: Action, addr: i64, size: i64, stack: u32, stream: i64) {
        match action {
            Action::Alloc => {
                if let Some(seg) = self.seg_mut(addr) {
                    seg.blocks.free_block(addr);
                }
            }
            Action::FreeRequested => {
                if let Some(seg) = self.seg_mut(addr) {
                    if let Some(b) = seg.blocks.get_mut(addr) {
                        if b.state == BlockState::ActivePendingFree {
                            b.state = BlockState::ActiveAllocated;
                        }
                    }
                }
            }
            Action::FreeCompleted => {
                if let Some(seg) = self.seg_mut(addr) {
                    carve(seg, addr, size, stack);
                }
            }
            Action::SegmentAlloc | Action::SegmentMap => self.remove_range(addr, size),
            Action::SegmentFree | Action::SegmentUnmap => {
                self.insert_range(addr, size, stream, action == Action::SegmentUnmap)
            }
            _ => {}
        }
    }

    fn remove_range(&mut self, addr: i64, size: i64) {
        let Some(start) = self.seg_key(addr) else {
            return;
        };
        let Some(seg) = self.segs.remove(start) else {
            return;
        };
        let end = start + seg.size;
        let cut_end = (addr + size).min(end);
        let mut before = Segment {
            size: addr - start,
            stream: seg.stream,
            expandable: seg.expandable,
            blocks: SegmentBlocks::default(),
        };
        let mut after = Segment {
            size: end - cut_end,
            stream: seg.stream,
            expandable: seg.expandable,
            blocks: SegmentBlocks::default(),
        };
        for (a, b) in seg.blocks.into_vec() {
            let b_end = a + b.size;
            if b_end <= addr {
                before.blocks.insert(a, b);
            } else if a >= cut_end {
                after.blocks.insert(a, b);
            } else {
                if a < addr {
                    before.blocks.insert(
                        a,
                        Block {
                            size: addr - a,
                            ..b.clone()
                        },
                    );
                }
                if b_end > cut_end {
                    after.blocks.insert(
                        cut_end,
                        Block {
                            size: b_end - cut_end,
                            ..b
                        },
                    );
                }
            }
        }
        if before.size > 0 {
            self.segs.insert(start, before);
        }
        if after.size > 0 {
            self.segs.insert(cut_end, after);
        }
    }

    fn insert_range(&mut self, addr: i64, size: i64, stream: i64, expandable: bool) {
        if size <= 0 || self.seg_key(addr).is_some() {
            return;
        }
        let free = Block {
            size,
            requested: 0,
            state: BlockState::Inactive,
            stack: 0,
        };
        let mut seg = Segment {
            size,
            stream,
            expandable,
            blocks: SegmentBlocks::one(addr, free),
        };
        let mut start = addr;
        if expandable {
            // Re-join the neighbouring mapped ranges, as the snapshot shows one segment per range.
            if let Some((p, prev)) = self.segs.last_before(addr) {
                if p + prev.size == addr && prev.expandable && prev.stream == stream {
                    let mut prev = self.segs.remove(p).unwrap_or(seg.clone());
                    prev.size += seg.size;
                    prev.blocks.append(std::mem::take(&mut seg.blocks));
                    seg = prev;
                    start = p;
                }
            }
            let end = start + seg.size;
            if let Some(next) = self.segs.get(end) {
                if next.expandable && next.stream == stream {
                    if let Some(mut next) = self.segs.remove(end) {
                        seg.size += next.size;
                        seg.blocks.append(std::mem::take(&mut next.blocks));
                    }
                }
            }
            seg.blocks.free_block(addr);
        }
        self.segs.insert(start, seg);
    }

    /// Aggregates of the current state.
    pub fn stats(&self) -> StateStats {
        let mut s = StateStats::default();
        for seg in self.segs.values() {
            s.reserved += seg.size;
            for b in seg.blocks.values() {
                match b.state {
                    BlockState::Inactive => {
                        s.free += b.size;
                        s.largest_free = s.largest_free.max(b.size);
                    }
                    BlockState::ActiveAllocated => {
                        s.active += b.size;
                        s.rounding_waste += (b.size - b.requested).max(0);
                    }
                    BlockState::ActivePendingFree => {
                        s.active += b.size;
                        s.pending_free += b.size;
                        s.rounding_waste += (b.size - b.requested).max(0);
                    }
                }
            }
        }
        s
    }

    /// The current state as a wire view, listing what `detail` asks for; the totals are
    /// always the whole state's.
    pub fn view(&self, device: i64, time_us: Option<i64>, detail: SegmentDetail) -> SegmentMap {
        let st = self.stats();
        let keys = self
            .segs
            .iter()
            .enumerate()
            .map(|(order, (&address, seg))| SegmentKey {
                address,
                size: seg.size,
                order,
            })
            .collect();
        let listed = listed_segments(keys, detail);
        let segs: Vec<(&i64, &Segment)> = self.segs.iter().collect();
        let largest = listed.iter().map(|&i| segs[i].1.size).max().unwrap_or(0);
        let pixel = pixel_bytes(largest, detail);
        let segments = listed
            .iter()
            .map(|&i| {
                let (&a, seg) = segs[i];
                let blocks = seg.blocks.iter().map(|(ba, b)| BlockView {
                    address: ba,
                    size: b.size,
                    requested_bytes: b.requested,
                    state: b.state,
                    stack_id: b.stack,
                    block_count: 1,
                });
                segment_view(a, seg.size, seg.stream, seg.expandable, blocks, pixel)
            })
            .collect();
        SegmentMap {
            device,
            event_index: self.cursor.checked_sub(1),
            time_us,
            segments,
            segment_count: self.segs.len(),
            block_count: self.segs.values().map(|s| s.blocks.len()).sum(),
            reserved_bytes: st.reserved,
            active_bytes: st.active,
            rounding_waste_bytes: st.rounding_waste,
            free_bytes: st.free,
            largest_free_block_bytes: st.largest_free,
            pending_free_bytes: st.pending_free,
        }
    }
}

/// Puts a block freed by `free_completed` back into the free block that now covers `addr`.
fn carve(seg: &mut Segment, addr: i64, requested: i64, stack: u32) {
    // The allocator does not split off remainders too small to be useful.
    let split_min = if seg.size <= 2 * SMALL_SIZE {
        MIN_BLOCK
    } else {
        SMALL_SIZE + 1
    };
    let Some((fstart, free)) = seg.blocks.last_at_or_before_mut(addr) else {
        return;
    };
    if free.state != BlockState::Inactive || addr >= fstart + free.size {
        return;
    }
    let fend = fstart + free.size;
    let mut size = round_size(requested).min(fend - addr);
    if fend - addr - size < split_min {
        size = fend - addr;
    }
    let carved = Block {
        size,
        requested,
        state: BlockState::ActivePendingFree,
        stack,
    };
    // The free block keeps what lies before `addr`, or becomes the carved block.
    if fstart < addr {
        free.size = addr - fstart;
        seg.blocks.insert(addr, carved);
    } else {
        *free = carved;
    }
    if addr + size < fend {
        seg.blocks.insert(
            addr + size,
            Block {
                size: fend - addr - size,
                requested: 0,
                state: BlockState::Inactive,
                stack: 0,
            },
        );
    }
}

/// The segment map right after entry `idx` (`None`: before the first entry).
pub fn segment_map_at(t: &SnapshotTables, ev: &DeviceEvents, idx: Option<usize>) -> PolarsResult<SegmentMap> {
    let mut state = SegmentState::at_end(t, ev)?;
    let idx = idx.filter(|&i| i < ev.len());
    let idx = if idx.is_none() && ev.is_empty() { None } else { idx };
    state.rewind_to(ev, idx);
    let time = idx.and_then(|i| ev.time_us(i));
    Ok(state.view(ev.device, time, SegmentDetail::FULL))
}

/// The segment map at time `time` (µs, or entry index without timestamps): the state after the
/// last entry at or before it.
pub fn segment_map_at_time(t: &SnapshotTables, ev: &DeviceEvents, time: i64) -> PolarsResult<SegmentMap> {
    let n = ev.time().partition_point(|x| x <= time);
    segment_map_at(t, ev, n.checked_sub(1))
}
