//! Level-of-detail queries over a loaded report: the timeline (per-pixel min/max of allocated
//! and reserved bytes, the largest allocation bands in the window and one aggregated band for
//! the rest), the same window by category ([`category_timeline`]), its flame graph of bytes ×
//! lifetime by stack ([`flame_graph`]), allocation search, and stack frames.
//!
//! The timeline costs one pass over the entries inside the window plus one pass over the
//! allocation lifetimes, and its payload is bounded by `width` and [`MAX_BANDS`]: zooming in
//! until a window holds at most `MAX_BANDS` allocations shows every one of them as its own band.

pub use memlens_api::TimelineAxis as Axis;
mod categories;
mod flame;

pub use categories::category_timeline;
pub use flame::{flame_graph, MAX_NODES as MAX_FLAME_NODES};
use memlens_api::{Band, FragmentationSeries, FrameView, TimeAxis, Timeline};
use polars::prelude::*;

use crate::columns::{lifetimes as lt_col, usage as usage_col};
use crate::frames::DeviceFrames;
use crate::stacks::StackResolver;

/// Most allocations drawn as their own band in one response.
pub const MAX_BANDS: usize = 2_000;
/// Widest timeline accepted.
pub const MAX_WIDTH: usize = 8_192;

/// Per-bucket min/max of a step series sampled at `time` (value holds until the next entry);
/// `before` is the value before the first entry.
pub fn bucket_min_max(
    time: &[i64],
    values: &[i64],
    before: i64,
    start: i64,
    end: i64,
    width: usize,
) -> (Vec<i64>, Vec<i64>) {
    let width = width.max(1);
    let span = (end - start).max(1) as i128;
    // First time of bucket `b + 1`: entries before it belong to bucket `b` (no division per entry).
    let next_edge = |b: usize| -> i64 { start + ((span * (b as i128 + 1) + width as i128 - 1) / width as i128) as i64 };
    let first = time.partition_point(|&t| t < start);
    let mut current = if first == 0 { before } else { values[first - 1] };
    let mut mins = vec![i64::MAX; width];
    let mut maxs = vec![i64::MIN; width];
    let mut b = 0usize;
    let mut edge = next_edge(0);
    mins[0] = current;
    maxs[0] = current;
    for i in first..time.len() {
        let t = time[i];
        if t > end {
            break;
        }
        while t >= edge && b + 1 < width {
            b += 1;
            edge = next_edge(b);
            mins[b] = current;
            maxs[b] = current;
        }
        current = values[i];
        mins[b] = mins[b].min(current);
        maxs[b] = maxs[b].max(current);
    }
    while b + 1 < width {
        b += 1;
        mins[b] = current;
        maxs[b] = current;
    }
    (mins, maxs)
}

/// The timeline of one device between `start` and `end` (defaults: the whole trace).
pub fn timeline(
    dev: &DeviceFrames,
    has_time: bool,
    initial: (i64, i64),
    start: Option<i64>,
    end: Option<i64>,
    width: usize,
) -> PolarsResult<Timeline> {
    timeline_on(
        dev,
        if has_time { Axis::Time } else { Axis::Event },
        initial,
        start,
        end,
        width,
    )
}

/// Lifetime endpoints on an axis: times, or entry indices (`-1` becomes `None`).
fn endpoints(lt: &DataFrame, axis: Axis) -> PolarsResult<(Int64Chunked, Int64Chunked)> {
    match axis {
        Axis::Time => Ok((lt_col::T_ALLOC.of(lt)?.clone(), lt_col::T_FREE.of(lt)?.clone())),
        Axis::Event => {
            let opt = |c: crate::columns::Col<Int64Type>| -> PolarsResult<Int64Chunked> {
                Ok(c.of(lt)?
                    .iter()
                    .map(|v| v.filter(|&x| x >= 0))
                    .collect::<Int64Chunked>())
            };
            Ok((opt(lt_col::ALLOC_IDX)?, opt(lt_col::FREE_IDX)?))
        }
    }
}

