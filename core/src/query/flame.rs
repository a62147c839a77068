//! The flame graph of a window (memviz-neo's view): each allocation weighs its bytes × the
//! part of its lifetime inside the window, summed along its folded stack from the outermost
//! frame in; allocations without frames hang under why they have none. Laid out here as an
//! icicle (the root row on top, each node's children left to right, largest first) and pruned
//! to what is wide enough to see, so the answer is bounded whatever the trace.

use memlens_api::{FlameGraph, FlameNode};
use polars::prelude::*;
use rustc_hash::FxHashMap;

use super::{axis_positions, endpoints, Axis};
use crate::columns::lifetimes as lt_col;
use crate::frames::DeviceFrames;
use crate::stacks::StackResolver;

/// Nodes narrower than this share of the root are left out.
const MIN_SHARE: f64 = 0.002;
/// Most nodes in one answer.
pub const MAX_NODES: usize = 3_000;

#[derive(Default)]
struct Node {
    value: f64,
    children: FxHashMap<String, Node>,
}

/// The flame graph of `[start, end]` on `axis` (defaults: the whole trace).
pub fn flame_graph(
    dev: &DeviceFrames,
    stacks: &StackResolver,
    axis: Axis,
    start: Option<i64>,
    end: Option<i64>,
) -> PolarsResult<FlameGraph> {
    let positions = axis_positions(dev, axis)?;
    let (full_start, full_end) = positions.full_range();
    let start = start.unwrap_or(full_start);
    let end = end.unwrap_or(full_end).max(start + 1);
    // Seconds per axis unit: µs on the time axis; entries count as themselves.
    let unit = if axis == Axis::Time { 1e-6 } else { 1.0 };
    let lt = &dev.lifetimes;
    let size = lt_col::SIZE.slice(lt)?;
    let stack = lt_col::STACK.slice(lt)?;
    let (t_alloc, t_free) = endpoints(lt, axis)?;
    let mut by_stack: FxHashMap<u32, f64> = FxHashMap::default();
    for (i, (a, f)) in t_alloc.iter().zip(t_free.iter()).enumerate() {
        let (a, f) = (a.unwrap_or(start).max(start), f.unwrap_or(end).min(end));
        if f > a {
            *by_stack.entry(stack[i]).or_default() += size[i] as f64 * (f - a) as f64 * unit;
        }
    }
    let mut root = Node::default();
    for (id, w) in by_stack {
        root.value += w;
        let frames = stacks.user_frames(id);
        let mut node = &mut root;
        if frames.is_empty() {
            node = node.children.entry("(no stack)".to_owned()).or_default();
            node.value += w;
            continue;
        }
        for f in frames.into_iter().rev() {
            node = node.children.entry(f).or_default();
            node.value += w;
        }
    }
    let total = root.value;
    let mut nodes = vec![FlameNode {
        name: "all".to_owned(),
        depth: 0,
        offset: 0.0,
        value: total,
    }];
    layout(&root, 1, 0.0, total * MIN_SHARE, &mut nodes);
    Ok(FlameGraph {
        device: dev.device,
        start,
        end,
        total,
        truncated: nodes.len() >= MAX_NODES,
        nodes,
    })
}

/// Children of `node` from `offset`, largest first, depth-first, skipping the narrow.
fn layout(node: &Node, depth: u32, offset: f64, min: f64, out: &mut Vec<FlameNode>) {
    let mut kids: Vec<(&String, &Node)> = node.children.iter().collect();
    kids.sort_by(|a, b| b.1.value.total_cmp(&a.1.value).then_with(|| a.0.cmp(b.0)));
    let mut x = offset;
    for (name, child) in kids {
        if child.value < min || out.len() >= MAX_NODES {
            break;
        }
        out.push(FlameNode {
            name: name.clone(),
            depth,
            offset: x,
            value: child.value,
        });
        layout(child, depth + 1, x, min, out);
        x += child.value;
    }
}
