//! [`TraceLowering`], the machine's append hook: each trace-entry dict becomes a row the moment
//! it is appended to its list (so the 2.7 M-entry benchmark never exists as an object tree),
//! read by the interned ids of its keys.

use super::super::pickle::flat::{FlatDict, FlatKeys, FLAT_FIELDS, ITEMS};
use super::super::pickle::{AppendHook, Heap, Kind, PResult, PickleError, Val, V};
use super::row_pipe::{Row, RowPipe};
use super::FrameKeys;
use crate::tables::{Action, EventNote, FrameTable, TraceRows, NO_TIME};

/// The fields of a trace entry the importer reads, in [`Keys::field_of`] order.
#[derive(Clone, Copy)]
#[repr(u8)]
enum Field {
    Action,
    Addr,
    Size,
    Stream,
    TimeUs,
    Frames,
    DeviceFree,
    CompileContext,
    UserMetadata,
    Category,
}

/// How many [`Field`]s there are (each a slot of a flat read's fields).
const FIELDS: usize = 10;
const _: () = assert!(FIELDS <= FLAT_FIELDS);
/// `Keys::field_of` for a string that names no field.
const NOT_A_FIELD: u8 = u8::MAX;

/// The interned ids of the keys the importer reads.
struct Keys {
    /// Interned string id → the [`Field`] it names (or [`NOT_A_FIELD`]): one look-up per key of
    /// an entry instead of a scan of the entry per field.
    field_of: Vec<u8>,
    frame: FrameKeys,
    /// `action` (an entry's first key as PyTorch writes it) and `frames` (its one list).
    flat: FlatKeys,
    /// The strings `""` and `"N/A"`: most entries' `user_metadata` and `compile_context`, which
    /// are not kept, known by their values without reading them.
    empty: Val,
    not_available: Val,
}

impl Keys {
    fn intern(heap: &mut Heap) -> Keys {
        let frame = FrameKeys::intern(heap);
        let names: [(&str, Field); FIELDS] = [
            ("action", Field::Action),
            ("addr", Field::Addr),
            ("size", Field::Size),
            ("stream", Field::Stream),
            ("time_us", Field::TimeUs),
            ("frames", Field::Frames),
            ("device_free", Field::DeviceFree),
            ("compile_context", Field::CompileContext),
            ("user_metadata", Field::UserMetadata),
            ("category", Field::Category),
        ];
        let mut field_of = Vec::new();
        for (name, field) in names {
            let id = heap.strings.intern(name) as usize;
            if field_of.len() <= id {
                field_of.resize(id + 1, NOT_A_FIELD);
            }
            field_of[id] = field as u8;
        }
        let flat = FlatKeys {
            first: heap.strings.intern("action"),
            list: heap.strings.intern("frames"),
            field_of: field_of.clone(),
        };
        let empty = Val::string(heap.strings.intern(""));
        let not_available = Val::string(heap.strings.intern("N/A"));
        Keys {
            field_of,
            frame,
            flat,
            empty,
            not_available,
        }
    }

    /// The [`Field`] an interned key names.
    #[inline]
    fn field(&self, key: u32) -> Option<usize> {
        match self.field_of.get(key as usize) {
            Some(&f) if f != NOT_A_FIELD => Some(f as usize),
            _ => None,
        }
    }

    /// The values of an entry dict's fields; when a key repeats, the last one wins (as in
    /// Python).
    fn fields(&self, heap: &Heap, dict: u32) -> [Option<Val>; FIELDS] {
        let mut found = [None; FIELDS];
        for kv in heap.objs[dict as usize].items.chunks_exact(2) {
            if let V::Str(id) = heap.get(kv[0]) {
                if let Some(f) = self.field(id) {
                    found[f] = Some(kv[1]);
                }
            }
        }
        found
    }

}

/// The append hook: trace entries → rows, frame lists → stack ids.
pub struct TraceLowering {
    keys: Option<Keys>,
    /// Interned action string id → its [`Action`], filled as actions are first seen.
    actions: Vec<Option<Action>>,
    /// The trace's rows, pushed into their columns beside the decoder.
    rows: RowPipe,
    /// Sparse `(row, device_free)`, as [`TraceRows::device_free`].
    device_free: Vec<(u32, i64)>,
    /// Rows' notes, as [`TraceRows::notes`].
    pub notes: Vec<EventNote>,
    pub frames: FrameTable,
    /// Set once any entry had `time_us`.
    pub saw_time: bool,
}

impl TraceLowering {
    pub fn new() -> Self {
        TraceLowering {
            keys: None,
            actions: Vec::new(),
            rows: RowPipe::default(),
            device_free: Vec::new(),
            notes: Vec::new(),
            frames: FrameTable::new(),
            saw_time: false,
        }
    }

    /// Every row lowered, in order (waits for the rows still being pushed).
    pub fn take_trace(&mut self) -> TraceRows {
        let mut trace = self.rows.finish();
        trace.device_free = std::mem::take(&mut self.device_free);
        trace.notes = std::mem::take(&mut self.notes);
        trace
    }

    /// The [`Action`] an interned action string names.
    fn action(&mut self, heap: &Heap, id: u32) -> Action {
        let i = id as usize;
        if let Some(Some(a)) = self.actions.get(i) {
            return *a;
        }
        let a = Action::from_name(heap.strings.get(id));
        if self.actions.len() <= i {
            self.actions.resize(i + 1, None);
        }
        self.actions[i] = Some(a);
        a
    }
}

/// The error of a trace entry dict met again after it was lowered into a row: the flat read
/// keeps no dict to meet, so both readers refuse the file alike.
pub(super) fn entry_referenced_twice(offset: u64) -> PickleError {
    PickleError::Malformed {
        offset,
        msg: "a trace entry is referenced twice".into(),
    }
}

