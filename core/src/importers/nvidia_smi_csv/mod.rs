//! `nvidia-smi --query-gpu=timestamp,index,memory.used,… --format=csv[,nounits] [-l N|-lms N]`.
//!
//! Columns are mapped by header name (units in brackets are stripped: `memory.used [MiB]`).
//! Fields are separated by commas and trimmed. Values repeat their unit (`143771 MiB`) unless
//! `nounits` was given, in which case the header's unit, else MiB, applies. A header line met
//! again (concatenated logs) is skipped; a last line cut off mid-write is skipped and noted.
//! Per-process logs (`--query-compute-apps=timestamp,gpu_bus_id,pid,process_name,used_memory`)
//! become process samples; they name GPUs by bus id, which a `--query-gpu` log of the same
//! report maps to an index.
//!
//! Hand-made logs from people's own pollers name the GPU in other columns (`gpu`, `gpu_id`,
//! `uuid`, `pci.bus_id`, …) or write a constant `index`: the column that tells rows apart is
//! chosen by content ([`identity_column`]), a constant identity repeated by every timestamp's
//! rows falls back to their order, and one GPU sampled twice at one instant is kept and noted
//! with its line numbers. Several GPUs are never merged into one series.

use std::collections::HashMap;

use crate::importers::common::nvml::{
    is_missing, line_error, memory_unit, Field, LineProblem, parse_memory, parse_percent, parse_timestamp, LineReader,
};
use crate::error::ImportError;
use crate::importers::{ImportOptions, Parsed, Importer};
use crate::samples::{GpuInfo, GpuSampleLog, ProcessSample, Sample, SampleClock, SampleRows, UsedMeaning};
use crate::source::{leading_text, Source};

pub struct NvidiaSmiCsvImporter;

pub static IMPORTER: NvidiaSmiCsvImporter = NvidiaSmiCsvImporter;

impl Importer for NvidiaSmiCsvImporter {
    /// A CSV header line starting with `timestamp`.
    fn sniff(&self, head: &[u8]) -> bool {
        let t = leading_text(head);
        t.starts_with("timestamp") && t.lines().next().is_some_and(|l| l.contains(','))
    }

    fn import(&self, source: Source, _options: &ImportOptions) -> Result<Parsed, ImportError> {
        Ok(Parsed::GpuSamples(Box::new(read_smi_csv(source)?)))
    }
}

/// A header column: its name without the unit, and the unit's bytes (memory) if it has one.
struct HeaderColumn {
    name: String,
    memory_unit: Option<f64>,
}

fn parse_header(line: &str) -> Vec<HeaderColumn> {
    line.split(',')
        .map(|raw| {
            let raw = raw.trim();
            let (name, unit) = match raw.find('[') {
                Some(i) => (raw[..i].trim(), raw[i + 1..].trim_end_matches(']').trim()),
                None => (raw, ""),
            };
            HeaderColumn {
                name: name.to_ascii_lowercase(),
                memory_unit: memory_unit(unit),
            }
        })
        .collect()
}

