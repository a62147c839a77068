//! The tools, declared with rmcp's `#[tool]` macros: each one a request type of [`crate::app`]
//! (its input schema derived from that type by `schemars`) and the answer type it returns (its
//! output schema, derived from the same `memlens-api` type the HTTP API and `--json` serve). A
//! tool parses its arguments, asks the application layer, and answers a short text first, then
//! its JSON within [`MAX_ANSWER_BYTES`] (also as `structuredContent`); a tool that cannot do what
//! it is asked answers an error naming the file or the argument at fault, and the server goes on.

use std::sync::Arc;
use std::time::Duration;

use memlens_api::{AnalyzeOutput, CheckOutcome, Comparison, WhatIfOutput};
use rmcp::handler::server::tool::{schema_for_input, schema_for_output, ToolRouter};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject};
use rmcp::{tool, tool_router};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::bound::{bounded_json, MAX_ANSWER_BYTES};
use crate::app::analyze::{AnalyzeRequest, ExplainTextRequest};
use crate::app::check::CheckSpec;
use crate::app::compare::CompareRequest;
use crate::app::error::CommandError;
use crate::app::plan::{PlanAnswer, PlanRequest};
use crate::app::source::{report_at, SourceError};
use crate::app::whatif::WhatIfRequest;
use crate::text::plan::{render_plan, render_serving_plan};
use crate::text::{gib, render_gpu_log_text, render_run_text, render_text};

/// Why a tool could not answer: told to the client as the tool's error, naming the file or
/// argument at fault.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("arguments: {0}")]
    Arguments(serde_json::Error),
    #[error(transparent)]
    Command(#[from] CommandError),
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error("the answer: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the answer does not fit")]
    TooLarge,
    /// The tool's thread panicked or was cancelled.
    #[error("the tool failed: {0}")]
    Failed(tokio::task::JoinError),
}

/// A request with the bound every list of its answer is cut to.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Bounded<T> {
    #[serde(flatten)]
    request: T,
    /// Lists longer than this are cut to their first items; each cut list says so beside it
    /// (`<key>_cut`).
    #[serde(default = "default_max_list")]
    #[schemars(range(min = 1))]
    max_list: usize,
}

fn default_max_list() -> usize {
    12
}

/// What a tool answers: its short text, and its JSON cut to fit.
struct Reply {
    text: String,
    json: Value,
}

impl Reply {
    /// `value` within the answer's budget, its lists cut to `max_list`, after `text`.
    fn new(text: String, value: &impl serde::Serialize, max_list: usize) -> Result<Reply, ToolError> {
        let v = serde_json::to_value(value)?;
        let json = bounded_json(&v, max_list, MAX_ANSWER_BYTES - 4096).ok_or(ToolError::TooLarge)?;
        Ok(Reply {
            text,
            json: serde_json::from_str(&json)?,
        })
    }

    /// A report's answer: its text summary, then its JSON.
    fn report(out: &AnalyzeOutput, max_list: usize) -> Result<Reply, ToolError> {
        Reply::new(summary_text(out), out, max_list)
    }
}

fn parse<T: DeserializeOwned>(arguments: JsonObject) -> Result<T, ToolError> {
    serde_json::from_value(Value::Object(arguments)).map_err(ToolError::Arguments)
}

/// Runs a tool's work off the protocol's thread (file analyses block) and makes its answer: the
/// short text first for clients that read text, the JSON as text after it, and the same JSON as
/// `structuredContent` for those that read structure; or the error, as the tool's error.
async fn answer(
    arguments: JsonObject,
    work: impl FnOnce(JsonObject) -> Result<Reply, ToolError> + Send + 'static,
) -> CallToolResult {
    let result = tokio::task::spawn_blocking(move || work(arguments))
        .await
        .unwrap_or_else(|e| Err(ToolError::Failed(e)));
    match result {
        Ok(Reply { text, json }) => {
            let mut answer =
                CallToolResult::success(vec![ContentBlock::text(text), ContentBlock::text(json.to_string())]);
            answer.structured_content = json.is_object().then_some(json);
            answer
        }
        Err(e) => CallToolResult::error(vec![ContentBlock::text(e.to_string())]),
    }
}

/// The text summary of a report: each file's verdict and numbers, the run, the logs.
fn summary_text(out: &AnalyzeOutput) -> String {
    let mut s = String::new();
    for f in &out.files {
        s += &render_text(f);
    }
    for g in &out.gpu_logs {
        s += &render_gpu_log_text(g);
    }
    if let Some(r) = &out.run {
        s += &render_run_text(r);
    }
    for k in &out.skipped {
        s += &format!("{}: kept aside: {}\n", k.file, k.reason);
    }
    // The summary is a lead, not the whole: the JSON has the rest.
    s.chars().take(6_000).collect()
}

/// A request type's input schema (an object's, as MCP requires: every request here is a struct).
fn input<T: schemars::JsonSchema + std::any::Any>() -> Arc<JsonObject> {
    schema_for_input::<T>().unwrap_or_else(|e| panic!("{}: {e}", std::any::type_name::<T>()))
}

