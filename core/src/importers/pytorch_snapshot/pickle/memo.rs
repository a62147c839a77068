//! The pickle memo: four bytes a slot while a slot is recent, a few bits once it is not.
//!
//! A pickler memoizes nearly everything it writes (every trace entry's dict, every frame list,
//! every string that is not interned): the bench snapshot stores 7.2 M memo slots, the 2 GB
//! generated one 105 M, and the memo lives until the end of decoding. What it holds are
//! strings, containers and their compact stand-ins (stack ids, frame ids, consumed entries),
//! whose tagged word ([`Val`]) fits 32 bits; a value that does not (a large integer a hostile
//! or unusual pickle memoizes) is kept aside by slot.
//!
//! Those words repeat: a trace entry's slots hold its dict (consumed), its action string (one
//! of a handful) and its frame list (a stack id, from however many stacks the program has).
//! So past its first [`PLAIN_SLOTS`] (plain words, read as fast as before), the slots are held
//! in pages of [`PAGE`]: the newest two as plain words, the ones before each as its distinct
//! words and, per slot, the bits that pick one of them ([`PackedPage`]): a few bits a slot
//! instead of 32 for most slots of a long trace. A page whose words
//! hardly repeat stays plain, and so does one a store reaches after it was packed (a container
//! that died replaced by its stand-in), so a hostile pickle can make it no larger than before.
//! Every slot reads back the word it was given.

use rustc_hash::FxHashMap;

use super::Val;

/// A slot's word when its value is kept in [`Memo::wide`].
const WIDE: u32 = u32::MAX;
/// log2 of the slots in a page.
const PAGE_BITS: usize = 12;
/// Slots in a page.
const PAGE: usize = 1 << PAGE_BITS;

/// Slots held plain, one word each, before any is paged: a memo of up to 64 MiB (every
/// snapshot of up to a few hundred megabytes) is read as fast as a plain vector; only what a
/// larger one adds is packed.
const PLAIN_SLOTS: usize = 1 << 24;

/// Memo slots by index; unset slots below the highest stored read as `None` (the value 0).
pub(super) struct Memo {
    /// Slots `0 .. head.len()`, plain; at most `plain_slots` of them.
    head: Vec<u32>,
    plain_slots: usize,
    /// Its pages asked for ahead of its slots (see [`crate::infra::fault_ahead`]).
    ahead: crate::infra::fault_ahead::FaultAhead,
    /// The slots after the head (made only once it is full), [`PAGE`] a page.
    pages: Vec<Page>,
    pool: PagePool,
    /// The slots after the pages', plain: fewer than two pages' worth after any call.
    tail: Vec<u32>,
    wide: FxHashMap<u32, Val>,
    /// Stores into a slot that held a value ([`Memo::overwrites`]).
    overwrites: u64,
    /// Reused by each packing.
    codes: Codes,
}

impl Default for Memo {
    fn default() -> Self {
        Memo::with_plain_slots(PLAIN_SLOTS)
    }
}

impl Memo {
    /// A memo whose first `plain_slots` slots are never paged.
    fn with_plain_slots(plain_slots: usize) -> Memo {
        Memo {
            head: Vec::new(),
            plain_slots,
            ahead: Default::default(),
            pages: Vec::new(),
            pool: PagePool::default(),
            tail: Vec::new(),
            wide: FxHashMap::default(),
            overwrites: 0,
            codes: Codes::default(),
        }
    }

    /// Slots stored so far (the next MEMOIZE's index).
    #[inline]
    pub fn len(&self) -> usize {
        self.head.len() + self.pages.len() * PAGE + self.tail.len()
    }

    /// Bytes the memo holds.
    pub fn held_bytes(&self) -> usize {
        let pages = self.pages.capacity() * std::mem::size_of::<Page>() + self.pool.held_bytes();
        (self.head.capacity() + self.tail.capacity()) * 4 + pages + self.wide.len() * 16
    }

    /// Grows the memo to `len` slots, the new ones holding `None`.
    pub fn grow_to(&mut self, len: usize) {
        if len > self.len() {
            self.head.resize(len.min(self.plain_slots), Val::NONE.0 as u32);
            if len > self.plain_slots {
                let tail_len = len - self.plain_slots - self.pages.len() * PAGE;
                self.tail.resize(tail_len, Val::NONE.0 as u32);
                self.seal();
            }
        }
    }

