//! What flat reads ([`super`]) remember of the entries before, to read the next ones with
//! less work: each position's key by its bytes ([`KeysByPosition`]), the last entry's keys
//! all together ([`EntryShape`]) and each frames list's stack by its item bytes
//! ([`KnownLists`]). All of it is forgotten when a memo slot is stored over
//! ([`Memo::overwrites`]), since what the bytes name may then have changed.

use super::super::{Memo, Val};

/// What flat reads remember of the entries before: their keys by position and their frames
/// lists by their bytes, forgotten when a memo slot is stored over ([`Memo::overwrites`]).
#[derive(Default)]
pub(super) struct Seen {
    pub(super) keys: KeysByPosition,
    pub(super) shape: EntryShape,
    pub(super) lists: KnownLists,
    /// [`Memo::overwrites`] when they were remembered: a slot stored over since may now hold
    /// another string or frame.
    overwrites: u64,
}

impl Seen {
    /// Forgets everything when a memo slot was stored over since it was remembered.
    #[inline]
    pub(super) fn check(&mut self, memo: &Memo) {
        if self.overwrites != memo.overwrites() {
            *self = Seen {
                overwrites: memo.overwrites(),
                ..Default::default()
            };
        }
    }
}

/// Positions of an entry whose keys [`KeysByPosition`] remembers (PyTorch writes 8 or 9 keys).
const KEYS_REMEMBERED: usize = 12;

/// The key each position of the last entries had, by its bytes: a writer puts the same keys
/// in the same order entry after entry, each a `BINGET` or `LONG_BINGET` of the slot its
/// string was memoized in. A key whose bytes are those remembered for its position is the key
/// remembered, and its slot of [`FlatDict::fields`], without fetching its memo slot, checking
/// it is a string and looking up its field (that was a third of reading an entry).
#[derive(Default)]
pub(super) struct KeysByPosition {
    pub(super) seen: [SeenKey; KEYS_REMEMBERED],
}

/// The key a position had: its opcode and index bytes (little-endian, in the low `len` bytes
/// of `bytes`; `len` 0 for none), its string id and field slot (`u8::MAX` for a key the hook
/// does not read).
#[derive(Clone, Copy, Default)]
pub(super) struct SeenKey {
    bytes: u64,
    pub(super) len: u8,
    key: u32,
    slot: u8,
}

impl KeysByPosition {
    /// The key remembered for `position` when `b[at..]` starts with its bytes: its string id,
    /// field slot and length in bytes. (Eight bytes are loaded at once; within eight of the
    /// end, the key is read as any other.)
    #[inline(always)]
    pub(super) fn get(&self, position: usize, b: &[u8], at: usize) -> Option<(u32, u8, usize)> {
        let k = self.seen.get(position)?;
        let eight = u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?);
        let mask = u64::MAX >> (64 - 8 * u32::from(k.len.max(1)));
        (k.len != 0 && eight & mask == k.bytes).then_some((k.key, k.slot, k.len as usize))
    }

    /// Remembers that `bytes` (a `BINGET` or `LONG_BINGET`) at `position` read as `key`, of
    /// field slot `slot`; `false` when they are not remembered (another opcode, a position
    /// past those remembered).
    #[inline]
    pub(super) fn remember(&mut self, position: usize, bytes: &[u8], key: u32, slot: u8) -> bool {
        let (Some(seen), [b'h', _] | [b'j', _, _, _, _]) = (self.seen.get_mut(position), bytes) else {
            return false;
        };
        let mut eight = [0; 8];
        eight[..bytes.len()].copy_from_slice(bytes);
        *seen = SeenKey {
            bytes: u64::from_le_bytes(eight),
            len: bytes.len() as u8,
            key,
            slot,
        };
        true
    }
}

/// The keys of the last entry read key by key, in order, as [`KeysByPosition`] knew them: the
/// next entry whose key bytes are these, position after position, has these keys, read with
/// no per-key bookkeeping (how many pairs so far, whether the first key is the entry's,
/// whether a list may come, which position's key to look up): [`super::read_shaped`].
#[derive(Default)]
pub(super) struct EntryShape {
    /// Whether the entry's dict was memoized (a `MEMOIZE` after its `EMPTY_DICT`).
    pub(super) memoized: bool,
    /// Each position's key; none: no shape (an entry is read key by key).
    pub(super) keys: Vec<ShapeKey>,
    /// The position whose key is the frames list's (past the end: none).
    pub(super) list_at: usize,
}

