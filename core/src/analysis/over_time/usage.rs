//! Memory usage over time: requested ("allocated") and reserved bytes after every trace entry.
//!
//! Accounting follows PyTorch's own counters: `alloc` adds its requested `size`,
//! `free_completed` removes it (`requested_bytes`); `segment_alloc`/`segment_map` add and
//! `segment_free`/`segment_unmap` remove reserved bytes (`reserved_bytes`). Memory that existed
//! before recording began — blocks allocated earlier, frees whose alloc fell out of the ring
//! buffer, segments mapped earlier — is recovered from the snapshot's final state: the value
//! before the first entry is the final state (Σ segment `requested_size` / `total_size`) minus
//! everything the trace added.
//!
//! Reserved bytes change only on segment events, so they are held as their changes
//! ([`EntrySteps`]), not one value per entry. Allocated bytes change on almost every entry, so
//! they are held as one value every [`STRIDE`] entries and recomputed from the entries between
//! (a prefix sum of their sizes) when read: the analyses read them at a few points and over
//! the training windows, and a whole series (8 bytes an entry, 280 MB on the 2 GB generated
//! snapshot, held beside the trace through every analysis) is made only for a run that keeps
//! the frames ([`Usage::frame`]).

use polars_core::prelude::*;

use crate::analysis::{device_segments, sum_i64, DeviceEvents};
use crate::tables::columns::{usage as usage_col, Col};
use crate::tables::entry_steps::EntrySteps;
use crate::tables::int_slice::IntSlice;
use crate::tables::{Action, SnapshotTables};

/// Entries between two held values of the allocated bytes.
const STRIDE: usize = 1024;

/// One device's usage series and its landmarks, read from its events `action` and `size`.
pub struct Usage<'a> {
    action: &'a [u8],
    size: IntSlice<'a>,
    /// Allocated bytes before entry `k * STRIDE`, for each `k` with entries there.
    marks: Vec<i64>,
    /// Reserved bytes after each entry, as their changes.
    pub reserved: EntrySteps,
    pub initial_allocated: i64,
    pub final_allocated: i64,
    pub peak_allocated: i64,
    /// First entry that reached the allocated peak (`None`: the peak predates the trace).
    pub peak_allocated_idx: Option<usize>,
    pub peak_reserved: i64,
    pub peak_reserved_idx: Option<usize>,
    /// The range of the allocated bytes after the entries, and a power of two every alloc and
    /// free size is a multiple of (up to 512): how [`Usage::frame`] holds the series.
    series: SeriesShape,
}

/// The range of a series and the unit its changes are multiples of.
#[derive(Debug, Clone, Copy)]
struct SeriesShape {
    min: i64,
    max: i64,
    /// log2 of the unit (0 to 9).
    shift: u32,
}

impl SeriesShape {
    /// Of a series whose changes are the sizes OR-ed into `size_bits`, between `min` and `max`.
    fn new(min: i64, max: i64, size_bits: u64) -> SeriesShape {
        SeriesShape {
            min,
            max,
            shift: size_bits.trailing_zeros().min(usage_col::ALLOCATED_MAX_SHIFT),
        }
    }

    /// Whether every value fits u32 units after the minimum.
    fn fits_units(&self) -> bool {
        self.max >= self.min && (self.max.wrapping_sub(self.min) as u64 >> self.shift) <= u64::from(u32::MAX)
    }
}