/// A comparison's output schema: [`Comparison`]'s without `timeline`, which the tool leaves out
/// (both lines bucketed for drawing: no use to a model, and most of the bytes).
fn comparison_schema() -> Arc<JsonObject> {
    let mut schema = (*schema_for_output::<Comparison>()).clone();
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        properties.remove("timeline");
    }
    if let Some(Value::Array(required)) = schema.get_mut("required") {
        required.retain(|k| k != "timeline");
    }
    Arc::new(schema)
}

/// A plan's output schema: a training plan or a serving plan, both objects (said at the root so
/// that clients of every protocol version take it as an object's schema).
fn plan_schema() -> Arc<JsonObject> {
    let mut schema = (*schema_for_output::<PlanAnswer>()).clone();
    schema.insert("type".into(), Value::String("object".into()));
    Arc::new(schema)
}

/// The server's state: the tools it routes.
#[derive(Clone)]
pub struct Memlens {
    pub(super) tool_router: ToolRouter<Memlens>,
}

impl Default for Memlens {
    fn default() -> Memlens {
        Memlens::new()
    }
}

#[tool_router]
impl Memlens {
    pub fn new() -> Memlens {
        Memlens {
            tool_router: Self::tool_router(),
        }
    }

    #[tool(
        description = "Analyse GPU memory files of one training run: PyTorch CUDA allocator snapshots (torch.cuda.memory._dump_snapshot pickles), Nsight Systems exports, NVML/nvidia-smi logs, OOM error texts. Answers what the peak is made of (parameters, gradients, optimizer state, activations, temporaries by category and by stack), the OOMs with their cause and what to change, leaks, fragmentation, and for several ranks the worst one. The same JSON as `memlens analyze --json`, after a short text summary.",
        input_schema = input::<Bounded<AnalyzeRequest>>(),
        output_schema = schema_for_output::<AnalyzeOutput>()
    )]
    async fn analyze_files(&self, Parameters(arguments): Parameters<JsonObject>) -> CallToolResult {
        answer(arguments, |a| {
            let a: Bounded<AnalyzeRequest> = parse(a)?;
            let out = crate::app::analyze::analyze(&a.request)?;
            Reply::report(&out, a.max_list)
        })
        .await
    }

    #[tool(
        description = "Explain a CUDA out-of-memory failure from pasted text: the OOM error message, a training log holding it, torch.cuda.memory_summary() output or an nvidia-smi screen. Answers each OOM found: what was asked for, what was free and reserved, whether memory was fragmented or held by another process or a cap, and what to change.",
        input_schema = input::<Bounded<ExplainTextRequest>>(),
        output_schema = schema_for_output::<AnalyzeOutput>()
    )]
    async fn explain_oom(&self, Parameters(arguments): Parameters<JsonObject>) -> CallToolResult {
        answer(arguments, |a| {
            let a: Bounded<ExplainTextRequest> = parse(a)?;
            let out = crate::app::analyze::explain_text(&a.request)?;
            Reply::report(&out, a.max_list)
        })
        .await
    }

    #[tool(
        description = "Compare two allocator snapshots (A − B): the allocated peak's difference to the byte, split by category and by stack (matched on user frames), reserved memory and fragmentation of each, and each iteration's peak. Answers a one-line verdict first.",
        input_schema = input::<Bounded<CompareRequest>>(),
        output_schema = comparison_schema()
    )]
    async fn compare_runs(&self, Parameters(arguments): Parameters<JsonObject>) -> CallToolResult {
        answer(arguments, |a| {
            let a: Bounded<CompareRequest> = parse(a)?;
            let c = crate::app::compare::compare(&a.request)?;
            let mut v = serde_json::to_value(&c)?;
            if let Some(o) = v.as_object_mut() {
                o.remove("timeline");
            }
            let text = format!(
                "{}\nA − B: allocated peak {} B, reserved {} B",
                c.headline, c.peak_delta_bytes, c.reserved_delta_bytes
            );
            Reply::new(text, &v, a.max_list)
        })
        .await
    }

    #[tool(
        description = "Predict a measured run's allocated peak under another setting: batch size, activation checkpointing, activation dtype, optimizer, ZeRO stage and GPU count, optimizer offload; with gpu_memory_bytes also the largest batch that fits. Each prediction lists the assumptions it rests on.",
        input_schema = input::<WhatIfRequest>(),
        output_schema = schema_for_output::<WhatIfOutput>()
    )]
    async fn what_if(&self, Parameters(arguments): Parameters<JsonObject>) -> CallToolResult {
        answer(arguments, |a| {
            let a: WhatIfRequest = parse(a)?;
            let out = crate::app::whatif::what_if(&a)?;
            let mut text = String::new();
            for f in &out.files {
                for d in &f.devices {
                    text += &format!(
                        "{} device {}: peak allocated {} → predicted {}{}\n",
                        f.file,
                        d.device,
                        gib(d.peak_allocated_bytes),
                        gib(d.predicted_peak_allocated_bytes),
                        d.max_batch_size
                            .map_or(String::new(), |b| format!("; largest batch that fits: {b}"))
                    );
                }
            }
            Reply::new(text, &out, default_max_list())
        })
        .await
    }

    #[tool(
        description = "Plan a training run's GPU memory before running it, from the model's Hugging Face config.json or a bundled model's name (`model`: meta-llama/Llama-3.1-8B, qwen3-8b, mixtral-8x7b, … — Llama 2/3/3.1/3.2/3.3, Mistral, Mixtral, Qwen2.5, Qwen3, Gemma 2/3, Phi-3/4, DeepSeek V2-Lite/V3, OLMo 2, SmolLM2, GPT-2, Pythia, Falcon): exact parameter count, the peak by category (parameters, gradients, optimizer state, activations, temporaries), whether it fits a GPU and the largest batch and sequence that do. Calibrated by a snapshot of a run of the same model when `calibrate` names one (then run_batch_size and run_seq_len are needed). With `serve`, a vLLM or SGLang server's startup instead. Each number lists the assumptions it rests on.",
        input_schema = input::<PlanRequest>(),
        output_schema = plan_schema()
    )]
    async fn plan(&self, Parameters(arguments): Parameters<JsonObject>) -> CallToolResult {
        answer(arguments, |a| {
            let request = PlanRequest::from_json(a)?;
            Ok(match crate::app::plan::plan(&request)? {
                PlanAnswer::Training(p) => Reply {
                    text: render_plan(&p),
                    json: serde_json::to_value(&p)?,
                },
                PlanAnswer::Serving(p) => Reply {
                    text: render_serving_plan(&p),
                    json: serde_json::to_value(&p)?,
                },
            })
        })
        .await
    }

    #[tool(
        description = "Check a run's memory against a baseline, as a CI gate would: passed or regression, the allocated and reserved peaks' change, each category's, the stacks that moved most, and which limits were broken. Each side is a snapshot path or a memlens report link (http…/r/ID); or the baseline is a job's last good run (http…/j/ID).",
        input_schema = input::<CheckSpec>(),
        output_schema = schema_for_output::<CheckOutcome>()
    )]
    async fn check(&self, Parameters(arguments): Parameters<JsonObject>) -> CallToolResult {
        answer(arguments, |a| {
            // An agent waits less than CI for a report being analysed.
            let request = parse::<CheckSpec>(a)?.request(Duration::from_secs(120))?;
            let outcome = crate::app::check::check(&request)?;
            Reply::new(outcome.verdict.clone(), &outcome, default_max_list())
        })
        .await
    }

    #[tool(
        description = "Read a report from a memlens server by its share link (http…/r/ID): the same summary as analyze_files, for a run someone uploaded.",
        input_schema = input::<Bounded<OpenReportRequest>>(),
        output_schema = schema_for_output::<AnalyzeOutput>()
    )]
    async fn open_report(&self, Parameters(arguments): Parameters<JsonObject>) -> CallToolResult {
        answer(arguments, |a| {
            let a: Bounded<OpenReportRequest> = parse(a)?;
            let out = report_at(&a.request.url, Duration::from_secs(60))?;
            Reply::report(&out, a.max_list)
        })
        .await
    }
}

