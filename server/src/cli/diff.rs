//! `memlens diff A B [--json]`: two snapshots (or two devices of one, `--device-a/--device-b`)
//! side by side, A − B — the peak difference split by category and by stack, reserved,
//! fragmentation and OOMs of each, and the per-iteration peaks.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use memlens_api::Comparison;

use crate::app::compare::compare_files;

use super::render::print_json;
use crate::text::gib;

#[derive(Args)]
pub struct DiffArgs {
    /// The first snapshot (A).
    pub a: PathBuf,
    /// The second snapshot (B); the same file as A compares two of its devices.
    pub b: PathBuf,
    /// A's device (default: its busiest).
    #[arg(long)]
    pub device_a: Option<i64>,
    /// B's device (default: its busiest).
    #[arg(long)]
    pub device_b: Option<i64>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Category rules, as for `memlens analyze`.
    #[arg(long, value_name = "FILE")]
    pub category_rules: Option<PathBuf>,
}

fn signed(b: i64) -> String {
    if b >= 0 {
        format!("+{}", gib(b))
    } else {
        format!("−{}", gib(-b))
    }
}

fn print_text(c: &Comparison) {
    println!("{}", c.headline);
    for (name, r) in [("A", &c.a), ("B", &c.b)] {
        let frag = r
            .fragmentation_at_peak
            .as_ref()
            .map_or("-".to_owned(), |f| format!("{:.2}", f.fragmentation_index));
        println!(
            "{name}  {}: peak allocated {}, reserved {}, fragmentation at the peak {frag}, OOMs {}",
            r.label,
            gib(r.peak_allocated_bytes),
            gib(r.peak_reserved_bytes),
            r.oom_count
        );
    }
    println!(
        "A − B  allocated {} ({} B), reserved {}",
        signed(c.peak_delta_bytes),
        c.peak_delta_bytes,
        signed(c.reserved_delta_bytes)
    );
    println!("by category (at each peak):");
    for d in &c.by_category {
        println!(
            "  {:<16} A {:>10}  B {:>10}  Δ {}",
            d.category.name(),
            gib(d.bytes_a),
            gib(d.bytes_b),
            signed(d.delta_bytes)
        );
    }
    println!("by stack (largest differences):");
    for d in c.by_stack.iter().take(10) {
        let only = match d.only_in {
            Some(memlens_api::Side::A) => "  [only in A]",
            Some(memlens_api::Side::B) => "  [only in B]",
            None => "",
        };
        let stack = d.stack_line().unwrap_or_else(|| "(no stack)".to_owned());
        println!(
            "  {:>11}  {} vs {} allocation(s)  {stack}{only}",
            signed(d.delta_bytes),
            d.count_a,
            d.count_b
        );
    }
    for (name, r) in [("A", &c.a), ("B", &c.b)] {
        if let Some(line) = step_peaks_line(&r.iteration_peaks) {
            println!("{name} {line}");
        }
    }
}

/// Each step's allocated peak, summarised: a few are listed, a long series is its lowest,
/// median and highest (`--json` has them all).
fn step_peaks_line(peaks: &[i64]) -> Option<String> {
    const LISTED: usize = 8;
    if peaks.is_empty() {
        return None;
    }
    if peaks.len() <= LISTED {
        let all: Vec<String> = peaks.iter().map(|&p| gib(p)).collect();
        return Some(format!("peak per iteration: {}", all.join(", ")));
    }
    let mut sorted = peaks.to_vec();
    sorted.sort_unstable();
    Some(format!(
        "peak per iteration ({} iterations): lowest {}, median {}, highest {}",
        peaks.len(),
        gib(sorted[0]),
        gib(sorted[sorted.len() / 2]),
        gib(sorted[sorted.len() - 1])
    ))
}

pub fn diff(args: DiffArgs) -> ExitCode {
    let compared = compare_files(
        (&args.a, args.device_a),
        (&args.b, args.device_b),
        args.category_rules.as_deref(),
    );
    let c = match compared {
        Ok(c) => c,
        Err(e) => {
            eprintln!("memlens: {e}");
            return ExitCode::from(2);
        }
    };
    if args.json {
        return print_json(&c);
    }
    print_text(&c);
    ExitCode::SUCCESS
}
