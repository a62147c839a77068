//! Frees stalled on another stream (memviz-neo's "pending-free stalls"): a block freed while
//! another stream still uses it (`record_stream`) is `free_requested` at once but
//! `free_completed` only when that stream's work is done — until then it holds memory nothing
//! can reuse. Each such wait of at least [`MIN_WAIT_US`] is counted, grouped by the folded
//! stack that allocated the block, with the bytes held and for how long; and the most bytes
//! such waits held at once.

use memlens_api::FreeStall;
use rustc_hash::FxHashMap;

use crate::analysis::DeviceEvents;
use crate::stacks::StackResolver;
use crate::tables::int_slice::IntSlice;
use crate::tables::stack_ids::StackIds;
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
    let stalled = stalled_frees(action, addr, size, time);
    let alloc_stacks = allocating_stacks(&stalled, action, addr, stack);
    // Each stalled wait as (time, ±bytes), for the most held at once.
    let mut held: Vec<(i64, i64)> = Vec::with_capacity(2 * stalled.len());
    // Groups by folded stack, found once per stack id (folding a stack allocates its frames'
    // text).
    let mut groups: Vec<(Vec<String>, Waits)> = Vec::new();
    let mut group_of_frames: FxHashMap<Vec<String>, usize> = FxHashMap::default();
    let mut group_of_stack: FxHashMap<u32, usize> = FxHashMap::default();
    for (free, id) in stalled.iter().zip(alloc_stacks) {
        let (bytes, wait) = (free.bytes, time.at(free.completed) - free.requested_at);
        held.push((free.requested_at, bytes));
        held.push((time.at(free.completed), -bytes));
        let group = *group_of_stack.entry(id).or_insert_with(|| {
            let frames = stacks.user_frames(id);
            *group_of_frames.entry(frames.clone()).or_insert_with(|| {
                let first = Waits {
                    stack_id: id,
                    ..Waits::default()
                };
                groups.push((frames, first));
                groups.len() - 1
            })
        });
        let g = &mut groups[group].1;
        g.count += 1;
        g.largest = g.largest.max(bytes);
        g.longest = g.longest.max(wait);
        g.total += wait;
        g.held += bytes as f64 * wait as f64 * 1e-6;
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

/// A `free_completed` that came at least [`MIN_WAIT_US`] after its block's `free_requested`.
struct StalledFree {
    /// The `free_completed` entry.
    completed: usize,
    requested_at: i64,
    bytes: i64,
}

/// The stalled frees, in entry order. A block's `free_completed` nearly always comes before
/// any other block's `free_requested`, so the one request waiting is held aside and a map is
/// used only for requests outstanding together (a per-entry hash insert and remove cost more
/// than the rest of this analysis on a long trace).
fn stalled_frees(action: &[u8], addr: IntSlice, size: IntSlice, time: IntSlice) -> Vec<StalledFree> {
    let mut latest: Option<(i64, (i64, i64))> = None; // addr → (time, size), the newest request
    let mut earlier: FxHashMap<i64, (i64, i64)> = FxHashMap::default();
    let mut stalled = Vec::new();
    for (i, &code) in action.iter().enumerate() {
        match Action::from_code(code) {
            Action::FreeRequested => {
                if let Some((a, request)) = latest.take() {
                    earlier.insert(a, request);
                }
                // A newer request for an address replaces any older one.
                if !earlier.is_empty() {
                    earlier.remove(&addr.at(i));
                }
                latest = Some((addr.at(i), (time.at(i), size.at(i))));
            }
            Action::FreeCompleted => {
                let request = match latest {
                    Some((a, request)) if a == addr.at(i) => {
                        latest = None;
                        Some(request)
                    }
                    _ if earlier.is_empty() => None,
                    _ => earlier.remove(&addr.at(i)),
                };
                let Some((requested_at, bytes)) = request else {
                    continue;
                };
                if time.at(i) - requested_at >= MIN_WAIT_US {
                    stalled.push(StalledFree {
                        completed: i,
                        requested_at,
                        bytes,
                    });
                }
            }
            _ => {}
        }
    }
    stalled
}

/// The stack of the allocation each stalled free frees: the latest `alloc` of its address
/// before it, else the free's own. Only addresses that stalled are followed (none, most
/// often: then the trace is not read).
fn allocating_stacks(stalled: &[StalledFree], action: &[u8], addr: IntSlice, stack: StackIds) -> Vec<u32> {
    let Some(last) = stalled.last() else {
        return Vec::new();
    };
    let followed: rustc_hash::FxHashSet<i64> = stalled.iter().map(|f| addr.at(f.completed)).collect();
    let mut alloc_stack: FxHashMap<i64, u32> = FxHashMap::default();
    let mut out = Vec::with_capacity(stalled.len());
    let mut next = stalled.iter().peekable();
    for (i, &a) in action.iter().enumerate().take(last.completed + 1) {
        if a == Action::Alloc as u8 && followed.contains(&addr.at(i)) {
            alloc_stack.insert(addr.at(i), stack.at(i));
        }
        while let Some(f) = next.next_if(|f| f.completed == i) {
            out.push(alloc_stack.get(&addr.at(i)).copied().unwrap_or(stack.at(f.completed)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a map of every outstanding request gives (the reading before the one held aside).
    fn stalled_by_map(action: &[u8], addr: &[i64], size: &[i64], time: &[i64]) -> Vec<(usize, i64, i64)> {
        let mut requested: FxHashMap<i64, (i64, i64)> = FxHashMap::default();
        let mut out = Vec::new();
        for i in 0..action.len() {
            match Action::from_code(action[i]) {
                Action::FreeRequested => {
                    requested.insert(addr[i], (time[i], size[i]));
                }
                Action::FreeCompleted => {
                    if let Some((t0, bytes)) = requested.remove(&addr[i]) {
                        if time[i] - t0 >= MIN_WAIT_US {
                            out.push((i, t0, bytes));
                        }
                    }
                }
                _ => {}
            }
        }
        out
    }

    #[test]
    fn the_request_held_aside_gives_what_a_map_of_every_request_gives() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let actions = [
            Action::Alloc,
            Action::FreeRequested,
            Action::FreeCompleted,
            Action::FreeCompleted,
        ];
        for _ in 0..200 {
            let n = 1 + next(300) as usize;
            let (mut action, mut addr, mut size, mut time) = (vec![], vec![], vec![], vec![]);
            let mut t = 0;
            for _ in 0..n {
                action.push(actions[next(4) as usize] as u8);
                // Few addresses, so that requests overlap, repeat and complete out of order.
                addr.push(next(4) as i64 * 512);
                size.push(512 * (1 + next(8) as i64));
                t += next(2 * MIN_WAIT_US as u64) as i64;
                time.push(t);
            }
            let found: Vec<(usize, i64, i64)> =
                stalled_frees(&action, addr[..].into(), size[..].into(), time[..].into())
                    .iter()
                    .map(|f| (f.completed, f.requested_at, f.bytes))
                    .collect();
            assert_eq!(found, stalled_by_map(&action, &addr, &size, &time));

            let stack: Vec<u32> = (0..n as u32).collect();
            let stalled = stalled_frees(&action, addr[..].into(), size[..].into(), time[..].into());
            let expected: Vec<u32> = stalled
                .iter()
                .map(|f| {
                    (0..f.completed)
                        .rev()
                        .find(|&j| action[j] == Action::Alloc as u8 && addr[j] == addr[f.completed])
                        .map_or(stack[f.completed], |j| stack[j])
                })
                .collect();
            assert_eq!(
                allocating_stacks(&stalled, &action, addr[..].into(), stack[..].into()),
                expected
            );
        }
    }
}
