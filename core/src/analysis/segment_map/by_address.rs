//! `SegmentsByAddress`: a replayed state's segments, sorted by start address in one vector.
//!
//! The replay finds the segment holding an address for every trace entry it undoes, and
//! changes the set of segments only on segment events (a few per thousand entries). A binary
//! search over a vector answers the first far cheaper than a `BTreeMap` range (which searches
//! for both ends of the range), at the price of moving the later segments on an insert or a remove.

use super::blocks::SegmentBlocks;

#[derive(Debug, Clone)]
pub(crate) struct Segment {
    pub(crate) size: i64,
    pub(crate) stream: i64,
    pub(crate) expandable: bool,
    /// Keyed by block address; blocks tile the segment.
    pub(crate) blocks: SegmentBlocks,
}

/// Segments keyed by start address, at most one per address, in address order.
#[derive(Debug, Clone, Default)]
pub(crate) struct SegmentsByAddress {
    sorted: Vec<(i64, Segment)>,
}

impl SegmentsByAddress {
    /// Segments from `(start, segment)` pairs in any order; of two with one start, the later
    /// one stays (as inserting them one by one would leave).
    pub(crate) fn from_pairs(mut pairs: Vec<(i64, Segment)>) -> SegmentsByAddress {
        // A stable sort keeps pairs of one start in their order: the last of each run stays.
        pairs.sort_by_key(|&(start, _)| start);
        let mut sorted: Vec<(i64, Segment)> = Vec::with_capacity(pairs.len());
        for pair in pairs {
            match sorted.last_mut() {
                Some(last) if last.0 == pair.0 => *last = pair,
                _ => sorted.push(pair),
            }
        }
        SegmentsByAddress { sorted }
    }

    pub(crate) fn len(&self) -> usize {
        self.sorted.len()
    }

    /// `(start, segment)` in address order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&i64, &Segment)> {
        self.sorted.iter().map(|(start, seg)| (start, seg))
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &Segment> {
        self.sorted.iter().map(|(_, seg)| seg)
    }

    /// The position of the last segment starting at or before `addr`.
    fn last_at_or_before(&self, addr: i64) -> Option<usize> {
        self.sorted.partition_point(|(start, _)| *start <= addr).checked_sub(1)
    }

    /// The start of the segment holding `addr`.
    pub(crate) fn start_holding(&self, addr: i64) -> Option<i64> {
        let (start, seg) = &self.sorted[self.last_at_or_before(addr)?];
        (addr < start + seg.size).then_some(*start)
    }

    /// The segment holding `addr`.
    pub(crate) fn holding_mut(&mut self, addr: i64) -> Option<&mut Segment> {
        let i = self.last_at_or_before(addr)?;
        let (start, seg) = &mut self.sorted[i];
        (addr < *start + seg.size).then_some(seg)
    }

    /// The segment that starts last before `addr` (whether or not it reaches `addr`).
    pub(crate) fn last_before(&self, addr: i64) -> Option<(i64, &Segment)> {
        let i = self.sorted.partition_point(|(start, _)| *start < addr).checked_sub(1)?;
        let (start, seg) = &self.sorted[i];
        Some((*start, seg))
    }

    /// The segment starting at `start`.
    pub(crate) fn get(&self, start: i64) -> Option<&Segment> {
        let i = self.sorted.binary_search_by_key(&start, |&(s, _)| s).ok()?;
        Some(&self.sorted[i].1)
    }

    /// Takes out the segment starting at `start`.
    pub(crate) fn remove(&mut self, start: i64) -> Option<Segment> {
        let i = self.sorted.binary_search_by_key(&start, |&(s, _)| s).ok()?;
        Some(self.sorted.remove(i).1)
    }

    /// Puts `seg` at `start`, replacing the segment that started there.
    pub(crate) fn insert(&mut self, start: i64, seg: Segment) {
        match self.sorted.binary_search_by_key(&start, |&(s, _)| s) {
            Ok(i) => self.sorted[i].1 = seg,
            Err(i) => self.sorted.insert(i, (start, seg)),
        }
    }
}

impl FromIterator<(i64, Segment)> for SegmentsByAddress {
    fn from_iter<I: IntoIterator<Item = (i64, Segment)>>(iter: I) -> SegmentsByAddress {
        SegmentsByAddress::from_pairs(iter.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(size: i64, stream: i64) -> Segment {
        Segment {
            size,
            stream,
            expandable: false,
            blocks: Default::default(),
        }
    }

    fn starts(s: &SegmentsByAddress) -> Vec<(i64, i64, i64)> {
        s.iter().map(|(&a, seg)| (a, seg.size, seg.stream)).collect()
    }

    #[test]
    fn pairs_of_one_start_keep_the_last_as_inserting_them_would() {
        let s = SegmentsByAddress::from_pairs(vec![(300, seg(10, 0)), (100, seg(50, 1)), (300, seg(20, 2))]);
        assert_eq!(starts(&s), vec![(100, 50, 1), (300, 20, 2)]);
    }

    #[test]
    fn finds_the_segment_holding_an_address_and_none_in_gaps() {
        let mut s = SegmentsByAddress::from_pairs(vec![(100, seg(50, 0)), (200, seg(10, 1))]);
        assert_eq!(s.start_holding(99), None);
        assert_eq!(s.start_holding(100), Some(100));
        assert_eq!(s.start_holding(149), Some(100));
        assert_eq!(s.start_holding(150), None);
        assert_eq!(s.start_holding(209), Some(200));
        assert_eq!(s.start_holding(210), None);
        assert_eq!(s.holding_mut(205).map(|seg| seg.stream), Some(1));
        assert_eq!(s.last_before(200).map(|(a, _)| a), Some(100));
        assert_eq!(s.last_before(100).map(|(a, _)| a), None);
        assert_eq!(s.last_before(500).map(|(a, _)| a), Some(200));
    }

    #[test]
    fn inserts_and_removes_keep_address_order() {
        let mut s = SegmentsByAddress::default();
        s.insert(300, seg(10, 0));
        s.insert(100, seg(10, 1));
        s.insert(200, seg(10, 2));
        s.insert(100, seg(20, 3));
        assert_eq!(starts(&s), vec![(100, 20, 3), (200, 10, 2), (300, 10, 0)]);
        assert_eq!(s.remove(200).map(|seg| seg.stream), Some(2));
        assert!(s.remove(200).is_none());
        assert_eq!(s.get(300).map(|seg| seg.stream), Some(0));
        assert!(s.get(250).is_none());
        assert_eq!(s.len(), 2);
    }
}