    /// The value in `slot`, `None` past the end.
    #[inline(always)]
    pub fn get(&self, slot: usize) -> Option<Val> {
        let word = match self.head.get(slot) {
            Some(&word) => word,
            None => self.paged(slot - self.head.len())?,
        };
        if word == WIDE {
            return self.wide.get(&(slot as u32)).copied();
        }
        Some(Val(word as u64))
    }

    /// The word of slot `i` after the head's, `None` past the end (out of line: the head's
    /// reads, which are most, stay as small as a plain vector's).
    #[inline(never)]
    fn paged(&self, i: usize) -> Option<u32> {
        match self.pages.get(i >> PAGE_BITS) {
            Some(p) => Some(p.get(&self.pool, i & (PAGE - 1))),
            None => self.tail.get(i - self.pages.len() * PAGE).copied(),
        }
    }

    /// How many times [`Memo::set`] stored into a slot holding a value: what a slot held is
    /// still there, or its stand-in, while this is unchanged.
    #[inline]
    pub fn overwrites(&self) -> u64 {
        self.overwrites
    }

    /// Stores `v` in a new slot after the last (what MEMOIZE does); returns the bytes kept
    /// aside for it.
    #[inline(always)]
    pub fn push(&mut self, v: Val) -> usize {
        let word = compact(v);
        if word != WIDE {
            if self.head.len() < self.plain_slots {
                self.head.push(word);
                self.ahead.after_push(&mut self.head);
                return 0;
            }
            // Past the head, a slot that seals no page goes to the tail here (out of line, each
            // of a long trace's tens of millions of slots past the head was a call).
            if self.tail.len() + 1 < 2 * PAGE {
                self.tail.push(word);
                return 0;
            }
        }
        self.push_past_head_or_wide(v, word)
    }

    /// [`Memo::push`] of a slot that fills the head's last or seals a page, or of a wide value.
    #[inline(never)]
    fn push_past_head_or_wide(&mut self, v: Val, word: u32) -> usize {
        let slot = self.len();
        if self.head.len() < self.plain_slots {
            self.head.push(word);
            self.ahead.after_push(&mut self.head);
        } else {
            self.tail.push(word);
            if self.tail.len() == 2 * PAGE {
                self.seal();
            }
        }
        if word == WIDE {
            self.wide.insert(slot as u32, v);
            return 16;
        }
        0
    }

    /// Stores `v` in `slot` (below [`Memo::len`]); returns the bytes kept aside for it.
    #[inline]
    pub fn set(&mut self, slot: usize, v: Val) -> usize {
        let (aside, old) = self.store(slot, v);
        self.overwrites += u64::from(old != 0);
        aside
    }

    /// Replaces a dead container in `slot` by `stand_in`, what it was lowered to (a frame dict
    /// by its frame, a trace entry by "consumed"). Not counted among the [`Memo::overwrites`]:
    /// what a flat read remembers of a slot (a key's string, a frame dict's frame) reads the
    /// same after.
    #[inline]
    pub fn stand_in(&mut self, slot: usize, stand_in: Val) -> usize {
        self.store(slot, stand_in).0
    }

    /// Stores `v` in `slot`: the bytes kept aside for it and the word the slot held.
    #[inline]
    fn store(&mut self, slot: usize, v: Val) -> (usize, u32) {
        let word = compact(v);
        let old = match slot.checked_sub(self.head.len()) {
            None => std::mem::replace(&mut self.head[slot], word),
            Some(i) => match i.checked_sub(self.pages.len() * PAGE) {
                Some(t) => std::mem::replace(&mut self.tail[t], word),
                None => self.pages[i >> PAGE_BITS].set(&mut self.pool, i & (PAGE - 1), word),
            },
        };
        if old == WIDE {
            self.wide.remove(&(slot as u32));
        }
        if word == WIDE {
            self.wide.insert(slot as u32, v);
            return (16, old);
        }
        (0, old)
    }

