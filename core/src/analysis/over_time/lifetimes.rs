//! Allocation lifetimes: one row per allocation, from its `alloc` to its `free_completed`.
//!
//! Columns:
//! - the addresses: `addr_units` u32 and `addr_base` (512-byte units after a base, as the trace
//!   holds them) or `addr` i64, read with [`crate::tables::columns::addresses`]; left out of a run that
//!   keeps no frames ([`Addresses`]), and out of one that stores them until they are written
//!   ([`allocation_lifetimes_apart`]);
//! - `size`: requested bytes, u32 while every size is below 4 GiB, else i64;
//! - `alloc_idx` i32 (−1: allocated before recording), `free_idx` i32 (−1: live at the end;
//!   entry indexes take 32 bits, a device's trace being refused beyond [`MAX_ENTRIES`]);
//! - `stack`: u16 while every id is below 65,536, else u32 (the alloc's stack, or the free's
//!   when the alloc was not recorded, or the snapshot block's for blocks that predate the trace);
//! - `stream` i64.
//!
//! Addresses are reused, so allocations are matched per address in order.
//!
//! The times of an allocation's ends are not columns of their own: they are the device's entry
//! times at `alloc_idx` and `free_idx` (the events' `time_us`, stored with the usage as
//! `time`), read there when needed — two columns fewer, 18 bytes per allocation, in the
//! analyses, in the store and in every loaded report.

use polars_core::prelude::*;
use rustc_hash::FxHashMap;

use crate::analysis::lifetime_addresses::LifetimeAddresses;
use crate::analysis::{device_segments, DeviceEvents};
use crate::tables::columns::{address_columns, lifetimes as lt_col, one_or_each_column};
use crate::tables::int_slice::IntSlice;
use crate::tables::stack_ids::{stack_id_column, StackIds};
use crate::tables::OneOrEach;
use crate::tables::{Action, BlockState, NarrowI64, NarrowStacks, SnapshotTables};

/// Most entries one device's trace may hold: its entry indexes are 32-bit (2^31 entries would
/// be a snapshot of some 150 GB).
pub const MAX_ENTRIES: usize = i32::MAX as usize;

pub fn allocation_lifetimes(t: &SnapshotTables, ev: &DeviceEvents) -> PolarsResult<DataFrame> {
    allocation_lifetimes_with(t, ev, Addresses::Kept)
}

/// Whether the lifetimes hold the `addr` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addresses {
    Kept,
    /// Only a stored report's queries read the addresses: a run that keeps no frames leaves
    /// them out (8 bytes an allocation, 94 MB on the 2 GB generated snapshot, at the top of its
    /// analyses' memory).
    Left,
}

/// [`allocation_lifetimes`], with the `addr` column or without it.
pub fn allocation_lifetimes_with(
    t: &SnapshotTables,
    ev: &DeviceEvents,
    addresses: Addresses,
) -> PolarsResult<DataFrame> {
    Ok(lifetimes_and_predating(t, ev, addresses)?.0)
}

/// [`allocation_lifetimes`] without the address columns, and what gives each row its address
/// from the trace when it is written ([`LifetimeAddresses`]): a run that stores its lifetimes
/// does not hold their addresses through its analyses.
pub fn allocation_lifetimes_apart(
    t: &SnapshotTables,
    ev: &DeviceEvents,
) -> PolarsResult<(DataFrame, LifetimeAddresses)> {
    let (lifetimes, predating) = lifetimes_and_predating(t, ev, Addresses::Left)?;
    Ok((lifetimes, LifetimeAddresses::new(predating)))
}

