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
//! `packed_blocks` ([`PackedBlocks`]) and `packed_entries` ([`super::packed_entries`]), null on
//! the other rows. Objects stored before these columns hold their blocks and entries as rows of
//! kinds 2 and 3, and read back as they did. A row each block and entry was most of the work
//! of storing a GB-scale report: on the 2 GB generated snapshot (385 objects, up to 181 K
//! blocks in each state) `memlens-bench-segments` wrote them in 5.2 s as 35.9 MiB, and decoded
//! one for a map in 4.3 ms (p50); packed, 3.3 s, 2.0 MiB and 2.9 ms (the bench file: 0.19 ->
//! 0.15 s, 7.6 -> 8.9 MiB, 1.0 -> 0.7 ms).

use memlens_api::{BlockState, SegmentMap};
use polars::prelude::*;

use super::packed_blocks::PackedBlocks;
use super::packed_entries;
use super::segment_checkpoints::{map_from, FlatSegment, FlatState};
use super::segment_detail::SegmentDetail;
use super::segment_map::{Block, EntryRows};
use super::Streams;

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
            addr: &self.addr,
            size: &self.size,
            stack: &self.stack,
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

/// Entries a stored object holds at most, where its window allows (see [`MAX_PARTS`]): a window
/// between two checkpoints longer than this is stored as several objects, the states between
/// its checkpoints rewound from the window's end as they are encoded. A map read back rewinds
/// at most this many entries (about 5-8 ms), while the checkpoints held in memory stay as many
/// as they are. Windows of traces up to 12.8 M entries a device fit in one object.
pub const MAX_ENTRIES_PER_OBJECT: usize = 100_000;
/// … but a window is split into at most this many objects (each split rewinds from the window's
/// end, so its cost grows with their number).
pub const MAX_PARTS: usize = 4;

/// One stored object of a device's segment map: the state at `cursor`, with the entries
/// before it back to the previous object's cursor.
#[derive(Clone, Copy)]
pub struct StoredWindow<'a> {
    pub cursor: usize,
    /// The checkpoint at or after `cursor` the state comes from.
    point: &'a FlatState,
    entries: EntryRows<'a>,
    /// The entries from `cursor` up to the checkpoint, when the state lies before it.
    later: Option<EntryRows<'a>>,
}

impl StoredWindow<'_> {
    /// Its frame alone ([`frames_of_parts`] of it: its state rewound from its checkpoint).
    pub fn frame(&self) -> PolarsResult<DataFrame> {
        let mut frames = frames_of_parts(std::slice::from_ref(self))?;
        frames.pop().ok_or_else(|| polars_err!(ComputeError: "no frame made"))
    }
}

/// The frames of the parts of one window (consecutive [`StoredWindow`]s of one checkpoint, in
/// cursor order), made together: the checkpoint's state is built once and rewound from the last
/// part to the first, instead of built and rewound again for each part (on the 2 GB generated
/// snapshot that was most of the cost of its objects: a state of 181 K blocks).
pub fn frames_of_parts(parts: &[StoredWindow<'_>]) -> PolarsResult<Vec<DataFrame>> {
    let mut frames = Vec::with_capacity(parts.len());
    let mut state = None;
    for (k, part) in parts.iter().enumerate().rev() {
        polars_ensure!(
            std::ptr::eq(part.point, parts[parts.len() - 1].point) && (k == 0 || parts[k - 1].cursor < part.cursor),
            ComputeError: "the parts of one window, in order, are made together"
        );
        let frame = match &part.later {
            None => checkpoint_frame(part.point, &part.entries)?,
            Some(later) => {
                let state = state.get_or_insert_with(|| part.point.state());
                state.rewind_over(later, part.cursor.checked_sub(1));
                checkpoint_frame(&FlatState::of(state), &part.entries)?
            }
        };
        frames.push(frame);
    }
    frames.reverse();
    Ok(frames)
}

/// [`stored_windows`] in runs that share a checkpoint: the parts of each window, whose frames
/// [`frames_of_parts`] makes together.
pub fn stored_window_parts<'a>(
    points: &'a [FlatState],
    rows: &EntryRows<'a>,
    max_entries: usize,
) -> Vec<Vec<StoredWindow<'a>>> {
    let mut runs: Vec<Vec<StoredWindow<'a>>> = Vec::new();
    for w in stored_windows(points, rows, max_entries) {
        match runs.last_mut() {
            Some(run) if std::ptr::eq(run[0].point, w.point) => run.push(w),
            _ => runs.push(vec![w]),
        }
    }
    runs
}

