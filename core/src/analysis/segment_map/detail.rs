//! The level of detail of a segment map on the wire: a page draws the largest segments across
//! a canvas of some pixels, so a map asked for at that size lists only those segments and merges
//! neighbouring blocks smaller than a pixel into one entry per pixel. A state of hundreds of
//! thousands of blocks then costs what the page can show, not what the allocator holds; the
//! map's totals are always those of the whole state.

use memlens_api::{BlockState, BlockView, SegmentView};

/// What a segment map lists.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SegmentDetail {
    /// The largest this many segments (by size, then address); `None`: all.
    pub max_segments: Option<usize>,
    /// The pixels the largest listed segment spans; `None`: every block as it is.
    pub width: Option<usize>,
}

impl SegmentDetail {
    /// Every segment and every block.
    pub const FULL: SegmentDetail = SegmentDetail {
        max_segments: None,
        width: None,
    };
}

/// A segment to list: its address, size and place in the state's address order.
#[derive(Debug, Clone, Copy)]
pub struct SegmentKey {
    pub address: i64,
    pub size: i64,
    pub order: usize,
}

/// The positions (in address order) of the segments `detail` lists, ascending.
pub fn listed_segments(mut keys: Vec<SegmentKey>, detail: SegmentDetail) -> Vec<usize> {
    if let Some(max) = detail.max_segments.filter(|&m| m < keys.len()) {
        keys.select_nth_unstable_by(max, |a, b| b.size.cmp(&a.size).then(a.address.cmp(&b.address)));
        keys.truncate(max);
    }
    let mut order: Vec<usize> = keys.iter().map(|k| k.order).collect();
    order.sort_unstable();
    order
}

/// The bytes one pixel stands for when the largest listed segment spans `width` pixels; 0
/// (merge nothing) without a width.
pub fn pixel_bytes(largest_segment: i64, detail: SegmentDetail) -> i64 {
    match detail.width {
        Some(w) if w > 0 => largest_segment / w as i64,
        _ => 0,
    }
}

/// Neighbouring blocks that together span about one pixel, merged into one entry.
struct Merged {
    first: BlockView,
    size: i64,
    waste: i64,
    count: u32,
    /// Bytes per state: inactive, active allocated, active pending free.
    by_state: [i64; 3],
    /// The largest active block's size and stack.
    largest_active: (i64, u32),
}

impl Merged {
    fn start(b: BlockView) -> Merged {
        let mut m = Merged {
            size: 0,
            waste: 0,
            count: 0,
            by_state: [0; 3],
            largest_active: (0, 0),
            first: b.clone(),
        };
        m.add(&b);
        m
    }

    fn add(&mut self, b: &BlockView) {
        self.size += b.size;
        self.count += b.block_count.max(1);
        let slot = match b.state {
            BlockState::Inactive => 0,
            BlockState::ActiveAllocated => 1,
            BlockState::ActivePendingFree => 2,
        };
        self.by_state[slot] += b.size;
        if b.state != BlockState::Inactive {
            self.waste += (b.size - b.requested_bytes).max(0);
            if b.size > self.largest_active.0 {
                self.largest_active = (b.size, b.stack_id);
            }
        }
    }

    fn finish(self) -> BlockView {
        if self.count == 1 {
            return self.first;
        }
        // The state holding most bytes; among equals, allocated before pending before free.
        let [free, allocated, pending] = self.by_state;
        let state = if allocated >= pending && allocated >= free {
            BlockState::ActiveAllocated
        } else if pending >= free {
            BlockState::ActivePendingFree
        } else {
            BlockState::Inactive
        };
        BlockView {
            address: self.first.address,
            size: self.size,
            requested_bytes: self.size - self.waste,
            state,
            stack_id: self.largest_active.1,
            block_count: self.count,
        }
    }
}

