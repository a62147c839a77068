//! Uploads imported while they arrive, and one cut off.

use super::*;

/// The server's metrics text.
fn metrics_text(s: &Server) -> String {
    ureq::get(&s.url("/metrics"))
        .call()
        .expect("metrics")
        .into_string()
        .expect("text")
}

/// A body that arrives slowly, in pieces (as over a slow link), without a declared length.
struct SlowBody(std::io::Cursor<Vec<u8>>);

impl std::io::Read for SlowBody {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        std::thread::sleep(Duration::from_millis(15));
        let n = buf.len().min(64 << 10);
        self.0.read(&mut buf[..n])
    }
}

#[test]
fn uploads_are_imported_while_they_arrive_and_one_cut_off_leaves_nothing_behind() {
    let s = Server::serve_in(tmpdir("ahead"), &[]);
    // The embedded store reads an upload back while it is written; an S3 multipart upload
    // cannot be, so there the job imports it (the same report either way).
    let ahead = if shared_backend().is_some() { 0 } else { 1 };
    let name = "many_small.pickle.gz";
    let bytes = std::fs::read(trace(name)).expect("trace");
    let (code, v) = status_code(
        ureq::post(&s.url(&format!("/api/reports?name={name}"))).send(SlowBody(std::io::Cursor::new(bytes.clone()))),
    );
    assert_eq!(code, 201, "{v}");
    let id = v["id"].as_str().expect("id").to_owned();
    assert_eq!(wait_done(&s, &id)["state"], "ready");
    let (_, summary) = get_json(&s, &format!("/api/reports/{id}"));
    assert_eq!(
        summary["files"][0]["devices"][0]["peak_allocated_bytes"],
        oracle_value_of(name),
        "{summary}"
    );
    // Cut off halfway: a declared length the body never reaches, then the connection closes.
    drop(half_an_upload(&s, "cut.pickle.gz", &bytes));
    // The refusal is counted and the import begun for it is gone.
    let start = Instant::now();
    let metrics = loop {
        let m = metrics_text(&s);
        if m.contains("memlens_uploads_rejected_total 1") && m.contains("memlens_imports_ahead_pending 0") {
            break m;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{m}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        metrics.contains(&format!("memlens_imports_ahead_total {}", 2 * ahead)),
        "{metrics}"
    );
    // Nothing else was kept, and the server goes on: the same upload at once is the same report.
    let again = ready_report(&s, name);
    let (_, summary2) = get_json(&s, &format!("/api/reports/{again}"));
    assert_eq!(summary2["files"][0]["devices"], summary["files"][0]["devices"]);
}
