//! `memlens whatif FILE... --batch-size N --set key=value … [--json]`: the predicted allocated
//! peak of each device under a scenario (the keys of `memlens_api::WhatIfParams`), with the
//! assumptions each prediction rests on.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use memlens_api::{WhatIfOutput, WhatIfParams};
use memlens_core::analysis::whatif::what_if_file;
use memlens_core::pipeline::{self, Input, KeepFrames};

use super::render::{gib, print_json};

#[derive(Args)]
pub struct WhatIfArgs {
    /// Snapshot files of the run (and NVML logs of it, for the memory outside the allocator).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// The batch size the run used.
    #[arg(long)]
    pub batch_size: Option<u64>,
    /// A change to predict, `key=value`: batch_size=16, activation_checkpointing=true,
    /// activations=bf16, optimizer=sgd_momentum, zero_stage=3, gpus=8, optimizer_offload=true,
    /// gpu_memory_bytes=85899345920 (for the largest batch that fits).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Category rules, as for `memlens analyze`.
    #[arg(long, value_name = "FILE")]
    pub category_rules: Option<PathBuf>,
}

/// The scenario from `--set` pairs (the same keys and values as the HTTP query).
fn scenario(args: &WhatIfArgs) -> Result<WhatIfParams, String> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    for s in &args.set {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| format!("--set {s}: expected key=value"))?;
        pairs.push((k.trim().to_owned(), v.trim().to_owned()));
    }
    if let Some(b) = args.batch_size {
        pairs.push(("run_batch_size".into(), b.to_string()));
    }
    let parse = |pairs: &[(String, String)]| -> Result<WhatIfParams, String> {
        let query = serde_urlencoded::to_string(pairs).map_err(|e| e.to_string())?;
        serde_urlencoded::from_str(&query).map_err(|e| e.to_string())
    };
    parse(&pairs).map_err(|e| {
        // Name the setting at fault: the parser's message does not.
        match pairs.iter().find(|p| parse(std::slice::from_ref(*p)).is_err()) {
            Some((k, v)) => format!("--set {k}={v}: {e}"),
            None => format!("--set: {e}"),
        }
    })
}

pub fn whatif(args: WhatIfArgs) -> ExitCode {
    let s = match scenario(&args) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("memlens: {e}");
            return ExitCode::from(2);
        }
    };
    let rules = match memlens_core::analysis::categories::FrameRules::load(args.category_rules.as_deref()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("memlens: {e}");
            return ExitCode::from(2);
        }
    };
    let mut sink = KeepFrames::default();
    let inputs = args.files.iter().map(|p| Input::path(p)).collect();
    let out = match pipeline::run_with(inputs, Default::default(), &rules, &mut sink) {
        Ok(out) => out,
        Err(e) => {
            eprintln!("memlens: {e}");
            return ExitCode::from(2);
        }
    };
    let mut files = Vec::new();
    for (f, frames) in out.files.iter().zip(&sink.files) {
        match what_if_file(f, frames, &out.gpu_logs, &s) {
            Ok(w) => files.push(w),
            Err(e) => {
                eprintln!("memlens: {}: {e}", f.file);
                return ExitCode::FAILURE;
            }
        }
    }
    let answer = WhatIfOutput { files };
    if args.json {
        return print_json(&answer);
    }
    for f in &answer.files {
        println!("{}", f.file);
        for d in &f.devices {
            println!(
                "  device {}: peak allocated {} → predicted {}",
                d.device,
                gib(d.peak_allocated_bytes),
                gib(d.predicted_peak_allocated_bytes)
            );
            if let Some(b) = d.max_batch_size {
                println!("    largest batch that fits: {b}");
            }
            for a in &d.assumptions {
                println!("    assumes: {a}");
            }
        }
    }
    ExitCode::SUCCESS
}
