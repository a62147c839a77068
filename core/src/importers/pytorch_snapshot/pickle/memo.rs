//! The pickle memo, four bytes a slot.
//!
//! A pickler memoizes nearly everything it writes (every trace entry's dict, every frame list,
//! every string that is not interned): the bench snapshot stores 7.2 M memo slots, a 2 GB one
//! about 67 M, and the memo lives until the end of decoding. What it holds are strings,
//! containers and their compact stand-ins (stack ids, frame ids, consumed entries), whose
//! tagged word ([`Val`]) fits 32 bits; a value that does not (a large integer a hostile or
//! unusual pickle memoizes) is kept aside by slot.

use rustc_hash::FxHashMap;

use super::Val;

/// A slot's word when its value is kept in [`Memo::wide`].
const WIDE: u32 = u32::MAX;

/// Memo slots by index; unset slots below the highest stored read as `None` (the value 0).
#[derive(Default)]
pub(super) struct Memo {
    slots: Vec<u32>,
    /// Its pages asked for ahead of its slots (see [`crate::fault_ahead`]).
    ahead: crate::fault_ahead::FaultAhead,
    wide: FxHashMap<u32, Val>,
}

impl Memo {
    /// Slots stored so far (the next MEMOIZE's index).
    #[inline]
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Grows the memo to `len` slots, the new ones holding `None`.
    pub fn grow_to(&mut self, len: usize) {
        if len > self.slots.len() {
            self.slots.resize(len, Val::NONE.0 as u32);
        }
    }

    /// The value in `slot`, `None` past the end.
    #[inline]
    pub fn get(&self, slot: usize) -> Option<Val> {
        let word = *self.slots.get(slot)?;
        if word == WIDE {
            return self.wide.get(&(slot as u32)).copied();
        }
        Some(Val(word as u64))
    }

    /// Stores `v` in a new slot after the last (what MEMOIZE does); returns the bytes kept
    /// aside for it.
    #[inline]
    pub fn push(&mut self, v: Val) -> usize {
        let word = compact(v);
        self.slots.push(word);
        self.ahead.after_push(&mut self.slots);
        if word == WIDE {
            self.wide.insert((self.slots.len() - 1) as u32, v);
            return 16;
        }
        0
    }

    /// Stores `v` in `slot` (below [`Memo::len`]); returns the bytes kept aside for it.
    #[inline]
    pub fn set(&mut self, slot: usize, v: Val) -> usize {
        let old = std::mem::replace(&mut self.slots[slot], compact(v));
        if old == WIDE {
            self.wide.remove(&(slot as u32));
        }
        if self.slots[slot] == WIDE {
            self.wide.insert(slot as u32, v);
            return 16;
        }
        0
    }
}

/// A value's word when it fits below [`WIDE`].
#[inline]
fn compact(v: Val) -> u32 {
    u32::try_from(v.0).ok().filter(|&w| w != WIDE).unwrap_or(WIDE)
}

#[cfg(test)]
mod tests {
    use super::super::T_INT;
    use super::*;

    #[test]
    fn values_wider_than_a_slot_are_kept_aside_and_replaced() {
        let mut memo = Memo::default();
        memo.grow_to(3);
        let negative = Val((-5i64 as u64) << 4 | T_INT);
        let biggest_id = Val::stack((1 << 28) - 1);
        assert_eq!(memo.set(0, negative), 16, "a negative int does not fit 32 bits");
        assert_eq!(memo.set(1, biggest_id), 0);
        assert_eq!(memo.get(0), Some(negative));
        assert_eq!(memo.get(1), Some(biggest_id));
        assert_eq!(memo.get(2), Some(Val::NONE));
        assert_eq!(memo.get(3), None);
        memo.set(0, Val::consumed());
        assert_eq!(memo.get(0), Some(Val::consumed()));
        assert!(memo.wide.is_empty(), "the wide value left with its slot");
        let max_word = Val(WIDE as u64);
        memo.set(2, max_word);
        assert_eq!(memo.get(2), Some(max_word), "the marker's own word is kept aside too");
    }
}
