//! Out-of-memory messages, alone or in a whole training log: every shape PyTorch has printed
//! (`c10/cuda/CUDACachingAllocator.cpp`, `c10/core/CachingDeviceAllocator.h` across versions).
//!
//! - 1.x–2.0: `CUDA out of memory. Tried to allocate R (GPU d; T total capacity; A already
//!   allocated; F free; [L allowed; ]V reserved in total by PyTorch)` (2018's ends `C cached)`);
//! - 2.1+: `… Tried to allocate R. GPU d has a total capac[i]ty of T of which F is free.
//!   [Process N has S memory in use. …][Including non-PyTorch memory, this process has S memory
//!   in use. ][L allowed; ]Of the allocated memory A is allocated by PyTorch, [with G allocated
//!   in private pools (e.g., CUDA Graphs), ]and U is reserved by PyTorch but unallocated.` with
//!   its `PYTORCH_CUDA_ALLOC_CONF` / `PYTORCH_ALLOC_CONF` / `PYTORCH_HIP_ALLOC_CONF` hint;
//! - ROCm's `HIP out of memory`, Intel's `XPU out of memory`, `Tried to allocate more than 1EB
//!   memory`, MPS's `MPS backend out of memory (MPS allocated: A, other allocations: O, max
//!   allowed: M). Tried to allocate R on private pool`, and cudaMallocAsync's multi-line
//!   `Allocation on device d would exceed allowed memory. (out of memory)` table;
//! - behind `RuntimeError:`, `torch.cuda.OutOfMemoryError:`, `torch.OutOfMemoryError:` or
//!   IPython's `OutOfMemoryError:`, with or without torchrun's `[rankN]:` before each line.
//!
//! Each clause is read on its own, so a message cut anywhere gives what it holds and names what
//! it lacks (`missing`). Whitespace is folded first (trackers and wrapped logs break the two
//! spaces PyTorch prints), and a message wrapped over lines is joined. The traceback above a
//! message is kept (its frames tell the phase: `torch/optim/` is the optimizer step). The same
//! message printed again (torchrun's error summary repeats it) counts once, with how often.
//!
//! The importer claims any text no other format does (it is last in the table); a text with no
//! OOM message, no memory summary and no nvidia-smi screen is refused with what it looked for.

use std::sync::LazyLock;

use memlens_api::{OomBackend, ProcessMemory};
use regex::Regex;

use crate::error::ImportError;
use crate::evidence::OomMessage;
use crate::importers::common::sizes::{scaled, unit_bytes};
use crate::importers::common::text_lines::TextLine;
use crate::importers::read_evidence;
use crate::importers::{ImportOptions, Importer, Parsed};
use crate::source::Source;

pub mod xla;

pub struct OomMessageImporter;

pub static IMPORTER: OomMessageImporter = OomMessageImporter;

impl Importer for OomMessageImporter {
    /// Any text no other format claimed: no NUL byte, valid UTF-8 (a cut last character aside),
    /// and not JSON unless it holds an OOM message.
    fn sniff(&self, head: &[u8]) -> bool {
        crate::importers::common::text_lines::is_text(head)
            && (!crate::importers::common::text_lines::looks_like_json(head)
                || String::from_utf8_lossy(head).contains("out of memory"))
    }

    fn import(&self, source: Source, _options: &ImportOptions) -> Result<Parsed, ImportError> {
        Ok(Parsed::Text(Box::new(read_evidence(source)?)))
    }
}

/// A size as PyTorch prints it.
const SIZE: &str = r"(\d+(?:\.\d+)?) ?(bytes|[KMGTPE]i?B|B)\b";

fn re(pattern: &str) -> Regex {
    // The patterns are constants of this file, checked by its tests.
    Regex::new(&pattern.replace("SIZE", SIZE)).unwrap_or_else(|e| panic!("bad pattern {pattern}: {e}"))
}

