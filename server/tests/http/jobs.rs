//! Jobs: uploads naming a job join it (one link, made with its first upload), its runs come back
//! in upload order with PyTorch's own peaks, each checked against the run before it with the
//! job's thresholds, which only the job's owner edits; job names are scoped by upload token.
//! Runs on both stores.

use super::*;

fn upload_to_job(s: &Server, job: &str, token: Option<&str>, name: &str) -> Value {
    let (ctype, body) = multipart(&[(name, std::fs::read(trace(name)).expect("trace"))]);
    let mut req = ureq::post(&s.url(&format!("/api/reports?job={job}&title={name}"))).set("Content-Type", &ctype);
    if let Some(t) = token {
        req = req.set("Authorization", &format!("Bearer {t}"));
    }
    let (code, v) = status_code(req.send_bytes(&body));
    assert_eq!(code, 201, "{v}");
    v
}

fn job_id(created: &Value) -> String {
    let url = created["job_url"].as_str().expect("job_url");
    url.strip_prefix("/j/").expect("/j/ID").to_owned()
}

#[test]
fn a_jobs_runs_come_in_upload_order_with_their_regressions() {
    let s = Server::serve_in(tmpdir("jobs"), &[]);
    let names = [
        "gpt_b8.pickle.gz",
        "gpt_b16.pickle.gz",
        "gpt_b8.pickle.gz",
        "gpt_b4.pickle.gz",
    ];
    let created: Vec<Value> = names.iter().map(|n| upload_to_job(&s, "nightly", None, n)).collect();
    for c in &created {
        wait_done(&s, c["id"].as_str().unwrap());
    }
    let job = job_id(&created[0]);
    assert!(
        created.iter().all(|c| job_id(c) == job),
        "one job for every upload of the name"
    );
    let owner = created[0]["job_owner_token"]
        .as_str()
        .expect("the first upload owns the job")
        .to_owned();
    assert!(created[1..].iter().all(|c| c.get("job_owner_token").is_none()));

    let (code, v) = get_json(&s, &format!("/api/jobs/{job}"));
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["name"], "nightly");
    assert_eq!(v["url"], format!("/j/{job}"));
    assert_eq!(v["thresholds"]["max_peak_increase"]["ratio"], 0.05);
    let runs = v["runs"].as_array().unwrap();
    let ids: Vec<&str> = runs.iter().map(|r| r["id"].as_str().unwrap()).collect();
    let uploaded: Vec<&str> = created.iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(ids, uploaded, "upload order");
    for (r, n) in runs.iter().zip(names) {
        assert_eq!(r["peak_allocated_bytes"].as_i64(), Some(oracle_value_of(n)), "{n}");
        assert_eq!(r["title"], n);
        let sum: i64 = r["by_category"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["bytes"].as_i64().unwrap())
            .sum();
        assert_eq!(sum, oracle_value_of(n), "{n}: categories add up to the peak");
        assert!(r["peak_reserved_bytes"].as_i64().unwrap() >= oracle_value_of(n));
    }
    // b8 → b16 grew 68.5 %: a regression against the run before; b16 → b8 and b8 → b4 shrank.
    assert!(runs[0]["regression"].is_null());
    assert_eq!(runs[1]["regression"]["against"], uploaded[0]);
    assert_eq!(runs[1]["regression"]["violations"][0]["measure"], "peak_allocated");
    assert!(runs[1]["regression"]["verdict"]
        .as_str()
        .unwrap()
        .starts_with("regression: allocated peak +4.74 GiB"));
    assert!(runs[2]["regression"].is_null() && runs[3]["regression"].is_null());

    // The owner loosens the limits: run 2 is within them.
    let limits = serde_json::json!({"max_peak_increase": {"ratio": 1.0}, "max_category_increase": []});
    let patch = |token: Option<&str>| {
        let mut req = ureq::request("PATCH", &s.url(&format!("/api/jobs/{job}")));
        if let Some(t) = token {
            req = req.set("X-Delete-Token", t);
        }
        status_code(req.send_string(&limits.to_string()))
    };
    assert_eq!(patch(None).0, 403);
    assert_eq!(
        patch(Some(created[1]["delete_token"].as_str().unwrap())).0,
        403,
        "a run's token is not the job's"
    );
    let (code, v) = patch(Some(&owner));
    assert_eq!(code, 200, "{v}");
    assert!(v["runs"][1]["regression"].is_null());
    assert_eq!(
        get_json(&s, &format!("/api/jobs/{job}")).1["thresholds"]["max_peak_increase"]["ratio"],
        1.0
    );

    // The page, and ids that name no job.
    let page = ureq::get(&s.url(&format!("/j/{job}")))
        .call()
        .expect("page")
        .into_string()
        .unwrap();
    assert!(page.contains("memlens job: nightly"), "{page}");
    assert_eq!(get_json(&s, "/api/jobs/0123456789abcdef0123456789abcdef").0, 404);
    assert_eq!(get_json(&s, "/api/jobs/not-a-job").0, 404);
}

#[test]
fn job_names_belong_to_their_upload_token_and_concurrent_runs_are_all_kept() {
    let dir = tmpdir("jobs-tokens");
    let s = Server::serve_on(&dir, &["--upload-token", "team-a", "--upload-token", "team-b"]);
    let a = upload_to_job(&s, "train", Some("team-a"), "mlp_train.pickle");
    let b = upload_to_job(&s, "train", Some("team-b"), "mlp_train.pickle");
    assert_ne!(job_id(&a), job_id(&b), "one name, two tokens: two jobs");
    // Four uploads to one job at once (what one client may have in progress): none lost, each once.
    let base = s.base.clone();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let base = base.clone();
            std::thread::spawn(move || {
                let (ctype, body) = multipart(&[("leak.pickle", std::fs::read(trace("leak.pickle")).unwrap())]);
                let (code, v) = status_code(
                    ureq::post(&format!("{base}/api/reports?job=train"))
                        .set("Content-Type", &ctype)
                        .set("Authorization", "Bearer team-a")
                        .send_bytes(&body),
                );
                assert_eq!(code, 201, "{v}");
                v
            })
        })
        .collect();
    let created: Vec<Value> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(created.iter().all(|c| job_id(c) == job_id(&a)));
    for c in &created {
        wait_done(&s, c["id"].as_str().unwrap());
    }
    let v = get_json(&s, &format!("/api/jobs/{}", job_id(&a))).1;
    let mut ids: Vec<String> = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 5);
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 5, "each run once");
    drop(s);
    drop(dir);
}
