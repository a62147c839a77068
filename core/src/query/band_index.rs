//! Which allocations a timeline window draws as bands, without a pass over every allocation:
//! the largest [`super::MAX_BANDS`] of those live at some point of the window, and how many
//! there are.
//!
//! An allocation overlaps `[start, end]` when it was allocated at or before `end` and freed at
//! or after `start`. Those are the allocations born inside the window — a run of
//! [`BandIndex::by_alloc`], found by binary search — and those born before it and still live at
//! `start`, found from the nearest checkpoint's lists plus the few born since: the rows the
//! next checkpoint lists too are live at `start` without their free being read (a read of a
//! time at a free's entry, far apart in memory for each row), and only the others are checked.
//! The largest of the first come from a tree over `by_alloc` ([`super::largest`]), and every
//! candidate goes through one [`LargestRows`] selection, so a window costs about the
//! allocations live at its start plus a few tens of thousands, however many it holds. The
//! answer is exactly a full scan's: the same count and the same largest (ties by row).
//!
//! The index needs every allocation's free at or after its alloc on the axis; [`BandIndex::build`]
//! declines a device where that does not hold (times that go backwards), and the timeline
//! scans instead.

use super::largest::{LargestInRuns, LargestRows};
use super::row_list::{RowList, RowListBuilder, Rows};
use crate::tables::int_slice::IntSlice;

/// An allocation's endpoints on the timeline's axis: its alloc (`i64::MIN` when it predates the
/// trace) and its free (`i64::MAX` when never freed).
pub trait Endpoints {
    fn len(&self) -> usize;
    fn alloc(&self, i: usize) -> i64;
    fn free(&self, i: usize) -> i64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn overlaps(&self, i: usize, start: i64, end: i64) -> bool {
        self.alloc(i) <= end && self.free(i) >= start
    }
}

/// Rows of `by_alloc` between two checkpoints (at least; see [`checkpoints`]).
const MIN_SPACING: usize = 1024;

/// The allocations' orders and live-list checkpoints on one axis.
pub struct BandIndex {
    /// Rows by alloc position (ties by row): most often the rows themselves, held as their
    /// number alone.
    by_alloc: RowList,
    /// The largest rows of any run of `by_alloc`.
    largest: LargestInRuns,
    checkpoints: Checkpoints,
}

/// Checkpoint `c` sits before `by_alloc[c * spacing]`; it lists the rows allocated before it
/// that are freed after the last of those allocs, in alloc order.
struct Checkpoints {
    spacing: usize,
    lists: Vec<Listed>,
}

/// A checkpoint's rows, in two lists by whether a window that starts before the next
/// checkpoint may start after their free: those listed at the next checkpoint too do not need
/// their free read to know they are live at the window's start.
struct Listed {
    /// Listed at the next checkpoint too: freed after its last alloc, so after any start of a
    /// window whose born run begins before it.
    lasting: RowList,
    /// Listed here last (each listed row is, once): freed before the next checkpoint's last
    /// alloc, or listed at the last checkpoint.
    ending: RowList,
}

impl Listed {
    fn bytes(&self) -> usize {
        self.lasting.bytes() + self.ending.bytes()
    }
}

/// The allocations a window overlaps: the largest `limit` (by size, ties by row, in no
/// particular order) and how many overlap in all.
pub struct Overlapping {
    pub largest: Vec<usize>,
    pub total: usize,
}

impl BandIndex {
    /// The index over `ends` and `size`, for windows that draw up to `keep` bands; `None` when
    /// some allocation's free comes before its alloc, or there are more rows than a `u32`
    /// counts.
    pub fn build(ends: &impl Endpoints, size: IntSlice, keep: usize) -> Option<BandIndex> {
        let n = ends.len();
        if n != size.len() || u32::try_from(n).is_err() || (0..n).any(|i| ends.free(i) < ends.alloc(i)) {
            return None;
        }
        let by_alloc = if (1..n).all(|i| ends.alloc(i - 1) <= ends.alloc(i)) {
            RowList::rows(n)
        } else {
            let mut by_alloc: Vec<u32> = (0..n as u32).collect();
            // Stable: ties stay in row order.
            by_alloc.sort_by_key(|&i| ends.alloc(i as usize));
            RowList::from(&by_alloc[..])
        };
        let largest = LargestInRuns::build(&by_alloc, size, keep);
        let checkpoints = checkpoints(ends, &by_alloc);
        Some(BandIndex {
            by_alloc,
            largest,
            checkpoints,
        })
    }

    /// Heap bytes held.
    pub fn bytes(&self) -> usize {
        let lists = &self.checkpoints.lists;
        self.by_alloc.bytes()
            + lists.iter().map(Listed::bytes).sum::<usize>()
            + lists.len() * std::mem::size_of::<Listed>()
            + self.largest.bytes()
    }

