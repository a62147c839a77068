//! Who may upload and how much: tokens, rates, uploads in progress, slow clients, requests in
//! flight, and readers served while uploads ingest.

use super::*;

fn upload_with(s: &Server, query: &str, token: Option<&str>, name: &str) -> (u16, Value) {
    let (ctype, body) = multipart(&[(name, std::fs::read(trace(name)).expect("trace"))]);
    let mut req = ureq::post(&s.url(&format!("/api/reports{query}"))).set("Content-Type", &ctype);
    if let Some(t) = token {
        req = req.set("Authorization", &format!("Bearer {t}"));
    }
    status_code(req.send_bytes(&body))
}

#[test]
fn upload_tokens_gate_uploads_and_rotate_through_their_file() {
    let dir = tmpdir("tokens");
    let file = dir.join("tokens.txt");
    std::fs::write(&file, "from-file\n").expect("tokens");
    let s = Server::serve_on(
        &dir,
        &[
            "--upload-token",
            "s3cret",
            "--upload-tokens-file",
            file.to_str().expect("path"),
        ],
    );
    // No token, a wrong one: 401 (with the scheme named), nothing stored.
    let (code, e) = upload_with(&s, "", None, "mlp_train.pickle");
    assert_eq!(code, 401, "{e}");
    assert!(e["error"].as_str().is_some_and(|m| m.contains("upload token")), "{e}");
    assert_eq!(upload_with(&s, "", Some("wrong"), "mlp_train.pickle").0, 401);
    // The right one: 201, and the report carries PyTorch's own peak.
    let (code, v) = upload_with(&s, "?title=baseline&tags=mlp,h200", Some("s3cret"), "mlp_train.pickle");
    assert_eq!(code, 201, "{v}");
    let id = v["id"].as_str().expect("id").to_owned();
    let status = wait_done(&s, &id);
    assert_eq!(status["meta"]["title"], "baseline");
    assert_eq!(status["meta"]["tags"], serde_json::json!(["mlp", "h200"]));
    let (_, report) = get_json(&s, &format!("/api/reports/{id}"));
    let oracle = oracle_value_of("mlp_train.pickle");
    assert_eq!(report["files"][0]["devices"][0]["peak_allocated_bytes"], oracle);
    // Reading stays by link: no token needed.
    assert_eq!(get_json(&s, &format!("/api/reports/{id}/peak")).0, 200);
    // Rotation: the file's new token works, its old one no longer, without a restart.
    assert_eq!(upload_with(&s, "", Some("from-file"), "mlp_train.pickle").0, 201);
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&file, "rotated\n").expect("tokens");
    let f = std::fs::File::options().write(true).open(&file).expect("open");
    f.set_modified(std::time::SystemTime::now() + Duration::from_secs(2))
        .expect("mtime");
    assert_eq!(upload_with(&s, "", Some("from-file"), "mlp_train.pickle").0, 401);
    assert_eq!(upload_with(&s, "", Some("rotated"), "mlp_train.pickle").0, 201);
    // The owner token edits the metadata; another token cannot.
    let token = v["delete_token"].as_str().expect("token");
    let patch = |t: &str, body: &str| {
        status_code(
            ureq::request("PATCH", &s.url(&format!("/api/reports/{id}")))
                .set("X-Delete-Token", t)
                .send_string(body),
        )
    };
    let (code, st) = patch(token, r#"{"notes":"before the fix","job":"run-17"}"#);
    assert_eq!(code, 200, "{st}");
    assert_eq!(st["meta"]["title"], "baseline");
    assert_eq!(st["meta"]["notes"], "before the fix");
    assert_eq!(st["meta"]["job"], "run-17");
    assert_eq!(patch("nope", r#"{"title":"x"}"#).0, 403);
    assert_eq!(patch(token, r#"{"titel":"x"}"#).0, 400);
    // The share page's preview carries the title.
    let page = ureq::get(&s.url(&format!("/r/{id}")))
        .call()
        .expect("page")
        .into_string()
        .expect("html");
    assert!(page.contains("memlens: baseline"), "{page}");
}

#[test]
fn uploads_over_a_clients_rate_get_429_with_retry_after() {
    let dir = tmpdir("rate");
    let s = Server::serve_on(&dir, &["--uploads-per-minute", "2"]);
    assert_eq!(upload_with(&s, "", None, "mlp_train.pickle").0, 201);
    assert_eq!(upload_with(&s, "", None, "mlp_train.pickle").0, 201);
    let (ctype, body) = multipart(&[(
        "mlp_train.pickle",
        std::fs::read(trace("mlp_train.pickle")).expect("trace"),
    )]);
    match ureq::post(&s.url("/api/reports"))
        .set("Content-Type", &ctype)
        .send_bytes(&body)
    {
        Err(ureq::Error::Status(429, resp)) => {
            let wait: u64 = resp
                .header("Retry-After")
                .and_then(|v| v.parse().ok())
                .expect("Retry-After");
            assert!((1..=60).contains(&wait), "{wait}");
        }
        other => panic!("expected 429, got {other:?}"),
    }
    // The CLI says so in one line and exits 2 when it runs out of attempts.
    assert_cli_refuses(
        Command::new(env!("CARGO_BIN_EXE_memlens"))
            .args(["upload", "--attempts", "1", "--server", &s.base])
            .arg(trace("mlp_train.pickle")),
        "429",
    );
}

#[test]
fn a_clients_uploads_in_progress_are_capped_with_429_and_the_slot_comes_back() {
    use std::io::{Read, Write};
    let dir = tmpdir("at-once");
    let s = Server::serve_on(&dir, &["--uploads-at-once", "1"]);
    let addr = s.base.trim_start_matches("http://").to_owned();
    // An upload whose body is still arriving holds this client's one slot.
    let mut slow = std::net::TcpStream::connect(&addr).expect("connect");
    slow.write_all(
        b"POST /api/reports?name=slow.pickle HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
    )
    .expect("write");
    let pickle = std::fs::read(trace("mlp_train.pickle")).expect("trace");
    write!(slow, "{:x}\r\n", 1024).expect("chunk");
    slow.write_all(&pickle[..1024]).expect("chunk");
    slow.write_all(b"\r\n").expect("chunk");
    slow.flush().expect("flush");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (ctype, body) = multipart(&[("mlp_train.pickle", pickle.clone())]);
    match ureq::post(&s.url("/api/reports"))
        .set("Content-Type", &ctype)
        .send_bytes(&body)
    {
        Err(ureq::Error::Status(429, resp)) => {
            assert_eq!(resp.header("Retry-After"), Some("1"));
            let text = resp.into_string().expect("body");
            assert!(text.contains("1 uploads in progress"), "{text}");
        }
        other => panic!("expected 429 while the slow upload holds the slot, got {other:?}"),
    }
    // Reads are not uploads: they go on.
    assert_eq!(status_code(ureq::get(&s.url("/healthz")).call()).0, 200);
    // The slow upload finishes; its slot comes back and the next upload is taken.
    let rest = &pickle[1024..];
    write!(slow, "{:x}\r\n", rest.len()).expect("chunk");
    slow.write_all(rest).expect("chunk");
    slow.write_all(b"\r\n0\r\n\r\n").expect("end");
    let mut answer = [0u8; 12];
    slow.read_exact(&mut answer).expect("answer");
    assert_eq!(&answer, b"HTTP/1.1 201", "{}", String::from_utf8_lossy(&answer));
    drop(slow);
    let (code, created) = upload(&s, &[("mlp_train.pickle", pickle)]);
    assert_eq!(code, 201, "{created}");
}

#[test]
fn a_client_that_trickles_its_headers_is_cut_off_and_others_are_served_meanwhile() {
    use std::io::{Read, Write};
    let dir = tmpdir("slowloris");
    let s = Server::serve_on(&dir, &["--header-timeout", "2"]);
    let addr = s.base.trim_start_matches("http://").to_owned();
    // Twenty connections that never finish their headers.
    let mut slow: Vec<std::net::TcpStream> = (0..20)
        .map(|_| {
            let mut c = std::net::TcpStream::connect(&addr).expect("connect");
            c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                .expect("write");
            c
        })
        .collect();
    let (code, _) = status_code(ureq::get(&s.url("/healthz")).call());
    assert_eq!(code, 200, "served while the slow clients wait");
    let start = std::time::Instant::now();
    for c in &mut slow {
        c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .expect("timeout");
        let mut buf = Vec::new();
        // Closed by the server (EOF, possibly after a 408), not by our 10 s read timeout.
        let _ = c.read_to_end(&mut buf);
    }
    let waited = start.elapsed();
    assert!(
        waited < std::time::Duration::from_secs(8),
        "slow clients held for {waited:?}"
    );
}

#[test]
fn an_upload_whose_body_stalls_is_dropped_with_408_and_frees_its_slot() {
    use std::io::{Read, Write};
    let dir = tmpdir("body-stall");
    let s = Server::serve_on(&dir, &["--body-timeout", "2", "--uploads-at-once", "1"]);
    let addr = s.base.trim_start_matches("http://").to_owned();
    let mut slow = std::net::TcpStream::connect(&addr).expect("connect");
    slow.write_all(
        b"POST /api/reports?name=stall.pickle HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: 100000\r\n\r\n",
    )
    .expect("write");
    slow.write_all(&[0x80; 1000]).expect("some of the body");
    let start = std::time::Instant::now();
    slow.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    let mut answer = Vec::new();
    let _ = slow.read_to_end(&mut answer);
    let waited = start.elapsed();
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("no bytes arrived for 2 s"), "{text}");
    assert!(waited < std::time::Duration::from_secs(6), "answered after {waited:?}");
    // Its slot is free again, and nothing of it was kept.
    let (code, created) = upload(
        &s,
        &[(
            "mlp_train.pickle",
            std::fs::read(trace("mlp_train.pickle")).expect("trace"),
        )],
    );
    assert_eq!(code, 201, "{created}");
    let incoming = std::fs::read_dir(dir.join("store/incoming")).map_or(0, |d| d.count());
    assert_eq!(incoming, 0, "the stalled upload left nothing behind");
}

/// Percentile `p` (0–100) of `v` (sorted here), in ms.
fn percentile_ms(v: &mut [std::time::Duration], p: f64) -> f64 {
    v.sort_unstable();
    v.get(((v.len() as f64 * p / 100.0) as usize).min(v.len().saturating_sub(1)))
        .map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

/// The server process's peak RSS (`VmHWM`), MiB.
fn peak_rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|k| k.parse::<f64>().ok()))
        .map_or(0.0, |kb| kb / 1024.0)
}

#[test]
fn two_hundred_readers_while_ten_uploads_ingest_and_healthz_stays_fast() {
    use std::time::{Duration, Instant};
    // The ten uploaders all come from loopback: one client address, so its cap on uploads in
    // progress is raised to ten.
    let (s, id) = server_with_report("load", &["--uploads-at-once", "10"], "gpt_train.pickle");
    let base = s.base.clone();
    let until = Instant::now() + Duration::from_secs(5);
    let uploads: Vec<_> = (0..10)
        .map(|_| {
            let url = format!("{base}/api/reports");
            std::thread::spawn(move || {
                let (ct, body) = multipart(&[(
                    "many_small.pickle.gz",
                    std::fs::read(trace("many_small.pickle.gz")).expect("trace"),
                )]);
                status_code(ureq::post(&url).set("Content-Type", &ct).send_bytes(&body))
            })
        })
        .collect();
    let readers: Vec<_> = (0..200)
        .map(|k| {
            let (base, id) = (base.clone(), id.clone());
            std::thread::spawn(move || {
                let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(30)).build();
                let mut out: Vec<(u16, Duration)> = Vec::new();
                let paths = [
                    format!("/api/reports/{id}/timeline?width=800"),
                    format!("/api/reports/{id}"),
                ];
                while Instant::now() < until {
                    let t = Instant::now();
                    let code = match agent.get(&format!("{base}{}", paths[(k + out.len()) % 2])).call() {
                        Ok(r) => {
                            let _ = r.into_string();
                            200
                        }
                        Err(ureq::Error::Status(c, _)) => c,
                        Err(_) => 0,
                    };
                    out.push((code, t.elapsed()));
                }
                out
            })
        })
        .collect();
    let health = {
        let base = base.clone();
        std::thread::spawn(move || {
            let mut v = Vec::new();
            while Instant::now() < until {
                let t = Instant::now();
                let ok = ureq::get(&format!("{base}/healthz")).call().is_ok();
                v.push((ok, t.elapsed()));
                std::thread::sleep(Duration::from_millis(50));
            }
            v
        })
    };
    let results: Vec<(u16, Duration)> = readers.into_iter().flat_map(|h| h.join().expect("reader")).collect();
    let health = health.join().expect("health");
    let uploaded: Vec<(u16, Value)> = uploads.into_iter().map(|h| h.join().expect("upload")).collect();
    let bad: Vec<u16> = results.iter().map(|r| r.0).filter(|&c| c != 200).collect();
    assert!(
        bad.is_empty(),
        "{} of {} reads failed: {:?}",
        bad.len(),
        results.len(),
        &bad[..bad.len().min(10)]
    );
    assert!(health.iter().all(|h| h.0), "healthz failed under load");
    for (code, body) in &uploaded {
        assert_eq!(*code, 201, "{body}");
        assert_eq!(wait_done(&s, body["id"].as_str().expect("id"))["state"], "ready");
    }
    let mut reads: Vec<Duration> = results.iter().map(|r| r.1).collect();
    let mut hz: Vec<Duration> = health.iter().map(|h| h.1).collect();
    let (n, hz_n) = (reads.len(), hz.len());
    let (p50, p99) = (percentile_ms(&mut reads, 50.0), percentile_ms(&mut reads, 99.0));
    let (hz50, hz99) = (percentile_ms(&mut hz, 50.0), percentile_ms(&mut hz, 99.0));
    let rss = peak_rss_mib(s.child.id());
    println!(
        "load: {n} reads by 200 clients in 5 s ({:.0}/s) while 10 uploads ingested: p50 {p50:.1} ms, p99 {p99:.1} ms; \
         /healthz ({hz_n} probes) p50 {hz50:.1} ms, p99 {hz99:.1} ms; server peak RSS {rss:.0} MiB",
        n as f64 / 5.0
    );
    // Not a timing target (the figures above are the measurement): a health check that takes
    // seconds under this load means something blocks the async workers.
    assert!(hz99 < 5000.0, "/healthz p99 {hz99:.0} ms under load");
}

