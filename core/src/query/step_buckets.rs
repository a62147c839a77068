//! A timeline's per-bucket min/max of a series held as its changes ([`EntrySteps`]): exactly
//! [`super::bucket_min_max`]'s answer over the values the changes stand for, in time that
//! grows with the buckets and the changes inside the window instead of with the entries.

use super::pyramid::{bucket_min_max_by_entries, BucketRuns, Positions};
use crate::tables::entry_steps::EntrySteps;

/// The min and max of `steps` in each of `width` buckets between `start` and `end` over
/// `positions`. `sorted` says the positions never decrease (the index knows; otherwise it is
/// checked); positions that go backwards are answered entry by entry, as the scan does.
pub fn bucket_min_max_of_steps(
    positions: Positions<'_>,
    steps: &EntrySteps,
    sorted: Option<bool>,
    start: i64,
    end: i64,
    width: usize,
) -> (Vec<i64>, Vec<i64>) {
    if !sorted.unwrap_or_else(|| positions.sorted()) {
        let values: Vec<i64> = steps.values().collect();
        return bucket_min_max_by_entries(positions, &values[..], steps.initial(), start, end, width);
    }
    let n = positions.len().min(steps.len());
    bucket_min_max_of_steps_in(&BucketRuns::of_sorted(positions, n, start, end, width), steps)
}

/// [`bucket_min_max_of_steps`] over the buckets' runs of entries, found for sorted positions.
pub(super) fn bucket_min_max_of_steps_in(runs: &BucketRuns, steps: &EntrySteps) -> (Vec<i64>, Vec<i64>) {
    let mut current = steps.before(runs.first);
    let (mut mins, mut maxs) = (Vec::with_capacity(runs.ends.len()), Vec::with_capacity(runs.ends.len()));
    let mut lo = runs.first;
    for &hi in &runs.ends {
        let (mut min, mut max) = (current, current);
        for (_, v) in steps.changes_in(lo, hi) {
            min = min.min(v);
            max = max.max(v);
            current = v;
        }
        mins.push(min);
        maxs.push(max);
        lo = hi;
    }
    (mins, maxs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::{test_times, test_window_on, test_windows, xorshift};

    #[test]
    fn steps_give_the_entry_by_entry_answer() {
        let mut next = xorshift(0x9E3779B97F4A7C15);
        let n = 200_000;
        let times = test_times(&mut next, n, 3, 40);
        // Changes now and then, some back to the value before.
        let mut v = 50i64;
        let values: Vec<i64> = (0..n)
            .map(|_| {
                if next().is_multiple_of(500) {
                    v = (next() % 8) as i64 * 10;
                }
                v
            })
            .collect();
        let steps = EntrySteps::from_values(7, &values);
        let mut backwards = times.clone();
        backwards.swap(10, 50_000);
        let (first, last) = Positions::Times(times[..].into()).full_range();
        for (start, end, width) in test_windows(&mut next, first, last, 80) {
            for positions in [
                Positions::Times(times[..].into()),
                Positions::EntryIndex(n),
                Positions::Times(backwards[..].into()),
            ] {
                let (s, e) = test_window_on(positions, (start, end), first, last);
                let by_steps = bucket_min_max_of_steps(positions, &steps, None, s, e, width);
                let by_entries = bucket_min_max_by_entries(positions, &values[..], 7, s, e, width);
                assert!(by_steps == by_entries, "window {s}..{e} at width {width}");
            }
        }
    }
}
