//! `memlens mcp`: a Model Context Protocol server over stdio (the official SDK, `rmcp`), so
//! that a coding agent can ask memlens what a run's memory did. Its [`tools`] call what the
//! other commands call; answers are bounded ([`bound`]); a tool's failure is an error answer
//! naming the file and the problem, never the end of the server. An answer is its short text,
//! its JSON as text, and the same JSON as `structuredContent` (MCP 2025-06-18). Logs go to
//! stderr; stdout is the protocol's.

pub mod bound;
pub mod tools;

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, InitializeResult,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;

use crate::process::StartupError;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};

#[derive(clap::Args)]
pub struct McpArgs {}

pub fn mcp(_args: McpArgs) -> std::process::ExitCode {
    crate::process::run_process(serve_stdio())
}

/// The server's one state: the tools it lists.
struct Memlens {
    tools: Vec<Tool>,
}

impl Memlens {
    fn new() -> Memlens {
        let tools = tools::catalogue()
            .into_iter()
            .map(|(name, description, schema)| {
                let schema = match schema {
                    serde_json::Value::Object(o) => o,
                    _ => serde_json::Map::new(),
                };
                Tool::new(name, description, Arc::new(schema))
            })
            .collect();
        Memlens { tools }
    }
}

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

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        let arguments = serde_json::Value::Object(request.arguments.unwrap_or_default());
        let answer = tokio::task::spawn_blocking(move || tools::call(&name, arguments))
            .await
            .unwrap_or_else(|e| Err(tools::ToolError::Failed(e)));
        Ok(match answer {
            // The short text first for clients that read text, the JSON as text after it (as
            // before), and the same JSON as structuredContent for those that read structure.
            Ok((text, json)) => {
                let mut answer =
                    CallToolResult::success(vec![ContentBlock::text(text), ContentBlock::text(json.to_string())]);
                answer.structured_content = json.is_object().then_some(json);
                answer
            }
            Err(e) => CallToolResult::error(vec![ContentBlock::text(e.to_string())]),
        }
        .into())
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