    /// The allocations overlapping `[start, end]` (see [`Overlapping`]).
    pub fn overlapping(
        &self,
        ends: &impl Endpoints,
        size: IntSlice,
        start: i64,
        end: i64,
        limit: usize,
    ) -> Overlapping {
        let window = self.window(ends, start, end);
        let born = window.born.clone();
        let mut largest = LargestRows::new(size, limit);
        let mut total = born.len();
        let lasting = window.listed.lasting.iter_all();
        total += lasting.len();
        largest.extend(lasting.map(|i| i as usize));
        for i in window.may_have_ended(ends, start) {
            total += 1;
            largest.offer(i);
        }
        self.largest
            .candidates(&self.by_alloc, born.start, born.end, limit, &mut largest);
        Overlapping {
            largest: largest.into_rows(),
            total,
        }
    }

    /// Every allocation overlapping `[start, end]`, each once, in no particular order: those
    /// live at `start`, then those born inside the window. The caller loops over both itself:
    /// a visitor passed in was not inlined into the loop, and a full-range flame graph was
    /// measurably slower.
    pub fn overlapping_rows(&self, ends: &impl Endpoints, start: i64, end: i64) -> (Vec<usize>, Rows<'_>) {
        let window = self.window(ends, start, end);
        let born = self.by_alloc.iter(window.born.clone());
        let lasting = &window.listed.lasting;
        let mut live: Vec<usize> = lasting.iter_all().map(|i| i as usize).collect();
        live.extend(window.may_have_ended(ends, start));
        (live, born)
    }

    /// The allocations overlapping `[start, end]`: those born before `start` and live at it
    /// (the nearest checkpoint's lists, then the rows since), and the run of `by_alloc` born
    /// inside.
    fn window(&self, ends: &impl Endpoints, start: i64, end: i64) -> Window<'_> {
        let born_before = self.by_alloc.partition_point(|i| ends.alloc(i as usize) < start);
        let born_by_end = self
            .by_alloc
            .partition_point(|i| ends.alloc(i as usize) <= end)
            .max(born_before);
        let cp = &self.checkpoints;
        let c = born_before / cp.spacing;
        Window {
            listed: &cp.lists[c],
            since: self.by_alloc.iter(c * cp.spacing..born_before),
            born: born_before..born_by_end,
        }
    }
}

/// The allocations a window overlaps, in parts: those born before its start (the checkpoint's
/// lists and the rows since it), and those born inside.
struct Window<'a> {
    /// Rows listed at the checkpoint before `start`: its lasting ones are all live at `start`,
    /// its ending ones are live if freed at or after it.
    listed: &'a Listed,
    /// Rows born between the checkpoint and `start`: live if freed at or after it.
    since: Rows<'a>,
    /// Positions in `by_alloc`.
    born: std::ops::Range<usize>,
}

