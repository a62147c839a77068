//! `cargo xtask <task> [args…]`: the developers' tools that are not the product, under one
//! command (in the manner of rust-analyzer's `xtask`), each run from the workspace root:
//!
//! - `bundle [--release]`: the web UI into `dist/` (`memlens-bundle`, what `scripts/start`, CI
//!   and the images run);
//! - `docs`: the documents written from code (`docs/formats.md` from the format table) written
//!   anew, as `tests/tests/docs.rs` checks them;
//! - `measure-cold start|ci`: a newcomer's first build, from a fresh clone with empty caches
//!   (`scripts/measure-cold`, BENCHMARKS.md "Build time");
//! - `gen-snapshot OUT [flags]`: a generated allocator snapshot of any size (`scripts/gen-snapshot`);
//! - `bench-steps [flags]`: `memlens-bench` over loops of 1k to 16k steps (`scripts/bench-steps`);
//! - `bench-peers [flags]`: memlens against its peers on the bench file (`scripts/bench-peers`).
//!
//! Std only, so that it builds in seconds: each task runs the tool that does the work, with the
//! arguments given after the task, and exits with its status.

use std::path::PathBuf;
use std::process::{Command, ExitCode};

/// One task: its name, what it runs (a program and its first arguments, from the workspace
/// root), and one line of help.
struct Task {
    name: &'static str,
    program: &'static str,
    args: &'static [&'static str],
    env: &'static [(&'static str, &'static str)],
    help: &'static str,
}

const TASKS: &[Task] = &[
    Task {
        name: "bundle",
        program: "cargo",
        args: &["run", "--locked", "--profile", "bundle", "-p", "memlens-bundle", "--"],
        env: &[],
        help: "build the web UI into dist/ ([--release])",
    },
    Task {
        name: "docs",
        program: "cargo",
        args: &["test", "--locked", "-p", "memlens-tests", "--test", "docs"],
        env: &[("MEMLENS_WRITE_DOCS", "1")],
        help: "write docs/formats.md (and the other documents derived from code) anew",
    },
    Task {
        name: "measure-cold",
        program: "scripts/measure-cold",
        args: &[],
        env: &[],
        help: "a newcomer's first build from a fresh clone (start | ci)",
    },
    Task {
        name: "gen-snapshot",
        program: "scripts/gen-snapshot",
        args: &[],
        env: &[],
        help: "write a generated allocator snapshot (OUT [--entries N] [--steps N] …)",
    },
    Task {
        name: "bench-steps",
        program: "scripts/bench-steps",
        args: &[],
        env: &[],
        help: "memlens-bench over loops of 1k..16k steps (the doubling rule)",
    },
    Task {
        name: "bench-peers",
        program: "scripts/bench-peers",
        args: &[],
        env: &[],
        help: "memlens against its peers on the bench file",
    },
];

/// The workspace root: this crate's folder's parent.
fn root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.parent().map(PathBuf::from).unwrap_or(here)
}

fn usage() -> String {
    let mut s = String::from("usage: cargo xtask <task> [args…]\n\ntasks:\n");
    for t in TASKS {
        s += &format!("  {:<14} {}\n", t.name, t.help);
    }
    s
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(name) = args.next() else {
        eprint!("{}", usage());
        return ExitCode::from(2);
    };
    if name == "help" || name == "--help" || name == "-h" {
        print!("{}", usage());
        return ExitCode::SUCCESS;
    }
    let Some(task) = TASKS.iter().find(|t| t.name == name) else {
        eprint!("xtask: no task {name:?}\n\n{}", usage());
        return ExitCode::from(2);
    };
    let root = root();
    let program = if task.program.contains('/') {
        root.join(task.program).into_os_string()
    } else {
        task.program.into()
    };
    let status = Command::new(&program)
        .args(task.args)
        .args(args)
        .envs(task.env.iter().copied())
        .current_dir(&root)
        .status();
    match status {
        Ok(s) if s.success() => ExitCode::SUCCESS,
        Ok(s) => ExitCode::from(s.code().and_then(|c| u8::try_from(c).ok()).unwrap_or(1)),
        Err(e) => {
            eprintln!("xtask {name}: cannot run {}: {e}", program.to_string_lossy());
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every task's script exists where the task says (a renamed script fails here first), and no
    /// two tasks share a name.
    #[test]
    fn every_task_runs_a_tool_that_exists() {
        for t in TASKS.iter().filter(|t| t.program.contains('/')) {
            assert!(root().join(t.program).is_file(), "{}: {} is missing", t.name, t.program);
        }
        let mut names: Vec<&str> = TASKS.iter().map(|t| t.name).collect();
        names.sort_unstable();
        let count = names.len();
        names.dedup();
        assert_eq!(names.len(), count, "two tasks of one name");
    }
}
