//! Unit tests of the flat read: numbers, remembered keys, lists and shapes.

use super::*;

/// A LONG1 read with one 8-byte load (bytes to spare after it) and byte by byte (at the
/// end of the input) is the number Python wrote, every length and sign.
#[test]
fn a_long1_loaded_at_once_is_the_number_read_byte_by_byte() {
    let numbers = [
        0i64,
        1,
        -1,
        127,
        128,
        -128,
        -129,
        255,
        65_535,
        -65_536,
        139_948_354_782_208,
        1_795_962_106_085_519,
        -1_795_962_106_085_519,
        i64::MAX,
        i64::MIN,
    ];
    for x in numbers {
        let full = x.to_le_bytes();
        for n in 0..=8usize {
            let bytes = &full[..n];
            let want = super::super::decode_short_long(bytes);
            // Python writes the fewest bytes that hold the number; any prefix still reads
            // as the same two's complement number both ways.
            let mut spare = bytes.to_vec();
            spare.extend_from_slice(&[0xAB; 9]);
            for (b, how) in [(&spare[..], "with bytes after"), (bytes, "at the end")] {
                let mut c = Bytes::<false> { b, at: 0 };
                assert_eq!(c.short_long(n), Some(want), "{x} in {n} bytes, {how}");
                assert_eq!(c.at, n, "{x} in {n} bytes, {how}: consumed");
            }
        }
    }
    let mut short = Bytes::<false> { b: &[1, 2], at: 0 };
    assert_eq!(short.short_long(3), None, "cut by the end of the input");
}

/// A frames list whose item bytes were remembered reads as what it was lowered to, with no
/// items; once one of its memo slots is stored over, it is read item by item again.
#[test]
fn a_remembered_frames_list_is_its_stack_until_a_slot_it_names_is_stored_over() {
    let mut heap = Heap::new(&super::super::PickleLimits::default());
    let mut memo = Memo::default();
    let [action, frames] = ["action", "frames"].map(|s| heap.strings.intern(s));
    for v in [Val::string(action), Val::string(frames), Val::frame(5), Val::frame(6)] {
        memo.push(v);
    }
    let mut field_of = vec![u8::MAX; frames as usize + 1];
    field_of[frames as usize] = 3;
    let keys = FlatKeys {
        first: action,
        list: frames,
        field_of,
    };
    // {"action": 1, "frames": [<slot 2>, <slot 3>]}: MARK, BINGET 0, BININT1 1, BINGET 1,
    // EMPTY_LIST, MEMOIZE, MARK, BINGET 2, LONG_BINGET 3, APPENDS, SETITEMS.
    let entry = [b'(', b'h', 0, b'K', 1, b'h', 1, b']', 0x94, b'(', b'h', 2, b'j', 3, 0, 0, 0, b'e', b'u'];
    let window = [&entry[..], &[b'}'; 16]].concat();
    let (mut seen, mut out) = (Seen::default(), FlatDict::default());
    let read_items = |seen: &mut Seen, out: &mut FlatDict, memo: &Memo, heap: &mut Heap| {
        assert_eq!(read(&window, heap, memo, &keys, seen, out), Some(entry.len()));
        assert_eq!(out.fields[3], Some(ITEMS));
        assert_eq!(out.items, [Val::frame(5), Val::frame(6)]);
        let (start, end) = out.items_bytes.expect("read one by one");
        assert_eq!(&window[start..end], &[b'h', 2, b'j', 3, 0, 0, 0]);
        seen.lists.remember(&window[start..end], Val::stack(9));
    };
    read_items(&mut seen, &mut out, &memo, &mut heap);
    for _ in 0..2 {
        assert_eq!(read(&window, &mut heap, &memo, &keys, &mut seen, &mut out), Some(entry.len()));
        assert_eq!(out.fields[3], Some(Val::stack(9)), "the stack it was lowered to");
        assert!(out.items.is_empty() && out.items_bytes.is_none());
        assert!(matches!(out.memoized[..], [Memoized::List]), "its MEMOIZE is still seen");
    }
    memo.set(3, Val::frame(7));
    assert_eq!(read(&window, &mut heap, &memo, &keys, &mut seen, &mut out), Some(entry.len()));
    assert_eq!(out.fields[3], Some(ITEMS), "read again item by item");
    assert_eq!(out.items, [Val::frame(5), Val::frame(7)]);
}

/// A heap with the strings `action`, `addr` and `size`, the first `memoized` of them in memo
/// slots 0, 1, 2; their ids; keys that read them into field slots 0, 1, 2, `action` first.
fn action_addr_size(memoized: usize) -> (Heap, Memo, [u32; 3], FlatKeys) {
    let mut heap = Heap::new(&super::super::PickleLimits::default());
    let mut memo = Memo::default();
    let ids = ["action", "addr", "size"].map(|s| heap.strings.intern(s));
    for &id in &ids[..memoized] {
        memo.push(Val::string(id));
    }
    let mut field_of = vec![u8::MAX; ids[2] as usize + 1];
    for (slot, &id) in ids.iter().enumerate() {
        field_of[id as usize] = slot as u8;
    }
    let keys = FlatKeys {
        first: ids[0],
        list: u32::MAX,
        field_of,
    };
    (heap, memo, ids, keys)
}

