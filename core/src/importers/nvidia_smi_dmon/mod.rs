//! `nvidia-smi dmon [-s mu…] -o DT`: whitespace-aligned columns under `#` header lines.
//!
//! The first `#` line names the columns (`Date Time gpu fb bar1 … sm mem …`), the second gives
//! units; both are printed again during a run, so every `#` line after the first is skipped.
//! `fb` (frame buffer used, MB = MiB) becomes `used_bytes`, `sm` the utilisation. Missing
//! metrics read `-`. Timestamps need `-o DT` (date and time; local time without zone).

use crate::importers::common::nvml::{
    dmon_date_time_us, line_error, parse_memory, parse_percent, Field, LineProblem, LineReader,
};
use crate::error::ImportError;
use crate::importers::{ImportOptions, Parsed, Importer};
use crate::samples::{GpuInfo, GpuSampleLog, Sample, SampleClock, SampleRows, UsedMeaning};
use crate::source::{leading_text, Source};

pub struct NvidiaSmiDmonImporter;

pub static IMPORTER: NvidiaSmiDmonImporter = NvidiaSmiDmonImporter;

impl Importer for NvidiaSmiDmonImporter {
    /// A `#` header line naming `gpu` or `Date` first.
    fn sniff(&self, head: &[u8]) -> bool {
        let t = leading_text(head);
        t.starts_with("# gpu") || t.starts_with("#Date") || t.starts_with("# Date")
    }

    fn import(&self, source: Source, _options: &ImportOptions) -> Result<Parsed, ImportError> {
        Ok(Parsed::GpuSamples(Box::new(read_dmon(source)?)))
    }
}

/// Reads a whole dmon log.
pub fn read_dmon(source: Source) -> Result<GpuSampleLog, ImportError> {
    let mut lines = LineReader::new(source.reader);
    let mut names: Option<Vec<String>> = None;
    let mut rows = SampleRows::default();
    let mut gpus: Vec<GpuInfo> = Vec::new();
    let mut skipped_lines = Vec::new();
    let mut cols = (0usize, 0usize, 0usize, None::<usize>, None::<usize>);
    while let Some(line) = lines.next_line()? {
        let number = line.number;
        let text = line.text.trim();
        if text.is_empty() {
            continue;
        }
        if let Some(h) = text.strip_prefix('#') {
            if names.is_none() {
                let n: Vec<String> = h.split_whitespace().map(str::to_ascii_lowercase).collect();
                let find = |k: &str| n.iter().position(|c| c == k);
                if find("pid").is_some() {
                    return Err(line_error(number, "a per-process `nvidia-smi pmon` log, not a dmon log"));
                }
                let (Some(date), Some(time)) = (find("date"), find("time")) else {
                    return Err(line_error(
                        number,
                        "no Date and Time columns: record with `nvidia-smi dmon -o DT` so samples have timestamps",
                    ));
                };
                let gpu = find("gpu")
                    .or_else(|| find("idx"))
                    .ok_or_else(|| line_error(number, "no `gpu` column"))?;
                let fb = find("fb");
                if fb.is_none() {
                    return Err(line_error(
                        number,
                        "no `fb` (frame buffer) column: record memory with `nvidia-smi dmon -s m -o DT`",
                    ));
                }
                cols = (date, time, gpu, fb, find("sm"));
                names = Some(n);
            }
            continue;
        }
        let Some(n) = &names else {
            return Err(line_error(number, "data before the `#` header line"));
        };
        let fields: Vec<&str> = text.split_whitespace().collect();
        let (date, time, gpu_col, fb, sm) = cols;
        let parsed = (|| -> Result<Sample, LineProblem> {
            if fields.len() != n.len() {
                return Err(LineProblem::ColumnCount {
                    got: fields.len(),
                    expected: n.len(),
                });
            }
            let time_us = dmon_date_time_us(fields[date], fields[time]).ok_or_else(|| {
                LineProblem::unreadable(Field::DateAndTime, format!("{} {}", fields[date], fields[time]))
            })?;
            let gpu = fields[gpu_col]
                .parse::<i32>()
                .map_err(|_| LineProblem::unreadable(Field::GpuIndex, fields[gpu_col]))?;
            Ok(Sample {
                time_us,
                gpu,
                used_bytes: match fb {
                    Some(c) => parse_memory(fields[c], (1u64 << 20) as f64)?,
                    None => None,
                },
                util_gpu_pct: sm.and_then(|c| parse_percent(fields[c])),
                ..Sample::default()
            })
        })();
        match parsed {
            Ok(s) => {
                if !gpus.iter().any(|g| g.gpu == s.gpu) {
                    gpus.push(GpuInfo {
                        gpu: s.gpu,
                        ..GpuInfo::default()
                    });
                }
                rows.push(s);
            }
            Err(message) if !line.terminated => skipped_lines.push(format!("line {number} (cut off): {message}")),
            Err(message) => return Err(line_error(number, message)),
        }
    }
    if names.is_none() {
        return Err(ImportError::Log("no `#` header line naming the columns".into()));
    }
    GpuSampleLog::from_rows(
        rows,
        gpus,
        Vec::new(),
        SampleClock::LocalNoZone,
        UsedMeaning::ExcludesDriverReserved,
        skipped_lines,
    )
}