/// A report on a memlens server, by its share link.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct OpenReportRequest {
    /// The report's share link (http…/r/ID).
    url: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(v: Value) -> JsonObject {
        match v {
            Value::Object(o) => o,
            _ => unreachable!(),
        }
    }

    #[tokio::test]
    async fn the_plan_tool_plans_a_server_with_serve() {
        let result = Memlens::new()
            .plan(Parameters(object(
                serde_json::json!({"serve": true, "model": "meta-llama/Llama-3.1-8B",
                "gpu_memory_bytes": 25_318_832_210i64, "gpu_memory_utilization": 0.9, "max_model_len": 29000,
                "engine_version": "0.6.4"}),
            )))
            .await;
        let v = result.structured_content.expect("a plan");
        // The RTX 3090 log's settings (docs/plan.md#serving): 25,120 tokens, short of 29,000.
        assert_eq!(v["largest_max_model_len"], 25120);
        assert_eq!(v["fits_max_model_len"], false);
        let text = result.content[0].as_text().expect("text").text.clone();
        assert!(text.starts_with("does not fit max_model_len 29000"), "{text}");
    }

    #[test]
    fn every_tool_has_an_object_input_and_output_schema() {
        let tools = Memlens::new().tool_router.list_all();
        assert_eq!(tools.len(), 7);
        for t in tools {
            assert_eq!(t.input_schema.get("type"), Some(&Value::from("object")), "{}", t.name);
            let output = t.output_schema.as_ref().expect("an output schema");
            assert_eq!(output.get("type"), Some(&Value::from("object")), "{}", t.name);
        }
    }
}
