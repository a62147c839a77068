//! A min/max pyramid over one step series (allocated or reserved bytes after every entry), so
//! a timeline's per-bucket min/max costs a few hundred steps per bucket instead of one per
//! entry: a bucket's entries are folded in as whole aligned blocks of 64, 4,096, 262,144, …
//! entries wherever a block lies inside the bucket, and one by one only at its edges.
//!
//! The answer is exactly [`super::bucket_min_max`]'s: a block is folded in only when every one
//! of its entries falls in the bucket, which holds because the positions are sorted (the
//! pyramid is built only over sorted positions).

use super::series::Series;
use crate::int_slice::IntSlice;
/// Entries per block of the finest level; each coarser level groups this many blocks.
const FANOUT: usize = 64;

/// An entry's position on the timeline's axis: the stored times (held narrow or as i64), or
/// the entry index itself.
#[derive(Clone, Copy)]
pub enum Positions<'a> {
    Times(IntSlice<'a>),
    EntryIndex(usize),
}

impl Positions<'_> {
    pub fn len(&self) -> usize {
        match self {
            Positions::Times(t) => t.len(),
            Positions::EntryIndex(n) => *n,
        }
    }

    #[inline]
    pub fn at(&self, i: usize) -> i64 {
        match self {
            Positions::Times(t) => t.at(i),
            Positions::EntryIndex(_) => i as i64,
        }
    }

    /// The first and last position (an empty trace spans `0..1`; the end is after the start).
    pub fn full_range(&self) -> (i64, i64) {
        let n = self.len();
        let first = if n == 0 { 0 } else { self.at(0) };
        let last = if n == 0 { 0 } else { self.at(n - 1) };
        (first, last.max(first + 1))
    }

    /// Entries at positions before `x` (the positions are sorted).
    pub fn before(&self, x: i64) -> usize {
        match self {
            Positions::Times(t) => t.partition_point(|p| p < x),
            Positions::EntryIndex(n) => x.clamp(0, *n as i64) as usize,
        }
    }

    /// Whether the positions never decrease.
    pub fn sorted(&self) -> bool {
        match self {
            Positions::Times(t) => t.is_sorted(),
            Positions::EntryIndex(_) => true,
        }
    }
}

/// One level: the min and max of each aligned block of `block` entries (a shorter last block
/// is left out: its entries are read one by one).
struct Level {
    block: usize,
    min: Vec<i64>,
    max: Vec<i64>,
}

impl Level {
    /// The min and max of each `FANOUT` entries of `values`.
    fn of_values<S: Series>(values: S) -> Level {
        let blocks = values.len() / FANOUT;
        let (mut min, mut max) = (Vec::with_capacity(blocks), Vec::with_capacity(blocks));
        for b in 0..blocks {
            let (lo, hi) = values.fold_min_max(b * FANOUT, (b + 1) * FANOUT, (i64::MAX, i64::MIN));
            min.push(lo);
            max.push(hi);
        }
        Level {
            block: FANOUT,
            min,
            max,
        }
    }

    /// The min of each `FANOUT` of `mins` and the max of each `FANOUT` of `maxs`, as blocks of
    /// `FANOUT` entries.
    fn of_blocks(mins: &[i64], maxs: &[i64]) -> Level {
        let blocks = mins.len().min(maxs.len()) / FANOUT;
        let (mut min, mut max) = (Vec::with_capacity(blocks), Vec::with_capacity(blocks));
        for (lo, hi) in mins.chunks_exact(FANOUT).zip(maxs.chunks_exact(FANOUT)) {
            let (mut a, mut b) = (lo[0], hi[0]);
            for k in 0..FANOUT {
                a = a.min(lo[k]);
                b = b.max(hi[k]);
            }
            min.push(a);
            max.push(b);
        }
        Level {
            block: FANOUT,
            min,
            max,
        }
    }
}

/// Block minima and maxima of one series at every level, finest first.
pub struct MinMaxPyramid {
    levels: Vec<Level>,
}

/// No blocks: every entry is read one by one.
pub static NO_BLOCKS: MinMaxPyramid = MinMaxPyramid { levels: Vec::new() };

