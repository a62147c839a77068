//! The replayed segment map agrees with the snapshot and with the usage series on real traces.

use memlens_core::analysis::segment_map::{segment_map_at, segment_map_at_time};
use memlens_core::analysis::usage::usage_over_time;
use memlens_core::analysis::DeviceEvents;
use memlens_core::importers::{import_path, ImportOptions, Imported};
use memlens_core::tables::SnapshotTables;
use memlens_tests::{oracle_for, oracle_value, trace};

fn tables(name: &str) -> Box<SnapshotTables> {
    let f = import_path(&trace(name), ImportOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
    match f.data {
        Imported::Snapshot(t) => t,
        Imported::GpuSamples(_) | Imported::Text(_) => panic!("{name}: not a snapshot"),
    }
}

fn check_tiling(name: &str, map: &memlens_api::SegmentMap) {
    for s in &map.segments {
        let mut cursor = s.address;
        for b in &s.blocks {
            assert_eq!(b.address, cursor, "{name}: blocks tile segment {:#x}", s.address);
            assert!(b.size > 0);
            cursor += b.size;
        }
        assert_eq!(
            cursor,
            s.address + s.size,
            "{name}: blocks cover segment {:#x}",
            s.address
        );
    }
}

#[test]
fn the_end_state_is_the_snapshot() {
    for name in [
        "mlp_train.pickle",
        "gpt_train.pickle",
        "oom_fragmentation.at_oom.pickle",
        "expandable_oom_fragmentation.at_oom.pickle",
    ] {
        let t = tables(name);
        let ev = DeviceEvents::new(&t, 0).expect("device 0");
        let map = segment_map_at(&t, &ev, Some(ev.len() - 1)).expect("map");
        check_tiling(name, &map);
        let oracle = oracle_for(&trace(name));
        if !name.contains("at_oom") {
            assert_eq!(
                map.reserved_bytes,
                oracle_value(&oracle, "reserved_bytes.all.current"),
                "{name}"
            );
            assert_eq!(
                map.active_bytes,
                oracle_value(&oracle, "active_bytes.all.current"),
                "{name}"
            );
        }
        assert_eq!(map.free_bytes + map.active_bytes, map.reserved_bytes, "{name}");
    }
}

#[test]
fn replay_tracks_reserved_bytes_at_every_sampled_entry() {
    for name in [
        "mlp_train.pickle",
        "gpt_train_ckpt.pickle",
        "kv_cache_inference.pickle",
        "expandable_oom_fragmentation.pickle",
    ] {
        let t = tables(name);
        let ev = DeviceEvents::new(&t, 0).expect("device 0");
        let usage = usage_over_time(&t, &ev).expect("usage");
        let n = ev.len();
        for i in (0..n).step_by((n / 40).max(1)) {
            let map = segment_map_at(&t, &ev, Some(i)).expect("map");
            check_tiling(name, &map);
            assert_eq!(
                map.reserved_bytes,
                usage.reserved.after(i),
                "{name}: reserved after entry {i}"
            );
            assert!(
                map.active_bytes >= usage.allocated_after(i).expect("an entry"),
                "{name}: blocks hold the requests after entry {i}"
            );
            assert_eq!(map.event_index, Some(i));
        }
    }
}

#[test]
fn mlp_train_replays_back_to_an_empty_allocator() {
    // Recording began before any allocation of this workload's process state.
    let t = tables("mlp_train.pickle");
    let ev = DeviceEvents::new(&t, 0).expect("device 0");
    let usage = usage_over_time(&t, &ev).expect("usage");
    let before = segment_map_at(&t, &ev, None).expect("map");
    assert_eq!(before.reserved_bytes, usage.initial_reserved());
    assert_eq!(before.event_index, None);
    // By time: the state at the first entry's timestamp is the state after that entry.
    let first = ev.time().at(0);
    let m = segment_map_at_time(&t, &ev, first).expect("map");
    assert!(m.event_index.is_some_and(|i| ev.time().at(i) == first));
}

#[test]
fn checkpoints_give_the_same_maps_as_a_full_replay() {
    use memlens_core::analysis::segment_map::detail::SegmentDetail;
    use memlens_core::analysis::segment_map::SegmentCheckpoints;
    for name in [
        "gpt_train_ckpt.pickle",
        "expandable_oom_fragmentation.pickle",
        "kv_cache_inference.pickle",
    ] {
        let t = tables(name);
        let ev = DeviceEvents::new(&t, 0).expect("device 0");
        let cp = SegmentCheckpoints::build_every(&t, &ev, ev.len() / 16).expect("checkpoints");
        let n = ev.len();
        let mut points: Vec<Option<usize>> = (0..n).step_by((n / 25).max(1)).map(Some).collect();
        points.extend([None, Some(n - 1), Some(n / 16), Some(n / 16 + 1)]);
        for p in points {
            let full = segment_map_at(&t, &ev, p).expect("map");
            assert_eq!(
                cp.map_at(&ev, p, SegmentDetail::FULL).expect("replayed").as_ref(),
                Some(&full),
                "{name} at {p:?}"
            );
        }
        let t_mid = ev.time().at(n / 2);
        assert_eq!(
            cp.map_at_time(&ev, t_mid, SegmentDetail::FULL).expect("replayed"),
            Some(segment_map_at_time(&t, &ev, t_mid).expect("map"))
        );
    }
}

#[test]
fn a_map_at_page_detail_lists_the_largest_segments_and_keeps_every_byte_and_total() {
    use memlens_core::analysis::segment_map::detail::SegmentDetail;
    use memlens_core::analysis::segment_map::SegmentCheckpoints;
    let mut merged_somewhere = false;
    for name in [
        "gpt_train_ckpt.pickle",
        "expandable_oom_fragmentation.pickle",
        "kv_cache_inference.pickle",
        "mlp_train.pickle",
    ] {
        let t = tables(name);
        let ev = DeviceEvents::new(&t, 0).expect("device 0");
        let cp = SegmentCheckpoints::build_every(&t, &ev, ev.len() / 16).expect("checkpoints");
        let n = ev.len();
        for p in (0..n).step_by((n / 10).max(1)).map(Some).chain([None, Some(n - 1)]) {
            let full = cp.map_at(&ev, p, SegmentDetail::FULL).expect("replayed").expect("full");
            assert_eq!(full.segment_count, full.segments.len(), "{name}");
            assert_eq!(
                full.block_count,
                full.segments.iter().map(|s| s.blocks.len()).sum::<usize>(),
                "{name}"
            );
            for (max_segments, width) in [(3, 40), (1, 1), (full.segments.len() + 5, 1000), (0, 10)] {
                let detail = SegmentDetail {
                    max_segments: Some(max_segments),
                    width: Some(width),
                };
                let lod = cp.map_at(&ev, p, detail).expect("replayed").expect("lod");
                let at = format!("{name} at {p:?}, {max_segments} segments at {width} px");
                // Totals are the whole state's.
                assert_eq!(
                    (lod.segment_count, lod.block_count, lod.reserved_bytes, lod.active_bytes),
                    (
                        full.segment_count,
                        full.block_count,
                        full.reserved_bytes,
                        full.active_bytes
                    ),
                    "{at}"
                );
                assert_eq!(
                    (lod.free_bytes, lod.largest_free_block_bytes, lod.rounding_waste_bytes),
                    (
                        full.free_bytes,
                        full.largest_free_block_bytes,
                        full.rounding_waste_bytes
                    ),
                    "{at}"
                );
                // The largest segments, in address order.
                let mut largest = full.segments.clone();
                largest.sort_by(|a, b| b.size.cmp(&a.size).then(a.address.cmp(&b.address)));
                largest.truncate(max_segments);
                largest.sort_by_key(|s| s.address);
                let listed: Vec<(i64, i64)> = lod.segments.iter().map(|s| (s.address, s.size)).collect();
                let want: Vec<(i64, i64)> = largest.iter().map(|s| (s.address, s.size)).collect();
                assert_eq!(listed, want, "{at}");
                check_tiling(&at, &lod);
                // Each listed segment keeps its blocks' count, bytes and rounding waste; nothing
                // a pixel wide or more is merged.
                let pixel = largest.iter().map(|s| s.size).max().unwrap_or(0) / width as i64;
                for (l, f) in lod.segments.iter().zip(&largest) {
                    let waste = |s: &memlens_api::SegmentView| {
                        s.blocks
                            .iter()
                            .filter(|b| b.state != memlens_api::BlockState::Inactive)
                            .map(|b| b.size - b.requested_bytes)
                            .sum::<i64>()
                    };
                    assert_eq!(
                        l.blocks.iter().map(|b| b.block_count as usize).sum::<usize>(),
                        f.blocks.len(),
                        "{at}"
                    );
                    assert!(waste(l) <= waste(f), "{at}: merging never adds rounding waste");
                    for b in f.blocks.iter().filter(|b| b.size >= pixel) {
                        assert!(l.blocks.contains(b), "{at}: {b:?} is a pixel wide and kept as it is");
                    }
                    merged_somewhere |= l.blocks.len() < f.blocks.len();
                }
            }
        }
    }
    assert!(merged_somewhere, "no map had blocks below a pixel to merge");
}

/// The fragmentation replay samples the peak it finds on its own (`peak_allocated_entry`,
/// without waiting for the usage series): the same entry as the usage's, on every device of
/// every committed snapshot.
#[test]
fn the_replay_samples_the_usage_peak_on_every_committed_snapshot() {
    use memlens_core::analysis::usage::peak_allocated_entry;
    let devices = memlens_tests::for_each_committed_device(|name, t, ev| {
        let usage = usage_over_time(t, ev).expect("usage");
        assert_eq!(
            peak_allocated_entry(ev.action(), ev.size()),
            usage.peak_allocated_idx,
            "{name}: device {}",
            ev.device
        );
    });
    assert!(devices >= 10, "only {devices} devices swept");
}
