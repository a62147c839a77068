//! What a device's category timeline keeps between queries: each allocation's category, the
//! allocations in alloc and in free order, and the bytes of every category before every
//! [`SPACING`]-th entry. A column's breakdown is the state at the first entry where its total
//! peaks; that entry is found with the allocated pyramid of the device's [`TimelineIndex`]
//! (the categories' total is the allocated line shifted by a constant, checked when the index
//! is built), and the state there is the nearest checkpoint plus at most `SPACING` allocs and
//! frees. A device where the total is not the shifted allocated line gets no index and its
//! category timeline scans.
//!
//! [`TimelineIndex`]: super::TimelineIndex

use memlens_api::Category;
use polars_core::prelude::*;

use crate::analysis::whatif::categories_of;
use crate::stored::frames::DeviceFrames;
use crate::tables::columns::{lifetimes as lt_col, usage as usage_col};
use crate::tables::int_slice::IntSlice;

use super::row_list::{RowList, RowListBuilder};

/// Entries between two checkpoints.
pub const SPACING: usize = 1024;

/// A category's position in [`Category::ALL`] (the last, `Other`, for any it lacks).
pub fn slot_of(c: Category) -> usize {
    let k = Category::ALL.len();
    Category::ALL.iter().position(|&x| x == c).unwrap_or(k - 1)
}

/// One device's category index.
pub struct CategoryIndex {
    entries: usize,
    /// The categories' total minus allocated bytes, after every entry.
    pub offset: i64,
    /// Each allocation's category slot.
    slots: Vec<u8>,
    /// Allocations with a recorded alloc, by its entry; and with a recorded free, by its entry.
    by_alloc: RowList,
    by_free: RowList,
    /// `Category::ALL.len()` bytes per checkpoint: each category's live bytes before entry
    /// `c * SPACING`.
    checkpoints: Vec<i64>,
}

impl CategoryIndex {
    /// `None` when the categories' total is not the allocated line shifted by a constant, or
    /// there are more allocations than a `u32` counts.
    pub fn build(dev: &DeviceFrames) -> PolarsResult<Option<CategoryIndex>> {
        let lt = &dev.lifetimes;
        let (alloc, free, size) = (
            lt_col::ALLOC_IDX.slice(lt)?,
            lt_col::FREE_IDX.slice(lt)?,
            IntSlice::of(lt, lt_col::SIZE)?,
        );
        let allocated = usage_col::allocated(&dev.usage)?;
        let n = allocated.len();
        if u32::try_from(size.len()).is_err() {
            return Ok(None);
        }
        let slots: Vec<u8> = categories_of(lt)?.into_iter().map(|(c, _)| slot_of(c) as u8).collect();
        let (by_alloc, by_free) = (by_entry(alloc), by_entry(free));
        let k = Category::ALL.len();
        let mut live = vec![0i64; k];
        for r in 0..size.len() {
            if alloc[r] < 0 {
                live[slots[r] as usize] += size.at(r);
            }
        }
        let mut total: i64 = live.iter().sum();
        let mut checkpoints = Vec::with_capacity(n.div_ceil(SPACING) * k);
        let mut allocs = by_alloc.iter_all().peekable();
        let mut frees = by_free.iter_all().peekable();
        let mut offset = None;
        for (e, allocated_after) in allocated.iter().enumerate() {
            if e % SPACING == 0 {
                checkpoints.extend_from_slice(&live);
            }
            while let Some(r) = allocs.next_if(|&r| alloc[r as usize] as usize == e) {
                let r = r as usize;
                live[slots[r] as usize] += size.at(r);
                total += size.at(r);
            }
            while let Some(r) = frees.next_if(|&r| free[r as usize] as usize == e) {
                let r = r as usize;
                live[slots[r] as usize] -= size.at(r);
                total -= size.at(r);
            }
            if *offset.get_or_insert(total - allocated_after) != total - allocated_after {
                return Ok(None);
            }
        }
        Ok(Some(CategoryIndex {
            entries: n,
            offset: offset.unwrap_or(0),
            slots,
            by_alloc,
            by_free,
            checkpoints,
        }))
    }

    /// Heap bytes held.
    pub fn bytes(&self) -> usize {
        self.slots.len() + self.by_alloc.bytes() + self.by_free.bytes() + self.checkpoints.len() * 8
    }

    /// Whether this index was built from `dev`.
    pub fn fits(&self, dev: &DeviceFrames) -> bool {
        self.entries == dev.usage.height() && self.slots.len() == dev.lifetimes.height()
    }

    /// Each category's live bytes after entry `e`.
    pub fn state_after(&self, dev: &DeviceFrames, e: usize) -> PolarsResult<Vec<i64>> {
        let lt = &dev.lifetimes;
        let (alloc, free, size) = (
            lt_col::ALLOC_IDX.slice(lt)?,
            lt_col::FREE_IDX.slice(lt)?,
            IntSlice::of(lt, lt_col::SIZE)?,
        );
        let k = Category::ALL.len();
        let c = e / SPACING;
        let mut live = self.checkpoints[c * k..(c + 1) * k].to_vec();
        let from = (c * SPACING) as i64;
        let mut apply = |rows: &RowList, idx: &[i32], sign: i64| {
            let first = rows.partition_point(|r| i64::from(idx[r as usize]) < from);
            for r in rows
                .iter(first..rows.len())
                .take_while(|&r| i64::from(idx[r as usize]) <= e as i64)
            {
                live[self.slots[r as usize] as usize] += sign * size.at(r as usize);
            }
        };
        apply(&self.by_alloc, alloc, 1);
        apply(&self.by_free, free, -1);
        Ok(live)
    }
}

/// The rows whose entry in `idx` is recorded (not −1), in entry order (ties by row): read in
/// row order where they already are (a pipeline's allocs), else sorted.
fn by_entry(idx: &[i32]) -> RowList {
    let recorded = || (0..idx.len() as u32).filter(|&r| idx[r as usize] >= 0);
    let mut last = i32::MIN;
    let in_order = recorded().all(|r| {
        let ok = idx[r as usize] >= last;
        last = idx[r as usize];
        ok
    });
    if in_order {
        let mut rows = RowListBuilder::default();
        recorded().for_each(|r| rows.push(r));
        return rows.finish();
    }
    let mut rows: Vec<u32> = recorded().collect();
    rows.sort_by_key(|&r| idx[r as usize]);
    RowList::from(&rows[..])
}
