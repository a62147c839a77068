//! The strings a pickle holds, each stored once under a `u32` id, with a guess at the id of a
//! string read again (traces repeat a few strings entry after entry).

use rustc_hash::FxHashMap;

/// String interner: every distinct string is stored once and named by a `u32`.
#[derive(Default)]
pub struct Interner {
    pub strings: Vec<Box<str>>,
    pub(super) map: FxHashMap<Box<str>, u32>,
    /// Ids of strings recently read from the input, by a cheap hash of their bytes ([`seen`]);
    /// a guess, checked against the string itself (any id, or one past the end, is safe).
    /// Traces repeat the same few strings entry after entry (every key when the pickler did not
    /// memoize them, `compile_context` "N/A" when it did): a hit skips both the UTF-8 check and
    /// the hash look-up.
    recent: Option<Box<[u32; RECENT]>>,
    /// Ids of short strings (up to 7 bytes: `"N/A"`, most keys) read before, by their bytes and
    /// length in one word ([`short_word`]): found by one compare, without reading the string
    /// itself (a memory load and a `memcmp` call each time were a tenth of decoding).
    short: Option<Box<[(u64, u32); SHORT]>>,
}

/// Slots of [`Interner::short`].
const SHORT: usize = 256;
/// A [`Interner::short`] slot that holds nothing (no short string's word: its length byte is
/// at most 7).
const NO_WORD: u64 = u64::MAX;

/// A string of at most 7 bytes as one word: its bytes, then its length in the top byte.
#[inline]
fn short_word(bytes: &[u8]) -> Option<u64> {
    if bytes.len() > 7 {
        return None;
    }
    let mut w = (bytes.len() as u64) << 56;
    for (i, &b) in bytes.iter().enumerate() {
        w |= u64::from(b) << (8 * i);
    }
    Some(w)
}

/// Slots of [`Interner::recent`].
pub(super) const RECENT: usize = 256;

/// The [`Interner::recent`] slot of a string's bytes: its length and three of its bytes.
#[inline]
pub(super) fn seen(bytes: &[u8]) -> usize {
    let (first, mid, last) = match bytes {
        [] => (0, 0, 0),
        b => (b[0], b[b.len() / 2], b[b.len() - 1]),
    };
    let h = (bytes.len() as u32)
        .wrapping_mul(0x9E37_79B9)
        .wrapping_add(u32::from_le_bytes([first, mid, last, 0]).wrapping_mul(0x85EB_CA6B));
    (h >> 24) as usize % RECENT
}

impl Interner {
    pub fn intern(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.map.get(s) {
            return id;
        }
        let id = self.strings.len() as u32;
        self.strings.push(s.into());
        self.map.insert(s.into(), id);
        id
    }
    pub fn get(&self, id: u32) -> &str {
        &self.strings[id as usize]
    }
}

pub(super) fn intern_bytes(strings: &mut Interner, bytes: &[u8]) -> u32 {
    if let Some(w) = short_word(bytes) {
        let slot = (w.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize % SHORT;
        let short = strings.short.get_or_insert_with(|| Box::new([(NO_WORD, 0); SHORT]));
        if short[slot].0 == w {
            return short[slot].1;
        }
        let id = intern_new(strings, bytes);
        if let Some(short) = strings.short.as_mut() {
            short[slot] = (w, id);
        }
        return id;
    }
    intern_new(strings, bytes)
}

/// [`intern_bytes`] for a string not found by its word.
fn intern_new(strings: &mut Interner, bytes: &[u8]) -> u32 {
    let slot = seen(bytes);
    let recent = strings.recent.get_or_insert_with(|| Box::new([u32::MAX; RECENT]));
    let guess = recent[slot];
    if strings.strings.get(guess as usize).is_some_and(|s| s.as_bytes() == bytes) {
        return guess;
    }
    let id = match std::str::from_utf8(bytes) {
        Ok(s) => strings.intern(s),
        // A lossy string is not the input's bytes: never the one to compare with.
        Err(_) => return strings.intern(&String::from_utf8_lossy(bytes)),
    };
    if let Some(recent) = strings.recent.as_mut() {
        recent[slot] = id;
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_read_again_get_their_own_ids_whatever_shares_their_slot() {
        let mut interner = Interner::default();
        // Many strings for 256 slots: every slot is shared, most of them by strings of one
        // length and the same first, middle and last bytes.
        let words: Vec<Vec<u8>> = (0..2_000u32)
            .map(|i| format!("k{}{:04}k", i % 7, i).into_bytes())
            .chain([b"".to_vec(), b"N/A".to_vec(), b"action".to_vec(), vec![0xff, 0xfe]])
            .collect();
        let first: Vec<u32> = words.iter().map(|w| intern_bytes(&mut interner, w)).collect();
        for round in 0..3 {
            for (w, &id) in words.iter().zip(&first).rev() {
                assert_eq!(intern_bytes(&mut interner, w), id, "round {round}");
                assert_eq!(interner.get(id), &*String::from_utf8_lossy(w));
            }
        }
        let distinct: std::collections::HashSet<u32> = first.iter().copied().collect();
        assert_eq!(distinct.len(), words.len());
        // Short strings (found by their word) of every length up to 8, sharing slots, and the
        // same bytes as a longer string's start.
        let short: Vec<Vec<u8>> = (0..3_000u32)
            .map(|i| i.to_le_bytes().iter().cycle().take((i % 9) as usize).copied().collect())
            .chain([b"N/A".to_vec(), b"N/A\0".to_vec(), b"N/A\0\0\0\0".to_vec(), vec![0xff]])
            .collect();
        let ids: Vec<u32> = short.iter().map(|w| intern_bytes(&mut interner, w)).collect();
        for round in 0..3 {
            for (w, &id) in short.iter().zip(&ids).rev() {
                assert_eq!(intern_bytes(&mut interner, w), id, "round {round}");
                assert_eq!(interner.get(id), &*String::from_utf8_lossy(w), "round {round}");
            }
        }
    }
}