#[test]
fn beyond_its_in_flight_limit_the_server_answers_503_with_retry_after_never_a_hang() {
    use std::time::{Duration, Instant};
    let (s, id) = server_with_report("overload", &["--max-in-flight", "2"], "gpt_train.pickle");
    let start = Instant::now();
    let answers: Vec<(u16, Option<String>)> = (0..64)
        .map(|_| {
            let url = s.url(&format!("/api/reports/{id}/timeline?width=4000"));
            std::thread::spawn(move || match ureq::get(&url).timeout(Duration::from_secs(30)).call() {
                Ok(_) => (200, None),
                Err(ureq::Error::Status(c, r)) => (c, r.header("retry-after").map(str::to_owned)),
                Err(e) => panic!("no answer: {e}"),
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().expect("client"))
        .collect();
    assert!(start.elapsed() < Duration::from_secs(20), "took {:?}", start.elapsed());
    let shed: Vec<&(u16, Option<String>)> = answers.iter().filter(|a| a.0 == 503).collect();
    assert!(!shed.is_empty(), "nothing shed: {answers:?}");
    assert!(shed.iter().all(|a| a.1.as_deref() == Some("1")), "{shed:?}");
    assert!(answers.iter().all(|a| a.0 == 200 || a.0 == 503), "{answers:?}");
    let (code, _) = status_code(ureq::get(&s.url("/healthz")).call());
    assert_eq!(code, 200);
}
