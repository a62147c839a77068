//! A restricted, non-recursive pickle virtual machine for allocator snapshots.
//!
//! It accepts protocols 2–5 and only the opcodes that build plain data (dict, list, tuple,
//! set, str, bytes, int, float, bool, None, memo, MARK, FRAME, STOP). Every opcode that imports
//! or calls (GLOBAL, REDUCE, BUILD, …) and protocol-5 out-of-band buffers are refused with an
//! error naming the opcode and its byte offset.
//!
//! Design, driven by the 176 MB / 2.7 M-entry benchmark file:
//! - values are 8-byte tagged words ([`Val`]); containers live in an arena ([`Heap`]) and are
//!   shared by handle, so memo fan-out costs nothing;
//! - containers are reference counted (stack and container slots count, the memo does not);
//!   when a memoized container dies, an [`AppendHook`] may replace it by a compact value (a
//!   stack id, a frame id) so that later memo references still resolve, and its slot is reused;
//! - every item appended to a list is first offered to the hook, which turns trace entries
//!   into table rows on the spot: the trace never exists as an object tree.
//! - a dict about to be appended to a list may instead be read flat from its bytes and handed
//!   to the hook ([`flat`]): a trace entry then never exists as a dict at all.
//!
//! Bounds on hostile input: nesting depth, open MARKs, memo index density and a total memory
//! budget are capped; every length prefix is checked against what the input can still hold
//! before anything is allocated, and long payloads are read incrementally.

use std::io::Read;

use rustc_hash::FxHashMap;

pub mod flat;
mod memo;
use flat::{FlatDict, FlatKeys, FlatReader};
use memo::Memo;

/// Limits that keep hostile input from exhausting the process.
#[derive(Debug, Clone, Copy)]
pub struct PickleLimits {
    /// Deepest container nesting (and most open MARKs) accepted.
    pub max_depth: u32,
    /// Approximate bytes the decoder may hold (stack, memo, containers, strings).
    pub memory_budget: usize,
}

impl Default for PickleLimits {
    fn default() -> Self {
        PickleLimits {
            max_depth: 1_000,
            memory_budget: 4 << 30,
        }
    }
}

/// Errors from the pickle layer (declared with the crate's other errors).
pub use crate::error::PickleError;

pub type PResult<T> = Result<T, PickleError>;

// ---------------------------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------------------------

/// An 8-byte tagged value: 4 tag bits, 60 payload bits.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub struct Val(u64);

const T_NONE: u64 = 0;
const T_BOOL: u64 = 1;
const T_INT: u64 = 2;
const T_WIDE: u64 = 3;
const T_HUGE: u64 = 4;
const T_FLOAT: u64 = 5;
const T_STR: u64 = 6;
const T_BYTES: u64 = 7;
const T_OBJ: u64 = 8;
const T_STACK: u64 = 9;
const T_FRAME: u64 = 10;
const T_CONSUMED: u64 = 11;
/// A list read flat ([`flat::ITEMS`]).
const T_ITEMS: u64 = 12;
/// A trace entry lowered where it was read ([`Val::LOWERED_ENTRY`]).
const T_LOWERED: u64 = 13;
const T_UNSET: u64 = 15;

/// A decoded value, as seen by code outside the VM.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum V {
    None,
    Bool(bool),
    Int(i64),
    /// An integer outside the i64 range.
    Huge,
    Float(f64),
    Str(u32),
    Bytes(u32),
    Obj(u32),
    /// A frame list already interned as a stack id.
    Stack(u32),
    /// A frame dict already interned as a frame id.
    Frame(u32),
    /// A trace entry already turned into a table row (it cannot be used twice).
    Consumed,
}

impl Val {
    pub const NONE: Val = Val(T_NONE);
    /// What stands on the stack for a trace entry read flat and already lowered into a row of
    /// the list it will be appended to ([`flat`]): the append hook takes it as consumed.
    pub const LOWERED_ENTRY: Val = Val(T_LOWERED);
    const UNSET: Val = Val(T_UNSET);
    #[inline]
    fn tag(self) -> u64 {
        self.0 & 0xF
    }
    #[inline]
    fn idx(self) -> u32 {
        (self.0 >> 4) as u32
    }
    #[inline]
    fn with(tag: u64, idx: u32) -> Val {
        Val(((idx as u64) << 4) | tag)
    }
    #[inline]
    pub fn bool(b: bool) -> Val {
        Val(((b as u64) << 4) | T_BOOL)
    }
    pub fn stack(id: u32) -> Val {
        Val::with(T_STACK, id)
    }
    pub fn frame(id: u32) -> Val {
        Val::with(T_FRAME, id)
    }
    /// The interned string `id`.
    pub fn string(id: u32) -> Val {
        Val::with(T_STR, id)
    }
    pub fn consumed() -> Val {
        Val(T_CONSUMED)
    }
    #[inline]
    fn obj(self) -> Option<u32> {
        (self.tag() == T_OBJ).then(|| self.idx())
    }
}

/// Container kinds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    List,
    /// Items are stored as alternating key, value.
    Dict,
    Tuple,
    Set,
    Free,
}

