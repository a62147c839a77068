//! The machine: the opcode loop that builds values on a stack, offering list items to the
//! append hook and reading trace entries flat where the hook does.

use std::io::Read;

use super::flat::FlatReader;
use super::heap::*;
use super::input::Input;
use super::interner::intern_bytes;
use super::memo::Memo;
use super::numbers::{decode_long, decode_short_long};
use super::value::*;
use super::{AppendHook, PResult, PickleError, PickleLimits};
use crate::infra::background_drop::drop_in_background;

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
                // Tens to hundreds of megabytes on a long trace.
                let memo_bytes = memo.held_bytes();
                drop_in_background(memo, memo_bytes);
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
