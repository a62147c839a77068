//! `nsys export --type json`: JSON lines. Records are told apart by their keys, not their
//! position (the documented order and nsys 2022.4's differ): a string table `{"data": [..]}` (or,
//! with `--separate-strings`, `{"type": "String", "id", "value"}` lines), `TraceProcessEvent`s
//! carrying runtime calls (`correlationId`, `name` = string index) and `CudaMemoryUsageEvent`s.
//! 64-bit integers come as JSON strings. The export has no session start on the epoch, so times
//! are µs since the capture began.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::importers::common::nsys::{lower_driver_allocations, Row, NSYS_NOTE};
use crate::error::ImportError;
use crate::importers::common::line_problem::LineProblem;
use crate::importers::common::lines::{line_error, LineReader};
use crate::importers::{ImportOptions, Parsed, Importer};
use memlens_api::Format;
use crate::source::{leading_text, Source};

pub struct NsysJsonImporter;

pub static IMPORTER: NsysJsonImporter = NsysJsonImporter;

impl Importer for NsysJsonImporter {
    /// One JSON object per line with Nsight's `Type` or `data` keys (the profiler trace and
    /// pynvml lines come earlier in the table).
    fn sniff(&self, head: &[u8]) -> bool {
        let t = leading_text(head);
        t.starts_with('{') && (t.contains("\"Type\"") || t.contains("\"data\""))
    }

    fn import(&self, source: Source, _options: &ImportOptions) -> Result<Parsed, ImportError> {
        let mut columns = read_nsys_json(source)?;
        columns.format = Format::NsysJson;
        Ok(Parsed::Snapshot(Box::new(columns)))
    }
}

/// The string table line holds the profiled process's whole environment: allow long lines.
const MAX_JSON_LINE: usize = 256 << 20;

fn int(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Number(n) => n.as_i64().or_else(|| n.as_u64().map(|u| u as i64)),
        Value::String(s) => s
            .trim()
            .parse::<i64>()
            .ok()
            .or_else(|| s.trim().parse::<u64>().ok().map(|u| u as i64)),
        _ => None,
    }
}

fn mem_kind(v: Option<&Value>) -> i64 {
    match v {
        Some(Value::String(s)) => {
            let s = s.to_ascii_uppercase();
            if s.contains("DEVICE_STATIC") {
                5
            } else if s.contains("DEVICE") {
                2
            } else if s.contains("PINNED") {
                1
            } else if s.contains("MANAGED") {
                4
            } else if s.contains("PAGEABLE") {
                0
            } else {
                7
            }
        }
        other => int(other).unwrap_or(2),
    }
}

fn memory_row(e: &Map<String, Value>) -> Result<(Row, Option<i64>), LineProblem> {
    let start_ns = int(e.get("startNs")).ok_or(LineProblem::EventWithout("startNs"))?;
    let address = int(e.get("address")).ok_or(LineProblem::EventWithout("address"))?;
    let free = match e.get("type") {
        Some(Value::String(t)) => t.to_ascii_lowercase().contains("dealloc"),
        other => int(other).is_some_and(|t| t != 0),
    };
    Ok((
        Row {
            start_ns,
            device: int(e.get("deviceId")).unwrap_or(0),
            pid: int(e.get("globalPid")).unwrap_or(0),
            address,
            bytes: int(e.get("bytes")).unwrap_or(0),
            kind: mem_kind(e.get("memKind")),
            free,
            stream: int(e.get("streamId")).unwrap_or(0),
            api: None,
            var_name: e.get("name").and_then(Value::as_str).map(str::to_owned),
            ops: Vec::new(),
            category: None,
        },
        int(e.get("correlationId")),
    ))
}

/// Reads a whole JSON export into canonical columns.
pub fn read_nsys_json(source: Source) -> Result<crate::tables::SnapshotColumns, ImportError> {
    let mut lines = LineReader::with_max(source.reader, MAX_JSON_LINE);
    let mut strings: HashMap<i64, String> = HashMap::new();
    // (process, correlation id) → string index of the runtime call.
    let mut calls: HashMap<(i64, i64), i64> = HashMap::new();
    let mut rows: Vec<(Row, Option<i64>)> = Vec::new();
    let mut skipped = 0usize;
    while let Some(line) = lines.next_line()? {
        let number = line.number;
        let text = line.text.trim();
        if text.is_empty() {
            continue;
        }
        let value: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(_) if !line.terminated => {
                skipped += 1;
                continue;
            }
            Err(e) => return Err(line_error(number, LineProblem::not_json(e))),
        };
        let Value::Object(o) = value else {
            return Err(line_error(number, LineProblem::NotAnObject));
        };
        if let Some(Value::Object(e)) = o.get("CudaMemoryUsageEvent") {
            rows.push(memory_row(e).map_err(|m| line_error(number, m))?);
        } else if let Some(Value::Object(e)) = o.get("TraceProcessEvent") {
            if let (Some(corr), Some(name)) = (int(e.get("correlationId")), int(e.get("name"))) {
                let pid = int(e.get("globalTid")).unwrap_or(0) >> 24;
                calls.insert((pid, corr), name);
            }
        } else if let Some(Value::Array(data)) = o.get("data") {
            if data.first().is_some_and(Value::is_string) {
                for (i, s) in data.iter().enumerate() {
                    if let Value::String(s) = s {
                        strings.insert(i as i64, s.clone());
                    }
                }
            }
        } else if o.get("type").and_then(Value::as_str) == Some("String") {
            if let (Some(id), Some(Value::String(v))) = (int(o.get("id")), o.get("value")) {
                strings.insert(id, v.clone());
            }
        }
    }
    if rows.is_empty() {
        return Err(ImportError::Nsys(
            "a JSON export without CUDA memory events: profile with \
             `nsys profile --trace=cuda --cuda-memory-usage=true`"
                .into(),
        ));
    }
    let mut rows: Vec<Row> = rows
        .into_iter()
        .map(|(mut r, corr)| {
            r.api = corr
                .and_then(|c| calls.get(&(r.pid >> 24, c)))
                .and_then(|idx| strings.get(idx))
                .cloned();
            r
        })
        .collect();
    rows.sort_by_key(|r| r.start_ns);
    let mut out = lower_driver_allocations(rows, None, NSYS_NOTE);
    if skipped > 0 {
        out.source
            .notes
            .push("the last line was cut off and skipped".to_owned());
    }
    Ok(out)
}