/// Reads a whole `--query-gpu` CSV log.
pub fn read_smi_csv(source: Source) -> Result<GpuSampleLog, ImportError> {
    let mut lines = LineReader::new(source.reader);
    let header_text = match lines.next_line()? {
        Some(l) => l.text.trim().to_owned(),
        None => return Err(ImportError::Empty),
    };
    let header = parse_header(&header_text);
    let find = |names: &[&str]| header.iter().position(|c| names.contains(&c.name.as_str()));
    let time_col = find(&["timestamp"]).ok_or_else(|| line_error(1, "no `timestamp` column in the header"))?;
    let used_col = find(&["memory.used"]);
    let total_col = find(&["memory.total"]);
    if used_col.is_none() && total_col.is_none() {
        if let (Some(pid_col), Some(mem_col)) = (find(&["pid"]), find(&["used_gpu_memory", "used_memory"])) {
            let cols = AppsColumns {
                time: time_col,
                pid: pid_col,
                used: mem_col,
                name: find(&["process_name", "name"]),
                bus: find(&["gpu_bus_id", "pci.bus_id"]),
                unit: header[mem_col].memory_unit.unwrap_or((1u64 << 20) as f64),
                fields: header.len(),
            };
            return read_apps(lines, &header_text, cols);
        }
        return Err(line_error(
            1,
            "no `memory.used` or `memory.total` column: record with \
             --query-gpu=timestamp,index,memory.used,memory.total --format=csv",
        ));
    }
    let name_col = find(&["name", "gpu_name"]);
    let bus_col = find(&["pci.bus_id", "gpu_bus_id", "bus_id"]);
    let free_col = find(&["memory.free"]);
    let reserved_col = find(&["memory.reserved"]);
    let util_col = find(&["utilization.gpu"]);
    let mib = (1u64 << 20) as f64;
    let unit_of = |c: usize| header[c].memory_unit.unwrap_or(mib);

    // First pass: the lines as fields, so the column that tells GPUs apart can be chosen.
    let mut skipped_lines = Vec::new();
    let mut records: Vec<Record> = Vec::new();
    while let Some(line) = lines.next_line()? {
        let text = line.text.trim();
        if text.is_empty() || text == header_text {
            continue;
        }
        let fields: Vec<String> = text.split(',').map(|f| f.trim().to_owned()).collect();
        if fields.len() != header.len() {
            let message = LineProblem::FieldCount {
                got: fields.len(),
                expected: header.len(),
            };
            if line.terminated {
                return Err(line_error(line.number, message));
            }
            skipped_lines.push(format!("line {} (cut off): {message}", line.number));
            continue;
        }
        records.push(Record {
            number: line.number,
            fields,
            terminated: line.terminated,
        });
    }
    let mut identity = identity_column(&header, &records, time_col);
    let mut notes = Vec::new();
    if let Some(c) = identity.filter(|&c| by_order_within_each_time(&records, time_col, c)) {
        notes.push(format!(
            "`{}` repeats within every timestamp: GPUs told apart by their order within it",
            header[c].name
        ));
        identity = None;
    }

    let mut rows = SampleRows::default();
    let mut gpus: Vec<GpuInfo> = Vec::new();
    let mut clock = SampleClock::LocalNoZone;
    let numeric = identity.is_some_and(|c| records.iter().all(|r| r.fields[c].parse::<i32>().is_ok()));
    let mut numbered: HashMap<String, i32> = HashMap::new();
    // GPU at each timestamp → the line that sampled it, to catch one GPU sampled twice at once.
    let mut seen: HashMap<(String, i32), usize> = HashMap::new();
    let mut twice: Vec<String> = Vec::new();
    // Without an identity column, GPUs are told apart by their order within one timestamp.
    let (mut last_time, mut position) = (String::new(), 0i32);
    for Record {
        number,
        fields,
        terminated,
    } in &records
    {
        let parsed = (|| -> Result<(Sample, GpuInfo), LineProblem> {
            let (time_us, c) = parse_timestamp(&fields[time_col])
                .ok_or_else(|| LineProblem::unreadable(Field::Timestamp, &fields[time_col]))?;
            clock = c;
            let bus = bus_col.map(|c| fields[c].clone()).filter(|b| !is_missing(b));
            let gpu = match identity {
                Some(c) if numeric => fields[c].parse::<i32>().unwrap_or(0),
                Some(c) => {
                    let next = numbered.len() as i32;
                    *numbered.entry(fields[c].clone()).or_insert(next)
                }
                None => {
                    if fields[time_col] == last_time {
                        position += 1;
                    } else {
                        last_time = fields[time_col].clone();
                        position = 0;
                    }
                    position
                }
            };
            let mem = |c: Option<usize>| -> Result<Option<i64>, LineProblem> {
                match c {
                    Some(c) => parse_memory(&fields[c], unit_of(c)),
                    None => Ok(None),
                }
            };
            let sample = Sample {
                time_us,
                gpu,
                used_bytes: mem(used_col)?,
                total_bytes: mem(total_col)?,
                free_bytes: mem(free_col)?,
                driver_reserved_bytes: mem(reserved_col)?,
                util_gpu_pct: util_col.and_then(|c| parse_percent(&fields[c])),
            };
            let info = GpuInfo {
                gpu,
                name: name_col.map(|c| fields[c].clone()),
                bus_id: bus,
            };
            Ok((sample, info))
        })();
        match parsed {
            Ok((sample, info)) => {
                if let Some(first) = seen.insert((fields[time_col].clone(), info.gpu), *number) {
                    twice.push(format!("lines {first} and {number} (GPU {} at {})", info.gpu, fields[time_col]));
                }
                if !gpus.iter().any(|g| g.gpu == info.gpu) {
                    gpus.push(info);
                }
                rows.push(sample);
            }
            Err(message) if !terminated => {
                skipped_lines.push(format!("line {number} (cut off): {message}"));
            }
            Err(message) => return Err(line_error(*number, message)),
        }
    }
    let mut tables = GpuSampleLog::from_rows(
        rows,
        gpus,
        Vec::new(),
        clock,
        UsedMeaning::ExcludesDriverReserved,
        skipped_lines,
    )?;
    tables.notes = notes;
    if let Some(c) = identity.filter(|&c| header[c].name != "index") {
        tables
            .notes
            .push(format!("GPUs told apart by the `{}` column", header[c].name));
    }
    if !twice.is_empty() {
        let shown: Vec<&str> = twice.iter().take(3).map(String::as_str).collect();
        tables.notes.push(format!(
            "{} sample(s) of a GPU already sampled at the same time, kept as that GPU's: {}{}",
            twice.len(),
            shown.join("; "),
            if twice.len() > 3 { "; …" } else { "" }
        ));
    }
    Ok(tables)
}

