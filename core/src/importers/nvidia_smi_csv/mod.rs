//! `nvidia-smi --query-gpu=timestamp,index,memory.used,… --format=csv[,nounits] [-l N|-lms N]`.
//!
//! Columns are mapped by header name (units in brackets are stripped: `memory.used [MiB]`).
//! Fields are separated by commas and trimmed. Values repeat their unit (`143771 MiB`) unless
//! `nounits` was given, in which case the header's unit, else MiB, applies. A header line met
//! again (concatenated logs) is skipped; a last line cut off mid-write is skipped and noted.
//! Per-process logs (`--query-compute-apps=timestamp,gpu_bus_id,pid,process_name,used_memory`)
//! become process samples; they name GPUs by bus id, which a `--query-gpu` log of the same
//! report maps to an index.

use std::collections::HashMap;

use crate::importers::common::nvml::{
    is_missing, line_error, memory_unit, parse_memory, parse_percent, parse_timestamp, LineReader,
};
use crate::error::ImportError;
use crate::importers::{ImportOptions, Imported, Importer};
use crate::samples::{GpuInfo, GpuSampleTables, ProcessSample, Sample, SampleClock, SampleRows, UsedMeaning};
use crate::source::{leading_text, Source};

pub struct NvidiaSmiCsvImporter;

pub static IMPORTER: NvidiaSmiCsvImporter = NvidiaSmiCsvImporter;

impl Importer for NvidiaSmiCsvImporter {
    /// A CSV header line starting with `timestamp`.
    fn sniff(&self, head: &[u8]) -> bool {
        let t = leading_text(head);
        t.starts_with("timestamp") && t.lines().next().is_some_and(|l| l.contains(','))
    }

    fn import(&self, source: Source, _options: &ImportOptions) -> Result<Imported, ImportError> {
        Ok(Imported::GpuSamples(Box::new(read_smi_csv(source)?)))
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
pub fn read_smi_csv(source: Source) -> Result<GpuSampleTables, ImportError> {
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
    let index_col = find(&["index"]);
    let name_col = find(&["name", "gpu_name"]);
    let bus_col = find(&["pci.bus_id", "gpu_bus_id"]);
    let free_col = find(&["memory.free"]);
    let reserved_col = find(&["memory.reserved"]);
    let util_col = find(&["utilization.gpu"]);
    let mib = (1u64 << 20) as f64;
    let unit_of = |c: usize| header[c].memory_unit.unwrap_or(mib);

    let mut rows = SampleRows::default();
    let mut gpus: Vec<GpuInfo> = Vec::new();
    let mut bus_index: HashMap<String, i32> = HashMap::new();
    let mut clock = SampleClock::LocalNoZone;
    let mut skipped_lines = Vec::new();
    // Without an index or bus column, GPUs are told apart by their order within one timestamp.
    let (mut last_time, mut position) = (String::new(), 0i32);
    while let Some(line) = lines.next_line()? {
        let number = line.number;
        let text = line.text.trim();
        if text.is_empty() || text == header_text {
            continue;
        }
        let fields: Vec<&str> = text.split(',').map(str::trim).collect();
        let parsed = (|| -> Result<(Sample, GpuInfo), String> {
            if fields.len() != header.len() {
                return Err(format!("{} fields, but the header has {}", fields.len(), header.len()));
            }
            let (time_us, c) = parse_timestamp(fields[time_col])
                .ok_or_else(|| format!("unreadable timestamp `{}`", fields[time_col]))?;
            clock = c;
            let bus = bus_col.map(|c| fields[c].to_owned()).filter(|b| !is_missing(b));
            let gpu = match (index_col, &bus) {
                (Some(c), _) => fields[c]
                    .parse::<i32>()
                    .map_err(|_| format!("unreadable GPU index `{}`", fields[c]))?,
                (None, Some(b)) => {
                    let next = bus_index.len() as i32;
                    *bus_index.entry(b.clone()).or_insert(next)
                }
                (None, None) => {
                    if fields[time_col] == last_time {
                        position += 1;
                    } else {
                        last_time = fields[time_col].to_owned();
                        position = 0;
                    }
                    position
                }
            };
            let mem = |c: Option<usize>| -> Result<Option<i64>, String> {
                match c {
                    Some(c) => parse_memory(fields[c], unit_of(c)),
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
                util_gpu_pct: util_col.and_then(|c| parse_percent(fields[c])),
            };
            let info = GpuInfo {
                gpu,
                name: name_col.map(|c| fields[c].to_owned()),
                bus_id: bus,
            };
            Ok((sample, info))
        })();
        match parsed {
            Ok((sample, info)) => {
                if !gpus.iter().any(|g| g.gpu == info.gpu) {
                    gpus.push(info);
                }
                rows.push(sample);
            }
            Err(message) if !line.terminated => {
                skipped_lines.push(format!("line {number} (cut off): {message}"));
            }
            Err(message) => return Err(line_error(number, message)),
        }
    }
    GpuSampleTables::from_rows(
        rows,
        gpus,
        Vec::new(),
        clock,
        UsedMeaning::ExcludesDriverReserved,
        skipped_lines,
    )
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
fn read_apps(mut lines: LineReader, header_text: &str, c: AppsColumns) -> Result<GpuSampleTables, ImportError> {
    let mut processes = Vec::new();
    let mut clock = SampleClock::LocalNoZone;
    let mut skipped_lines = Vec::new();
    while let Some(line) = lines.next_line()? {
        let text = line.text.trim();
        if text.is_empty() || text == header_text {
            continue;
        }
        let fields: Vec<&str> = text.split(',').map(str::trim).collect();
        let parsed = (|| -> Result<ProcessSample, String> {
            if fields.len() != c.fields {
                return Err(format!("{} fields, but the header has {}", fields.len(), c.fields));
            }
            let (time_us, k) =
                parse_timestamp(fields[c.time]).ok_or_else(|| format!("unreadable timestamp `{}`", fields[c.time]))?;
            clock = k;
            let pid = fields[c.pid]
                .parse::<i64>()
                .map_err(|_| format!("unreadable pid `{}`", fields[c.pid]))?;
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
    GpuSampleTables::from_rows(
        SampleRows::default(),
        Vec::new(),
        processes,
        clock,
        UsedMeaning::ExcludesDriverReserved,
        skipped_lines,
    )
}
