//! XLA's out-of-memory text, as JAX users meet it: the error in its wordings —
//! `RESOURCE_EXHAUSTED: Out of memory while trying to allocate N bytes.` (behind jaxlib's
//! `XlaRuntimeError`, jax's `JaxRuntimeError`, an older `RuntimeError`, or XLA's own log line
//! `Execution of replica 0 failed:`), `Out of memory allocating N bytes.`, 2019–2021's
//! `Resource exhausted: …` and `Failed to allocate request for 32.00MiB (33554432B) on device
//! ordinal 0`, a TPU's `Allocation (size=N) would exceed memory (size=M)` — with what XLA
//! printed around it:
//!
//! - before it, the BFC allocator's dump (`xla/tsl/framework/bfc_allocator.cc`, TensorFlow's
//!   before 2023): `Allocator (GPU_0_bfc) ran out of memory trying to allocate 27.93GiB (rounded
//!   to N)`, the chunk table (`Bin (256): Total Chunks: …`), `Sum Total of in-use chunks`, the
//!   pool line (`total_region_allocated_bytes_ … memory_limit_` or `Total size in pool …`), the
//!   `Stats:` block (`Limit`, `InUse`, `MaxInUse`, `NumAllocs`, `MaxAllocSize`,
//!   `LargestFreeBlock`), the memory map (`****____`: in use, free), and the driver's refusal
//!   (`failed to allocate 3.39G (3640655872 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY`);
//! - after it, the buffer assignment's stats (`BufferAssignment OOM Debugging.`: parameter,
//!   constant, maybe_live_out, preallocated temp, total, fragmentation) and its peak buffers.
//!
//! The allocator's `ran out of memory … The caller indicates that this is not a failure` lines
//! are retries, not failures. The same failure printed again (XLA's log line, then the Python
//! exception) counts once. A dump with no message after it is a failure whose request the text
//! does not say.

use std::sync::LazyLock;

use memlens_api::{BfcBin, BufferAssignmentStats, OomBackend, PeakBuffer, XlaOomText, XlaOomWording};
use regex::Regex;

use crate::evidence::OomMessage;
use crate::importers::common::sizes::leading_size;
use crate::importers::common::text_lines::TextLine;

fn re(pattern: &str) -> Regex {
    // The patterns are constants of this file, checked by its tests.
    Regex::new(pattern).unwrap_or_else(|e| panic!("bad pattern {pattern}: {e}"))
}

macro_rules! pattern {
    ($name:ident, $pattern:expr) => {
        static $name: LazyLock<Regex> = LazyLock::new(|| re($pattern));
    };
}

pattern!(
    EXCEPTION,
    r"(?P<exc>(?:[A-Za-z_]\w*\.)*(?:XlaRuntimeError|JaxRuntimeError|RuntimeError|ValueError|ResourceExhaustedError)):\s*$"
);
pattern!(
    OUT_OF_MEMORY,
    r"(?:RESOURCE_EXHAUSTED|Resource exhausted): Out of memory (?:while trying to allocate|allocating) (\d+) bytes"
);
pattern!(
    FAILED_REQUEST,
    r"(?:RESOURCE_EXHAUSTED|Resource exhausted): Failed to allocate request for \S+ \((\d+)B\) on device ordinal (\d+)"
);
pattern!(
    WOULD_EXCEED,
    r"RESOURCE_EXHAUSTED: Allocation \(size=(\d+)\) would exceed memory \(size=(\d+)\)"
);
pattern!(
    BFC_RAN_OUT,
    r"Allocator \((\w+)\) ran out of memory trying to allocate \S+ \(rounded to (\d+)\)"
);
pattern!(
    DRIVER_REFUSED,
    r"failed to allocate \S+ \((\d+) bytes\) from device: CUDA_ERROR_OUT_OF_MEMORY"
);
pattern!(
    BIN,
    r"Bin \((\d+)\):\s+Total Chunks: (\d+), Chunks in use: (\d+)\. (\S+) allocated for chunks\. (\S+) in use in bin\. (\S+) client-requested in use in bin"
);
pattern!(
    STAT,
    r"^\s*(Limit|InUse|MaxInUse|NumAllocs|MaxAllocSize|Reserved|PeakReserved|LargestFreeBlock):\s+(\S+)\s*$"
);
pattern!(IN_USE_CHUNKS, r"Sum Total of in-use chunks: (\S+)");
pattern!(
    POOL,
    r"(?:total_region_allocated_bytes_|Total size in pool): (\S+) memory_limit_: (\S+)"
);
pattern!(MEMORY_MAP, r"bfc_allocator\.cc:\d+\] ([*_]{20,})\s*$");
pattern!(
    ASSIGNMENT,
    r"^\s*(parameter allocation|constant allocation|maybe_live_out allocation|preallocated temp allocation|total allocation|total fragmentation):\s+(\S+)"
);
pattern!(PEAK_SIZE, r"^\s*Size: (\S+)\s*$");
pattern!(
    PEAK_OP,
    r#"^\s*Operator: op_name="([^"]*)"(?: source_file="([^"]*)" source_line=(\d+))?"#
);
pattern!(PEAK_SHAPE, r"^\s*(?:Shape|Entry Parameter Subshape): (\S+)");
pattern!(FRAME, r#"^\s*File "([^"]+)", line (\d+), in (\S+)"#);

/// A printed size (`372.76MiB`, `0B`) or a plain byte count (`11330115994`).
fn bytes(text: &str) -> Option<i64> {
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().ok();
    }
    leading_size(text).map(|(b, _)| b)
}