/// Whether the best identity column still repeats, and every timestamp has the same number
/// (> 1) of rows: a poller that loops over its GPUs but writes one constant identity, so each
/// timestamp's rows are its GPUs in order rather than one GPU sampled again.
fn by_order_within_each_time(records: &[Record], time_col: usize, identity: usize) -> bool {
    let mut per_time: HashMap<&str, (usize, std::collections::HashSet<&str>)> = HashMap::new();
    for r in records {
        let e = per_time.entry(r.fields[time_col].as_str()).or_default();
        e.0 += 1;
        e.1.insert(r.fields[identity].as_str());
    }
    let mut counts = per_time.values().map(|(n, _)| *n);
    let first = counts.next().unwrap_or(0);
    first > 1 && counts.all(|n| n == first) && per_time.values().any(|(n, ids)| ids.len() < *n)
}

/// One data line of a `--query-gpu` log, split into fields.
struct Record {
    number: usize,
    fields: Vec<String>,
    /// `false` for a last line cut off mid-write.
    terminated: bool,
}

/// Columns that may name the GPU a row samples, preferred in this order among equals.
const IDENTITY_COLUMNS: &[&str] = &[
    "index",
    "gpu_index",
    "gpu",
    "gpu_id",
    "device",
    "device_id",
    "pci.bus_id",
    "gpu_bus_id",
    "bus_id",
    "uuid",
    "gpu_uuid",
];

/// The column that tells a log's GPUs apart: of the identity columns present, the one whose
/// value repeats least at one timestamp (a constant `index` beside a changing bus id repeats at
/// every timestamp of a multi-GPU log), then the one with the most distinct values, then the
/// order of [`IDENTITY_COLUMNS`]. `None` without any.
fn identity_column(header: &[HeaderColumn], records: &[Record], time_col: usize) -> Option<usize> {
    let candidates = IDENTITY_COLUMNS
        .iter()
        .enumerate()
        .filter_map(|(rank, name)| header.iter().position(|h| h.name == *name).map(|c| (rank, c)));
    candidates
        .map(|(rank, c)| {
            let mut at_time = std::collections::HashSet::new();
            let mut distinct = std::collections::HashSet::new();
            let mut repeats = 0usize;
            for r in records {
                let f = &r.fields;
                if !at_time.insert((f[time_col].as_str(), f[c].as_str())) {
                    repeats += 1;
                }
                distinct.insert(f[c].as_str());
            }
            (repeats, std::cmp::Reverse(distinct.len()), rank, c)
        })
        .min()
        .map(|(_, _, _, c)| c)
}

/// Where a compute-apps log keeps what.
struct AppsColumns {
    time: usize,
    pid: usize,
    used: usize,
    name: Option<usize>,
    bus: Option<usize>,
    unit: f64,
    fields: usize,
}

/// Reads the rest of a `--query-compute-apps` log: one row per process per sample (a sample
/// without processes writes no row).
fn read_apps(mut lines: LineReader, header_text: &str, c: AppsColumns) -> Result<GpuSampleLog, ImportError> {
    let mut processes = Vec::new();
    let mut clock = SampleClock::LocalNoZone;
    let mut skipped_lines = Vec::new();
    while let Some(line) = lines.next_line()? {
        let text = line.text.trim();
        if text.is_empty() || text == header_text {
            continue;
        }
        let fields: Vec<&str> = text.split(',').map(str::trim).collect();
        let parsed = (|| -> Result<ProcessSample, LineProblem> {
            if fields.len() != c.fields {
                return Err(LineProblem::FieldCount {
                    got: fields.len(),
                    expected: c.fields,
                });
            }
            let (time_us, k) = parse_timestamp(fields[c.time])
                .ok_or_else(|| LineProblem::unreadable(Field::Timestamp, fields[c.time]))?;
            clock = k;
            let pid = fields[c.pid]
                .parse::<i64>()
                .map_err(|_| LineProblem::unreadable(Field::Pid, fields[c.pid]))?;
            let text_of = |col: Option<usize>| {
                col.map(|i| fields[i])
                    .filter(|v| !is_missing(v))
                    .map(str::to_owned)
            };
            Ok(ProcessSample {
                time_us,
                gpu: None,
                bus_id: text_of(c.bus),
                pid,
                name: text_of(c.name),
                used_bytes: parse_memory(fields[c.used], c.unit)?,
            })
        })();
        match parsed {
            Ok(p) => processes.push(p),
            Err(message) if !line.terminated => {
                skipped_lines.push(format!("line {} (cut off): {message}", line.number));
            }
            Err(message) => return Err(line_error(line.number, message)),
        }
    }
    GpuSampleLog::from_rows(
        SampleRows::default(),
        Vec::new(),
        processes,
        clock,
        UsedMeaning::ExcludesDriverReserved,
        skipped_lines,
    )
}
