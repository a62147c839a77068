//! A list of rows held in about a byte a row where neighbouring rows are close: the orders and
//! live lists that the timeline's and the category view's indexes keep for every allocation of
//! a loaded report (four of them, 16 bytes an allocation as `Vec<u32>`s: 0.27 GB beside a
//! 2 GB report's frames).
//!
//! `0, 1, …, n − 1` (a report's allocations in alloc order, as the pipeline makes them) is held
//! as its length alone; any other list as the differences between neighbours, zigzag LEB128
//! ([`crate::infra::varint`]), in blocks of [`BLOCK`] rows, each block's first row and the offset of
//! its differences held apart, so that reading position `k` decodes one block at most and a run
//! of positions decodes each of its rows once.

use std::ops::Range;

use crate::infra::varint;

/// Rows per block: a position is read after at most `BLOCK − 1` differences.
const BLOCK: usize = 64;

/// A list of `u32` rows (see the module).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowList {
    len: usize,
    /// `None` while the list is `0..len`.
    packed: Option<Packed>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Packed {
    /// Each block's first row.
    firsts: Vec<u32>,
    /// Where each block's differences begin in `diffs`.
    starts: Vec<usize>,
    /// The differences to each row from the one before it, within a block.
    diffs: Vec<u8>,
}

impl RowList {
    /// The list `0..len`.
    pub fn rows(len: usize) -> RowList {
        RowList { len, packed: None }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Heap bytes held.
    pub fn bytes(&self) -> usize {
        self.packed.as_ref().map_or(0, |p| {
            p.firsts.capacity() * 4 + p.starts.capacity() * std::mem::size_of::<usize>() + p.diffs.capacity()
        })
    }

    /// The row at position `k` (panics past the end).
    pub fn at(&self, k: usize) -> u32 {
        assert!(k < self.len, "position {k} of a list of {} rows", self.len);
        match &self.packed {
            None => k as u32,
            Some(p) => p.seek(k).0,
        }
    }

    /// Every row, in order.
    pub fn iter_all(&self) -> Rows<'_> {
        self.iter(0..self.len)
    }

    /// The rows at `positions`, in order (panics past the end).
    pub fn iter(&self, positions: Range<usize>) -> Rows<'_> {
        assert!(
            positions.start <= positions.end && positions.end <= self.len,
            "positions {positions:?} of a list of {} rows",
            self.len
        );
        let (row, at) = match &self.packed {
            Some(p) if positions.start < positions.end => p.seek(positions.start),
            _ => (0, 0),
        };
        Rows {
            list: self,
            next: positions.start,
            end: positions.end,
            row,
            at,
        }
    }

    /// The first position whose row `pred` is false for, `pred` being true on a prefix of the
    /// list (as `slice::partition_point`): a binary search over the blocks' first rows, then
    /// one block read in order.
    pub fn partition_point(&self, pred: impl Fn(u32) -> bool) -> usize {
        let Some(p) = &self.packed else {
            return first_false(self.len, |k| pred(k as u32));
        };
        // Blocks whose first row is in the prefix: the answer lies in the last of them.
        let blocks = first_false(p.firsts.len(), |b| pred(p.firsts[b]));
        if blocks == 0 {
            return 0;
        }
        let start = (blocks - 1) * BLOCK;
        let end = (start + BLOCK).min(self.len);
        (start..)
            .zip(self.iter(start..end))
            .find(|&(_, row)| !pred(row))
            .map_or(end, |(k, _)| k)
    }
}

impl Packed {
    /// The row at position `k` and where the difference to the one after it begins.
    fn seek(&self, k: usize) -> (u32, usize) {
        let block = k / BLOCK;
        let (mut row, mut at) = (self.firsts[block], self.starts[block]);
        for _ in 0..k % BLOCK {
            row = step(row, &self.diffs, &mut at);
        }
        (row, at)
    }
}

/// The row after `row`, its difference read at `*at`.
#[inline]
fn step(row: u32, diffs: &[u8], at: &mut usize) -> u32 {
    (i64::from(row) + varint::get_signed(diffs, at)) as u32
}

/// The first `k` in `0..n` for which `pred` is false (`pred` true on a prefix).
fn first_false(n: usize, pred: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

impl From<&[u32]> for RowList {
    fn from(rows: &[u32]) -> RowList {
        let mut list = RowListBuilder::default();
        rows.iter().for_each(|&r| list.push(r));
        list.finish()
    }
}

/// The rows of a range of positions of a [`RowList`], in order.
pub struct Rows<'a> {
    list: &'a RowList,
    next: usize,
    end: usize,
    /// The row at `next` (packed lists).
    row: u32,
    /// Where the difference to the row after `next` begins (packed lists).
    at: usize,
}

impl Iterator for Rows<'_> {
    type Item = u32;

    /// Small enough to inline into any loop (`0..n` is most lists); a packed list's step is
    /// a call.
    #[inline(always)]
    fn next(&mut self) -> Option<u32> {
        if self.next >= self.end {
            return None;
        }
        let k = self.next;
        self.next += 1;
        match self.list.packed {
            None => Some(k as u32),
            Some(_) => Some(self.packed_step()),
        }
    }

    /// A run read in one loop (`for_each`, `extend` and `sum` come here): `0..n` as a range,
    /// a packed list a block at a time.
    fn fold<B, F: FnMut(B, u32) -> B>(mut self, init: B, mut f: F) -> B {
        let list = self.list;
        let Some(p) = &list.packed else {
            return (self.next as u32..self.end as u32).fold(init, f);
        };
        let mut acc = init;
        while self.next < self.end {
            acc = f(acc, self.row);
            self.next += 1;
            if self.next == self.end {
                break;
            }
            self.advance(p);
        }
        acc
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.end - self.next;
        (left, Some(left))
    }
}

