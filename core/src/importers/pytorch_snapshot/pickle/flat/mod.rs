//! Trace entries read straight from their bytes, without building their dicts.
//!
//! A trace entry is a dict of scalars and one frames list, written by Python's pickler the same
//! way millions of times: `EMPTY_DICT MEMOIZE MARK`, key/value pairs (keys and recurring
//! strings fetched from the memo, numbers inline, a new `compile_context` string, a new frames
//! list of frame dicts fetched from the memo), `SETITEMS`. Run through the general machine, each
//! entry's dict and list are made, filled, scanned by the lowering and freed again — most of
//! decoding. Here such an entry is read flat, each value into the slot the hook gives its key
//! ([`FlatDict`]), and handed to the hook to lower; only then does anything change: the memo
//! slots the entry's opcodes would have
//! filled are filled with what the machine would have left in them (the entry consumed, its
//! strings, its frames list's stack id), and the bytes are consumed.
//!
//! Anything else — another opcode, a new frame dict, a value the machine would have to build,
//! a reference to a slot the entry itself fills, an entry cut by the end of the read buffer, a
//! dict that is no trace entry — and nothing was read: the machine decodes those bytes as it
//! always does (`tests/tests/fast_entries.rs` checks both ways give the same tables on every
//! committed snapshot).

use std::io::Read;

mod seen;

use super::{intern_bytes, AppendHook, Heap, Input, Memo, PResult, Val, T_INT, T_STR};
use seen::{KnownLists, Seen, ShapeKey};

/// A value of a [`FlatDict`] pair that the machine would have had to build: the dict's list,
/// whose items are [`FlatDict::items`].
pub const ITEMS: Val = Val(super::T_ITEMS);

/// What an entry's MEMOIZE opcodes stored, in order.
#[derive(Clone, Copy)]
pub enum Memoized {
    /// The entry's own dict.
    Dict,
    /// A string it read.
    Str(u32),
    /// Its list.
    List,
}

/// Slots of [`FlatDict::fields`].
pub const FLAT_FIELDS: usize = 16;

/// An entry dict read by [`read`]: the values of the keys the hook reads, its one list's items,
/// what it memoized.
#[derive(Default)]
pub struct FlatDict {
    /// The value of each key [`FlatKeys::field_of`] gives a slot, by slot (the last one when a
    /// key repeats, as in Python); a value [`ITEMS`] is the list.
    pub fields: [Option<Val>; FLAT_FIELDS],
    /// How many key/value pairs it has.
    pub pairs: usize,
    /// The list's items (memo values: frame dicts, or frames already interned).
    pub items: Vec<Val>,
    /// Where the bytes of those items lie in the read's window, when they were read one by one
    /// between `MARK` and `APPENDS` (and could be remembered, [`KnownLists`]).
    items_bytes: Option<(usize, usize)>,
    /// Whether each of its keys was fetched by bytes [`seen::KeysByPosition`] now holds for
    /// its position (so that its keys can be the next entries' shape, [`seen::EntryShape`]).
    keys_known: bool,
    pub memoized: Vec<Memoized>,
    /// Bytes of the strings it read (charged to the memory budget as the machine charges them).
    pub string_bytes: usize,
}

/// Keys a flat read is for: the first key of an entry, the only key whose value may be a list
/// (new, or shared from the memo), and where the value of each key the hook reads goes.
#[derive(Clone)]
pub struct FlatKeys {
    pub first: u32,
    pub list: u32,
    /// A key's interned string id → its slot of [`FlatDict::fields`] ([`FLAT_FIELDS`] or more,
    /// or past the end: a key the hook does not read).
    pub field_of: Vec<u8>,
}

/// Lists followed with dicts waiting to be appended before flat reads stop.
const MAX_WAITING: usize = 64;

/// Bytes a flat read may look at: far more than any trace entry takes.
const WINDOW: usize = 4096;

/// What the machine keeps for its flat reads.
#[derive(Default)]
pub(super) struct FlatReader {
    /// The hook's keys, once asked; `None` inside: every dict is made by the machine.
    keys: Option<Option<FlatKeys>>,
    dict: FlatDict,
    seen: Seen,
    /// Lists with a dict made by the machine waiting on the stack to be appended: until it
    /// is, no entry for them is read flat, since it would become a row before that dict's.
    waiting: Vec<u32>,
}

