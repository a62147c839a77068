//! `torch.cuda.memory_summary()` tables (`torch/cuda/memory.py`), 1.13's and 2.x's, abbreviated
//! or not: every line is `|` + a 75-character body + `|`, under a title naming the device, the
//! `CUDA OOMs` / `cudaMalloc retries` line, and one block per metric (`Allocated memory`,
//! `Active memory`, 2.x's `Requested memory`, `GPU reserved memory`, `Non-releasable memory`,
//! `Allocations`, …) with the columns `Cur Usage | Peak Usage | Tot Alloc | Tot Freed`.
//!
//! Byte cells are a whole number in a unit, 1.13's `B KB MB GB TB PB` or 2.x's `B KiB MiB GiB
//! TiB PiB` (binary either way), chosen per column and rounded down; count cells step by
//! thousands (`K`, `M`). Each is the printed value converted exactly. The `from large pool` /
//! `from small pool` rows are skipped: the `all` rows carry the numbers. Lines may carry a
//! log's prefix before the first `|` (a timestamp, torchrun's `[rankN]:`).

use memlens_api::{MemorySummaryFacts, SummaryRow};

use crate::error::ImportError;
use crate::evidence::MemorySummaryTable;
use crate::importers::common::sizes::{scaled, unit_bytes};
use crate::importers::common::text_lines::TextLine;
use crate::importers::read_evidence;
use crate::importers::{ImportOptions, Importer, Parsed};
use crate::source::{leading_text, Source};

pub struct MemorySummaryImporter;

pub static IMPORTER: MemorySummaryImporter = MemorySummaryImporter;

const TITLE: &str = "memory summary, device ID";

impl Importer for MemorySummaryImporter {
    /// The table's title within its first lines.
    fn sniff(&self, head: &[u8]) -> bool {
        leading_text(head).lines().take(4).any(|l| l.contains(TITLE) && l.contains('|'))
    }

    fn import(&self, source: Source, _options: &ImportOptions) -> Result<Parsed, ImportError> {
        Ok(Parsed::Text(Box::new(read_evidence(source)?)))
    }
}

/// The cells of a table line (between its `|`s), or `None` for a line of no table.
fn cells(line: &str) -> Option<Vec<&str>> {
    let start = line.find('|')?;
    let end = line.rfind('|')?;
    (end > start).then(|| line[start + 1..end].split('|').map(str::trim).collect())
}

/// One cell: a byte count (`12 GiB`, `0 B`) or a count (`1234`, `12 K`).
fn cell_value(cell: &str) -> Option<i64> {
    let mut parts = cell.split_whitespace();
    let number = parts.next()?;
    match parts.next() {
        None => number.parse().ok(),
        Some("K") => number.parse::<i64>().ok().map(|n| n * 1000),
        Some("M") => number.parse::<i64>().ok().map(|n| n * 1_000_000),
        Some(unit) => scaled(number, unit_bytes(unit)?),
    }
}

fn row(values: &[&str]) -> Option<SummaryRow> {
    let v: Vec<i64> = values.iter().map(|c| cell_value(c)).collect::<Option<_>>()?;
    (v.len() == 4).then(|| SummaryRow {
        current: v[0],
        peak: v[1],
        allocated: v[2],
        freed: v[3],
    })
}

/// Every memory summary table of the lines.
pub fn find_memory_summaries(lines: &[TextLine]) -> Vec<MemorySummaryTable> {
    let mut out: Vec<MemorySummaryTable> = Vec::new();
    let mut current: Option<MemorySummaryTable> = None;
    // The metric whose `all` row comes next (its label line is the row itself in the table).
    for line in lines {
        let text = &line.text;
        if let Some(at) = text.find(TITLE) {
            if let Some(t) = current.take() {
                out.push(t);
            }
            let device = text[at + TITLE.len()..]
                .split_whitespace()
                .next()
                .and_then(|d| d.trim_end_matches('|').parse().ok())
                .unwrap_or(0);
            current = Some(MemorySummaryTable {
                line: line.number,
                device,
                facts: MemorySummaryFacts::default(),
            });
            continue;
        }
        let Some(t) = current.as_mut() else { continue };
        let Some(c) = cells(text) else {
            // The table ended.
            out.extend(current.take());
            continue;
        };
        if let Some(first) = c.first() {
            if let Some(n) = first.strip_prefix("CUDA OOMs:") {
                t.facts.num_ooms = n.trim().parse().unwrap_or(0);
                if let Some(r) = c.get(1).and_then(|x| x.strip_prefix("cudaMalloc retries:")) {
                    t.facts.num_alloc_retries = r.trim().parse().unwrap_or(0);
                }
                continue;
            }
        }
        if c.len() != 5 {
            continue;
        }
        let label = c[0].split(" from ").next().unwrap_or("").trim();
        let target = match label {
            "Allocated memory" => &mut t.facts.allocated,
            "Active memory" => &mut t.facts.active,
            "Requested memory" => &mut t.facts.requested,
            "GPU reserved memory" => &mut t.facts.reserved,
            "Non-releasable memory" => &mut t.facts.non_releasable,
            "Allocations" => &mut t.facts.allocations,
            "GPU reserved segments" => &mut t.facts.segments,
            _ => continue,
        };
        // The metric's first row is its `all` row; pool rows are labelled `from … pool`.
        if target.is_none() && !c[0].contains("from ") {
            *target = row(&c[1..]);
        }
    }
    out.extend(current);
    out.retain(|t| t.facts.allocated.is_some() || t.facts.reserved.is_some());
    out
}

#[cfg(test)]
mod tests;
