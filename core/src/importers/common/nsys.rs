//! What the two Nsight Systems importers share (`nsys_sqlite`, `nsys_json`): exports of captures
//! made with `nsys profile --trace=cuda --cuda-memory-usage=true`.
//!
//! Nsight sees the CUDA driver's allocations (`cudaMalloc`, `cudaMallocAsync`, …), not the
//! tensors a caching allocator hands out. Both importers read the memory events into [`Row`]s and
//! share [`lower_driver_allocations`]: each device allocation becomes a segment holding one block,
//! so the canonical tables (and every analysis over them) apply unchanged, with reserved =
//! allocated. The stack of an allocation is the runtime call that made it and its size, the only
//! "call site" such traces carry. Pinned-host and managed allocations are counted in a note but
//! not charted as device memory.

use std::collections::HashMap;

use crate::tables::{Action, BlockState, EventNote, SnapshotColumns};

/// One memory event, whatever the export.
pub struct Row {
    pub start_ns: i64,
    pub device: i64,
    pub pid: i64,
    pub address: i64,
    pub bytes: i64,
    /// `ENUM_CUDA_MEM_KIND`.
    pub kind: i64,
    pub free: bool,
    pub stream: i64,
    /// The runtime call, e.g. `cudaMalloc_v3020`.
    pub api: Option<String>,
    pub var_name: Option<String>,
    /// What made the allocation, innermost first (profiled ops); when given, the stack instead
    /// of the runtime call.
    pub ops: Vec<String>,
    /// The category the producer gave the allocation (PyTorch's memory profiler), kept as the
    /// entry's `category` note.
    pub category: Option<String>,
}

/// What the Nsight traces' allocations are (their first source note).
pub const NSYS_NOTE: &str =
    "Nsight Systems trace: CUDA driver allocations (cudaMalloc, cudaMallocAsync, …), not individual tensors; \
     each allocation is its own segment, so reserved equals allocated";

/// `cudaMalloc_v3020` → `cudaMalloc`.
fn api_name(raw: &str) -> &str {
    match raw.rfind("_v") {
        Some(i) if raw[i + 2..].bytes().all(|b| b.is_ascii_digit()) && i + 2 < raw.len() => &raw[..i],
        _ => raw,
    }
}

/// `ENUM_CUDA_MEM_KIND`: 2 Device, 5 Device Static are device memory.
fn is_device_memory(kind: i64) -> bool {
    matches!(kind, 2 | 5)
}

/// Lowers memory events (in time order) into canonical columns; `epoch_ns` is the session's
/// start on the Unix epoch, when the export has it; `what` is the first source note (what the
/// trace's allocations are).
pub fn lower_driver_allocations(rows: Vec<Row>, epoch_ns: Option<i64>, what: &str) -> SnapshotColumns {
    let mut out = SnapshotColumns::default();
    let mut per_device: std::collections::BTreeMap<i64, Vec<Row>> = std::collections::BTreeMap::new();
    let (mut host, mut managed, mut other) = (0usize, 0usize, 0usize);
    for row in rows {
        if !is_device_memory(row.kind) {
            if row.free {
                continue;
            }
            match row.kind {
                1 | 0 => host += 1,
                4 | 6 => managed += 1,
                _ => other += 1,
            }
            continue;
        }
        per_device.entry(row.device).or_default().push(row);
    }
    let mut live_at_end: Vec<(i64, i64, i64, i64, u32)> = Vec::new(); // device, addr, size, stream, stack
    let mut unmatched_frees = 0usize;
    for (device, rows) in per_device {
        let first = out.trace.len() as u32;
        let mut live: HashMap<(i64, i64), (i64, u32, i64)> = HashMap::new();
        for r in rows {
            let time_us = (epoch_ns.unwrap_or(0).saturating_add(r.start_ns)).div_euclid(1000);
            if r.free {
                let (size, stack) = match live.remove(&(r.pid, r.address)) {
                    Some((size, stack, _)) => (size, stack),
                    None => {
                        unmatched_frees += 1;
                        (r.bytes, out.frames.empty_stack())
                    }
                };
                for action in [Action::FreeRequested, Action::FreeCompleted, Action::SegmentFree] {
                    out.trace.push(action, r.address, size, r.stream, time_us, stack);
                }
            } else {
                let mut frames: Vec<u32> = if r.ops.is_empty() {
                    let api = r.api.as_deref().map_or("allocation", api_name).to_owned();
                    vec![out.frames.intern_frame(&api, "[cuda]", 0)]
                } else {
                    r.ops.iter().map(|o| out.frames.intern_frame(o, "[op]", 0)).collect()
                };
                frames.push(out.frames.intern_frame(&memlens_api::bytes_label(r.bytes), "[size]", 0));
                if let Some(v) = r.var_name.as_deref().filter(|v| !v.is_empty()) {
                    frames.insert(0, out.frames.intern_frame(v, "[variable]", 0));
                }
                let stack = out.frames.intern_stack(&frames);
                out.trace
                    .push(Action::SegmentAlloc, r.address, r.bytes, r.stream, time_us, stack);
                if let Some(category) = r.category {
                    out.trace.notes.push(EventNote {
                        row: out.trace.len() as u32,
                        category: Some(category),
                        ..EventNote::default()
                    });
                }
                out.trace
                    .push(Action::Alloc, r.address, r.bytes, r.stream, time_us, stack);
                live.insert((r.pid, r.address), (r.bytes, stack, r.stream));
            }
        }
        out.device_ranges.push((device, (first, out.trace.len() as u32)));
        let mut rest: Vec<_> = live.into_iter().collect();
        rest.sort_by_key(|((_, addr), _)| *addr);
        for ((_, addr), (size, stack, stream)) in rest {
            live_at_end.push((device, addr, size, stream, stack));
        }
    }
    for (device, addr, size, stream, stack) in live_at_end {
        let seg = out.segments.len() as u32;
        out.segments.push(
            device,
            addr,
            size,
            size,
            size,
            size,
            stream,
            "driver".into(),
            (0, 0),
            false,
            stack,
        );
        out.blocks
            .push(device, seg, addr, size, size, BlockState::ActiveAllocated, stack);
    }
    let mut notes = vec![what.to_owned()];
    if epoch_ns.is_none() {
        notes.push("no session start time in the export: times are µs since the capture began".into());
    }
    if host + managed + other > 0 {
        notes.push(format!(
            "not counted as device memory: {host} pinned/pageable host, {managed} managed, {other} other allocations"
        ));
    }
    if unmatched_frees > 0 {
        notes.push(format!(
            "{unmatched_frees} frees of allocations made before the capture began"
        ));
    }
    out.source.has_time_us = true;
    out.source.notes = notes;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_api_names_lose_their_version_suffix() {
        assert_eq!(api_name("cudaMalloc_v3020"), "cudaMalloc");
        assert_eq!(api_name("cudaMallocAsync_v11020"), "cudaMallocAsync");
        assert_eq!(api_name("cudaMalloc"), "cudaMalloc");
        assert_eq!(api_name("odd_v"), "odd_v");
    }
}
