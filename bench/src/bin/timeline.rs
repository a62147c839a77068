//! `memlens-bench-timeline [FILE]`: latency and payload of level-of-detail timeline queries
//! (query + JSON encoding) on a processed report, over the full range and 100 random zoom
//! windows: first by a pass over the frames, then answered from the device's timeline index
//! (its build time and size are printed, and every indexed answer is checked equal to the
//! scanned one); then the category timeline and the flame graph of the same windows, each by a
//! pass and from its index, checked equal the same way. Defaults to the shared benchmark file.
//! Run it in release mode.

use memlens_core::pipeline::Pipeline;
use std::time::Instant;

use memlens_bench::{bench_file, percentile, time_windows};

use memlens_core::pipeline::{Input, KeepFrames};
use memlens_core::query::{
    category_timeline_with, flame_graph_with, timeline_with, Axis, CategoryIndex, TimelineIndex,
};

fn main() {
    // As the `memlens` binary starts.
    memlens_core::infra::free_memory::one_arena_per_cpu();
    let path = bench_file();
    let mut sink = KeepFrames {
        with_stacks: true,
        ..KeepFrames::default()
    };
    let out = match Pipeline::keeping_frames().run(vec![Input::path(&path)], &mut sink) {
        Ok(out) => out,
        Err(e) => {
            eprintln!("memlens-bench-timeline: {e}");
            std::process::exit(2);
        }
    };
    let (Some(d), Some(dev), Some(stacks)) = (
        out.files.first().and_then(|f| f.devices.first()),
        sink.files.into_iter().next().and_then(|f| f.into_iter().next()),
        sink.stacks.into_iter().next(),
    ) else {
        eprintln!("memlens-bench-timeline: {}: no snapshot device", path.display());
        std::process::exit(2);
    };
    let initial = d.initial_allocated_bytes;
    let time = memlens_core::tables::columns::usage::times(&dev.usage)
        .map(|t| t.to_vec())
        .unwrap_or_default();
    let (t0, t1) = (time[0], time[time.len() - 1]);

    // Deterministic pseudo-random windows (xorshift), widths from 1e-5 to 1 of the range.
    let mut x: u64 = 0x9E3779B97F4A7C15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f64 / (1u64 << 53) as f64
    };
    let windows: Vec<(i64, i64)> = (0..100)
        .map(|_| {
            let frac = 10f64.powf(-5.0 * next());
            let span = ((t1 - t0) as f64 * frac).max(1.0) as i64;
            let start = t0 + ((t1 - t0 - span) as f64 * next()) as i64;
            (start, start + span)
        })
        .collect();
    println!(
        "report          {} ({} entries, {} allocations)",
        path.display(),
        time.len(),
        dev.lifetimes.height()
    );

    let built = Instant::now();
    let index = TimelineIndex::build(&dev, Axis::Time).expect("index");
    let build_ms = built.elapsed().as_secs_f64() * 1e3;
    let mut answers = Vec::new();
    for index in [None, Some(&index)] {
        let t = time_windows(20, &windows, |start, end| {
            let tl = timeline_with(&dev, Axis::Time, index, initial, start, end, 1600).expect("timeline");
            serde_json::to_vec(&tl).expect("json")
        });
        let payload = |answers: &[Vec<u8>]| answers.iter().map(Vec::len).max().unwrap_or(0) as f64 / 1024.0;
        match index {
            None => println!("by a pass over the frames:"),
            Some(ix) => println!(
                "from the index (built in {build_ms:.0} ms, {:.1} MiB):",
                ix.bytes() as f64 / (1024.0 * 1024.0)
            ),
        }
        println!(
            "  full range    p50 {:.1} ms, p95 {:.1} ms, payload {:.0} KiB",
            percentile(&t.full, 0.5),
            percentile(&t.full, 0.95),
            payload(&t.answers[..20])
        );
        println!(
            "  100 zooms     p50 {:.1} ms, p95 {:.1} ms, max payload {:.0} KiB",
            percentile(&t.zoom, 0.5),
            percentile(&t.zoom, 0.95),
            payload(&t.answers[20..])
        );
        answers.push(t.answers);
    }
    if answers[0] != answers[1] {
        eprintln!("memlens-bench-timeline: an indexed answer differs from the scanned one");
        std::process::exit(1);
    }
    println!("every indexed answer equals the scanned one");

    // What the report page asks for the same window next: the category breakdown.
    let built = Instant::now();
    let categories = CategoryIndex::build(&dev).expect("category index");
    let build_ms = built.elapsed().as_secs_f64() * 1e3;
    let mut answers = Vec::new();
    for cats in [None, categories.as_ref()] {
        let t = time_windows(5, &windows[..20], |start, end| {
            let index = cats.map(|c| (&index, c));
            let c = category_timeline_with(&dev, Axis::Time, index, start, end, 1600).expect("categories");
            serde_json::to_vec(&c).expect("json")
        });
        match cats {
            None => println!("category timeline by a pass over the frames:"),
            Some(c) => println!(
                "category timeline from the index (built in {build_ms:.0} ms, {:.1} MiB):",
                c.bytes() as f64 / (1024.0 * 1024.0)
            ),
        }
        print_full_and_zooms(&t);
        answers.push(t.answers);
    }
    if categories.is_none() {
        println!("  (no category index: the categories' total is not the allocated line)");
    } else if answers[0] != answers[1] {
        eprintln!("memlens-bench-timeline: an indexed category answer differs from the scanned one");
        std::process::exit(1);
    }

    // The flame graph of the same windows.
    let mut answers = Vec::new();
    for ix in [None, Some(&index)] {
        let t = time_windows(5, &windows[..20], |start, end| {
            let g = flame_graph_with(&dev, &stacks, Axis::Time, ix, start, end).expect("flame");
            serde_json::to_vec(&g).expect("json")
        });
        println!(
            "flame graph {}:",
            if ix.is_some() {
                "from the timeline index"
            } else {
                "by a pass over the allocations"
            }
        );
        print_full_and_zooms(&t);
        answers.push(t.answers);
    }
    if answers[0] != answers[1] {
        eprintln!("memlens-bench-timeline: an indexed flame graph differs from the scanned one");
        std::process::exit(1);
    }
}

/// The line under a category or flame heading.
fn print_full_and_zooms(t: &memlens_bench::Timed) {
    println!(
        "  full range p50 {:.1} ms, {} zooms p50 {:.1} ms, p95 {:.1} ms",
        percentile(&t.full, 0.5),
        t.zoom.len(),
        percentile(&t.zoom, 0.5),
        percentile(&t.zoom, 0.95)
    );
}