impl MinMaxPyramid {
    pub fn build<S: Series>(values: S) -> MinMaxPyramid {
        let mut levels: Vec<Level> = Vec::new();
        let finest = Level::of_values(values);
        if finest.min.len() < 2 {
            return MinMaxPyramid { levels };
        }
        levels.push(finest);
        loop {
            let below = levels.last().expect("a level");
            if below.min.len() < 2 * FANOUT {
                break;
            }
            let mut level = Level::of_blocks(&below.min, &below.max);
            level.block = below.block * FANOUT;
            levels.push(level);
        }
        MinMaxPyramid { levels }
    }

    /// Heap bytes held.
    pub fn bytes(&self) -> usize {
        self.levels.iter().map(|l| (l.min.len() + l.max.len()) * 8).sum()
    }

    /// Whether it has no blocks (every entry is read one by one).
    pub fn is_empty(&self) -> bool {
        self.levels.is_empty()
    }

    /// The levels with a block starting at entry `i` that ends within the first `len` entries,
    /// coarsest first, with their position in `levels`.
    #[inline]
    fn levels_at(&self, i: usize, len: usize) -> impl Iterator<Item = (usize, &Level)> + '_ {
        self.levels
            .iter()
            .enumerate()
            .rev()
            .filter(move |(_, l)| i.is_multiple_of(l.block) && i / l.block < l.min.len() && i + l.block <= len)
    }

    /// The blocks starting at entry `i` within the first `len` entries, coarsest first, as
    /// (entries, min, max).
    #[inline]
    fn blocks_at(&self, i: usize, len: usize) -> impl Iterator<Item = (usize, i64, i64)> + '_ {
        self.levels_at(i, len)
            .map(move |(_, l)| (l.block, l.min[i / l.block], l.max[i / l.block]))
    }
}

impl MinMaxPyramid {
    /// The first entry of `lo..hi` (not empty) holding the largest of `values` there (the
    /// values this pyramid was built over).
    pub fn first_max<S: Series>(&self, values: S, lo: usize, hi: usize) -> usize {
        // The largest value seen, where, and the level of the block it is the max of.
        let (mut target, mut at, mut level) = (values.at(lo), lo, None);
        let mut i = lo;
        while i < hi {
            let (value, len, of) = match self.levels_at(i, hi).next() {
                Some((li, l)) => (l.max[i / l.block], l.block, Some(li)),
                None => (values.at(i), 1, None),
            };
            if value > target {
                (target, at, level) = (value, i, of);
            }
            i += len;
        }
        // Down to the first entry of that block holding it.
        while let Some(li) = level {
            let below = li.checked_sub(1);
            let step = below.map_or(1, |b| self.levels[b].block);
            let value_at = |j: usize| below.map_or_else(|| values.at(j), |b| self.levels[b].max[j / step]);
            let block = self.levels[li].block;
            at = (at..at + block)
                .step_by(step)
                .find(|&j| value_at(j) == target)
                .unwrap_or(at);
            level = below;
        }
        at
    }
}

/// Where each of `width` buckets between `start` and `end` ends: the first position past bucket
/// `b`.
#[derive(Clone, Copy)]
pub(super) struct BucketEdges {
    start: i64,
    span: i128,
    width: usize,
}

impl BucketEdges {
    pub(super) fn new(start: i64, end: i64, width: usize) -> BucketEdges {
        BucketEdges {
            start,
            span: (end - start).max(1) as i128,
            width: width.max(1),
        }
    }

    pub(super) fn after(&self, b: usize) -> i64 {
        let w = self.width as i128;
        self.start + ((self.span * (b as i128 + 1) + w - 1) / w) as i64
    }
}