impl FlatDict {
    /// Forgets where the list's item bytes lie unless the frames key's field (`list_slot`)
    /// holds that list: its bytes stand for the entry's stack only then (of a key given twice,
    /// the last one counts).
    #[inline]
    fn forget_items_bytes_unless_listed(&mut self, list_slot: Option<u8>) {
        if list_slot.and_then(|f| self.fields.get(f as usize)) != Some(&Some(ITEMS)) {
            self.items_bytes = None;
        }
    }
}

impl FlatReader {
    /// Reads the dict whose `EMPTY_DICT` was just read (at `at`), about to be appended to
    /// `list`, flat and has `hook` lower it: `true` when done (its memo slots filled, its bytes
    /// consumed), `false` when the machine is to make it (nothing was consumed).
    pub(super) fn entry<R: Read, H: AppendHook>(
        &mut self,
        input: &mut Input<R>,
        heap: &mut Heap,
        memo: &mut Memo,
        hook: &mut H,
        list: u32,
        at: u64,
    ) -> PResult<bool> {
        let Some(keys) = self.keys.get_or_insert_with(|| hook.flat_keys(heap)) else {
            return Ok(false);
        };
        let read = match self.waiting.contains(&list) {
            true => None,
            false => read(input.window(WINDOW)?, heap, memo, keys, &mut self.seen, &mut self.dict),
        };
        let lowered = match read {
            Some(_) => hook.lower_flat(heap, list, &self.dict, at)?,
            None => None,
        };
        let (Some(n), Some(list_value)) = (read, lowered) else {
            if !self.waiting.contains(&list) {
                self.waiting.push(list);
                if self.waiting.len() > MAX_WAITING {
                    // Lists that never have their dicts appended (no writer does this): the
                    // rest is read by the machine alone, rather than each dict looked up in an
                    // ever longer list.
                    self.keys = Some(None);
                }
            }
            return Ok(false);
        };
        if let Some((start, end)) = self.dict.items_bytes {
            // Remembered once its frames are all interned (a new frame dict is, once lowered;
            // a frame of FX code with its source trace is read anew each time).
            if self.dict.items.iter().all(|&f| heap.interned_frame(f).is_some()) {
                if let Some(items) = input.window(WINDOW)?.get(start..end) {
                    self.seen.lists.remember(items, list_value);
                }
            }
        }
        // What the machine charges for the strings and for each MEMOIZE, charged at once.
        heap.charge(self.dict.string_bytes / 4 + 4 * self.dict.memoized.len(), at)?;
        let mut aside = 0;
        for m in &self.dict.memoized {
            let v = match *m {
                Memoized::Dict => Val::consumed(),
                Memoized::Str(id) => Val::with(T_STR, id),
                Memoized::List => list_value,
            };
            aside += memo.push(v);
        }
        heap.charge(aside, at)?;
        input.skip(n);
        Ok(true)
    }

    /// Items were appended to `list`: the dicts waiting for it are in.
    pub(super) fn appended(&mut self, list: u32) {
        self.waiting.retain(|&l| l != list);
    }
}

/// Pairs and list items an entry may have before it is left to the machine.
const MAX_PAIRS: usize = 64;
const MAX_ITEMS: usize = 256;

/// A cursor over the bytes after an entry's `EMPTY_DICT`: `None` past the end. With `FRAMES`
/// it steps over FRAME opcodes between any two opcodes; without, a FRAME is an opcode it does
/// not know (the read stops there), which costs a FRAME check before every opcode less.
struct Bytes<'a, const FRAMES: bool> {
    b: &'a [u8],
    at: usize,
}

