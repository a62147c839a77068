//! Loaded reports in memory within the cache budget, and first views after a restart from what
//! the store keeps.

use super::*;

/// `memlens_file_loads_total` from `/metrics`.
fn file_loads(s: &Server) -> u64 {
    counter(s, "memlens_file_loads")
}

#[test]
fn loaded_reports_are_kept_within_the_cache_budget_and_one_larger_is_not_kept() {
    for (cache_mb, loads) in [("4096", 1), ("1", 3)] {
        let dir = tmpdir(&format!("cache-{cache_mb}"));
        let s = Server::serve_on(&dir, &["--cache-mb", cache_mb]);
        // Its device frames alone (what a timeline reads) are over 1 MB.
        let id = ready_report(&s, "many_small.pickle.gz");
        // A new process: what it holds comes from the queries alone.
        s.kill();
        let s = Server::serve_on(&dir, &["--cache-mb", cache_mb]);
        for _ in 0..3 {
            let (code, _) = get_json(&s, &format!("/api/reports/{id}/timeline?width=100"));
            assert_eq!(code, 200);
        }
        assert_eq!(file_loads(&s), loads, "--cache-mb {cache_mb}: loads for three queries");
    }
}

/// A server on the embedded store (`None` on the shared one, whose uploads are imported by
/// their jobs) with `--cache-mb cache_mb`, holding a small report it just processed, and a
/// query on that report; the report was read from memory, not loaded.
fn a_report_in_the_cache(tag: &str, cache_mb: &str) -> Option<(Server, impl Fn(&Server))> {
    if shared_backend().is_some() {
        return None;
    }
    let s = Server::serve_in(tmpdir(tag), &["--cache-mb", cache_mb]);
    let kept = ready_report(&s, "labels.pickle");
    let query = move |s: &Server| {
        let (code, v) = get_json(s, &format!("/api/reports/{kept}/timeline?width=300"));
        assert_eq!(code, 200, "{v}");
    };
    query(&s);
    assert_eq!(file_loads(&s), 0, "the report just processed is in the cache");
    Some((s, query))
}

#[test]
fn an_upload_imported_while_it_arrives_makes_room_in_the_cache_before_it_grows() {
    // A cache of 1 MiB holds the small report just processed; an upload of 1.6 MB, imported
    // while it arrives, will hold more than the whole budget: the report leaves as soon as the
    // upload's first bytes are in, not once the upload is over (its queries then load it again).
    let Some((s, query)) = a_report_in_the_cache("room", "1") else {
        return; // A shared store's uploads are imported by their jobs, after they arrive.
    };
    query(&s);

    use std::io::{Read, Write};
    let name = "kv_cache_inference.pickle";
    let bytes = std::fs::read(trace(name)).expect("trace");
    let mut c = half_an_upload(&s, name, &bytes);
    let start = Instant::now();
    while file_loads(&s) == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the cached report stayed while the upload arrived"
        );
        std::thread::sleep(Duration::from_millis(50));
        query(&s);
    }
    assert_eq!(counter(&s, "memlens_imports_ahead"), 2);
    // The rest arrives; the upload is a report like any other.
    c.write_all(&bytes[bytes.len() / 2..]).expect("rest");
    let mut answer = String::new();
    c.read_to_string(&mut answer).expect("answer");
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    let body = &answer[answer.find("\r\n\r\n").expect("head") + 4..];
    let v: Value = serde_json::from_str(body).expect("json");
    let id = v["id"].as_str().expect("id");
    assert_eq!(wait_done(&s, id)["state"], "ready");
    let (_, summary) = get_json(&s, &format!("/api/reports/{id}"));
    assert_eq!(
        summary["files"][0]["devices"][0]["peak_allocated_bytes"],
        oracle_value_of(name),
        "{summary}"
    );
}