/// The entries of each of `width` buckets between `start` and `end`, over the first `n` of
/// `positions`, which never decrease: the first entry at or after `start`, and where each
/// bucket's run of entries ends (bucket b before the first entry at its right edge, the last
/// at the last entry at or before `end`).
pub(super) fn sorted_bucket_ends(
    positions: Positions<'_>,
    n: usize,
    start: i64,
    end: i64,
    width: usize,
) -> (usize, impl Iterator<Item = usize> + '_) {
    let edges = BucketEdges::new(start, end, width);
    let first = positions.before(start).min(n);
    let last_end = positions.before(end.saturating_add(1)).clamp(first, n);
    let mut lo = first;
    let ends = (0..edges.width).map(move |b| {
        lo = if b + 1 < edges.width {
            positions.before(edges.after(b)).clamp(lo, last_end)
        } else {
            last_end
        };
        lo
    });
    (first, ends)
}

/// [`super::bucket_min_max`] over positions that never decrease ([`Positions::sorted`]): each
/// bucket's entries found by a binary search for its right edge, then the min and max of that
/// run of values, both in one pass (two folds, one for each, took six times as long) — the
/// entry-by-entry answer of [`bucket_min_max_by_blocks`] without blocks, in a fraction of its
/// time on a 2 GB snapshot's first view (35 M entries), which every ingest draws, and its chart.
pub fn bucket_min_max_sorted<S: Series>(
    positions: Positions<'_>,
    values: S,
    before: i64,
    start: i64,
    end: i64,
    width: usize,
) -> (Vec<i64>, Vec<i64>) {
    let n = positions.len().min(values.len());
    let (first, ends) = sorted_bucket_ends(positions, n, start, end, width);
    let mut current = if first == 0 { before } else { values.at(first - 1) };
    let (mut mins, mut maxs) = (Vec::with_capacity(width.max(1)), Vec::with_capacity(width.max(1)));
    let mut lo = first;
    for hi in ends {
        let (min, max) = values.fold_min_max(lo, hi, (current, current));
        if hi > lo {
            current = values.at(hi - 1);
        }
        mins.push(min);
        maxs.push(max);
        lo = hi;
    }
    (mins, maxs)
}

