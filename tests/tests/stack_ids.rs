//! Stack ids are held as u16 while every id is below 65,536 and as u32 past that, in the trace
//! and in the lifetimes: a snapshot whose allocations come from 66,000 distinct call sites
//! reads every one under its own id, with the numbers of the same snapshot from 100 sites.
//! A trace's sizes and stack ids are codes of their pairs while there are at most 65,536
//! pairs, and apart past that: 66,000 distinct sizes read back each its own.

use memlens_core::analysis::lifetimes::allocation_lifetimes;
use memlens_core::analysis::DeviceEvents;
use memlens_core::importers::{import_path, Imported};
use memlens_core::pipeline::analyze_paths;
use memlens_core::tables::int_slice::IntSlice;
use memlens_core::tables::stack_ids::StackIds;
use memlens_core::tables::SnapshotTables;
use serde_json::{json, Value};

const BASE: i64 = 0x7f00_0000_0000;
const SEGMENT: i64 = 2 << 20;
const ALLOCS: i64 = 66_000;

/// A JSON snapshot of one 2 MiB segment where `ALLOCS` allocations of 512 bytes are made
/// and freed in turn at its start, allocation `i` from line `site(i)` of `model.py`.
fn snapshot(site: impl Fn(i64) -> i64) -> Value {
    snapshot_sized(site, |_| 512)
}

/// [`snapshot`] with allocation `i` of `size(i)` bytes.
fn snapshot_sized(site: impl Fn(i64) -> i64, size: impl Fn(i64) -> i64) -> Value {
    let entry = |action: &str, size: i64, t: i64, line: Option<i64>| {
        let frames = line.map_or_else(Vec::new, |l| {
            vec![json!({"name": "layer", "filename": "model.py", "line": l})]
        });
        json!({"action": action, "addr": BASE, "size": size, "stream": 0, "time_us": 1_000_000 + t, "frames": frames})
    };
    let mut trace = vec![entry("segment_alloc", SEGMENT, 0, None)];
    for i in 0..ALLOCS {
        trace.push(entry("alloc", size(i), 3 * i + 1, Some(site(i))));
        trace.push(entry("free_requested", size(i), 3 * i + 2, None));
        trace.push(entry("free_completed", size(i), 3 * i + 3, None));
    }
    json!({
        "segments": [{
            "device": 0, "address": BASE, "total_size": SEGMENT, "allocated_size": 0, "active_size": 0,
            "requested_size": 0, "stream": 0, "segment_type": "small", "segment_pool_id": [0, 0],
            "is_expandable": false, "frames": [],
            "blocks": [{"address": BASE, "size": SEGMENT, "requested_size": 0, "state": "inactive", "frames": []}],
        }],
        "device_traces": [trace],
    })
}

fn written(dir: &std::path::Path, name: &str, snapshot: &Value) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_vec(snapshot).expect("json")).expect("write");
    path
}

fn tables(path: &std::path::Path) -> SnapshotTables {
    match import_path(path, Default::default()).map(|f| f.data) {
        Ok(Imported::Snapshot(t)) => *t,
        Ok(_) => panic!("{}: not a snapshot", path.display()),
        Err(e) => panic!("{}: {e}", path.display()),
    }
}

