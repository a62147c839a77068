//! `memlens mcp`: a Model Context Protocol server over stdio (the official SDK, `rmcp`), so
//! that a coding agent can ask memlens what a run's memory did. Its [`tools`] are the requests of
//! [`crate::app`], declared with rmcp's tool macros and schemas derived from the request and
//! answer types; answers are bounded ([`bound`]); a tool's failure is an error answer naming
//! the file and the problem, never the end of the server. An answer is its short text, its JSON
//! as text, and the same JSON as `structuredContent` (MCP 2025-06-18). Logs go to stderr; stdout
//! is the protocol's.

pub mod bound;
pub mod tools;

use rmcp::model::{Implementation, InitializeResult, ServerCapabilities, ServerConfig};
use rmcp::{tool_handler, ServerHandler, ServiceExt};

use crate::process::StartupError;
use tools::Memlens;

/// `memlens mcp`: serves until the client goes.
pub fn mcp() -> std::process::ExitCode {
    crate::process::run_process(serve_stdio())
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Memlens {
    fn get_info(&self) -> ServerConfig {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("memlens", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "memlens explains GPU memory of PyTorch training runs from allocator snapshots, OOM texts, \
                 Nsight exports and NVML logs: start with analyze_files (or explain_oom for a pasted error), \
                 compare_runs or check for a change, what_if for another setting, plan before a run (from a model's config.json).",
            )
    }
}

/// Serves the tools on stdin/stdout until the client goes.
pub async fn serve_stdio() -> Result<(), StartupError> {
    let running = Memlens::new()
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| StartupError::Mcp(e.to_string()))?;
    running.waiting().await.map_err(|e| StartupError::Mcp(e.to_string()))?;
    Ok(())
}