impl Usage<'_> {
    /// Entries the series covers.
    pub fn len(&self) -> usize {
        self.action.len()
    }
    pub fn is_empty(&self) -> bool {
        self.action.is_empty()
    }
    /// Allocated bytes right before entry `from` (at most the length).
    fn allocated_at(&self, from: usize) -> i64 {
        let k = from / STRIDE;
        let mut now = self.marks.get(k).copied().unwrap_or(self.final_allocated);
        for_each_allocated_change(&self.action[..from], &self.size, k * STRIDE, |d| {
            now = now.wrapping_add(d)
        });
        now
    }
    /// Allocated bytes right after each entry from entry `from` on.
    pub fn allocated_from(&self, from: usize) -> impl Iterator<Item = i64> + '_ {
        let from = from.min(self.len());
        let mut now = self.allocated_at(from);
        (from..self.len()).map(move |j| {
            now = now.wrapping_add(allocated_change(self.action[j], self.size.at(j)));
            now
        })
    }
    /// Allocated bytes right after entry `i` (`None` past the last entry).
    pub fn allocated_after(&self, i: usize) -> Option<i64> {
        (i < self.len()).then(|| self.allocated_from(i).next()).flatten()
    }
    /// Allocated bytes just before entry `i`.
    pub fn allocated_before(&self, i: usize) -> i64 {
        if i == 0 {
            self.initial_allocated
        } else {
            self.allocated_after(i - 1).unwrap_or(self.final_allocated)
        }
    }
    /// Column `allocated`, the value right after each entry (row `i` pairs with entry `i` of
    /// the device's events, whose `time_us` is the time axis): the whole series, made here.
    ///
    /// Held as u32 units of 512 bytes (`allocated_units`) while every value is a multiple of
    /// 512 between 0 and 2 TiB, as every PyTorch trace's are: 4 bytes an entry where i64 took 8
    /// (140 MB less on the 2 GB generated snapshot, for as long as its report is loaded). From
    /// the first value that is not, the column is i64 `allocated` ([`usage_col::allocated`]
    /// reads either).
    pub fn frame(&self) -> PolarsResult<DataFrame> {
        self.series().frame(self.action, &self.size)
    }
    /// What [`Usage::frame`] needs beyond the events' `action` and `size`, owned: the series
    /// can be made later, from those two columns alone (the pipeline makes it once the trace
    /// has let go of its addresses).
    pub fn series(&self) -> UsageSeries {
        UsageSeries {
            before_first: self.allocated_at(0),
            shape: self.series,
        }
    }
    /// Reserved bytes before the first entry.
    pub fn initial_reserved(&self) -> i64 {
        self.reserved.initial()
    }
    /// Reserved bytes after the last entry.
    pub fn final_reserved(&self) -> i64 {
        self.reserved.last()
    }
    pub fn reserved_before(&self, i: usize) -> i64 {
        self.reserved.before(i)
    }
}

/// A device's allocated series, as [`Usage::series`] leaves it to be made from the events'
/// `action` and `size` columns ([`UsageSeries::frame`]).
#[derive(Debug, Clone, Copy)]
pub struct UsageSeries {
    /// Allocated bytes before the first entry.
    before_first: i64,
    shape: SeriesShape,
}

impl UsageSeries {
    /// Column `allocated`, the value right after each entry (row `i` pairs with entry `i` of
    /// the device's events, whose `time_us` is the time axis), from the events' `action` and
    /// `size` ([`Usage::frame`] with these).
    ///
    /// Held as u32 units of 512 bytes (`allocated_units`) while every value is a multiple of
    /// 512 between 0 and 2 TiB, as every PyTorch trace's are: 4 bytes an entry where i64 took 8
    /// (140 MB less on the 2 GB generated snapshot, for as long as its report is loaded). From
    /// the first value that is not, the column is i64 `allocated` ([`usage_col::allocated`]
    /// reads either).
    pub fn frame(&self, action: &[u8], size: &IntSlice) -> PolarsResult<DataFrame> {
        let n = action.len();
        let shape = self.shape;
        let mut now = self.before_first;
        if n == 0 || !shape.fits_units() {
            let mut allocated: Vec<i64> = Vec::with_capacity(n);
            for_each_allocated_change(action, size, 0, |d| {
                now = now.wrapping_add(d);
                allocated.push(now)
            });
            return DataFrame::new(n, vec![usage_col::ALLOCATED.build(allocated)]);
        }
        let mut units: Vec<u32> = Vec::with_capacity(n);
        for_each_allocated_change(action, size, 0, |d| {
            now = now.wrapping_add(d);
            units.push((now.wrapping_sub(shape.min) as u64 >> shape.shift) as u32)
        });
        let scalar =
            |name: &str, v: i64| Column::new_scalar(name.into(), Scalar::new(DataType::Int64, AnyValue::Int64(v)), n);
        DataFrame::new(
            n,
            vec![
                // From the vector as it is (`Column::new` would copy it).
                Col::<UInt32Type>::new(usage_col::ALLOCATED_UNITS).build(units),
                scalar(usage_col::ALLOCATED_BASE, shape.min),
                scalar(usage_col::ALLOCATED_SHIFT, i64::from(shape.shift)),
            ],
        )
    }
}

