//! `memlens analyze FILE... [--json]`: the core pipeline over files on disk, printed as text or
//! as the JSON the server stores.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::render::print_json;
use crate::app::analyze::analyze_files;
use crate::text::{render_gpu_log_text, render_run_text, render_text};

#[derive(Args)]
#[command(after_help = formats_help())]
pub struct AnalyzeArgs {
    /// Input files: allocator snapshots, Nsight exports and NVML logs of the same run (see the
    /// formats below).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Your own category rules for what the built-in evidence cannot place: `category: regex`
    /// lines matched against each frame (`file:line:function`), first match wins.
    #[arg(long, value_name = "FILE")]
    pub category_rules: Option<PathBuf>,
}

/// The format table, for `--help`.
fn formats_help() -> String {
    let mut s = String::from("Formats (recognised by content):\n");
    for f in memlens_api::FORMATS {
        s += &format!("  {:<24} {}\n", f.name, f.description);
    }
    s
}

pub fn analyze(args: AnalyzeArgs) -> ExitCode {
    let out = match analyze_files(&args.files, args.category_rules.as_deref()) {
        Ok(out) => out,
        Err(e) => {
            eprintln!("memlens: {e}");
            return ExitCode::from(2);
        }
    };
    if args.json {
        return print_json(&out);
    }
    for f in &out.files {
        print!("{}", render_text(f));
    }
    for g in &out.gpu_logs {
        print!("{}", render_gpu_log_text(g));
    }
    for s in &out.skipped {
        println!("{}: kept aside: {}", s.file, s.reason);
    }
    if let Some(r) = &out.run {
        print!("{}", render_run_text(r));
    }
    ExitCode::SUCCESS
}
