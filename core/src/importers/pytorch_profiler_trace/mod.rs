//! PyTorch profiler Chrome traces (`torch.profiler.profile(profile_memory=True)` then
//! `export_chrome_trace`): recognised by their `traceEvents` (or Kineto's `schemaVersion` +
//! `deviceProperties`) keys. Each CUDA `[memory]` instant event (`Device Type` 1) is one
//! allocation (`Bytes` > 0) or free (`Bytes` < 0) of the caching allocator's block at `Addr`;
//! the allocator's own `Total Allocated` after it is the check. Lowered like the Nsight traces
//! (each allocation its own segment, [`crate::importers::common::nsys`]), with the profiled op
//! that made the allocation — the innermost `cpu_op` range of the same thread around the event,
//! and the ones around it — as its stack. Memory allocated before profiling began is counted
//! from the first event's `Total Allocated`, so the peak is the trace's largest `Total
//! Allocated`. A trace without CUDA memory events is kept aside, saying why.

use serde::Deserialize;

use crate::error::ImportError;
use crate::importers::common::nsys::{lower_driver_allocations, Row};
use crate::importers::{ImportOptions, Parsed, Importer};
use crate::source::{leading_text, Source};

pub struct ProfilerTraceImporter;

pub static IMPORTER: ProfilerTraceImporter = ProfilerTraceImporter;

/// Enclosing ops kept as an allocation's stack, innermost first.
const MAX_OPS: usize = 8;
/// Ops that only make the empty tensor another op asked for: the asking op names the
/// allocation better.
const FACTORY_OPS: &[&str] = &[
    "aten::empty",
    "aten::empty_strided",
    "aten::empty_like",
    "aten::new_empty",
    "aten::new_empty_strided",
    "aten::resize_",
];

#[derive(Deserialize)]
struct Trace {
    #[serde(rename = "traceEvents", default)]
    events: Vec<Event>,
    #[serde(rename = "baseTimeNanoseconds")]
    base_ns: Option<i64>,
}

#[derive(Deserialize)]
struct Event {
    #[serde(default)]
    name: String,
    #[serde(default)]
    ph: String,
    #[serde(default)]
    cat: Option<String>,
    #[serde(default)]
    ts: f64,
    #[serde(default)]
    dur: Option<f64>,
    #[serde(default)]
    tid: serde_json::Value,
    #[serde(default)]
    args: Option<serde_json::Map<String, serde_json::Value>>,
}

fn arg_i64(args: &serde_json::Map<String, serde_json::Value>, key: &str) -> Option<i64> {
    let v = args.get(key)?;
    v.as_i64().or_else(|| v.as_u64().map(|u| u as i64)).or_else(|| v.as_f64().map(|f| f as i64))
}

/// One CUDA memory event with what was around it.
struct Mem {
    ts: f64,
    tid: String,
    device: i64,
    addr: i64,
    bytes: i64,
    total_allocated: i64,
    total_reserved: i64,
    ops: Vec<String>,
}

/// For each memory event, the `cpu_op` ranges of its thread open at its time, innermost first:
/// per thread, ops (by start, longer first) and memory events (by time) swept together with a
/// stack of the ranges still open.
fn enclosing_ops(events: &[Event], mem: &mut [Mem]) {
    let mut by_thread: std::collections::HashMap<String, Vec<(f64, f64, &str)>> = std::collections::HashMap::new();
    for e in events.iter().filter(|e| e.ph == "X" && e.cat.as_deref() == Some("cpu_op")) {
        by_thread
            .entry(thread_of(&e.tid))
            .or_default()
            .push((e.ts, e.ts + e.dur.unwrap_or(0.0), e.name.as_str()));
    }
    for ops in by_thread.values_mut() {
        ops.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
    }
    let mut order: Vec<usize> = (0..mem.len()).collect();
    order.sort_by(|&a, &b| mem[a].tid.cmp(&mem[b].tid).then(mem[a].ts.total_cmp(&mem[b].ts)));
    let mut i = 0;
    while i < order.len() {
        let tid = mem[order[i]].tid.clone();
        let ops = by_thread.get(&tid).map(Vec::as_slice).unwrap_or(&[]);
        let (mut next, mut open): (usize, Vec<(f64, &str)>) = (0, Vec::new());
        while i < order.len() && mem[order[i]].tid == tid {
            let t = mem[order[i]].ts;
            while next < ops.len() && ops[next].0 <= t {
                let (start, end, name) = ops[next];
                open.retain(|&(e, _)| e >= start);
                open.push((end, name));
                next += 1;
            }
            open.retain(|&(e, _)| e >= t);
            let mut names: Vec<&str> = open.iter().rev().map(|&(_, n)| n).collect();
            while names.len() > 1 && FACTORY_OPS.contains(&names[0]) {
                names.remove(0);
            }
            mem[order[i]].ops = names.into_iter().take(MAX_OPS).map(str::to_owned).collect();
            i += 1;
        }
    }
}

