//! The flame graph of a window (memviz-neo's view): each allocation weighs its bytes × the
//! part of its lifetime inside the window, summed along its folded stack from the outermost
//! frame in; allocations without frames hang under why they have none. Laid out here as an
//! icicle (the root row on top, each node's children left to right, largest first) and pruned
//! to what is wide enough to see, so the answer is bounded whatever the trace.
//!
//! Weights are summed exactly (bytes × axis units in integers), so an answer does not depend
//! on the order allocations are visited in: with the device's timeline index only those
//! overlapping the window are (see [`BandIndex::overlapping_rows`]), which is the same
//! answer as a pass over every allocation.

use crate::tables::int_slice::IntSlice;
use crate::tables::stack_ids::StackIds;
use memlens_api::{FlameGraph, FlameNode};
use polars_core::prelude::*;
use rustc_hash::FxHashMap;

use super::band_index::BandIndex;
use super::timeline_index::AxisEnds;
use super::{axis_positions, Axis, TimelineIndex};
use crate::stacks::StackResolver;
use crate::stored::frames::DeviceFrames;
use crate::tables::columns::lifetimes as lt_col;

/// Nodes narrower than this share of the root are left out.
const MIN_SHARE: f64 = 0.002;
/// Most nodes in one answer.
pub const MAX_NODES: usize = 3_000;

#[derive(Default)]
struct Node {
    value: f64,
    children: FxHashMap<String, Node>,
}

/// Stacks below this id are summed in a vector, the rare larger ones in a map.
const DENSE_STACKS: usize = 1 << 20;

/// Bytes × axis units per stack, summed exactly.
#[derive(Default)]
struct StackWeights {
    dense: Vec<i128>,
    sparse: FxHashMap<u32, i128>,
}

impl StackWeights {
    #[inline]
    fn add(&mut self, stack: u32, size: i64, from: i64, to: i64) {
        if to <= from {
            return;
        }
        let w = size as i128 * (to as i128 - from as i128);
        let s = stack as usize;
        if s < DENSE_STACKS {
            if s >= self.dense.len() {
                self.dense.resize(s + 1, 0);
            }
            self.dense[s] += w;
        } else {
            *self.sparse.entry(stack).or_default() += w;
        }
    }

    /// Every stack with weight, in seconds (or entries) × bytes.
    fn into_weights(self, unit: f64) -> Vec<(u32, f64)> {
        let dense = self.dense.into_iter().enumerate().map(|(s, w)| (s as u32, w));
        let mut out: Vec<(u32, f64)> = dense
            .chain(self.sparse)
            .filter(|&(_, w)| w != 0)
            .map(|(s, w)| (s, w as f64 * unit))
            .collect();
        out.sort_unstable_by_key(|&(s, _)| s);
        out
    }
}

/// The flame graph of `[start, end]` on `axis` (defaults: the whole trace), by a pass over
/// every allocation (what [`flame_graph_with`] answers from an index).
pub fn flame_graph(
    dev: &DeviceFrames,
    stacks: &StackResolver,
    axis: Axis,
    start: Option<i64>,
    end: Option<i64>,
) -> PolarsResult<FlameGraph> {
    flame_graph_with(dev, stacks, axis, None, start, end)
}

/// The flame graph of `[start, end]`, visiting only the allocations overlapping it when
/// `index` (built from `dev` on `axis`) has a band index.
pub fn flame_graph_with(
    dev: &DeviceFrames,
    stacks: &StackResolver,
    axis: Axis,
    index: Option<&TimelineIndex>,
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
    let size = IntSlice::of(lt, lt_col::SIZE)?;
    let stack = StackIds::of(lt, lt_col::STACK)?;
    let mut weights = StackWeights::default();
    match index.filter(|ix| ix.fits(dev, axis)) {
        Some(ix) => match AxisEnds::with_index(dev, ix)? {
            Some((bands, ends)) => add_overlapping(bands, &ends, size, stack, start, end, &mut weights),
            None => add_every(dev, axis, size, stack, start, end, &mut weights)?,
        },
        None => add_every(dev, axis, size, stack, start, end, &mut weights)?,
    }
    let by_stack = weights.into_weights(unit);
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

/// Every allocation's weight inside `[start, end]`, by a pass over all of them.
fn add_every(
    dev: &DeviceFrames,
    axis: Axis,
    size: IntSlice,
    stack: StackIds,
    start: i64,
    end: i64,
    weights: &mut StackWeights,
) -> PolarsResult<()> {
    let ends = AxisEnds::of(dev, axis)?;
    for (i, (s, bytes)) in stack.iter().zip(size).enumerate() {
        let (a, f) = ends.band_ends(i);
        let (a, f) = (a.unwrap_or(start).max(start), f.unwrap_or(end).min(end));
        weights.add(s, bytes, a, f);
    }
    Ok(())
}

/// The weights of the allocations the band index finds overlapping `[start, end]` (the others
/// weigh nothing).
fn add_overlapping(
    bands: &BandIndex,
    ends: &AxisEnds<'_>,
    size: IntSlice,
    stack: StackIds,
    start: i64,
    end: i64,
    weights: &mut StackWeights,
) {
    use super::band_index::Endpoints;
    // Predating the trace (`i64::MIN`) counts from `start`; never freed (`i64::MAX`) to `end`.
    let (live, born) = bands.overlapping_rows(ends, start, end);
    // The weighing written out in each loop: through one closure both loops called it, not
    // inlined, and a full-range flame graph was measurably slower (BENCHMARKS.md's timeline bench).
    for i in live {
        weights.add(stack.at(i), size.at(i), ends.alloc(i).max(start), ends.free(i).min(end));
    }
    for i in born {
        let i = i as usize;
        weights.add(stack.at(i), size.at(i), ends.alloc(i).max(start), ends.free(i).min(end));
    }
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