impl Default for TraceLowering {
    fn default() -> Self {
        Self::new()
    }
}

impl AppendHook for TraceLowering {
    /// Frame dicts, appended to frame lists several times as often as entries to a trace, are
    /// turned away here (inlined into the VM); entries go on to [`TraceLowering::lower_entry`].
    #[inline]
    fn on_append(&mut self, heap: &mut Heap, list: u32, item: Val, offset: u64) -> PResult<bool> {
        if item == Val::LOWERED_ENTRY {
            return Ok(true); // lowered where it was read (`lower_flat`)
        }
        let d = match heap.get(item) {
            V::Obj(d) if heap.kind(d) == Kind::Dict => d,
            V::Consumed => return Err(entry_referenced_twice(offset)),
            _ => return Ok(false),
        };
        match heap.get(heap.objs[d as usize].lowered) {
            // A dict already lowered to a frame is no trace entry.
            V::Frame(_) => return Ok(false),
            // The flat read forgets an entry once lowered; the machine refuses it the same way.
            V::Consumed => return Err(entry_referenced_twice(offset)),
            _ => {}
        }
        self.lower_entry(heap, list, d, offset)
    }

    fn flat_keys(&mut self, heap: &mut Heap) -> Option<FlatKeys> {
        Some(self.keys.get_or_insert_with(|| Keys::intern(heap)).flat.clone())
    }

    fn lower_flat(&mut self, heap: &mut Heap, list: u32, entry: &FlatDict, offset: u64) -> PResult<Option<Val>> {
        self.keys.get_or_insert_with(|| Keys::intern(heap));
        // The read put each field's value in its slot (`Keys::field_of`).
        let Ok(f) = <&[Option<Val>; FIELDS]>::try_from(&entry.fields[..FIELDS]) else {
            return Ok(None);
        };
        Ok(self
            .lower_fields(heap, list, f, &entry.items, offset)?
            .map(Val::stack))
    }
}

impl TraceLowering {
    /// Turns entry dict `d`, appended to `list`, into a trace row; `false` when it is no entry.
    #[inline(never)]
    fn lower_entry(&mut self, heap: &mut Heap, list: u32, d: u32, offset: u64) -> PResult<bool> {
        let keys = self.keys.get_or_insert_with(|| Keys::intern(heap));
        let f = keys.fields(heap, d);
        if self.lower_fields(heap, list, &f, &[], offset)?.is_none() {
            return Ok(false);
        }
        heap.objs[d as usize].lowered = Val::consumed();
        Ok(true)
    }

    /// Turns an entry's fields, appended to `list`, into a trace row: the row's stack id, or
    /// `None` (and nothing changed) when they are no entry. A `frames` value [`ITEMS`] is a
    /// list read flat, whose items are `items`.
    fn lower_fields(
        &mut self,
        heap: &mut Heap,
        list: u32,
        f: &[Option<Val>; FIELDS],
        items: &[Val],
        offset: u64,
    ) -> PResult<Option<u32>> {
        let Some(keys) = self.keys.as_ref() else {
            return Ok(None);
        };
        let (frame_keys, empty, not_available) = (keys.frame, keys.empty, keys.not_available);
        let Some(V::Str(action_id)) = f[Field::Action as usize].map(|v| heap.get(v)) else {
            return Ok(None);
        };
        let action = self.action(heap, action_id);
        let int = |field: Field| f[field as usize].and_then(|v| heap.int_of(v));
        let addr = int(Field::Addr).unwrap_or(0);
        let size = int(Field::Size).unwrap_or(0);
        let stream = int(Field::Stream).unwrap_or(0);
        let time = int(Field::TimeUs);
        let device_free = int(Field::DeviceFree);
        // Strings are copied only when kept: not empty, and for `compile_context` not "N/A"
        // (most entries'), both known first by their values.
        let text = |field: Field, unless: Val| {
            f[field as usize]
                .filter(|&v| v != empty && v != unless)
                .and_then(|v| heap.str_of(v))
                .filter(|s| !s.is_empty())
        };
        let compile_context = text(Field::CompileContext, not_available)
            .filter(|s| *s != "N/A")
            .map(str::to_owned);
        let user_metadata = text(Field::UserMetadata, empty).map(str::to_owned);
        let category = text(Field::Category, empty).map(str::to_owned);
        let action_name = (action == Action::Other).then(|| heap.strings.get(action_id).to_owned());
        let stack = match f[Field::Frames as usize] {
            Some(ITEMS) => self.frames.stack_of_items(heap, items, &frame_keys, offset)?,
            Some(v) => self.frames.stack_of(heap, v, &frame_keys, offset)?,
            None => self.frames.empty_stack(),
        };

        let row = self.rows.len() as u32;
        self.saw_time |= time.is_some();
        self.rows.push(Row {
            action,
            addr,
            size,
            stream,
            time_us: time.unwrap_or(NO_TIME),
            stack,
        });
        if let Some(v) = device_free {
            self.device_free.push((row, v));
        }
        if compile_context.is_some() || user_metadata.is_some() || action_name.is_some() || category.is_some() {
            self.notes.push(EventNote {
                row,
                compile_context,
                user_metadata,
                action_name,
                category,
            });
        }

        let l = &mut heap.objs[list as usize];
        l.rows = match l.rows {
            None => Some((row, row + 1)),
            Some((s, e)) if e == row => Some((s, row + 1)),
            Some(_) => {
                return Err(PickleError::Malformed {
                    offset,
                    msg: "trace entries of two lists are interleaved".into(),
                })
            }
        };
        Ok(Some(stack))
    }
}