/// A thread id as text, whether the trace wrote it as a number or a string.
fn thread_of(tid: &serde_json::Value) -> String {
    match tid {
        serde_json::Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

impl Importer for ProfilerTraceImporter {
    fn sniff(&self, head: &[u8]) -> bool {
        let t = leading_text(head);
        (t.starts_with('{') || t.starts_with('['))
            && (t.contains("\"traceEvents\"") || t.contains("\"schemaVersion\"") && t.contains("\"deviceProperties\""))
    }

    fn import(&self, source: Source, _options: &ImportOptions) -> Result<Parsed, ImportError> {
        let trace: Trace = serde_json::from_reader(std::io::BufReader::new(source.reader))
            .map_err(|e| ImportError::Log(format!("profiler trace: {e}")))?;
        let mut host_events = 0usize;
        let mut mem: Vec<Mem> = Vec::new();
        for e in trace.events.iter().filter(|e| e.name == "[memory]") {
            let Some(args) = &e.args else { continue };
            if arg_i64(args, "Device Type") != Some(1) {
                host_events += 1;
                continue;
            }
            let (Some(addr), Some(bytes)) = (arg_i64(args, "Addr"), arg_i64(args, "Bytes")) else {
                continue;
            };
            mem.push(Mem {
                ts: e.ts,
                tid: thread_of(&e.tid),
                device: arg_i64(args, "Device Id").unwrap_or(0),
                addr,
                bytes,
                total_allocated: arg_i64(args, "Total Allocated").unwrap_or(0),
                total_reserved: arg_i64(args, "Total Reserved").unwrap_or(0),
                ops: Vec::new(),
            });
        }
        if mem.is_empty() {
            return Err(ImportError::KeptAside(
                "a PyTorch profiler trace without CUDA memory events (profile with profile_memory=True to see memory)"
                    .into(),
            ));
        }
        enclosing_ops(&trace.events, &mut mem);
        mem.sort_by(|a, b| a.ts.total_cmp(&b.ts));
        let max_reserved = mem.iter().map(|m| m.total_reserved).max().unwrap_or(0);
        // What the allocator held before the first event of each device, and what of it the
        // trace frees.
        let mut before: std::collections::BTreeMap<i64, i64> = std::collections::BTreeMap::new();
        let mut rows = Vec::with_capacity(mem.len() + 4);
        let mut seen: std::collections::HashSet<(i64, i64)> = std::collections::HashSet::new();
        for m in &mem {
            before.entry(m.device).or_insert(m.total_allocated - m.bytes);
            let free = m.bytes < 0;
            if free && !seen.contains(&(m.device, m.addr)) {
                *before.entry(m.device).or_default() -= -m.bytes;
            }
            if free {
                seen.remove(&(m.device, m.addr));
            } else {
                seen.insert((m.device, m.addr));
            }
            rows.push(Row {
                start_ns: (m.ts * 1000.0) as i64,
                device: m.device,
                pid: 0,
                address: m.addr,
                bytes: m.bytes.abs(),
                kind: 2,
                free,
                stream: 0,
                api: None,
                var_name: None,
                ops: m.ops.clone(),
                category: None,
            });
        }
        let first_ns = rows.first().map_or(0, |r| r.start_ns);
        // Allocations older than the trace and never freed in it: one block, made just before.
        let mut pre: Vec<Row> = Vec::new();
        for (&device, &bytes) in before.iter().filter(|(_, &b)| b > 0) {
            pre.push(Row {
                start_ns: first_ns,
                device,
                pid: 0,
                address: -1 - device,
                bytes,
                kind: 2,
                free: false,
                stream: 0,
                api: None,
                var_name: None,
                ops: vec!["allocated before profiling began".to_owned()],
                category: None,
            });
        }
        let pre_note = (!pre.is_empty()).then(|| {
            "memory allocated before profiling began (from the first event's Total Allocated) is one block at its start"
                .to_owned()
        });
        pre.extend(rows);
        let mut columns = lower_driver_allocations(
            pre,
            trace.base_ns,
            "PyTorch profiler trace: the caching allocator's blocks ([memory] events), each its own segment, \
             named by the profiled op that allocated it; allocated is the blocks' bytes (Total Allocated)",
        );
        columns.source.notes.push(format!(
            "the profiler's Total Reserved peaks at {}; the timeline's reserved follows the blocks",
            memlens_api::bytes_label(max_reserved)
        ));
        columns.source.notes.extend(pre_note);
        if host_events > 0 {
            columns
                .source
                .notes
                .push(format!("{host_events} CPU memory events not counted as device memory"));
        }
        columns.format = memlens_api::Format::PytorchProfilerTrace;
        Ok(Parsed::Snapshot(Box::new(columns)))
    }
}