    /// Packs the tail's pages but the newest.
    #[cold]
    #[inline(never)]
    fn seal(&mut self) {
        let full = self.tail.len() / PAGE;
        if full < 2 {
            return;
        }
        let sealing = (full - 1) * PAGE;
        for words in self.tail[..sealing].chunks_exact(PAGE) {
            self.pages.push(self.codes.page_of(words, &mut self.pool));
        }
        self.tail.copy_within(sealing.., 0);
        self.tail.truncate(self.tail.len() - sealing);
    }
}

/// A value's word when it fits below [`WIDE`].
#[inline]
fn compact(v: Val) -> u32 {
    u32::try_from(v.0).ok().filter(|&w| w != WIDE).unwrap_or(WIDE)
}

/// [`PAGE`] slots, held in a [`PagePool`].
#[derive(Debug, Clone, Copy)]
enum Page {
    /// Its words at `pool.plain[at..at + PAGE]`.
    Plain { at: usize },
    /// Its distinct words at `pool.words[words_at..]` and, per slot, `width` bits from
    /// `pool.bits[bits_at]` on picking one.
    Packed { words_at: usize, bits_at: usize, width: u32 },
}

/// The pages' contents, each kind in one vector: one allocation apiece (large enough to be
/// mapped and unmapped whole) rather than two for each of tens of thousands of pages.
#[derive(Default)]
struct PagePool {
    plain: Vec<u32>,
    words: Vec<u32>,
    bits: Vec<u64>,
}

impl PagePool {
    fn held_bytes(&self) -> usize {
        (self.plain.capacity() + self.words.capacity()) * 4 + self.bits.capacity() * 8
    }
}

impl Page {
    #[inline]
    fn get(self, pool: &PagePool, i: usize) -> u32 {
        match self {
            Page::Plain { at } => pool.plain[at + i],
            Page::Packed { words_at, width: 0, .. } => pool.words[words_at],
            Page::Packed { words_at, bits_at, width } => {
                let width = width as usize;
                let (at, shift) = (bits_at + ((i * width) >> 6), (i * width) & 63);
                let mut code = pool.bits[at] >> shift;
                if shift + width > 64 {
                    code |= pool.bits[at + 1] << (64 - shift);
                }
                pool.words[words_at + (code & ((1 << width) - 1)) as usize]
            }
        }
    }

    /// Stores `word` in slot `i`, the page plain from now on (its packed form left unused);
    /// returns the word it held.
    fn set(&mut self, pool: &mut PagePool, i: usize, word: u32) -> u32 {
        if let Page::Packed { .. } = self {
            let at = pool.plain.len();
            for j in 0..PAGE {
                let w = self.get(pool, j);
                pool.plain.push(w);
            }
            *self = Page::Plain { at };
        }
        let Page::Plain { at } = *self else {
            unreachable!("made plain above")
        };
        std::mem::replace(&mut pool.plain[at + i], word)
    }
}

/// Slots of the table [`Codes`] finds a page's distinct words with: a power of two, twice a
/// page, so it never fills.
const TABLE: usize = 2 * PAGE;

/// A page's distinct words as they are found, each with its code (an open-addressing table
/// reused page after page: an entry of an earlier page reads as empty by its stamp).
struct Codes {
    table: Box<[(u32, u16, u32)]>,
    stamp: u32,
    words: Vec<u32>,
    codes: Vec<u16>,
}

impl Default for Codes {
    fn default() -> Self {
        Codes {
            table: vec![(0, 0, 0); TABLE].into_boxed_slice(),
            stamp: 0,
            words: Vec::new(),
            codes: Vec::with_capacity(PAGE),
        }
    }
}

