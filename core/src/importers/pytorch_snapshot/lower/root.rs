//! [`lower_root`]: the small rest of the snapshot (segments, blocks, settings, annotations,
//! host memory) walked by schema once decoding is done, the trace's rows already made.

use super::super::pickle::{Heap, Kind, PResult, PickleError, Val, V};
use super::{FrameKeys, TraceLowering};
use crate::tables::{BlockRows, BlockState, SegmentRows, SnapshotColumns, NO_TIME};

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
    let profiler_derived = lowering.notes.iter().any(|n| n.category.is_some());
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
    out.trace = lowering.take_trace();
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
