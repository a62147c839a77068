//! `memlens mcp`: the Model Context Protocol server for coding agents, over stdio
//! ([`crate::mcp`]). Logs go to stderr; stdout is the protocol's.

use clap::Args;
use std::process::ExitCode;

#[derive(Args)]
pub struct McpArgs {}

pub fn mcp(_args: McpArgs) -> ExitCode {
    crate::process::run_process(crate::mcp::serve_stdio())
}