impl Codes {
    /// `words` (one page) packed into `pool`, or plain when packing would save under a
    /// quarter.
    fn page_of(&mut self, words: &[u32], pool: &mut PagePool) -> Page {
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            self.table.fill((0, 0, 0));
            self.stamp = 1;
        }
        let stamp = self.stamp;
        self.words.clear();
        self.codes.clear();
        for &w in words {
            let mut h = (w.wrapping_mul(0x9E37_79B1) >> (32 - TABLE.trailing_zeros())) as usize;
            let code = loop {
                let (word, code, at) = &mut self.table[h];
                if *at != stamp {
                    (*word, *code, *at) = (w, self.words.len() as u16, stamp);
                    self.words.push(w);
                    break *code;
                }
                if *word == w {
                    break *code;
                }
                h = (h + 1) & (TABLE - 1);
            };
            self.codes.push(code);
        }
        let width = u32::BITS - (self.words.len() as u32 - 1).leading_zeros();
        let packed_bytes = self.words.len() * 4 + (PAGE * width as usize).div_ceil(64) * 8;
        if packed_bytes * 4 > PAGE * 4 * 3 {
            let at = pool.plain.len();
            pool.plain.extend_from_slice(words);
            return Page::Plain { at };
        }
        let (words_at, bits_at) = (pool.words.len(), pool.bits.len());
        pool.words.extend_from_slice(&self.words);
        pool.bits.resize(bits_at + (PAGE * width as usize).div_ceil(64), 0);
        let bits = &mut pool.bits[bits_at..];
        if width > 0 {
            for (i, &code) in self.codes.iter().enumerate() {
                let (at, shift) = ((i * width as usize) >> 6, (i * width as usize) & 63);
                bits[at] |= (code as u64) << shift;
                if shift + width as usize > 64 {
                    bits[at + 1] |= (code as u64) >> (64 - shift);
                }
            }
        }
        Page::Packed { words_at, bits_at, width }
    }
}

#[cfg(test)]
mod tests {
    use super::super::T_INT;
    use super::*;
    use crate::infra::testing::Lcg;

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

    /// Pushes, stores and gaps in every kind of page (one word, a few, a page's worth of
    /// distinct ones, wide ones) read back as a plain vector of the same values does.
    #[test]
    fn every_slot_reads_back_what_it_was_given_packed_or_plain() {
        let mut rng = Lcg(7);
        let mut memo = Memo::with_plain_slots(PAGE + 5);
        let mut plain: Vec<Val> = Vec::new();
        let distinct = [1u64, 3, 40, 1000, 1 << 20];
        for round in 0..60 {
            let kinds = distinct[round % distinct.len()];
            for _ in 0..rng.below(3 * PAGE as u64) {
                let v = match rng.below(50) {
                    0 => Val((-(rng.below(9) as i64) as u64) << 4 | T_INT),
                    _ => Val::stack(rng.below(kinds) as u32),
                };
                plain.push(v);
                memo.push(v);
            }
            if rng.below(4) == 0 {
                let to = plain.len() + rng.below(PAGE as u64 * 3) as usize;
                plain.resize(to, Val::NONE);
                memo.grow_to(to);
            }
            for _ in 0..rng.below(20) {
                if plain.is_empty() {
                    break;
                }
                let slot = rng.below(plain.len() as u64) as usize;
                let v = Val::frame(rng.below(kinds) as u32);
                plain[slot] = v;
                memo.set(slot, v);
            }
            assert_eq!(memo.len(), plain.len());
            assert!(memo.head.len() <= PAGE + 5 && memo.tail.len() < 2 * PAGE, "{} slots still plain", memo.tail.len());
            for (slot, &v) in plain.iter().enumerate() {
                assert_eq!(memo.get(slot), Some(v), "slot {slot} of {}", plain.len());
            }
            assert_eq!(memo.get(plain.len()), None);
        }
        assert!(
            memo.pages.iter().any(|p| matches!(p, Page::Packed { width: 0, .. })),
            "a page of one word"
        );
        assert!(memo.pages.iter().any(|p| matches!(p, Page::Plain { .. })), "a page that hardly repeats");
        assert_eq!(memo.head.len(), PAGE + 5);
    }

    #[test]
    fn a_trace_like_memo_takes_a_few_bits_a_slot() {
        let mut memo = Memo::with_plain_slots(0);
        let strings = [Val::string(3), Val::string(4), Val::string(5)];
        for i in 0..40 * PAGE {
            memo.push(match i % 3 {
                0 => Val::consumed(),
                1 => strings[(i / 3) % 3],
                _ => Val::stack((i / 3 % 50) as u32),
            });
        }
        let paged = memo.pages.len() * PAGE;
        assert!(paged >= 38 * PAGE && memo.pool.plain.is_empty(), "every page but the newest packed");
        let packed = memo.pool.words.len() * 4 + memo.pool.bits.len() * 8;
        assert!(packed < paged, "{packed} bytes for {paged} slots: not under a byte a slot");
        assert_eq!(memo.get(3 * 1000 + 2), Some(Val::stack(1000 % 50)));
    }
}
