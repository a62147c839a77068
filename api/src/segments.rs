//! The allocator's segments and blocks at one instant, as the segment map shows them.

use serde::{Deserialize, Serialize};

use crate::*;

/// The allocator's segments at one instant (`segment_map_at`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct SegmentMap {
    pub device: i64,
    /// The state right after this trace entry (`None`: before the first entry).
    pub event_index: Option<usize>,
    pub time_us: Option<i64>,
    /// In address order; with `max_segments`, only the largest segments.
    pub segments: Vec<SegmentView>,
    /// Every segment of the state, listed or not.
    pub segment_count: usize,
    /// Every block of the state (free gaps included), listed or merged.
    pub block_count: usize,
    pub reserved_bytes: i64,
    pub active_bytes: i64,
    /// Bytes lost to rounding: Σ (block size − requested size) over active blocks.
    pub rounding_waste_bytes: i64,
    pub free_bytes: i64,
    pub largest_free_block_bytes: i64,
    pub pending_free_bytes: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct SegmentView {
    pub address: i64,
    pub size: i64,
    pub stream: i64,
    pub expandable: bool,
    /// Blocks in address order; `inactive` blocks are free gaps.
    pub blocks: Vec<BlockView>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct BlockView {
    pub address: i64,
    pub size: i64,
    /// The request, or for merged blocks `size` less their rounding waste.
    pub requested_bytes: i64,
    /// `active_allocated`, `active_pending_free` or `inactive`; for merged blocks the state
    /// holding most of their bytes.
    pub state: BlockState,
    /// The block's stack; for merged blocks that of their largest active block (0 if none).
    pub stack_id: u32,
    /// How many neighbouring allocator blocks this entry stands for: 1, or more where a map
    /// asked for at a pixel `width` merged blocks smaller than a pixel.
    #[serde(default = "one_block")]
    pub block_count: u32,
}

fn one_block() -> u32 {
    1
}
