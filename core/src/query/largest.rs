//! The largest rows of any run of a fixed order of rows, without reading the run: a tree over
//! the order's blocks of [`BLOCK`] rows, each node keeping its `keep` largest rows (by size,
//! ties by row). A run is its partial blocks at both ends, read row by row, and at most two
//! nodes per level between them, so it costs about `2 × BLOCK + 2 × log2(blocks) × keep`
//! candidates whatever its length. The tree holds about `2 × keep / BLOCK` entries per row.

use super::row_list::RowList;
use crate::tables::int_slice::IntSlice;
use std::cmp::Ordering;

/// Rows per leaf of the tree.
pub const BLOCK: usize = 8192;

/// Each node's `keep` largest rows, level by level: level `l` has a node per `BLOCK << l`
/// rows of the order (whole nodes only), each `keep` entries long.
pub struct LargestInRuns {
    keep: usize,
    levels: Vec<Vec<u32>>,
}

/// Rows `x` and `y` in band order: the larger first, then the lower row.
pub fn larger_row(size: IntSlice, x: usize, y: usize) -> Ordering {
    size.at(y).cmp(&size.at(x)).then(x.cmp(&y))
}

/// [`larger_row`] over `u32` rows.
fn larger_first(size: IntSlice<'_>) -> impl Fn(&u32, &u32) -> Ordering + '_ {
    move |&x, &y| larger_row(size, x as usize, y as usize)
}

/// The `limit` largest of the rows offered one by one (by [`larger_row`]: the larger first,
/// then the lower row), in no particular order. Each is held with its size, so a cut compares
/// plain pairs instead of reading two sizes a comparison; the rows are held until twice
/// `limit` are, then cut back to the best `limit`, after which a row that comes after the
/// least of those is passed over with one comparison (the least kept only gets better).
pub struct LargestRows<'a> {
    size: IntSlice<'a>,
    limit: usize,
    /// `(-size, row)`: in band order when sorted.
    kept: Vec<(i64, usize)>,
    /// The least row kept by the last cut (before one, a key after every row's; with no row to
    /// keep, one before every row's).
    least: (i64, usize),
}

impl<'a> LargestRows<'a> {
    pub fn new(size: IntSlice<'a>, limit: usize) -> LargestRows<'a> {
        LargestRows {
            size,
            limit,
            kept: Vec::with_capacity(2 * limit),
            least: if limit == 0 {
                (i64::MIN, 0)
            } else {
                (i64::MAX, usize::MAX)
            },
        }
    }

    #[inline]
    pub fn offer(&mut self, row: usize) {
        let key = (-self.size.at(row), row);
        if key < self.least {
            self.keep(key);
        }
    }

    /// Out of line: most rows offered to a long loop are passed over, which then stays small.
    #[inline(never)]
    fn keep(&mut self, key: (i64, usize)) {
        self.kept.push(key);
        if self.kept.len() == 2 * self.limit {
            self.cut();
        }
    }

    /// Keeps the best `limit` of those held.
    fn cut(&mut self) {
        if self.kept.len() > self.limit && self.limit > 0 {
            self.kept.select_nth_unstable(self.limit - 1);
            self.least = self.kept[self.limit - 1];
        }
        self.kept.truncate(self.limit);
    }

    /// The `limit` largest rows offered.
    pub fn into_rows(mut self) -> Vec<usize> {
        self.cut();
        self.kept.into_iter().map(|(_, row)| row).collect()
    }
}

impl Extend<usize> for LargestRows<'_> {
    fn extend<I: IntoIterator<Item = usize>>(&mut self, rows: I) {
        for row in rows {
            self.offer(row);
        }
    }
}

/// The `keep` largest of `rows`, in no particular order.
fn keep_largest(rows: &mut Vec<u32>, keep: usize, size: IntSlice) {
    if rows.len() > keep && keep > 0 {
        rows.select_nth_unstable_by(keep - 1, larger_first(size));
    }
    rows.truncate(keep);
}

impl LargestInRuns {
    /// The tree over `order` (rows into `size`); `keep` is at most [`BLOCK`].
    pub fn build(order: &RowList, size: IntSlice, keep: usize) -> LargestInRuns {
        let keep = keep.min(BLOCK);
        let mut levels: Vec<Vec<u32>> = Vec::new();
        let mut node = Vec::with_capacity(2 * BLOCK);
        let mut leaves = Vec::with_capacity(order.len() / BLOCK * keep);
        for block in 0..order.len() / BLOCK {
            node.clear();
            node.extend(order.iter(block * BLOCK..(block + 1) * BLOCK));
            keep_largest(&mut node, keep, size);
            leaves.extend_from_slice(&node);
        }
        if keep == 0 || leaves.is_empty() {
            return LargestInRuns { keep, levels };
        }
        levels.push(leaves);
        loop {
            let below = levels.last().expect("a level");
            if below.len() < 2 * keep {
                break;
            }
            let mut level = Vec::with_capacity(below.len() / 2);
            for pair in below.chunks_exact(2 * keep) {
                node.clear();
                node.extend_from_slice(pair);
                keep_largest(&mut node, keep, size);
                level.extend_from_slice(&node);
            }
            levels.push(level);
        }
        LargestInRuns { keep, levels }
    }

