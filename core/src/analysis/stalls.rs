//! Frees stalled on another stream (memviz-neo's "pending-free stalls"): a block freed while
//! another stream still uses it (`record_stream`) is `free_requested` at once but
//! `free_completed` only when that stream's work is done — until then it holds memory nothing
//! can reuse. Each such wait of at least [`MIN_WAIT_US`] is counted, grouped by the folded
//! stack that allocated the block, with the bytes held and for how long; and the most bytes
//! such waits held at once.

use memlens_api::FreeStall;
use rustc_hash::FxHashMap;

use super::DeviceEvents;
use crate::stacks::StackResolver;
use crate::tables::Action;

/// Waits shorter than this (µs) are the allocator's normal event polling.
pub const MIN_WAIT_US: i64 = 1_000;
/// Groups that held less than this (1 MiB for 1 ms, in byte-seconds) are left out: a few small
/// blocks waiting on a copy are not a stall anyone needs to see.
const MIN_HELD_BYTE_SECONDS: f64 = (1u64 << 20) as f64 * 1e-3;
/// Most stall groups listed.
const TOP: usize = 10;

/// The stalled frees of one folded stack, as they add up.
#[derive(Default)]
struct Waits {
    count: usize,
    largest: i64,
    longest: i64,
    total: i64,
    /// Σ bytes × wait, in byte-seconds.
    held: f64,
    /// A stack id of the group, for its model-code frame.
    stack_id: u32,
}

/// The device's stalled frees, largest bytes × wait first, and the most bytes pending at once.
pub fn pending_free_stalls(ev: &DeviceEvents, stacks: &StackResolver) -> (Vec<FreeStall>, i64) {
    if !ev.has_time {
        return (Vec::new(), 0);
    }
    let (action, addr, size, stack, time) = (ev.action(), ev.addr(), ev.size(), ev.stack(), ev.time());
    let mut alloc_stack: FxHashMap<i64, u32> = FxHashMap::default();
    let mut requested: FxHashMap<i64, (i64, i64)> = FxHashMap::default(); // addr → (time, size)
                                                                          // Each stalled wait as (time, ±bytes), for the most held at once.
    let mut held: Vec<(i64, i64)> = Vec::new();
    let mut groups: FxHashMap<Vec<String>, Waits> = FxHashMap::default();
    for i in 0..action.len() {
        match Action::from_code(action[i]) {
            Action::Alloc => {
                alloc_stack.insert(addr[i], stack[i]);
            }
            Action::FreeRequested => {
                requested.insert(addr[i], (time[i], size[i]));
            }
            Action::FreeCompleted => {
                let Some((t0, bytes)) = requested.remove(&addr[i]) else {
                    continue;
                };
                let wait = time[i] - t0;
                if wait < MIN_WAIT_US {
                    continue;
                }
                held.push((t0, bytes));
                held.push((time[i], -bytes));
                let id = alloc_stack.get(&addr[i]).copied().unwrap_or(stack[i]);
                let g = groups.entry(stacks.user_frames(id)).or_insert(Waits {
                    stack_id: id,
                    ..Waits::default()
                });
                g.count += 1;
                g.largest = g.largest.max(bytes);
                g.longest = g.longest.max(wait);
                g.total += wait;
                g.held += bytes as f64 * wait as f64 * 1e-6;
            }
            _ => {}
        }
    }
    // Ends before starts at one instant: a block done as another starts is not held twice.
    held.sort_unstable();
    let (mut pending, mut peak) = (0i64, 0i64);
    for (_, d) in held {
        pending += d;
        peak = peak.max(pending);
    }
    let mut out: Vec<FreeStall> = groups
        .into_iter()
        .map(|(stack, w)| FreeStall {
            module: stacks.module_of(w.stack_id),
            stack,
            count: w.count,
            largest_block_bytes: w.largest,
            longest_wait_us: w.longest,
            mean_wait_us: w.total / w.count.max(1) as i64,
            held_byte_seconds: w.held,
        })
        .collect();
    out.retain(|g| g.held_byte_seconds >= MIN_HELD_BYTE_SECONDS);
    out.sort_by(|a, b| {
        b.held_byte_seconds
            .total_cmp(&a.held_byte_seconds)
            .then_with(|| a.stack.cmp(&b.stack))
    });
    out.truncate(TOP);
    // Without a stall worth listing, nothing was held worth saying.
    let peak = if out.is_empty() { 0 } else { peak };
    (out, peak)
}
