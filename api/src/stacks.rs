//! Stacks on the wire: groups of allocations by folded stack ([`StackGroup`]) or by the model
//! code that asked ([`ModuleGroup`]), stalled frees by stack ([`FreeStall`]), a window's flame
//! graph ([`FlameGraph`]), and one line for a stack in a list ([`stack_headline`]).

use serde::{Deserialize, Serialize};

use crate::{LeakCandidate, NoStackReason};

/// Allocations sharing one folded stack.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct StackGroup {
    /// A stack id of the group (its largest), for the whole stack (`/stacks/{id}`).
    pub stack_id: Option<u32>,
    /// The folded stack, innermost first: Python frames as `file:line function` with short
    /// paths, allocator, interpreter, dispatcher and call-plumbing frames folded away.
    pub stack: Vec<String>,
    pub bytes: i64,
    pub count: usize,
    /// The innermost frame of model code (the user's or a model library's, not `torch/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    /// Why `stack` is empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_stack_reason: Option<NoStackReason>,
    /// With an empty stack: the innermost `record_function` range all of the group's
    /// allocations were made in, when they share one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
}

/// A stack in one line, for lists: the model code that asked and, when the innermost shown
/// frame is another (a `torch/` op), that frame; without model code, the two innermost frames;
/// without a stack, why there is none.
pub fn stack_headline(
    module: Option<&str>,
    stack: &[String],
    reason: Option<NoStackReason>,
    phase: Option<&str>,
) -> String {
    match (module, stack.first()) {
        (Some(m), Some(first)) if first != m => format!("{m} (via {first})"),
        (Some(m), _) => m.to_owned(),
        // Native frames alone (autograd nodes, driver calls): the two innermost say more.
        (None, Some(_)) => stack.iter().take(2).cloned().collect::<Vec<_>>().join(" ← "),
        (None, None) => {
            let why = reason.map_or("no stack recorded", NoStackReason::describe);
            match phase {
                Some(p) if !(p == "backward" && reason == Some(NoStackReason::AutogradThread)) => {
                    format!("no stack — {why}; made during {p}")
                }
                _ => format!("no stack — {why}"),
            }
        }
    }
}

impl StackGroup {
    /// The group in one line (see [`stack_headline`]).
    pub fn headline(&self) -> String {
        stack_headline(
            self.module.as_deref(),
            &self.stack,
            self.no_stack_reason,
            self.phase.as_deref(),
        )
    }
}

impl LeakCandidate {
    /// The candidate's stack in one line (see [`stack_headline`]).
    pub fn headline(&self) -> String {
        stack_headline(self.module.as_deref(), &self.stack, self.no_stack_reason, None)
    }
}

/// Live bytes at the peak by the model-code frame that asked for them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct ModuleGroup {
    /// `None`: allocations whose stack has no model-code frame.
    pub module: Option<String>,
    pub bytes: i64,
    pub count: usize,
}

/// Blocks of one stack whose frees waited on another stream.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct FreeStall {
    /// The folded stack that allocated the blocks.
    pub stack: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    /// Frees that waited.
    pub count: usize,
    pub largest_block_bytes: i64,
    /// From `free_requested` to `free_completed`, µs.
    pub longest_wait_us: i64,
    pub mean_wait_us: i64,
    /// Σ bytes × wait: memory held with nothing able to reuse it.
    pub held_byte_seconds: f64,
}

/// A window's flame graph: bytes × lifetime (byte-seconds on the time axis, byte-entries on
/// the event axis) by folded stack, laid out as an icicle. Node `i` spans
/// `[offset, offset + value]` of the root's `[0, total]` at row `depth`; narrow nodes are left
/// out.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct FlameGraph {
    pub device: i64,
    pub start: i64,
    pub end: i64,
    pub total: f64,
    /// The node cap was reached (more nodes exist than were sent).
    pub truncated: bool,
    /// The root first, then depth-first, children largest first.
    pub nodes: Vec<FlameNode>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct FlameNode {
    /// The frame as a folded stack shows it (`all` for the root, `(no stack)` for allocations
    /// without frames).
    pub name: String,
    pub depth: u32,
    pub offset: f64,
    pub value: f64,
}