/// The failure a line states: its wording, the request, the device's memory (TPU) or ordinal,
/// and where the status begins.
struct Failure {
    wording: XlaOomWording,
    requested: Option<i64>,
    device_memory: Option<i64>,
    device: Option<i64>,
    at: usize,
}

fn failure(line: &str) -> Option<Failure> {
    let num = |c: &regex::Captures, i: usize| c.get(i).and_then(|m| m.as_str().parse().ok());
    if let Some(c) = OUT_OF_MEMORY.captures(line) {
        return Some(Failure {
            wording: XlaOomWording::OutOfMemory,
            requested: num(&c, 1),
            device_memory: None,
            device: None,
            at: c.get(0)?.start(),
        });
    }
    if let Some(c) = FAILED_REQUEST.captures(line) {
        return Some(Failure {
            wording: XlaOomWording::FailedToAllocateRequest,
            requested: num(&c, 1),
            device_memory: None,
            device: num(&c, 2),
            at: c.get(0)?.start(),
        });
    }
    let c = WOULD_EXCEED.captures(line)?;
    Some(Failure {
        wording: XlaOomWording::AllocationWouldExceedMemory,
        requested: num(&c, 1),
        device_memory: num(&c, 2),
        device: None,
        at: c.get(0)?.start(),
    })
}

/// What the allocator printed before a failure, gathered until the failure takes it.
#[derive(Default)]
struct Dump {
    xla: Option<XlaOomText>,
    /// The BFC line's request (rounded), when it printed one.
    rounded: Option<i64>,
    line: Option<usize>,
    /// Inside the allocator's `Stats:` block (its `Limit:` … lines follow that line alone).
    in_stats: bool,
}

impl Dump {
    fn facts(&mut self, line: usize) -> &mut XlaOomText {
        self.line.get_or_insert(line);
        self.xla.get_or_insert_with(|| empty(XlaOomWording::BfcRanOutOfMemory))
    }
    fn is_empty(&self) -> bool {
        self.xla.is_none()
    }
}

fn empty(wording: XlaOomWording) -> XlaOomText {
    XlaOomText {
        wording,
        allocator: None,
        limit_bytes: None,
        in_use_bytes: None,
        max_in_use_bytes: None,
        largest_free_block_bytes: None,
        num_allocs: None,
        max_alloc_size_bytes: None,
        pool_bytes: None,
        memory_map_in_use: None,
        bins: Vec::new(),
        buffer_assignment: None,
        driver_refused_bytes: None,
        device_memory_bytes: None,
    }
}

/// Reads a dump line into `dump`; whether it was one.
fn read_dump_line(text: &str, number: usize, dump: &mut Dump) -> bool {
    let read = read_dump_facts(text, number, dump);
    if !STAT.is_match(text) && !text.trim_end().ends_with("Stats:") {
        dump.in_stats = false;
    }
    read
}