/// [`super::bucket_min_max`] over `positions`, in any order (an entry goes to the bucket the
/// last one went to or a later one), entry by entry, folding whole blocks of `pyramid` (built
/// over `values`) into a bucket wherever they lie inside it.
pub fn bucket_min_max_by_blocks<S: Series>(
    positions: Positions<'_>,
    values: S,
    pyramid: &MinMaxPyramid,
    before: i64,
    start: i64,
    end: i64,
    width: usize,
) -> (Vec<i64>, Vec<i64>) {
    let width = width.max(1);
    let edges = BucketEdges::new(start, end, width);
    let next_edge = |b: usize| edges.after(b);
    let n = positions.len().min(values.len());
    let first = positions.before(start).min(n);
    let mut current = if first == 0 { before } else { values.at(first - 1) };
    let mut mins = vec![i64::MAX; width];
    let mut maxs = vec![i64::MIN; width];
    let mut b = 0usize;
    let mut edge = next_edge(0);
    mins[0] = current;
    maxs[0] = current;
    let mut i = first;
    while i < n {
        let t = positions.at(i);
        if t > end {
            break;
        }
        while t >= edge && b + 1 < width {
            b += 1;
            edge = next_edge(b);
            mins[b] = current;
            maxs[b] = current;
        }
        if i.is_multiple_of(FANOUT) {
            let fits = pyramid.blocks_at(i, n).find(|&(len, _, _)| {
                let t_last = positions.at(i + len - 1);
                t_last <= end && (b + 1 == width || t_last < edge)
            });
            if let Some((len, lo, hi)) = fits {
                mins[b] = mins[b].min(lo);
                maxs[b] = maxs[b].max(hi);
                current = values.at(i + len - 1);
                i += len;
                continue;
            }
        }
        current = values.at(i);
        mins[b] = mins[b].min(current);
        maxs[b] = maxs[b].max(current);
        i += 1;
    }
    while b + 1 < width {
        b += 1;
        mins[b] = current;
        maxs[b] = current;
    }
    (mins, maxs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::{test_times, test_window_on, test_windows, xorshift};

    #[test]
    fn folding_whole_blocks_gives_the_entry_by_entry_answer() {
        let mut next = xorshift(0x2545F4914F6CDD1D);
        // Three levels of blocks; runs of equal times straddle block and bucket edges.
        let n = 600_000;
        let times = test_times(&mut next, n, 4, 50);
        let values: Vec<i64> = (0..n).map(|_| (next() % 1_000_000) as i64).collect();
        let pyramid = MinMaxPyramid::build(&values[..]);
        assert_eq!(pyramid.levels.len(), 3);
        let offsets: Vec<u32> = values.iter().map(|&v| v as u32).collect();
        let units = crate::query::series::Units {
            base: -512,
            shift: 9,
            offsets: &offsets,
        };
        let unit_pyramid = MinMaxPyramid::build(units);
        let (first, last) = Positions::Times(times[..].into()).full_range();
        for (start, end, width) in test_windows(&mut next, first, last, 60) {
            for positions in [Positions::Times(times[..].into()), Positions::EntryIndex(n)] {
                let (s, e) = test_window_on(positions, (start, end), first, last);
                let by_blocks = bucket_min_max_by_blocks(positions, &values[..], &pyramid, 7, s, e, width);
                let by_entries = bucket_min_max_by_blocks(positions, &values[..], &NO_BLOCKS, 7, s, e, width);
                assert!(by_blocks == by_entries, "window {s}..{e} at width {width}");
                let by_buckets = bucket_min_max_sorted(positions, &values[..], 7, s, e, width);
                assert!(
                    by_buckets == by_entries,
                    "a bucket at a time, window {s}..{e} at width {width}"
                );
                // The same values held as units of 512 bytes after a base answer the same.
                let in_units = |(min, max): (Vec<i64>, Vec<i64>)| {
                    let bytes = |v: Vec<i64>| v.into_iter().map(|x| -512 + x * 512).collect::<Vec<_>>();
                    (bytes(min), bytes(max))
                };
                assert!(
                    bucket_min_max_by_blocks(positions, units, &unit_pyramid, 7 * 512 - 512, s, e, width)
                        == in_units(by_entries.clone())
                );
                assert!(bucket_min_max_sorted(positions, units, 7 * 512 - 512, s, e, width) == in_units(by_entries));
            }
        }
        for _ in 0..300 {
            let (a, b) = ((next() % n as u64) as usize, (next() % n as u64) as usize);
            let (lo, hi) = (a.min(b), a.max(b) + 1);
            let max = values[lo..hi].iter().max().copied();
            let first = values[lo..hi].iter().position(|&v| Some(v) == max).map(|p| lo + p);
            assert_eq!(Some(pyramid.first_max(&values[..], lo, hi)), first, "{lo}..{hi}");
            assert_eq!(
                Some(unit_pyramid.first_max(units, lo, hi)),
                first,
                "{lo}..{hi} in units"
            );
        }
    }

    #[test]
    fn a_bucket_at_a_time_is_the_entry_by_entry_answer() {
        let mut next = xorshift(0x9E3779B97F4A7C15);
        for (n, hold, step) in [(0, 2, 5), (1, 2, 5), (7, 2, 3), (5_000, 3, 40), (50_000, 1, 2)] {
            let times = test_times(&mut next, n, hold, step);
            let values: Vec<i64> = (0..n).map(|_| (next() % 1000) as i64 - 500).collect();
            let (first, last) = Positions::Times(times[..].into()).full_range();
            for (start, end, width) in test_windows(&mut next, first, last.max(first + 2), 40) {
                for positions in [Positions::Times(times[..].into()), Positions::EntryIndex(n)] {
                    let (s, e) = test_window_on(positions, (start, end), first, last.max(first + 2));
                    let e = e.max(s + 1);
                    let sorted = bucket_min_max_sorted(positions, &values[..], -9, s, e, width);
                    let entries = bucket_min_max_by_blocks(positions, &values[..], &NO_BLOCKS, -9, s, e, width);
                    assert!(sorted == entries, "{n} entries, window {s}..{e} at width {width}");
                    assert_eq!(sorted.0.len(), width.max(1));
                }
            }
        }
    }
}
