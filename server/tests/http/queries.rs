//! Reports answering their queries: the benchmark report, snapshots with NVML logs, what-if,
//! runs of ranks and comparisons, user metadata.

use super::*;

#[test]
fn the_big_benchmark_report_answers_every_query() {
    // Large tables come back from Parquet in several chunks; every query must still answer.
    let Some(big) = manifest_dir()
        .parent()
        .and_then(|r| r.parent())
        .map(|p| p.join("shared/traces/bench/big_many_small.pickle.gz"))
        .filter(|p| p.exists())
    else {
        eprintln!("the shared benchmark trace is absent; nothing to check");
        return;
    };
    let dir = tmpdir("big");
    let s = Server::serve_on(&dir, &[]);
    let bytes = std::fs::read(&big).expect("bench trace");
    let r = ureq::post(&s.url("/api/reports?name=big.pickle.gz"))
        .send_bytes(&bytes)
        .expect("upload");
    let v: Value = serde_json::from_str(&r.into_string().expect("body")).expect("json");
    let id = v["id"].as_str().expect("id").to_owned();
    let st = wait_done(&s, &id);
    assert_eq!(st["state"], "ready", "{st}");
    for q in [
        "timeline?width=800",
        "timeline?width=300&axis=event",
        "segments?event=1000000",
        "fragmentation",
        "allocations?addr=0x0",
        "stacks/1",
    ] {
        let (code, v) = get_json(&s, &format!("/api/reports/{id}/{q}"));
        assert_eq!(code, 200, "{q}: {v}");
    }
    let (_, tl) = get_json(&s, &format!("/api/reports/{id}/timeline?width=800"));
    assert_eq!(tl["allocations_in_window"], 900_000);
    assert_eq!(tl["bands"].as_array().map(Vec::len), Some(2_000));
    // Zooming in reveals every allocation: a narrow window holds fewer than the band cap,
    // and each of them comes back as its own band.
    let (a, b) = (
        tl["full_start"].as_i64().expect("start"),
        tl["full_end"].as_i64().expect("end"),
    );
    let (s0, s1) = (a + (b - a) / 2, a + (b - a) / 2 + (b - a) / 5_000);
    let (_, zoom) = get_json(&s, &format!("/api/reports/{id}/timeline?width=800&start={s0}&end={s1}"));
    let n = zoom["allocations_in_window"].as_u64().expect("count");
    assert!(n > 0 && n < 2_000, "{n}");
    assert_eq!(zoom["bands"].as_array().map(|v| v.len() as u64), Some(n));
    // With every allocation drawn, nothing is left for the aggregated band.
    assert!(
        zoom["rest_max"]
            .as_array()
            .expect("rest")
            .iter()
            .all(|v| v.as_i64() == Some(0)),
        "{}",
        zoom["rest_max"]
    );
}

// The checkout at run time: cargo and nextest set CARGO_MANIFEST_DIR for the test process; the
// compile-time value can be stale when a shared target directory serves several checkouts.

