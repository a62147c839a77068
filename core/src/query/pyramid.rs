//! A min/max pyramid over one step series (allocated or reserved bytes after every entry), so
//! a timeline's per-bucket min/max costs a few hundred steps per bucket instead of one per
//! entry: a bucket's entries are folded in as whole aligned blocks of 64, 4,096, 262,144, …
//! entries wherever a block lies inside the bucket, and one by one only at its edges.
//!
//! The answer is exactly [`super::bucket_min_max`]'s: a block is folded in only when every one
//! of its entries falls in the bucket, which holds because the positions are sorted (the
//! pyramid is built only over sorted positions).

use super::series::Series;
use crate::tables::int_slice::IntSlice;
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

    /// [`Positions::before`] for positions that never decrease, searched within `lo..=hi` where
    /// every position before `lo` is below `x`, capped at `hi`: a gallop from `lo`, so a search
    /// just after the last one (a timeline's next bucket edge) reads a few nearby positions
    /// instead of a binary search's scattered ones over the whole trace.
    pub fn before_from(&self, x: i64, lo: usize, hi: usize) -> usize {
        match self {
            Positions::Times(t) => {
                // Every position in `lo..bound` is below `x`; the next probe is `step` past it.
                let (mut bound, mut step) = (lo, 1);
                let limit = loop {
                    let probe = bound + step - 1;
                    if probe >= hi {
                        break hi;
                    }
                    if t.at(probe) >= x {
                        break probe;
                    }
                    bound = probe + 1;
                    step *= 2;
                };
                bound + t.slice(bound..limit).partition_point(|p| p < x)
            }
            Positions::EntryIndex(n) => (x.clamp(0, *n as i64) as usize).clamp(lo, hi),
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

    /// `init` with the min and max of `values[lo..hi]` (the values this pyramid was built over)
    /// folded in: the whole blocks of the coarsest level that has one inside the range from its
    /// level, the rest at each end likewise from the levels below, and entries one by one only
    /// within a finest block at either end — at most `2 × FANOUT` reads a level.
    #[inline]
    pub fn fold_min_max<S: Series>(&self, values: S, lo: usize, hi: usize, init: (i64, i64)) -> (i64, i64) {
        if self.levels.is_empty() {
            return values.fold_min_max(lo, hi, init);
        }
        self.fold_below(self.levels.len(), values, lo, hi, init)
    }

    /// [`MinMaxPyramid::fold_min_max`] with the first `levels` levels alone.
    fn fold_below<S: Series>(&self, levels: usize, values: S, lo: usize, hi: usize, init: (i64, i64)) -> (i64, i64) {
        for (li, l) in self.levels[..levels].iter().enumerate().rev() {
            // The level's whole blocks inside the range.
            let (first, last) = (lo.div_ceil(l.block), (hi / l.block).min(l.min.len()));
            if first < last {
                let (mut min, mut max) = init;
                for (&a, &b) in l.min[first..last].iter().zip(&l.max[first..last]) {
                    min = min.min(a);
                    max = max.max(b);
                }
                let head = self.fold_below(li, values, lo, first * l.block, (min, max));
                return self.fold_below(li, values, last * l.block, hi, head);
            }
        }
        values.fold_min_max(lo, hi, init)
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

/// The entries of each of `width` buckets between `start` and `end`, over positions that never
/// decrease: found once and folded by each series of a timeline.
pub(super) struct BucketRuns {
    /// The first entry at or after `start`.
    pub first: usize,
    /// Where each bucket's run of entries ends: bucket `b` before the first entry at its right
    /// edge, the last at the last entry at or before `end`.
    pub ends: Vec<usize>,
}

impl BucketRuns {
    /// The runs over the first `n` of `positions` ([`Positions::sorted`]).
    pub(super) fn of_sorted(positions: Positions<'_>, n: usize, start: i64, end: i64, width: usize) -> BucketRuns {
        let edges = BucketEdges::new(start, end, width);
        let first = positions.before(start).min(n);
        let last_end = positions.before(end.saturating_add(1)).clamp(first, n);
        let mut lo = first;
        let ends = (0..edges.width)
            .map(|b| {
                lo = if b + 1 < edges.width {
                    positions.before_from(edges.after(b), lo, last_end)
                } else {
                    last_end
                };
                lo
            })
            .collect();
        BucketRuns { first, ends }
    }
}

/// [`super::bucket_min_max`] over positions that never decrease, in `runs`: each bucket's run
/// of values folded from the value before it, whole blocks of `pyramid` (built over `values`,
/// or [`NO_BLOCKS`]) read from the pyramid — the entry-by-entry answer of
/// [`bucket_min_max_by_entries`]. Without blocks, a run's min and max are found in one pass
/// rather than two folds: a large snapshot's first view, which every ingest draws, and its
/// chart.
pub(super) fn bucket_min_max_sorted<S: Series>(
    runs: &BucketRuns,
    values: S,
    pyramid: &MinMaxPyramid,
    before: i64,
) -> (Vec<i64>, Vec<i64>) {
    let first = runs.first;
    let mut current = if first == 0 { before } else { values.at(first - 1) };
    let (mut mins, mut maxs) = (Vec::with_capacity(runs.ends.len()), Vec::with_capacity(runs.ends.len()));
    let mut lo = first;
    for &hi in &runs.ends {
        let (min, max) = pyramid.fold_min_max(values, lo, hi, (current, current));
        if hi > lo {
            current = values.at(hi - 1);
        }
        mins.push(min);
        maxs.push(max);
        lo = hi;
    }
    (mins, maxs)
}

/// [`super::bucket_min_max`] over `positions` in any order (an entry goes to the bucket the
/// last one went to or a later one), entry by entry.
pub fn bucket_min_max_by_entries<S: Series>(
    positions: Positions<'_>,
    values: S,
    before: i64,
    start: i64,
    end: i64,
    width: usize,
) -> (Vec<i64>, Vec<i64>) {
    let width = width.max(1);
    let edges = BucketEdges::new(start, end, width);
    let n = positions.len().min(values.len());
    let first = positions.before(start).min(n);
    let mut current = if first == 0 { before } else { values.at(first - 1) };
    let mut mins = vec![i64::MAX; width];
    let mut maxs = vec![i64::MIN; width];
    let mut b = 0usize;
    let mut edge = edges.after(0);
    mins[0] = current;
    maxs[0] = current;
    for i in first..n {
        let t = positions.at(i);
        if t > end {
            break;
        }
        while t >= edge && b + 1 < width {
            b += 1;
            edge = edges.after(b);
            mins[b] = current;
            maxs[b] = current;
        }
        current = values.at(i);
        mins[b] = mins[b].min(current);
        maxs[b] = maxs[b].max(current);
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
                let runs = BucketRuns::of_sorted(positions, n, s, e, width);
                let by_entries = bucket_min_max_by_entries(positions, &values[..], 7, s, e, width);
                let by_blocks = bucket_min_max_sorted(&runs, &values[..], &pyramid, 7);
                assert!(by_blocks == by_entries, "window {s}..{e} at width {width}");
                let by_buckets = bucket_min_max_sorted(&runs, &values[..], &NO_BLOCKS, 7);
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
                    bucket_min_max_sorted(&runs, units, &unit_pyramid, 7 * 512 - 512) == in_units(by_entries.clone())
                );
                assert!(bucket_min_max_sorted(&runs, units, &NO_BLOCKS, 7 * 512 - 512) == in_units(by_entries));
            }
        }
        // Any range's fold equals a pass over its values, whichever levels it spans.
        for _ in 0..2_000 {
            let lo = (next() % n as u64) as usize;
            let hi = lo + ((next() % (n - lo) as u64) >> (next() % 20)) as usize;
            let pass = values[lo..hi].iter().fold((3, 3), |(a, b), &v| (a.min(v), b.max(v)));
            assert_eq!(pyramid.fold_min_max(&values[..], lo, hi, (3, 3)), pass, "{lo}..{hi}");
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
                    let runs = BucketRuns::of_sorted(positions, n, s, e, width);
                    let sorted = bucket_min_max_sorted(&runs, &values[..], &NO_BLOCKS, -9);
                    let entries = bucket_min_max_by_entries(positions, &values[..], -9, s, e, width);
                    assert!(sorted == entries, "{n} entries, window {s}..{e} at width {width}");
                    assert_eq!(sorted.0.len(), width.max(1));
                }
            }
        }
    }

    #[test]
    fn a_gallop_from_a_known_bound_finds_what_a_binary_search_finds() {
        let mut next = xorshift(0xD1B54A32D192ED03);
        let times = test_times(&mut next, 20_000, 3, 9);
        let positions = Positions::Times(times[..].into());
        for _ in 0..5_000 {
            let x = times[0] - 5 + (next() % (times[times.len() - 1] - times[0] + 10) as u64) as i64;
            let found = positions.before(x);
            let lo = (next() % (found as u64 + 1)) as usize;
            let hi = lo + (next() % (times.len() - lo + 1) as u64) as usize;
            assert_eq!(positions.before_from(x, lo, hi), found.min(hi), "{x} from {lo} to {hi}");
        }
    }
}