impl<'a> Window<'a> {
    /// The rows born before `start` whose free must be read to know they are live at it, those
    /// that are.
    fn may_have_ended<E: Endpoints>(self, ends: &'a E, start: i64) -> impl Iterator<Item = usize> + 'a {
        self.listed
            .ending
            .iter_all()
            .chain(self.since)
            .map(|i| i as usize)
            .filter(move |&i| ends.free(i) >= start)
    }
}

/// The last alloc position before each checkpoint `c` (`i64::MIN` for the first).
fn checkpoint_times(ends: &impl Endpoints, by_alloc: &RowList, spacing: usize) -> Vec<i64> {
    (0..=by_alloc.len() / spacing)
        .map(|c| match c {
            0 => i64::MIN,
            c => ends.alloc(by_alloc.at(c * spacing - 1) as usize),
        })
        .collect()
}

/// For each row (in alloc order, at `k`), the checkpoints that list it: those after it whose
/// time is before its free, as `first..last`.
fn listed_in(free: i64, k: usize, spacing: usize, times: &[i64]) -> std::ops::Range<usize> {
    let first = k / spacing + 1;
    if times.get(first).is_none_or(|&t| t >= free) {
        // Freed before the next checkpoint: most allocations.
        return first..first;
    }
    let last = first + times[first..].partition_point(|&t| t < free);
    first..last
}

/// How many rows the checkpoints list in all.
fn rows_listed(ends: &impl Endpoints, by_alloc: &RowList, times: &[i64], spacing: usize) -> usize {
    by_alloc
        .iter_all()
        .enumerate()
        .map(|(k, i)| listed_in(ends.free(i as usize), k, spacing, times).len())
        .sum()
}

/// Checkpoints and their live lists. The spacing is [`MIN_SPACING`], or wider where many
/// allocations stay live for long, so that the lists hold about one row per allocation at most.
fn checkpoints(ends: &impl Endpoints, by_alloc: &RowList) -> Checkpoints {
    let n = by_alloc.len().max(1);
    let mut spacing = MIN_SPACING;
    let mut times = checkpoint_times(ends, by_alloc, spacing);
    // The lists shrink in proportion to the spacing.
    let widen = rows_listed(ends, by_alloc, &times, spacing).div_ceil(n);
    if widen > 1 {
        spacing *= widen;
        times = checkpoint_times(ends, by_alloc, spacing);
    }
    let mut lasting: Vec<RowListBuilder> = times.iter().map(|_| RowListBuilder::default()).collect();
    let mut ending: Vec<RowListBuilder> = times.iter().map(|_| RowListBuilder::default()).collect();
    for (k, i) in by_alloc.iter_all().enumerate() {
        let listed = listed_in(ends.free(i as usize), k, spacing, &times);
        if let Some(last) = listed.end.checked_sub(1).filter(|&last| last >= listed.start) {
            for list in &mut lasting[listed.start..last] {
                list.push(i);
            }
            ending[last].push(i);
        }
    }
    Checkpoints {
        spacing,
        lists: lasting
            .into_iter()
            .zip(ending)
            .map(|(lasting, ending)| Listed {
                lasting: lasting.finish(),
                ending: ending.finish(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::xorshift;

    struct Ends {
        alloc: Vec<i64>,
        free: Vec<i64>,
    }

    impl Endpoints for Ends {
        fn len(&self) -> usize {
            self.alloc.len()
        }
        fn alloc(&self, i: usize) -> i64 {
            self.alloc[i]
        }
        fn free(&self, i: usize) -> i64 {
            self.free[i]
        }
    }

    /// `n` allocations over `0..1_000_000`: some from before the trace, `kept` in a thousand
    /// never freed, short and heavy-tailed lifetimes, a few sizes with many ties.
    fn trace(n: usize, kept: u64, seed: u64) -> (Ends, Vec<i64>) {
        let mut next = xorshift(seed);
        let (mut alloc, mut free, mut size) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..n {
            let a = if next().is_multiple_of(100) {
                i64::MIN
            } else {
                (next() % 1_000_000) as i64
            };
            let f = if next() % 1000 < kept {
                i64::MAX
            } else {
                let life = (next() % 1000) as i64 * if next().is_multiple_of(20) { 500 } else { 1 };
                a.max(0) + life
            };
            alloc.push(a);
            free.push(f);
            size.push(512 * (1 + (next() % 8) as i64) * if next().is_multiple_of(50) { 1024 } else { 1 });
        }
        (Ends { alloc, free }, size)
    }

    fn scan(ends: &Ends, size: &[i64], start: i64, end: i64, limit: usize) -> (Vec<usize>, usize) {
        let mut hits: Vec<usize> = (0..ends.len()).filter(|&i| ends.overlaps(i, start, end)).collect();
        let total = hits.len();
        hits.sort_unstable_by(|&x, &y| size[y].cmp(&size[x]).then(x.cmp(&y)));
        hits.truncate(limit);
        hits.sort_unstable();
        (hits, total)
    }

    #[test]
    fn the_index_finds_what_a_scan_of_every_allocation_finds() {
        let cases = [
            (5, 0x9E3779B97F4A7C15u64, false),
            (600, 0xD1B54A32D192ED03, false),
            (5, 0x94D049BB133111EB, true),
        ];
        for (kept, seed, in_alloc_order) in cases {
            let (mut ends, mut size) = trace(40_000, kept, seed);
            if in_alloc_order {
                // A pipeline's lifetimes: rows in alloc order, held as their number alone.
                let mut rows: Vec<usize> = (0..ends.len()).collect();
                rows.sort_by_key(|&i| ends.alloc[i]);
                ends = Ends {
                    alloc: rows.iter().map(|&i| ends.alloc[i]).collect(),
                    free: rows.iter().map(|&i| ends.free[i]).collect(),
                };
                size = rows.iter().map(|&i| size[i]).collect();
            }
            let index = BandIndex::build(&ends, size[..].into(), 2000).expect("frees follow allocs");
            assert_eq!(index.by_alloc.bytes() == 0, in_alloc_order, "the order held as rows");
            if kept > 500 {
                assert!(
                    index.checkpoints.spacing > MIN_SPACING,
                    "long-lived allocations widen the checkpoints"
                );
            }
            let mut next = xorshift(seed ^ 0xFFFF);
            let mut windows = vec![
                (i64::MIN + 1, i64::MAX - 1),
                (0, 1_000_000),
                (-10, -5),
                (2_000_000, 3_000_000),
            ];
            for _ in 0..200 {
                let span = (10f64.powf(6.0 * (next() % 1000) as f64 / 1000.0)) as i64;
                let start = (next() % 1_100_000) as i64 - 50_000;
                windows.push((start, start + span));
            }
            for (start, end) in windows {
                let (mut every, born) = index.overlapping_rows(&ends, start, end);
                every.extend(born.map(|i| i as usize));
                every.sort_unstable();
                let want: Vec<usize> = (0..ends.len()).filter(|&i| ends.overlaps(i, start, end)).collect();
                assert_eq!(every, want, "{start}..{end}: every overlapping allocation, once");
                for limit in [1, 30, 2000] {
                    let found = index.overlapping(&ends, size[..].into(), start, end, limit);
                    let mut largest = found.largest.clone();
                    largest.sort_unstable();
                    assert_eq!(
                        (largest, found.total),
                        scan(&ends, &size, start, end, limit),
                        "{start}..{end}, {limit}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_free_before_its_alloc_declines_the_index() {
        let ends = Ends {
            alloc: vec![10, 20],
            free: vec![15, 19],
        };
        assert!(BandIndex::build(&ends, [1i64, 2][..].into(), 10).is_none());
    }
}
