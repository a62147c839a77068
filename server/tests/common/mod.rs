//! What the server's process tests share: real `memlens` processes on loopback (`serve`,
//! `worker`), uploads, status polling, the traces and their oracles, and the shared store's
//! services when the test run has them (`scripts/with-shared-store`).
#![allow(dead_code)] // each test crate uses its own part

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use memlens_api::routes;
use serde_json::Value;

pub fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

pub fn trace(name: &str) -> PathBuf {
    manifest_dir().join("../traces").join(name)
}

/// PyTorch's own allocated peak of a trace (its `memory_stats.json`).
pub fn oracle_value_of(name: &str) -> i64 {
    let text = std::fs::read_to_string(trace(name.trim_end_matches(".pickle.gz")).with_extension("memory_stats.json"))
        .expect("oracle");
    let v: Value = serde_json::from_str(&text).expect("json");
    v["requested_bytes.all.peak"].as_i64().expect("peak")
}

/// A test's scratch folder in the temp dir, removed when dropped: a test run leaves nothing
/// behind (each leaving its stores had filled a developer's disk).
pub struct TestDir(tempfile::TempDir);

impl std::ops::Deref for TestDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        self.0.path()
    }
}

impl AsRef<Path> for TestDir {
    fn as_ref(&self) -> &Path {
        self.0.path()
    }
}

/// A fresh scratch folder `memlens-http-<tag>-…`.
pub fn tmpdir(tag: &str) -> TestDir {
    TestDir(
        tempfile::Builder::new()
            .prefix(&format!("memlens-http-{tag}-"))
            .tempdir()
            .expect("tmp"),
    )
}

/// A `memlens` process that printed its ready line (`… http://ADDR` for servers).
pub struct Process {
    pub child: Child,
    /// `http://127.0.0.1:PORT` for a server; empty for a worker.
    pub base: String,
    /// The scratch folder it owns (removed after the process is stopped), if any.
    dir: Option<TestDir>,
}

