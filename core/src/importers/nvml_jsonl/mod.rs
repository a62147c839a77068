//! pynvml polling logs: one JSON object per line (or one JSON array of such objects).
//!
//! There is no standard schema, so keys are matched from the names loggers use: time from
//! `timestamp`/`time`/`ts` (epoch seconds, ms, µs or ns, or an ISO string), the GPU from
//! `gpu`/`index`/`device`, memory from `memory_used`/`memory_total`/`memory_free` (and the
//! `used`/`total`/`free`, `mem_*` spellings), utilisation from `gpu_util`/`utilization_gpu`.
//! Memory is in bytes, unless every total (or, without totals, every used value) is below
//! 16 Mi — no GPU has less than 16 MiB — in which case the log wrote MiB.
//! pynvml's `nvmlDeviceGetMemoryInfo` (v1) counts the driver's reservation in `used`.
//! A `processes` list (`[{pid, used_memory}]`, as from `nvmlDeviceGetComputeRunningProcesses`)
//! becomes process samples of that GPU.

use serde_json::{Map, Value};

use crate::importers::common::nvml::{line_error, parse_timestamp, Field, LineProblem, LineReader};
use crate::error::ImportError;
use crate::importers::{ImportOptions, Parsed, Importer};
use crate::samples::{GpuInfo, GpuSampleLog, ProcessSample, Sample, SampleClock, SampleRows, UsedMeaning};
use crate::source::{leading_text, Source};

pub struct NvmlJsonLinesImporter;

pub static IMPORTER: NvmlJsonLinesImporter = NvmlJsonLinesImporter;

impl Importer for NvmlJsonLinesImporter {
    /// JSON (lines or an array) with NVML's `memory_used` / `memory_total` keys.
    fn sniff(&self, head: &[u8]) -> bool {
        let t = leading_text(head);
        (t.starts_with('{') || t.starts_with('[')) && (t.contains("\"memory_used\"") || t.contains("\"memory_total\""))
    }

    fn import(&self, source: Source, _options: &ImportOptions) -> Result<Parsed, ImportError> {
        Ok(Parsed::GpuSamples(Box::new(read_nvml_jsonl(source)?)))
    }
}

const TIME_KEYS: &[&str] = &["timestamp", "time", "ts", "time_s", "unix_time"];
const GPU_KEYS: &[&str] = &["gpu", "index", "device", "gpu_index", "device_index"];
const USED_KEYS: &[&str] = &["memory_used", "mem_used", "used", "memory.used", "used_bytes"];
const TOTAL_KEYS: &[&str] = &["memory_total", "mem_total", "total", "memory.total", "total_bytes"];
const FREE_KEYS: &[&str] = &["memory_free", "mem_free", "free", "memory.free", "free_bytes"];
const RESERVED_KEYS: &[&str] = &["memory_reserved", "mem_reserved", "memory.reserved"];
const UTIL_KEYS: &[&str] = &[
    "gpu_util",
    "utilization_gpu",
    "util",
    "utilization.gpu",
    "gpu_utilization",
];
const NAME_KEYS: &[&str] = &["name", "gpu_name"];
const BUS_KEYS: &[&str] = &["bus_id", "pci_bus_id", "pci.bus_id", "gpu_bus_id"];

fn first<'a>(o: &'a Map<String, Value>, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().find_map(|k| o.get(*k)).filter(|v| !v.is_null())
}

fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A sample whose memory unit is not known yet (values as written).
struct RawSample {
    time_us: i64,
    gpu: i32,
    used: Option<f64>,
    total: Option<f64>,
    free: Option<f64>,
    reserved: Option<f64>,
    util: Option<f64>,
    /// (pid, used, name) of each listed process.
    processes: Vec<(i64, Option<f64>, Option<String>)>,
}

fn read_object(o: &Map<String, Value>, clock: &mut Option<SampleClock>) -> Result<RawSample, LineProblem> {
    let t = first(o, TIME_KEYS).ok_or(LineProblem::NoTimestamp)?;
    let (time_us, c) = match t {
        Value::Number(n) => n.as_f64().and_then(|x| parse_timestamp(&x.to_string())),
        Value::String(s) => parse_timestamp(s),
        _ => None,
    }
    .ok_or_else(|| LineProblem::UnreadableValue {
        field: Field::Timestamp,
        value: t.to_string(),
    })?;
    *clock = Some(c);
    let gpu = match first(o, GPU_KEYS) {
        Some(v) => number(v)
            .filter(|g| g.fract() == 0.0 && (0.0..65_536.0).contains(g))
            .ok_or_else(|| LineProblem::UnreadableValue {
                field: Field::GpuIndex,
                value: v.to_string(),
            })? as i32,
        None => 0,
    };
    let get = |keys: &[&str]| first(o, keys).and_then(number);
    let s = RawSample {
        time_us,
        gpu,
        used: get(USED_KEYS),
        total: get(TOTAL_KEYS),
        free: get(FREE_KEYS),
        reserved: get(RESERVED_KEYS),
        util: get(UTIL_KEYS),
        processes: match o.get("processes") {
            Some(Value::Array(list)) => list
                .iter()
                .filter_map(|p| {
                    let p = p.as_object()?;
                    let pid = first(p, &["pid"]).and_then(number)? as i64;
                    let used =
                        first(p, &["used_memory", "usedGpuMemory", "used_gpu_memory", "memory_used"]).and_then(number);
                    let name = first(p, &["name", "process_name"])
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                    Some((pid, used, name))
                })
                .collect(),
            _ => Vec::new(),
        },
    };
    if s.used.is_none() && s.total.is_none() {
        return Err(LineProblem::NoMemoryValues);
    }
    Ok(s)
}

