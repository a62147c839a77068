//! DCGM exporter metrics (`dcgm-exporter`'s Prometheus text, a file of concatenated scrapes):
//! `DCGM_FI_DEV_FB_USED`, `DCGM_FI_DEV_FB_FREE` and `DCGM_FI_DEV_FB_RESERVED` in MiB, labelled
//! by `gpu` (with `UUID`, `modelName`, `pci_bus_id`, `Hostname`), as whole-GPU samples beside
//! snapshots. Lines are read by `prometheus-parse`. Samples carry their scrape's timestamp
//! (ms); without timestamps the scrapes are numbered one second apart from the epoch, which
//! says nothing about when they were taken (noted, and never lined up with snapshots). The
//! same GPU twice at one instant is an error naming the line.

use std::collections::BTreeMap;

use prometheus_parse::LineInfo;

use crate::error::ImportError;
use crate::importers::common::lines::{line_error, LineReader};
use crate::importers::{ImportOptions, Parsed, Importer};
use crate::samples::{GpuInfo, GpuSampleLog, Sample, SampleRows, UsedMeaning};
use crate::source::{leading_text, Source};
use memlens_api::SampleClock;

pub struct DcgmImporter;

pub static IMPORTER: DcgmImporter = DcgmImporter;

const MIB: f64 = (1u64 << 20) as f64;

/// The value of `key="…"` in a label list.
fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    let mut rest = labels;
    while let Some(eq) = rest.find('=') {
        let name = rest[..eq].trim().trim_start_matches(',').trim();
        let after = rest[eq + 1..].trim_start();
        let value = after.strip_prefix('"')?;
        let end = value.find('"')?;
        if name == key {
            return Some(&value[..end]);
        }
        rest = &value[end + 1..];
    }
    None
}

/// One GPU's values at one instant, as they arrive.
#[derive(Default)]
struct Reading {
    used: Option<i64>,
    free: Option<i64>,
    reserved: Option<i64>,
    line: usize,
}

impl Importer for DcgmImporter {
    fn sniff(&self, head: &[u8]) -> bool {
        let t = leading_text(head);
        t.starts_with("# HELP DCGM_") || t.starts_with("# TYPE DCGM_") || t.starts_with("DCGM_FI_")
    }

    fn import(&self, source: Source, _options: &ImportOptions) -> Result<Parsed, ImportError> {
        let mut lines = LineReader::new(source.reader);
        // (time µs, gpu) → values; a scrape without timestamps is numbered by `scrape`.
        let mut readings: BTreeMap<(i64, i32), Reading> = BTreeMap::new();
        let mut gpus: BTreeMap<i32, GpuInfo> = BTreeMap::new();
        let (mut scrape, mut stamped, mut unstamped) = (0i64, false, false);
        let mut seen_in_scrape: std::collections::HashSet<(String, i32)> = std::collections::HashSet::new();
        while let Some(line) = lines.next_line()? {
            let LineInfo::Sample { metric_name, labels, value, timestamp } = LineInfo::parse(line.text) else {
                continue;
            };
            let field = match metric_name {
                "DCGM_FI_DEV_FB_USED" => 0,
                "DCGM_FI_DEV_FB_FREE" => 1,
                "DCGM_FI_DEV_FB_RESERVED" => 2,
                _ => continue,
            };
            let labels = labels.unwrap_or("");
            let gpu: i32 = label(labels, "gpu")
                .and_then(|g| g.parse().ok())
                .ok_or_else(|| line_error(line.number, format!("{metric_name} without a numeric `gpu` label")))?;
            let mib: f64 = value
                .parse()
                .map_err(|_| line_error(line.number, format!("`{value}` is not a number")))?;
            let time_us = match timestamp {
                Some(ms) => {
                    stamped = true;
                    ms.parse::<i64>()
                        .map_err(|_| line_error(line.number, format!("timestamp `{ms}` is not milliseconds")))?
                        .saturating_mul(1000)
                }
                None => {
                    unstamped = true;
                    // A metric met again for the same GPU starts the next scrape.
                    if !seen_in_scrape.insert((metric_name.to_owned(), gpu)) {
                        scrape += 1;
                        seen_in_scrape.clear();
                        seen_in_scrape.insert((metric_name.to_owned(), gpu));
                    }
                    scrape * 1_000_000
                }
            };
            gpus.entry(gpu).or_insert_with(|| GpuInfo {
                gpu,
                name: label(labels, "modelName").map(str::to_owned),
                bus_id: label(labels, "pci_bus_id").map(str::to_owned),
            });
            let r = readings.entry((time_us, gpu)).or_default();
            let slot = match field {
                0 => &mut r.used,
                1 => &mut r.free,
                _ => &mut r.reserved,
            };
            if slot.is_some() {
                return Err(line_error(
                    line.number,
                    format!("{metric_name} of GPU {gpu} twice at one instant (line {} has it too)", r.line),
                ));
            }
            *slot = Some((mib * MIB) as i64);
            r.line = line.number;
        }
        if stamped && unstamped {
            return Err(ImportError::Log(
                "DCGM metrics: some samples have timestamps and some do not".into(),
            ));
        }
        let mut rows = SampleRows::default();
        for ((time_us, gpu), r) in &readings {
            rows.push(Sample {
                time_us: *time_us,
                gpu: *gpu,
                used_bytes: r.used,
                free_bytes: r.free,
                driver_reserved_bytes: r.reserved,
                total_bytes: match (r.used, r.free, r.reserved) {
                    (Some(u), Some(f), res) => Some(u + f + res.unwrap_or(0)),
                    _ => None,
                },
                util_gpu_pct: None,
            });
        }
        let mut tables = GpuSampleLog::from_rows(
            rows,
            gpus.into_values().collect(),
            Vec::new(),
            SampleClock::Epoch,
            UsedMeaning::ExcludesDriverReserved,
            Vec::new(),
        )?;
        if unstamped {
            tables
                .skipped_lines
                .push("no timestamps: scrapes numbered one second apart from the epoch".into());
        }
        Ok(Parsed::GpuSamples(Box::new(tables)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_read_by_name() {
        let l = r#"gpu="1",UUID="GPU-0a",modelName="NVIDIA H200",Hostname="vm""#;
        assert_eq!(label(l, "gpu"), Some("1"));
        assert_eq!(label(l, "modelName"), Some("NVIDIA H200"));
        assert_eq!(label(l, "Hostname"), Some("vm"));
        assert_eq!(label(l, "device"), None);
    }
}
