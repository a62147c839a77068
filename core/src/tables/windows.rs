//! Snapshots of one process taken window by window (`memlens.torch.record(every_steps=N)`:
//! each window's snapshot holds the allocator's state at its end and the trace since the window
//! before, its history cleared after each), joined into the one snapshot a single dump of the
//! whole run would have been ([`join_windows`]): every window's trace in order, device by
//! device, its stacks interned anew into one frame table, its annotations once each, and the
//! last window's segments and blocks as the state at the end.

use super::{EventNote, FrameTable, SnapshotColumns, TraceRows};

/// Stack ids of one window's frame table in the joined table.
fn stacks_into(joined: &mut FrameTable, window: &FrameTable) -> Vec<u32> {
    let frames: Vec<u32> = (0..window.names.len())
        .map(|f| joined.intern_frame(&window.names[f], &window.files[f], window.lines[f]))
        .collect();
    (0..window.stack_count())
        .map(|s| {
            let (a, b) = (window.offsets[s] as usize, window.offsets[s + 1] as usize);
            let ids: Vec<u32> = window.flat[a..b].iter().map(|&f| frames[f as usize]).collect();
            joined.intern_stack(&ids)
        })
        .collect()
}

/// The windows (in the order they were taken) as one snapshot; `None` for no window.
pub fn join_windows(windows: Vec<SnapshotColumns>) -> Option<SnapshotColumns> {
    let mut windows = windows.into_iter();
    let first = windows.next()?;
    let rest: Vec<SnapshotColumns> = windows.collect();
    if rest.is_empty() {
        return Some(first);
    }
    let all: Vec<&SnapshotColumns> = std::iter::once(&first).chain(&rest).collect();
    let mut frames = FrameTable::new();
    let stacks: Vec<Vec<u32>> = all.iter().map(|w| stacks_into(&mut frames, &w.frames)).collect();
    // Devices in the order they first appear.
    let mut devices: Vec<i64> = Vec::new();
    for w in &all {
        for &(d, _) in &w.device_ranges {
            if !devices.contains(&d) {
                devices.push(d);
            }
        }
    }
    let mut trace = TraceRows::default();
    let mut device_ranges = Vec::with_capacity(devices.len());
    for &device in &devices {
        let start = trace.len() as u32;
        for (w, map) in all.iter().zip(&stacks) {
            let (free, notes) = (sparse_by_row(&w.trace.device_free), notes_by_row(&w.trace.notes));
            for &(_, (a, b)) in w.device_ranges.iter().filter(|(d, _)| *d == device) {
                for row in a as usize..b as usize {
                    let t = &w.trace;
                    let (size, stack) = t.size_stack.get(row);
                    let joined_row = trace.len() as u32;
                    trace.push(
                        super::Action::from_code(t.action[row]),
                        t.addr.get(row),
                        size,
                        t.stream.get(row).unwrap_or(0),
                        t.time_us.get(row),
                        map[stack as usize],
                    );
                    if let Some(v) = free.get(&(row as u32)) {
                        trace.device_free.push((joined_row, *v));
                    }
                    if let Some(n) = notes.get(&(row as u32)) {
                        trace.notes.push(EventNote {
                            row: joined_row,
                            ..(*n).clone()
                        });
                    }
                }
            }
        }
        device_ranges.push((device, (start, trace.len() as u32)));
    }
    // Annotations a window repeats from the ones before (a history cleared without them) are
    // kept once.
    let mut annotations = super::AnnotationRows::default();
    let mut seen: rustc_hash::FxHashSet<(i64, &str, &str, i64)> = Default::default();
    for w in &all {
        let a = &w.annotations;
        let before = seen.clone();
        for i in 0..a.time_us.len() {
            let key = (a.device[i], a.name[i].as_str(), a.stage[i].as_str(), a.time_us[i]);
            if before.contains(&key) {
                continue;
            }
            seen.insert(key);
            annotations.push(a.device[i], a.name[i].clone(), a.stage[i].clone(), a.time_us[i]);
        }
    }
    // The state at the end is the last window's.
    let last_map = stacks.last().expect("at least two windows");
    let mut last = rest.into_iter().last().expect("at least two windows");
    for s in last.segments.stack.iter_mut().chain(last.blocks.stack.iter_mut()) {
        *s = last_map[*s as usize];
    }
    trace.shrink_to_fit();
    Some(SnapshotColumns {
        trace,
        device_ranges,
        frames,
        segments: last.segments,
        blocks: last.blocks,
        annotations,
        max_split_size: last.max_split_size,
        source: last.source,
        format: last.format,
    })
}