#[test]
fn an_upload_that_declares_no_length_makes_room_for_what_arrives_not_for_the_largest_allowed() {
    // A chunked upload (as `memlens upload` streams) of 1.6 MB, half of it in, under a cache of
    // 64 MiB holding a small report: the import ahead takes room for a few MB, and the report
    // stays (taken for the largest upload allowed, the whole budget, it would leave).
    let Some((s, query)) = a_report_in_the_cache("chunked", "64") else {
        return; // A shared store's uploads are imported by their jobs, after they arrive.
    };

    use std::io::{Read, Write};
    let name = "kv_cache_inference.pickle";
    let bytes = std::fs::read(trace(name)).expect("trace");
    let addr = s.base.trim_start_matches("http://");
    let mut c = std::net::TcpStream::connect(addr).expect("connect");
    let half = bytes.len() / 2;
    write!(
        c,
        "POST /api/reports?name={name} HTTP/1.1\r\nHost: {addr}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{half:x}\r\n"
    )
    .expect("head");
    c.write_all(&bytes[..half]).expect("half");
    c.write_all(b"\r\n").expect("chunk end");
    c.flush().expect("flush");
    let start = Instant::now();
    while counter(&s, "memlens_imports_ahead") < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the upload was never imported ahead"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Its first bytes are taken in right after the import begins.
    std::thread::sleep(Duration::from_millis(300));
    query(&s);
    assert_eq!(file_loads(&s), 0, "the cached report was let go for a small upload");
    write!(c, "{:x}\r\n", bytes.len() - half).expect("chunk head");
    c.write_all(&bytes[half..]).expect("rest");
    c.write_all(b"\r\n0\r\n\r\n").expect("last chunk");
    let mut answer = String::new();
    c.read_to_string(&mut answer).expect("answer");
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
}

#[test]
fn a_report_just_processed_answers_its_first_queries_from_memory_as_after_a_restart() {
    let dir = tmpdir("warm");
    let s = Server::serve_on(&dir, &[]);
    let id = ready_report(&s, "labels.pickle");
    let queries = [
        "timeline?width=300",
        "categories?width=300",
        "fragmentation",
        "flame",
        "allocations?stack=labels",
    ];
    let answers = |s: &Server| -> Vec<Value> {
        queries
            .iter()
            .map(|q| {
                let (code, v) = get_json(s, &format!("/api/reports/{id}/{q}"));
                assert_eq!(code, 200, "{q}: {v}");
                v
            })
            .collect()
    };
    let warm = answers(&s);
    assert_eq!(file_loads(&s), 0, "the ingest left the device frames in memory");
    s.kill();
    let s = Server::serve_on(&dir, &[]);
    let stored = answers(&s);
    assert_eq!(file_loads(&s), 1);
    for ((q, w), c) in queries.iter().zip(&warm).zip(&stored) {
        assert_eq!(w, c, "{q}: the frames in memory answer as the stored ones do");
    }
}

/// A server that processed `trace` into a fresh data directory (kept while the first value
/// lives), then was killed and started again on it; and the report's id.
fn processed_then_restarted(tag: &str, trace: &str) -> (TestDir, Server, String) {
    processed_then_restarted_with(tag, trace, &[])
}

/// [`processed_then_restarted`], the server restarted with `args`.
fn processed_then_restarted_with(tag: &str, trace: &str, args: &[&str]) -> (TestDir, Server, String) {
    let dir = tmpdir(tag);
    let s = Server::serve_on(&dir, &[]);
    let id = ready_report(&s, trace);
    s.kill();
    let s = Server::serve_on(&dir, args);
    (dir, s, id)
}

/// A counter of `/metrics` by name.
fn counter(s: &Server, name: &str) -> u64 {
    let m = ureq::get(&s.url("/metrics"))
        .call()
        .expect("metrics")
        .into_string()
        .expect("text");
    m.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}_total ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no counter {name} in {m}"))
}

#[test]
fn after_a_restart_the_first_view_comes_from_its_stored_overview_then_any_width_from_the_frames() {
    let (_dir, s, id) = processed_then_restarted("overview", "mlp_train.pickle");
    let tl = |q: &str| {
        let (code, v) = get_json(&s, &format!("/api/reports/{id}/timeline?{q}"));
        assert_eq!(code, 200, "{q}: {v}");
        v
    };
    // The page's first request: the whole range at whatever width is ready, here the stored one.
    let first = tl("overview=true&width=700");
    assert_eq!(first["width"], 1500, "the stored first view");
    assert!(first["bands"].as_array().is_some_and(|b| !b.is_empty()));
    // It is exactly what the frames answer at that width.
    assert_eq!(tl("width=1500"), first);
    // With the frames loaded and indexed, the asked width is answered.
    let exact = tl("overview=true&width=700");
    assert_eq!(exact["width"], 700);
    assert_eq!(exact, tl("width=700"));
    // A window is never an overview.
    let (start, end) = (
        first["start"].as_i64().expect("start"),
        first["end"].as_i64().expect("end"),
    );
    let mid = start + (end - start) / 2;
    let windowed = tl(&format!("overview=true&width=300&start={start}&end={mid}"));
    assert_eq!(windowed["width"], 300);
}

