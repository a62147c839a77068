//! `nvidia-smi pmon -s m[u…] -o DT`: one line per (second, process) under `#` header lines,
//! whitespace-aligned like dmon: `#Date Time gpu pid type fb ccpm command` (with `-s um`, also
//! `sm mem enc dec jpg ofa`). `fb` is the process's frame-buffer memory in MB (= MiB); a GPU
//! with no process prints one line of `-`. Both header lines are printed again during a run, so
//! every `#` line after the first is skipped. Timestamps need `-o DT` (local time without zone).
//!
//! Every line with a pid becomes a per-process sample (GPU index, pid, name, used bytes); the
//! log has no whole-GPU numbers, so it adds processes to a report, not a GPU series.

use crate::error::ImportError;
use crate::importers::common::nvml::{
    dmon_date_time_us, is_missing, line_error, parse_memory, Field, LineProblem, LineReader,
};
use crate::importers::{ImportOptions, Parsed, Importer};
use crate::samples::{GpuSampleLog, ProcessSample, SampleClock, SampleRows, UsedMeaning};
use crate::source::{leading_text, Source};

pub struct NvidiaSmiPmonImporter;

pub static IMPORTER: NvidiaSmiPmonImporter = NvidiaSmiPmonImporter;

impl Importer for NvidiaSmiPmonImporter {
    /// A `#` header line that names a `pid` column (dmon's has none).
    fn sniff(&self, head: &[u8]) -> bool {
        let t = leading_text(head);
        let first = t.lines().next().unwrap_or("");
        first.starts_with('#') && first.split_whitespace().any(|c| c.eq_ignore_ascii_case("pid"))
    }

    fn import(&self, source: Source, _options: &ImportOptions) -> Result<Parsed, ImportError> {
        Ok(Parsed::GpuSamples(Box::new(read_pmon(source)?)))
    }
}

/// Column positions of a pmon header.
struct Columns {
    date: usize,
    time: usize,
    gpu: usize,
    pid: usize,
    fb: usize,
    command: Option<usize>,
    count: usize,
}

fn columns(header: &str, number: usize) -> Result<Columns, ImportError> {
    let names: Vec<String> = header.split_whitespace().map(str::to_ascii_lowercase).collect();
    let find = |k: &str| names.iter().position(|c| c == k);
    let (Some(date), Some(time)) = (find("date"), find("time")) else {
        return Err(line_error(
            number,
            "no Date and Time columns: record with `nvidia-smi pmon -s m -o DT` so samples have timestamps",
        ));
    };
    let fb = find("fb").ok_or_else(|| {
        line_error(
            number,
            "no `fb` (frame buffer) column: record memory with `nvidia-smi pmon -s m -o DT`",
        )
    })?;
    Ok(Columns {
        date,
        time,
        gpu: find("gpu").ok_or_else(|| line_error(number, "no `gpu` column"))?,
        pid: find("pid").ok_or_else(|| line_error(number, "no `pid` column"))?,
        fb,
        command: find("command"),
        count: names.len(),
    })
}

/// One data line: `None` for a GPU's "no process" line (`-` as pid).
fn sample(fields: &[&str], c: &Columns) -> Result<Option<ProcessSample>, LineProblem> {
    // The command may be missing (a process that exited) but nothing else.
    if fields.len() < c.count - usize::from(c.command.is_some()) {
        return Err(LineProblem::ColumnCount {
            got: fields.len(),
            expected: c.count,
        });
    }
    // Checked one by one: the header decides where each column is, and a short line may lack
    // any of them (not only a trailing command).
    let field = |i: usize, name: &str| {
        fields
            .get(i)
            .copied()
            .ok_or_else(|| LineProblem::MissingColumn {
                got: fields.len(),
                name: name.to_owned(),
                column: i + 1,
            })
    };
    let pid_text = field(c.pid, "pid")?;
    if is_missing(pid_text) || pid_text == "-" {
        return Ok(None);
    }
    let (date, time) = (field(c.date, "Date")?, field(c.time, "Time")?);
    let time_us = dmon_date_time_us(date, time)
        .ok_or_else(|| LineProblem::unreadable(Field::DateAndTime, format!("{date} {time}")))?;
    let gpu_text = field(c.gpu, "gpu")?;
    let gpu = gpu_text
        .parse::<i32>()
        .map_err(|_| LineProblem::unreadable(Field::GpuIndex, gpu_text))?;
    let pid = pid_text
        .parse::<i64>()
        .map_err(|_| LineProblem::unreadable(Field::Pid, pid_text))?;
    Ok(Some(ProcessSample {
        time_us,
        gpu: Some(gpu),
        bus_id: None,
        pid,
        name: c
            .command
            .and_then(|i| fields.get(i))
            .filter(|n| **n != "-")
            .map(|n| (*n).to_owned()),
        used_bytes: parse_memory(field(c.fb, "fb")?, (1u64 << 20) as f64)?,
    }))
}

/// Reads a whole pmon log.
pub fn read_pmon(source: Source) -> Result<GpuSampleLog, ImportError> {
    let mut lines = LineReader::new(source.reader);
    let mut cols: Option<Columns> = None;
    let mut processes = Vec::new();
    let mut skipped_lines = Vec::new();
    while let Some(line) = lines.next_line()? {
        let text = line.text.trim();
        if text.is_empty() {
            continue;
        }
        if let Some(h) = text.strip_prefix('#') {
            if cols.is_none() {
                cols = Some(columns(h, line.number)?);
            }
            continue;
        }
        let Some(c) = &cols else {
            return Err(line_error(line.number, "data before the `#` header line"));
        };
        let fields: Vec<&str> = text.split_whitespace().collect();
        match sample(&fields, c) {
            Ok(Some(p)) => processes.push(p),
            Ok(None) => {}
            Err(message) if !line.terminated => skipped_lines.push(format!("line {} (cut off): {message}", line.number)),
            Err(message) => return Err(line_error(line.number, message)),
        }
    }
    if cols.is_none() {
        return Err(ImportError::Log("no `#` header line naming the columns".into()));
    }
    if processes.is_empty() {
        return Err(ImportError::Log(
            "no process was running on any GPU while the log was taken".into(),
        ));
    }
    GpuSampleLog::from_rows(
        SampleRows::default(),
        Vec::new(),
        processes,
        SampleClock::LocalNoZone,
        UsedMeaning::ExcludesDriverReserved,
        skipped_lines,
    )
}
