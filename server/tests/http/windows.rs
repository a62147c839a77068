//! A recording taken window by window: window 0 makes the report (`?window=0`), later windows
//! join it with its owner token, and the report is the one snapshot of the whole run — here
//! `traces/windows/`, a real snapshot split as a windowed recording sends it, against the whole
//! file's oracle. Windows sent while the report is being analysed are all kept. Both stores.

use super::*;

fn window(k: usize) -> Vec<u8> {
    std::fs::read(trace(&format!("windows/gpt_b8.window_{k}.pickle.gz"))).expect("window")
}

fn add_window(s: &Server, id: &str, token: Option<&str>, k: usize) -> (u16, Value) {
    let (ctype, body) = multipart(&[("snapshot.pickle", window(k))]);
    let mut req = ureq::post(&s.url(&format!("/api/reports/{id}/windows?window={k}"))).set("Content-Type", &ctype);
    if let Some(t) = token {
        req = req.set("X-Delete-Token", t);
    }
    status_code(req.send_bytes(&body))
}

#[test]
fn a_recordings_windows_make_one_report_of_the_whole_run() {
    let s = Server::serve_in(tmpdir("windows"), &[]);
    let (code, created) = upload(&s, &[("snapshot.pickle", window(0))]);
    assert_eq!(code, 201, "{created}");
    // Without `?window=0` the report is an ordinary one: windows cannot join it.
    let id = created["id"].as_str().unwrap().to_owned();
    let token = created["delete_token"].as_str().unwrap().to_owned();
    assert_eq!(add_window(&s, &id, Some(&token), 1).0, 400);

    let (ctype, body) = multipart(&[("snapshot.pickle", window(0))]);
    let (code, created) = status_code(
        ureq::post(&s.url("/api/reports?window=0&job=nightly"))
            .set("Content-Type", &ctype)
            .send_bytes(&body),
    );
    assert_eq!(code, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let token = created["delete_token"].as_str().unwrap().to_owned();
    // Only the owner adds windows; a window needs its number.
    assert_eq!(add_window(&s, &id, None, 1).0, 403);
    assert_eq!(add_window(&s, &id, Some("wrong"), 1).0, 403);
    let (code, _) = status_code(
        ureq::post(&s.url(&format!("/api/reports/{id}/windows")))
            .set("X-Delete-Token", &token)
            .send_bytes(&window(1)),
    );
    assert_eq!(code, 400);
    // The other windows, sent while the report is being analysed, and another run of its job
    // uploaded meanwhile: nothing is lost.
    let (ctype, body) = multipart(&[("leak.pickle", std::fs::read(trace("leak.pickle")).unwrap())]);
    let other_run = std::thread::spawn({
        let url = s.url("/api/reports?job=nightly");
        move || status_code(ureq::post(&url).set("Content-Type", &ctype).send_bytes(&body))
    });
    for k in 1..4 {
        let (code, status) = add_window(&s, &id, Some(&token), k);
        assert_eq!(code, 200, "{status}");
        assert_eq!(status["windows"], k + 1);
    }
    let (code, other) = other_run.join().unwrap();
    assert_eq!(code, 201, "{other}");
    assert_eq!(other["job_url"], created["job_url"]);
    // A window sent again (a retry) changes nothing.
    assert_eq!(add_window(&s, &id, Some(&token), 2).1["windows"], 4);
    let status = wait_done(&s, &id);
    assert_eq!(status["state"], "ready", "{status}");
    assert_eq!(status["windows"], 4);
    let (_, report) = get_json(&s, &format!("/api/reports/{id}"));
    let d = &report["files"][0]["devices"][0];
    assert_eq!(
        d["peak_allocated_bytes"].as_i64(),
        Some(oracle_value_of("gpt_b8.pickle.gz"))
    );
    assert_eq!(report["files"][0]["file"], "snapshot.pickle (4 windows)");
    // The whole run's trace: as many entries as the whole file's.
    let whole = Server::serve_in(tmpdir("windows-whole"), &[]);
    let whole_id = ready_report(&whole, "gpt_b8.pickle.gz");
    let (_, whole_report) = get_json(&whole, &format!("/api/reports/{whole_id}"));
    assert_eq!(d["event_count"], whole_report["files"][0]["devices"][0]["event_count"]);
    assert_eq!(d["categories"], whole_report["files"][0]["devices"][0]["categories"]);
    // The job holds both runs, each ready with its own peak.
    wait_done(&s, other["id"].as_str().unwrap());
    let job = created["job_url"]
        .as_str()
        .unwrap()
        .trim_start_matches("/j/")
        .to_owned();
    let (_, j) = get_json(&s, &format!("/api/jobs/{job}"));
    let peaks: Vec<Option<i64>> = j["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["peak_allocated_bytes"].as_i64())
        .collect();
    assert_eq!(
        peaks,
        [
            Some(oracle_value_of("gpt_b8.pickle.gz")),
            Some(oracle_value_of("leak.pickle"))
        ]
    );
    // Its queries read the joined trace.
    let (code, timeline) = get_json(&s, &format!("/api/reports/{id}/timeline?device=0&width=200"));
    assert_eq!(code, 200, "{timeline}");
}