impl Process {
    /// Starts `memlens <command> <args…>` and waits for a stdout line starting `ready`.
    pub fn start(command: &str, args: &[&str], ready: &str) -> Process {
        let mut child = Command::new(env!("CARGO_BIN_EXE_memlens"))
            .arg(command)
            .args(args)
            .env("MEMLENS_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("memlens starts");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).expect("ready line");
        assert!(line.starts_with(ready), "memlens {command}: {line}");
        let base = line
            .trim()
            .rsplit(' ')
            .next()
            .filter(|a| a.starts_with("http://"))
            .unwrap_or_default()
            .to_owned();
        Process { child, base, dir: None }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// SIGKILL, and reap it.
    pub fn kill_9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn kill(self) {
        self.kill_9()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `memlens serve`.
pub type Server = Process;

impl Process {
    /// [`Process::serve_on`] a scratch folder the server then owns.
    pub fn serve_in(dir: TestDir, extra: &[&str]) -> Server {
        Process::serve_on(&dir, extra).owning(dir)
    }

    /// This process, owning `dir`: the folder is removed after the process is stopped.
    pub fn owning(mut self, dir: TestDir) -> Process {
        self.dir = Some(dir);
        self
    }

    /// `memlens serve` on data directory `data` (and, under `MEMLENS_TEST_BACKEND=shared`, on
    /// the shared store of that directory's name), with a stub frontend.
    pub fn serve_on(data: &Path, extra: &[&str]) -> Server {
        let dist = data.join("dist");
        std::fs::create_dir_all(&dist).expect("dist");
        std::fs::write(
            dist.join("index.html"),
            "<html><head><title>memlens</title></head><body></body></html>",
        )
        .expect("index");
        let store = data.join("store");
        let backend = match shared_backend() {
            Some(svc) => svc.store_for(&store_name(data)).args(),
            None => Vec::new(),
        };
        let mut args: Vec<&str> = vec!["--bind", "127.0.0.1:0", "--data-dir"];
        let store = store.to_string_lossy().into_owned();
        let dist = dist.to_string_lossy().into_owned();
        args.extend([store.as_str(), "--static-dir", dist.as_str()]);
        args.extend(backend.iter().map(String::as_str));
        args.extend(extra);
        let s = Process::start("serve", &args, "memlens listening on ");
        assert!(s.base.starts_with("http://127.0.0.1:"), "{}", s.base);
        s
    }
}

/// A name for the shared store of a data directory: the same directory, the same store.
fn store_name(data: &Path) -> String {
    let name: String = data
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("m_{name}").chars().take(60).collect()
}

pub fn multipart(files: &[(&str, Vec<u8>)]) -> (String, Vec<u8>) {
    let boundary = "memlens-test-boundary-7d1e";
    let mut body = Vec::new();
    for (name, bytes) in files {
        body.extend_from_slice(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n").as_bytes());
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

pub fn status_code(r: Result<ureq::Response, ureq::Error>) -> (u16, Value) {
    match r {
        Ok(resp) => {
            let code = resp.status();
            let text = resp.into_string().unwrap_or_default();
            (code, serde_json::from_str(&text).unwrap_or(Value::Null))
        }
        Err(ureq::Error::Status(code, resp)) => {
            let text = resp.into_string().unwrap_or_default();
            (code, serde_json::from_str(&text).unwrap_or(Value::Null))
        }
        Err(e) => panic!("transport error: {e}"),
    }
}

pub fn get_json(s: &Server, path: &str) -> (u16, Value) {
    status_code(ureq::get(&s.url(path)).call())
}

pub fn upload(s: &Server, files: &[(&str, Vec<u8>)]) -> (u16, Value) {
    let (ctype, body) = multipart(files);
    status_code(
        ureq::post(&s.url(routes::REPORTS))
            .set("Content-Type", &ctype)
            .send_bytes(&body),
    )
}

pub fn upload_trace(s: &Server, name: &str) -> Value {
    let (code, v) = upload(s, &[(name, std::fs::read(trace(name)).expect("trace"))]);
    assert_eq!(code, 201, "{v}");
    v
}

/// The report's status once it is ready or failed (at most `limit`).
pub fn wait_done_within(s: &Server, id: &str, limit: Duration) -> Value {
    let start = Instant::now();
    loop {
        let (code, v) = status_code(ureq::get(&s.url(&routes::report(routes::REPORT_STATUS, id))).call());
        assert_eq!(code, 200, "{v}");
        let state = v["state"].as_str().unwrap_or("").to_owned();
        if state == "ready" || state == "failed" {
            return v;
        }
        assert!(start.elapsed() < limit, "{id} still {state} after {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn wait_done(s: &Server, id: &str) -> Value {
    wait_done_within(s, id, Duration::from_secs(120))
}

/// The services of a shared store (`scripts/with-shared-store`): a Postgres cluster (its admin
/// URL) and an S3 endpoint with a `memlens` bucket.
pub struct SharedServices {
    admin_url: String,
    s3_url: String,
}

/// The services, when this test run has them.
pub fn shared_services() -> Option<SharedServices> {
    Some(SharedServices {
        admin_url: std::env::var("MEMLENS_TEST_DATABASE_URL").ok()?,
        s3_url: std::env::var("MEMLENS_TEST_S3_URL").ok()?,
    })
}

/// The services, when the HTTP suite is asked to run on them (`MEMLENS_TEST_BACKEND=shared`).
pub fn shared_backend() -> Option<SharedServices> {
    if std::env::var("MEMLENS_TEST_BACKEND").as_deref() == Ok("shared") {
        Some(shared_services().expect("MEMLENS_TEST_BACKEND=shared needs scripts/with-shared-store"))
    } else {
        None
    }
}

/// Whether servers of this run use the shared store; a test of the embedded store's own files
/// calls it, and skips saying why.
pub fn skipped_on_shared_store(why: &str) -> bool {
    let shared = shared_backend().is_some();
    if shared {
        eprintln!("skipped on the shared store: {why}");
    }
    shared
}

impl SharedServices {
    /// A store of its own: a database and an object-key prefix named `name` (made if new).
    pub fn store_for(&self, name: &str) -> SharedStore {
        let mut admin = postgres::Client::connect(&self.admin_url, postgres::NoTls).expect("postgres");
        let exists = admin
            .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])
            .expect("query")
            .is_some();
        if !exists {
            admin
                .batch_execute(&format!("CREATE DATABASE \"{name}\""))
                .expect("create database");
        }
        let base = self
            .admin_url
            .rsplit_once('/')
            .map_or(self.admin_url.as_str(), |(b, _)| b);
        SharedStore {
            database_url: format!("{base}/{name}"),
            s3_url: self.s3_url.clone(),
            prefix: name.to_owned(),
        }
    }
}

/// One shared store of a test.
pub struct SharedStore {
    pub database_url: String,
    pub s3_url: String,
    pub prefix: String,
}

/// A fresh shared store named after `tag`, when the run has the services.
pub fn shared_store(tag: &str) -> Option<SharedStore> {
    Some(shared_services()?.store_for(&store_name(&tmpdir(tag))))
}

impl SharedStore {
    /// The command-line arguments that put a server or worker on it (leases of 3 s, so a
    /// killed process's report is taken over quickly).
    pub fn args(&self) -> Vec<String> {
        [
            "--database-url",
            &self.database_url,
            "--s3-url",
            &self.s3_url,
            "--s3-bucket",
            "memlens",
            "--s3-prefix",
            &self.prefix,
            "--lease-seconds",
            "3",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// `(id, lease owner, attempts)` of the reports being processed.
    pub fn processing(&self) -> Vec<(String, String, i32)> {
        let mut c = postgres::Client::connect(&self.database_url, postgres::NoTls).expect("postgres");
        c.query(
            "SELECT id, lease_owner, attempts FROM reports WHERE state = 'processing' AND lease_owner IS NOT NULL",
            &[],
        )
        .expect("query")
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
    }

    /// How many times a report was claimed.
    pub fn attempts(&self, id: &str) -> i32 {
        let mut c = postgres::Client::connect(&self.database_url, postgres::NoTls).expect("postgres");
        c.query_one("SELECT attempts FROM reports WHERE id = $1", &[&id])
            .expect("query")
            .get(0)
    }

    /// Every report id in its index.
    pub fn query_ids(&self) -> Vec<String> {
        let mut c = postgres::Client::connect(&self.database_url, postgres::NoTls).expect("postgres");
        c.query("SELECT id FROM reports", &[])
            .expect("query")
            .iter()
            .map(|r| r.get(0))
            .collect()
    }
}