#[test]
fn a_snapshot_and_its_nvml_logs_make_one_report() {
    let dir = tmpdir("nvml");
    let s = Server::serve_on(&dir, &[]);
    let files: Vec<(&str, Vec<u8>)> = [
        "gpt_train.pickle",
        "nvidia_smi_gpu.ist.csv",
        "pynvml_log.jsonl",
        "nvidia_smi_apps.csv",
        "mlp_train.profiler_trace.json",
    ]
    .iter()
    .map(|n| (*n, std::fs::read(trace(n)).expect("trace")))
    .collect();
    let (code, created) = upload(&s, &files);
    assert_eq!(code, 201, "{created}");
    let id = created["id"].as_str().expect("id").to_owned();
    let st = wait_done(&s, &id);
    assert_eq!(st["state"], "ready", "{st}");
    let (_, summary) = get_json(&s, &format!("/api/reports/{id}"));
    // The same as `memlens analyze --json` over the same files.
    let out = Command::new(env!("CARGO_BIN_EXE_memlens"))
        .args(["analyze", "--json"])
        .args(
            [
                "gpt_train.pickle",
                "nvidia_smi_gpu.ist.csv",
                "pynvml_log.jsonl",
                "nvidia_smi_apps.csv",
            ]
            .map(trace),
        )
        .output()
        .expect("cli");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let cli: Value = serde_json::from_slice(&out.stdout).expect("json");
    let logs = summary["gpu_logs"].as_array().expect("gpu_logs");
    assert_eq!(logs.len(), 3);
    for (server, cli) in logs.iter().zip(cli["gpu_logs"].as_array().expect("cli logs")) {
        assert_eq!(server["gpus"], cli["gpus"]);
        assert_eq!(server["clock_offset_minutes"], cli["clock_offset_minutes"]);
    }
    assert_eq!(
        logs[0]["clock_offset_minutes"], -330,
        "IST log lined up with the snapshot"
    );
    // The per-process log's processes get the GPU index the GPU log gives their bus id.
    let procs = &logs[2]["processes"];
    assert_eq!(procs[0]["pid"], 421);
    assert_eq!(procs[0]["gpu"], 0, "{procs}");
    // The profiler trace of the same run is read too (its own file, not another rank).
    assert_eq!(
        summary["files"][1]["file"], "mlp_train.profiler_trace.json",
        "{summary}"
    );
    assert_eq!(summary["files"][1]["format"], "pytorch_profiler_trace");
    assert!(summary["run"].is_null(), "{}", summary["run"]);
    assert_eq!(summary["files"][0]["devices"], cli["files"][0]["devices"]);

    // The level-of-detail series: every sample in a narrow window, aggregates over a wide one.
    let g = &logs[0]["gpus"][0];
    let (t0, t1) = (
        g["start_time_us"].as_i64().expect("t0"),
        g["end_time_us"].as_i64().expect("t1"),
    );
    let (code, wide) = get_json(&s, &format!("/api/reports/{id}/gpu_samples?log=0&width=100"));
    assert_eq!(code, 200, "{wide}");
    assert_eq!(wide["aggregated"], true);
    let points = wide["points"].as_array().expect("points");
    assert!(points.len() <= 102, "{} points", points.len());
    let max = points.iter().filter_map(|p| p["used_max"].as_i64()).max();
    assert_eq!(max, g["peak_used_bytes"].as_i64(), "the wide view keeps the peak");
    let (start, end) = (t0 + 10_000_000, t0 + 12_000_000);
    let (_, narrow) = get_json(
        &s,
        &format!("/api/reports/{id}/gpu_samples?log=0&start={start}&end={end}&width=1000"),
    );
    assert_eq!(narrow["aggregated"], false);
    let n = narrow["points"].as_array().expect("points").len();
    assert!(
        (18..=24).contains(&n),
        "about 20 samples at 10 Hz in 2 s plus the edges: {n}"
    );
    assert!(t1 > end);
    let (code, _) = get_json(&s, &format!("/api/reports/{id}/gpu_samples?log=5"));
    assert_eq!(code, 400);
    let png = ureq::get(&s.url(&format!("/api/reports/{id}/chart.png?log=1")))
        .call()
        .expect("png");
    assert_eq!(png.header("content-type"), Some("image/png"));

    // A report of NVML logs alone is a report too, with its chart as the link preview.
    let csv = std::fs::read(trace("nvidia_smi_dmon.txt")).expect("dmon");
    let (code, created) = upload(&s, &[("nvidia_smi_dmon.txt", csv)]);
    assert_eq!(code, 201, "{created}");
    let id = created["id"].as_str().expect("id").to_owned();
    assert_eq!(wait_done(&s, &id)["state"], "ready");
    let (_, summary) = get_json(&s, &format!("/api/reports/{id}"));
    assert_eq!(summary["files"].as_array().map(Vec::len), Some(0));
    assert_eq!(summary["gpu_logs"][0]["gpus"][0]["peak_used_bytes"], 9781i64 << 20);
    let svg = ureq::get(&s.url(&format!("/api/reports/{id}/chart.svg")))
        .call()
        .expect("svg")
        .into_string()
        .expect("text");
    assert!(svg.contains("peak used 9.55 GiB"), "{}", &svg[..svg.len().min(400)]);
}

#[test]
fn what_if_answers_like_the_cli_and_refuses_unknown_settings() {
    let (s, id) = server_with_report("whatif", &[], "gpt_b8.pickle.gz");
    let (code, v) = get_json(
        &s,
        &format!("/api/reports/{id}/whatif?run_batch_size=8&batch_size=16&activation_checkpointing=true"),
    );
    assert_eq!(code, 200, "{v}");
    let out = Command::new(env!("CARGO_BIN_EXE_memlens"))
        .args(["whatif", "--json", "--batch-size", "8", "--set", "batch_size=16"])
        .args(["--set", "activation_checkpointing=true"])
        .arg(trace("gpt_b8.pickle.gz"))
        .output()
        .expect("cli");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let cli: Value = serde_json::from_slice(&out.stdout).expect("json");
    let dev = &v["devices"][0];
    assert_eq!(
        dev["predicted_peak_allocated_bytes"],
        cli["files"][0]["devices"][0]["predicted_peak_allocated_bytes"]
    );
    assert!(dev["assumptions"].as_array().is_some_and(|a| a.len() >= 2), "{dev}");
    let (code, e) = get_json(&s, &format!("/api/reports/{id}/whatif?batch_sise=16"));
    assert_eq!(code, 400, "{e}");
    assert!(e["error"].as_str().is_some_and(|m| m.contains("batch_sise")), "{e}");
    assert_cli_refuses(
        Command::new(env!("CARGO_BIN_EXE_memlens"))
            .args(["whatif", "--set", "zero_stage=three"])
            .arg(trace("gpt_b8.pickle.gz")),
        "zero_stage",
    );
}

