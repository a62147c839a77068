//! The trace entries a stored segment object holds, packed as bytes: each entry's address as
//! its distance from the entry before's, its size, its stream as its change from the entry
//! before's and its stack, as variable-length integers ([`crate::infra::varint`]), then its action.
//! About 8 bytes an entry where a Parquet row of them cost a column value each: a stored
//! object is one row per segment with its blocks and entries as two byte strings, which is
//! cheaper to write and to read back than a row per block and per entry.

use super::entry_rows::EntryRows;
use crate::infra::varint::{checked_get, checked_get_signed, write, write_signed, MAX_BYTES};

/// Entries [`pack`] reads from each column at a time: each column's values are read for a run of
/// entries with one match on its form
/// ([`crate::tables::int_slice::IntSlice::read_into`]) instead of one an entry.
const RUN: usize = 256;

/// `rows`' entries, packed.
pub(crate) fn pack(rows: &EntryRows<'_>) -> Vec<u8> {
    let n = rows.action.len();
    let mut out = Vec::with_capacity(n * 8);
    let (mut addr, mut stream) = (0i64, 0i64);
    let (mut addrs, mut sizes, mut streams, mut stacks) = ([0i64; RUN], [0i64; RUN], [0i64; RUN], [0u32; RUN]);
    // A run's bytes at their longest: four numbers and the action an entry.
    let mut buf = vec![0u8; RUN * (4 * MAX_BYTES + 1)];
    for from in (0..n).step_by(RUN) {
        let m = RUN.min(n - from);
        rows.addr.read_into(from, &mut addrs[..m]);
        rows.size.read_into(from, &mut sizes[..m]);
        rows.stream.read_into(from, &mut streams[..m]);
        rows.stack.read_into(from, &mut stacks[..m]);
        let mut at = 0;
        for k in 0..m {
            write_signed(&mut buf, &mut at, addrs[k].wrapping_sub(addr));
            write_signed(&mut buf, &mut at, sizes[k]);
            write_signed(&mut buf, &mut at, streams[k].wrapping_sub(stream));
            write(&mut buf, &mut at, u64::from(stacks[k]));
            buf[at] = rows.action[from + k];
            at += 1;
            (addr, stream) = (addrs[k], streams[k]);
        }
        out.extend_from_slice(&buf[..at]);
    }
    out
}

/// Entries read back from their packed bytes, column by column.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Entries {
    pub action: Vec<u8>,
    pub addr: Vec<i64>,
    pub size: Vec<i64>,
    pub stack: Vec<u32>,
    pub stream: Vec<i64>,
}

/// `n` entries packed by [`pack`]; `None` unless `bytes` holds exactly that many well formed.
pub(crate) fn unpack(bytes: &[u8], n: usize) -> Option<Entries> {
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

    #[test]
    fn entries_of_every_column_form_read_back_across_runs() {
        use crate::tables::int_slice::IntSlice;
        use crate::tables::stack_ids::StackIds;
        // Several runs and a part of one, from columns in their narrow and coded forms.
        let n = 3 * RUN + 7;
        let action: Vec<u8> = (0..n).map(|i| (i * 7 % 5) as u8).collect();
        let offsets: Vec<u32> = (0..n).map(|i| (i as u32).wrapping_mul(2_654_435_761) >> 8).collect();
        let codes: Vec<u16> = (0..n).map(|i| (i % 3) as u16).collect();
        let (sizes, ids) = ([512i64, 1 << 40, 3 << 20], [9u32, u32::MAX, 0]);
        let narrow_ids: Vec<u16> = (0..n).map(|i| (i * 31 % 1000) as u16).collect();
        let each_stream: Vec<i64> = (0..n).map(|i| if i % 100 < 50 { 0 } else { -(i as i64) }).collect();
        let addr = IntSlice::U32 {
            base: 0x7f00_0000_0000,
            shift: 9,
            offsets: &offsets,
        };
        let size = IntSlice::Coded {
            codes: &codes,
            values: &sizes,
        };
        for (stack, stream) in [
            (StackIds::U16(&narrow_ids), Streams::Each(&each_stream)),
            (
                StackIds::Coded {
                    codes: &codes,
                    ids: &ids,
                },
                Streams::One { stream: 7, len: n },
            ),
        ] {
            let rows = EntryRows {
                first: 0,
                action: &action,
                addr,
                size,
                stack,
                stream,
            };
            let back = unpack(&pack(&rows), n).expect("well formed");
            let want = Entries {
                action: action.clone(),
                addr: (0..n).map(|i| addr.at(i)).collect(),
                size: (0..n).map(|i| size.at(i)).collect(),
                stack: (0..n).map(|i| stack.at(i)).collect(),
                stream: (0..n).map(|i| stream.get(i)).collect(),
            };
            assert_eq!(back, want);
        }
    }
}
