//! An upload's life: status, summary, restart and delete; uploads refused, malformed or
//! hostile; a kill or a SIGTERM mid-ingest; expiry; `memlens upload`.

use super::*;

fn cli_json(name: &str) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_memlens"))
        .args(["analyze", "--json"])
        .arg(trace(name))
        .output()
        .expect("cli");
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).expect("json")
}

#[test]
fn upload_status_summary_restart_delete() {
    let dir = tmpdir("main");
    let s = Server::serve_on(&dir, &[]);
    let created = upload_trace(&s, "leak.pickle");
    let id = created["id"].as_str().expect("id").to_owned();
    assert_eq!(id.len(), 32, "128-bit id");
    assert_eq!(created["url"], format!("/r/{id}"));
    let st = wait_done(&s, &id);
    assert_eq!(st["state"], "ready", "{st}");
    assert_eq!(st["bytes_read"], st["bytes_total"]);

    // The summary is what `memlens analyze --json` prints.
    let (code, summary) = get_json(&s, &format!("/api/reports/{id}"));
    assert_eq!(code, 200);
    let cli = cli_json("leak.pickle");
    assert_eq!(summary["files"][0]["devices"], cli["files"][0]["devices"]);
    assert_eq!(summary["files"][0]["source"], cli["files"][0]["source"]);

    // Queries answer.
    let (code, tl) = get_json(&s, &format!("/api/reports/{id}/timeline?width=200"));
    assert_eq!(code, 200, "{tl}");
    assert_eq!(tl["allocated_max"].as_array().map(Vec::len), Some(200));
    let peak = cli["files"][0]["devices"][0]["peak_allocated_bytes"]
        .as_i64()
        .expect("peak");
    let max = tl["allocated_max"]
        .as_array()
        .expect("arr")
        .iter()
        .filter_map(Value::as_i64)
        .max();
    assert_eq!(max, Some(peak), "the full-range timeline keeps the peak");
    for q in [
        "segments",
        // The largest entry number there is: the state after the last entry.
        "segments?event=18446744073709551615",
        "fragmentation",
        "peak",
        "leaks",
        "ooms",
        "annotations",
        "allocations?stack=wl_leak",
        "stacks/1",
    ] {
        let (code, v) = get_json(&s, &format!("/api/reports/{id}/{q}"));
        assert_eq!(code, 200, "{q}: {v}");
    }
    let (_, leaks) = get_json(&s, &format!("/api/reports/{id}/leaks"));
    assert_eq!(leaks.as_array().map(Vec::len), Some(2));
    // A segment map at a level of detail lists the largest segment, blocks merged below a
    // pixel, with the whole state's totals.
    let (_, full) = get_json(&s, &format!("/api/reports/{id}/segments"));
    let (code, lod) = get_json(&s, &format!("/api/reports/{id}/segments?max_segments=1&width=20"));
    assert_eq!(code, 200, "{lod}");
    for total in ["segment_count", "block_count", "reserved_bytes", "free_bytes"] {
        assert_eq!(lod[total], full[total], "{total}");
    }
    let listed = lod["segments"].as_array().expect("segments");
    assert_eq!(listed.len(), 1);
    let largest = full["segments"]
        .as_array()
        .expect("segments")
        .iter()
        .max_by_key(|s| s["size"].as_i64())
        .expect("a segment");
    assert_eq!(listed[0]["size"], largest["size"]);
    let blocks = listed[0]["blocks"].as_array().expect("blocks");
    let stands_for: u64 = blocks.iter().filter_map(|b| b["block_count"].as_u64()).sum();
    assert_eq!(stands_for as usize, largest["blocks"].as_array().map_or(0, Vec::len));
    // At most one entry a pixel wide or more per pixel, and one shorter run before each.
    assert!(blocks.len() <= 2 * 20 + 1, "{} entries for 20 pixels", blocks.len());

    // The share page carries a link preview; everything is no-referrer.
    let page = ureq::get(&s.url(&format!("/r/{id}"))).call().expect("page");
    assert_eq!(page.header("referrer-policy"), Some("no-referrer"));
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    let csp = page.header("content-security-policy").unwrap_or_default().to_owned();
    assert!(
        csp.contains("frame-ancestors 'none'") && csp.contains("object-src 'none'"),
        "{csp}"
    );
    let html = page.into_string().expect("html");
    assert!(html.contains(&format!("/api/reports/{id}/chart.png")), "{html}");
    let png = ureq::get(&s.url(&format!("/api/reports/{id}/chart.png")))
        .call()
        .expect("png");
    assert_eq!(png.header("content-type"), Some("image/png"));

    // Restart: the report survives.
    s.kill();
    let s = Server::serve_on(&dir, &[]);
    let (code, again) = get_json(&s, &format!("/api/reports/{id}"));
    assert_eq!(code, 200);
    assert_eq!(again, summary);

    // Delete needs the token.
    let (code, _) = status_code(
        ureq::delete(&s.url(&format!("/api/reports/{id}")))
            .set("X-Delete-Token", "wrong")
            .call(),
    );
    assert_eq!(code, 403);
    let token = created["delete_token"].as_str().expect("token");
    let (code, _) = status_code(ureq::delete(&s.url(&format!("/api/reports/{id}?token={token}"))).call());
    assert_eq!(code, 204);
    let (code, _) = get_json(&s, &format!("/api/reports/{id}"));
    assert_eq!(code, 404);
    let (code, _) = status_code(
        ureq::delete(&s.url(&format!("/api/reports/{id}")))
            .set("X-Delete-Token", token)
            .call(),
    );
    assert_eq!(code, 404);
}