/// A device's entry positions on `axis`: its times (µs, or entry indices without timestamps),
/// or the entry indices themselves.
fn axis_positions(dev: &DeviceFrames, axis: Axis) -> PolarsResult<std::borrow::Cow<'_, [i64]>> {
    Ok(match axis {
        Axis::Time => std::borrow::Cow::Borrowed(usage_col::TIME.slice(&dev.usage)?),
        Axis::Event => std::borrow::Cow::Owned((0..dev.usage.height() as i64).collect()),
    })
}

/// The timeline on a chosen axis.
pub fn timeline_on(
    dev: &DeviceFrames,
    axis: Axis,
    initial: (i64, i64),
    start: Option<i64>,
    end: Option<i64>,
    width: usize,
) -> PolarsResult<Timeline> {
    let positions = axis_positions(dev, axis)?;
    let time: &[i64] = &positions;
    let has_time = axis == Axis::Time;
    let allocated = usage_col::ALLOCATED.slice(&dev.usage)?;
    let reserved = usage_col::RESERVED.slice(&dev.usage)?;
    let full_start = time.first().copied().unwrap_or(0);
    let full_end = time.last().copied().unwrap_or(0).max(full_start + 1);
    let start = start.unwrap_or(full_start);
    let end = end.unwrap_or(full_end).max(start + 1);
    let width = width.clamp(1, MAX_WIDTH);
    let (allocated_min, allocated_max) = bucket_min_max(time, allocated, initial.0, start, end, width);
    let (reserved_min, reserved_max) = bucket_min_max(time, reserved, initial.1, start, end, width);

    // Allocations overlapping the window.
    let lt = &dev.lifetimes;
    let size = lt_col::SIZE.slice(lt)?;
    let addr = lt_col::ADDR.slice(lt)?;
    let stream = lt_col::STREAM.slice(lt)?;
    let stack = lt_col::STACK.slice(lt)?;
    let alloc_idx = lt_col::ALLOC_IDX.slice(lt)?;
    let (t_alloc, t_free) = endpoints(lt, axis)?;
    let mut hits: Vec<usize> = Vec::new();
    for (i, (a, f)) in t_alloc.iter().zip(t_free.iter()).enumerate() {
        if a.unwrap_or(i64::MIN) <= end && f.unwrap_or(i64::MAX) >= start {
            hits.push(i);
        }
    }
    let total = hits.len();
    if hits.len() > MAX_BANDS {
        hits.select_nth_unstable_by(MAX_BANDS - 1, |&x, &y| size[y].cmp(&size[x]).then(x.cmp(&y)));
        hits.truncate(MAX_BANDS);
    }
    hits.sort_unstable_by_key(|&i| (t_alloc.get(i).unwrap_or(i64::MIN), i));

    // Bytes of the drawn bands per bucket (difference array), to derive the aggregated rest.
    let span = (end - start).max(1) as i128;
    let bucket_of = |t: i64| -> i64 { ((t.clamp(start, end) - start) as i128 * width as i128 / span) as i64 };
    let mut diff = vec![0i64; width + 1];
    let bands: Vec<Band> = hits
        .iter()
        .map(|&i| {
            let (a, f) = (t_alloc.get(i), t_free.get(i));
            // Live in every bucket from its alloc's to its free's, both included (an allocation
            // freed inside a bucket still counts towards that bucket's maximum).
            let b0 = bucket_of(a.unwrap_or(start)).clamp(0, width as i64 - 1) as usize;
            let last = f.map_or(width - 1, |f| (bucket_of(f) as usize).min(width - 1)).max(b0);
            diff[b0] += size[i];
            diff[last + 1] -= size[i];
            Band {
                addr: addr[i],
                size: size[i],
                t_alloc: a,
                t_free: f,
                stack_id: stack[i],
                stream: stream[i],
                user_metadata: dev.user_metadata.get(&alloc_idx[i]).cloned(),
            }
        })
        .collect();
    let mut running = 0i64;
    let rest_max: Vec<i64> = (0..width)
        .map(|b| {
            running += diff[b];
            (allocated_max[b] - running).max(0)
        })
        .collect();
    Ok(Timeline {
        device: dev.device,
        time_axis: if has_time {
            TimeAxis::TimeUs
        } else {
            TimeAxis::EventOrder
        },
        start,
        end,
        width,
        allocated_min,
        allocated_max,
        reserved_min,
        reserved_max,
        bands,
        allocations_in_window: total,
        rest_max,
        full_start,
        full_end,
    })
}