/// The lifetimes, and the addresses of their last rows: the blocks from before the trace.
fn lifetimes_and_predating(
    t: &SnapshotTables,
    ev: &DeviceEvents,
    addresses: Addresses,
) -> PolarsResult<(DataFrame, Vec<i64>)> {
    let (action, addr, size, stack, stream) = (ev.action(), ev.addr(), ev.size(), ev.stack(), ev.stream());
    polars_ensure!(
        action.len() <= MAX_ENTRIES,
        ComputeError: "device {} has {} trace entries; at most {MAX_ENTRIES} are supported", ev.device, action.len()
    );
    let entry = |i: usize| i as i32;
    let mut open: FxHashMap<i64, usize> = FxHashMap::default();
    // One row per alloc (and a few for frees of memory allocated before the trace): sized once,
    // so the columns are not copied as they grow while the trace they come from is held.
    let allocs = action.iter().filter(|&&a| a == Action::Alloc as u8).count();
    let kept = addresses == Addresses::Kept;
    // The allocations' addresses are the trace's: held as its are, 512-byte units after its
    // base while they fit.
    let addr_rows = if kept { allocs } else { 0 };
    let (mut r_addr, mut r_size, mut r_alloc, mut r_free, mut r_stack, mut r_stream) = (
        match addr {
            IntSlice::U32 { base, shift, .. } => NarrowI64::Narrow {
                base,
                shift,
                offsets: Vec::with_capacity(addr_rows),
            },
            IntSlice::Coded { .. } | IntSlice::I64(_) => NarrowI64::Wide(Vec::with_capacity(addr_rows)),
        },
        NarrowI64::sizes_with_capacity(allocs),
        Vec::with_capacity(allocs),
        Vec::with_capacity(allocs),
        NarrowStacks::with_capacity(allocs),
        OneOrEach::default(),
    );
    for (i, &a) in action.iter().enumerate() {
        match Action::from_code(a) {
            Action::Alloc => {
                let row = r_alloc.len();
                if kept {
                    r_addr.push(addr.at(i));
                }
                r_size.push(size.at(i));
                r_alloc.push(entry(i));
                r_free.push(-1i32);
                r_stack.push(stack.at(i));
                r_stream.push(stream.get(i));
                open.insert(addr.at(i), row);
            }
            Action::FreeCompleted => match open.remove(&addr.at(i)) {
                Some(row) => r_free[row] = entry(i),
                None => {
                    // Allocated before recording (or evicted from the ring buffer).
                    if kept {
                        r_addr.push(addr.at(i));
                    }
                    r_size.push(size.at(i));
                    r_alloc.push(-1);
                    r_free.push(entry(i));
                    r_stack.push(stack.at(i));
                    r_stream.push(stream.get(i));
                }
            },
            _ => {}
        }
    }
    // Blocks live in the snapshot that no recorded alloc explains predate the trace.
    let (segs, blocks) = device_segments(t, ev.device)?;
    let seg_stream = segs.column("stream")?.i64()?;
    let b_addr = blocks.column("address")?.i64()?;
    let b_req = blocks.column("requested_size")?.i64()?;
    let b_state = blocks.column("state")?.u8()?;
    let b_stack = blocks.column("stack")?.u32()?;
    let b_seg = blocks.column("segment")?.u32()?;
    let seg_rows: FxHashMap<u32, usize> = {
        // `blocks.segment` indexes the unfiltered segments table; map it to this device's rows.
        let all_addr = t.segments.column("address")?.i64()?;
        let dev_addr: FxHashMap<i64, usize> = segs
            .column("address")?
            .i64()?
            .into_no_null_iter()
            .enumerate()
            .map(|(i, a)| (a, i))
            .collect();
        (0..all_addr.len() as u32)
            .filter_map(|g| all_addr.get(g as usize).and_then(|a| dev_addr.get(&a)).map(|&r| (g, r)))
            .collect()
    };
    let mut predating = Vec::new();
    for i in 0..blocks.height() {
        let state = BlockState::from_code(b_state.get(i).unwrap_or(0));
        if state == BlockState::Inactive {
            continue;
        }
        let a = b_addr.get(i).unwrap_or(0);
        if open.contains_key(&a) {
            continue;
        }
        predating.push(a);
        if kept {
            r_addr.push(a);
        }
        r_size.push(b_req.get(i).unwrap_or(0));
        r_alloc.push(-1);
        r_free.push(-1);
        r_stack.push(b_stack.get(i).unwrap_or(0));
        let s = b_seg
            .get(i)
            .and_then(|g| seg_rows.get(&g))
            .and_then(|&r| seg_stream.get(r))
            .unwrap_or(0);
        r_stream.push(s);
    }
    let n = r_alloc.len();
    let mut columns: Vec<Column> = Vec::with_capacity(6);
    if kept {
        columns.extend(address_columns(r_addr, n));
    }
    columns.extend([
        // u32 while every size is below 4 GiB.
        match r_size.into_u32_or_i64() {
            Ok(narrow) => UInt32Chunked::from_vec("size".into(), narrow).into_series().into(),
            Err(wide) => Int64Chunked::from_vec("size".into(), wide).into_series().into(),
        },
        Int32Chunked::from_vec("alloc_idx".into(), r_alloc).into_series().into(),
        Int32Chunked::from_vec("free_idx".into(), r_free).into_series().into(),
        // u16 while every stack id is below 65,536.
        stack_id_column(lt_col::STACK, r_stack),
        // One stream throughout (the usual case) is held as one scalar (see `Streams`).
        one_or_each_column("stream", r_stream),
    ]);
    Ok((DataFrame::new(n, columns)?, predating))
}

/// One stack's allocations live at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveStack {
    pub stack: u32,
    pub bytes: i64,
    pub count: usize,
}

/// Allocations live right after entry `idx` (`None`: before the first entry), grouped by
/// stack: largest first (equal bytes by stack id), at most `top`.
pub fn live_by_stack(lifetimes: &DataFrame, idx: Option<usize>, top: usize) -> PolarsResult<Vec<LiveStack>> {
    let at = idx.map_or(-1, |i| i32::try_from(i).unwrap_or(i32::MAX));
    let alloc_idx = lt_col::ALLOC_IDX.of(lifetimes)?;
    let free_idx = lt_col::FREE_IDX.of(lifetimes)?;
    let size = IntSlice::of(lifetimes, lt_col::SIZE)?;
    let stack = StackIds::of(lifetimes, lt_col::STACK)?;
    let mut by_stack: FxHashMap<u32, LiveStack> = FxHashMap::default();
    for (i, ends) in alloc_idx.iter().zip(free_idx.iter()).enumerate() {
        let (Some(a), Some(f)) = ends else { continue };
        if a <= at && (f == -1 || f > at) {
            let id = stack.at(i);
            let e = by_stack.entry(id).or_insert(LiveStack {
                stack: id,
                bytes: 0,
                count: 0,
            });
            e.bytes += size.at(i);
            e.count += 1;
        }
    }
    let mut out: Vec<LiveStack> = by_stack.into_values().collect();
    out.sort_unstable_by(|a, b| b.bytes.cmp(&a.bytes).then(a.stack.cmp(&b.stack)));
    out.truncate(top);
    Ok(out)
}
