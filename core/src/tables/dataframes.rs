//! The polars side of the canonical snapshot tables: [`SnapshotTables`] (one frame per table of
//! [`TABLE_NAMES`], and the events' `size_stacks`) and [`SnapshotColumns::into_tables`], which moves the importers' builders
//! into frames without copying numeric vectors.

use polars_core::prelude::*;

use memlens_api::SourceInfo;

use super::{
    Base, NarrowI64, OneOrEach, PairCodes, SizesAndStacks, SnapshotColumns, SnapshotMeta, TraceRows, NO_TIME,
    TABLE_NAMES,
};
use crate::tables::columns::{address_columns, events as ev, one_or_each_column, size_stacks as ss};
use crate::tables::stack_ids::stack_id_column;

/// The canonical tables of one imported snapshot.
pub struct SnapshotTables {
    pub events: DataFrame,
    /// The `(size, stack)` pairs the events' `size_stack` codes name (see
    /// [`crate::tables::columns::size_stacks`]); held beside the frames of [`TABLE_NAMES`], which
    /// reports stored before it have: empty there, as where the events hold them apart.
    pub size_stacks: DataFrame,
    pub segments: DataFrame,
    pub blocks: DataFrame,
    pub frames: DataFrame,
    pub stack_frames: DataFrame,
    pub annotations: DataFrame,
    pub event_notes: DataFrame,
    pub source: SourceInfo,
    pub max_split_size: Option<i64>,
    pub format: memlens_api::Format,
}

