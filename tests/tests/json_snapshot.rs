//! Snapshots saved as JSON (`json.dump(torch.cuda.memory._snapshot())`): the real capture
//! traces/json_run (an MLP trained on the H200, the same snapshot dumped both ways) gives the
//! pickle's whole summary — every table-derived number — and PyTorch's own counters; broken
//! JSON is an error naming where.

use memlens_api::Format;
use memlens_core::pipeline::analyze_paths;
use memlens_tests::{oracle_value, trace};

#[test]
fn a_json_snapshot_reads_exactly_as_its_pickle() {
    let json = analyze_paths(&[trace("json_run.json.gz")]).expect("json");
    let pickle = analyze_paths(&[trace("json_run.pickle.gz")]).expect("pickle");
    let (mut j, p) = (json.files[0].clone(), pickle.files[0].clone());
    assert_eq!(j.format, Format::PytorchSnapshotJson);
    let oracle = trace("json_run.memory_stats.json");
    assert_eq!(
        j.devices[0].peak_allocated_bytes,
        oracle_value(&oracle, "requested_bytes.all.peak")
    );
    assert_eq!(
        j.devices[0].peak_reserved_bytes,
        oracle_value(&oracle, "reserved_bytes.all.peak")
    );
    j.format = p.format;
    j.file = p.file.clone();
    assert_eq!(j, p, "the JSON snapshot's summary differs from its pickle's");
}