/// Reads a whole pynvml log.
pub fn read_nvml_jsonl(source: Source) -> Result<GpuSampleLog, ImportError> {
    let mut lines = LineReader::new(source.reader);
    let mut raw: Vec<RawSample> = Vec::new();
    let mut gpus: Vec<GpuInfo> = Vec::new();
    let mut clock = None;
    let mut skipped_lines = Vec::new();
    let mut note_gpu = |o: &Map<String, Value>, gpu: i32| {
        if !gpus.iter().any(|g| g.gpu == gpu) {
            let text = |keys: &[&str]| first(o, keys).and_then(|v| v.as_str()).map(str::to_owned);
            gpus.push(GpuInfo {
                gpu,
                name: text(NAME_KEYS),
                bus_id: text(BUS_KEYS),
            });
        }
    };
    let mut array_text: Option<String> = None;
    while let Some(line) = lines.next_line()? {
        let number = line.number;
        let text = line.text.trim();
        if let Some(buf) = &mut array_text {
            buf.push_str(line.text);
            buf.push('\n');
            continue;
        }
        if text.is_empty() {
            continue;
        }
        if number == 1 && text.starts_with('[') {
            array_text = Some(format!("{}\n", line.text));
            continue;
        }
        let parsed = serde_json::from_str::<Value>(text)
            .map_err(LineProblem::not_json)
            .and_then(|v| match v {
                Value::Object(o) => read_object(&o, &mut clock).map(|s| (o, s)),
                _ => Err(LineProblem::NotAnObject),
            });
        match parsed {
            Ok((o, s)) => {
                note_gpu(&o, s.gpu);
                raw.push(s);
            }
            Err(message) if !line.terminated => skipped_lines.push(format!("line {number} (cut off): {message}")),
            Err(message) => return Err(line_error(number, message)),
        }
    }
    if let Some(buf) = array_text {
        let items: Vec<Value> =
            serde_json::from_str(&buf).map_err(|e| ImportError::Log(format!("not a JSON array: {e}")))?;
        for (i, v) in items.iter().enumerate() {
            let Value::Object(o) = v else {
                return Err(ImportError::Log(format!("item {i} of the array is not a JSON object")));
            };
            let s = read_object(o, &mut clock).map_err(|m| ImportError::Log(format!("item {i}: {m}")))?;
            note_gpu(o, s.gpu);
            raw.push(s);
        }
    }
    if raw.is_empty() {
        return Err(ImportError::Log("no samples".into()));
    }
    // Bytes, unless the sizes are too small to be bytes for any GPU.
    let tiny = 16.0 * (1u64 << 20) as f64;
    let reference: Vec<f64> = match raw.iter().filter_map(|s| s.total).collect::<Vec<_>>() {
        totals if !totals.is_empty() => totals,
        _ => raw.iter().filter_map(|s| s.used).collect(),
    };
    let scale = if !reference.is_empty() && reference.iter().all(|v| *v < tiny) {
        (1u64 << 20) as f64
    } else {
        1.0
    };
    let bytes = |v: Option<f64>| v.map(|x| (x * scale).round() as i64);
    let mut rows = SampleRows::default();
    let mut processes = Vec::new();
    for s in &raw {
        for (pid, used, name) in &s.processes {
            processes.push(ProcessSample {
                time_us: s.time_us,
                gpu: Some(s.gpu),
                bus_id: None,
                pid: *pid,
                name: name.clone(),
                used_bytes: bytes(*used),
            });
        }
        rows.push(Sample {
            time_us: s.time_us,
            gpu: s.gpu,
            used_bytes: bytes(s.used),
            total_bytes: bytes(s.total),
            free_bytes: bytes(s.free),
            driver_reserved_bytes: bytes(s.reserved),
            util_gpu_pct: s.util,
        });
    }
    GpuSampleLog::from_rows(
        rows,
        gpus,
        processes,
        clock.unwrap_or(SampleClock::Epoch),
        UsedMeaning::IncludesDriverReserved,
        skipped_lines,
    )
}