#[test]
fn a_stored_first_view_has_its_zoom_indexes_built_behind_it() {
    let (_dir, s, id) = processed_then_restarted("warming", "mlp_train.pickle");
    let overview = || {
        let (code, v) = get_json(&s, &format!("/api/reports/{id}/timeline?overview=true&width=700"));
        assert_eq!(code, 200, "{v}");
        v
    };
    assert_eq!(overview()["width"], 1500, "the stored first view");
    // Nothing else is asked: the frames load and the timeline index is built behind the stored
    // view, after which the same request is answered at its own width (the stored view steps
    // aside once the index exists) — what a first zoom then finds ready.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v = overview();
        if v["width"] == 700 {
            break;
        }
        assert!(Instant::now() < deadline, "the index was never built: {}", v["width"]);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(file_loads(&s), 1);
    assert_eq!(counter(&s, "memlens_view_warms"), 1);
}

#[test]
fn a_report_too_large_for_the_cache_is_not_warmed_behind_its_stored_first_view() {
    // No room for any file: each query loads what it reads and lets it go, so building the
    // indexes behind the first view would load the frames for nothing.
    let (_dir, s, id) = processed_then_restarted_with("nowarm", "mlp_train.pickle", &["--cache-mb", "0"]);
    let (code, v) = get_json(&s, &format!("/api/reports/{id}/timeline?overview=true&width=700"));
    assert_eq!(
        (code, &v["width"]),
        (200, &serde_json::json!(1500)),
        "the stored first view: {v}"
    );
    // A zoom is answered all the same, from frames loaded for it.
    let (code, v) = get_json(&s, &format!("/api/reports/{id}/timeline?width=700"));
    assert_eq!((code, &v["width"]), (200, &serde_json::json!(700)), "{v}");
    assert_eq!(counter(&s, "memlens_view_warms"), 0);
}

#[test]
fn a_run_of_64_ranks_answers_its_overview_without_loading_any_rank() {
    let dir = tmpdir("ranks64");
    let s = Server::serve_on(&dir, &[]);
    // 64 real rank snapshots (the four DDP captures over again); rank 41 is the long-sequence one.
    let bytes: Vec<Vec<u8>> = (0..4)
        .map(|r| std::fs::read(trace(&format!("ddp_rank{r}.pickle.gz"))).expect("trace"))
        .collect();
    let names: Vec<String> = (0..64).map(|r| format!("job_rank{r}.pickle.gz")).collect();
    let files: Vec<(&str, Vec<u8>)> = names
        .iter()
        .enumerate()
        .map(|(r, n)| (n.as_str(), bytes[if r == 41 { 3 } else { r % 3 }].clone()))
        .collect();
    let (code, v) = upload(&s, &files);
    assert_eq!(code, 201, "{v}");
    let id = v["id"].as_str().expect("id").to_owned();
    assert_eq!(wait_done(&s, &id)["state"], "ready");
    let (code, report) = get_json(&s, &format!("/api/reports/{id}"));
    assert_eq!(code, 200);
    let run = &report["run"];
    assert_eq!(run["ranks"].as_array().map(Vec::len), Some(64));
    assert_eq!(run["worst_rank"], 41);
    assert_eq!(run["imbalanced"], true);
    let low = oracle_value_of("ddp_rank0.pickle.gz");
    assert_eq!(run["median_peak_bytes"], low);
    assert_eq!(run["spread_bytes"], oracle_value_of("ddp_rank3.pickle.gz") - low);
    // The overview (and the page) came from the stored summary: no rank was loaded.
    let _ = ureq::get(&s.url(&format!("/r/{id}"))).call().expect("page");
    assert_eq!(file_loads(&s), 0);
    // Opening one rank loads that rank only, once.
    for _ in 0..2 {
        let (code, t) = get_json(&s, &format!("/api/reports/{id}/timeline?file=41&width=200"));
        assert_eq!(code, 200, "{t}");
    }
    assert_eq!(file_loads(&s), 1);
    // Comparing two ranks loads the one not yet loaded.
    let (code, c) = get_json(&s, &format!("/api/compare?a={id}:41&b={id}:7"));
    assert_eq!(code, 200, "{c}");
    assert_eq!(c["a"]["rank"], 41);
    assert_eq!(file_loads(&s), 2);
}
