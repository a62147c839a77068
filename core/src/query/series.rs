//! A device's allocated bytes as the timeline queries read them: a slice of i64, or [`Units`]
//! (u32 counts of a power of two, as a stored usage holds a PyTorch trace's: every request is
//! a multiple of 512 bytes), behind one trait, so that each query is compiled once for each
//! form and reads its values without choosing the form again for each one ([`on_series`]
//! chooses once a query).

/// Values a query reads by entry.
pub trait Series: Copy {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Value `i` (panics past the end).
    fn at(&self, i: usize) -> i64;
    /// The min and max of entries `lo..hi` and `init`.
    fn fold_min_max(&self, lo: usize, hi: usize, init: (i64, i64)) -> (i64, i64);
}

impl Series for &[i64] {
    #[inline]
    fn len(&self) -> usize {
        <[i64]>::len(self)
    }
    #[inline]
    fn at(&self, i: usize) -> i64 {
        self[i]
    }
    #[inline]
    fn fold_min_max(&self, lo: usize, hi: usize, init: (i64, i64)) -> (i64, i64) {
        self[lo..hi]
            .iter()
            .fold(init, |(min, max), &v| (min.min(v), max.max(v)))
    }
}

/// Value `i` is `base + (offsets[i] << shift)`.
#[derive(Debug, Clone, Copy)]
pub struct Units<'a> {
    pub base: i64,
    pub shift: u32,
    pub offsets: &'a [u32],
}

impl Units<'_> {
    #[inline]
    fn value(&self, offset: u32) -> i64 {
        self.base + (i64::from(offset) << self.shift)
    }
}

impl Series for Units<'_> {
    #[inline]
    fn len(&self) -> usize {
        self.offsets.len()
    }
    #[inline]
    fn at(&self, i: usize) -> i64 {
        self.value(self.offsets[i])
    }
    /// Folded over the u32 offsets, then put in bytes: the map from offset to value never
    /// decreases, so the offsets' min and max are the values'.
    #[inline]
    fn fold_min_max(&self, lo: usize, hi: usize, init: (i64, i64)) -> (i64, i64) {
        let run = &self.offsets[lo..hi];
        if run.is_empty() {
            return init;
        }
        let (min, max) = run
            .iter()
            .fold((u32::MAX, 0u32), |(min, max), &v| (min.min(v), max.max(v)));
        (init.0.min(self.value(min)), init.1.max(self.value(max)))
    }
}

/// Runs `$body` with `$s` bound to `$values` (an [`IntSlice`](crate::tables::int_slice::IntSlice)) as a
/// [`Series`]: [`Units`] for u32 offsets, the slice itself for i64, the values made into a
/// vector for codes (no stored series is held as codes).
macro_rules! on_series {
    ($values:expr, |$s:ident| $body:expr) => {
        match $values {
            $crate::tables::int_slice::IntSlice::U32 { base, shift, offsets } => {
                let $s = $crate::query::series::Units { base, shift, offsets };
                $body
            }
            $crate::tables::int_slice::IntSlice::I64(values) => {
                let $s = values;
                $body
            }
            coded @ $crate::tables::int_slice::IntSlice::Coded { .. } => {
                let held = coded.to_vec();
                let $s: &[i64] = &held;
                $body
            }
        }
    };
}
pub(crate) use on_series;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_read_and_fold_as_the_values_they_stand_for() {
        let offsets = [3u32, 0, u32::MAX, 7, 7, 1];
        let units = Units {
            base: -4096,
            shift: 9,
            offsets: &offsets,
        };
        let values: Vec<i64> = offsets.iter().map(|&o| -4096 + (i64::from(o) << 9)).collect();
        let wide: &[i64] = &values;
        assert_eq!(units.len(), wide.len());
        for i in 0..values.len() {
            assert_eq!(units.at(i), wide.at(i));
            for j in i..=values.len() {
                for init in [(i64::MAX, i64::MIN), (0, 0), (-1 << 50, 1 << 50)] {
                    assert_eq!(
                        units.fold_min_max(i, j, init),
                        wide.fold_min_max(i, j, init),
                        "{i}..{j}"
                    );
                }
            }
        }
    }
}
