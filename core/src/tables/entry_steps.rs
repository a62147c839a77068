//! A series over a device's trace entries that changes at few of them — reserved bytes change
//! only on segment events, a few thousand of a trace's millions of entries — held as its
//! changes instead of one value per entry (8 bytes per entry saved). Read in place: the value after any entry is a binary search,
//! a timeline's buckets cost the changes inside the window ([`crate::query::bucket_min_max_steps`]).

use polars_core::prelude::*;

/// The value after each of `len` entries, as the entries where it changes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EntrySteps {
    /// The value before the first entry.
    initial: i64,
    /// Entries after which the value changes (ascending) and the value from there on: never
    /// the value before it.
    at: Vec<usize>,
    value: Vec<i64>,
    /// Entries the series spans.
    len: usize,
}

/// The stored object's columns: the entry of each change (`-1`: the value before the first
/// entry, always the first row) and the value from there on.
pub const ENTRY: &str = "entry";

impl EntrySteps {
    /// A series of no entries yet, starting at `initial`.
    pub fn starting_at(initial: i64) -> EntrySteps {
        EntrySteps {
            initial,
            ..EntrySteps::default()
        }
    }

    /// Appends the next entry, after which the value is `value`.
    #[inline]
    pub fn push(&mut self, value: i64) {
        if value != self.last() {
            self.at.push(self.len);
            self.value.push(value);
        }
        self.len += 1;
    }

    /// The series of `values` (one per entry), starting at `initial`.
    pub fn from_values(initial: i64, values: &[i64]) -> EntrySteps {
        let mut steps = EntrySteps::starting_at(initial);
        for &v in values {
            steps.push(v);
        }
        steps
    }

    /// Entries the series spans.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The value before the first entry.
    pub fn initial(&self) -> i64 {
        self.initial
    }

    /// The value after the last entry.
    pub fn last(&self) -> i64 {
        self.value.last().copied().unwrap_or(self.initial)
    }

    /// The value after entry `i` (past the last entry: the last value).
    #[inline]
    pub fn after(&self, i: usize) -> i64 {
        let k = self.at.partition_point(|&a| a <= i);
        if k == 0 {
            self.initial
        } else {
            self.value[k - 1]
        }
    }

    /// The value before entry `i`.
    pub fn before(&self, i: usize) -> i64 {
        i.checked_sub(1).map_or(self.initial, |p| self.after(p))
    }

    /// The changes, as (entry after which it changes, value from there on).
    pub fn changes(&self) -> impl ExactSizeIterator<Item = (usize, i64)> + '_ {
        self.at.iter().copied().zip(self.value.iter().copied())
    }

    /// The changes at entries `lo..hi`.
    pub fn changes_in(&self, lo: usize, hi: usize) -> impl Iterator<Item = (usize, i64)> + '_ {
        let from = self.at.partition_point(|&a| a < lo);
        let to = self.at.partition_point(|&a| a < hi).max(from);
        self.at[from..to]
            .iter()
            .copied()
            .zip(self.value[from..to].iter().copied())
    }

    /// The value after each entry, in order.
    pub fn values(&self) -> impl Iterator<Item = i64> + '_ {
        let mut next = 0usize;
        let mut now = self.initial;
        (0..self.len).map(move |i| {
            if self.at.get(next) == Some(&i) {
                now = self.value[next];
                next += 1;
            }
            now
        })
    }

    /// Heap bytes held.
    pub fn bytes(&self) -> usize {
        self.at.len() * (size_of::<usize>() + size_of::<i64>())
    }

    /// The series as a frame of `entry` and `value_name`: the initial value at entry `-1`,
    /// then each change (what a report stores).
    pub fn frame(&self, value_name: &str) -> PolarsResult<DataFrame> {
        let entry: Vec<i64> = std::iter::once(-1).chain(self.at.iter().map(|&a| a as i64)).collect();
        let value: Vec<i64> = std::iter::once(self.initial)
            .chain(self.value.iter().copied())
            .collect();
        DataFrame::new(
            entry.len(),
            vec![Column::new(ENTRY.into(), entry), Column::new(value_name.into(), value)],
        )
    }

    /// The series [`EntrySteps::frame`] wrote, over `len` entries; an error names what is
    /// wrong with a frame it did not write.
    pub fn from_frame(df: &DataFrame, value_name: &str, len: usize) -> PolarsResult<EntrySteps> {
        let entry = df.column(ENTRY)?.i64()?;
        let value = df.column(value_name)?.i64()?;
        let bad = |why: &str| polars_err!(ComputeError: "the {value_name} steps {why}");
        let (Some(-1), Some(initial)) = (entry.get(0), value.get(0)) else {
            return Err(bad("do not start with the value before the first entry (entry -1)"));
        };
        let mut steps = EntrySteps::starting_at(initial);
        for (e, v) in entry.iter().zip(value.iter()).skip(1) {
            let (Some(e), Some(v)) = (e, v) else {
                return Err(bad("have a null"));
            };
            let e = usize::try_from(e).map_err(|_| bad("have a negative entry after the first row"))?;
            if e >= len || steps.at.last().is_some_and(|&a| a >= e) {
                return Err(bad(&format!(
                    "change at entry {e}: not ascending within the {len} entries"
                )));
            }
            steps.at.push(e);
            steps.value.push(v);
        }
        steps.len = len;
        Ok(steps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_answer_as_the_values_did() {
        let values = [5, 5, 7, 7, 7, 3, 3, 9];
        let s = EntrySteps::from_values(5, &values);
        assert_eq!(s.changes().collect::<Vec<_>>(), vec![(2, 7), (5, 3), (7, 9)]);
        assert_eq!(s.values().collect::<Vec<_>>(), values);
        for (i, &v) in values.iter().enumerate() {
            assert_eq!(s.after(i), v);
            assert_eq!(s.before(i), if i == 0 { 5 } else { values[i - 1] });
        }
        assert_eq!((s.after(100), s.last(), s.len()), (9, 9, 8));
        assert_eq!(s.changes_in(3, 7).collect::<Vec<_>>(), vec![(5, 3)]);
        assert_eq!(s.changes_in(5, 5).count(), 0);
        let back = EntrySteps::from_frame(&s.frame("reserved").unwrap(), "reserved", 8).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn a_frame_it_did_not_write_is_refused_with_the_reason() {
        let df = |e: Vec<i64>, v: Vec<i64>| {
            DataFrame::new(e.len(), vec![Column::new(ENTRY.into(), e), Column::new("r".into(), v)]).unwrap()
        };
        for (frame, why) in [
            (df(vec![0, 1], vec![1, 2]), "entry -1"),
            (df(vec![-1, 3, 3], vec![1, 2, 3]), "not ascending"),
            (df(vec![-1, 9], vec![1, 2]), "not ascending"),
            (df(vec![-1, -2], vec![1, 2]), "negative"),
        ] {
            let err = EntrySteps::from_frame(&frame, "r", 5).unwrap_err().to_string();
            assert!(err.contains(why), "{err}");
        }
    }
}