/// A key read by the bytes remembered for its position is the string its memo slot holds:
/// once that slot is stored over, the key is read again. Both ways a key is fetched.
#[test]
fn a_key_remembered_by_position_is_read_again_once_its_memo_slot_is_stored_over() {
    // {"action": 1, <slot 1>: 7}: MARK, BINGET 0, BININT1 1, (LONG_)BINGET 1, BININT1 7,
    // SETITEMS; then bytes of what follows in the read's window.
    let binget: &[u8] = &[b'h', 1];
    let long_binget: &[u8] = &[b'j', 1, 0, 0, 0];
    for fetch in [binget, long_binget] {
        let (mut heap, mut memo, [_, _, size], keys) = action_addr_size(2);
        let entry = [&[b'(', b'h', 0, b'K', 1][..], fetch, &[b'K', 7, b'u']].concat();
        let window = [&entry[..], &[b'}'; 16]].concat();
        let (mut seen, mut out) = (Seen::default(), FlatDict::default());
        let seven = int(7);
        for _ in 0..2 {
            assert_eq!(read(&window, &mut heap, &memo, &keys, &mut seen, &mut out), Some(entry.len()));
            assert_eq!(out.fields[1], seven, "slot 1 holds `addr`");
            assert_eq!(out.fields[2], None);
            assert_eq!(seen.keys.seen[1].len as usize, fetch.len(), "remembered");
        }
        memo.set(1, Val::string(size));
        assert_eq!(read(&window, &mut heap, &memo, &keys, &mut seen, &mut out), Some(entry.len()));
        assert_eq!(out.fields[1], None, "slot 1 no longer holds `addr`");
        assert_eq!(out.fields[2], seven, "slot 1 holds `size`");
    }
}

/// An entry whose key bytes are the last entry's, position by position, is read by its
/// shape, with the same fields as key by key; an entry with a pair more, or another key's
/// bytes at a position, is not, and neither is any entry once a memo slot is stored over.
#[test]
fn an_entry_is_read_by_the_shape_of_the_one_before_only_where_its_keys_are_the_same() {
    let (mut heap, mut memo, [_, _, size], keys) = action_addr_size(3);
    // MEMOIZE, MARK, BINGET 0, BININT1 1, BINGET 1, BININT1 7, [BINGET 2, BININT1 9,] SETITEMS.
    let two = [0x94, b'(', b'h', 0, b'K', 1, b'h', 1, b'K', 7, b'u'];
    let three = [0x94, b'(', b'h', 0, b'K', 1, b'h', 1, b'K', 7, b'h', 2, b'K', 9, b'u'];
    let swapped = [0x94, b'(', b'h', 0, b'K', 1, b'h', 2, b'K', 7, b'u'];
    let window = |entry: &[u8]| [entry, &[b'}'; 16]].concat();
    let (mut seen, mut out) = (Seen::default(), FlatDict::default());
    assert_eq!(read_shaped(&window(&two), &mut heap, &memo, &seen, &mut out), None, "no shape yet");
    assert_eq!(read(&window(&two), &mut heap, &memo, &keys, &mut seen, &mut out), Some(two.len()));
    assert_eq!(seen.shape.keys.len(), 2, "its keys are the shape");
    let by_keys = out.fields;
    assert_eq!(read_shaped(&window(&two), &mut heap, &memo, &seen, &mut out), Some(two.len()));
    assert_eq!((out.fields, out.pairs), (by_keys, 2), "the same fields as key by key");
    assert!(matches!(out.memoized[..], [Memoized::Dict]));
    for other in [&three[..], &swapped[..]] {
        assert_eq!(read_shaped(&window(other), &mut heap, &memo, &seen, &mut out), None);
    }
    assert_eq!(read(&window(&three), &mut heap, &memo, &keys, &mut seen, &mut out), Some(three.len()));
    assert_eq!(out.fields[2], int(9), "read key by key");
    assert_eq!(seen.shape.keys.len(), 3, "and its keys the shape now");
    assert_eq!(read(&window(&swapped), &mut heap, &memo, &keys, &mut seen, &mut out), Some(swapped.len()));
    assert_eq!((out.fields[1], out.fields[2]), (None, int(7)), "slot 2 holds `size`");
    assert_eq!(read(&window(&two), &mut heap, &memo, &keys, &mut seen, &mut out), Some(two.len()));
    memo.set(1, Val::string(size));
    assert_eq!(read(&window(&two), &mut heap, &memo, &keys, &mut seen, &mut out), Some(two.len()));
    assert_eq!((out.fields[1], out.fields[2]), (None, int(7)), "slot 1 holds `size` now");
}
