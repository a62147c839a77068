//! `memlens whatif FILE... --batch-size N --set key=value … [--json]`: the predicted allocated
//! peak of each device under a scenario (the keys of `memlens_api::WhatIfParams`), with the
//! assumptions each prediction rests on.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use memlens_api::WhatIfParams;

use super::error::CommandError;
use super::render::print_json;
use crate::app::whatif::{predict, scenario_of};
use crate::text::gib;

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
fn scenario(args: &WhatIfArgs) -> Result<WhatIfParams, CommandError> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    for s in &args.set {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| CommandError::flag(format!("--set {s}"), "expected key=value"))?;
        pairs.push((k.trim().to_owned(), v.trim().to_owned()));
    }
    if let Some(b) = args.batch_size {
        pairs.push(("run_batch_size".into(), b.to_string()));
    }
    scenario_of(&pairs)
}

pub fn whatif(args: WhatIfArgs) -> ExitCode {
    let answer = match scenario(&args).and_then(|s| predict(&args.files, &s, args.category_rules.as_deref())) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("memlens: {e}");
            return ExitCode::from(2);
        }
    };
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
