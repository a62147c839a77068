//! Lowering decoded pickle values into the canonical snapshot columns.
//!
//! Two halves: [`TraceLowering`] is the VM's append hook that turns each trace-entry dict into a
//! row the moment it is appended to its list (so the 2.7 M-entry benchmark never exists as an
//! object tree), and [`lower_root`] walks the small rest of the snapshot (segments, blocks,
//! settings, annotations) by schema once decoding is done. Frame lists shared through the
//! pickle memo become shared stack ids.

use super::pickle::flat::{FlatDict, FlatKeys, FLAT_FIELDS, ITEMS};
use super::pickle::{AppendHook, Heap, Kind, PResult, PickleError, Val, V};
use crate::tables::{
    Action, BlockRows, BlockState, EventNote, FrameTable, SegmentRows, SnapshotColumns, TraceRows, NO_TIME,
};

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

/// Interned ids of a frame dict's keys: `name`, `filename`, `line`, and the FX debug fields
/// `augment_with_fx_traces=True` adds to frames of FX-generated code.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FrameKeys {
    name: u32,
    filename: u32,
    line: u32,
    fx_node_name: u32,
    fx_node_target: u32,
    fx_original_trace: u32,
}

impl FrameKeys {
    pub(crate) fn intern(heap: &mut Heap) -> FrameKeys {
        let mut k = |s: &str| heap.strings.intern(s);
        FrameKeys {
            name: k("name"),
            filename: k("filename"),
            line: k("line"),
            fx_node_name: k("fx_node_name"),
            fx_node_target: k("fx_node_target"),
            fx_original_trace: k("fx_original_trace"),
        }
    }
}

/// `File "model.py", line 12, in forward` lines of an FX node's original source trace.
static TRACE_LINE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r#"File "([^"]+)", line (\d+), in (\S+)"#).expect("static regex")
});

/// The append hook: trace entries → rows, frame lists → stack ids.
pub struct TraceLowering {
    keys: Option<Keys>,
    /// Interned action string id → its [`Action`], filled as actions are first seen.
    actions: Vec<Option<Action>>,
    pub trace: TraceRows,
    pub frames: FrameTable,
    /// Set once any entry had `time_us`.
    pub saw_time: bool,
}