#[test]
fn over_limit_uploads_get_413_and_the_server_stays_up() {
    let dir = tmpdir("limit");
    let s = Server::serve_on(&dir, &["--max-upload", "100000"]);
    // Clients can learn the limit before sending anything.
    let (code, limits) = get_json(&s, "/api/limits");
    assert_eq!(code, 200);
    assert_eq!(limits["max_upload_bytes"], 100000, "{limits}");
    let (code, v) = upload(
        &s,
        &[("leak.pickle", std::fs::read(trace("leak.pickle")).expect("trace"))],
    );
    assert_eq!(code, 413, "{v}");
    assert!(v["error"].as_str().is_some_and(|e| e.contains("100000")), "{v}");
    // A raw body streamed without a length is cut off too; the client, which writes all of its
    // body before reading, still gets the answer (the server drains what it rejects).
    let big = vec![b'x'; 8 << 20];
    let (code, v) = status_code(ureq::post(&s.url("/api/reports?name=big.bin")).send(std::io::Cursor::new(big)));
    assert_eq!(code, 413, "{v}");
    // So is a multipart body whose declared length is over the limit.
    let (code, v) = upload(&s, &[("big.pickle", vec![0x80; 8 << 20])]);
    assert_eq!(code, 413, "{v}");
    let (code, _) = get_json(&s, "/healthz");
    assert_eq!(code, 200);
    let metrics = ureq::get(&s.url("/metrics"))
        .call()
        .expect("metrics")
        .into_string()
        .expect("text");
    assert!(metrics.contains("memlens_uploads_rejected_total 3"), "{metrics}");
}