#[test]
fn stack_ids_past_65535_are_held_as_u32_and_each_allocation_keeps_its_own() {
    let dir = tempfile::tempdir().expect("tmp");
    let wide = written(dir.path(), "wide.json", &snapshot(|i| i));
    let narrow = written(dir.path(), "narrow.json", &snapshot(|i| i % 100));
    for (path, sites) in [(&wide, ALLOCS as usize), (&narrow, 100)] {
        let t = tables(path);
        let ev = DeviceEvents::new(&t, 0).expect("device 0");
        // More pairs of size and stack than u16 codes name: the trace holds them apart.
        let (apart, coded) = (
            matches!(ev.stack(), StackIds::U32(_)),
            matches!(ev.stack(), StackIds::Coded { .. }),
        );
        assert_eq!(
            (apart, coded),
            (sites > 65_536, sites <= 65_536),
            "{}: trace stack ids",
            path.display()
        );
        let lifetimes = allocation_lifetimes(&t, &ev).expect("lifetimes");
        let stack = StackIds::of(&lifetimes, "stack").expect("stack ids");
        assert_eq!(
            matches!(stack, StackIds::U32(_)),
            sites > 65_536,
            "{}: lifetimes",
            path.display()
        );
        let alloc_idx = lifetimes
            .column("alloc_idx")
            .and_then(|c| c.i32().cloned())
            .expect("alloc_idx");
        let mut ids = Vec::new();
        for (row, a) in alloc_idx.into_no_null_iter().enumerate() {
            let a = usize::try_from(a).expect("every allocation is in the trace");
            assert_eq!(stack.at(row), ev.stack().at(a), "{}: row {row}", path.display());
            ids.push(stack.at(row));
        }
        assert_eq!(ids.len(), ALLOCS as usize);
        ids.sort_unstable();
        ids.dedup();
        // No two call sites share an id (an id cut to 16 bits would).
        assert_eq!(ids.len(), sites, "{}: distinct stacks", path.display());
    }
    // The same memory, whichever width the ids take.
    let (w, n) = (
        analyze_paths(&[wide]).expect("wide"),
        analyze_paths(&[narrow]).expect("narrow"),
    );
    let (w, n) = (&w.files[0].devices[0], &n.files[0].devices[0]);
    assert_eq!(w.peak_allocated_bytes, 512);
    assert_eq!(
        (
            w.event_count,
            w.alloc_count,
            w.peak_allocated_bytes,
            w.peak_reserved_bytes,
            w.final_allocated_bytes
        ),
        (
            n.event_count,
            n.alloc_count,
            n.peak_allocated_bytes,
            n.peak_reserved_bytes,
            n.final_allocated_bytes
        )
    );
}

#[test]
fn sizes_of_more_pairs_than_codes_name_are_held_apart_each_its_own() {
    let dir = tempfile::tempdir().expect("tmp");
    // 66,000 distinct sizes from 100 call sites: 66,000 pairs.
    let path = written(dir.path(), "sizes.json", &snapshot_sized(|i| i % 100, |i| 512 + i));
    let t = tables(&path);
    let ev = DeviceEvents::new(&t, 0).expect("device 0");
    assert!(matches!(ev.size(), IntSlice::U32 { .. }), "sizes apart, u32");
    assert!(matches!(ev.stack(), StackIds::U16(_)), "stack ids apart, u16");
    assert_eq!(t.size_stacks.height(), 0);
    let lifetimes = allocation_lifetimes(&t, &ev).expect("lifetimes");
    let sizes = IntSlice::of(&lifetimes, "size").expect("sizes");
    assert_eq!(sizes.to_vec(), (0..ALLOCS).map(|i| 512 + i).collect::<Vec<_>>());
    let out = analyze_paths(&[path]).expect("analysed");
    let d = &out.files[0].devices[0];
    assert_eq!((d.peak_allocated_bytes, d.final_allocated_bytes), (512 + ALLOCS - 1, 0));
}

#[test]
fn codes_past_the_pairs_table_are_refused_by_name() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = written(dir.path(), "coded.json", &snapshot(|i| i % 100));
    let mut t = tables(&path);
    // One size from 100 sites, and without a stack the frees' size and the segment's.
    assert_eq!(t.size_stacks.height(), 102);
    assert!(DeviceEvents::new(&t, 0).is_ok());
    t.size_stacks = t.size_stacks.head(Some(1));
    let err = DeviceEvents::new(&t, 0)
        .err()
        .expect("codes past the table")
        .to_string();
    assert!(err.contains("size_stack") && err.contains("table of 1"), "{err}");
}
