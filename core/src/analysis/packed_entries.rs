//! The trace entries a stored segment object holds, packed as bytes: each entry's address as
//! its distance from the entry before's, its size, its stream as its change from the entry
//! before's and its stack, as variable-length integers ([`super::varint`]), then its action.
//! About 8 bytes an entry where a Parquet row of them cost a column value each: a stored
//! object is one row per segment with its blocks and entries as two byte strings, which is
//! cheaper to write and to read back than a row per block and per entry.

use super::segment_map::EntryRows;
use super::varint::{checked_get, checked_get_signed, put, put_signed};

/// `rows`' entries, packed.
pub(super) fn pack(rows: &EntryRows<'_>) -> Vec<u8> {
    let n = rows.action.len();
    let mut out = Vec::with_capacity(n * 8);
    let (mut addr, mut stream) = (0i64, 0i64);
    for i in 0..n {
        let s = rows.stream.get(i);
        put_signed(&mut out, rows.addr.at(i).wrapping_sub(addr));
        put_signed(&mut out, rows.size.at(i));
        put_signed(&mut out, s.wrapping_sub(stream));
        put(&mut out, u64::from(rows.stack.at(i)));
        out.push(rows.action[i]);
        (addr, stream) = (rows.addr.at(i), s);
    }
    out
}

/// Entries read back from their packed bytes, column by column.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Entries {
    pub action: Vec<u8>,
    pub addr: Vec<i64>,
    pub size: Vec<i64>,
    pub stack: Vec<u32>,
    pub stream: Vec<i64>,
}

/// `n` entries packed by [`pack`]; `None` unless `bytes` holds exactly that many well formed.
pub(super) fn unpack(bytes: &[u8], n: usize) -> Option<Entries> {
    let mut out = Entries {
        action: Vec::with_capacity(n),
        addr: Vec::with_capacity(n),
        size: Vec::with_capacity(n),
        stack: Vec::with_capacity(n),
        stream: Vec::with_capacity(n),
    };
    let (mut at, mut addr, mut stream) = (0usize, 0i64, 0i64);
    for _ in 0..n {
        addr = addr.wrapping_add(checked_get_signed(bytes, &mut at)?);
        let size = checked_get_signed(bytes, &mut at)?;
        stream = stream.wrapping_add(checked_get_signed(bytes, &mut at)?);
        let stack = u32::try_from(checked_get(bytes, &mut at)?).ok()?;
        let action = *bytes.get(at)?;
        at += 1;
        out.action.push(action);
        out.addr.push(addr);
        out.size.push(size);
        out.stack.push(stack);
        out.stream.push(stream);
    }
    (at == bytes.len()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::Streams;

    #[test]
    fn entries_read_back_as_packed_and_bad_bytes_are_refused() {
        let (action, addr, size, stack, stream) = (
            vec![0u8, 2, 3, 4, 255],
            vec![0x7f00_0000_0000, 0x7f00_0000_0000, i64::MIN, -1, i64::MAX],
            vec![512, -512, i64::MAX, 0, i64::MIN],
            vec![0, u32::MAX, 3, 4, 5],
            vec![7, 7, -9, i64::MAX, i64::MIN],
        );
        let rows = EntryRows {
            first: 10,
            action: &action,
            addr: addr[..].into(),
            size: size[..].into(),
            stack: stack[..].into(),
            stream: Streams::Each(&stream),
        };
        let packed = pack(&rows);
        let back = unpack(&packed, 5).expect("well formed");
        assert_eq!(
            back,
            Entries {
                action: action.clone(),
                addr: addr.clone(),
                size: size.clone(),
                stack: stack.clone(),
                stream: stream.clone(),
            }
        );
        assert!(unpack(&packed, 4).is_none(), "bytes left over");
        assert!(unpack(&packed, 6).is_none(), "an entry short");
        for cut in 0..packed.len() {
            assert!(unpack(&packed[..cut], 5).is_none(), "cut at {cut}");
        }
        // One stream throughout: the changes are zeros, a byte each.
        let one = EntryRows {
            stream: Streams::One { stream: 3, len: 5 },
            ..rows
        };
        assert_eq!(unpack(&pack(&one), 5).expect("well formed").stream, vec![3; 5]);
    }
}