/// [`read_dump_line`]'s reading, line by line.
fn read_dump_facts(text: &str, number: usize, dump: &mut Dump) -> bool {
    if let Some(c) = BFC_RAN_OUT.captures(text) {
        if text.contains("not a failure") {
            return true;
        }
        let allocator = c[1].to_owned();
        dump.rounded = c[2].parse().ok();
        dump.facts(number).allocator = Some(allocator);
    } else if text.contains("not a failure") && text.contains("ran out of memory") {
    } else if let Some(c) = DRIVER_REFUSED.captures(text) {
        dump.facts(number).driver_refused_bytes = c[1].parse().ok();
    } else if let Some(c) = BIN.captures(text) {
        let n = |i: usize| bytes(&c[i]);
        let bin = (|| {
            Some(BfcBin {
                bin_bytes: c[1].parse().ok()?,
                total_chunks: c[2].parse().ok()?,
                chunks_in_use: c[3].parse().ok()?,
                allocated_bytes: n(4)?,
                in_use_bytes: n(5)?,
                client_requested_bytes: n(6)?,
            })
        })();
        dump.facts(number).bins.extend(bin);
    } else if text.contains("bfc_allocator") && text.trim_end().ends_with("Stats:") {
        dump.in_stats = true;
        return true;
    } else if let Some(c) = STAT.captures(text).filter(|_| dump.in_stats) {
        let v = bytes(&c[2]);
        let f = dump.facts(number);
        match &c[1] {
            "Limit" => f.limit_bytes = v,
            "InUse" => f.in_use_bytes = v,
            "MaxInUse" => f.max_in_use_bytes = v,
            "NumAllocs" => f.num_allocs = v,
            "MaxAllocSize" => f.max_alloc_size_bytes = v,
            "LargestFreeBlock" => f.largest_free_block_bytes = v,
            // Reserved and PeakReserved: memory the allocator set aside for others; not read.
            _ => {}
        }
    } else if let Some(c) = IN_USE_CHUNKS.captures(text) {
        let f = dump.facts(number);
        f.in_use_bytes = f.in_use_bytes.or(bytes(&c[1]));
    } else if let Some(c) = POOL.captures(text) {
        let f = dump.facts(number);
        f.pool_bytes = bytes(&c[1]);
        f.limit_bytes = f.limit_bytes.or(bytes(&c[2]));
    } else if let Some(c) = MEMORY_MAP.captures(text) {
        let marks = &c[1];
        let used = marks.bytes().filter(|&b| b == b'*').count();
        dump.facts(number).memory_map_in_use = Some(used as f64 / marks.len() as f64);
    } else {
        return false;
    }
    true
}

/// Reads the buffer assignment's lines after a failure into `stats`; whether it was one.
fn read_assignment_line(text: &str, stats: &mut BufferAssignmentStats) -> bool {
    if let Some(c) = ASSIGNMENT.captures(text) {
        let v = bytes(&c[2]);
        match &c[1] {
            "parameter allocation" => stats.parameter_bytes = v,
            "constant allocation" => stats.constant_bytes = v,
            "maybe_live_out allocation" => stats.maybe_live_out_bytes = v,
            "preallocated temp allocation" => stats.preallocated_temp_bytes = v,
            "total allocation" => stats.total_bytes = v,
            _ => stats.total_fragmentation_bytes = v,
        }
    } else if let Some(c) = PEAK_SIZE.captures(text) {
        stats.peak_buffers.extend(bytes(&c[1]).map(|bytes| PeakBuffer {
            bytes,
            shape: None,
            op: None,
            source: None,
        }));
    } else if let Some(c) = PEAK_OP.captures(text) {
        if let Some(b) = stats.peak_buffers.last_mut() {
            b.op = Some(c[1].to_owned());
            b.source = c
                .get(2)
                .zip(c.get(3))
                .map(|(f, l)| format!("{}:{}", f.as_str(), l.as_str()));
        }
    } else if let Some(c) = PEAK_SHAPE.captures(text) {
        if let Some(b) = stats.peak_buffers.last_mut() {
            b.shape = Some(c[1].to_owned());
            if text.contains("Entry Parameter") {
                b.op.get_or_insert_with(|| "entry parameter".to_owned());
            }
        }
    } else {
        let t = text.trim();
        return t.is_empty()
            || t.starts_with("BufferAssignment")
            || t.starts_with("Peak buffers")
            || t.starts_with("Buffer ")
            || t.starts_with("XLA Label")
            || t.starts_with("preallocated temp fragmentation")
            || t.starts_with("====");
    }
    true
}

/// The exception's name: on the failure's line before it, or alone on the line above
/// (IPython prints `RuntimeError   Traceback (most recent call last)` far above; the one at
/// the message is what counts).
fn exception_of(text: &str, at: usize) -> Option<String> {
    let before = text[..at].trim_end();
    let before = before.trim_start_matches(|c: char| c == '`' || c.is_whitespace());
    EXCEPTION
        .captures(before)
        .and_then(|c| c.name("exc"))
        .map(|m| m.as_str().to_owned())
}

/// A failure read, with the facts gathered for it.
fn message(f: &Failure, number: usize, exception: Option<String>, dump: Dump, traceback: Vec<String>) -> OomMessage {
    let mut xla = dump.xla.unwrap_or_else(|| empty(f.wording));
    xla.wording = f.wording;
    xla.device_memory_bytes = f.device_memory;
    OomMessage {
        line: number,
        exception,
        backend: OomBackend::Xla,
        device: f.device,
        requested: f.requested.or(dump.rounded),
        device_total: f.device_memory,
        allowed: xla.limit_bytes,
        allocated: xla.in_use_bytes,
        traceback,
        occurrences: 1,
        xla: Some(xla),
        ..OomMessage::default()
    }
}

