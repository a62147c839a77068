//! `memlens-bench-segments [FILE]`: latency and payload of segment-map queries on an imported
//! snapshot: the checkpoint build (its time and size), then 50 random instants answered from the
//! checkpoints, each at full detail and at the level of detail the report page asks for (the
//! largest segments at its canvas width); then the same instants as a stored report answers
//! them: the Parquet objects the store keeps ([`stored_objects`]: one a checkpoint, each with
//! the entries before it), and a map decoding the one object that covers its entry. Every
//! stored answer is checked equal to the in-memory one. Defaults to the shared benchmark file. Run it in release mode.

use std::time::Instant;

use memlens_bench::{bench_file, percentile};

use memlens::storage::parquet_object::{self, RowGroups};
use memlens::storage::reportdata::segment_object_bytes;
use memlens_core::importers::{import_path, Imported};
use memlens_core::stored::{
    stored_checkpoint, stored_objects, DeviceEvents, EntryRows, SegmentCheckpoints, SegmentDetail, CHECKPOINTS,
};

fn main() {
    // As the `memlens` binary starts.
    memlens_core::infra::free_memory::one_arena_per_cpu();
    let path = bench_file();
    let tables = match import_path(&path, Default::default()).map(|f| f.data) {
        Ok(Imported::Snapshot(t)) => t,
        Ok(Imported::GpuSamples(_) | Imported::Text(_)) => {
            eprintln!("memlens-bench-segments: {}: not an allocator snapshot", path.display());
            std::process::exit(2);
        }
        Err(e) => {
            eprintln!("memlens-bench-segments: {}: {e}", path.display());
            std::process::exit(2);
        }
    };
    let device = tables
        .events
        .column("device")
        .and_then(|c| c.i64().cloned())
        .ok()
        .and_then(|c| c.get(0))
        .unwrap_or(0);
    let ev = DeviceEvents::new(&tables, device).expect("device events");
    let n = ev.len();
    println!("report          {} ({n} entries on device {device})", path.display());

    let built = Instant::now();
    let checkpoints = SegmentCheckpoints::build(&tables, &ev, CHECKPOINTS).expect("checkpoints");
    println!(
        "{} checkpoints built in {:.0} ms, {:.1} MiB",
        checkpoints.len(),
        built.elapsed().as_secs_f64() * 1e3,
        checkpoints.bytes() as f64 / (1024.0 * 1024.0)
    );

    // Deterministic pseudo-random instants (xorshift).
    let mut x: u64 = 0x9E3779B97F4A7C15;
    let instants: Vec<usize> = (0..50)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n.max(1) as u64) as usize
        })
        .collect();
    for (label, detail) in [
        ("full detail", SegmentDetail::FULL),
        (
            "page detail (80 segments, 1430 px)",
            SegmentDetail {
                max_segments: Some(80),
                width: Some(1430),
            },
        ),
    ] {
        let mut ms = Vec::new();
        let mut max_bytes = 0;
        for &i in &instants {
            let s = Instant::now();
            let map = checkpoints.map_at(&ev, Some(i), detail).expect("map").expect("covered");
            let json = serde_json::to_vec(&map).expect("json");
            ms.push(s.elapsed().as_secs_f64() * 1e3);
            max_bytes = max_bytes.max(json.len());
        }
        ms.sort_by(f64::total_cmp);
        println!(
            "{label:<36} 50 maps p50 {:.1} ms, p95 {:.1} ms, max payload {:.0} KiB",
            percentile(&ms, 0.5),
            percentile(&ms, 0.95),
            max_bytes as f64 / 1024.0
        );
    }

    // As a stored report: the Parquet objects the store keeps, each with the entries before it.
    // The frames (the state and its entries packed) and their encoding timed apart; together,
    // what `segment_object_bytes` does for each object of a stored report.
    let (mut framing, mut encoding) = (0.0, 0.0);
    let mut objects = Vec::new();
    for object in stored_objects(&checkpoints, &EntryRows::of(&ev)) {
        let started = Instant::now();
        let frame = object.frame().expect("frame");
        framing += started.elapsed().as_secs_f64();
        let started = Instant::now();
        let bytes = parquet_object::encode(&frame, RowGroups::Default).expect("parquet");
        encoding += started.elapsed().as_secs_f64();
        debug_assert!(segment_object_bytes("segments", &object).is_ok_and(|b| b == bytes));
        objects.push((object.cursor, bytes));
    }
    println!(
        "stored checkpoints   {} objects, {:.1} MiB, written in {:.0} ms (frames {:.0} ms, encoding {:.0} ms)",
        objects.len(),
        objects.iter().map(|(_, b)| b.len()).sum::<usize>() as f64 / (1024.0 * 1024.0),
        (framing + encoding) * 1e3,
        framing * 1e3,
        encoding * 1e3
    );
    let detail = SegmentDetail {
        max_segments: Some(80),
        width: Some(1430),
    };
    let (mut decode, mut total) = (Vec::new(), Vec::new());
    for &i in &instants {
        let s = Instant::now();
        let cursor = i + 1;
        let (_, bytes) = &objects[objects.partition_point(|(c, _)| *c < cursor)];
        let frame = parquet_object::decode(bytes.clone()).expect("read");
        let cp = stored_checkpoint(&frame).expect("checkpoint");
        decode.push(s.elapsed().as_secs_f64() * 1e3);
        let map = cp.map_at(cursor, ev.device, ev.time_us(i), detail);
        let json = serde_json::to_vec(&map).expect("json");
        total.push(s.elapsed().as_secs_f64() * 1e3);
        let in_memory = checkpoints.map_at(&ev, Some(i), detail).expect("map").expect("covered");
        if map != in_memory || json.is_empty() {
            eprintln!("memlens-bench-segments: the stored checkpoint's map at entry {i} differs");
            std::process::exit(1);
        }
    }
    decode.sort_by(f64::total_cmp);
    total.sort_by(f64::total_cmp);
    println!(
        "{:<36} 50 maps p50 {:.1} ms, p95 {:.1} ms (of which decoding the object p50 {:.1} ms, p95 {:.1} ms)",
        "page detail from stored objects",
        percentile(&total, 0.5),
        percentile(&total, 0.95),
        percentile(&decode, 0.5),
        percentile(&decode, 0.95)
    );
}