/// The stored objects of a device's checkpoints `points` (ascending), whose entries are `rows`,
/// in cursor order: one per window, or more for a window longer than `max_entries` (the store
/// passes [`MAX_ENTRIES_PER_OBJECT`]), at most [`MAX_PARTS`].
pub fn stored_windows<'a>(points: &'a [FlatState], rows: &EntryRows<'a>, max_entries: usize) -> Vec<StoredWindow<'a>> {
    let mut first = rows.first;
    let mut out = Vec::with_capacity(points.len());
    for point in points {
        let window = point.cursor - first;
        let parts = window.div_ceil(max_entries.max(1)).clamp(1, MAX_PARTS);
        for part in 1..=parts {
            let (start, end) = (first + window * (part - 1) / parts, first + window * part / parts);
            out.push(StoredWindow {
                cursor: end,
                point,
                entries: rows.range(start, end),
                later: (end < point.cursor).then(|| rows.range(end, point.cursor)),
            });
        }
        first = point.cursor;
    }
    out
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
    use crate::analysis::segment_checkpoints::SegmentCheckpoints;
    use crate::analysis::segment_map::segment_map_at;
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
        let cp = SegmentCheckpoints::build_every(&t, &ev, ev.len() / 8).expect("checkpoints");
        let points = cp.points();
        assert!(points.len() > 2);
        let all = EntryRows::of(&ev);
        // Objects of at most a third of the checkpoints' spacing: windows are split, each object
        // holding no more entries than that, and the cursors still end at the last entry.
        let every = ev.len() / 8;
        let most = every.div_ceil(3);
        let windows = stored_windows(points, &all, most);
        assert!(windows.len() >= 3 * (points.len() - 2), "{}", windows.len());
        assert!(windows
            .windows(2)
            .all(|w| w[1].cursor > w[0].cursor && w[1].cursor - w[0].cursor <= most));
        assert_eq!(windows.last().map(|w| w.cursor), Some(ev.len()));
        // A window's parts made together are the frames made one by one.
        let runs = stored_window_parts(points, &all, most);
        assert_eq!(runs.iter().map(Vec::len).sum::<usize>(), windows.len());
        assert!(runs.iter().any(|r| r.len() == 3), "windows split in three");
        for run in &runs {
            for (together, part) in frames_of_parts(run).expect("frames").iter().zip(run) {
                assert!(
                    together.equals_missing(&part.frame().expect("frame")),
                    "at {}",
                    part.cursor
                );
            }
        }
        let split = runs.iter().find(|r| r.len() == 3).expect("split");
        let other = runs
            .iter()
            .find(|r| !std::ptr::eq(r[0].point, split[0].point))
            .expect("another window");
        assert!(frames_of_parts(&[split[1], split[0]]).is_err(), "out of order");
        assert!(frames_of_parts(&[other[0], split[2]]).is_err(), "two windows");
        // Windows no longer than the most an object holds are stored whole, one per checkpoint.
        assert_eq!(stored_windows(points, &all, every).len(), points.len());
        let mut first = 0;
        for w in &windows {
            let back = stored_checkpoint(&w.frame().expect("frame")).expect("read back");
            assert_eq!(back.state.cursor, w.cursor);
            if let Some(p) = points.iter().find(|p| p.cursor == w.cursor) {
                assert_eq!(&back.state, p);
            }
            for target in (first..=w.cursor).step_by(((w.cursor - first) / 7).max(1)) {
                assert!(back.covers(target));
                let time = target.checked_sub(1).and_then(|i| ev.time_us(i));
                let full = segment_map_at(&t, &ev, target.checked_sub(1)).expect("map");
                assert_eq!(back.map_at(target, 0, time, SegmentDetail::FULL), full, "at {target}");
            }
            first = w.cursor;
        }
        // A frame that does not add up is an error, not a wrong map.
        let p = &points[points.len() - 1];
        let window = all.range(points[points.len() - 2].cursor, p.cursor);
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
                window.addr[i],
                window.size[i],
                window.stream.get(i),
                window.action[i],
                window.stack[i],
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