/// A container in the arena.
#[derive(Debug)]
pub struct Obj {
    pub kind: Kind,
    pub items: Vec<Val>,
    rc: u32,
    memo_slot: u32,
    depth: u32,
    /// A compact stand-in computed by the hook (stack id, frame id), used when the container dies.
    pub lowered: Val,
    /// Rows of the trace table that were appended to this list instead of items.
    pub rows: Option<(u32, u32)>,
}

const NO_SLOT: u32 = u32::MAX;
const MANY_SLOTS: u32 = u32::MAX - 1;

/// String interner: every distinct string is stored once and named by a `u32`.
#[derive(Default)]
pub struct Interner {
    pub strings: Vec<Box<str>>,
    map: FxHashMap<Box<str>, u32>,
    /// Ids of strings recently read from the input, by a cheap hash of their bytes ([`seen`]);
    /// a guess, checked against the string itself (any id, or one past the end, is safe).
    /// Traces repeat the same few strings entry after entry (every key when the pickler did not
    /// memoize them, `compile_context` "N/A" when it did): a hit skips both the UTF-8 check and
    /// the hash look-up.
    recent: Option<Box<[u32; RECENT]>>,
}

/// Slots of [`Interner::recent`].
const RECENT: usize = 256;

/// The [`Interner::recent`] slot of a string's bytes: its length and three of its bytes.
#[inline]
fn seen(bytes: &[u8]) -> usize {
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

/// Everything the VM built: the arena, interned strings and side tables for wide values.
pub struct Heap {
    pub objs: Vec<Obj>,
    free: Vec<u32>,
    pub strings: Interner,
    wide: Vec<i64>,
    floats: Vec<f64>,
    bytes: Vec<Box<[u8]>>,
    mem: usize,
    budget: usize,
    max_depth: u32,
    /// Container items ever stored: the yardstick for how far a walk over them may expand.
    pub items_created: u64,
    /// Item vectors of freed containers, emptied, for the next containers made: a trace entry
    /// dict is made and freed millions of times, and the allocator was a sixth of decoding.
    spare: Vec<Vec<Val>>,
    /// The work list of [`Heap::decref`], kept between calls.
    dying: Vec<u32>,
}

/// Most emptied item vectors kept for reuse, and the largest capacity kept.
const SPARE_VECS: usize = 4096;
const SPARE_CAPACITY: usize = 1024;

impl Heap {
    fn new(limits: &PickleLimits) -> Heap {
        Heap {
            objs: Vec::new(),
            free: Vec::new(),
            strings: Interner::default(),
            wide: Vec::new(),
            floats: Vec::new(),
            bytes: Vec::new(),
            mem: 0,
            budget: limits.memory_budget,
            max_depth: limits.max_depth,
            items_created: 0,
            spare: Vec::new(),
            dying: Vec::new(),
        }
    }

    /// An empty item vector, reused from a freed container when there is one.
    fn items_vec(&mut self) -> Vec<Val> {
        self.spare.pop().unwrap_or_default()
    }

    /// A new container holding a copy of `items`.
    fn new_obj_from(&mut self, kind: Kind, items: &[Val], offset: u64) -> PResult<Val> {
        let mut v = self.items_vec();
        v.extend_from_slice(items);
        self.new_obj(kind, v, offset)
    }

    /// Looks a value up.
    #[inline]
    pub fn get(&self, v: Val) -> V {
        match v.tag() {
            T_NONE => V::None,
            T_BOOL => V::Bool(v.idx() != 0),
            T_INT => V::Int((v.0 as i64) >> 4),
            T_WIDE => V::Int(self.wide[v.idx() as usize]),
            T_HUGE => V::Huge,
            T_FLOAT => V::Float(self.floats[v.idx() as usize]),
            T_STR => V::Str(v.idx()),
            T_BYTES => V::Bytes(v.idx()),
            T_OBJ => V::Obj(v.idx()),
            T_STACK => V::Stack(v.idx()),
            T_FRAME => V::Frame(v.idx()),
            T_CONSUMED => V::Consumed,
            _ => V::None,
        }
    }

    /// The frame id `v` stands for when its frame is interned already: a frame, or a frame dict
    /// lowered to one (what nearly every frame of a trace entry is).
    #[inline]
    pub fn interned_frame(&self, v: Val) -> Option<u32> {
        match v.tag() {
            T_FRAME => Some(v.idx()),
            T_OBJ => {
                let lowered = self.objs.get(v.idx() as usize)?.lowered;
                (lowered.tag() == T_FRAME).then(|| lowered.idx())
            }
            _ => None,
        }
    }

    pub fn str_of(&self, v: Val) -> Option<&str> {
        match self.get(v) {
            V::Str(id) => Some(self.strings.get(id)),
            _ => None,
        }
    }

    pub fn int_of(&self, v: Val) -> Option<i64> {
        match self.get(v) {
            V::Int(i) => Some(i),
            V::Bool(b) => Some(b as i64),
            _ => None,
        }
    }

    pub fn float_of(&self, v: Val) -> Option<f64> {
        match self.get(v) {
            V::Float(f) => Some(f),
            V::Int(i) => Some(i as f64),
            _ => None,
        }
    }

    /// The value under `key` (an interned string id) in dict `obj`; the last one wins.
    pub fn dict_get(&self, obj: u32, key: u32) -> Option<Val> {
        let o = &self.objs[obj as usize];
        if o.kind != Kind::Dict {
            return None;
        }
        o.items
            .chunks_exact(2)
            .rev()
            .find(|kv| kv[0] == Val::with(T_STR, key))
            .map(|kv| kv[1])
    }

    /// Items of a list, tuple or set (empty for anything else).
    pub fn seq(&self, obj: u32) -> &[Val] {
        let o = &self.objs[obj as usize];
        match o.kind {
            Kind::List | Kind::Tuple | Kind::Set => &o.items,
            _ => &[],
        }
    }

    pub fn kind(&self, obj: u32) -> Kind {
        self.objs[obj as usize].kind
    }

    fn int(&mut self, i: i64) -> Val {
        if (i << 4) >> 4 == i {
            Val(((i as u64) << 4) | T_INT)
        } else {
            self.wide.push(i);
            Val::with(T_WIDE, (self.wide.len() - 1) as u32)
        }
    }

    fn charge(&mut self, n: usize, offset: u64) -> PResult<()> {
        self.mem += n;
        if self.mem > self.budget {
            return Err(PickleError::MemoryBudget {
                offset,
                limit: self.budget,
            });
        }
        Ok(())
    }

    fn new_obj(&mut self, kind: Kind, items: Vec<Val>, offset: u64) -> PResult<Val> {
        self.charge(64 + items.len() * 8, offset)?;
        self.items_created += items.len() as u64;
        let obj = Obj {
            kind,
            items,
            rc: 1,
            memo_slot: NO_SLOT,
            depth: 0,
            lowered: Val::UNSET,
            rows: None,
        };
        let idx = if let Some(i) = self.free.pop() {
            self.objs[i as usize] = obj;
            i
        } else {
            self.objs.push(obj);
            (self.objs.len() - 1) as u32
        };
        // Children moved in (tuple, frozenset) keep their counts; record depth.
        let mut depth = 0;
        for v in &self.objs[idx as usize].items {
            if let Some(c) = v.obj() {
                depth = depth.max(self.objs[c as usize].depth + 1);
            }
        }
        self.set_depth(idx, depth, offset)?;
        Ok(Val::with(T_OBJ, idx))
    }

    fn set_depth(&mut self, idx: u32, depth: u32, offset: u64) -> PResult<()> {
        if depth > self.max_depth {
            return Err(PickleError::TooDeep {
                offset,
                limit: self.max_depth,
            });
        }
        let o = &mut self.objs[idx as usize];
        o.depth = o.depth.max(depth);
        Ok(())
    }

    /// Moves `v` into container `idx` (the reference moves, counts are unchanged).
    fn push_item(&mut self, idx: u32, v: Val, offset: u64) -> PResult<()> {
        if let Some(c) = v.obj() {
            let d = self.objs[c as usize].depth + 1;
            self.set_depth(idx, d, offset)?;
        }
        self.charge(8, offset)?;
        self.items_created += 1;
        self.objs[idx as usize].items.push(v);
        Ok(())
    }

    #[inline]
    fn incref(&mut self, v: Val) {
        if let Some(i) = v.obj() {
            self.objs[i as usize].rc += 1;
        }
    }

    /// Drops one reference; dead containers are freed (iteratively), memoized ones are
    /// replaced in the memo by their compact stand-in when they have one, kept otherwise.
    fn decref(&mut self, v: Val, memo: &mut Memo) {
        let Some(i) = v.obj() else { return };
        let mut work = std::mem::take(&mut self.dying);
        work.push(i);
        while let Some(i) = work.pop() {
            let o = &mut self.objs[i as usize];
            o.rc = o.rc.saturating_sub(1);
            if o.rc > 0 || o.kind == Kind::Free {
                continue;
            }
            let (memo_slot, lowered) = (o.memo_slot, o.lowered);
            match memo_slot {
                NO_SLOT => {}
                MANY_SLOTS => continue,
                slot => {
                    if lowered == Val::UNSET {
                        continue; // still reachable through the memo, keep it
                    }
                    self.mem += memo.set(slot as usize, lowered);
                }
            }
            let o = &mut self.objs[i as usize];
            let mut items = std::mem::take(&mut o.items);
            o.kind = Kind::Free;
            self.mem = self.mem.saturating_sub(64 + items.len() * 8);
            work.extend(items.iter().filter_map(|v| v.obj()));
            self.free.push(i);
            if self.spare.len() < SPARE_VECS && items.capacity() <= SPARE_CAPACITY {
                items.clear();
                self.spare.push(items);
            }
        }
        self.dying = work;
    }
}

/// Offered every item appended to a list, before it is stored.
pub trait AppendHook {
    /// Returns `true` when the hook consumed `item` (the VM then drops its reference and does
    /// not store it in `list`).
    fn on_append(&mut self, heap: &mut Heap, list: u32, item: Val, offset: u64) -> PResult<bool>;

    /// The keys of the dicts the hook would consume if read flat ([`flat`]); `None` (the
    /// default): every dict is made by the machine.
    fn flat_keys(&mut self, _heap: &mut Heap) -> Option<FlatKeys> {
        None
    }

    /// Consumes a dict read flat, about to be appended to `list` (a list below the innermost
    /// MARK): `Ok(None)` when the hook would not consume it (the machine then reads it), else
    /// what the memo is to hold for the dict's list (when it has one).
    fn lower_flat(&mut self, _heap: &mut Heap, _list: u32, _dict: &FlatDict, _offset: u64) -> PResult<Option<Val>> {
        Ok(None)
    }
}

// ---------------------------------------------------------------------------------------------
// Input
// ---------------------------------------------------------------------------------------------

const BUF: usize = 1 << 20;

/// A buffered reader that knows its offset and an upper bound on what is left.
pub struct Input<R: Read> {
    r: R,
    buf: Box<[u8]>,
    pos: usize,
    end: usize,
    before: u64,
    eof: bool,
    /// The last read error, kept so callers can recover typed errors smuggled through `io::Error`.
    pub last_io_error: Option<std::io::Error>,
    /// Upper bound on the total input length (file size, or the decompression limit).
    pub total_bound: u64,
}

impl<R: Read> Input<R> {
    pub fn new(r: R, total_bound: u64) -> Self {
        Input {
            r,
            buf: vec![0u8; BUF].into_boxed_slice(),
            pos: 0,
            end: 0,
            before: 0,
            eof: false,
            last_io_error: None,
            total_bound,
        }
    }

    #[inline]
    pub fn offset(&self) -> u64 {
        self.before + self.pos as u64
    }

    fn fill(&mut self) -> PResult<bool> {
        if self.eof {
            return Ok(false);
        }
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.before += self.pos as u64;
            self.end -= self.pos;
            self.pos = 0;
        }
        loop {
            match self.r.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let msg = e.to_string();
                    self.last_io_error = Some(e);
                    return Err(PickleError::Input(msg));
                }
            }
        }
    }

    #[inline]
    fn u8(&mut self, what: &'static str) -> PResult<u8> {
        if self.pos < self.end {
            let b = self.buf[self.pos];
            self.pos += 1;
            return Ok(b);
        }
        self.u8_slow(what)
    }

    #[cold]
    fn u8_slow(&mut self, what: &'static str) -> PResult<u8> {
        while self.pos >= self.end {
            if !self.fill()? {
                return Err(PickleError::Truncated {
                    offset: self.offset(),
                    what,
                });
            }
        }
        let b = self.buf[self.pos];
        self.pos += 1;
        Ok(b)
    }

    /// `n ≤ BUF` bytes, contiguous.
    #[inline]
    fn take(&mut self, n: usize, what: &'static str) -> PResult<&[u8]> {
        debug_assert!(n <= BUF);
        while self.end - self.pos < n {
            if !self.fill()? {
                return Err(PickleError::Truncated {
                    offset: self.offset(),
                    what,
                });
            }
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> PResult<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    /// A payload of `len` bytes announced at `at`: checked against what can remain, then read
    /// incrementally so that a lying prefix never allocates more than the input holds.
    fn payload(&mut self, len: u64, at: u64, what: &'static str) -> PResult<Vec<u8>> {
        let remaining = self.total_bound.saturating_sub(self.offset());
        if len > remaining {
            return Err(PickleError::LengthTooLarge {
                offset: at,
                len,
                remaining,
            });
        }
        let mut out = Vec::new();
        let mut left = len as usize;
        while left > 0 {
            if self.pos == self.end && !self.fill()? {
                return Err(PickleError::Truncated {
                    offset: self.offset(),
                    what,
                });
            }
            let n = left.min(self.end - self.pos);
            out.extend_from_slice(&self.buf[self.pos..self.pos + n]);
            self.pos += n;
            left -= n;
        }
        Ok(out)
    }

    /// The bytes from the current position on, at least `want` of them unless the input ends
    /// first (reading more when fewer are buffered); nothing is consumed.
    fn window(&mut self, want: usize) -> PResult<&[u8]> {
        while self.end - self.pos < want && self.fill()? {}
        Ok(&self.buf[self.pos..self.end])
    }

    /// Consumes `n` bytes of the last [`Input::window`].
    fn skip(&mut self, n: usize) {
        debug_assert!(self.pos + n <= self.end);
        self.pos += n;
    }

    /// Bytes left after the current position (reads to the end).
    fn count_rest(&mut self) -> PResult<u64> {
        let mut n = (self.end - self.pos) as u64;
        self.pos = self.end;
        while self.fill()? {
            n += (self.end - self.pos) as u64;
            self.pos = self.end;
        }
        Ok(n)
    }
}

// ---------------------------------------------------------------------------------------------
// The machine
// ---------------------------------------------------------------------------------------------

/// What decoding produced: the root value and the heap it lives in.
pub struct Decoded {
    pub root: Val,
    pub heap: Heap,
}

/// Decodes one pickle from `input`, offering every list item to `hook`.
pub fn decode<R: Read, H: AppendHook>(input: &mut Input<R>, limits: PickleLimits, hook: &mut H) -> PResult<Decoded> {
    let mut heap = Heap::new(&limits);
    let mut stack: Vec<Val> = Vec::new();
    let mut marks: Vec<usize> = Vec::new();
    let mut memo = Memo::default();
    // Values taken off the stack by POP_MARK, kept between opcodes.
    let mut scratch: Vec<Val> = Vec::new();
    // Trace entries read flat, when the hook reads them so.
    let mut flat = FlatReader::default();

    let first_offset = input.offset();
    let first = input.u8("the PROTO opcode")?;
    if first != 0x80 {
        return Err(PickleError::NotPickle { first });
    }
    let protocol = input.u8("the protocol number")?;
    if !(2..=5).contains(&protocol) {
        return Err(PickleError::Protocol {
            protocol,
            offset: first_offset + 1,
        });
    }

    macro_rules! malformed {
        ($at:expr, $($arg:tt)*) => {
            return Err(PickleError::Malformed { offset: $at, msg: format!($($arg)*) })
        };
    }

    loop {
        let at = input.offset();
        let op = input.u8("an opcode")?;
        match op {
            // STOP
            b'.' => {
                if stack.len() != 1 || !marks.is_empty() {
                    malformed!(
                        at,
                        "STOP with {} values and {} open MARKs on the stack",
                        stack.len(),
                        marks.len()
                    );
                }
                let extra = input.count_rest()?;
                if extra > 0 {
                    return Err(PickleError::Trailing { offset: at, extra });
                }
                let root = stack.pop().unwrap_or(Val::NONE);
                return Ok(Decoded { root, heap });
            }
            // FRAME: a buffering hint
            0x95 => {
                input.array::<8>("a FRAME length")?;
            }
            0x80 => malformed!(at, "PROTO opcode after the start"),
            // MARK
            b'(' => {
                if marks.len() as u32 >= limits.max_depth {
                    return Err(PickleError::TooDeep {
                        offset: at,
                        limit: limits.max_depth,
                    });
                }
                marks.push(stack.len());
            }
            // POP
            b'0' => match stack.pop() {
                Some(v) => heap.decref(v, &mut memo),
                None => {
                    if marks.pop().is_none() {
                        malformed!(at, "POP on an empty stack");
                    }
                }
            },
            // POP_MARK
            b'1' => {
                let m = pop_mark(&mut marks, stack.len(), at)?;
                scratch.extend(stack.drain(m..));
                for v in scratch.drain(..) {
                    heap.decref(v, &mut memo);
                }
            }
            // DUP
            b'2' => {
                let Some(&v) = stack.last() else {
                    malformed!(at, "DUP on an empty stack")
                };
                heap.incref(v);
                push(&mut stack, &mut heap, v, at)?;
            }
            b'N' => push(&mut stack, &mut heap, Val::NONE, at)?,
            0x88 => push(&mut stack, &mut heap, Val::bool(true), at)?,
            0x89 => push(&mut stack, &mut heap, Val::bool(false), at)?,
            // BININT1, BININT2, BININT
            b'K' => {
                let b = input.u8("a BININT1 argument")?;
                push(&mut stack, &mut heap, Val(((b as u64) << 4) | T_INT), at)?;
            }
            b'M' => {
                let v = u16::from_le_bytes(input.array("a BININT2 argument")?);
                push(&mut stack, &mut heap, Val(((v as u64) << 4) | T_INT), at)?;
            }
            b'J' => {
                let v = i32::from_le_bytes(input.array("a BININT argument")?) as i64;
                let v = heap.int(v);
                push(&mut stack, &mut heap, v, at)?;
            }
            // LONG1, LONG4
            0x8a | 0x8b => {
                let n = if op == 0x8a {
                    input.u8("a LONG1 length")? as u64
                } else {
                    let n = i32::from_le_bytes(input.array("a LONG4 length")?);
                    if n < 0 {
                        malformed!(at, "negative LONG4 length {n}");
                    }
                    n as u64
                };
                let v = if n <= 8 {
                    let bytes = input.take(n as usize, "a LONG1 value")?;
                    heap.int(decode_short_long(bytes))
                } else {
                    let bytes = input.payload(n, at, "a long integer")?;
                    match decode_long(&bytes) {
                        Some(i) => heap.int(i),
                        None => Val(T_HUGE),
                    }
                };
                push(&mut stack, &mut heap, v, at)?;
            }
            // BINFLOAT (big-endian)
            b'G' => {
                let f = f64::from_be_bytes(input.array("a BINFLOAT argument")?);
                heap.floats.push(f);
                let v = Val::with(T_FLOAT, (heap.floats.len() - 1) as u32);
                push(&mut stack, &mut heap, v, at)?;
            }
            // SHORT_BINUNICODE, BINUNICODE, BINUNICODE8, SHORT_BINSTRING, BINSTRING
            0x8c | b'X' | 0x8d | b'U' | b'T' => {
                let len = match op {
                    0x8c | b'U' => input.u8("a string length")? as u64,
                    b'X' => u32::from_le_bytes(input.array("a string length")?) as u64,
                    b'T' => {
                        let n = i32::from_le_bytes(input.array("a string length")?);
                        if n < 0 {
                            malformed!(at, "negative BINSTRING length {n}");
                        }
                        n as u64
                    }
                    _ => u64::from_le_bytes(input.array("a string length")?),
                };
                let id = if len <= 4096 {
                    let bytes = input.take(len as usize, "a string")?;
                    intern_bytes(&mut heap.strings, bytes)
                } else {
                    let bytes = input.payload(len, at, "a string")?;
                    intern_bytes(&mut heap.strings, &bytes)
                };
                heap.charge(len as usize / 4, at)?;
                push(&mut stack, &mut heap, Val::with(T_STR, id), at)?;
            }
            // SHORT_BINBYTES, BINBYTES, BINBYTES8, BYTEARRAY8
            b'C' | b'B' | 0x8e | 0x96 => {
                let len = match op {
                    b'C' => input.u8("a bytes length")? as u64,
                    b'B' => u32::from_le_bytes(input.array("a bytes length")?) as u64,
                    _ => u64::from_le_bytes(input.array("a bytes length")?),
                };
                let bytes = input.payload(len, at, "a bytes object")?;
                heap.charge(bytes.len() + 32, at)?;
                heap.bytes.push(bytes.into_boxed_slice());
                let v = Val::with(T_BYTES, (heap.bytes.len() - 1) as u32);
                push(&mut stack, &mut heap, v, at)?;
            }
            // EMPTY_DICT, EMPTY_LIST, EMPTY_TUPLE, EMPTY_SET
            b'}' | b']' | b')' | 0x8f => {
                // A trace entry's dict is read flat when it can be (see `flat`).
                if let (b'}', Some(list)) = (op, flat_candidate(&stack, &marks, &heap)) {
                    if flat.entry(input, &mut heap, &mut memo, hook, list, at)? {
                        push(&mut stack, &mut heap, Val::LOWERED_ENTRY, at)?;
                        continue;
                    }
                }
                let kind = match op {
                    b'}' => Kind::Dict,
                    b']' => Kind::List,
                    b')' => Kind::Tuple,
                    _ => Kind::Set,
                };
                let items = heap.items_vec();
                let v = heap.new_obj(kind, items, at)?;
                push(&mut stack, &mut heap, v, at)?;
            }
            // TUPLE, LIST, DICT, FROZENSET (mark-based constructors)
            b't' | b'l' | b'd' | 0x91 => {
                let m = pop_mark(&mut marks, stack.len(), at)?;
                let items = &stack[m..];
                let kind = match op {
                    b't' => Kind::Tuple,
                    b'l' => Kind::List,
                    b'd' => {
                        if !items.len().is_multiple_of(2) {
                            malformed!(at, "DICT with an odd number of items");
                        }
                        Kind::Dict
                    }
                    _ => Kind::Set,
                };
                let v = heap.new_obj_from(kind, items, at)?;
                stack.truncate(m);
                push(&mut stack, &mut heap, v, at)?;
            }
            // TUPLE1..3
            0x85..=0x87 => {
                let n = (op - 0x84) as usize;
                if stack.len() < n + marks.last().copied().unwrap_or(0) {
                    malformed!(at, "TUPLE{n} with too few values on the stack");
                }
                let m = stack.len() - n;
                let v = heap.new_obj_from(Kind::Tuple, &stack[m..], at)?;
                stack.truncate(m);
                push(&mut stack, &mut heap, v, at)?;
            }
            // APPEND
            b'a' => {
                let floor = marks.last().copied().unwrap_or(0);
                if stack.len() < floor + 2 {
                    malformed!(at, "APPEND without a list and a value");
                }
                let item = stack.pop().unwrap_or(Val::NONE);
                let list = container(&heap, stack[stack.len() - 1], &[Kind::List], at, "APPEND")?;
                append(&mut heap, &mut memo, hook, list, item, at)?;
                flat.appended(list);
            }
            // APPENDS, ADDITEMS
            b'e' | 0x90 => {
                let m = pop_mark(&mut marks, stack.len(), at)?;
                if m == 0 {
                    malformed!(at, "APPENDS without a target list");
                }
                let want: &[Kind] = if op == b'e' { &[Kind::List] } else { &[Kind::Set] };
                let list = container(&heap, stack[m - 1], want, at, "APPENDS")?;
                // Items are read in place (no copy per batch: a frame list is a batch of a few).
                for &item in &stack[m..] {
                    append(&mut heap, &mut memo, hook, list, item, at)?;
                }
                stack.truncate(m);
                flat.appended(list);
            }
            // SETITEM
            b's' => {
                let floor = marks.last().copied().unwrap_or(0);
                if stack.len() < floor + 3 {
                    malformed!(at, "SETITEM without a dict, a key and a value");
                }
                let v = stack.pop().unwrap_or(Val::NONE);
                let k = stack.pop().unwrap_or(Val::NONE);
                let d = container(&heap, stack[stack.len() - 1], &[Kind::Dict], at, "SETITEM")?;
                heap.push_item(d, k, at)?;
                heap.push_item(d, v, at)?;
            }
            // SETITEMS
            b'u' => {
                let m = pop_mark(&mut marks, stack.len(), at)?;
                if m == 0 {
                    malformed!(at, "SETITEMS without a target dict");
                }
                if !(stack.len() - m).is_multiple_of(2) {
                    malformed!(at, "SETITEMS with an odd number of values");
                }
                let d = container(&heap, stack[m - 1], &[Kind::Dict], at, "SETITEMS")?;
                let items = &stack[m..];
                heap.charge(items.len() * 8, at)?;
                let mut depth = 0;
                for v in items {
                    if let Some(c) = v.obj() {
                        depth = depth.max(heap.objs[c as usize].depth + 1);
                    }
                }
                heap.set_depth(d, depth, at)?;
                heap.items_created += items.len() as u64;
                heap.objs[d as usize].items.extend_from_slice(items);
                stack.truncate(m);
            }
            // MEMOIZE, BINPUT, LONG_BINPUT
            0x94 | b'q' | b'r' => {
                let slot = match op {
                    0x94 => memo.len() as u64,
                    b'q' => input.u8("a BINPUT index")? as u64,
                    _ => u32::from_le_bytes(input.array("a LONG_BINPUT index")?) as u64,
                };
                let Some(&v) = stack.last() else {
                    malformed!(at, "memo store with an empty stack")
                };
                let slot = slot as usize;
                if slot >= memo.len() {
                    if slot - memo.len() > 1 << 16 {
                        malformed!(at, "memo index {slot} far beyond the {} entries stored", memo.len());
                    }
                    heap.charge((slot + 1 - memo.len()) * 4, at)?;
                    memo.grow_to(slot + 1);
                }
                let aside = memo.set(slot, v);
                heap.charge(aside, at)?;
                if let Some(i) = v.obj() {
                    let o = &mut heap.objs[i as usize];
                    o.memo_slot = if o.memo_slot == NO_SLOT {
                        slot as u32
                    } else {
                        MANY_SLOTS
                    };
                }
            }
            // BINGET, LONG_BINGET
            b'h' | b'j' => {
                let slot = if op == b'h' {
                    input.u8("a BINGET index")? as usize
                } else {
                    u32::from_le_bytes(input.array("a LONG_BINGET index")?) as usize
                };
                let Some(v) = memo.get(slot) else {
                    malformed!(at, "memo index {slot} was never stored");
                };
                heap.incref(v);
                push(&mut stack, &mut heap, v, at)?;
            }
            _ => return Err(refused(op, at)),
        }
    }
}

/// The list a dict about to be made would be appended to when it is a trace entry: the one
/// below the innermost MARK (an APPENDS batch), if that is a list.
#[inline]
fn flat_candidate(stack: &[Val], marks: &[usize], heap: &Heap) -> Option<u32> {
    let m = *marks.last()?;
    let list = stack.get(m.checked_sub(1)?)?.obj()?;
    (heap.objs[list as usize].kind == Kind::List).then_some(list)
}

#[inline]
fn push(stack: &mut Vec<Val>, heap: &mut Heap, v: Val, at: u64) -> PResult<()> {
    if stack.len() & 0xFFF == 0 {
        heap.charge(0, at)?;
        if stack.len() * 8 > heap.budget {
            return Err(PickleError::MemoryBudget {
                offset: at,
                limit: heap.budget,
            });
        }
    }
    stack.push(v);
    Ok(())
}

/// The innermost MARK's stack position; it must still be within the stack (an opcode that
/// pops below a MARK, which no pickler writes, makes it dangle).
fn pop_mark(marks: &mut Vec<usize>, stack_len: usize, at: u64) -> PResult<usize> {
    let m = marks.pop().ok_or_else(|| PickleError::Malformed {
        offset: at,
        msg: "no MARK on the stack".into(),
    })?;
    if m > stack_len {
        return Err(PickleError::Malformed {
            offset: at,
            msg: "a MARK above the top of the stack (what was under it was popped)".into(),
        });
    }
    Ok(m)
}

fn container(heap: &Heap, v: Val, want: &[Kind], at: u64, op: &str) -> PResult<u32> {
    match v.obj() {
        Some(i) if want.contains(&heap.objs[i as usize].kind) => Ok(i),
        _ => Err(PickleError::Malformed {
            offset: at,
            msg: format!("{op} target is not a {:?}", want[0]),
        }),
    }
}

#[inline]
fn append<H: AppendHook>(heap: &mut Heap, memo: &mut Memo, hook: &mut H, list: u32, item: Val, at: u64) -> PResult<()> {
    if heap.objs[list as usize].kind == Kind::List && hook.on_append(heap, list, item, at)? {
        heap.decref(item, memo);
        return Ok(());
    }
    heap.push_item(list, item, at)
}

fn intern_bytes(strings: &mut Interner, bytes: &[u8]) -> u32 {
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

/// [`decode_long`] of at most 8 bytes, which always fits an i64. Assembled byte by byte: a
/// `copy_from_slice` of a variable length is a call to `memcpy` whose stored bytes are then
/// reloaded (a store-forwarding stall), a fifth of the VM's time on trace entries' addresses
/// and times.
#[inline]
fn decode_short_long(bytes: &[u8]) -> i64 {
    debug_assert!(bytes.len() <= 8);
    let Some(&last) = bytes.last() else { return 0 };
    let mut v = 0u64;
    for (i, &b) in bytes.iter().enumerate() {
        v |= (b as u64) << (8 * i);
    }
    // Sign-extend from the top byte's high bit.
    let unused = 64 - 8 * bytes.len() as u32;
    if unused == 0 {
        v as i64
    } else if last & 0x80 != 0 {
        (v | (u64::MAX << (64 - unused))) as i64
    } else {
        v as i64
    }
}

/// Little-endian two's complement, as LONG1/LONG4 store it; `None` outside i64.
fn decode_long(bytes: &[u8]) -> Option<i64> {
    if bytes.is_empty() {
        return Some(0);
    }
    let negative = bytes[bytes.len() - 1] & 0x80 != 0;
    let fill = if negative { 0xFF } else { 0 };
    let mut trimmed = bytes;
    while trimmed.len() > 8 && trimmed[trimmed.len() - 1] == fill {
        trimmed = &trimmed[..trimmed.len() - 1];
    }
    if trimmed.len() > 8 {
        return None;
    }
    let mut buf = [fill; 8];
    buf[..trimmed.len()].copy_from_slice(trimmed);
    let v = i64::from_le_bytes(buf);
    // A 9-byte encoding trimmed to 8 may have lost its sign byte: check it survived.
    if (v < 0) != negative {
        return None;
    }
    Some(v)
}

/// The error for an opcode outside the accepted set.
fn refused(op: u8, offset: u64) -> PickleError {
    let forbidden = match op {
        b'c' => Some("GLOBAL"),
        0x93 => Some("STACK_GLOBAL"),
        b'R' => Some("REDUCE"),
        b'b' => Some("BUILD"),
        b'i' => Some("INST"),
        b'o' => Some("OBJ"),
        0x81 => Some("NEWOBJ"),
        0x92 => Some("NEWOBJ_EX"),
        0x82 => Some("EXT1"),
        0x83 => Some("EXT2"),
        0x84 => Some("EXT4"),
        b'P' => Some("PERSID"),
        b'Q' => Some("BINPERSID"),
        0x97 => Some("NEXT_BUFFER"),
        0x98 => Some("READONLY_BUFFER"),
        _ => None,
    };
    if let Some(name) = forbidden {
        return PickleError::Forbidden { name, op, offset };
    }
    let name = match op {
        b'I' => "INT",
        b'L' => "LONG",
        b'S' => "STRING",
        b'V' => "UNICODE",
        b'F' => "FLOAT",
        b'g' => "GET",
        b'p' => "PUT",
        _ => "unknown",
    };
    PickleError::Unsupported { name, op, offset }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NoHook;
    impl AppendHook for NoHook {
        fn on_append(&mut self, _: &mut Heap, _: u32, _: Val, _: u64) -> PResult<bool> {
            Ok(false)
        }
    }

    fn run(bytes: &[u8]) -> PResult<Decoded> {
        let mut input = Input::new(bytes, bytes.len() as u64);
        decode(&mut input, PickleLimits::default(), &mut NoHook)
    }

    #[test]
    fn decodes_nested_dict_with_memo() {
        // {'a': [1, 2**40, -1], 'b': <memo of the list>}
        let mut p = vec![
            0x80, 4, b'}', 0x94, b'(', 0x8c, 1, b'a', 0x94, b']', 0x94, b'(', b'K', 1, 0x8a, 6,
        ];
        p.extend_from_slice(&(1u64 << 40).to_le_bytes()[..6]);
        p.extend_from_slice(&[b'J', 0xff, 0xff, 0xff, 0xff, b'e', 0x8c, 1, b'b', b'h', 2, b'u', b'.']);
        let d = run(&p).expect("decodes");
        let V::Obj(root) = d.heap.get(d.root) else {
            panic!("root is not a container")
        };
        let a = d.heap.strings.map.get("a").copied().unwrap_or(u32::MAX);
        let list = d.heap.dict_get(root, a).expect("key a");
        let V::Obj(l) = d.heap.get(list) else {
            panic!("a is not a list")
        };
        let ints: Vec<_> = d.heap.seq(l).iter().map(|v| d.heap.int_of(*v)).collect();
        assert_eq!(ints, vec![Some(1), Some(1 << 40), Some(-1)]);
    }

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

    #[test]
    fn long_decoding_edges() {
        assert_eq!(decode_long(&[0xff]), Some(-1));
        // The short form agrees with the general one on every length and sign.
        for bytes in [
            &[][..],
            &[0x7f],
            &[0x80],
            &[0xff],
            &[0x00, 0x80],
            &[0x00, 0x9a, 0x2d, 0x1f, 0x4c, 0x7f],
            &[0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07],
            &[0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x80],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
        ] {
            assert_eq!(Some(decode_short_long(bytes)), decode_long(bytes), "{bytes:?}");
        }
        assert_eq!(decode_long(&[0x00, 0x80, 0x00]), Some(0x8000));
        assert_eq!(
            decode_long(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00]),
            None
        );
        assert_eq!(decode_long(&[0, 0, 0, 0, 0, 0, 0, 0x80, 0xff]), Some(i64::MIN));
    }

    #[test]
    fn refuses_global_with_offset() {
        let err = run(&[0x80, 4, b'c', b'o', b's', b'\n']).err().expect("refused");
        assert!(err.to_string().contains("GLOBAL (0x63) at byte 2"), "{err}");
    }
}