/// Each action code's sign on the allocated bytes (`alloc` adds its size, `free_completed`
/// removes it) and on the reserved bytes (`segment_alloc`/`segment_map` add, `segment_free`/
/// `segment_unmap` remove): [`deltas`] as one multiply each instead of a match, in the loops
/// over every entry below.
const ALLOCATED_SIGN: [i64; 256] = sign_table(&[(Action::Alloc, 1), (Action::FreeCompleted, -1)]);
const RESERVED_SIGN: [i64; 256] = sign_table(&[
    (Action::SegmentAlloc, 1),
    (Action::SegmentMap, 1),
    (Action::SegmentFree, -1),
    (Action::SegmentUnmap, -1),
]);

/// A sign for each action code: those listed, 0 for the rest.
const fn sign_table(signs: &[(Action, i64)]) -> [i64; 256] {
    let mut table = [0i64; 256];
    let mut k = 0;
    while k < signs.len() {
        table[signs[k].0 as usize] = signs[k].1;
        k += 1;
    }
    table
}

/// The change of the allocated bytes an entry of `action` and `size` makes (`deltas(..).0`).
#[inline(always)]
fn allocated_change(action: u8, size: i64) -> i64 {
    ALLOCATED_SIGN[usize::from(action)].wrapping_mul(size)
}

/// The change of the reserved bytes an entry of `action` and `size` makes (`deltas(..).1`).
#[inline(always)]
fn reserved_change(action: u8, size: i64) -> i64 {
    RESERVED_SIGN[usize::from(action)].wrapping_mul(size)
}

/// Calls `f` with the action and size of each entry of `action`, from entry `from` on, in
/// order: one loop for each form of the size column, instead of a match on the form for every
/// entry.
#[inline(always)]
fn for_each_entry(action: &[u8], size: &IntSlice, from: usize, mut f: impl FnMut(u8, i64)) {
    let action = &action[from.min(action.len())..];
    let n = action.len();
    match *size {
        IntSlice::U32 { base, shift, offsets } => {
            for (&a, &o) in action.iter().zip(&offsets[from..from + n]) {
                f(a, base + (i64::from(o) << shift));
            }
        }
        IntSlice::Coded { codes, values } => {
            for (&a, &c) in action.iter().zip(&codes[from..from + n]) {
                f(a, values[usize::from(c)]);
            }
        }
        IntSlice::I64(v) => {
            for (&a, &s) in action.iter().zip(&v[from..from + n]) {
                f(a, s);
            }
        }
    }
}

/// [`for_each_entry`] giving each entry's allocated change.
#[inline(always)]
fn for_each_allocated_change(action: &[u8], size: &IntSlice, from: usize, mut f: impl FnMut(i64)) {
    for_each_entry(action, size, from, |a, s| f(allocated_change(a, s)));
}

/// Per-entry change of requested and reserved bytes.
pub fn deltas(action: u8, size: i64) -> (i64, i64) {
    match Action::from_code(action) {
        Action::Alloc => (size, 0),
        Action::FreeCompleted => (-size, 0),
        Action::SegmentAlloc | Action::SegmentMap => (0, size),
        Action::SegmentFree | Action::SegmentUnmap => (0, -size),
        _ => (0, 0),
    }
}

/// The entry after which the allocated bytes are highest above where the trace starts (the
/// first such entry), `None` when they never rise above it: [`Usage::peak_allocated_idx`]
/// without the series, from the two columns it needs, so the fragmentation replay can sample
/// the peak without waiting for the usage.
pub fn peak_allocated_entry(action: &[u8], size: IntSlice) -> Option<usize> {
    let (mut now, mut peak, mut at, mut i) = (0i64, 0i64, None, 0usize);
    for_each_allocated_change(action, &size, 0, |d| {
        now = now.wrapping_add(d);
        if now > peak {
            peak = now;
            at = Some(i);
        }
        i += 1;
    });
    at
}