/// A key of an [`EntryShape`]: its opcode and index bytes (little-endian, the low `len` bytes
/// of `bytes`; `mask` keeps those), and its field slot.
#[derive(Clone, Copy)]
pub(super) struct ShapeKey {
    pub(super) bytes: u64,
    pub(super) mask: u64,
    pub(super) len: u8,
    pub(super) slot: u8,
}

impl EntryShape {
    /// Takes as the shape the keys of an entry of `pairs` pairs just read key by key, every one
    /// of them fetched by bytes [`KeysByPosition`] now holds for its position (`known`); else
    /// there is no shape. `list` is the frames list's key; an entry naming it twice has none.
    pub(super) fn learn(&mut self, keys: &KeysByPosition, pairs: usize, known: bool, memoized: bool, list: u32) {
        self.keys.clear();
        self.list_at = usize::MAX;
        if !known || pairs > KEYS_REMEMBERED {
            return;
        }
        for (i, k) in keys.seen[..pairs].iter().enumerate() {
            if k.len == 0 {
                self.keys.clear();
                return;
            }
            if k.key == list {
                if self.list_at != usize::MAX {
                    self.keys.clear();
                    return;
                }
                self.list_at = i;
            }
            self.keys.push(ShapeKey {
                bytes: k.bytes,
                mask: u64::MAX >> (64 - 8 * u32::from(k.len)),
                len: k.len,
                slot: k.slot,
            });
        }
        self.memoized = memoized;
    }
}

/// Frames lists [`KnownLists`] remembers at most, and bytes of their items: a few MiB at most
/// (a trace has as many distinct lists as stacks, thousands; past these, lists are read as
/// before).
const KNOWN_LISTS: usize = 1 << 16;
const KNOWN_LIST_BYTES: usize = 4 << 20;

/// Frames lists read before, by the bytes of their items (`BINGET`s and `LONG_BINGET`s of
/// frame dicts): a trace lists the same stacks again and again, each time as the same bytes. A
/// list whose item bytes were lowered before is the stack it was lowered to, without reading
/// each item from the memo, finding its frame and hashing the frames to their stack (that was
/// a fifth of decoding a trace of eight-frame stacks).
#[derive(Default)]
pub(super) struct KnownLists {
    /// Each remembered list's item bytes, one after another.
    bytes: Vec<u8>,
    lists: hashbrown::HashTable<KnownList>,
}

/// A remembered list: its item bytes (`bytes[start..start + len]`), their hash, what it was
/// lowered to.
#[derive(Clone, Copy)]
struct KnownList {
    hash: u64,
    start: u32,
    len: u32,
    value: Val,
}

impl KnownLists {
    /// The value a list whose item bytes start at `b[start..]` was lowered to, and where its
    /// `APPENDS` is, when these bytes were remembered.
    #[inline]
    pub(super) fn find(&self, b: &[u8], start: usize) -> Option<(Val, usize)> {
        if self.lists.is_empty() {
            return None;
        }
        let mut at = start;
        loop {
            match *b.get(at)? {
                b'h' => at += 2,
                b'j' => at += 5,
                b'e' => break,
                _ => return None,
            }
        }
        let items = &b[start..at];
        let hash = hash_bytes(items);
        let known = self.lists.find(hash, |k| {
            k.hash == hash && self.bytes[k.start as usize..(k.start + k.len) as usize] == *items
        })?;
        Some((known.value, at))
    }

    /// Remembers that a list of item bytes `items` (not remembered yet) was lowered to `value`.
    pub(super) fn remember(&mut self, items: &[u8], value: Val) {
        if self.lists.len() >= KNOWN_LISTS || self.bytes.len() + items.len() > KNOWN_LIST_BYTES {
            return;
        }
        let known = KnownList {
            hash: hash_bytes(items),
            start: self.bytes.len() as u32,
            len: items.len() as u32,
            value,
        };
        self.bytes.extend_from_slice(items);
        self.lists.insert_unique(known.hash, known, |k| k.hash);
    }
}

/// The hash of a list's item bytes.
#[inline]
fn hash_bytes(b: &[u8]) -> u64 {
    use std::hash::Hasher;
    let mut h = rustc_hash::FxHasher::default();
    h.write(b);
    h.finish()
}