/// `blocks` (in address order) with runs of blocks smaller than `pixel` bytes merged into
/// entries of at least a pixel (the last of a run may be smaller); every block as it is when
/// `pixel` is 0.
pub fn merge_small_blocks(blocks: impl Iterator<Item = BlockView>, pixel: i64) -> Vec<BlockView> {
    let mut out = Vec::new();
    let mut run: Option<Merged> = None;
    for b in blocks {
        if b.size >= pixel {
            out.extend(run.take().map(Merged::finish));
            out.push(b);
            continue;
        }
        match run.as_mut() {
            Some(m) => m.add(&b),
            None => run = Some(Merged::start(b)),
        }
        if run.as_ref().is_some_and(|m| m.size >= pixel) {
            out.extend(run.take().map(Merged::finish));
        }
    }
    out.extend(run.map(Merged::finish));
    out
}

/// A segment's listing at `pixel` bytes per pixel.
pub fn segment_view(
    address: i64,
    size: i64,
    stream: i64,
    expandable: bool,
    blocks: impl Iterator<Item = BlockView>,
    pixel: i64,
) -> SegmentView {
    SegmentView {
        address,
        size,
        stream,
        expandable,
        blocks: merge_small_blocks(blocks, pixel),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(address: i64, size: i64, requested: i64, state: BlockState, stack: u32) -> BlockView {
        BlockView {
            address,
            size,
            requested_bytes: requested,
            state,
            stack_id: stack,
            block_count: 1,
        }
    }

    #[test]
    fn blocks_below_a_pixel_merge_and_keep_their_bytes_waste_and_largest_stack() {
        use BlockState::*;
        let blocks = vec![
            block(0, 1000, 1000, ActiveAllocated, 1),
            block(1000, 10, 8, ActiveAllocated, 2),
            block(1010, 30, 20, ActiveAllocated, 3),
            block(1040, 20, 0, Inactive, 0),
            block(1060, 60, 0, Inactive, 0),
            block(1120, 5, 5, ActivePendingFree, 4),
        ];
        let merged = merge_small_blocks(blocks.clone().into_iter(), 100);
        assert_eq!(merged.len(), 3);
        assert_eq!(merged[0], blocks[0]);
        // 10 + 30 + 20 + 60 = 120 ≥ 100: one entry, mostly free.
        assert_eq!(merged[1].address, 1000);
        assert_eq!(merged[1].size, 120);
        assert_eq!(merged[1].block_count, 4);
        assert_eq!(merged[1].state, Inactive);
        assert_eq!(merged[1].size - merged[1].requested_bytes, 2 + 10);
        assert_eq!(merged[1].stack_id, 3);
        // The short run at the end stays itself.
        assert_eq!(merged[2], blocks[5]);
        // Bytes and blocks are kept whatever the pixel.
        for pixel in [0, 1, 7, 50, 100, 5000] {
            let m = merge_small_blocks(blocks.clone().into_iter(), pixel);
            assert_eq!(m.iter().map(|b| b.size).sum::<i64>(), 1125, "{pixel}");
            assert_eq!(m.iter().map(|b| b.block_count).sum::<u32>(), 6, "{pixel}");
            assert!(
                m.windows(2).all(|w| w[0].address + w[0].size == w[1].address),
                "{pixel}"
            );
        }
        assert_eq!(merge_small_blocks(blocks.clone().into_iter(), 0), blocks);
    }

    #[test]
    fn the_largest_segments_are_listed_in_address_order() {
        let keys: Vec<SegmentKey> = [(0, 5), (10, 50), (100, 20), (200, 50), (300, 1)]
            .iter()
            .enumerate()
            .map(|(order, &(address, size))| SegmentKey { address, size, order })
            .collect();
        let two = SegmentDetail {
            max_segments: Some(2),
            width: None,
        };
        assert_eq!(listed_segments(keys.clone(), two), vec![1, 3]);
        let three = SegmentDetail {
            max_segments: Some(3),
            ..two
        };
        assert_eq!(listed_segments(keys.clone(), three), vec![1, 2, 3]);
        assert_eq!(listed_segments(keys, SegmentDetail::FULL), vec![0, 1, 2, 3, 4]);
    }
}