/// Where a message begins on a line: the start of its exception name, or of the message.
static ANCHOR: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?:(?P<exc>[A-Za-z_][\w.]*(?:Error|Exception)): )?(?P<msg>(?P<backend>CUDA|HIP|XPU) out of memory\. Tried to allocate|MPS backend out of memory|Allocation on device \d+ would exceed allowed memory)",
    )
});
static RANK: LazyLock<Regex> = LazyLock::new(|| re(r"^\s*\[rank(\d+)\]:\s?"));
static FRAME: LazyLock<Regex> = LazyLock::new(|| re(r#"^\s*File "([^"]+)", line (\d+), in (\S+)"#));
static MAX_NEW_TOKENS: LazyLock<Regex> = LazyLock::new(|| re(r"\bmax_new_tokens\s*=\s*(\d+)\b"));
static MAX_LENGTH: LazyLock<Regex> = LazyLock::new(|| re(r"\bmax_length\s*=\s*(\d+)\b"));

/// Generation's lengths a traceback's source lines set, per rank.
type Lengths = Vec<(Option<u32>, (Option<i64>, Option<i64>))>;

/// Reads `max_new_tokens=N` / `max_length=N` on a traceback's source line (not a frame line).
fn note_lengths(lengths: &mut Lengths, rank: Option<u32>, body: &str) {
    let number = |r: &Regex| r.captures(body).and_then(|c| c[1].parse::<i64>().ok());
    let (new, max) = (number(&MAX_NEW_TOKENS), number(&MAX_LENGTH));
    if new.is_none() && max.is_none() {
        return;
    }
    match lengths.iter_mut().find(|l| l.0 == rank) {
        Some(l) => l.1 = (new.or(l.1 .0), max.or(l.1 .1)),
        None => lengths.push((rank, (new, max))),
    }
}

/// Reads every OOM message of the lines, in order; the same text again (same rank) is counted
/// on the first.
pub fn find_oom_messages(lines: &[TextLine]) -> Vec<OomMessage> {
    let mut out: Vec<(Option<u32>, String, OomMessage)> = Vec::new();
    // The traceback being printed, per rank: frames since its `Traceback (most recent call
    // last):` line.
    let mut tracebacks: Vec<(Option<u32>, Vec<String>)> = Vec::new();
    let mut lengths: Lengths = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let (rank, body) = strip_rank(&lines[i].text);
        if body.trim_start().starts_with("Traceback (most recent call last)") {
            set_traceback(&mut tracebacks, rank, Vec::new());
            lengths.retain(|l| l.0 != rank);
        } else if let Some(c) = FRAME.captures(body) {
            let frame = format!("{}:{}:{}", &c[1], &c[2], &c[3]);
            match tracebacks.iter_mut().find(|t| t.0 == rank) {
                Some(t) => t.1.push(frame),
                None => tracebacks.push((rank, vec![frame])),
            }
        } else if tracebacks.iter().any(|t| t.0 == rank && !t.1.is_empty()) {
            note_lengths(&mut lengths, rank, body);
        }
        let Some(anchor) = ANCHOR.captures(body) else {
            i += 1;
            continue;
        };
        let start = anchor.get(0).map_or(0, |m| m.start());
        let exception = anchor.name("exc").map(|m| m.as_str().to_owned());
        let msg_start = anchor.name("msg").map_or(start, |m| m.start());
        let mut text = body[msg_start..].to_owned();
        let mut j = i + 1;
        while !is_complete(&text) && j < lines.len() && j < i + 12 {
            let (r, next) = strip_rank(&lines[j].text);
            if r != rank || !is_continuation(next) {
                break;
            }
            text.push(' ');
            text.push_str(next.trim());
            j += 1;
        }
        let text = fold_spaces(&text);
        let traceback = take_traceback(&mut tracebacks, rank);
        let (max_new_tokens, max_length) = lengths
            .iter()
            .position(|l| l.0 == rank)
            .map_or((None, None), |k| lengths.remove(k).1);
        match out.iter_mut().find(|(r, t, _)| *r == rank && *t == text) {
            Some((_, _, m)) => {
                m.occurrences += 1;
                if m.traceback.is_empty() {
                    m.traceback = traceback;
                }
            }
            None => {
                let mut m = parse_message(&text);
                m.line = lines[i].number;
                m.rank = rank;
                m.exception = exception;
                m.traceback = traceback;
                m.occurrences = 1;
                m.max_new_tokens = max_new_tokens;
                m.max_length = max_length;
                out.push((rank, text, m));
            }
        }
        i = j;
    }
    out.into_iter().map(|(_, _, m)| m).collect()
}

fn set_traceback(t: &mut Vec<(Option<u32>, Vec<String>)>, rank: Option<u32>, frames: Vec<String>) {
    match t.iter_mut().find(|x| x.0 == rank) {
        Some(x) => x.1 = frames,
        None => t.push((rank, frames)),
    }
}

fn take_traceback(t: &mut [(Option<u32>, Vec<String>)], rank: Option<u32>) -> Vec<String> {
    t.iter_mut()
        .find(|x| x.0 == rank)
        .map(|x| std::mem::take(&mut x.1))
        .unwrap_or_default()
}

/// The `[rankN]:` prefix torchrun puts before each line, and the rest.
pub fn strip_rank(line: &str) -> (Option<u32>, &str) {
    match RANK.captures(line) {
        Some(c) => (c[1].parse().ok(), &line[c.get(0).map_or(0, |m| m.end())..]),
        None => (None, line),
    }
}

/// Whether a message has reached its last clause (its hint, or the end of an older shape).
fn is_complete(text: &str) -> bool {
    [
        "ALLOC_CONF",
        "HIGH_WATERMARK_RATIO",
        "empty_cache",
        "1EB memory",
        "cuda.html",
        "hip.html",
    ]
    .iter()
    .any(|k| text.contains(k))
        || (text.contains("reserved in total by PyTorch)") && !text.contains("max_split_size_mb"))
        || text.contains(" cached)")
}

/// Whether the next line goes on with a wrapped message rather than starting a new record.
fn is_continuation(line: &str) -> bool {
    let t = line.trim();
    !t.is_empty()
        && !t.starts_with("Traceback")
        && !t.starts_with("File \"")
        && !t.starts_with("During handling")
        && !t.starts_with("The above exception")
        && !ANCHOR.is_match(t)
}

fn fold_spaces(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The size right after `pattern`'s match (its one group is the size).
fn size_after(pattern: &Regex, text: &str) -> Option<i64> {
    let c = pattern.captures(text)?;
    scaled(c.get(1)?.as_str(), unit_bytes(c.get(2)?.as_str())?)
}

macro_rules! clause {
    ($name:ident, $pattern:expr) => {
        static $name: LazyLock<Regex> = LazyLock::new(|| re($pattern));
    };
}

clause!(REQUESTED, r"Tried to allocate SIZE");
clause!(EXABYTE, r"Tried to allocate more than 1EB memory");
clause!(GPU_1X, r"\(GPU (\d+);");
clause!(GPU_2X, r"GPU (\d+) has a total capac");
clause!(TOTAL_1X, r"SIZE total capacity");
clause!(TOTAL_2X, r"has a total capac(?:i)?ty of SIZE");
clause!(ALLOCATED_1X, r"SIZE already allocated");
clause!(FREE_1X, r"SIZE free[;)]");
clause!(FREE_2X, r"of which SIZE is free");
clause!(ALLOWED, r"SIZE allowed");
clause!(RESERVED_1X, r"SIZE reserved in total by PyTorch");
clause!(CACHED_2018, r"SIZE cached\)");
clause!(PROCESS, r"Process (\d+) has SIZE memory in use");
clause!(THIS_PROCESS, r"this process has SIZE memory in use");
clause!(ALLOCATED_2X, r"Of the allocated memory SIZE is allocated by PyTorch");
clause!(PRIVATE, r"with SIZE allocated in private pools");
clause!(UNALLOCATED, r"SIZE is reserved by PyTorch but unallocated");
clause!(MPS_ALLOCATED, r"MPS allocated: SIZE");
clause!(MPS_OTHER, r"other allocations: SIZE");
clause!(MPS_MAX, r"max allowed: SIZE");
clause!(ASYNC_DEVICE, r"Allocation on device (\d+) would exceed");
clause!(ASYNC_ALLOCATED, r"Currently allocated ?: SIZE");
clause!(ASYNC_REQUESTED, r"Requested ?: SIZE");
clause!(ASYNC_LIMIT, r"Device limit ?: SIZE");
clause!(ASYNC_FREE, r"Free \(according to CUDA\) ?: SIZE");
clause!(
    ASYNC_CAP,
    r"PyTorch limit \(set by user-supplied memory fraction\) ?: SIZE"
);

/// One message's figures (whitespace already folded).
pub fn parse_message(text: &str) -> OomMessage {
    let mut m = OomMessage::default();
    let number = |r: &Regex| r.captures(text).and_then(|c| c[1].parse::<i64>().ok());
    if text.starts_with("MPS backend") {
        m.backend = OomBackend::Mps;
        m.requested = size_after(&REQUESTED, text);
        m.allocated = size_after(&MPS_ALLOCATED, text);
        m.other_allocations = size_after(&MPS_OTHER, text);
        m.allowed = size_after(&MPS_MAX, text);
        m.missing = missing(&[
            ("requested", m.requested),
            ("mps_allocated", m.allocated),
            ("other_allocations", m.other_allocations),
        ]);
        return m;
    }
    if text.starts_with("Allocation on device") {
        m.backend = OomBackend::CudaMallocAsync;
        m.device = number(&ASYNC_DEVICE);
        m.requested = size_after(&ASYNC_REQUESTED, text);
        m.allocated = size_after(&ASYNC_ALLOCATED, text);
        m.reserved = m.allocated;
        m.device_total = size_after(&ASYNC_LIMIT, text);
        m.device_free = size_after(&ASYNC_FREE, text);
        m.allowed = size_after(&ASYNC_CAP, text);
        m.missing = missing(&[
            ("requested", m.requested),
            ("allocated", m.allocated),
            ("device_total", m.device_total),
            ("device_free", m.device_free),
        ]);
        return m;
    }
    m.backend = match text.get(..3) {
        Some("HIP") => OomBackend::Hip,
        Some("XPU") => OomBackend::Xpu,
        _ => OomBackend::Cuda,
    };
    m.requested = if EXABYTE.is_match(text) {
        Some(1 << 60)
    } else {
        size_after(&REQUESTED, text)
    };
    if EXABYTE.is_match(text) {
        return m;
    }
    m.device = number(&GPU_2X).or_else(|| number(&GPU_1X));
    m.device_total = size_after(&TOTAL_2X, text).or_else(|| size_after(&TOTAL_1X, text));
    m.device_free = size_after(&FREE_2X, text).or_else(|| size_after(&FREE_1X, text));
    m.allowed = size_after(&ALLOWED, text);
    for c in PROCESS.captures_iter(text) {
        if let Some(bytes) = c
            .get(2)
            .zip(c.get(3))
            .and_then(|(n, u)| scaled(n.as_str(), unit_bytes(u.as_str())?))
        {
            m.processes.push(ProcessMemory {
                pid: c[1].parse().ok(),
                bytes,
                this_process: false,
            });
        }
    }
    if let Some(bytes) = size_after(&THIS_PROCESS, text) {
        m.processes.push(ProcessMemory {
            pid: None,
            bytes,
            this_process: true,
        });
    }
    let modern = text.contains("has a total capac") || text.contains("Of the allocated memory");
    if modern {
        // The printed "allocated" counts the private pools' blocks; the unallocated part is
        // the reserve less that (`CachingDeviceAllocator.h`).
        let printed = size_after(&ALLOCATED_2X, text);
        m.private_pool = size_after(&PRIVATE, text);
        m.reserved_unallocated = size_after(&UNALLOCATED, text);
        m.allocated = printed.map(|a| a - m.private_pool.unwrap_or(0));
        m.reserved = printed.zip(m.reserved_unallocated).map(|(a, u)| a + u);
    } else {
        m.allocated = size_after(&ALLOCATED_1X, text);
        m.reserved = size_after(&RESERVED_1X, text).or_else(|| size_after(&CACHED_2018, text));
        m.reserved_unallocated = m.reserved.zip(m.allocated).map(|(r, a)| (r - a).max(0));
    }
    let mut expected = vec![
        ("requested", m.requested),
        ("device", m.device),
        ("device_total", m.device_total),
        ("allocated", m.allocated),
        ("reserved", m.reserved),
    ];
    if m.backend != OomBackend::Xpu {
        expected.push(("device_free", m.device_free));
    }
    m.missing = missing(&expected);
    m
}

fn missing(fields: &[(&str, Option<i64>)]) -> Vec<String> {
    fields
        .iter()
        .filter(|(_, v)| v.is_none())
        .map(|(n, _)| (*n).to_owned())
        .collect()
}

#[cfg(test)]
mod tests;
