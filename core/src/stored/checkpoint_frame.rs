//! A segment checkpoint as a stored frame: one state and the trace entries before it, back to
//! the previous checkpoint, so that the segment map at any entry of that window is answered
//! from this one object (rewinding at most its entries) without loading the trace.
//!
//! One row per item, tagged by `kind`; the other columns mean, by kind:
//!
//! | kind | `address` | `size` | `extra` | `code` | `stack` |
//! | --- | --- | --- | --- | --- | --- |
//! | 0 window | cursor of the state | first entry held | | | |
//! | 1 segment | address | size | stream | expandable (0/1) | blocks in it |
//! | 2 block | address | size | requested bytes | `BlockState` code | stack id |
//! | 3 entry | address | size | stream | `Action` code | stack id |
//!
//! A window row, then the segments in address order; the blocks (every segment's, in the same
//! order) and the entries (in trace order) are two byte strings on the window row, columns
//! `packed_blocks` ([`PackedBlocks`]) and `packed_entries` ([`packed_entries`]), null on
//! the other rows. Objects stored before these columns hold their blocks and entries as rows of
//! kinds 2 and 3, and read back as they did. A row each block and entry was most of the work
//! of storing a GB-scale report; packed, they are smaller and faster both ways
//! (`memlens-bench-segments`, BENCHMARKS.md).

use memlens_api::{BlockState, SegmentMap};
use polars_core::prelude::*;

use crate::analysis::segment_map::block::Block;
use crate::analysis::segment_map::checkpoints::{map_from, FlatSegment, FlatState, SegmentCheckpoints};
use crate::analysis::segment_map::detail::SegmentDetail;
use crate::analysis::segment_map::entry_rows::EntryRows;
use crate::analysis::segment_map::packed_blocks::PackedBlocks;
use crate::analysis::segment_map::packed_entries;
use crate::analysis::Streams;

const WINDOW: u8 = 0;
const SEGMENT: u8 = 1;
const BLOCK: u8 = 2;
const ENTRY: u8 = 3;

/// A checkpoint read back: the state and the entries it can be rewound over.
pub struct StoredCheckpoint {
    pub state: FlatState,
    first: usize,
    action: Vec<u8>,
    addr: Vec<i64>,
    size: Vec<i64>,
    stack: Vec<u32>,
    stream: Vec<i64>,
}

impl StoredCheckpoint {
    /// The entries held: from `first` up to the state's cursor.
    pub fn rows(&self) -> EntryRows<'_> {
        EntryRows {
            first: self.first,
            action: &self.action,
            addr: self.addr[..].into(),
            size: self.size[..].into(),
            stack: self.stack[..].into(),
            stream: Streams::Each(&self.stream),
        }
    }

    /// Whether the map at cursor `target` can be answered from this checkpoint.
    pub fn covers(&self, target: usize) -> bool {
        (self.first..=self.state.cursor).contains(&target)
    }

    /// The segment map at cursor `target` (right after entry `target - 1`), which
    /// [`StoredCheckpoint::covers`].
    pub fn map_at(&self, target: usize, device: i64, time_us: Option<i64>, detail: SegmentDetail) -> SegmentMap {
        map_from(&self.state, &self.rows(), target, device, time_us, detail)
    }

    /// Heap bytes held.
    pub fn bytes(&self) -> usize {
        self.state.bytes() + self.action.len() * (1 + 8 + 8 + 4 + 8)
    }
}