impl<const FRAMES: bool> Bytes<'_, FRAMES> {
    /// Steps over FRAME opcodes (protocol 4's buffering hints, between any two opcodes: one
    /// every 64 KiB, so inside an entry every thousand or so).
    #[inline]
    fn frames(&mut self) {
        while FRAMES && self.b.get(self.at) == Some(&0x95) {
            self.at += 9;
        }
    }
    /// The next opcode, not consumed.
    #[inline]
    fn peek_op(&mut self) -> Option<u8> {
        self.frames();
        self.b.get(self.at).copied()
    }
    /// The next opcode.
    #[inline]
    fn op(&mut self) -> Option<u8> {
        let v = self.peek_op()?;
        self.at += 1;
        Some(v)
    }
    /// Consumes the next opcode when it is `op`.
    #[inline]
    fn eat(&mut self, op: u8) -> bool {
        let hit = self.peek_op() == Some(op);
        self.at += hit as usize;
        hit
    }
    /// An argument byte.
    #[inline]
    fn byte(&mut self) -> Option<u8> {
        let v = self.b.get(self.at).copied()?;
        self.at += 1;
        Some(v)
    }
    /// A LONG1's `n` (at most 8) bytes as the number they write. Where 8 bytes are there to
    /// load (all but the input's last few), one load and two shifts sign-extend the `n` low
    /// ones, instead of a loop over the bytes (addresses and times are LONG1s: two an entry).
    #[inline(always)]
    fn short_long(&mut self, n: usize) -> Option<i64> {
        debug_assert!(n <= 8);
        let Some(eight) = self.b.get(self.at..self.at + 8) else {
            return self.take(n).map(super::decode_short_long);
        };
        let raw = u64::from_le_bytes(eight.try_into().ok()?);
        self.at += n;
        let unused = 64 - 8 * n as u32;
        Some(match n {
            0 => 0,
            _ => ((raw << unused) as i64) >> unused,
        })
    }
    /// `n` argument bytes.
    #[inline]
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let s = self.b.get(self.at..self.at + n)?;
        self.at += n;
        Some(s)
    }
}

/// Reads an entry dict from `b` (the bytes after its `EMPTY_DICT`) into `out`; the bytes read
/// (through its `SETITEMS`), or `None` when the machine is to read it. Interns the strings it
/// reads (as the machine would); changes nothing else.
fn read(
    b: &[u8],
    heap: &mut Heap,
    memo: &Memo,
    keys: &FlatKeys,
    seen: &mut Seen,
    out: &mut FlatDict,
) -> Option<usize> {
    seen.check(memo);
    if let Some(n) = read_shaped(b, heap, memo, seen, out) {
        return Some(n);
    }
    // Most entries hold no FRAME (one comes every 64 KiB, every thousand entries or so): read
    // without looking for one first, and again looking for them where that read stops.
    match read_with::<false>(b, heap, memo, keys, seen, out) {
        Some(n) => {
            let memoized = matches!(out.memoized.first(), Some(Memoized::Dict));
            seen.shape.learn(&seen.keys, out.pairs, out.keys_known, memoized, keys.list);
            Some(n)
        }
        None => read_with::<true>(b, heap, memo, keys, seen, out),
    }
}

/// [`scalar`] with one copy of its dispatch per position in the entry (`$position`, the
/// first twelve): the writer puts the same kind of value at the same position entry after
/// entry (a number, a string, a memo reference), which a branch per position predicts and one
/// shared branch does not (it was a third of reading an entry).
macro_rules! scalar_by_position {
    ($position:expr, $c:ident, $heap:ident, $memo:ident, $out:ident) => {
        scalar_by_position!(@ $position, $c, $heap, $memo, $out; 0 1 2 3 4 5 6 7 8 9 10 11)
    };
    (@ $position:expr, $c:ident, $heap:ident, $memo:ident, $out:ident; $($i:literal)*) => {
        match $position {
            $($i => scalar(&mut $c, $heap, $memo, $out)?,)*
            _ => scalar(&mut $c, $heap, $memo, $out)?,
        }
    };
}

/// Empties `out` for an entry's read.
#[inline(always)]
fn clear(out: &mut FlatDict) {
    out.fields = [None; FLAT_FIELDS];
    out.pairs = 0;
    out.items.clear();
    out.items_bytes = None;
    out.keys_known = true;
    out.memoized.clear();
    out.string_bytes = 0;
}

