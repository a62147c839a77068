//! `nvidia-smi`'s default screen (no arguments): an `asctime` timestamp, the version row
//! (`NVIDIA-SMI v  Driver Version: v  CUDA Version: x.y`), the GPU box (three lines a GPU:
//! index, name, persistence | bus id | ECC; fan, temperature, power | `{used}MiB / {total}MiB` |
//! utilisation, compute mode; MIG mode), an optional MIG box and the `Processes:` box. Read by
//! tokens, not columns: the layouts are 79, 89 and 91 characters wide across drivers, and
//! the man page promises no stability. `MiB` is 2^20 bytes.
//!
//! It becomes one sample per GPU (used and total) and one per process, like the NVML logs: what
//! else holds the device shows beside PyTorch's own numbers. A screen inside a training log is
//! read there too (with the log's OOM messages).

use std::sync::LazyLock;

use regex::Regex;

use crate::error::ImportError;
use crate::evidence::{SmiGpu, SmiProcess, SmiScreen};
use crate::importers::common::text_lines::{read_lines, TextLine};
use crate::importers::{ImportOptions, Importer, Parsed};
use crate::samples::{GpuInfo, GpuSampleLog, ProcessSample, Sample, SampleClock, SampleRows, UsedMeaning};
use crate::source::{leading_text, Source};

pub struct NvidiaSmiScreenImporter;

pub static IMPORTER: NvidiaSmiScreenImporter = NvidiaSmiScreenImporter;

impl Importer for NvidiaSmiScreenImporter {
    /// The version row within the first lines, under a timestamp or the box's top.
    fn sniff(&self, head: &[u8]) -> bool {
        let t = leading_text(head);
        let first = t.lines().next().unwrap_or("");
        (first.starts_with('+') || first.starts_with('|') || ASCTIME.is_match(first))
            && t.lines().take(4).any(|l| l.contains("NVIDIA-SMI") && l.contains("Driver Version"))
    }

    fn import(&self, source: Source, _options: &ImportOptions) -> Result<Parsed, ImportError> {
        let lines = read_lines(source)?;
        let screens = find_screens(&lines);
        if screens.is_empty() {
            return Err(ImportError::Log("an nvidia-smi screen with no GPU in its table".into()));
        }
        Ok(Parsed::GpuSamples(Box::new(samples_of(&screens)?)))
    }
}

fn re(p: &str) -> Regex {
    // Constants of this file, checked by its tests.
    Regex::new(p).unwrap_or_else(|e| panic!("bad pattern {p}: {e}"))
}

static ASCTIME: LazyLock<Regex> = LazyLock::new(|| {
    re(r"^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(\d{1,2}) (\d\d):(\d\d):(\d\d) (\d{4})")
});
static MEMORY: LazyLock<Regex> = LazyLock::new(|| re(r"(\d+)\s*MiB\s*/\s*(\d+)\s*MiB"));
static UTIL: LazyLock<Regex> = LazyLock::new(|| re(r"(\d+)%"));
static PROCESS: LazyLock<Regex> = LazyLock::new(|| {
    re(r"^\|\s*(\d+)\s+(?:(?:N/A|\d+)\s+(?:N/A|\d+)\s+)?(\d+)\s+(C\+G|M\+C|C|G|M|O)\s+(.*?)\s+(\d+)\s*MiB\s*\|")
});
static PROCESS_NA: LazyLock<Regex> =
    LazyLock::new(|| re(r"^\|\s*(\d+)\s+(?:(?:N/A|\d+)\s+(?:N/A|\d+)\s+)?(\d+)\s+(C\+G|M\+C|C|G|M|O)\s+(.*?)\s+N/A\s*\|"));

const MIB: i64 = 1 << 20;

fn time_of(line: &str) -> Option<i64> {
    let c = ASCTIME.captures(line.trim())?;
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|m| *m == &c[1])? as u32
        + 1;
    let date = chrono::NaiveDate::from_ymd_opt(c[6].parse().ok()?, month, c[2].parse().ok()?)?;
    let t = date.and_hms_opt(c[3].parse().ok()?, c[4].parse().ok()?, c[5].parse().ok()?)?;
    Some(t.and_utc().timestamp_micros())
}

fn cells(line: &str) -> Vec<&str> {
    let t = line.trim();
    let inner = t.strip_prefix('|').unwrap_or(t);
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    inner.split('|').map(str::trim).collect()
}