impl TraceLowering {
    pub fn new() -> Self {
        TraceLowering {
            keys: None,
            actions: Vec::new(),
            trace: TraceRows::default(),
            frames: FrameTable::new(),
            saw_time: false,
        }
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
            V::Consumed => {
                return Err(PickleError::Malformed {
                    offset,
                    msg: "a trace entry is referenced twice".into(),
                })
            }
            _ => return Ok(false),
        };
        // A dict already lowered to a frame is no trace entry.
        if let V::Frame(_) = heap.get(heap.objs[d as usize].lowered) {
            return Ok(false);
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

        let row = self.trace.len() as u32;
        self.saw_time |= time.is_some();
        self.trace
            .push(action, addr, size, stream, time.unwrap_or(NO_TIME), stack);
        if let Some(v) = device_free {
            self.trace.device_free.push((row, v));
        }
        if compile_context.is_some() || user_metadata.is_some() || action_name.is_some() || category.is_some() {
            self.trace.notes.push(EventNote {
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

impl FrameTable {
    /// The stack id of a frame list value (a list of frame dicts, already-interned frames, or a
    /// list already lowered to a stack id).
    pub(crate) fn stack_of(&mut self, heap: &mut Heap, v: Val, keys: &FrameKeys, offset: u64) -> PResult<u32> {
        match heap.get(v) {
            V::Stack(id) => Ok(id),
            V::Obj(l) if matches!(heap.kind(l), Kind::List | Kind::Tuple) => {
                if let V::Stack(id) = heap.get(heap.objs[l as usize].lowered) {
                    return Ok(id);
                }
                let n = heap.seq(l).len();
                let mut ids = std::mem::take(&mut self.pending);
                ids.clear();
                for i in 0..n {
                    let f = heap.seq(l)[i];
                    self.frames_of(heap, f, keys, offset, &mut ids)?;
                }
                let id = self.intern_stack(&ids);
                self.pending = ids;
                heap.objs[l as usize].lowered = Val::stack(id);
                Ok(id)
            }
            V::None => Ok(self.empty_stack()),
            _ => Err(PickleError::Malformed {
                offset,
                msg: "`frames` is not a list".into(),
            }),
        }
    }

    /// The stack id of a frame list read flat: its items.
    fn stack_of_items(&mut self, heap: &mut Heap, items: &[Val], keys: &FrameKeys, offset: u64) -> PResult<u32> {
        let mut ids = std::mem::take(&mut self.pending);
        ids.clear();
        for &f in items {
            // A frame seen before (nearly every one) is its id; a new frame dict is read.
            match heap.interned_frame(f) {
                Some(id) => ids.push(id),
                None => self.frames_of(heap, f, keys, offset, &mut ids)?,
            }
        }
        let id = self.intern_stack(&ids);
        self.pending = ids;
        Ok(id)
    }

    /// The frame(s) one frame value stands for, appended to `out`: the frame itself, and for a
    /// frame of FX-generated code with an original source trace, that trace's frames
    /// (innermost first) as its callers. A frame with an FX node names it:
    /// `forward [fx addmm: aten.addmm.default]`.
    fn frames_of(&mut self, heap: &mut Heap, v: Val, k: &FrameKeys, offset: u64, out: &mut Vec<u32>) -> PResult<()> {
        match heap.get(v) {
            V::Frame(id) => out.push(id),
            V::Obj(d) if heap.kind(d) == Kind::Dict => {
                if let V::Frame(id) = heap.get(heap.objs[d as usize].lowered) {
                    out.push(id);
                    return Ok(());
                }
                let text = |key: u32| heap.dict_get(d, key).and_then(|v| heap.str_of(v));
                let mut name = text(k.name).unwrap_or("??").to_owned();
                let file = text(k.filename).unwrap_or("??").to_owned();
                let line = heap.dict_get(d, k.line).and_then(|v| heap.int_of(v)).unwrap_or(0);
                if let Some(node) = text(k.fx_node_name) {
                    name = match text(k.fx_node_target) {
                        Some(t) => format!("{name} [fx {node}: {t}]"),
                        None => format!("{name} [fx {node}]"),
                    };
                }
                let original: Vec<(String, String, i64)> = text(k.fx_original_trace)
                    .map(|t| {
                        TRACE_LINE
                            .captures_iter(t)
                            .filter_map(|c| Some((c[3].to_owned(), c[1].to_owned(), c[2].parse().ok()?)))
                            .collect()
                    })
                    .unwrap_or_default();
                let id = self.intern_frame(&name, &file, line);
                out.push(id);
                if original.is_empty() {
                    heap.objs[d as usize].lowered = Val::frame(id);
                }
                // A Python traceback lists the outermost call first.
                for (n, f, l) in original.iter().rev() {
                    out.push(self.intern_frame(n, f, *l));
                }
            }
            _ => {
                return Err(PickleError::Malformed {
                    offset,
                    msg: "a frame is not a dict".into(),
                })
            }
        }
        Ok(())
    }
}

/// Counts items visited by the schema walk so memo fan-out cannot make it explode.
struct Walk {
    visits: u64,
    limit: u64,
}

impl Walk {
    fn visit(&mut self, n: usize) -> PResult<()> {
        self.visits += n as u64;
        if self.visits > self.limit {
            return Err(PickleError::Malformed {
                offset: 0,
                msg: format!(
                    "structure expands to more than {} items through shared (memo) references",
                    self.limit
                ),
            });
        }
        Ok(())
    }
}

/// Walks the decoded root (everything but the already-lowered trace entries) into columns.
pub fn lower_root(heap: &mut Heap, root: Val, mut lowering: TraceLowering) -> PResult<SnapshotColumns> {
    let mut walk = Walk {
        visits: 0,
        limit: heap.items_created.saturating_mul(4).saturating_add(1_000_000),
    };
    let mut out = SnapshotColumns::default();
    let mut k = |s: &str| heap.strings.intern(s);
    let (k_segments, k_device_traces, k_settings, k_annotations) = (
        k("segments"),
        k("device_traces"),
        k("allocator_settings"),
        k("external_annotations"),
    );
    let (k_host_segments, k_host_traces) = (k("host_segments"), k("host_traces"));
    let frame_keys = FrameKeys::intern(heap);
    let k_name = frame_keys.name;

    let mut host = (None, None);
    let (segments, device_traces, settings, annotations) = match heap.get(root) {
        V::Obj(r) if heap.kind(r) == Kind::List => (Some(root), None, None, None),
        V::Obj(r) if heap.kind(r) == Kind::Dict => {
            let items = heap.objs[r as usize].items.clone();
            let known = [
                k_segments,
                k_device_traces,
                k_settings,
                k_annotations,
                k_host_segments,
                k_host_traces,
            ];
            host = (heap.dict_get(r, k_host_segments), heap.dict_get(r, k_host_traces));
            for kv in items.chunks_exact(2) {
                if let V::Str(id) = heap.get(kv[0]) {
                    if !known.contains(&id) {
                        out.source.ignored_keys.push(heap.strings.get(id).to_owned());
                    }
                }
            }
            (
                heap.dict_get(r, k_segments),
                heap.dict_get(r, k_device_traces),
                heap.dict_get(r, k_settings),
                heap.dict_get(r, k_annotations),
            )
        }
        _ => return Err(malformed("the snapshot root is neither a dict nor a list of segments")),
    };

    // A profiler-derived snapshot (`torch.cuda._memory_viz._profile_to_snapshot`) labels its
    // entries with the memory profiler's categories and keeps the CPU's tensors as one more
    // device after the GPUs: that one is left out.
    let profiler_derived = lowering.trace.notes.iter().any(|n| n.category.is_some());
    let mut cpu_device = None;
    // Traces: every device list must hold only lowered entries.
    if let Some(dt) = device_traces {
        let lists = list_items(heap, dt, "device_traces")?;
        walk.visit(lists.len())?;
        if profiler_derived && lists.len() > 1 {
            cpu_device = Some(lists.len() as i64 - 1);
            out.source.notes.push(format!(
                "derived from a profiler run (torch.cuda._memory_viz._profile_to_snapshot): entries carry \
                 PyTorch's memory-profiler categories, have no timestamps, and the one segment per device \
                 spans the tensors' addresses rather than the allocator's segments; device {} (the CPU's \
                 tensors) is left out",
                lists.len() - 1
            ));
        }
        for (device, l) in lists.iter().enumerate() {
            if Some(device as i64) == cpu_device {
                continue;
            }
            let V::Obj(li) = heap.get(*l) else {
                return Err(malformed(&format!("device_traces[{device}] is not a list")));
            };
            let o = &heap.objs[li as usize];
            if !o.items.is_empty() {
                return Err(malformed(&format!(
                    "device_traces[{device}] holds items that are not trace entries"
                )));
            }
            out.device_ranges
                .push((device as i64, o.rows.map_or((0, 0), |(s, e)| (s, e))));
        }
    }

    if let Some(segs) = segments {
        let segs = list_items(heap, segs, "segments")?;
        walk.visit(segs.len())?;
        lower_segments(
            heap,
            &segs,
            &mut lowering,
            (&mut out.segments, &mut out.blocks),
            &mut walk,
            &frame_keys,
            cpu_device,
        )?;
    }
    if host.0.is_some() || host.1.is_some() {
        lower_host_memory(heap, host, &mut lowering, &mut out, &mut walk, &frame_keys)?;
    }

    if let Some(s) = settings {
        if let V::Obj(d) = heap.get(s) {
            let mut g = |key: &str| {
                let id = heap.strings.intern(key);
                heap.dict_get(d, id)
            };
            let expandable = g("expandable_segments");
            let conf = g("PYTORCH_CUDA_ALLOC_CONF");
            let max_split = g("max_split_size");
            out.source.expandable_segments = expandable.and_then(|v| heap.int_of(v)).map(|v| v != 0);
            out.source.alloc_conf = conf.and_then(|v| heap.str_of(v)).map(str::to_owned);
            out.max_split_size = max_split.and_then(|v| heap.int_of(v));
        }
    }

    if let Some(a) = annotations {
        let items = list_items(heap, a, "external_annotations")?;
        walk.visit(items.len())?;
        let mut kk = |s: &str| heap.strings.intern(s);
        let (k_device, k_stage, k_time) = (kk("device"), kk("stage"), kk("time_us"));
        for it in items {
            let V::Obj(d) = heap.get(it) else { continue };
            let get = |key| heap.dict_get(d, key);
            let name = get(k_name).and_then(|v| heap.str_of(v)).unwrap_or("").to_owned();
            let stage = get(k_stage).and_then(|v| heap.str_of(v)).unwrap_or("").to_owned();
            let device = get(k_device).and_then(|v| heap.int_of(v)).unwrap_or(0);
            let time = get(k_time).and_then(|v| heap.int_of(v)).unwrap_or(NO_TIME);
            out.annotations.push(device, name, stage, time);
        }
    }

    out.source.has_time_us = lowering.saw_time;
    out.trace = std::mem::take(&mut lowering.trace);
    out.frames = lowering.frames;
    Ok(out)
}

/// Pinned host memory (`host_segments`, `host_traces`: PyTorch after 2.11, recorded with
/// `record_pinned_host_memory=True`). The pinned host allocator keeps segments and trace
/// entries of the same shape as a device's, so they become one more device,
/// [`memlens_api::HOST_DEVICE`]. `host_traces` may be one list of entries or a list of them.
fn lower_host_memory(
    heap: &mut Heap,
    (segments, traces): (Option<Val>, Option<Val>),
    lowering: &mut TraceLowering,
    out: &mut SnapshotColumns,
    walk: &mut Walk,
    frame_keys: &FrameKeys,
) -> PResult<()> {
    let host = memlens_api::HOST_DEVICE;
    if let Some(segs) = segments {
        let segs = list_items(heap, segs, "host_segments")?;
        walk.visit(segs.len())?;
        let (s0, b0) = (out.segments.len(), out.blocks.device.len());
        lower_segments(
            heap,
            &segs,
            lowering,
            (&mut out.segments, &mut out.blocks),
            walk,
            frame_keys,
            None,
        )?;
        out.segments.device[s0..].fill(host);
        out.blocks.device[b0..].fill(host);
    }
    if let Some(V::Obj(l)) = traces.map(|t| heap.get(t)) {
        let o = &heap.objs[l as usize];
        // The entries' rows, either of this list or of the one list inside it that has any.
        let rows = o.rows.or_else(|| {
            let mut inner = o.items.iter().filter_map(|&v| match heap.get(v) {
                V::Obj(i) => heap.objs[i as usize].rows,
                _ => None,
            });
            let first = inner.next();
            first.filter(|_| inner.next().is_none())
        });
        match rows {
            Some(r) => out.device_ranges.push((host, r)),
            None if !o.items.is_empty() => {
                return Err(malformed("`host_traces` holds items that are not trace entries"));
            }
            None => {}
        }
    }
    out.source.notes.push(format!(
        "pinned host memory (host_segments, host_traces) is shown as device {host}, {}",
        memlens_api::device_label(host)
    ));
    Ok(())
}

fn malformed(msg: &str) -> PickleError {
    PickleError::Malformed {
        offset: 0,
        msg: msg.to_owned(),
    }
}

fn list_items(heap: &Heap, v: Val, what: &str) -> PResult<Vec<Val>> {
    match heap.get(v) {
        V::Obj(l) if matches!(heap.kind(l), Kind::List | Kind::Tuple) => Ok(heap.seq(l).to_vec()),
        V::None => Ok(Vec::new()),
        _ => Err(malformed(&format!("`{what}` is not a list"))),
    }
}

fn lower_segments(
    heap: &mut Heap,
    segs: &[Val],
    lowering: &mut TraceLowering,
    (seg_out, blk_out): (&mut SegmentRows, &mut BlockRows),
    walk: &mut Walk,
    frame_keys: &FrameKeys,
    skip_device: Option<i64>,
) -> PResult<()> {
    let mut k = |s: &str| heap.strings.intern(s);
    let keys = [
        k("device"),
        k("address"),
        k("total_size"),
        k("allocated_size"),
        k("active_size"),
        k("requested_size"),
        k("stream"),
        k("segment_type"),
        k("segment_pool_id"),
        k("is_expandable"),
        k("frames"),
        k("blocks"),
        k("size"),
        k("state"),
    ];
    let [k_device, k_address, k_total, k_allocated, k_active, k_requested, k_stream, k_type, k_pool, k_expandable, k_frames, k_blocks, k_size, k_state] =
        keys;
    // PyTorch 1.13/2.0 blocks: `history: [{addr, real_size, frames}]` instead of `frames`.
    let (k_history, k_real_size) = (k("history"), k("real_size"));
    for (si, s) in segs.iter().enumerate() {
        let V::Obj(d) = heap.get(*s) else {
            return Err(malformed(&format!("segments[{si}] is not a dict")));
        };
        let int = |heap: &Heap, key| heap.dict_get(d, key).and_then(|v| heap.int_of(v));
        let address = int(heap, k_address).ok_or_else(|| malformed(&format!("segments[{si}] has no address")))?;
        let total = int(heap, k_total).ok_or_else(|| malformed(&format!("segments[{si}] has no total_size")))?;
        let device = int(heap, k_device).unwrap_or(0);
        if Some(device) == skip_device {
            continue;
        }
        let stream = int(heap, k_stream).unwrap_or(0);
        let expandable = int(heap, k_expandable).is_some_and(|v| v != 0);
        let seg_type = heap
            .dict_get(d, k_type)
            .and_then(|v| heap.str_of(v))
            .unwrap_or("")
            .to_owned();
        let pool = match heap.dict_get(d, k_pool).map(|v| heap.get(v)) {
            Some(V::Obj(t)) => {
                let items = heap.seq(t);
                (
                    items.first().and_then(|v| heap.int_of(*v)).unwrap_or(0),
                    items.get(1).and_then(|v| heap.int_of(*v)).unwrap_or(0),
                )
            }
            _ => (0, 0),
        };
        let stack = match heap.dict_get(d, k_frames) {
            Some(f) => lowering.frames.stack_of(heap, f, frame_keys, 0)?,
            None => lowering.frames.empty_stack(),
        };
        let seg_index = seg_out.len() as u32;
        let blocks = match heap.dict_get(d, k_blocks) {
            Some(b) => list_items(heap, b, "blocks")?,
            None => Vec::new(),
        };
        walk.visit(blocks.len())?;
        let (mut allocated, mut active, mut requested) = (0i64, 0i64, 0i64);
        let mut cursor = address;
        for (bi, b) in blocks.iter().enumerate() {
            let V::Obj(bd) = heap.get(*b) else {
                return Err(malformed(&format!("segments[{si}].blocks[{bi}] is not a dict")));
            };
            let size = int_of_key(heap, bd, k_size)
                .ok_or_else(|| malformed(&format!("segments[{si}].blocks[{bi}] has no size")))?;
            let baddr = int_of_key(heap, bd, k_address).unwrap_or(cursor);
            let state = heap
                .dict_get(bd, k_state)
                .and_then(|v| heap.str_of(v))
                .map(BlockState::from_name)
                .unwrap_or(BlockState::Inactive);
            // The latest history entry (1.13/2.0) of an active block is the allocation holding it.
            let history = if state == BlockState::Inactive {
                None
            } else {
                heap.dict_get(bd, k_history)
            };
            let last_history = match history.map(|h| heap.get(h)) {
                Some(V::Obj(h)) if matches!(heap.kind(h), Kind::List | Kind::Tuple) => {
                    heap.seq(h).last().copied().and_then(|e| match heap.get(e) {
                        V::Obj(ed) if matches!(heap.kind(ed), Kind::Dict) => Some(ed),
                        _ => None,
                    })
                }
                _ => None,
            };
            let req = int_of_key(heap, bd, k_requested)
                .or_else(|| last_history.and_then(|h| int_of_key(heap, h, k_real_size)))
                .unwrap_or(size);
            let frames = heap
                .dict_get(bd, k_frames)
                .or_else(|| last_history.and_then(|h| heap.dict_get(h, k_frames)));
            let bstack = match frames {
                Some(f) => lowering.frames.stack_of(heap, f, frame_keys, 0)?,
                None => lowering.frames.empty_stack(),
            };
            match state {
                BlockState::ActiveAllocated => {
                    allocated += size;
                    active += size;
                    requested += req;
                }
                BlockState::ActivePendingFree => {
                    active += size;
                    requested += req;
                }
                BlockState::Inactive => {}
            }
            cursor = baddr.saturating_add(size);
            blk_out.push(device, seg_index, baddr, size, req, state, bstack);
        }
        let allocated = int(heap, k_allocated).unwrap_or(allocated);
        let active = int(heap, k_active).unwrap_or(active);
        let requested = int(heap, k_requested).unwrap_or(requested);
        seg_out.push(
            device, address, total, allocated, active, requested, stream, seg_type, pool, expandable, stack,
        );
    }
    Ok(())
}

fn int_of_key(heap: &Heap, d: u32, key: u32) -> Option<i64> {
    heap.dict_get(d, key).and_then(|v| heap.int_of(v))
}
