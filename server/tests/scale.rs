//! The scale-out test on real services (run by `scripts/with-shared-store`, which starts
//! Postgres and an S3-compatible server; skipped, saying so, without them): two API servers
//! with no ingest of their own and two `memlens worker`s share one Postgres + S3 store; 50
//! uploads of real traces arrive at once through both servers; one worker is `kill -9`ed
//! mid-ingest and one API server is restarted. Every report ends ready with its oracle
//! numbers, none is duplicated or lost, and each reads the same through either server.

mod common;

use std::time::{Duration, Instant};

use common::{get_json, multipart, oracle_value_of, shared_store, status_code, tmpdir, trace, Process, SharedStore};
use serde_json::Value;

const TRACES: [&str; 5] = [
    "mlp_train.pickle",
    "leak.pickle",
    "gpt_b4.pickle.gz",
    "many_small.pickle.gz",
    "hf_llama.pickle.gz",
];

/// `memlens <command> <args…>` on `store`.
fn on_store(command: &str, args: &[&str], store: &SharedStore, ready: &str) -> Process {
    let store_args = store.args();
    let mut all: Vec<&str> = args.to_vec();
    all.extend(store_args.iter().map(String::as_str));
    Process::start(command, &all, ready)
}

/// An API server that leaves every report to the workers, serving the stub frontend `dist`.
fn serve(store: &SharedStore, dist: &std::path::Path) -> Process {
    let dist = dist.to_string_lossy().into_owned();
    on_store(
        "serve",
        &[
            "--bind",
            "127.0.0.1:0",
            "--workers",
            "0",
            "--uploads-at-once",
            "0",
            "--uploads-per-minute",
            "0",
            "--static-dir",
            &dist,
        ],
        store,
        "memlens listening on ",
    )
}

fn worker(store: &SharedStore) -> Process {
    on_store("worker", &["--workers", "2"], store, "memlens worker claiming")
}

/// Uploads the traces numbered `range` (cycling through [`TRACES`]) at once, alternating
/// between the servers; each report's id and which trace it is.
fn upload_all(servers: &[Process; 2], bodies: &[Vec<u8>], range: std::ops::Range<usize>) -> Vec<(String, usize)> {
    let uploads: Vec<_> = range
        .map(|i| {
            let url = servers[i % 2].url("/api/reports");
            let (ct, body) = multipart(&[(TRACES[i % TRACES.len()], bodies[i % TRACES.len()].clone())]);
            std::thread::spawn(move || {
                let r = ureq::post(&url)
                    .set("Content-Type", &ct)
                    .send_bytes(&body)
                    .expect("upload");
                let v: Value = serde_json::from_str(&r.into_string().expect("body")).expect("json");
                (v["id"].as_str().expect("id").to_owned(), i % TRACES.len())
            })
        })
        .collect();
    uploads.into_iter().map(|u| u.join().expect("upload thread")).collect()
}

/// Waits until one of `workers` holds a report's lease; that worker's index.
fn wait_for_a_held_report(store: &SharedStore, workers: &[Process]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let holder = store.processing().into_iter().find_map(|(_, owner, _)| {
            workers
                .iter()
                .position(|w| owner.contains(&format!("-{}-", w.child.id())))
        });
        if let Some(w) = holder {
            return w;
        }
        assert!(Instant::now() < deadline, "no worker ever held a report");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn two_servers_and_two_workers_lose_nothing_when_a_worker_is_killed_and_a_server_restarts() {
    let Some(store) = shared_store("scale") else {
        eprintln!("skipped: no shared store services (run it through scripts/with-shared-store)");
        return;
    };
    let started = Instant::now();
    // One stub frontend for every server (made once: a restarted server must not remove the
    // folder the other one serves).
    let dist = tmpdir("scale-dist");
    std::fs::write(dist.join("index.html"), "<html></html>").expect("index");
    let servers = [serve(&store, &dist), serve(&store, &dist)];
    let mut workers = vec![worker(&store), worker(&store)];
    let bodies: Vec<Vec<u8>> = TRACES.iter().map(|n| std::fs::read(trace(n)).expect("trace")).collect();
    let mut reports = upload_all(&servers, &bodies, 0..50);
    // Kill a worker while it holds a report (its name in the lease carries its pid). A small
    // trace takes milliseconds, so the report seen held may be done by the time the kill lands:
    // what counts is what the lease rows still name the dead worker for. If that is nothing, a
    // fresh worker takes its place and more uploads keep the queue full for another try.
    let mut tries = 0;
    let held = loop {
        let w = wait_for_a_held_report(&store, &workers);
        let pid = workers[w].child.id();
        workers.remove(w).kill_9();
        let still_held: Vec<String> = store
            .processing()
            .into_iter()
            .filter(|(_, owner, _)| owner.contains(&format!("-{pid}-")))
            .map(|(id, _, _)| id)
            .collect();
        if let Some(id) = still_held.into_iter().next() {
            break id;
        }
        tries += 1;
        assert!(tries < 5, "a killed worker held no report {tries} times running");
        workers.push(worker(&store));
        let from = reports.len();
        reports.extend(upload_all(&servers, &bodies, from..from + 20));
    };
    // Restart one API server (a new process, a new port).
    let [a, b] = servers;
    b.kill_9();
    let b = serve(&store, &dist);
    let servers = [a, b];
    // Every report ends ready, with its file's oracle peak, through either server.
    for (id, t) in &reports {
        let deadline = Instant::now() + Duration::from_secs(300);
        let st = loop {
            let (_, st) = get_json(&servers[0], &format!("/api/reports/{id}/status"));
            if st["state"] == "ready" || st["state"] == "failed" || Instant::now() > deadline {
                break st;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        assert_eq!(st["state"], "ready", "{id} ({}): {st}", TRACES[*t]);
        let summaries: Vec<Value> = servers
            .iter()
            .map(|s| {
                let (code, v) = get_json(s, &format!("/api/reports/{id}"));
                assert_eq!(code, 200, "{id} through {}", s.base);
                v
            })
            .collect();
        assert_eq!(summaries[0], summaries[1], "{id}: the two servers disagree");
        assert_eq!(
            summaries[0]["files"][0]["devices"][0]["peak_allocated_bytes"].as_i64(),
            Some(oracle_value_of(TRACES[*t])),
            "{id} ({})",
            TRACES[*t]
        );
        let (code, _) =
            status_code(ureq::get(&servers[1].url(&format!("/api/reports/{id}/timeline?width=200"))).call());
        assert_eq!(code, 200, "{id}: timeline through the restarted server");
    }
    // The killed worker's report was taken over once its lease ran out.
    assert!(
        store.attempts(&held) >= 2,
        "{held} was not claimed again after its worker died"
    );
    // None lost, none duplicated.
    let rows = store.query_ids();
    assert_eq!(rows.len(), reports.len(), "rows in the index");
    let mut ids: Vec<&String> = reports.iter().map(|(id, _)| id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), reports.len(), "distinct report ids");
    for id in ids {
        assert!(rows.contains(id), "{id} is not in the index");
    }
    println!(
        "scale: {} reports through 2 API servers and 2 workers (one killed, one server restarted) all ready in {:.1} s",
        reports.len(),
        started.elapsed().as_secs_f64()
    );
}