/// Every screen of the lines.
pub fn find_screens(lines: &[TextLine]) -> Vec<SmiScreen> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let text = lines[i].text.as_str();
        if !(text.contains("NVIDIA-SMI") && text.contains("Driver Version")) {
            i += 1;
            continue;
        }
        let word_after = |key: &str| {
            text.split(key)
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .map(|w| w.trim_end_matches('|').to_owned())
        };
        let mut screen = SmiScreen {
            line: lines[i].number,
            time_us: lines[i.saturating_sub(3)..i].iter().rev().find_map(|l| time_of(&l.text)),
            driver_version: word_after("Driver Version:"),
            cuda_version: word_after("CUDA Version:"),
            ..Default::default()
        };
        let mut j = i + 1;
        let mut in_processes = false;
        while j < lines.len() {
            let l = lines[j].text.trim();
            if l.is_empty() || !(l.starts_with('|') || l.starts_with('+')) {
                // A blank line between the GPU and process boxes is part of the screen.
                if l.is_empty() && j + 1 < lines.len() && lines[j + 1].text.trim_start().starts_with('+') {
                    j += 1;
                    continue;
                }
                break;
            }
            if l.contains("NVIDIA-SMI") {
                break;
            }
            if l.contains("Processes:") {
                in_processes = true;
            } else if in_processes {
                if let Some(p) = process_of(l) {
                    screen.processes.push(p);
                }
            } else if let Some(m) = cells(l).get(1).and_then(|c| MEMORY.captures(c)) {
                // The memory line; the GPU's index and name are on the line above.
                let above = cells(&lines[j - 1].text);
                let first: Vec<&str> = above.first().map(|c| c.split_whitespace().collect()).unwrap_or_default();
                if let Some(index) = first.first().and_then(|w| w.parse::<i32>().ok()) {
                    let name_words = &first[1..first.len().saturating_sub(1).max(1)];
                    let util = cells(l)
                        .get(2)
                        .and_then(|c| UTIL.captures(c))
                        .and_then(|u| u[1].parse::<f64>().ok());
                    screen.gpus.push(SmiGpu {
                        index,
                        name: name_words.join(" "),
                        bus_id: above.get(1).and_then(|c| c.split_whitespace().next()).map(str::to_owned),
                        used_bytes: m[1].parse::<i64>().ok().map(|v| v * MIB),
                        total_bytes: m[2].parse::<i64>().ok().map(|v| v * MIB),
                        util_pct: util,
                    });
                }
            }
            j += 1;
        }
        if !screen.gpus.is_empty() {
            out.push(screen);
        }
        i = j.max(i + 1);
    }
    out
}

fn process_of(line: &str) -> Option<SmiProcess> {
    if let Some(c) = PROCESS.captures(line) {
        return Some(SmiProcess {
            gpu: c[1].parse().ok()?,
            pid: c[2].parse().ok()?,
            kind: c[3].to_owned(),
            name: c[4].trim().to_owned(),
            used_bytes: c[5].parse::<i64>().ok().map(|v| v * MIB),
        });
    }
    let c = PROCESS_NA.captures(line)?;
    Some(SmiProcess {
        gpu: c[1].parse().ok()?,
        pid: c[2].parse().ok()?,
        kind: c[3].to_owned(),
        name: c[4].trim().to_owned(),
        used_bytes: None,
    })
}

/// The screens as whole-GPU and per-process samples.
pub fn samples_of(screens: &[SmiScreen]) -> Result<GpuSampleLog, ImportError> {
    let mut rows = SampleRows::default();
    let mut gpus: Vec<GpuInfo> = Vec::new();
    let mut processes = Vec::new();
    for s in screens {
        let time_us = s.time_us.unwrap_or(0);
        for g in &s.gpus {
            rows.push(Sample {
                time_us,
                gpu: g.index,
                used_bytes: g.used_bytes,
                total_bytes: g.total_bytes,
                free_bytes: g.used_bytes.zip(g.total_bytes).map(|(u, t)| t - u),
                driver_reserved_bytes: None,
                util_gpu_pct: g.util_pct,
            });
            if !gpus.iter().any(|x| x.gpu == g.index) {
                gpus.push(GpuInfo {
                    gpu: g.index,
                    name: Some(g.name.clone()),
                    bus_id: g.bus_id.clone(),
                });
            }
        }
        for p in &s.processes {
            processes.push(ProcessSample {
                time_us,
                gpu: Some(p.gpu),
                bus_id: None,
                pid: p.pid,
                name: Some(p.name.clone()),
                used_bytes: p.used_bytes,
            });
        }
    }
    GpuSampleLog::from_rows(
        rows,
        gpus,
        processes,
        SampleClock::LocalNoZone,
        UsedMeaning::ExcludesDriverReserved,
        Vec::new(),
    )
}

#[cfg(test)]
mod tests;
