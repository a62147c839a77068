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
//!
//! Modules: `value` the tagged words, `heap` the arena, `interner` the strings, `memo` the
//! memo, `input` the buffered input, `numbers` LONG1/LONG4, `machine` the opcode loop, [`flat`]
//! trace entries read flat; this file the limits and the hook.

pub mod flat;
mod heap;
mod input;
mod interner;
mod machine;
mod memo;
mod numbers;
mod read_ahead;
mod value;

use flat::{FlatDict, FlatKeys};
pub use heap::{Heap, Kind, Obj};
pub use input::Input;
pub use interner::Interner;
use interner::intern_bytes;
pub use machine::{decode, Decoded};
use memo::Memo;
use numbers::decode_short_long;
use value::{T_INT, T_ITEMS, T_STR};
pub use value::{Val, V};

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
    fn refuses_global_with_offset() {
        let err = run(&[0x80, 4, b'c', b'o', b's', b'\n']).err().expect("refused");
        assert!(err.to_string().contains("GLOBAL (0x63) at byte 2"), "{err}");
    }
}