/// The frame of checkpoint `state` with the entries `window` (those before its cursor, back to
/// the previous checkpoint).
pub fn checkpoint_frame(state: &FlatState, window: &EntryRows<'_>) -> PolarsResult<DataFrame> {
    let n = 1 + state.segs.len();
    let (mut kind, mut address, mut size, mut extra, mut code, mut stack) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let mut row = |k: u8, a: i64, s: i64, x: i64, c: u8, st: u32| {
        kind.push(k);
        address.push(a);
        size.push(s);
        extra.push(x);
        code.push(c);
        stack.push(st);
    };
    row(WINDOW, state.cursor as i64, window.first as i64, 0, 0, 0);
    for (a, seg) in &state.segs {
        row(SEGMENT, *a, seg.size, seg.stream, u8::from(seg.expandable), seg.blocks);
    }
    DataFrame::new(
        n,
        vec![
            Column::new("kind".into(), kind),
            Column::new("address".into(), address),
            Column::new("size".into(), size),
            Column::new("extra".into(), extra),
            Column::new("code".into(), code),
            Column::new("stack".into(), stack),
            on_window_row(PACKED_BLOCKS, state.blocks.as_bytes(), n),
            on_window_row(PACKED_ENTRIES, &packed_entries::pack(window), n),
        ],
    )
}

/// The columns holding the state's blocks and the window's entries as packed bytes.
const PACKED_BLOCKS: &str = "packed_blocks";
const PACKED_ENTRIES: &str = "packed_entries";

/// A column of `rows` rows holding `bytes` on the window row, null on the others.
fn on_window_row(name: &str, bytes: &[u8], rows: usize) -> Column {
    let mut column = BinaryChunkedBuilder::new(name.into(), rows);
    column.append_value(bytes);
    (1..rows).for_each(|_| column.append_null());
    column.finish().into_column()
}

/// One stored object of a device's segment map: checkpoint `k` of a device's checkpoints,
/// with the entries before it back to the checkpoint before.
#[derive(Clone, Copy)]
pub struct StoredObject<'a> {
    pub cursor: usize,
    k: usize,
    checkpoints: &'a SegmentCheckpoints,
    entries: EntryRows<'a>,
}

impl StoredObject<'_> {
    /// Its frame ([`checkpoint_frame`]).
    pub fn frame(&self) -> PolarsResult<DataFrame> {
        checkpoint_frame(&self.checkpoints.state(self.k)?, &self.entries)
    }
}

/// The stored objects of a device's checkpoints `cp`, whose entries are `rows`, in cursor
/// order: one a checkpoint (no more than [`crate::analysis::segment_map::checkpoints::MAX_SPACING`] entries
/// apart on a trace of up to 51.2 M entries a device).
pub fn stored_objects<'a>(cp: &'a SegmentCheckpoints, rows: &EntryRows<'a>) -> Vec<StoredObject<'a>> {
    let mut first = rows.first;
    cp.cursors()
        .enumerate()
        .map(|(k, cursor)| {
            let object = StoredObject {
                cursor,
                k,
                checkpoints: cp,
                entries: rows.range(first, cursor),
            };
            first = cursor;
            object
        })
        .collect()
}