#[test]
fn a_malformed_file_fails_clearly_and_the_server_stays_healthy() {
    let dir = tmpdir("bad");
    let s = Server::serve_on(&dir, &[]);
    let full = std::fs::read(trace("mlp_train.pickle")).expect("trace");
    let (code, v) = upload(&s, &[("cut.pickle", full[..full.len() / 3].to_vec())]);
    assert_eq!(code, 201, "{v}");
    let id = v["id"].as_str().expect("id").to_owned();
    let st = wait_done(&s, &id);
    assert_eq!(st["state"], "failed");
    let err = st["error"].as_str().expect("error");
    assert!(err.starts_with("cut.pickle: pickle: input ends at byte"), "{err}");
    let (code, body) = get_json(&s, &format!("/api/reports/{id}"));
    assert_eq!(code, 422);
    assert_eq!(body["error"], err);
    let (code, _) = get_json(&s, "/healthz");
    assert_eq!(code, 200);
    // Unknown content is refused by name too: text holding no OOM message, memory summary or
    // nvidia-smi screen, and bytes that are not text.
    let (_, v) = upload(&s, &[("notes.txt", b"hello".to_vec())]);
    let st = wait_done(&s, v["id"].as_str().expect("id"));
    assert!(
        st["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("notes.txt: ") && e.contains("no out-of-memory message")),
        "{st}"
    );
    let (_, v) = upload(&s, &[("blob.bin", vec![0x68, 0, 0x69, 0xff])]);
    let st = wait_done(&s, v["id"].as_str().expect("id"));
    assert!(
        st["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("blob.bin: unrecognised format")),
        "{st}"
    );
}

#[test]
fn concurrent_uploads_and_raw_bodies() {
    let dir = tmpdir("concurrent");
    let s = Server::serve_on(&dir, &[]);
    let base = s.base.clone();
    let handles: Vec<_> = ["gpt_train.pickle", "oom_fragmentation.pickle"]
        .into_iter()
        .map(|name| {
            let base = base.clone();
            std::thread::spawn(move || {
                let bytes = std::fs::read(trace(name)).expect("trace");
                let r = ureq::post(&format!("{base}/api/reports?name={name}"))
                    .send_bytes(&bytes)
                    .expect("upload");
                let v: Value = serde_json::from_str(&r.into_string().expect("body")).expect("json");
                (name, v["id"].as_str().expect("id").to_owned())
            })
        })
        .collect();
    for h in handles {
        let (name, id) = h.join().expect("thread");
        let st = wait_done(&s, &id);
        assert_eq!(st["state"], "ready", "{name}: {st}");
        assert_eq!(st["files"][0], name);
        let (_, summary) = get_json(&s, &format!("/api/reports/{id}"));
        assert_eq!(
            summary["files"][0]["devices"],
            cli_json(name)["files"][0]["devices"],
            "{name}"
        );
    }
}

#[test]
fn kill_9_mid_ingest_resumes_after_restart() {
    let dir = tmpdir("kill9");
    let s = Server::serve_on(&dir, &["--workers", "1"]);
    let a = upload_trace(&s, "many_small.pickle.gz");
    let b = upload_trace(&s, "kv_cache_inference.pickle");
    s.kill(); // SIGKILL while the first is processing and the second is queued
    let s = Server::serve_on(&dir, &[]);
    for v in [a, b] {
        let st = wait_done(&s, v["id"].as_str().expect("id"));
        assert_eq!(st["state"], "ready", "{st}");
    }
}

#[test]
fn expired_reports_answer_410_and_the_api_is_documented() {
    let dir = tmpdir("expiry");
    let s = Server::serve_on(&dir, &[]);
    let bytes = std::fs::read(trace("mlp_train.pickle")).expect("trace");
    let r = ureq::post(&s.url("/api/reports?name=mlp.pickle&expires_in_days=0"))
        .send_bytes(&bytes)
        .expect("upload");
    let v: Value = serde_json::from_str(&r.into_string().expect("body")).expect("json");
    let (code, _) = get_json(&s, &format!("/api/reports/{}", v["id"].as_str().expect("id")));
    assert_eq!(code, 410);
    let (code, doc) = get_json(&s, "/api/openapi.json");
    assert_eq!(code, 200);
    for p in [
        "/api/reports",
        "/api/limits",
        "/api/reports/{id}/timeline",
        "/api/reports/{id}/segments",
        "/api/reports/{id}/chart.png",
        "/api/plan/models",
    ] {
        assert!(doc["paths"].get(p).is_some(), "{p} missing from the OpenAPI document");
    }
    let (code, _) = get_json(&s, "/api/reports/not-an-id/status");
    assert_eq!(code, 404);
    // The container health check probes the same server.
    let addr = s.base.trim_start_matches("http://").to_owned();
    let ok = Command::new(env!("CARGO_BIN_EXE_memlens"))
        .args(["healthcheck", "--bind", &addr])
        .status()
        .expect("probe");
    assert!(ok.success());
    s.kill();
    let down = Command::new(env!("CARGO_BIN_EXE_memlens"))
        .args(["healthcheck", "--bind", &addr])
        .output()
        .expect("probe");
    assert!(!down.status.success());
}

#[test]
fn sigterm_stops_the_server_cleanly() {
    // `docker stop` sends SIGTERM to PID 1, which has no default handler in a container.
    let dir = tmpdir("term");
    let mut s = Server::serve_on(&dir, &[]);
    let (code, _) = get_json(&s, "/healthz");
    assert_eq!(code, 200);
    let sent = Command::new("kill")
        .args(["-TERM", &s.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(sent.success());
    let start = Instant::now();
    loop {
        if let Some(status) = s.child.try_wait().expect("wait") {
            assert!(status.success(), "{status}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "still running 5 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn memlens_upload_prints_a_link_whose_report_has_the_oracle_numbers() {
    let dir = tmpdir("cli-upload");
    let s = Server::serve_on(&dir, &["--upload-token", "t0k"]);
    let out = Command::new(env!("CARGO_BIN_EXE_memlens"))
        .args(["upload", "--server", &s.base, "--title", "two ranks"])
        .env("MEMLENS_TOKEN", "t0k")
        .arg(trace("ddp_rank0.pickle.gz"))
        .arg(trace("ddp_rank3.pickle.gz"))
        .output()
        .expect("cli");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let link = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let id = link.rsplit('/').next().expect("id").to_owned();
    assert_eq!(link, s.url(&format!("/r/{id}")));
    assert_eq!(wait_done(&s, &id)["meta"]["title"], "two ranks");
    let (_, report) = get_json(&s, &format!("/api/reports/{id}"));
    assert_eq!(report["run"]["worst_rank"], 3);
    for (i, name) in ["ddp_rank0.pickle.gz", "ddp_rank3.pickle.gz"].iter().enumerate() {
        assert_eq!(
            report["files"][i]["devices"][0]["peak_allocated_bytes"],
            oracle_value_of(name)
        );
    }
    // Without the token: one clear line, exit 2.
    assert_cli_refuses(
        Command::new(env!("CARGO_BIN_EXE_memlens"))
            .args(["upload", "--server", &s.base])
            .env_remove("MEMLENS_TOKEN")
            .arg(trace("mlp_train.pickle")),
        "401",
    );
}

#[test]
fn hostile_upload_names_are_reduced_to_safe_base_names_and_never_escape_the_store() {
    let dir = tmpdir("names");
    let s = Server::serve_on(&dir, &[]);
    let bytes = std::fs::read(trace("mlp_train.pickle")).expect("trace");
    // A control byte in the part's headers is not HTTP: refused, naming the multipart.
    let (code, refused) = upload(&s, &[("a\u{7}b.pickle", bytes.clone())]);
    assert_eq!(code, 400, "{refused}");
    assert!(
        refused["error"].as_str().unwrap_or("").starts_with("multipart"),
        "{refused}"
    );
    let hostile = "../../escaped/<script>alert(1)</script>\u{202e}x.pickle";
    let (code, created) = upload(&s, &[(hostile, bytes)]);
    assert_eq!(code, 201, "{created}");
    let id = created["id"].as_str().expect("id").to_owned();
    assert_eq!(wait_done(&s, &id)["state"], "ready");
    let (_, summary) = get_json(&s, &format!("/api/reports/{id}"));
    let name = summary["files"][0]["file"].as_str().expect("name").to_owned();
    assert!(
        name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)),
        "{name}"
    );
    assert!(name.ends_with("x.pickle") && !name.starts_with('.'), "{name}");
    assert!(!dir.join("escaped").exists() && !dir.parent().expect("parent").join("escaped").exists());
    let page = ureq::get(&s.url(&format!("/r/{id}")))
        .call()
        .expect("page")
        .into_string()
        .expect("html");
    assert!(
        !page.contains("<script>alert"),
        "the share page carries the name unescaped"
    );
}
