//! What a device's timeline keeps between queries, per axis: a min/max pyramid of allocated
//! bytes ([`super::pyramid`]; reserved bytes, held as their few changes, need none) and the
//! allocations' band index
//! ([`super::band_index`]). Built once from the device frames (a few hundred milliseconds for
//! 25 M entries), it makes a timeline query cost about `width` × a few hundred steps plus the
//! bands drawn, instead of a pass over every entry and every allocation. The answers are the
//! same as without it; a part that cannot be built (times that go backwards) is left out and
//! that part of the query scans.

use polars_core::prelude::*;

use super::band_index::{BandIndex, Endpoints};
use super::pyramid::{MinMaxPyramid, Positions};
use super::series::on_series;
use super::Axis;
use crate::stored::frames::DeviceFrames;
use crate::tables::columns::{lifetimes as lt_col, usage as usage_col};
use crate::tables::int_slice::IntSlice;

/// One device's timeline index on one axis.
pub struct TimelineIndex {
    axis: Axis,
    entries: usize,
    allocations: usize,
    /// Allocated bytes; `None` when the positions are not sorted.
    allocated: Option<MinMaxPyramid>,
    bands: Option<BandIndex>,
}

impl TimelineIndex {
    /// Builds the allocated pyramid and the band index side by side.
    pub fn build(dev: &DeviceFrames, axis: Axis) -> PolarsResult<TimelineIndex> {
        let positions = axis_positions(dev, axis)?;
        let allocated = usage_col::allocated(&dev.usage)?;
        let size = IntSlice::of(&dev.lifetimes, lt_col::SIZE)?;
        let ends = AxisEnds::of(dev, axis)?;
        let (allocated, bands) = std::thread::scope(|scope| {
            let allocated = scope.spawn(|| {
                positions
                    .sorted()
                    .then(|| on_series!(allocated, |values| MinMaxPyramid::build(values)))
            });
            let bands = BandIndex::build(&ends, size, super::MAX_BANDS);
            (allocated.join().unwrap_or_else(|p| std::panic::resume_unwind(p)), bands)
        });
        Ok(TimelineIndex {
            axis,
            entries: dev.usage.height(),
            allocations: dev.lifetimes.height(),
            allocated,
            bands,
        })
    }

    /// Heap bytes held.
    pub fn bytes(&self) -> usize {
        self.allocated.as_ref().map_or(0, MinMaxPyramid::bytes) + self.bands.as_ref().map_or(0, BandIndex::bytes)
    }

    /// Whether this index was built from `dev` on `axis`.
    pub fn fits(&self, dev: &DeviceFrames, axis: Axis) -> bool {
        self.axis == axis && self.entries == dev.usage.height() && self.allocations == dev.lifetimes.height()
    }

    /// The allocated pyramid, where the positions are sorted.
    pub fn allocated(&self) -> Option<&MinMaxPyramid> {
        self.allocated.as_ref()
    }

    /// Whether the positions on this axis never decrease (found as the index was built).
    pub fn positions_sorted(&self) -> bool {
        self.allocated.is_some()
    }

    pub fn bands(&self) -> Option<&BandIndex> {
        self.bands.as_ref()
    }
}

/// A device's entry positions on `axis`: its stored times (µs), or the entry indices.
pub fn axis_positions(dev: &DeviceFrames, axis: Axis) -> PolarsResult<Positions<'_>> {
    Ok(match axis {
        Axis::Time => Positions::Times(usage_col::times(&dev.usage)?),
        Axis::Event => Positions::EntryIndex(dev.usage.height()),
    })
}

/// The allocations' endpoints on an axis, read in place: the entry indices (`-1`: outside the
/// trace), or the device's entry times at those indices.
pub struct AxisEnds<'a> {
    alloc_idx: &'a [i32],
    free_idx: &'a [i32],
    /// The entry times (the usage's `time`) on the time axis.
    times: Option<IntSlice<'a>>,
}

impl<'a> AxisEnds<'a> {
    /// The endpoints on `axis`. An index past the last entry (a frame not written by the
    /// pipeline) reads as outside the trace.
    pub fn of(dev: &'a DeviceFrames, axis: Axis) -> PolarsResult<AxisEnds<'a>> {
        let lt = &dev.lifetimes;
        Ok(AxisEnds {
            alloc_idx: lt_col::ALLOC_IDX.slice(lt)?,
            free_idx: lt_col::FREE_IDX.slice(lt)?,
            times: match axis {
                Axis::Event => None,
                Axis::Time => Some(usage_col::times(&dev.usage)?),
            },
        })
    }

    /// The band index and the endpoints it was built over, when `index` has one.
    pub fn with_index(
        dev: &'a DeviceFrames,
        index: &'a TimelineIndex,
    ) -> PolarsResult<Option<(&'a BandIndex, AxisEnds<'a>)>> {
        match index.bands() {
            Some(bands) => Ok(Some((bands, Self::of(dev, index.axis)?))),
            None => Ok(None),
        }
    }

    /// Allocation `i`'s endpoints as a band shows them (`None`: outside the trace).
    pub fn band_ends(&self, i: usize) -> super::BandEnds {
        (self.at(self.alloc_idx[i]), self.at(self.free_idx[i]))
    }
}

impl Endpoints for AxisEnds<'_> {
    fn len(&self) -> usize {
        self.alloc_idx.len()
    }

    #[inline]
    fn alloc(&self, i: usize) -> i64 {
        self.at(self.alloc_idx[i]).unwrap_or(i64::MIN)
    }

    #[inline]
    fn free(&self, i: usize) -> i64 {
        self.at(self.free_idx[i]).unwrap_or(i64::MAX)
    }
}

impl AxisEnds<'_> {
    /// Entry `idx`'s position on the axis (`None`: outside the trace).
    #[inline]
    fn at(&self, idx: i32) -> Option<i64> {
        let i = usize::try_from(idx).ok()?;
        match self.times {
            Some(t) => t.get(i),
            None => Some(i64::from(idx)),
        }
    }
}