/// A checkpoint read back from its frame.
pub fn stored_checkpoint(df: &DataFrame) -> PolarsResult<StoredCheckpoint> {
    let slice_u8 = |name: &str| -> PolarsResult<Vec<u8>> { Ok(df.column(name)?.u8()?.into_no_null_iter().collect()) };
    let slice_i64 =
        |name: &str| -> PolarsResult<Vec<i64>> { Ok(df.column(name)?.i64()?.into_no_null_iter().collect()) };
    let (kind, address, size, extra) = (
        slice_u8("kind")?,
        slice_i64("address")?,
        slice_i64("size")?,
        slice_i64("extra")?,
    );
    let code = slice_u8("code")?;
    let stack: Vec<u32> = df.column("stack")?.u32()?.into_no_null_iter().collect();
    let bad = |what: &str| PolarsError::ComputeError(format!("segment checkpoint: {what}").into());
    if kind.first() != Some(&WINDOW) {
        return Err(bad("no window row first"));
    }
    let (cursor, first) = (address[0], size[0]);
    let (Ok(cursor), Ok(first)) = (usize::try_from(cursor), usize::try_from(first)) else {
        return Err(bad("a negative cursor"));
    };
    // The packed blocks and entries of an object stored so, read (and checked) once the rows
    // say how many there are.
    let packed_bytes = |name: &str| -> PolarsResult<Option<Vec<u8>>> {
        match df.column(name) {
            Ok(c) => Ok(Some(
                c.binary()?.get(0).ok_or_else(|| bad("packed bytes missing"))?.to_vec(),
            )),
            Err(_) => Ok(None),
        }
    };
    let (packed, packed_rows) = (packed_bytes(PACKED_BLOCKS)?, packed_bytes(PACKED_ENTRIES)?);
    let mut out = StoredCheckpoint {
        state: FlatState {
            cursor,
            segs: Vec::new(),
            blocks: PackedBlocks::default(),
        },
        first,
        action: Vec::new(),
        addr: Vec::new(),
        size: Vec::new(),
        stack: Vec::new(),
        stream: Vec::new(),
    };
    for i in 1..kind.len() {
        match kind[i] {
            SEGMENT => out.state.segs.push((
                address[i],
                FlatSegment {
                    size: size[i],
                    stream: extra[i],
                    expandable: code[i] != 0,
                    blocks: stack[i],
                },
            )),
            BLOCK if packed.is_none() => out.state.blocks.push(
                address[i],
                &Block {
                    size: size[i],
                    requested: extra[i],
                    state: BlockState::from_code(code[i]),
                    stack: stack[i],
                },
            ),
            ENTRY if packed_rows.is_none() => {
                out.addr.push(address[i]);
                out.size.push(size[i]);
                out.stream.push(extra[i]);
                out.action.push(code[i]);
                out.stack.push(stack[i]);
            }
            _ => return Err(bad("an unknown row kind")),
        }
    }
    let blocks: usize = out.state.segs.iter().map(|(_, s)| s.blocks as usize).sum();
    if let Some(bytes) = packed {
        out.state.blocks =
            PackedBlocks::from_bytes(bytes, blocks).ok_or_else(|| bad("its packed blocks are malformed"))?;
    }
    if let Some(bytes) = packed_rows {
        let n = cursor
            .checked_sub(first)
            .ok_or_else(|| bad("its window ends before it starts"))?;
        let e = packed_entries::unpack(&bytes, n).ok_or_else(|| bad("its packed entries are malformed"))?;
        (out.action, out.addr, out.size, out.stack, out.stream) = (e.action, e.addr, e.size, e.stack, e.stream);
    }
    if blocks != out.state.blocks.len() || first + out.action.len() != cursor {
        return Err(bad("its rows do not add up"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::segment_map::state::segment_map_at;
    use crate::analysis::DeviceEvents;
    use crate::importers::{import_path, Imported};

    #[test]
    fn a_stored_checkpoint_answers_every_entry_of_its_window_as_the_full_replay_does() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../traces/expandable_oom_fragmentation.pickle");
        let Imported::Snapshot(t) = import_path(&path, Default::default()).expect("import").data else {
            panic!("a snapshot");
        };
        let ev = DeviceEvents::new(&t, 0).expect("device 0");
        let every = ev.len() / 8;
        let cp = SegmentCheckpoints::build_every(&t, &ev, every).expect("checkpoints");
        assert!(cp.len() > 2);
        let all = EntryRows::of(&ev);
        // One object a checkpoint, each holding the entries back to the one before; the cursors
        // end at the last entry.
        let objects = stored_objects(&cp, &all);
        assert_eq!(objects.len(), cp.len());
        assert!(objects
            .windows(2)
            .all(|w| w[1].cursor > w[0].cursor && w[1].cursor - w[0].cursor <= every));
        assert_eq!(objects.first().map(|o| o.cursor), Some(0));
        assert_eq!(objects.last().map(|o| o.cursor), Some(ev.len()));
        let mut first = 0;
        for (k, o) in objects.iter().enumerate() {
            let back = stored_checkpoint(&o.frame().expect("frame")).expect("read back");
            assert_eq!(back.state.cursor, o.cursor);
            assert_eq!(back.state, cp.state(k).expect("held state"));
            for target in (first..=o.cursor).step_by(((o.cursor - first) / 7).max(1)) {
                assert!(back.covers(target));
                let time = target.checked_sub(1).and_then(|i| ev.time_us(i));
                let full = segment_map_at(&t, &ev, target.checked_sub(1)).expect("map");
                assert_eq!(back.map_at(target, 0, time, SegmentDetail::FULL), full, "at {target}");
            }
            first = o.cursor;
        }
        // A frame that does not add up is an error, not a wrong map.
        let p = &cp.state(cp.len() - 1).expect("held state");
        let window = all.range(objects[objects.len() - 2].cursor, p.cursor);
        let frame = checkpoint_frame(p, &window).expect("frame");
        assert!(stored_checkpoint(&frame.slice(0, frame.height() - 1)).is_err());
        // Nor are packed blocks cut short.
        let mut cut = frame.clone();
        let bytes = p.blocks.as_bytes();
        cut.with_column(on_window_row(PACKED_BLOCKS, &bytes[..bytes.len() - 1], frame.height()))
            .expect("replace");
        assert!(stored_checkpoint(&cut).is_err());

        // Nor are packed entries with one too many.
        let entries = packed_entries::pack(&window);
        let mut extra = frame.clone();
        extra
            .with_column(on_window_row(
                PACKED_ENTRIES,
                &[entries.as_slice(), &entries[..7]].concat(),
                frame.height(),
            ))
            .expect("replace");
        assert!(stored_checkpoint(&extra).is_err());

        // An object stored before the packed columns (a row each block and entry) reads back the same.
        assert!(
            p.blocks.iter().next().is_some() && window.action.len() > 10,
            "blocks ({}) and entries ({}) to store",
            p.blocks.len(),
            window.action.len()
        );
        let legacy = legacy_frame(p, &window);
        assert!(legacy.column(PACKED_BLOCKS).is_err() && legacy.column(PACKED_ENTRIES).is_err());
        let (old, new) = (
            stored_checkpoint(&legacy).expect("read back"),
            stored_checkpoint(&frame).expect("read back"),
        );
        assert_eq!(old.state, new.state);
        assert_eq!(old.state, *p);
        assert_eq!(
            (old.first, &old.action, &old.addr, &old.size, &old.stack, &old.stream),
            (new.first, &new.action, &new.addr, &new.size, &new.stack, &new.stream)
        );
        assert_eq!(
            old.map_at(p.cursor - 3, 0, None, SegmentDetail::FULL),
            new.map_at(p.cursor - 3, 0, None, SegmentDetail::FULL)
        );
    }

    /// A checkpoint's frame as objects were stored before their packed columns: a row each
    /// segment, block and entry.
    fn legacy_frame(state: &FlatState, window: &EntryRows<'_>) -> DataFrame {
        let blocks: Vec<(i64, Block)> = state.blocks.iter().collect();
        let mut rows: Vec<(u8, i64, i64, i64, u8, u32)> =
            vec![(WINDOW, state.cursor as i64, window.first as i64, 0, 0, 0)];
        rows.extend(
            state
                .segs
                .iter()
                .map(|(a, s)| (SEGMENT, *a, s.size, s.stream, u8::from(s.expandable), s.blocks)),
        );
        rows.extend(
            blocks
                .iter()
                .map(|(a, b)| (BLOCK, *a, b.size, b.requested, b.state as u8, b.stack)),
        );
        rows.extend((0..window.action.len()).map(|i| {
            (
                ENTRY,
                window.addr.at(i),
                window.size.at(i),
                window.stream.get(i),
                window.action[i],
                window.stack.at(i),
            )
        }));
        df!(
            "kind" => rows.iter().map(|r| r.0).collect::<Vec<_>>(),
            "address" => rows.iter().map(|r| r.1).collect::<Vec<_>>(),
            "size" => rows.iter().map(|r| r.2).collect::<Vec<_>>(),
            "extra" => rows.iter().map(|r| r.3).collect::<Vec<_>>(),
            "code" => rows.iter().map(|r| r.4).collect::<Vec<_>>(),
            "stack" => rows.iter().map(|r| r.5).collect::<Vec<_>>(),
        )
        .expect("rows")
    }
}
