//! The rows of a table put in the order of an entry-index column, without sorting them: each
//! trace entry frees at most one allocation, so the lifetimes' `free_idx` values are distinct
//! entries of the device, and a row's place is the number of set entries before its own in a
//! bitmap of them. The rows come a window of entries at a time ([`RowsByEntry::in_windows`]):
//! holding all of them at once (4 bytes a free) would sit at the top of the analyses' memory;
//! a quarter at a time costs one more pass over the column a window. Sorting `(entry, row)`
//! pairs would hold 8 bytes a free.

use std::ops::Range;

/// An entry-index column's set entries as a bitmap, with the count of set entries before each
/// word of it: where each row goes among the rows of a range of entries.
pub struct RowsByEntry<'a> {
    entry: &'a [i32],
    bits: Vec<u64>,
    /// Set entries in the words before each word, and in all of them last.
    before: Vec<u32>,
    /// No two rows share an entry (else a range's rows are sorted).
    distinct: bool,
    /// One past the last set entry.
    end: usize,
}

impl<'a> RowsByEntry<'a> {
    pub fn new(entry: &'a [i32]) -> RowsByEntry<'a> {
        let end = entry
            .iter()
            .copied()
            .max()
            .map_or(0, |m| (i64::from(m) + 1).max(0) as usize);
        let mut bits = vec![0u64; end.div_ceil(64)];
        let mut distinct = true;
        for e in entry.iter().filter_map(|&e| usize::try_from(e).ok()) {
            let (word, bit) = (&mut bits[e / 64], 1u64 << (e % 64));
            distinct &= *word & bit == 0;
            *word |= bit;
        }
        let mut before = Vec::with_capacity(bits.len() + 1);
        let mut sum = 0u32;
        for w in &bits {
            before.push(sum);
            sum += w.count_ones();
        }
        before.push(sum);
        RowsByEntry {
            entry,
            bits,
            before,
            distinct,
            end,
        }
    }

    /// The rows whose entry is in `words` × 64 (entries of whole words of the bitmap),
    /// ascending by entry (rows of one entry, which well-formed lifetimes never have, by row).
    fn rows_in_words(&self, words: Range<usize>) -> Vec<u32> {
        // Entries in the range, as offsets from its start: an unset (negative) entry, as u32,
        // lies past any range (entries are below 2^31).
        let (first_entry, span) = ((words.start * 64) as u32, ((words.end - words.start) * 64) as u32);
        let rows = self
            .entry
            .iter()
            .enumerate()
            .filter(move |(_, &e)| (e as u32).wrapping_sub(first_entry) < span)
            .map(|(r, _)| r as u32);
        if !self.distinct {
            let mut rows: Vec<u32> = rows.collect();
            rows.sort_unstable_by_key(|&r| (self.entry[r as usize], r));
            return rows;
        }
        let first = self.before[words.start];
        let mut ordered = vec![0u32; (self.before[words.end] - first) as usize];
        for r in rows {
            let e = self.entry[r as usize] as usize;
            let (w, bit) = (e / 64, e % 64);
            let place = self.before[w] - first + (self.bits[w] & ((1u64 << bit) - 1)).count_ones();
            ordered[place as usize] = r;
        }
        ordered
    }

    /// Every row whose entry is set, ascending by entry, found `windows` ranges of entries at
    /// a time: each a pass over the column, holding only its own rows.
    pub fn in_windows(self, windows: usize) -> WindowRows<'a> {
        let words = self.end.div_ceil(64);
        WindowRows {
            per: words.div_ceil(windows.max(1)).max(1),
            words,
            next_word: 0,
            rows: Vec::new().into_iter(),
            by_entry: self,
        }
    }
}

/// [`RowsByEntry::in_windows`]: the rows of one window, then the next window's found.
pub struct WindowRows<'a> {
    by_entry: RowsByEntry<'a>,
    /// Bitmap words a window.
    per: usize,
    words: usize,
    /// The first word of the next window.
    next_word: usize,
    rows: std::vec::IntoIter<u32>,
}

impl WindowRows<'_> {
    /// Finds the next window's rows; false past the last window.
    #[cold]
    #[inline(never)]
    fn next_window(&mut self) -> bool {
        if self.next_word >= self.words {
            return false;
        }
        let end = (self.next_word + self.per).min(self.words);
        self.rows = self.by_entry.rows_in_words(self.next_word..end).into_iter();
        self.next_word = end;
        true
    }
}

impl Iterator for WindowRows<'_> {
    type Item = u32;
    #[inline]
    fn next(&mut self) -> Option<u32> {
        loop {
            if let Some(r) = self.rows.next() {
                return Some(r);
            }
            if !self.next_window() {
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::testing::Lcg;

    /// Every set row in one window.
    fn rows_in_entry_order(entry: &[i32]) -> Vec<u32> {
        RowsByEntry::new(entry).in_windows(1).collect()
    }

    /// What sorting the set rows by `(entry, row)` gives.
    fn sorted(entry: &[i32]) -> Vec<u32> {
        let mut rows: Vec<u32> = (0..entry.len() as u32).filter(|&r| entry[r as usize] >= 0).collect();
        rows.sort_by_key(|&r| (entry[r as usize], r));
        rows
    }

    /// `len` rows of distinct entries spread over three times as many, a third of them unset.
    fn distinct_entries(rng: &mut Lcg, len: usize) -> Vec<i32> {
        let mut pool: Vec<i32> = (0..3 * len as i32 + 1).collect();
        (0..len)
            .map(|_| match rng.below(3) {
                0 => -1,
                _ => pool.swap_remove(rng.below(pool.len() as u64) as usize),
            })
            .collect()
    }

    #[test]
    fn rows_come_in_the_order_of_their_distinct_entries() {
        let mut rng = Lcg(7);
        for len in [0usize, 1, 2, 63, 64, 65, 200, 5_000] {
            let entry = distinct_entries(&mut rng, len);
            assert_eq!(rows_in_entry_order(&entry), sorted(&entry), "{len} rows");
        }
    }

    #[test]
    fn rows_sharing_an_entry_are_still_ordered() {
        let entry = [5, -1, 3, 5, 0, 3, 64, 63];
        assert_eq!(rows_in_entry_order(&entry), vec![4, 2, 5, 0, 3, 7, 6]);
        assert_eq!(rows_in_entry_order(&entry), sorted(&entry));
    }

    #[test]
    fn rows_in_windows_are_the_rows_in_entry_order() {
        let mut rng = Lcg(11);
        for len in [0usize, 1, 64, 65, 300, 5_000] {
            let distinct = distinct_entries(&mut rng, len);
            let shared: Vec<i32> = distinct.iter().map(|&e| if e > 0 { e / 3 } else { e }).collect();
            for entry in [&distinct, &shared] {
                for windows in [1, 2, 3, 16, 1_000] {
                    let rows: Vec<u32> = RowsByEntry::new(entry).in_windows(windows).collect();
                    assert_eq!(rows, sorted(entry), "{len} rows, {windows} windows");
                }
            }
        }
    }

    #[test]
    fn no_set_entry_gives_no_row() {
        assert_eq!(RowsByEntry::new(&[-1, -1]).in_windows(4).count(), 0);
        assert!(rows_in_entry_order(&[]).is_empty());
        assert!(rows_in_entry_order(&[-1, -1]).is_empty());
    }
}
