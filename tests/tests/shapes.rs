//! Snapshot shapes other than PyTorch 2.11's, derived from the real traces
//! (`traces/derive_shapes.py`): 2.1-era entries without timestamps, the protocol-2 pickler,
//! the legacy bare segment list, 1.13 block histories, and several devices.

use memlens_api::{FileSummary, TimeAxis};
use memlens_core::pipeline::summarize_file;
use memlens_tests::{oracle_value, trace};

fn summary(name: &str) -> FileSummary {
    summarize_file(&trace(name)).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn pytorch_2_1_shape_falls_back_to_event_order() {
    let s = summary("mlp_train.pt21_shape.pickle");
    let d = &s.devices[0];
    assert_eq!(d.time_axis, TimeAxis::EventOrder);
    assert_eq!(d.peak_time_us, None);
    assert!(d.peak_event_index.is_some());
    assert!(!s.source.has_time_us);
    assert_eq!(s.source.expandable_segments, None);
    let oracle = trace("mlp_train.memory_stats.json");
    assert_eq!(
        d.peak_allocated_bytes,
        oracle_value(&oracle, "requested_bytes.all.peak")
    );
    assert_eq!(d.peak_reserved_bytes, oracle_value(&oracle, "reserved_bytes.all.peak"));
    // Without annotations the steps come from the allocation rhythm: 8 steps, as annotated.
    assert_eq!(d.iterations.source, "allocation_pattern");
    assert_eq!(
        d.iterations.count,
        summary("mlp_train.pickle").devices[0].iterations.count
    );
    assert!(d.leaks.is_empty());
}

#[test]
fn leaks_are_found_without_timestamps_or_annotations() {
    let d = &summary("leak.pt21_shape.pickle").devices[0];
    assert_eq!(d.iterations.source, "allocation_pattern");
    assert_eq!(d.iterations.count, 30, "30 steps");
    assert_eq!(d.leaks.len(), 2, "{:#?}", d.leaks);
    assert!(d
        .leaks
        .iter()
        .any(|l| l.stack.first().is_some_and(|f| f.contains("train.py:142 wl_leak"))));
    assert!(d
        .leaks
        .iter()
        .any(|l| l.stack.first().is_some_and(|f| f.contains("linear.py"))));
}

#[test]
fn protocol_2_pickles_decode_like_protocol_4() {
    let p2 = summary("mlp_train.protocol2.pickle");
    let p4 = summary("mlp_train.pickle");
    assert_eq!(p2.devices, p4.devices);
}

#[test]
fn a_bare_segment_list_is_the_state_without_history() {
    let s = summary("mlp_train.segments_only.pickle");
    assert_eq!(s.devices.len(), 1);
    let d = &s.devices[0];
    assert_eq!(d.event_count, 0);
    let oracle = trace("mlp_train.memory_stats.json");
    assert_eq!(
        d.peak_allocated_bytes,
        oracle_value(&oracle, "requested_bytes.all.current")
    );
    assert_eq!(
        d.peak_reserved_bytes,
        oracle_value(&oracle, "reserved_bytes.all.current")
    );
    assert_eq!(d.peak_event_index, None);
}

#[test]
fn several_devices_are_summarised_separately() {
    let s = summary("leak.two_devices.pickle");
    let devices: Vec<i64> = s.devices.iter().map(|d| d.device).collect();
    assert_eq!(devices, vec![1], "device 0 has neither a trace nor segments");
    let d = &s.devices[0];
    let oracle = trace("leak.memory_stats.json");
    assert_eq!(
        d.peak_allocated_bytes,
        oracle_value(&oracle, "requested_bytes.all.peak")
    );
    assert_eq!(d.leaks.len(), 2);
    assert_eq!(d.iterations.source, "optimizer_steps:Optimizer.step#Adam.step");
}

#[test]
fn pytorch_1_13_block_history_gives_sizes_and_stacks() {
    let s = summary("mlp_train.pt113_shape.pickle");
    let d = &s.devices[0];
    // No trace: the state is the snapshot's. Requested sizes come from `history[-1].real_size`.
    let oracle = trace("mlp_train.memory_stats.json");
    assert_eq!(
        d.final_allocated_bytes,
        oracle_value(&oracle, "requested_bytes.all.current")
    );
    assert_eq!(
        d.final_reserved_bytes,
        oracle_value(&oracle, "reserved_bytes.all.current")
    );
    // Stacks of live blocks come from their history, as 2.11's come from `frames`.
    let now = summary("mlp_train.segments_only.pickle");
    let groups = |s: &[memlens_api::StackGroup]| -> Vec<(Vec<String>, i64, usize)> {
        s.iter().map(|g| (g.stack.clone(), g.bytes, g.count)).collect()
    };
    assert_eq!(groups(&d.peak_stacks), groups(&now.devices[0].peak_stacks));
    assert!(d.peak_stacks.iter().any(|g| !g.stack.is_empty()), "{:?}", d.peak_stacks);
}

#[test]
fn time_range_is_read_in_one_pass_and_a_trace_without_timestamps_stays_one_scalar() {
    use memlens_core::importers::{import_path, Imported};
    use memlens_core::report::snapshot_time_range;
    let tables = |name: &str| match import_path(&trace(name), Default::default()).map(|f| f.data) {
        Ok(Imported::Snapshot(t)) => t,
        Ok(_) => panic!("{name}: not a snapshot"),
        Err(e) => panic!("{name}: {e}"),
    };
    let timed = tables("mlp_train.pickle");
    // Held as µs after the first (u32) and the first (one scalar): the trace spans minutes.
    assert!(timed.events.column("time_us").is_err());
    let first = timed.events.column("first_time_us").expect("first_time_us");
    assert!(first.as_scalar_column().is_some());
    let first = first.get(0).expect("a first time").extract::<i64>().expect("i64");
    let after_first = timed
        .events
        .column("time_after_first_us")
        .and_then(|c| c.u32())
        .expect("u32");
    let after_first = after_first.cont_slice().expect("one chunk without nulls");
    assert_eq!(after_first.iter().min(), Some(&0));
    let values: Vec<i64> = after_first.iter().map(|&o| first + i64::from(o)).collect();
    let expected = values.iter().min().copied().zip(values.iter().max().copied());
    assert!(matches!(expected, Some((lo, hi)) if lo < hi));
    assert_eq!(snapshot_time_range(&timed).expect("range"), expected);

    // Widened to one i64 column, as a report stored before 2026-12 holds them: the same
    // times on every device.
    let mut wide = tables("mlp_train.pickle");
    let time_us: Vec<i64> = after_first.iter().map(|&o| first + i64::from(o)).collect();
    wide.events.drop_in_place("time_after_first_us").expect("narrow times");
    wide.events.drop_in_place("first_time_us").expect("first time");
    wide.events
        .with_column(polars_core::prelude::Column::new("time_us".into(), time_us))
        .expect("time_us");
    assert!(wide.events.column("time_after_first_us").is_err() && wide.events.column("first_time_us").is_err());
    for device in memlens_core::analysis::devices(&timed).expect("devices") {
        let narrow = memlens_core::analysis::DeviceEvents::new(&timed, device).expect("narrow");
        let widened = memlens_core::analysis::DeviceEvents::new(&wide, device).expect("wide");
        assert!(matches!(
            widened.time(),
            memlens_core::tables::int_slice::IntSlice::I64(_)
        ));
        assert_eq!(narrow.time().to_vec(), widened.time().to_vec(), "device {device}");
        assert!(narrow.has_time && widened.has_time);
    }
    assert_eq!(snapshot_time_range(&wide).expect("range"), expected);

    let untimed = tables("mlp_train.pt21_shape.pickle");
    assert_eq!(snapshot_time_range(&untimed).expect("range"), None);
    // Read as the one null it is, not made into a column of a null per entry.
    let column = untimed.events.column("time_us").expect("time_us");
    assert!(column
        .as_scalar_column()
        .is_some_and(|s| s.lazy_as_materialized_series().is_none()));
}
