//! The `memlens` binary: a thin command line over `memlens-core`.
//!
//! `memlens analyze FILE... [--json]` imports each file, runs the analyses and prints a
//! readable summary (or JSON). Unreadable input exits non-zero with one line naming the file
//! and the problem. `memlens serve` runs the web app (see `memlens serve --help`).

use memlens::cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    memlens_core::infra::free_memory::one_arena_per_cpu();
    let args = cli::Cli::parse();
    if matches!(
        args.command,
        cli::Command::Analyze(_)
            | cli::Command::Diff(_)
            | cli::Command::Check(_)
            | cli::Command::Whatif(_)
            | cli::Command::Upload(_)
    ) {
        cli::end_quietly_when_stdout_closes();
    }
    match args.command {
        cli::Command::Analyze(a) => cli::analyze::analyze(a),
        cli::Command::Diff(a) => cli::diff::diff(a),
        cli::Command::Check(a) => cli::check::check(a),
        cli::Command::Mcp(_) => memlens::mcp::mcp(),
        cli::Command::Whatif(a) => cli::whatif::whatif(a),
        cli::Command::Plan(a) => cli::plan::plan(a),
        cli::Command::Upload(a) => cli::upload::upload(a),
        cli::Command::Serve(a) => memlens::serve::serve(a),
        cli::Command::Worker(a) => memlens::ingest::worker::worker(a),
        cli::Command::Healthcheck(a) => cli::healthcheck::healthcheck(a),
    }
}
