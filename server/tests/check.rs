//! `memlens check NEW --baseline BASE`, run as a process: each exit code, each kind of limit,
//! its three outputs, and sides given as files, as report links on a real server, and mixed.

mod common;

use std::process::{Command, Output};

use common::{tmpdir, trace, upload_trace, wait_done, Process};
use serde_json::Value;

const B8: &str = "gpt_b8.pickle.gz";
const B16: &str = "gpt_b16.pickle.gz";

fn check(new: &str, baseline: &str, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memlens"))
        .args(["check", new, "--baseline", baseline])
        .args(extra)
        .output()
        .expect("runs")
}

fn path(name: &str) -> String {
    trace(name).to_string_lossy().into_owned()
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("exited")
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn a_grown_peak_fails_and_the_same_run_passes() {
    let grown = check(&path(B16), &path(B8), &["--json"]);
    assert_eq!(code(&grown), 1, "{}", String::from_utf8_lossy(&grown.stderr));
    let v = json(&grown);
    for key in [
        "passed",
        "verdict",
        "peak_delta_bytes",
        "peak_delta_ratio",
        "reserved_delta_bytes",
        "by_category",
        "largest_stack_deltas",
        "violations",
        "thresholds",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    assert_eq!(v["passed"], false);
    // The peaks are each file's own (the snapshots' memory_stats oracles).
    let peak = |name: &str| common::oracle_value_of(name);
    assert_eq!(v["new"]["peak_allocated_bytes"].as_i64(), Some(peak(B16)));
    assert_eq!(v["baseline"]["peak_allocated_bytes"].as_i64(), Some(peak(B8)));
    assert_eq!(v["peak_delta_bytes"].as_i64(), Some(peak(B16) - peak(B8)));
    let sum: i64 = v["by_category"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["delta_bytes"].as_i64().unwrap())
        .sum();
    assert_eq!(sum, peak(B16) - peak(B8), "categories add up to the peak's move");
    assert_eq!(v["violations"].as_array().unwrap().len(), 1);
    assert_eq!(v["violations"][0]["measure"], "peak_allocated");
    assert_eq!(v["violations"][0]["limit"]["ratio"], 0.05);
    assert!(v["stacks_compared"].as_bool().unwrap());
    assert!(!v["largest_stack_deltas"].as_array().unwrap().is_empty());

    let same = check(&path(B8), &path(B8), &["--json"]);
    assert_eq!(code(&same), 0);
    let v = json(&same);
    assert_eq!(v["passed"], true);
    assert_eq!(v["peak_delta_bytes"], 0);
    assert_eq!(v["peak_delta_ratio"], 0.0);
}

#[test]
fn each_kind_of_limit_holds_within_and_fails_past() {
    // b8 → b16: allocated +68.5 % (+4.74 GiB), reserved +64.8 %, activations +93.8 %.
    let cases: [(&[&str], i32); 8] = [
        (&["--max-peak-increase", "70%"], 0),
        (&["--max-peak-increase", "60%"], 1),
        (&["--max-peak-increase", "5GiB"], 0),
        (&["--max-peak-increase", "4GiB"], 1),
        (&["--max-peak-increase", "100%", "--max-reserved-increase", "60%"], 1),
        (&["--max-peak-increase", "100%", "--max-reserved-increase", "6GiB"], 0),
        (
            &[
                "--max-peak-increase",
                "100%",
                "--max-category-increase",
                "activation=90%",
            ],
            1,
        ),
        (
            &[
                "--max-peak-increase",
                "100%",
                "--max-category-increase",
                "activation=95%",
                "--max-category-increase",
                "parameter=0%",
            ],
            0,
        ),
    ];
    for (limits, expected) in cases {
        let out = check(&path(B16), &path(B8), limits);
        assert_eq!(
            code(&out),
            expected,
            "{limits:?}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let reserved = json(&check(
        &path(B16),
        &path(B8),
        &[
            "--json",
            "--max-peak-increase",
            "100%",
            "--max-reserved-increase",
            "60%",
        ],
    ));
    assert_eq!(reserved["violations"][0]["measure"], "peak_reserved");
    let category = json(&check(
        &path(B16),
        &path(B8),
        &[
            "--json",
            "--max-peak-increase",
            "100%",
            "--max-category-increase",
            "activation=90%",
        ],
    ));
    assert_eq!(category["violations"][0]["measure"], "category");
    assert_eq!(category["violations"][0]["category"], "activation");
}

#[test]
fn text_leads_with_the_verdict_and_markdown_is_a_comment() {
    let text = check(&path(B16), &path(B8), &[]);
    assert_eq!(code(&text), 1);
    let first = String::from_utf8_lossy(&text.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    assert!(
        first.starts_with("regression: allocated peak +4.74 GiB (+68.5 %), limit 5%"),
        "{first}"
    );
    let md = check(&path(B8), &path(B16), &["--format", "markdown"]);
    assert_eq!(code(&md), 0);
    let md = String::from_utf8_lossy(&md.stdout);
    assert!(md.starts_with("### ✅ memlens: memory within limits\n"), "{md}");
    assert!(
        md.contains("| allocated peak | 11.67 GiB | 6.93 GiB | −4.74 GiB (−40.6 %) | 5% | ✅ |"),
        "{md}"
    );
    assert!(md.contains("<details><summary>Stacks that moved most at the peak</summary>"));
}

#[test]
fn unreadable_input_and_bad_limits_exit_2_naming_them() {
    let missing = check("/nonexistent/new.pickle", &path(B8), &[]);
    assert_eq!(code(&missing), 2);
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/new.pickle"));
    let not_snapshot = check(&path(B8), &path("cupy_outside.nvidia_smi.csv"), &[]);
    assert_eq!(code(&not_snapshot), 2);
    assert!(String::from_utf8_lossy(&not_snapshot.stderr).contains("cupy_outside.nvidia_smi.csv"));
    let bad_limit = check(&path(B8), &path(B8), &["--max-peak-increase", "lots"]);
    assert_eq!(code(&bad_limit), 2);
    assert!(String::from_utf8_lossy(&bad_limit.stderr).contains("\"lots\""));
    let bad_category = check(&path(B8), &path(B8), &["--max-category-increase", "weights=5%"]);
    assert_eq!(code(&bad_category), 2);
    assert!(String::from_utf8_lossy(&bad_category.stderr).contains("no such category"));
    let not_a_link = check("http://127.0.0.1:1/compare/a/b", &path(B8), &[]);
    assert_eq!(code(&not_a_link), 2);
    assert!(String::from_utf8_lossy(&not_a_link.stderr).contains("http://127.0.0.1:1/compare/a/b: not a report link"));
}

#[test]
fn report_links_check_as_their_files_do() {
    let server = Process::serve_in(tmpdir("check-links"), &[]);
    let link = |name: &str| {
        let created = upload_trace(&server, name);
        let id = created["id"].as_str().expect("id").to_owned();
        wait_done(&server, &id);
        server.url(created["url"].as_str().expect("url"))
    };
    let (b8, b16) = (link(B8), link(B16));
    let files = json(&check(&path(B16), &path(B8), &["--json"]));
    let links = check(&b16, &b8, &["--json"]);
    assert_eq!(code(&links), 1, "{}", String::from_utf8_lossy(&links.stderr));
    let links = json(&links);
    // Both reports on one server: the server's comparison, stacks included.
    for key in [
        "peak_delta_bytes",
        "reserved_delta_bytes",
        "by_category",
        "largest_stack_deltas",
        "violations",
        "stacks_compared",
    ] {
        assert_eq!(links[key], files[key], "{key}");
    }
    assert!(links["new"]["label"].as_str().unwrap().starts_with(&b16));
    // Limits of each kind reach the server as given.
    let limits = [
        "--json",
        "--max-peak-increase",
        "5GiB",
        "--max-reserved-increase",
        "60%",
        "--max-category-increase",
        "activation=90%",
    ];
    let on_server = json(&check(&b16, &b8, &limits));
    let here = json(&check(&path(B16), &path(B8), &limits));
    assert_eq!(on_server["violations"], here["violations"]);
    assert_eq!(on_server["violations"].as_array().map(Vec::len), Some(2));
    assert_eq!(on_server["thresholds"], here["thresholds"]);
    let id = |link: &str| link.rsplit('/').next().unwrap().to_owned();
    let (status, body) = common::get_json(
        &server,
        &format!(
            "/api/check?new={}&baseline={}&max_peak_increase=lots",
            id(&b16),
            id(&b8)
        ),
    );
    assert_eq!(status, 400);
    assert!(body["error"].as_str().unwrap().contains("\"lots\""), "{body}");
    // A file against a link: summaries only.
    let mixed = check(&path(B16), &b8, &["--json"]);
    assert_eq!(code(&mixed), 1, "{}", String::from_utf8_lossy(&mixed.stderr));
    let mixed = json(&mixed);
    for key in ["peak_delta_bytes", "reserved_delta_bytes", "by_category", "violations"] {
        assert_eq!(mixed[key], files[key], "{key}");
    }
    assert_eq!(mixed["stacks_compared"], false);
    // A link to a report that is not there: exit 2, naming the link.
    let gone = format!("{}/r/0123456789abcdef0123456789abcdef", server.base);
    let missing = check(&gone, &b8, &[]);
    assert_eq!(code(&missing), 2);
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(err.contains(&gone) && err.contains("404"), "{err}");
    // A server that is not there.
    let unreachable = check("http://127.0.0.1:9/r/abc", &b8, &[]);
    assert_eq!(code(&unreachable), 2);
    assert!(String::from_utf8_lossy(&unreachable.stderr).contains("http://127.0.0.1:9/r/abc: cannot reach the server"));
}

#[test]
fn a_jobs_last_good_run_is_the_baseline() {
    let server = Process::serve_in(tmpdir("check-job"), &[]);
    let upload = |name: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_memlens"))
            .args(["upload", "--server", &server.base, "--job", "nightly"])
            .arg(trace(name))
            .output()
            .expect("runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let link = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        wait_done(&server, link.rsplit('/').next().unwrap());
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        let job = err
            .lines()
            .find_map(|l| l.strip_prefix("job nightly: "))
            .unwrap_or_else(|| panic!("no job line in {err}"))
            .to_owned();
        (link, job, err)
    };
    let (b8, job, first) = upload(B8);
    assert!(
        first.contains("job owner token"),
        "the first upload makes the job: {first}"
    );
    let (b16, job_again, second) = upload(B16);
    assert_eq!(job, job_again);
    assert!(!second.contains("job owner token"));
    // The last good run is b8 (b16 grew past 5 %).
    let grown = check_job(&path(B16), &job);
    assert_eq!(grown["passed"], false);
    assert!(grown["baseline"]["label"].as_str().unwrap().starts_with(&b8), "{grown}");
    // The run itself, by its link: still checked against b8, never against itself.
    let itself = check_job(&b16, &job);
    assert_eq!(
        itself["baseline"]["label"].as_str().map(|l| l.starts_with(&b8)),
        Some(true)
    );
    let missing = Command::new(env!("CARGO_BIN_EXE_memlens"))
        .args(["check", &path(B8), "--baseline-job"])
        .arg(format!("{}/j/0123456789abcdef0123456789abcdef", server.base))
        .output()
        .expect("runs");
    assert_eq!(code(&missing), 2);
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no such job"));
}

fn check_job(new: &str, job: &str) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_memlens"))
        .args(["check", new, "--baseline-job", job, "--json"])
        .output()
        .expect("runs");
    assert_ne!(code(&out), 2, "{}", String::from_utf8_lossy(&out.stderr));
    json(&out)
}
