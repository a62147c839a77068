//! Full disks and crashes: a disk that is or becomes full, and kill -9s during uploads and
//! ingests, leave every stored report whole.

use super::*;

/// A small tmpfs, unmounted when dropped.
/// A tmpfs mounted at `<root>/small`; unmounted, then `root` removed, when dropped.
struct Tmpfs {
    path: PathBuf,
    _root: TestDir,
}

impl Tmpfs {
    /// `None` when this process may not mount (not root): the caller says so and skips.
    fn mount_in(root: TestDir, size: &str) -> Option<Tmpfs> {
        let path = root.join("small");
        std::fs::create_dir_all(&path).expect("mount point");
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&path)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        let is_root = std::fs::read_to_string("/proc/self/status")
            .unwrap_or_default()
            .lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
        assert!(ok || !is_root, "root could not mount a tmpfs at {}", path.display());
        ok.then_some(Tmpfs { path, _root: root })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazily: the server may still hold files there for a moment.
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// Bytes of every file under `dir`.
fn bytes_under(dir: &Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        total += if p.is_dir() {
            bytes_under(&p)
        } else {
            e.metadata().map_or(0, |m| m.len())
        };
    }
    total
}

/// A server whose data directory is a tmpfs of `size`, holding one ready report of `first`:
/// the mount (kept while it lives), the server, the data directory and the report's id.
/// `None` (said on stderr) where this process may not mount.
fn server_on_small_disk(tag: &str, size: &str, first: &str) -> Option<(Tmpfs, Server, PathBuf, String)> {
    let Some(fs) = Tmpfs::mount_in(tmpdir(tag), size) else {
        eprintln!("skipped: mounting a tmpfs needs root");
        return None;
    };
    let data = fs.path.clone();
    let s = Server::serve_on(&data, &[]);
    let id = ready_report(&s, first);
    Some((fs, s, data, id))
}

#[test]
fn a_full_disk_answers_507_keeps_every_stored_report_and_goes_on_serving() {
    if skipped_on_shared_store("a tmpfs data directory is the embedded store's disk") {
        return;
    }
    let Some((_fs, s, data, id)) = server_on_small_disk("diskfull", "3m", "leak.pickle") else {
        return;
    };
    let (_, summary) = get_json(&s, &format!("/api/reports/{id}"));
    let before = bytes_under(&data.join("store"));
    // 3 MB more than the disk has left.
    let big: Vec<(&str, Vec<u8>)> = ["kv_cache_inference.pickle", "gpt_train_ckpt.pickle", "gpt_train.pickle"]
        .iter()
        .map(|n| (*n, std::fs::read(trace(n)).expect("trace")))
        .collect();
    let (code, body) = upload(&s, &big);
    assert_eq!(code, 507, "{body}");
    assert!(body["error"].as_str().unwrap_or("").contains("disk is full"), "{body}");
    // Nothing of it stays; the stored report and the server are as before.
    let after = bytes_under(&data.join("store"));
    assert!(
        after <= before + (64 << 10),
        "{before} B before, {after} B after the refused upload"
    );
    let (code, again) = get_json(&s, &format!("/api/reports/{id}"));
    assert_eq!((code, &again), (200, &summary));
    let (code, _) = get_json(&s, &format!("/api/reports/{id}/timeline?width=100"));
    assert_eq!(code, 200);
    let (code, _) = status_code(ureq::get(&s.url("/healthz")).call());
    assert_eq!(code, 200);
    // A small upload still fits.
    let small = upload_trace(&s, "mlp_train.pickle");
    let id2 = small["id"].as_str().expect("id").to_owned();
    assert_eq!(wait_done(&s, &id2)["state"], "ready");
}

