//! A segment-map checkpoint's blocks packed as bytes. Each block is its distance from the end
//! of the block before (0 where blocks tile a segment, as they do), its size, the bytes it
//! holds beyond its request and its stack, as variable-length integers, then its state: about
//! 7 bytes a block where a plain `(address, Block)` takes 32. An ingest holds its segment
//! map's checkpoints until it stores them. Hand-written: the encoding is a few lines of LEB128, and a general compressor
//! alone would cost the replay thread, the ingest's critical path, far more time than on
//! these few bytes (a held checkpoint's are compressed after, `segment_checkpoints.rs`).

use super::block::Block;
use crate::infra::varint::{checked_get, checked_get_signed, get, get_signed, put, put_signed};
use crate::tables::BlockState;

/// Blocks in address order, packed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PackedBlocks {
    bytes: Vec<u8>,
    len: usize,
    /// Where the last block pushed ends.
    end: i64,
}

impl PackedBlocks {
    /// Room for about `blocks` blocks.
    pub fn with_capacity(blocks: usize) -> PackedBlocks {
        PackedBlocks {
            bytes: Vec::with_capacity(blocks * 8),
            ..PackedBlocks::default()
        }
    }

    /// Appends the block at `addr`.
    pub fn push(&mut self, addr: i64, b: &Block) {
        put_signed(&mut self.bytes, addr.wrapping_sub(self.end));
        put_signed(&mut self.bytes, b.size);
        put_signed(&mut self.bytes, b.size.wrapping_sub(b.requested));
        put(&mut self.bytes, u64::from(b.stack));
        self.bytes.push(b.state as u8);
        self.end = addr.wrapping_add(b.size);
        self.len += 1;
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The blocks in the order pushed, with their addresses.
    pub fn iter(&self) -> impl Iterator<Item = (i64, Block)> + '_ {
        let (mut at, mut end) = (0usize, 0i64);
        (0..self.len).map(move |_| {
            let bytes = &self.bytes;
            let addr = end.wrapping_add(get_signed(bytes, &mut at));
            let size = get_signed(bytes, &mut at);
            let requested = size.wrapping_sub(get_signed(bytes, &mut at));
            let stack = get(bytes, &mut at) as u32;
            let state = BlockState::from_code(bytes[at]);
            at += 1;
            end = addr.wrapping_add(size);
            (
                addr,
                Block {
                    size,
                    requested,
                    state,
                    stack,
                },
            )
        })
    }

    /// Heap bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes.capacity()
    }

    /// The packed bytes (what a stored segment object keeps of its blocks).
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Where the last block ends (what [`PackedBlocks::of_own_bytes`] takes back).
    pub fn end(&self) -> i64 {
        self.end
    }

    /// Blocks this process packed, given back their bytes (a held checkpoint's, decompressed),
    /// `len` and [`PackedBlocks::end`], unchecked: only [`PackedBlocks::from_bytes`] reads
    /// bytes from elsewhere.
    pub(crate) fn of_own_bytes(bytes: Vec<u8>, len: usize, end: i64) -> PackedBlocks {
        PackedBlocks { bytes, len, end }
    }

    /// `len` blocks packed by [`PackedBlocks::push`], read back from their bytes; `None`
    /// unless `bytes` holds exactly that many well-formed blocks (checked here once, so that
    /// [`PackedBlocks::iter`] never reads past them).
    pub fn from_bytes(bytes: Vec<u8>, len: usize) -> Option<PackedBlocks> {
        let (mut at, mut end) = (0usize, 0i64);
        for _ in 0..len {
            let addr = end.wrapping_add(checked_get_signed(&bytes, &mut at)?);
            let size = checked_get_signed(&bytes, &mut at)?;
            checked_get_signed(&bytes, &mut at)?;
            u32::try_from(checked_get(&bytes, &mut at)?).ok()?;
            let state = *bytes.get(at)?;
            if BlockState::from_code(state) as u8 != state {
                return None;
            }
            at += 1;
            end = addr.wrapping_add(size);
        }
        (at == bytes.len()).then_some(PackedBlocks { bytes, len, end })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_read_back_as_pushed_in_few_bytes() {
        let block = |size: i64, requested: i64, state: BlockState, stack: u32| Block {
            size,
            requested,
            state,
            stack,
        };
        let blocks = vec![
            (0x7f00_0000_0000, block(512, 500, BlockState::ActiveAllocated, 7)),
            (0x7f00_0000_0200, block(1 << 20, 0, BlockState::Inactive, 0)),
            // A gap, a block past 4 GiB, extremes of every field.
            (
                0x7f10_0000_0000,
                block(5 << 32, (5 << 32) - 1, BlockState::ActivePendingFree, u32::MAX),
            ),
            (i64::MAX - 10, block(10, 10, BlockState::ActiveAllocated, 1)),
            (-4, block(0, -3, BlockState::Inactive, 2)),
        ];
        let mut packed = PackedBlocks::with_capacity(blocks.len());
        for (a, b) in &blocks {
            packed.push(*a, b);
        }
        assert_eq!(packed.len(), blocks.len());
        let back: Vec<(i64, Block)> = packed.iter().collect();
        assert_eq!(back, blocks);
        // A tiled run of small blocks: 6 bytes each.
        let mut tiled = PackedBlocks::default();
        for k in 0..1000 {
            tiled.push(k * 512, &block(512, 512, BlockState::ActiveAllocated, 3));
        }
        assert_eq!(tiled.bytes.len(), 6 * 1000);

        // Stored and read back: the same blocks; bytes that are not exactly that many blocks are
        // refused, never read past.
        let stored = packed.as_bytes().to_vec();
        let read = PackedBlocks::from_bytes(stored.clone(), blocks.len()).expect("well formed");
        assert_eq!(read, packed);
        assert_eq!(read.iter().collect::<Vec<_>>(), blocks);
        assert!(
            PackedBlocks::from_bytes(stored.clone(), blocks.len() + 1).is_none(),
            "one block short"
        );
        assert!(
            PackedBlocks::from_bytes(stored.clone(), blocks.len() - 1).is_none(),
            "bytes left over"
        );
        for cut in 1..stored.len() {
            assert!(
                PackedBlocks::from_bytes(stored[..cut].to_vec(), blocks.len()).is_none(),
                "cut at {cut}"
            );
        }
        let mut bad_state = stored.clone();
        *bad_state.last_mut().expect("bytes") = 3;
        assert!(
            PackedBlocks::from_bytes(bad_state, blocks.len()).is_none(),
            "no such state"
        );
        let endless = vec![0xFF; 11];
        assert!(PackedBlocks::from_bytes(endless, 1).is_none(), "a number past 64 bits");
    }
}
