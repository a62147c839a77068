//! `memlens-bench-browse [FILE] [--reports N] [--cache-mb MB] [--seed S]`: a team browsing N
//! reports of FILE in turn after a restart, as the serving targets are stated (ten 2 GB reports
//! under a bounded cache). A server (`memlens serve`'s own code, in a child process of this
//! binary, on a throwaway local store) is sent FILE N times and processes each; it is then
//! stopped and a fresh one started on the same store with `--cache-mb MB`. Each report in turn
//! is opened as the page opens it (its summary, then its stored first view), and two seconds
//! later (a user's first look) zoomed 30 times and asked for 20 segment maps at the page's
//! detail, at random places (seeded). Prints each kind of answer's latencies and the fresh
//! server's peak RSS (its `VmHWM`). Defaults to the shared benchmark file. Run it in release
//! mode.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use memlens::serve::ServeArgs;
use memlens_api::{AnalyzeOutput, ReportState, Status};

/// This bench's arguments.
#[derive(Parser)]
struct Bench {
    /// The snapshot to upload (default: the shared benchmark trace).
    file: Option<PathBuf>,
    /// How many reports of it are browsed.
    #[arg(long, default_value_t = 10)]
    reports: usize,
    /// The browsing server's cache bound (`memlens serve --cache-mb`).
    #[arg(long, default_value_t = 1300)]
    cache_mb: u64,
    /// Seeds the zooms' and segment maps' places.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// The first argument with which this binary runs a server instead (how it starts its
/// children): `memlens serve`'s arguments follow.
const SERVE: &str = "__serve";

/// `memlens serve`'s arguments, parsed as the command line parses them.
#[derive(Parser)]
struct Serve {
    #[command(flatten)]
    args: ServeArgs,
}

/// A server in a child process, stopped when dropped.
struct Server {
    child: Child,
    base: String,
}

impl Server {
    /// A server on `data` (a fresh process of this binary), answering once it is up.
    fn start(data: &Path, extra: &[String]) -> Result<Server, String> {
        // A free port: taken, noted and let go for the server.
        let addr: SocketAddr = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("a free port: {e}"))?;
        let mut args = vec![
            "--bind".to_owned(),
            addr.to_string(),
            "--data-dir".to_owned(),
            data.display().to_string(),
            "--static-dir".to_owned(),
            data.join("no-frontend").display().to_string(),
            "--uploads-per-minute".to_owned(),
            "0".to_owned(),
        ];
        args.extend_from_slice(extra);
        let exe = std::env::current_exe().map_err(|e| format!("this binary: {e}"))?;
        let child = Command::new(exe)
            .arg(SERVE)
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("a server: {e}"))?;
        let server = Server {
            child,
            base: format!("http://{addr}"),
        };
        let agent = agent();
        let ready_by = Instant::now() + Duration::from_secs(30);
        while agent.get(&format!("{}/healthz", server.base)).call().is_err() {
            if Instant::now() > ready_by {
                return Err(format!("the server on {addr} did not answer in 30 s"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }

    /// The server's peak RSS so far, in bytes.
    fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new().timeout(Duration::from_secs(600)).build()
}

/// GETs `url`: its answer's bytes and the milliseconds it took.
fn timed_get(agent: &ureq::Agent, url: &str) -> Result<(Vec<u8>, f64), String> {
    let started = Instant::now();
    let mut body = Vec::new();
    let answer = agent.get(url).call().map_err(|e| format!("{url}: {e}"))?;
    std::io::Read::read_to_end(&mut answer.into_reader(), &mut body).map_err(|e| format!("{url}: {e}"))?;
    Ok((body, started.elapsed().as_secs_f64() * 1e3))
}

/// Uploads `file` as a new report and waits until it is processed: its id.
fn upload(agent: &ureq::Agent, base: &str, file: &Path) -> Result<String, String> {
    let size = std::fs::metadata(file)
        .map_err(|e| format!("{}: {e}", file.display()))?
        .len();
    let body = std::fs::File::open(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let created = memlens_bench::post_upload(agent, base, file, size, body)?;
    loop {
        let (body, _) = timed_get(
            agent,
            &format!(
                "{base}{}",
                memlens_api::routes::report(memlens_api::routes::REPORT_STATUS, &created.id)
            ),
        )?;
        let status: Status = serde_json::from_slice(&body).map_err(|e| format!("status answer: {e}"))?;
        match status.state {
            ReportState::Ready => return Ok(created.id),
            ReportState::Failed => {
                return Err(format!("the report failed: {}", status.error.unwrap_or_default()));
            }
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// The range a timeline answer covers.
#[derive(serde::Deserialize)]
struct Range {
    start: i64,
    end: i64,
}

/// A small seeded generator (xorshift*), for places that are the same run after run.
struct Places(u64);

impl Places {
    /// Uniform in `lo..hi` (`lo` when the range is empty).
    fn within(&mut self, lo: i64, hi: i64) -> i64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let r = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        let span = (hi - lo).max(1) as u64;
        lo + (r % span) as i64
    }
}

/// Latencies of one kind of answer.
#[derive(Default)]
struct Latencies(Vec<f64>);

impl Latencies {
    fn line(&mut self, what: &str) -> String {
        self.0.sort_by(f64::total_cmp);
        let at = |p| memlens_bench::percentile(&self.0, p);
        format!(
            "{what:<14} {:>4} answers: p50 {:6.1} ms, p95 {:6.1} ms, max {:6.1} ms",
            self.0.len(),
            at(0.5),
            at(0.95),
            self.0.last().copied().unwrap_or(0.0)
        )
    }
}

fn main() -> Result<(), String> {
    // As the `memlens` binary starts.
    memlens_core::infra::free_memory::one_arena_per_cpu();
    if std::env::args().nth(1).as_deref() == Some(SERVE) {
        let args = std::env::args().skip(2);
        let serve =
            Serve::try_parse_from(std::iter::once("serve".to_owned()).chain(args)).map_err(|e| e.to_string())?;
        memlens::serve::serve(serve.args);
        return Ok(());
    }
    let bench = Bench::parse();
    let file = bench.file.unwrap_or_else(memlens_bench::shared_bench_file);
    let store = tempfile::tempdir().map_err(|e| format!("a throwaway store: {e}"))?;
    let agent = agent();

    let started = Instant::now();
    let ids = {
        let server = Server::start(store.path(), &[])?;
        (0..bench.reports)
            .map(|_| upload(&agent, &server.base, &file))
            .collect::<Result<Vec<_>, _>>()?
    };
    println!(
        "{}: {} reports stored in {:.1} s",
        file.display(),
        ids.len(),
        started.elapsed().as_secs_f64()
    );

    // A restart: nothing of them in memory.
    let server = Server::start(store.path(), &["--cache-mb".to_owned(), bench.cache_mb.to_string()])?;
    let mut places = Places(bench.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let (mut summaries, mut first_views, mut zooms, mut maps) = (
        Latencies::default(),
        Latencies::default(),
        Latencies::default(),
        Latencies::default(),
    );
    for id in &ids {
        use memlens_api::routes::{report as at, REPORT, SEGMENTS, TIMELINE};
        let base = &server.base;
        let report = format!("{base}{}", at(REPORT, id));
        let timeline = format!("{base}{}", at(TIMELINE, id));
        let segments = format!("{base}{}", at(SEGMENTS, id));
        let (body, ms) = timed_get(&agent, &report)?;
        summaries.0.push(ms);
        let summary: AnalyzeOutput = serde_json::from_slice(&body).map_err(|e| format!("summary: {e}"))?;
        let entries = summary
            .files
            .first()
            .and_then(|f| f.devices.first())
            .map_or(1, |d| d.event_count.max(1));
        let (body, ms) = timed_get(&agent, &format!("{timeline}?width=1340&axis=time&overview=true"))?;
        first_views.0.push(ms);
        let whole: Range = serde_json::from_slice(&body).map_err(|e| format!("first view: {e}"))?;
        std::thread::sleep(Duration::from_secs(2));
        for k in 0..30 {
            // Windows from half the trace down to a thousandth of it.
            let width = ((whole.end - whole.start) as f64 * [0.5, 0.1, 0.01, 0.001][k % 4]).max(1.0) as i64;
            let start = places.within(whole.start, (whole.end - width).max(whole.start + 1));
            let url = format!(
                "{timeline}?file=0&device=0&width=1340&axis=time&start={start}&end={}",
                (start + width).min(whole.end)
            );
            zooms.0.push(timed_get(&agent, &url)?.1);
        }
        for _ in 0..20 {
            let event = places.within(0, entries as i64);
            let url = format!("{segments}?file=0&device=0&event={event}&max_segments=80&width=1430");
            maps.0.push(timed_get(&agent, &url)?.1);
        }
    }
    println!(
        "after a restart under --cache-mb {}, each report opened, then 30 zooms and 20 segment maps:",
        bench.cache_mb
    );
    for line in [
        summaries.line("summary"),
        first_views.line("first view"),
        zooms.line("zoom"),
        maps.line("segment map"),
    ] {
        println!("  {line}");
    }
    println!(
        "  server peak RSS {:.0} MiB",
        server.peak_rss() as f64 / (1u64 << 20) as f64
    );
    Ok(())
}
