//! The command line: one file per command, each a thin layer over `memlens-core` or the server.
//! `analyze` ([`analyze`]), `diff` ([`diff`]), `check` ([`check`]), `mcp` ([`crate::mcp`]), `whatif` ([`whatif`]), `plan` ([`plan`]), `upload` ([`upload`]), `serve` ([`crate::serve`]), `worker` ([`crate::ingest::worker`]), `healthcheck`
//! ([`healthcheck`]);
//! [`render`] is the text output of `analyze`; [`error`] what a command fails with. What a
//! command does, beyond reading its arguments and rendering its answer, is the application
//! layer's ([`crate::app`]).

/// What a command fails with: the application layer's errors ([`crate::app::error`]).
pub use crate::app::error;

pub mod analyze;
pub mod check;
pub mod diff;
pub mod healthcheck;
pub mod plan;
pub mod render;
pub mod upload;
pub mod whatif;

use clap::{Parser, Subcommand};

/// Lets a closed standard output end the process quietly, as other command-line tools do (`memlens
/// analyze --json f | head`): Rust ignores SIGPIPE, so each `println!` after the reader left
/// panicked with a backtrace. Only for the commands that print and end, never `serve` or
/// `worker`, whose closed sockets must not end the process.
pub fn end_quietly_when_stdout_closes() {
    #[cfg(unix)]
    // SAFETY: restores the signal's default action before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[derive(Parser)]
#[command(
    name = "memlens",
    version,
    about = "Explains GPU memory: PyTorch allocator snapshots, Nsight exports, NVML logs"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Analyse trace files and print a summary.
    Analyze(analyze::AnalyzeArgs),
    /// Compare two snapshots (or two devices of one): the peak difference by category and stack.
    Diff(diff::DiffArgs),
    /// Fail (exit 1) when a run's memory grew past limits from a baseline's: a regression gate
    /// for CI.
    Check(check::CheckArgs),
    /// Predict the allocated peak under another batch size, checkpointing, optimizer or sharding.
    Whatif(whatif::WhatIfArgs),
    /// Plan before you run: a training step's memory from a model's Hugging Face config.json,
    /// optionally calibrated by a measured run.
    Plan(plan::PlanArgs),
    /// Serve memlens' analyses to a coding agent: a Model Context Protocol server over stdio.
    Mcp(McpArgs),
    /// Upload files to a memlens server as one report and print its share link.
    Upload(upload::UploadArgs),
    /// Serve the web app and its API.
    Serve(crate::serve::ServeArgs),
    /// Process uploaded reports from a shared (Postgres + S3) store; run any number.
    Worker(crate::ingest::worker::WorkerArgs),
    /// Exit 0 when the server at `--bind` answers `GET /healthz` (for container health checks).
    Healthcheck(healthcheck::HealthArgs),
}

/// `memlens mcp` takes no flags: it serves the MCP tools on stdin and stdout ([`crate::mcp`]).
#[derive(clap::Args)]
pub struct McpArgs {}