/// [`read_with`] for an entry whose keys are those of the shape remembered
/// ([`seen::EntryShape`]), position by position (`None`, and nothing but strings interned, when
/// they are not: the entry is then read key by key). Each key is one masked compare of the
/// bytes remembered; its value is read as [`read_with`] reads it.
fn read_shaped(b: &[u8], heap: &mut Heap, memo: &Memo, seen: &Seen, out: &mut FlatDict) -> Option<usize> {
    let shape = &seen.shape;
    if shape.keys.is_empty() {
        return None;
    }
    clear(out);
    let mut c = Bytes::<false> { b, at: 0 };
    if shape.memoized {
        if !c.eat(0x94) {
            return None;
        }
        out.memoized.push(Memoized::Dict);
    }
    if !c.eat(b'(') {
        return None;
    }
    for (i, &ShapeKey { bytes, mask, len, slot }) in shape.keys.iter().enumerate() {
        let eight = u64::from_le_bytes(c.b.get(c.at..c.at + 8)?.try_into().ok()?);
        if eight & mask != bytes {
            return None;
        }
        c.at += len as usize;
        let value = if i == shape.list_at {
            match c.peek_op() {
                Some(b']') => list(&mut c, memo, &seen.lists, out)?,
                Some(b'h' | b'j') => item(&mut c, memo)?,
                _ => scalar(&mut c, heap, memo, out)?,
            }
        } else {
            scalar_by_position!(i, c, heap, memo, out)
        };
        if let Some(field) = out.fields.get_mut(slot as usize) {
            *field = Some(value);
        }
    }
    if !c.eat(b'u') {
        return None;
    }
    out.pairs = shape.keys.len();
    out.forget_items_bytes_unless_listed(shape.keys.get(shape.list_at).map(|k| k.slot));
    Some(c.at)
}

fn read_with<const FRAMES: bool>(
    b: &[u8],
    heap: &mut Heap,
    memo: &Memo,
    keys: &FlatKeys,
    seen: &mut Seen,
    out: &mut FlatDict,
) -> Option<usize> {
    clear(out);
    let mut c = Bytes::<FRAMES> { b, at: 0 };
    if c.eat(0x94) {
        out.memoized.push(Memoized::Dict);
    }
    if !c.eat(b'(') {
        return None;
    }
    let mut list_read = false;
    loop {
        if c.eat(b'u') {
            out.forget_items_bytes_unless_listed(keys.field_of.get(keys.list as usize).copied());
            return (out.pairs > 0).then_some(c.at);
        }
        if out.pairs == MAX_PAIRS {
            return None;
        }
        let (key, slot) = match seen.keys.get(out.pairs, c.b, c.at) {
            Some((key, slot, len)) => {
                c.at += len;
                (key, slot)
            }
            None => {
                let start = c.at;
                let key = match scalar(&mut c, heap, memo, out)? {
                    k if k.tag() == T_STR => k.idx(),
                    _ => return None,
                };
                let slot = keys.field_of.get(key as usize).copied().unwrap_or(u8::MAX);
                // (Looking for a FRAME after the key may have stepped past the end.)
                let remembered = match c.b.get(start..c.at) {
                    Some(bytes) => seen.keys.remember(out.pairs, bytes, key, slot),
                    None => false,
                };
                out.keys_known &= remembered;
                (key, slot)
            }
        };
        if out.pairs == 0 && key != keys.first {
            return None;
        }
        let value = if c.peek_op() == Some(b']') {
            if key != keys.list || list_read {
                return None;
            }
            list_read = true;
            list(&mut c, memo, &seen.lists, out)?
        } else if key == keys.list && matches!(c.peek_op(), Some(b'h' | b'j')) {
            // A frames list shared from the memo (a container): the hook reads it without
            // keeping it, as it reads a frame dict of a list.
            item(&mut c, memo)?
        } else {
            scalar_by_position!(out.pairs, c, heap, memo, out)
        };
        if let Some(field) = out.fields.get_mut(slot as usize) {
            *field = Some(value);
        }
        out.pairs += 1;
    }
}