/// The stored fragmentation samples of a device, as sent to the browser.
pub fn fragmentation_series(dev: &DeviceFrames) -> PolarsResult<FragmentationSeries> {
    let df = &dev.fragmentation;
    let i64s = |n: &str| -> PolarsResult<Vec<i64>> { Ok(df.column(n)?.i64()?.into_no_null_iter().collect()) };
    Ok(FragmentationSeries {
        device: dev.device,
        event_index: df.column("event_index")?.u32()?.into_no_null_iter().collect(),
        time: i64s("time")?,
        allocated: i64s("allocated")?,
        reserved: i64s("reserved")?,
        active: i64s("active")?,
        free: i64s("free")?,
        largest_free: i64s("largest_free")?,
        fragmentation_index: df.column("fragmentation_index")?.f64()?.into_no_null_iter().collect(),
    })
}

/// A stack's frames for display, each raw, marked when the folded stack leaves it out.
pub fn stack_frames(stacks: &StackResolver, stack: u32) -> Vec<FrameView> {
    stacks
        .frames_with_folding(stack)
        .into_iter()
        .map(|(frame, internal)| FrameView { frame, internal })
        .collect()
}

/// Allocation search by exact address or by a substring of any frame of the stack.
pub fn search_allocations(
    dev: &DeviceFrames,
    stacks: &StackResolver,
    addr: Option<i64>,
    stack_substring: Option<&str>,
    limit: usize,
) -> PolarsResult<(usize, Vec<Band>)> {
    let lt = &dev.lifetimes;
    let a = lt_col::ADDR.slice(lt)?;
    let size = lt_col::SIZE.slice(lt)?;
    let stream = lt_col::STREAM.slice(lt)?;
    let stack = lt_col::STACK.slice(lt)?;
    let t_alloc = lt_col::T_ALLOC.of(lt)?;
    let t_free = lt_col::T_FREE.of(lt)?;
    let alloc_idx = lt_col::ALLOC_IDX.slice(lt)?;
    let needle = stack_substring.map(str::to_lowercase);
    let mut stack_match: std::collections::HashMap<u32, bool> = std::collections::HashMap::new();
    let mut total = 0;
    let mut out = Vec::new();
    for i in 0..lt.height() {
        if addr.is_some_and(|x| x != a[i]) {
            continue;
        }
        if let Some(n) = &needle {
            let m = *stack_match.entry(stack[i]).or_insert_with(|| {
                stacks
                    .frames(stack[i])
                    .iter()
                    .any(|f| f.to_lowercase().contains(n.as_str()))
            });
            if !m {
                continue;
            }
        }
        total += 1;
        if out.len() < limit {
            out.push(Band {
                addr: a[i],
                size: size[i],
                t_alloc: t_alloc.get(i),
                t_free: t_free.get(i),
                stack_id: stack[i],
                stream: stream[i],
                user_metadata: dev.user_metadata.get(&alloc_idx[i]).cloned(),
            });
        }
    }
    Ok((total, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_carry_values_across_empty_buckets() {
        let time = [10, 20, 30, 90];
        let vals = [5, 7, 3, 1];
        let (mn, mx) = bucket_min_max(&time, &vals, 0, 0, 100, 4);
        // buckets [0,25) [25,50) [50,75) [75,100]
        assert_eq!(mx, vec![7, 7, 3, 3]);
        assert_eq!(mn, vec![0, 3, 3, 1]);
    }
}