fn sparse_by_row(rows: &[(u32, i64)]) -> rustc_hash::FxHashMap<u32, i64> {
    rows.iter().copied().collect()
}

fn notes_by_row(notes: &[EventNote]) -> rustc_hash::FxHashMap<u32, &EventNote> {
    notes.iter().map(|n| (n.row, n)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::Action;

    fn window(entries: &[(i64, Action, i64, i64, &str)], live: &[(i64, i64, &str)]) -> SnapshotColumns {
        let mut w = SnapshotColumns::default();
        for &(device, action, addr, t, frame) in entries {
            let f = w.frames.intern_frame(frame, "train.py", 1);
            let s = w.frames.intern_stack(&[f]);
            let row = w.trace.len() as u32;
            w.trace.push(action, addr, 512, 0, t, s);
            match w.device_ranges.last_mut() {
                Some((d, (_, end))) if *d == device => *end = row + 1,
                _ => w.device_ranges.push((device, (row, row + 1))),
            }
        }
        for &(device, addr, frame) in live {
            let f = w.frames.intern_frame(frame, "train.py", 1);
            let s = w.frames.intern_stack(&[f]);
            w.segments.push(
                device,
                addr,
                2 << 20,
                512,
                512,
                512,
                0,
                "small".into(),
                (0, 0),
                false,
                s,
            );
        }
        w
    }

    #[test]
    fn windows_join_device_by_device_with_the_last_state() {
        let a = window(
            &[
                (0, Action::Alloc, 0x1000, 10, "fwd"),
                (1, Action::Alloc, 0x9000, 11, "other"),
            ],
            &[(0, 0x1000, "fwd")],
        );
        let b = window(
            &[
                (0, Action::FreeRequested, 0x1000, 20, "bwd"),
                (0, Action::Alloc, 0x2000, 21, "fwd"),
            ],
            &[(0, 0x2000, "bwd")],
        );
        let j = join_windows(vec![a, b]).expect("joined");
        assert_eq!(j.device_ranges, vec![(0, (0, 3)), (1, (3, 4))]);
        let times: Vec<i64> = (0..4).map(|r| j.trace.time_us.get(r)).collect();
        assert_eq!(times, [10, 20, 21, 11]);
        // Stacks name the same frames as in their window, whatever their ids there.
        let frame_of = |stack: u32| {
            let s = stack as usize;
            j.frames.names[j.frames.flat[j.frames.offsets[s] as usize] as usize].clone()
        };
        let names: Vec<String> = (0..4).map(|r| frame_of(j.trace.size_stack.get(r).1)).collect();
        assert_eq!(names, ["fwd", "bwd", "fwd", "other"]);
        assert_eq!(
            j.segments.address,
            vec![0x2000],
            "the state at the end is the last window's"
        );
        assert_eq!(frame_of(j.segments.stack[0]), "bwd");
    }

    #[test]
    fn one_window_is_itself() {
        let a = window(&[(0, Action::Alloc, 0x1000, 10, "fwd")], &[]);
        let again = window(&[(0, Action::Alloc, 0x1000, 10, "fwd")], &[]);
        assert_eq!(join_windows(vec![a]), Some(again));
        assert_eq!(join_windows(Vec::new()), None);
    }
}