/// An int, `None`, a bool, a string (memoized or not) or a memo reference.
#[inline(always)]
fn scalar<const FRAMES: bool>(c: &mut Bytes<'_, FRAMES>, heap: &mut Heap, memo: &Memo, out: &mut FlatDict) -> Option<Val> {
    let v = match c.op()? {
        b'h' => got(memo, c.byte()? as usize)?,
        b'j' => got(memo, u32::from_le_bytes(c.take(4)?.try_into().ok()?) as usize)?,
        b'K' => int(c.byte()? as i64)?,
        b'M' => int(u16::from_le_bytes(c.take(2)?.try_into().ok()?) as i64)?,
        b'J' => int(i32::from_le_bytes(c.take(4)?.try_into().ok()?) as i64)?,
        0x8a => {
            let n = c.byte()? as usize;
            if n > 8 {
                return None;
            }
            int(c.short_long(n)?)?
        }
        b'N' => Val::NONE,
        0x88 => Val::bool(true),
        0x89 => Val::bool(false),
        op @ (0x8c | b'X') => {
            let len = if op == 0x8c {
                c.byte()? as usize
            } else {
                u32::from_le_bytes(c.take(4)?.try_into().ok()?) as usize
            };
            if len > 4096 {
                return None;
            }
            let id = intern_bytes(&mut heap.strings, c.take(len)?);
            out.string_bytes += len;
            if c.eat(0x94) {
                out.memoized.push(Memoized::Str(id));
            }
            Val::with(T_STR, id)
        }
        _ => return None,
    };
    Some(v)
}

/// A memo slot's value; `None` when the machine is to look (a slot past the end — perhaps one
/// the entry fills itself —, or a container, which the machine would count a reference to).
#[inline]
fn got(memo: &Memo, slot: usize) -> Option<Val> {
    memo.get(slot).filter(|v| v.obj().is_none())
}

/// A memo reference to a frame: a frame dict (a container, which the lowering reads without
/// keeping) or a frame already interned.
#[inline(always)]
fn item<const FRAMES: bool>(c: &mut Bytes<'_, FRAMES>, memo: &Memo) -> Option<Val> {
    let slot = match c.op()? {
        b'h' => c.byte()? as usize,
        b'j' => u32::from_le_bytes(c.take(4)?.try_into().ok()?) as usize,
        _ => return None,
    };
    memo.get(slot)
}

/// A new list of memo references: `EMPTY_LIST [MEMOIZE]`, then nothing, one item and `APPEND`,
/// or `MARK`, items, `APPENDS`. Inlined, as [`item`] is, so that the cursor never leaves the
/// read's registers: passed to a call, it was kept in memory, and each opcode's read waited on
/// a store and a load (a sixth of a flat read).
///
/// Its value: what a list of the same item bytes was lowered to ([`KnownLists`]), or [`ITEMS`]
/// (its items in `out`).
#[inline(always)]
fn list<const FRAMES: bool>(c: &mut Bytes<'_, FRAMES>, memo: &Memo, known: &KnownLists, out: &mut FlatDict) -> Option<Val> {
    c.op()?; // EMPTY_LIST
    if c.eat(0x94) {
        out.memoized.push(Memoized::List);
    }
    if c.eat(b'(') {
        let start = c.at;
        // Without FRAME checks only: the bytes between MARK and APPENDS are then items alone.
        if !FRAMES {
            if let Some((value, end)) = known.find(c.b, start) {
                c.at = end + 1;
                return Some(value);
            }
        }
        while !c.eat(b'e') {
            if out.items.len() == MAX_ITEMS {
                return None;
            }
            out.items.push(item(c, memo)?);
        }
        if !FRAMES {
            out.items_bytes = Some((start, c.at - 1));
        }
    } else if matches!(c.peek_op(), Some(b'h' | b'j')) {
        out.items.push(item(c, memo)?);
        if !c.eat(b'a') {
            return None;
        }
    }
    Some(ITEMS)
}

/// An int as the machine holds it inline (`None` beyond 60 bits: the machine keeps those aside).
#[inline]
fn int(i: i64) -> Option<Val> {
    ((i << 4) >> 4 == i).then_some(Val(((i as u64) << 4) | T_INT))
}

#[cfg(test)]
mod tests;