#[test]
fn two_hundred_kill_9s_during_uploads_and_ingests_leave_every_report_whole_or_absent() {
    if skipped_on_shared_store(
        "it checks the SQLite index and the incoming folder; the scale test kills workers of the shared store",
    ) {
        return;
    }
    use std::time::{Duration, Instant};
    let dir = tmpdir("kills");
    let names = ["mlp_train.pickle", "leak.pickle", "many_small.pickle.gz"];
    let bodies: Vec<Vec<u8>> = names.iter().map(|n| std::fs::read(trace(n)).expect("trace")).collect();
    // Reports whose upload was answered 201 before the kill: they must survive.
    let mut answered: Vec<String> = Vec::new();
    let started = Instant::now();
    let mut kills = 0;
    for i in 0..200usize {
        if started.elapsed() > Duration::from_secs(240) {
            break; // bounded in time on a slow machine; the count is reported
        }
        let s = Server::serve_on(&dir, &["--workers", "1"]);
        let (ct, body) = multipart(&[(names[i % 3], bodies[i % 3].clone())]);
        let url = s.url("/api/reports");
        let upload = std::thread::spawn(move || {
            let r = ureq::post(&url).set("Content-Type", &ct).send_bytes(&body).ok()?;
            let v: Value = serde_json::from_str(&r.into_string().ok()?).ok()?;
            v["id"].as_str().map(str::to_owned)
        });
        // Somewhere in the upload, the ingest, or between them (a spread of moments).
        std::thread::sleep(Duration::from_millis((i * 37 % 160) as u64));
        s.kill();
        kills += 1;
        if let Ok(Some(id)) = upload.join() {
            answered.push(id);
        }
    }
    let s = Server::serve_on(&dir, &[]);
    let db = rusqlite::Connection::open(dir.join("store/index.sqlite")).expect("index");
    let check: String = db.query_row("PRAGMA integrity_check", [], |r| r.get(0)).expect("check");
    assert_eq!(check, "ok");
    let ids: Vec<String> = db
        .prepare("SELECT id FROM reports")
        .expect("query")
        .query_map([], |r| r.get(0))
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("ids");
    for id in &answered {
        assert!(ids.contains(id), "report {id} was answered 201 and then lost");
    }
    // Every report in the index finishes (resumed after the restart) with its file's oracle peak.
    for id in &ids {
        let st = wait_done(&s, id);
        assert_eq!(st["state"], "ready", "{id}: {st}");
        let (_, summary) = get_json(&s, &format!("/api/reports/{id}"));
        let file = summary["files"][0]["file"].as_str().expect("file").to_owned();
        assert_eq!(
            summary["files"][0]["devices"][0]["peak_allocated_bytes"].as_i64(),
            Some(oracle_value_of(&file)),
            "{id} ({file})"
        );
    }
    // Nothing half-received is kept.
    let incoming = std::fs::read_dir(dir.join("store/incoming")).map_or(0, |d| d.count());
    assert_eq!(incoming, 0, "uploads cut off by a kill are removed at start-up");
    println!(
        "kill -9: {kills} kills in {:.0} s; {} uploads answered before their kill, {} reports in the index, all ready with their oracle peaks",
        started.elapsed().as_secs_f64(),
        answered.len(),
        ids.len()
    );
}

#[test]
fn a_disk_that_fills_up_during_an_ingest_fails_that_report_clearly_and_keeps_the_others() {
    if skipped_on_shared_store("a tmpfs data directory is the embedded store's disk") {
        return;
    }
    let Some((_fs, s, _data, id)) = server_on_small_disk("diskfull-ingest", "2m", "mlp_train.pickle") else {
        return;
    };
    // 1.3 MB of gzip fits as an upload; the tables it decodes into do not.
    let big = upload_trace(&s, "many_small.pickle.gz");
    let big_id = big["id"].as_str().expect("id").to_owned();
    let st = wait_done(&s, &big_id);
    assert_eq!(st["state"], "failed", "{st}");
    assert!(st["error"].as_str().unwrap_or("").contains("disk filled up"), "{st}");
    let (code, _) = get_json(&s, &format!("/api/reports/{id}/timeline?width=100"));
    assert_eq!(code, 200, "the stored report still answers");
    let (code, _) = status_code(ureq::get(&s.url("/healthz")).call());
    assert_eq!(code, 200);
}