    /// Heap bytes held.
    pub fn bytes(&self) -> usize {
        self.levels.iter().map(|l| l.len() * 4).sum()
    }

    /// Adds to `out` rows of `order[lo..hi]` among which are its `limit` largest: all of them
    /// when `limit` is more than the tree keeps.
    pub fn candidates<E: Extend<usize>>(&self, order: &RowList, lo: usize, hi: usize, limit: usize, out: &mut E) {
        let rows = |r: &[u32], out: &mut E| out.extend(r.iter().map(|&i| i as usize));
        let run = |lo: usize, hi: usize, out: &mut E| out.extend(order.iter(lo..hi).map(|i| i as usize));
        let (first, last) = (lo.div_ceil(BLOCK), hi / BLOCK);
        if limit > self.keep || self.levels.is_empty() || first >= last {
            run(lo, hi, out);
            return;
        }
        run(lo, first * BLOCK, out);
        run(last * BLOCK, hi, out);
        let node = |level: usize, j: usize| &self.levels[level][j * self.keep..(j + 1) * self.keep];
        let (mut l, mut h, mut level) = (first, last, 0);
        while l < h {
            if l & 1 == 1 {
                rows(node(level, l), out);
                l += 1;
            }
            if h & 1 == 1 {
                h -= 1;
                rows(node(level, h), out);
            }
            l >>= 1;
            h >>= 1;
            level += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_s_candidates_hold_its_largest_rows() {
        let mut next = crate::query::xorshift(0x853C49E6748FEA9B);
        let n = 20 * BLOCK + 77;
        let size: Vec<i64> = (0..n).map(|_| (next() % 300) as i64 * 512).collect();
        let mut order: Vec<u32> = (0..n as u32).collect();
        order.sort_by_key(|&i| size[i as usize] / 7_000);
        let keep = 50;
        let order_list = RowList::from(&order[..]);
        let tree = LargestInRuns::build(&order_list, size[..].into(), keep);
        assert_eq!(tree.levels.len(), 5);
        let runs = [
            (0, n),
            (1, n - 1),
            (BLOCK, 2 * BLOCK),
            (5, BLOCK + 9),
            (3 * BLOCK - 1, 17 * BLOCK + 1),
            (7, 7),
        ];
        let random = (0..100).map(|_| {
            let a = (next() % n as u64) as usize;
            let b = (next() % n as u64) as usize;
            (a.min(b), a.max(b))
        });
        for (lo, hi) in runs.into_iter().chain(random) {
            for limit in [1, keep, keep + 1] {
                let mut got = Vec::new();
                tree.candidates(&order_list, lo, hi, limit, &mut got);
                let mut got: Vec<u32> = got.into_iter().map(|i| i as u32).collect();
                keep_largest(&mut got, limit, size[..].into());
                got.sort_unstable();
                let mut want = order[lo..hi].to_vec();
                keep_largest(&mut want, limit, size[..].into());
                want.sort_unstable();
                assert_eq!(got, want, "{lo}..{hi}, {limit}");
                // Offered one by one, in no order, the same rows are kept.
                let mut largest = LargestRows::new(size[..].into(), limit);
                tree.candidates(&order_list, lo, hi, limit, &mut largest);
                let mut kept = largest.into_rows();
                kept.sort_unstable();
                assert!(
                    kept.iter().map(|&i| i as u32).eq(want.iter().copied()),
                    "{lo}..{hi}, {limit} offered"
                );
            }
        }
    }

    #[test]
    fn rows_offered_one_by_one_keep_the_largest_ties_by_row() {
        let mut next = crate::query::xorshift(0x2545F4914F6CDD1D);
        for (n, sizes, limit) in [
            (0, 3, 4),
            (5, 3, 0),
            (5, 3, 9),
            (10_000, 4, 1),
            (10_000, 50, 7),
            (10_000, 1_000, 300),
        ] {
            let size: Vec<i64> = (0..n).map(|_| (next() % sizes) as i64).collect();
            let mut offered: Vec<usize> = (0..n).collect();
            for k in (1..n).rev() {
                offered.swap(k, (next() % (k as u64 + 1)) as usize);
            }
            let mut largest = LargestRows::new(size[..].into(), limit);
            largest.extend(offered.iter().copied());
            let mut kept = largest.into_rows();
            kept.sort_unstable();
            let mut want: Vec<usize> = (0..n).collect();
            want.sort_by(|&x, &y| larger_row(size[..].into(), x, y));
            want.truncate(limit);
            want.sort_unstable();
            assert_eq!(kept, want, "{n} rows of {sizes} sizes, {limit} kept");
        }
    }
}