/// Every XLA out-of-memory failure in the lines, in order, each with what XLA printed around it.
pub fn find_xla_ooms(lines: &[TextLine]) -> Vec<OomMessage> {
    let mut out: Vec<OomMessage> = Vec::new();
    let mut dump = Dump::default();
    let mut frames: Vec<String> = Vec::new();
    // Whether the lines after the last failure are still its buffer assignment.
    let mut in_assignment = false;
    let mut i = 0;
    while i < lines.len() {
        let mut text = lines[i].text.clone();
        let number = lines[i].number;
        // A log wrapped inside the status (`Resource exhausted: Out \nof memory …`).
        if failure(&text).is_none() && (text.contains("Resource exhausted: ") || text.contains("RESOURCE_EXHAUSTED: "))
        {
            if let Some(next) = lines.get(i + 1) {
                let joined = format!("{} {}", text.trim_end(), next.text.trim());
                if failure(&joined).is_some() {
                    text = joined;
                    i += 1;
                }
            }
        }
        if in_assignment {
            let last = out.last_mut().and_then(|m| m.xla.as_mut());
            if let Some(xla) = last {
                let stats = xla.buffer_assignment.get_or_insert_with(BufferAssignmentStats::default);
                if read_assignment_line(&text, stats) {
                    i += 1;
                    continue;
                }
                if *stats == BufferAssignmentStats::default() {
                    xla.buffer_assignment = None;
                }
            }
            in_assignment = false;
        }
        if text.trim_start().starts_with("Traceback (most recent call last)") {
            frames.clear();
        } else if let Some(c) = FRAME.captures(&text) {
            frames.push(format!("{}:{}:{}", &c[1], &c[2], &c[3]));
        } else if let Some(f) = failure(&text) {
            let exception = exception_of(&text, f.at);
            match out.last_mut().filter(|m| m.requested == f.requested && dump.is_empty()) {
                // The same failure again: XLA's log line, then the exception (or a repeat).
                Some(m) => {
                    m.occurrences += 1;
                    m.exception = m.exception.take().or(exception);
                    if m.traceback.is_empty() {
                        m.traceback = std::mem::take(&mut frames);
                    }
                }
                None => {
                    let taken = std::mem::take(&mut dump);
                    let line = taken.line.unwrap_or(number).min(number);
                    out.push(message(&f, line, exception, taken, std::mem::take(&mut frames)));
                }
            }
            in_assignment = true;
        } else {
            read_dump_line(&text, number, &mut dump);
        }
        i += 1;
    }
    for xla in out.iter_mut().filter_map(|m| m.xla.as_mut()) {
        if xla
            .buffer_assignment
            .as_ref()
            .is_some_and(|b| *b == BufferAssignmentStats::default())
        {
            xla.buffer_assignment = None;
        }
    }
    if !dump.is_empty() {
        // A dump after the last failure (printed late), or one with no failure in the text.
        match out.last_mut().and_then(|m| m.xla.as_mut()) {
            Some(xla) if dump.rounded.is_none() => merge(xla, dump.xla.take().expect("not empty")),
            _ => {
                let f = Failure {
                    wording: XlaOomWording::BfcRanOutOfMemory,
                    requested: dump.rounded,
                    device_memory: None,
                    device: None,
                    at: 0,
                };
                let line = dump.line.unwrap_or(1);
                let mut m = message(&f, line, None, dump, Vec::new());
                if m.requested.is_none() {
                    m.missing.push("requested".to_owned());
                }
                out.push(m);
            }
        }
    }
    out
}

/// What a late dump adds to a failure's facts (each figure the failure's own text lacked).
fn merge(into: &mut XlaOomText, from: XlaOomText) {
    into.allocator = into.allocator.take().or(from.allocator);
    into.limit_bytes = into.limit_bytes.or(from.limit_bytes);
    into.in_use_bytes = into.in_use_bytes.or(from.in_use_bytes);
    into.max_in_use_bytes = into.max_in_use_bytes.or(from.max_in_use_bytes);
    into.largest_free_block_bytes = into.largest_free_block_bytes.or(from.largest_free_block_bytes);
    into.num_allocs = into.num_allocs.or(from.num_allocs);
    into.max_alloc_size_bytes = into.max_alloc_size_bytes.or(from.max_alloc_size_bytes);
    into.pool_bytes = into.pool_bytes.or(from.pool_bytes);
    into.memory_map_in_use = into.memory_map_in_use.or(from.memory_map_in_use);
    if into.bins.is_empty() {
        into.bins = from.bins;
    }
    into.driver_refused_bytes = into.driver_refused_bytes.or(from.driver_refused_bytes);
}
