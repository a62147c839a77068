//! The timeline, the category timeline and the flame graph answered from a device's indexes
//! equal the same
//! queries by a pass over its frames: on every committed snapshot, every device, both axes,
//! the full range and random windows at random widths (including windows past either end and
//! one bucket wide).

use memlens_core::pipeline::Pipeline;
use memlens_core::pipeline::{Input, KeepFrames};
use memlens_core::query::{
    category_timeline, category_timeline_with, flame_graph, flame_graph_with, timeline_on, timeline_with, Axis,
    CategoryIndex, TimelineIndex,
};
use memlens_tests::{snapshots_in, traces_dir};

#[test]
fn indexed_timelines_categories_and_flames_equal_scanned_ones_on_every_committed_snapshot() {
    let mut x: u64 = 0x9E3779B97F4A7C15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut compared = 0;
    let (mut devices, mut with_category_index) = (0, 0);
    for path in snapshots_in(&traces_dir()) {
        let mut keep = KeepFrames {
            with_stacks: true,
            ..KeepFrames::default()
        };
        let Ok(out) = Pipeline::keeping_frames().run(vec![Input::path(&path)], &mut keep) else {
            continue;
        };
        let name = path.display();
        for ((summary, frames), stacks) in out.files.iter().zip(&keep.files).zip(&keep.stacks) {
            for (d, dev) in summary.devices.iter().zip(frames) {
                let initial = d.initial_allocated_bytes;
                let categories = CategoryIndex::build(dev).expect("category index");
                devices += 1;
                with_category_index += usize::from(categories.is_some());
                for axis in [Axis::Time, Axis::Event] {
                    let index = TimelineIndex::build(dev, axis).expect("index");
                    let full = timeline_on(dev, axis, initial, None, None, 800).expect("timeline");
                    let (first, last) = (full.full_start, full.full_end);
                    let span = (last - first).max(1);
                    let mut windows = vec![
                        (None, None, 800),
                        (None, None, 1),
                        (Some(first - span), Some(last + span), 333),
                    ];
                    for _ in 0..25 {
                        let len = ((span as f64) * 10f64.powf(-4.0 * (next() % 1000) as f64 / 1000.0)) as i64 + 1;
                        let start = first - span / 10 + (next() % (span as u64 + span as u64 / 5 + 1)) as i64;
                        windows.push((Some(start), Some(start + len), 1 + (next() % 2500) as usize));
                    }
                    for (start, end, width) in windows {
                        let scanned = timeline_on(dev, axis, initial, start, end, width).expect("scanned");
                        let indexed =
                            timeline_with(dev, axis, Some(&index), initial, start, end, width).expect("indexed");
                        assert!(
                            indexed == scanned,
                            "{name} device {} {axis:?} {start:?}..{end:?} at width {width}",
                            d.device
                        );
                        let scanned = category_timeline(dev, axis, start, end, width).expect("scanned");
                        if let Some(cats) = &categories {
                            let indexed = category_timeline_with(dev, axis, Some((&index, cats)), start, end, width)
                                .expect("indexed");
                            assert!(
                                indexed == scanned,
                                "categories: {name} device {} {axis:?} {start:?}..{end:?} at width {width}",
                                d.device
                            );
                        }
                        let scanned = flame_graph(dev, stacks, axis, start, end).expect("scanned");
                        let indexed = flame_graph_with(dev, stacks, axis, Some(&index), start, end).expect("indexed");
                        assert!(
                            indexed == scanned,
                            "flame: {name} device {} {axis:?} {start:?}..{end:?}",
                            d.device
                        );
                        compared += 1;
                    }
                }
            }
        }
    }
    assert!(compared > 1000, "only {compared} timelines compared");
    // The categories' total is the allocated line (shifted) on real traces.
    assert!(
        with_category_index * 10 >= devices * 9,
        "{with_category_index} of {devices} devices got a category index"
    );
}
