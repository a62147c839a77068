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
    }
}