impl ExactSizeIterator for Rows<'_> {}

impl Rows<'_> {
    /// A packed list's row at `next - 1` (just counted), the one after it made ready.
    #[inline(never)]
    fn packed_step(&mut self) -> u32 {
        let list = self.list;
        let p = list.packed.as_ref().expect("a packed list");
        let row = self.row;
        if self.next < self.end {
            self.advance(p);
        }
        row
    }

    /// Reads the row at `next` from the one before it (or its block's first).
    #[inline]
    fn advance(&mut self, p: &Packed) {
        if self.next.is_multiple_of(BLOCK) {
            self.row = p.firsts[self.next / BLOCK];
            self.at = p.starts[self.next / BLOCK];
        } else {
            self.row = step(self.row, &p.diffs, &mut self.at);
        }
    }
}

/// A [`RowList`] made a row at a time, held as its length alone while the rows pushed are
/// `0, 1, 2, …`.
#[derive(Default)]
pub struct RowListBuilder {
    len: usize,
    packed: Option<Packed>,
    last: u32,
}

impl RowListBuilder {
    pub fn push(&mut self, row: u32) {
        if self.packed.is_none() {
            if row as usize == self.len {
                self.len += 1;
                return;
            }
            // The first row out of `0, 1, 2, …`: the rows so far are packed as any others.
            let before = std::mem::replace(&mut self.len, 0);
            self.packed = Some(Packed {
                firsts: Vec::new(),
                starts: Vec::new(),
                diffs: Vec::new(),
            });
            (0..before as u32).for_each(|r| self.push(r));
        }
        let p = self.packed.as_mut().expect("packed");
        if self.len.is_multiple_of(BLOCK) {
            p.firsts.push(row);
            p.starts.push(p.diffs.len());
        } else {
            varint::put_signed(&mut p.diffs, i64::from(row) - i64::from(self.last));
        }
        self.last = row;
        self.len += 1;
    }

    pub fn finish(self) -> RowList {
        let packed = self.packed.map(|mut p| {
            p.firsts.shrink_to_fit();
            p.starts.shrink_to_fit();
            p.diffs.shrink_to_fit();
            p
        });
        RowList { len: self.len, packed }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::xorshift;

    /// Lists of every form: empty, `0..n`, `0..n` then one out of order, short and long
    /// differences of both signs, the largest rows.
    fn lists() -> Vec<Vec<u32>> {
        let mut next = xorshift(0x2545F4914F6CDD1D);
        let mut nearly: Vec<u32> = (0..1000).collect();
        nearly.push(7);
        let jumpy: Vec<u32> = (0..3000)
            .map(|_| match next() % 4 {
                0 => u32::MAX - (next() % 10) as u32,
                1 => (next() % 5) as u32,
                _ => (next() % 1_000_000) as u32,
            })
            .collect();
        let mut climbing = Vec::new();
        let mut row = 0u32;
        for _ in 0..5000 {
            row += (next() % 300) as u32;
            climbing.push(row);
        }
        vec![
            vec![],
            vec![0],
            vec![5],
            (0..130).collect(),
            nearly,
            jumpy,
            climbing,
            (BLOCK as u32..3 * BLOCK as u32 + 1).collect(),
        ]
    }

    #[test]
    fn every_position_and_run_reads_back_the_rows_pushed() {
        for rows in lists() {
            let list = RowList::from(&rows[..]);
            assert_eq!(list.len(), rows.len());
            for (k, &r) in rows.iter().enumerate() {
                assert_eq!(list.at(k), r, "position {k}");
            }
            let n = rows.len();
            for (lo, hi) in [(0, n), (0, 0), (n, n), (n / 3, n / 2), (1.min(n), n)] {
                assert_eq!(list.iter(lo..hi).collect::<Vec<_>>(), rows[lo..hi], "{lo}..{hi}");
            }
            for lo in (0..n).step_by(7) {
                let hi = (lo + 150).min(n);
                assert_eq!(list.iter(lo..hi).collect::<Vec<_>>(), rows[lo..hi], "{lo}..{hi}");
                let mut folded = Vec::new();
                list.iter(lo..hi).for_each(|r| folded.push(r));
                assert_eq!(folded, rows[lo..hi], "{lo}..{hi} in one loop");
                // A run partly read one at a time, then in one loop.
                let mut run = list.iter(lo..hi);
                let first: Vec<u32> = run.by_ref().take(3).collect();
                let rest = run.fold(first, |mut v, r| {
                    v.push(r);
                    v
                });
                assert_eq!(rest, rows[lo..hi], "{lo}..{hi} read both ways");
            }
        }
    }

    #[test]
    fn rows_in_order_take_no_bytes_and_close_rows_a_byte_each() {
        let list = RowList::from(&(0..100_000u32).collect::<Vec<_>>()[..]);
        assert_eq!((list.len(), list.bytes()), (100_000, 0));
        assert_eq!(list, RowList::rows(100_000));
        let gaps: Vec<u32> = (0..100_000u32).map(|r| 3 * r).collect();
        let list = RowList::from(&gaps[..]);
        assert!(list.bytes() < 100_000 * 5 / 4, "{} bytes", list.bytes());
    }

    #[test]
    fn partition_point_is_a_slice_s() {
        for rows in lists() {
            let mut sorted = rows.clone();
            sorted.sort_unstable();
            let list = RowList::from(&sorted[..]);
            let probes = sorted
                .iter()
                .flat_map(|&r| [r, r.saturating_add(1)])
                .chain([0, u32::MAX]);
            for x in probes {
                assert_eq!(
                    list.partition_point(|r| r < x),
                    sorted.partition_point(|&r| r < x),
                    "rows below {x}"
                );
            }
        }
    }
}
