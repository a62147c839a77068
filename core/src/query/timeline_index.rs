//! What a device's timeline keeps between queries, per axis: a min/max pyramid of allocated
//! and of reserved bytes ([`super::pyramid`]) and the allocations' band index
//! ([`super::band_index`]). Built once from the device frames (a few hundred milliseconds for
//! 25 M entries), it makes a timeline query cost about `width` × a few hundred steps plus the
//! bands drawn, instead of a pass over every entry and every allocation. The answers are the
//! same as without it; a part that cannot be built (times that go backwards) is left out and
//! that part of the query scans.

use polars::prelude::*;

use super::band_index::{BandIndex, Endpoints};
use super::pyramid::{MinMaxPyramid, Positions};
use super::Axis;
use crate::columns::{lifetimes as lt_col, usage as usage_col};
use crate::frames::DeviceFrames;

/// One device's timeline index on one axis.
pub struct TimelineIndex {
    axis: Axis,
    entries: usize,
    allocations: usize,
    /// Allocated and reserved bytes; `None` when the positions are not sorted.
    usage: Option<[MinMaxPyramid; 2]>,
    bands: Option<BandIndex>,
}

impl TimelineIndex {
    /// Builds the usage pyramids and the band index side by side.
    pub fn build(dev: &DeviceFrames, axis: Axis) -> PolarsResult<TimelineIndex> {
        let positions = axis_positions(dev, axis)?;
        let allocated = usage_col::ALLOCATED.slice(&dev.usage)?;
        let reserved = usage_col::RESERVED.slice(&dev.usage)?;
        let size = lt_col::SIZE.slice(&dev.lifetimes)?;
        let ends = AxisEnds::checked(dev, axis)?;
        let (usage, bands) = std::thread::scope(|scope| {
            let usage = scope.spawn(|| {
                positions
                    .sorted()
                    .then(|| [MinMaxPyramid::build(allocated), MinMaxPyramid::build(reserved)])
            });
            let bands = ends.and_then(|ends| BandIndex::build(&ends, size, super::MAX_BANDS));
            (usage.join().unwrap_or_else(|p| std::panic::resume_unwind(p)), bands)
        });
        Ok(TimelineIndex {
            axis,
            entries: dev.usage.height(),
            allocations: dev.lifetimes.height(),
            usage,
            bands,
        })
    }

    /// Heap bytes held.
    pub fn bytes(&self) -> usize {
        self.usage.as_ref().map_or(0, |u| u[0].bytes() + u[1].bytes()) + self.bands.as_ref().map_or(0, BandIndex::bytes)
    }

    /// Whether this index was built from `dev` on `axis`.
    pub fn fits(&self, dev: &DeviceFrames, axis: Axis) -> bool {
        self.axis == axis && self.entries == dev.usage.height() && self.allocations == dev.lifetimes.height()
    }

    /// The allocated and the reserved pyramid, where the positions are sorted.
    pub fn usage(&self) -> Option<(&MinMaxPyramid, &MinMaxPyramid)> {
        self.usage.as_ref().map(|[a, r]| (a, r))
    }

    pub fn bands(&self) -> Option<&BandIndex> {
        self.bands.as_ref()
    }
}

/// A device's entry positions on `axis`: its stored times (µs), or the entry indices.
pub fn axis_positions(dev: &DeviceFrames, axis: Axis) -> PolarsResult<Positions<'_>> {
    Ok(match axis {
        Axis::Time => Positions::Times(usage_col::TIME.slice(&dev.usage)?),
        Axis::Event => Positions::EntryIndex(dev.usage.height()),
    })
}

/// The allocations' endpoints on an axis, read in place: the entry indices (`-1`: outside the
/// trace), or the times at those indices.
pub struct AxisEnds<'a> {
    alloc_idx: &'a [i64],
    free_idx: &'a [i64],
    /// `t_alloc` and `t_free` on the time axis (their values where the index is not `-1`).
    times: Option<(&'a [i64], &'a [i64])>,
}

impl<'a> AxisEnds<'a> {
    /// `None` when the time columns are not one chunk each, or their nulls are not exactly
    /// where the entry index is `-1` (then the timeline scans).
    fn checked(dev: &'a DeviceFrames, axis: Axis) -> PolarsResult<Option<AxisEnds<'a>>> {
        if axis == Axis::Time {
            let lt = &dev.lifetimes;
            let nulls_where_outside = |col: &Int64Chunked, idx: &[i64]| {
                col.len() == idx.len()
                    && col.chunks().len() == 1
                    && col.iter().zip(idx).all(|(v, &i)| v.is_none() == (i < 0))
            };
            if !nulls_where_outside(lt_col::T_ALLOC.of(lt)?, lt_col::ALLOC_IDX.slice(lt)?)
                || !nulls_where_outside(lt_col::T_FREE.of(lt)?, lt_col::FREE_IDX.slice(lt)?)
            {
                return Ok(None);
            }
        }
        Self::in_place(dev, axis)
    }

    /// The endpoints of a device whose index has a band index (checked when it was built).
    fn in_place(dev: &'a DeviceFrames, axis: Axis) -> PolarsResult<Option<AxisEnds<'a>>> {
        let lt = &dev.lifetimes;
        let values = |col: &'a Int64Chunked| -> Option<&'a [i64]> {
            (col.chunks().len() == 1).then(|| col.downcast_as_array().values().as_slice())
        };
        let times = match axis {
            Axis::Event => None,
            Axis::Time => match (values(lt_col::T_ALLOC.of(lt)?), values(lt_col::T_FREE.of(lt)?)) {
                (Some(a), Some(f)) => Some((a, f)),
                _ => return Ok(None),
            },
        };
        Ok(Some(AxisEnds {
            alloc_idx: lt_col::ALLOC_IDX.slice(lt)?,
            free_idx: lt_col::FREE_IDX.slice(lt)?,
            times,
        }))
    }

    /// The band index and the endpoints it was built over, when `index` has one.
    pub fn with_index(
        dev: &'a DeviceFrames,
        index: &'a TimelineIndex,
    ) -> PolarsResult<Option<(&'a BandIndex, AxisEnds<'a>)>> {
        match index.bands() {
            Some(bands) => Ok(Self::in_place(dev, index.axis)?.map(|ends| (bands, ends))),
            None => Ok(None),
        }
    }

    /// Allocation `i`'s endpoints as a band shows them (`None`: outside the trace).
    pub fn band_ends(&self, i: usize) -> super::BandEnds {
        let (a, f) = (self.alloc(i), self.free(i));
        ((a != i64::MIN).then_some(a), (f != i64::MAX).then_some(f))
    }
}

impl Endpoints for AxisEnds<'_> {
    fn len(&self) -> usize {
        self.alloc_idx.len()
    }

    #[inline]
    fn alloc(&self, i: usize) -> i64 {
        match (self.alloc_idx[i], self.times) {
            (idx, _) if idx < 0 => i64::MIN,
            (_, Some((t, _))) => t[i],
            (idx, None) => idx,
        }
    }

    #[inline]
    fn free(&self, i: usize) -> i64 {
        match (self.free_idx[i], self.times) {
            (idx, _) if idx < 0 => i64::MAX,
            (_, Some((_, t))) => t[i],
            (idx, None) => idx,
        }
    }
}
