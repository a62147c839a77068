//! Which of a run's ranges hold an instant, answered by binary search for every shape the
//! ranges can take: overlapping, nested, out of order, touching, empty, open to the end of
//! time. Each analysis that asks for every entry or allocation "which iteration, which phase,
//! which range is this in" (a long run has thousands of ranges and millions of entries) asks
//! one of these, never a scan of the list.
//!
//! [`FirstCovering`] answers "the lowest-ranked range that holds `t`" — the answer a scan in
//! rank order would give — from the elementary pieces between the ranges' ends, each with its
//! answer found once by a sweep (at most two pieces a range, built in O(n log n)).
//! [`Union`] answers "does any range hold `t`".

use std::collections::BTreeMap;

/// The lowest rank of the closed ranges `[lo, hi]` that hold an instant.
#[derive(Debug, Clone, Default)]
pub struct FirstCovering {
    /// Where each piece starts, ascending; a piece runs to the next one's start.
    starts: Vec<i64>,
    /// Each piece's answer: the lowest rank holding it, [`NONE`] where none does.
    ranks: Vec<u32>,
}

const NONE: u32 = u32::MAX;

impl FirstCovering {
    /// From `(lo, hi, rank)`: closed ranges (one with `hi < lo` holds nothing; `hi` may be
    /// `i64::MAX`, open to the end of time).
    pub fn new(ranges: impl IntoIterator<Item = (i64, i64, u32)>) -> FirstCovering {
        // (instant, opens, rank): a range opens at `lo` and closes just after `hi`.
        let mut edges: Vec<(i64, bool, u32)> = Vec::new();
        for (lo, hi, rank) in ranges {
            if hi < lo {
                continue;
            }
            edges.push((lo, true, rank));
            if let Some(after) = hi.checked_add(1) {
                edges.push((after, false, rank));
            }
        }
        edges.sort_unstable();
        let mut open: BTreeMap<u32, u32> = BTreeMap::new();
        let (mut starts, mut ranks) = (Vec::new(), Vec::new());
        let mut i = 0;
        while i < edges.len() {
            let at = edges[i].0;
            while i < edges.len() && edges[i].0 == at {
                let (_, opens, rank) = edges[i];
                if opens {
                    *open.entry(rank).or_default() += 1;
                } else if let Some(n) = open.get_mut(&rank) {
                    *n -= 1;
                    if *n == 0 {
                        open.remove(&rank);
                    }
                }
                i += 1;
            }
            let rank = open.keys().next().copied().unwrap_or(NONE);
            if ranks.last() != Some(&rank) {
                starts.push(at);
                ranks.push(rank);
            }
        }
        FirstCovering { starts, ranks }
    }

    /// The lowest rank of the ranges holding `t`.
    pub fn first(&self, t: i64) -> Option<u32> {
        let piece = self.starts.partition_point(|&s| s <= t).checked_sub(1)?;
        let rank = self.ranks[piece];
        (rank != NONE).then_some(rank)
    }
}

/// Whether any of a set of closed ranges holds an instant: their union, merged once.
#[derive(Debug, Clone, Default)]
pub struct Union {
    /// Disjoint closed ranges, ascending.
    merged: Vec<(i64, i64)>,
}

impl Union {
    /// From closed ranges `(lo, hi)`; one with `hi < lo` holds nothing.
    pub fn new(ranges: impl IntoIterator<Item = (i64, i64)>) -> Union {
        let mut v: Vec<(i64, i64)> = ranges.into_iter().filter(|r| r.0 <= r.1).collect();
        v.sort_unstable();
        let mut merged: Vec<(i64, i64)> = Vec::with_capacity(v.len());
        for r in v {
            match merged.last_mut() {
                Some(last) if r.0 <= last.1 => last.1 = last.1.max(r.1),
                _ => merged.push(r),
            }
        }
        Union { merged }
    }

    pub fn holds(&self, t: i64) -> bool {
        let i = self.merged.partition_point(|r| r.0 <= t);
        i > 0 && t <= self.merged[i - 1].1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::testing::Lcg;

    /// Random ranges of every shape: the index answers as a scan in rank order does.
    #[test]
    fn answers_as_a_scan_in_rank_order() {
        let mut rng = Lcg(11);
        for case in 0..300 {
            let n = rng.below(30) as usize;
            let ranges: Vec<(i64, i64, u32)> = (0..n)
                .map(|k| {
                    let lo = rng.below(200) as i64 - 20;
                    let hi = match rng.below(10) {
                        0 => i64::MAX,
                        1 => lo - 1 - rng.below(5) as i64,
                        _ => lo + rng.below(40) as i64,
                    };
                    (lo, hi, (k as u32 * 7919) % 101)
                })
                .collect();
            let first = FirstCovering::new(ranges.iter().copied());
            let union = Union::new(ranges.iter().map(|r| (r.0, r.1)));
            for t in -40..260 {
                let scan = ranges.iter().filter(|r| r.0 <= t && t <= r.1).map(|r| r.2).min();
                assert_eq!(first.first(t), scan, "case {case} at {t}");
                assert_eq!(union.holds(t), scan.is_some(), "case {case} at {t}");
            }
        }
    }
}