pub fn usage_over_time<'a>(t: &SnapshotTables, ev: &'a DeviceEvents) -> PolarsResult<Usage<'a>> {
    let (segs, _) = device_segments(t, ev.device)?;
    let final_allocated = sum_i64(&segs, "requested_size")?;
    let final_reserved = sum_i64(&segs, "total_size")?;
    let (action, size) = (ev.action(), ev.size());
    let (mut sum_a, mut sum_r) = (0i64, 0i64);
    for_each_entry(action, &size, 0, |a, s| {
        sum_a = sum_a.wrapping_add(allocated_change(a, s));
        sum_r = sum_r.wrapping_add(reserved_change(a, s));
    });
    // Without segments (a trace-only dump) the trace is all we know: start from zero.
    let (initial_allocated, initial_reserved) = if segs.height() == 0 {
        (0, 0)
    } else {
        ((final_allocated - sum_a).max(0), (final_reserved - sum_r).max(0))
    };

    let n = action.len();
    let mut marks = Vec::with_capacity(n.div_ceil(STRIDE));
    let mut reserved = EntrySteps::starting_at(initial_reserved);
    let (mut a_now, mut r_now) = (initial_allocated, initial_reserved);
    let (mut peak_a, mut peak_a_idx, mut peak_r, mut peak_r_idx) = (a_now, None, r_now, None);
    let (mut series_min, mut series_max, mut size_bits) = (i64::MAX, i64::MIN, 0u64);
    let mut i = 0usize;
    for_each_entry(action, &size, 0, |a, s| {
        if i.is_multiple_of(STRIDE) {
            marks.push(a_now);
        }
        let (da, dr) = (allocated_change(a, s), reserved_change(a, s));
        a_now = a_now.wrapping_add(da);
        r_now = r_now.wrapping_add(dr);
        size_bits |= da.unsigned_abs();
        series_min = series_min.min(a_now);
        series_max = series_max.max(a_now);
        if a_now > peak_a {
            peak_a = a_now;
            peak_a_idx = Some(i);
        }
        if r_now > peak_r {
            peak_r = r_now;
            peak_r_idx = Some(i);
        }
        reserved.push(r_now);
        i += 1;
    });
    Ok(Usage {
        action,
        size,
        marks,
        reserved,
        initial_allocated,
        final_allocated: if n == 0 { initial_allocated } else { a_now },
        peak_allocated: peak_a,
        peak_allocated_idx: peak_a_idx,
        peak_reserved: peak_r,
        peak_reserved_idx: peak_r_idx,
        series: SeriesShape::new(series_min, series_max, size_bits),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::testing::Lcg;

    /// A usage over `action` and `size` from `initial`, its marks made as `usage_over_time`
    /// makes them.
    fn usage<'a>(action: &'a [u8], size: &'a [i64], initial: i64) -> (Usage<'a>, Vec<i64>) {
        let mut now = initial;
        let mut series = Vec::new();
        let mut marks = Vec::new();
        let mut bits = 0u64;
        for (i, (&a, &s)) in action.iter().zip(size).enumerate() {
            if i % STRIDE == 0 {
                marks.push(now);
            }
            now += deltas(a, s).0;
            bits |= deltas(a, s).0.unsigned_abs();
            series.push(now);
        }
        let shape = SeriesShape::new(
            series.iter().copied().min().unwrap_or(0),
            series.iter().copied().max().unwrap_or(0),
            bits,
        );
        let u = Usage {
            action,
            size: size.into(),
            marks,
            reserved: EntrySteps::starting_at(0),
            initial_allocated: initial,
            final_allocated: now,
            peak_allocated: 0,
            peak_allocated_idx: None,
            peak_reserved: 0,
            peak_reserved_idx: None,
            series: shape,
        };
        (u, series)
    }

    #[test]
    fn allocated_bytes_read_anywhere_are_the_whole_series() {
        let mut rng = Lcg(11);
        for n in [0usize, 1, STRIDE - 1, STRIDE, STRIDE + 1, 3 * STRIDE + 17] {
            let action: Vec<u8> = (0..n)
                .map(|_| match rng.below(3) {
                    0 => Action::Alloc as u8,
                    1 => Action::FreeCompleted as u8,
                    _ => Action::SegmentAlloc as u8,
                })
                .collect();
            let size: Vec<i64> = (0..n).map(|_| rng.below(1 << 20) as i64).collect();
            let (u, series) = usage(&action, &size, 1 << 30);
            assert_eq!(u.allocated_from(0).collect::<Vec<_>>(), series, "{n} entries");
            assert_eq!(u.frame().expect("frame").height(), n);
            // Sizes of 512-byte units over a range past 2 TiB (units from the least do not fit
            // u32), of 512-byte units (they do), of 4 bytes, and of odd bytes over a range past
            // 4 GiB (held as i64).
            for (unit, scale, odd) in [(512i64, 1i64 << 12, 0), (512, 1, 0), (4, 1, 0), (1, 1 << 14, 1)] {
                let size: Vec<i64> = size.iter().map(|&s| s.max(1) * unit * scale + odd).collect();
                let (u, series) = usage(&action, &size, 1 << 50);
                let frame = u.frame().expect("frame");
                let read = usage_col::allocated(&frame).expect("allocated");
                assert_eq!(read.to_vec(), series, "{n} entries of {unit}-byte units × {scale}");
                let range = series
                    .iter()
                    .max()
                    .zip(series.iter().min())
                    .map_or(0, |(hi, lo)| hi - lo);
                // The unit is the largest power of two up to 512 that every change is a multiple of.
                let changes = series.windows(2).fold(0, |bits, w| bits | (w[1] - w[0]).unsigned_abs());
                let changes = changes | series.first().map_or(0, |&v| (v - (1 << 50)).unsigned_abs());
                let shift = changes.trailing_zeros().min(9);
                let narrow = n > 0 && (range as u64 >> shift) <= u64::from(u32::MAX);
                assert_eq!(
                    matches!(read, IntSlice::U32 { .. }),
                    narrow,
                    "{n} entries of {unit} × {scale}"
                );
            }
            for i in [0, 1, STRIDE - 1, STRIDE, STRIDE + 1, n.saturating_sub(1), n, n + 5] {
                assert_eq!(u.allocated_after(i), series.get(i).copied(), "after {i} of {n}");
                let before = if i == 0 {
                    1 << 30
                } else {
                    *series.get(i - 1).unwrap_or(&u.final_allocated)
                };
                assert_eq!(u.allocated_before(i), before, "before {i} of {n}");
                assert_eq!(
                    u.allocated_from(i).collect::<Vec<_>>(),
                    series[i.min(n)..],
                    "from {i} of {n}"
                );
            }
        }
    }

    #[test]
    fn the_sign_tables_give_the_deltas_of_every_action_code() {
        for code in 0..=u8::MAX {
            for size in [0, 1, 512, -7, i64::MAX, i64::MIN + 1] {
                let changes = (allocated_change(code, size), reserved_change(code, size));
                assert_eq!(changes, deltas(code, size), "action {code}, size {size}");
            }
        }
    }

    #[test]
    fn every_form_of_the_size_column_is_read_entry_by_entry_in_order() {
        let mut rng = Lcg(5);
        let n = 3 * STRIDE + 5;
        let action: Vec<u8> = (0..n).map(|_| rng.below(12) as u8).collect();
        let offsets: Vec<u32> = (0..n).map(|_| rng.below(1 << 20) as u32).collect();
        let values: Vec<i64> = (0..7).map(|k| 512 * (k + 1)).collect();
        let codes: Vec<u16> = (0..n).map(|_| rng.below(7) as u16).collect();
        let wide: Vec<i64> = offsets.iter().map(|&o| (i64::from(o) << 9) - (1 << 28)).collect();
        let forms = [
            IntSlice::U32 {
                base: 1 << 40,
                shift: 9,
                offsets: &offsets,
            },
            IntSlice::Coded {
                codes: &codes,
                values: &values,
            },
            IntSlice::I64(&wide),
        ];
        for size in forms {
            for from in [0, 1, STRIDE, n - 1, n] {
                let mut read = Vec::new();
                for_each_entry(&action, &size, from, |a, s| read.push((a, s)));
                let expected: Vec<(u8, i64)> = (from..n).map(|i| (action[i], size.at(i))).collect();
                assert_eq!(read, expected, "from {from}");
            }
        }
    }
}
