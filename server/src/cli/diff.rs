//! `memlens diff A B [--json]`: two snapshots (or two devices of one, `--device-a/--device-b`)
//! side by side, A − B — the peak difference split by category and by stack, reserved,
//! fragmentation and OOMs of each, and the per-iteration peaks.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use memlens_api::{Comparison, DeviceSummary, FileSummary};
use memlens_core::analysis::compare::{compare_runs, CompareSide, COMPARE_WIDTH};
use memlens_core::analysis::run::busiest_device;
use memlens_core::pipeline::{self, Input, KeepFrames};

use super::error::{CommandError, Unusable};
use super::render::{gib, print_json};

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

fn device_of(f: &FileSummary, wanted: Option<i64>) -> Result<&DeviceSummary, CommandError> {
    match wanted {
        Some(w) => f
            .devices
            .iter()
            .find(|d| d.device == w)
            .ok_or_else(|| CommandError::unusable(&f.file, Unusable::NoDevice(w))),
        None => busiest_device(f).ok_or_else(|| CommandError::unusable(&f.file, Unusable::NoDeviceWithAllocations)),
    }
}

/// The comparison of files `a` and `b` (A − B), each on its chosen device (default: its
/// busiest); the same path twice compares two devices of one file.
pub fn compare_files(
    (a, device_a): (&Path, Option<i64>),
    (b, device_b): (&Path, Option<i64>),
    category_rules: Option<&Path>,
) -> Result<Comparison, CommandError> {
    let rules = memlens_core::analysis::categories::FrameRules::load(category_rules)?;
    let same = a == b;
    let mut inputs = vec![Input::path(a)];
    if !same {
        inputs.push(Input::path(b));
    }
    let mut sink = KeepFrames {
        with_stacks: true,
        ..KeepFrames::default()
    };
    let out = pipeline::run_with(inputs, Default::default(), &rules, &mut sink)?;
    let n = if same { 1 } else { 2 };
    if out.files.len() != n {
        let not = if same { a } else { b };
        return Err(CommandError::unusable(
            not.display().to_string(),
            Unusable::NotASnapshot,
        ));
    }
    let side = |fi: usize, wanted: Option<i64>| -> Result<CompareSide<'_>, CommandError> {
        let f = &out.files[fi];
        let d = device_of(f, wanted)?;
        let frames = sink.files[fi]
            .iter()
            .find(|fr| fr.device == d.device)
            .ok_or_else(|| CommandError::unusable(&f.file, Unusable::NoFrames(d.device)))?;
        Ok(CompareSide {
            label: format!("{} · {}", f.file, memlens_api::device_label(d.device)),
            report: None,
            file: f,
            file_index: fi,
            device: d,
            frames,
            stacks: &sink.stacks[fi],
            rank: None,
        })
    };
    let a = side(0, device_a)?;
    let b = side(n - 1, device_b)?;
    Ok(compare_runs(&a, &b, COMPARE_WIDTH)?)
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