impl SnapshotTables {
    /// Every frame with its name, in [`TABLE_NAMES`] order.
    pub fn frames_mut(&mut self) -> [(&'static str, &mut DataFrame); 7] {
        [
            (TABLE_NAMES[0], &mut self.events),
            (TABLE_NAMES[1], &mut self.segments),
            (TABLE_NAMES[2], &mut self.blocks),
            (TABLE_NAMES[3], &mut self.frames),
            (TABLE_NAMES[4], &mut self.stack_frames),
            (TABLE_NAMES[5], &mut self.annotations),
            (TABLE_NAMES[6], &mut self.event_notes),
        ]
    }

    /// Every frame, in [`TABLE_NAMES`] order.
    pub fn frames_ref(&self) -> [&DataFrame; 7] {
        [
            &self.events,
            &self.segments,
            &self.blocks,
            &self.frames,
            &self.stack_frames,
            &self.annotations,
            &self.event_notes,
        ]
    }

    /// Drops the events' addresses, in whichever form they are held: for a sink that reads no
    /// trace entry once the analyses are over ([`crate::pipeline::Keep::release_addresses_from`]).
    /// A `DeviceEvents` made after it is an error naming the column.
    pub fn release_addresses(&mut self) {
        for name in [ev::ADDR_UNITS, ev::ADDR_BASE, ev::ADDR.name] {
            let _ = self.events.drop_in_place(name);
        }
    }

    /// Whether the events hold their addresses (not let go: [`SnapshotTables::release_addresses`]).
    pub fn holds_addresses(&self) -> bool {
        crate::tables::columns::addresses(&self.events).is_ok()
    }

    pub fn meta(&self) -> SnapshotMeta {
        SnapshotMeta {
            source: self.source.clone(),
            max_split_size: self.max_split_size,
            format: self.format,
        }
    }

    /// The tables back from their frames (in [`TABLE_NAMES`] order) and meta.
    pub fn from_frames(frames: [DataFrame; 7], meta: SnapshotMeta) -> SnapshotTables {
        let [events, segments, blocks, frames, stack_frames, annotations, event_notes] = frames;
        SnapshotTables {
            events,
            size_stacks: DataFrame::empty(),
            segments,
            blocks,
            frames,
            stack_frames,
            annotations,
            event_notes,
            source: meta.source,
            max_split_size: meta.max_split_size,
            format: meta.format,
        }
    }
}

/// The events' time columns for `time_us` over `n` rows: µs after the first (u32) and the
/// first (one scalar) when every entry has a time within 71 minutes of the first; else
/// `time_us` (i64), null where an entry has none, and one null scalar when none has.
fn time_columns(time_us: NarrowI64, n: usize) -> Vec<Column> {
    if let NarrowI64::Narrow {
        base,
        shift: 0,
        offsets,
    } = time_us
    {
        if base != NO_TIME {
            return vec![
                col::<UInt32Type>(ev::TIME_AFTER_FIRST_US, offsets),
                Column::new_scalar(
                    ev::FIRST_TIME_US.into(),
                    Scalar::new(DataType::Int64, AnyValue::Int64(base)),
                    n,
                ),
            ];
        }
        return time_columns(
            NarrowI64::Wide(offsets.iter().map(|&o| base + i64::from(o)).collect()),
            n,
        );
    }
    let time_us = time_us.into_vec();
    vec![if !time_us.is_empty() && time_us.iter().all(|&t| t == NO_TIME) {
        Column::full_null(ev::TIME_US.name.into(), n, &DataType::Int64)
    } else if time_us.contains(&NO_TIME) {
        Int64Chunked::from_iter_options(
            ev::TIME_US.name.into(),
            time_us.iter().map(|&t| (t != NO_TIME).then_some(t)),
        )
        .into_series()
        .into()
    } else {
        ev::TIME_US.build(time_us)
    }]
}

/// The events' sizes and stack ids: the `size_stack` codes and the `size_stacks` table they
/// name, or a `size` column (u32 while every size is below 4 GiB) and a `stack` column (u16
/// while every id is below 65,536) and an empty table.
fn size_stack_columns(sizes_and_stacks: SizesAndStacks) -> PolarsResult<(Column, Option<Column>, DataFrame)> {
    Ok(match sizes_and_stacks {
        SizesAndStacks::Paired(PairCodes {
            codes, sizes, stacks, ..
        }) => (
            ev::SIZE_STACK.build(codes),
            None,
            DataFrame::new(sizes.len(), vec![ss::SIZE.build(sizes), ss::STACK.build(stacks)])?,
        ),
        SizesAndStacks::Apart { size, stack } => (
            match size.into_u32_or_i64() {
                Ok(narrow) => col::<UInt32Type>(ev::SIZE, narrow),
                Err(wide) => col::<Int64Type>(ev::SIZE, wide),
            },
            Some(stack_id_column(ev::STACK, stack)),
            DataFrame::new(0, vec![ss::SIZE.build(Vec::new()), ss::STACK.build(Vec::new())])?,
        ),
    })
}

/// `into` with row `r` of each of `rows` pushed in turn, by `push`.
fn pick<C>(rows: &[usize], mut into: C, mut push: impl FnMut(&mut C, usize)) -> C {
    for &r in rows {
        push(&mut into, r);
    }
    into
}

fn col<T: PolarsNumericType>(name: &str, v: Vec<T::Native>) -> Column {
    ChunkedArray::<T>::from_vec(name.into(), v).into_series().into()
}

impl SnapshotColumns {
    /// Moves the builders into polars frames (numeric vectors are handed over without copying).
    pub fn into_tables(self) -> PolarsResult<SnapshotTables> {
        let SnapshotColumns {
            mut trace,
            device_ranges,
            frames,
            segments,
            blocks,
            annotations,
            max_split_size,
            mut source,
            format,
        } = self;
        trace.shrink_to_fit();
        source.annotation_count = annotations.name.len();
        source.stack_count = frames.stack_count();

        // Keep only rows that belong to a device list, in device order.
        let covered: usize = device_ranges.iter().map(|(_, (s, e))| (e - s) as usize).sum();
        let contiguous = covered == trace.len() && {
            let mut sorted = device_ranges.clone();
            sorted.sort_by_key(|(_, (s, _))| *s);
            sorted.iter().zip(device_ranges.iter()).all(|(a, b)| a == b)
        };
        let n = covered;
        let device: Column = match device_ranges.first() {
            Some(&(one, _)) if device_ranges.iter().all(|&(d, _)| d == one) => Column::new_scalar(
                ev::DEVICE.name.into(),
                Scalar::new(DataType::Int32, AnyValue::Int32(one as i32)),
                n,
            ),
            _ => {
                let mut device: Vec<i32> = Vec::with_capacity(n);
                for (d, (s, e)) in &device_ranges {
                    device.extend(std::iter::repeat_n(*d as i32, (e - s) as usize));
                }
                ev::DEVICE.build(device)
            }
        };
        let TraceRows {
            action,
            addr,
            size_stack,
            stream,
            time_us,
            device_free,
            notes,
        } = trace;
        // The sizes and stacks stay coded and the timestamps offsets from the first where they fit.
        let (action, addr, size_stack, stream, time_us, row_map) = if contiguous {
            (action, addr, size_stack, stream, time_us, None)
        } else {
            let rows: Vec<usize> = device_ranges
                .iter()
                .flat_map(|(_, (s, e))| (*s as usize)..(*e as usize))
                .collect();
            let mut map = vec![u32::MAX; action.len()];
            for (new, old) in rows.iter().enumerate() {
                map[*old] = new as u32;
            }
            (
                rows.iter().map(|&r| action[r]).collect(),
                pick(&rows, NarrowI64::new(Base::Address), |c, r| c.push(addr.get(r))),
                pick(&rows, SizesAndStacks::default(), |c, r| {
                    let (size, stack) = size_stack.get(r);
                    c.push(size, stack)
                }),
                pick(&rows, OneOrEach::default(), |c, r| c.push(stream.get(r).unwrap_or(0))),
                pick(&rows, NarrowI64::new(Base::First), |c, r| c.push(time_us.get(r))),
                Some(map),
            )
        };
        let remap = |r: u32| match &row_map {
            None => Some(r),
            Some(m) => Some(m[r as usize]).filter(|&x| x != u32::MAX),
        };
        let time_cols = time_columns(time_us, n);
        let mut free_col: Vec<Option<i64>> = Vec::new();
        if !device_free.is_empty() {
            free_col = vec![None; n];
            for (r, v) in device_free {
                if let Some(r) = remap(r) {
                    free_col[r as usize] = Some(v);
                }
            }
        }
        let free_col: Column = if free_col.is_empty() {
            Column::full_null(ev::DEVICE_FREE.name.into(), n, &DataType::Int64)
        } else {
            Int64Chunked::from_iter_options(ev::DEVICE_FREE.name.into(), free_col.into_iter())
                .into_series()
                .into()
        };
        let (size_col, stack_col, size_stacks) = size_stack_columns(size_stack)?;
        let mut columns = vec![
            // A trace of one device (the usual case), or on one stream, keeps that column as
            // one scalar, not 4 or 8 bytes per entry.
            device,
            ev::ACTION.build(action),
            size_col,
            one_or_each_column(ev::STREAM.name, stream),
        ];
        columns.splice(2..2, address_columns(addr, n));
        columns.extend(time_cols);
        columns.extend(stack_col);
        columns.push(free_col);
        let events = DataFrame::new(n, columns)?;

        let mut note_rows = Vec::new();
        let (mut cc, mut um, mut an, mut cat) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for note in notes {
            if let Some(r) = remap(note.row) {
                note_rows.push(r);
                cc.push(note.compile_context);
                um.push(note.user_metadata);
                an.push(note.action_name);
                cat.push(note.category);
            }
        }
        let event_notes = DataFrame::new(
            note_rows.len(),
            vec![
                col::<UInt32Type>("row", note_rows),
                Column::new("compile_context".into(), cc),
                Column::new("user_metadata".into(), um),
                Column::new("action_name".into(), an),
                Column::new("category".into(), cat),
            ],
        )?;

        let segments_df = DataFrame::new(
            segments.len(),
            vec![
                col::<Int64Type>("device", segments.device),
                col::<Int64Type>("address", segments.address),
                col::<Int64Type>("total_size", segments.total_size),
                col::<Int64Type>("allocated_size", segments.allocated_size),
                col::<Int64Type>("active_size", segments.active_size),
                col::<Int64Type>("requested_size", segments.requested_size),
                col::<Int64Type>("stream", segments.stream),
                Column::new("segment_type".into(), segments.segment_type),
                col::<Int64Type>("pool_a", segments.pool_a),
                col::<Int64Type>("pool_b", segments.pool_b),
                Column::new("is_expandable".into(), segments.is_expandable),
                col::<UInt32Type>("stack", segments.stack),
            ],
        )?;
        let nb = blocks.address.len();
        let blocks_df = DataFrame::new(
            nb,
            vec![
                col::<Int64Type>("device", blocks.device),
                col::<UInt32Type>("segment", blocks.segment),
                col::<Int64Type>("address", blocks.address),
                col::<Int64Type>("size", blocks.size),
                col::<Int64Type>("requested_size", blocks.requested_size),
                col::<UInt8Type>("state", blocks.state),
                col::<UInt32Type>("stack", blocks.stack),
            ],
        )?;
        let nf = frames.names.len();
        let frames_df = DataFrame::new(
            nf,
            vec![
                col::<UInt32Type>("frame", (0..nf as u32).collect()),
                Column::new("name".into(), frames.names),
                Column::new("filename".into(), frames.files),
                col::<Int64Type>("line", frames.lines),
            ],
        )?;
        let mut sf_stack = Vec::with_capacity(frames.flat.len());
        let mut sf_depth = Vec::with_capacity(frames.flat.len());
        for s in 0..frames.offsets.len() - 1 {
            let (a, b) = (frames.offsets[s], frames.offsets[s + 1]);
            sf_stack.extend(std::iter::repeat_n(s as u32, (b - a) as usize));
            sf_depth.extend(0..(b - a));
        }
        let stack_frames = DataFrame::new(
            frames.flat.len(),
            vec![
                col::<UInt32Type>("stack", sf_stack),
                col::<UInt32Type>("depth", sf_depth),
                col::<UInt32Type>("frame", frames.flat),
            ],
        )?;
        let na = annotations.name.len();
        let annotations_df = DataFrame::new(
            na,
            vec![
                col::<Int64Type>("device", annotations.device),
                Column::new("name".into(), annotations.name),
                Column::new("stage".into(), annotations.stage),
                col::<Int64Type>("time_us", annotations.time_us),
            ],
        )?;
        Ok(SnapshotTables {
            events,
            size_stacks,
            segments: segments_df,
            blocks: blocks_df,
            frames: frames_df,
            stack_frames,
            annotations: annotations_df,
            event_notes,
            source,
            max_split_size,
            format,
        })
    }
}