#[test]
fn broken_json_is_an_error_naming_where() {
    let dir = std::env::temp_dir().join(format!("memlens-json-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(trace("json_run.json.gz")).expect("open"))
        .read_to_string(&mut text)
        .expect("gunzip");
    let cut = dir.join("cut.json");
    std::fs::write(&cut, &text[..text.len() / 2]).expect("write");
    let e = analyze_paths(&[cut]).expect_err("cut short");
    assert!(e.to_string().contains("JSON: EOF while parsing"), "{e}");
    let _ = std::fs::remove_dir_all(dir);
}

use std::io::Read;

#[test]
fn memory_held_by_another_library_shows_as_outside_pytorch() {
    // CuPy held 3 GiB on the H200 while PyTorch trained beside it (traces/capture/round2.py),
    // nvidia-smi sampling the GPU every 100 ms.
    let out = analyze_paths(&[trace("cupy_outside.pickle.gz"), trace("cupy_outside.nvidia_smi.csv")]).expect("analyze");
    let g = &out.gpu_logs[0].gpus[0];
    let outside = g.non_pytorch_peak_bytes.expect("memory outside PyTorch");
    assert!(outside >= 3 << 30, "{outside}");
    // The rest is the CUDA context and library workspaces: well under a GiB more.
    assert!(outside < (3 << 30) + (1 << 30), "{outside}");
    // The snapshot's own peaks are PyTorch's counters.
    let oracle = trace("cupy_outside.memory_stats.json");
    assert_eq!(
        out.files[0].devices[0].peak_reserved_bytes,
        oracle_value(&oracle, "reserved_bytes.all.peak")
    );
    // Without a snapshot of the same run there is nothing to subtract.
    let alone = analyze_paths(&[trace("cupy_outside.nvidia_smi.csv")]).expect("analyze");
    assert_eq!(alone.gpu_logs[0].gpus[0].non_pytorch_peak_bytes, None);
}

#[test]
fn a_trace_whose_ring_buffer_dropped_the_start_is_flagged() {
    // max_entries=300 on an 8-step run: the first entries free what the trace never saw made.
    let d = &analyze_paths(&[trace("ring_truncated.pickle.gz")])
        .expect("analyze")
        .files[0]
        .devices[0];
    assert!(d.trace_truncated);
    assert!(d.frees_before_trace > 0);
    assert!(d.complete_from_us.is_some());
    // The numbers stay PyTorch's.
    let oracle = trace("ring_truncated.memory_stats.json");
    assert_eq!(
        d.peak_allocated_bytes,
        oracle_value(&oracle, "requested_bytes.all.peak")
    );
    assert_eq!(d.peak_reserved_bytes, oracle_value(&oracle, "reserved_bytes.all.peak"));
    // A run recorded from its start is not flagged.
    for name in ["mlp_train.pickle", "gpt_train.pickle", "json_run.pickle.gz"] {
        let d = &analyze_paths(&[trace(name)]).expect("analyze").files[0].devices[0];
        assert!(!d.trace_truncated, "{name}");
    }
}

#[test]
fn a_mempool_run_shows_its_pool_beside_the_default_one() {
    // Activations of one forward made inside a torch.cuda.MemPool (traces/capture/round2.py).
    let d = &analyze_paths(&[trace("mempool.pickle.gz")]).expect("analyze").files[0].devices[0];
    assert_eq!(d.pools.len(), 2, "{:?}", d.pools);
    assert_eq!(d.pools[0].kind, memlens_api::PoolKind::Default);
    let pool = &d.pools[1];
    assert_eq!((pool.kind, pool.pool_id), (memlens_api::PoolKind::MemPool, [0, 1]));
    assert!(pool.final_allocated_bytes > 0 && pool.peak_reserved_bytes >= pool.final_reserved_bytes);
    // The pools add up to the device: at the end, and (here, where both peak at the end) at the peak.
    let end: i64 = d.pools.iter().map(|p| p.final_reserved_bytes).sum();
    assert_eq!(end, d.final_reserved_bytes);
    let oracle = trace("mempool.memory_stats.json");
    assert_eq!(d.peak_reserved_bytes, oracle_value(&oracle, "reserved_bytes.all.peak"));
    // A run without private pools has the default one only.
    let plain = &analyze_paths(&[trace("json_run.pickle.gz")]).expect("analyze").files[0].devices[0];
    assert_eq!(plain.pools.len(), 1);
    assert_eq!(plain.pools[0].peak_reserved_bytes, plain.peak_reserved_bytes);
}

#[test]
fn pools_are_named_by_the_metadata_of_what_they_hold_and_drawn_over_time() {
    // Two MemPools named through `_set_memory_metadata("pool=…")`; kv_cache grows by two
    // 64 MiB tensors each of 4 steps (traces/capture/named_pools.py).
    let d = &analyze_paths(&[trace("named_pools.pickle.gz")]).expect("analyze").files[0].devices[0];
    let names: Vec<(Option<&str>, [i64; 2])> = d.pools.iter().map(|p| (p.name.as_deref(), p.pool_id)).collect();
    assert_eq!(
        names,
        vec![(None, [0, 0]), (Some("kv_cache"), [0, 1]), (Some("scratch"), [0, 2])]
    );
    let kv = &d.pools[1];
    assert_eq!(kv.peak_reserved_bytes, 8 * (64 << 20));
    // Its envelope: from nothing, one step per 64 MiB segment, ending at its final reserve.
    let s = &kv.reserved_series;
    assert_eq!(s.first().map(|p| p.bytes), Some(0));
    assert_eq!(s.last().map(|p| p.bytes), Some(kv.final_reserved_bytes));
    assert_eq!(s.len(), 9, "{s:?}");
    assert!(s
        .windows(2)
        .all(|w| w[0].x <= w[1].x && w[1].bytes - w[0].bytes == 64 << 20));
    assert!(d.pools[0].reserved_series.is_empty(), "the default pool is the rest");
    assert_eq!(
        d.peak_reserved_bytes,
        oracle_value(&trace("named_pools.memory_stats.json"), "reserved_bytes.all.peak")
    );
    use memlens_core::analysis::pools::pool_in_metadata;
    for (m, want) in [
        ("pool=kv_cache", Some("kv_cache")),
        ("rank=3, pool_name: draft", Some("draft")),
        ("{\"mempool\": \"graphs\"}", Some("graphs")),
        ("spool=x", None),
        ("category=input", None),
    ] {
        assert_eq!(pool_in_metadata(m), want, "{m}");
    }
}

/// The DCGM capture's text (traces/capture/dcgm.py: dcgm-exporter's format written from the
/// nvidia-smi readings of a real run, kept beside it as CSV).
fn dcgm_text() -> String {
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(trace("dcgm_run.prom.gz")).expect("open"))
        .read_to_string(&mut text)
        .expect("gunzip");
    text
}

#[test]
fn dcgm_exporter_metrics_read_as_the_readings_they_were_written_from() {
    let out = analyze_paths(&[trace("dcgm_run.prom.gz"), trace("dcgm_run.nvidia_smi.csv")]).expect("analyze");
    let (dcgm, smi) = (&out.gpu_logs[0], &out.gpu_logs[1]);
    assert_eq!(dcgm.format, Format::DcgmExporter);
    let (d, s) = (&dcgm.gpus[0], &smi.gpus[0]);
    assert_eq!(d.sample_count, s.sample_count);
    assert_eq!(d.peak_used_bytes, s.peak_used_bytes);
    assert_eq!(d.driver_reserved_bytes, s.driver_reserved_bytes);
    assert_eq!(d.name.as_deref(), Some("NVIDIA H200"));
    assert_eq!(d.bus_id, s.bus_id);
    // Beside the run's snapshot, the memory outside PyTorch is stated.
    let with = analyze_paths(&[trace("dcgm_run.pickle.gz"), trace("dcgm_run.prom.gz")]).expect("analyze");
    assert!(with.gpu_logs[0].gpus[0].non_pytorch_peak_bytes.is_some_and(|b| b > 0));
}

#[test]
fn dcgm_scrapes_without_timestamps_or_with_a_gpu_twice_at_once() {
    let dir = std::env::temp_dir().join(format!("memlens-dcgm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let text = dcgm_text();
    // Without timestamps: one sample per scrape, numbered.
    let bare: String = text
        .lines()
        .map(|l| {
            if l.starts_with("DCGM_") {
                l.rsplit_once(' ').map_or(l, |x| x.0)
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let p = dir.join("bare.prom");
    std::fs::write(&p, bare).expect("write");
    let g = &analyze_paths(&[p]).expect("analyze").gpu_logs[0];
    let with_times = &analyze_paths(&[trace("dcgm_run.prom.gz")]).expect("analyze").gpu_logs[0];
    assert_eq!(g.gpus[0].sample_count, with_times.gpus[0].sample_count);
    assert!(g.skipped_lines.iter().any(|l| l.contains("no timestamps")));
    // The same GPU twice at one instant names the lines.
    let first_used = text
        .lines()
        .find(|l| l.starts_with("DCGM_FI_DEV_FB_USED"))
        .expect("a sample");
    let p = dir.join("twice.prom");
    std::fs::write(&p, format!("{first_used}\n{first_used}\n")).expect("write");
    let e = analyze_paths(&[p]).expect_err("twice");
    assert!(
        e.to_string().contains("line 2") && e.to_string().contains("twice at one instant"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn frees_waiting_on_another_stream_are_flagged_with_what_they_held() {
    // Each step hands a 256 MiB tensor to a side stream (record_stream) and drops it; the side
    // stream's matmuls keep it for about 0.6 s (traces/capture/stalled_frees.py, on the H200).
    let d = &analyze_paths(&[trace("stalled_frees.pickle.gz")])
        .expect("analyze")
        .files[0]
        .devices[0];
    assert_eq!(d.pending_free_stalls.len(), 1, "{:?}", d.pending_free_stalls);
    let s = &d.pending_free_stalls[0];
    assert_eq!((s.count, s.largest_block_bytes), (5, 256 << 20));
    assert!(s.longest_wait_us > 100_000 && s.mean_wait_us > 100_000, "{s:?}");
    assert!(
        s.stack.first().is_some_and(|f| f.starts_with("stalled_frees.py:18 ")),
        "{s:?}"
    );
    // One block at a time waits (the default stream's small frees do not stall).
    assert_eq!(d.pending_free_peak_bytes, 256 << 20);
    let oracle = trace("stalled_frees.memory_stats.json");
    assert_eq!(
        d.peak_allocated_bytes,
        oracle_value(&oracle, "requested_bytes.all.peak")
    );
    // Training without side streams has none.
    let plain = &analyze_paths(&[trace("gpt_train.pickle")]).expect("analyze").files[0].devices[0];
    assert!(plain.pending_free_stalls.is_empty());
}

/// A JSON snapshot written by hand, analysed through a file named `name`.
fn analyze_written(name: &str, json: &serde_json::Value) -> memlens_api::AnalyzeOutput {
    let dir = std::env::temp_dir().join(format!("memlens-written-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_vec(json).expect("json")).expect("write");
    let out = analyze_paths(&[path]).expect("analyze");
    let _ = std::fs::remove_dir_all(&dir);
    out
}

#[test]
fn pinned_host_memory_is_its_own_device_and_never_where_a_report_opens() {
    // `host_segments`/`host_traces` (PyTorch after 2.11, `record_pinned_host_memory=True`; the
    // H200's PyTorch 2.11 cannot record them, so this file is written by hand in the shape of
    // the pinned host allocator, which mirrors the device allocator's segments and entries).
    let host = 1i64 << 40;
    let json = serde_json::json!({
        "segments": [{"device": 0, "address": 4096, "total_size": 2097152, "stream": 0,
            "segment_type": "small", "allocated_size": 512, "active_size": 512, "requested_size": 500,
            "blocks": [{"address": 4096, "size": 512, "requested_size": 500, "state": "active_allocated", "frames": []},
                       {"address": 4608, "size": 2096640, "requested_size": 0, "state": "inactive", "frames": []}]}],
        "device_traces": [[
            {"action": "segment_alloc", "addr": 4096, "size": 2097152, "stream": 0, "time_us": 1, "frames": []},
            {"action": "alloc", "addr": 4096, "size": 500, "stream": 0, "time_us": 2, "frames": []}]],
        "host_segments": [{"device": 0, "address": host, "total_size": 4194304, "stream": 0,
            "segment_type": "large", "allocated_size": 1048576, "active_size": 1048576, "requested_size": 1048576,
            "blocks": [{"address": host, "size": 1048576, "requested_size": 1048576, "state": "active_allocated", "frames": []},
                       {"address": host + 1048576, "size": 3145728, "requested_size": 0, "state": "inactive", "frames": []}]}],
        "host_traces": [
            {"action": "segment_alloc", "addr": host, "size": 4194304, "stream": 0, "time_us": 3, "frames": []},
            {"action": "alloc", "addr": host, "size": 1048576, "stream": 0, "time_us": 4, "frames": []},
            {"action": "alloc", "addr": host + 1048576, "size": 2097152, "stream": 0, "time_us": 5, "frames": []},
            {"action": "free_requested", "addr": host + 1048576, "size": 2097152, "stream": 0, "time_us": 6, "frames": []},
            {"action": "free_completed", "addr": host + 1048576, "size": 2097152, "stream": 0, "time_us": 6, "frames": []}]
    });
    let out = analyze_written("host.json", &json);
    let f = &out.files[0];
    let devices: Vec<i64> = f.devices.iter().map(|d| d.device).collect();
    assert_eq!(devices, vec![memlens_api::HOST_DEVICE, 0]);
    assert_eq!(f.focus_device, Some(0), "a report opens on the GPU");
    let (h, g) = (&f.devices[0], &f.devices[1]);
    assert_eq!(
        (h.peak_allocated_bytes, h.final_allocated_bytes, h.peak_reserved_bytes),
        (3 << 20, 1 << 20, 4 << 20)
    );
    assert_eq!((g.peak_allocated_bytes, g.peak_reserved_bytes), (500, 2 << 20));
    assert!(
        f.source.notes.iter().any(|n| n.contains("host (pinned)")),
        "{:?}",
        f.source.notes
    );
    assert!(f.source.ignored_keys.is_empty(), "{:?}", f.source.ignored_keys);
}

#[test]
fn annotate_entries_become_named_instants_and_change_no_number() {
    // `annotate` entries (`torch.cuda.memory._annotate_memory`, PyTorch after 2.11; 2.11 on
    // the H200 cannot write them, so this file is written by hand in the documented shape:
    // an entry whose action is `annotate`, carrying `user_metadata`).
    let entry = |action: &str, addr: i64, size: i64, t: i64, meta: Option<&str>| {
        let mut e =
            serde_json::json!({"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t, "frames": []});
        if let Some(m) = meta {
            e["user_metadata"] = serde_json::json!(m);
        }
        e
    };
    let json = serde_json::json!({
        "segments": [],
        "device_traces": [[
            entry("segment_alloc", 4096, 2097152, 1, None),
            entry("annotate", 0, 0, 2, Some("step=1")),
            entry("alloc", 4096, 1024, 3, None),
            entry("free_requested", 4096, 1024, 4, None),
            entry("free_completed", 4096, 1024, 4, None),
            entry("annotate", 0, 0, 5, Some("step=2")),
            entry("segment_free", 4096, 2097152, 6, None)]]
    });
    let out = analyze_written("annotated.json", &json);
    let d = &out.files[0].devices[0];
    let marks: Vec<(&str, i64, Option<i64>)> = d
        .phases
        .iter()
        .map(|p| (p.name.as_str(), p.start_us, p.end_us))
        .collect();
    assert_eq!(marks, vec![("step=1", 2, Some(2)), ("step=2", 5, Some(5))]);
    assert_eq!(
        (d.peak_allocated_bytes, d.peak_reserved_bytes, d.alloc_count),
        (1024, 2097152, 1)
    );
}