#[test]
fn ranks_uploaded_together_get_a_run_overview_and_any_two_compare_like_the_cli() {
    let dir = tmpdir("ranks");
    let s = Server::serve_on(&dir, &[]);
    let names = [
        "ddp_rank1.pickle.gz",
        "ddp_rank3.pickle.gz",
        "ddp_rank0.pickle.gz",
        "ddp_rank2.pickle.gz",
    ];
    let files: Vec<(&str, Vec<u8>)> = names
        .iter()
        .map(|n| (*n, std::fs::read(trace(n)).expect("trace")))
        .collect();
    let (code, v) = upload(&s, &files);
    assert_eq!(code, 201, "{v}");
    let id = v["id"].as_str().expect("id").to_owned();
    assert_eq!(wait_done(&s, &id)["state"], "ready");
    let (code, report) = get_json(&s, &format!("/api/reports/{id}"));
    assert_eq!(code, 200, "{report}");
    let run = &report["run"];
    assert_eq!(run["worst_rank"], 3, "{run}");
    assert_eq!(run["rank_source"], "file_name");
    assert_eq!(run["imbalanced"], true);
    // The same overview as `memlens analyze --json` of the same files in the same order.
    let out = Command::new(env!("CARGO_BIN_EXE_memlens"))
        .args(["analyze", "--json"])
        .args(names.iter().map(|n| trace(n)))
        .output()
        .expect("cli");
    assert!(out.status.success());
    let cli: Value = serde_json::from_slice(&out.stdout).expect("json");
    for (h, c) in run["ranks"]
        .as_array()
        .expect("ranks")
        .iter()
        .zip(cli["run"]["ranks"].as_array().expect("ranks"))
    {
        assert_eq!(h["rank"], c["rank"]);
        assert_eq!(h["peak_allocated_bytes"], c["peak_allocated_bytes"]);
        assert_eq!(h["file_index"], c["file_index"]);
    }
    // Rank 3 is the second file uploaded, rank 0 the third.
    let (code, c) = get_json(&s, &format!("/api/compare?a={id}:1&b={id}:2"));
    assert_eq!(code, 200, "{c}");
    let diff = Command::new(env!("CARGO_BIN_EXE_memlens"))
        .args(["diff", "--json"])
        .arg(trace("ddp_rank3.pickle.gz"))
        .arg(trace("ddp_rank0.pickle.gz"))
        .output()
        .expect("cli");
    assert!(diff.status.success(), "{}", String::from_utf8_lossy(&diff.stderr));
    let diff: Value = serde_json::from_slice(&diff.stdout).expect("json");
    assert_eq!(c["peak_delta_bytes"], diff["peak_delta_bytes"]);
    assert_eq!(c["by_category"], diff["by_category"]);
    assert_eq!(
        c["by_stack"].as_array().map(Vec::len),
        diff["by_stack"].as_array().map(Vec::len)
    );
    assert_eq!(c["a"]["rank"], 3);
    assert_eq!(c["a"]["label"], "rank 3 · ddp_rank3.pickle.gz");
    // A side that does not exist, or does not parse, is a 400 naming it.
    let (code, e) = get_json(&s, &format!("/api/compare?a={id}:9&b={id}:0"));
    assert_eq!(code, 400, "{e}");
    assert!(e["error"].as_str().is_some_and(|m| m.contains("no file 9")), "{e}");
    let (code, e) = get_json(&s, &format!("/api/compare?a={id}:x&b={id}"));
    assert_eq!(code, 400, "{e}");
    let (code, _) = get_json(&s, &format!("/api/compare?a=0123456789abcdef0123456789abcdef&b={id}"));
    assert_eq!(code, 404);
    // The share page of a comparison names both files.
    let page = ureq::get(&s.url(&format!("/compare/{id}:1/{id}:2")))
        .call()
        .expect("page")
        .into_string()
        .expect("html");
    assert!(page.contains("ddp_rank3.pickle.gz vs ddp_rank0.pickle.gz"), "{page}");
}

#[test]
fn user_metadata_rides_on_the_bands_it_labelled_before_and_after_a_restart() {
    // traces/capture/labels.py: each batch allocated under `_set_memory_metadata("category=input")`.
    let dir = tmpdir("metadata");
    let s = Server::serve_on(&dir, &[]);
    let id = ready_report(&s, "labels.pickle");
    let labelled = |s: &Server, q: &str| -> Vec<String> {
        let (code, v) = get_json(s, &format!("/api/reports/{id}/{q}"));
        assert_eq!(code, 200, "{v}");
        let bands = v["bands"]
            .as_array()
            .or(v["allocations"].as_array())
            .cloned()
            .unwrap_or_default();
        bands
            .iter()
            .filter_map(|b| b["user_metadata"].as_str().map(str::to_owned))
            .collect()
    };
    let first = labelled(&s, "timeline?width=400");
    assert!(first.iter().any(|m| m == "category=input"), "{first:?}");
    assert!(labelled(&s, "allocations?stack=labels")
        .iter()
        .any(|m| m == "category=input"));
    s.kill();
    let s = Server::serve_on(&dir, &[]);
    assert_eq!(labelled(&s, "timeline?width=400"), first);
}
