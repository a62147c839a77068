//! `memlens-bench-ingest [FILE] [--rate MB/s]`: upload → ready through the HTTP API, as a
//! user's upload goes. A server (`memlens serve`'s own code, in this process, on a throwaway
//! local store) is sent FILE at RATE MB/s (default 150, a fast network; 0: as fast as it is
//! read) and asked for the report's status every 10 ms from the upload's answer on. Prints the
//! upload's time, when each stage began after the upload's answer (the importing, done while
//! the upload arrived, has at most its last bytes left then), when the report was ready, and
//! the process's peak RSS: the server's, the client side holding one 64 KiB buffer. Defaults to
//! the shared benchmark file. Run it in release mode.

use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use clap::Parser;
use memlens::serve::ServeArgs;
use memlens_api::{ReportState, Stage, Status};

/// This bench's arguments.
#[derive(Parser)]
struct Bench {
    /// The snapshot to upload (default: the shared benchmark trace).
    file: Option<std::path::PathBuf>,
    /// The upload's speed in MB/s (0: as fast as the file is read).
    #[arg(long, default_value_t = 150.0)]
    rate: f64,
}

/// `memlens serve`'s arguments, parsed as the command line parses them.
#[derive(Parser)]
struct Serve {
    #[command(flatten)]
    args: ServeArgs,
}

/// A file read at most `bytes_per_s` (0: unthrottled), as a network of that speed delivers it.
struct Throttled {
    inner: std::fs::File,
    bytes_per_s: f64,
    sent: u64,
    started: Instant,
}

impl Read for Throttled {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.bytes_per_s > 0.0 {
            let due = Duration::from_secs_f64(self.sent as f64 / self.bytes_per_s);
            if let Some(wait) = due.checked_sub(self.started.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        let at_most = buf.len().min(64 << 10);
        let n = self.inner.read(&mut buf[..at_most])?;
        self.sent += n as u64;
        Ok(n)
    }
}

fn main() -> Result<(), String> {
    // As the `memlens` binary starts.
    memlens_core::infra::free_memory::one_arena_per_cpu();
    let bench = Bench::parse();
    let file = bench.file.unwrap_or_else(memlens_bench::shared_bench_file);
    let rate_mb = bench.rate;
    let data = tempfile::tempdir().map_err(|e| format!("a throwaway store: {e}"))?;
    // A free port: taken, noted and let go for the server.
    let addr: SocketAddr = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("a free port: {e}"))?;
    let serve = Serve::try_parse_from([
        "serve".as_ref(),
        "--bind".as_ref(),
        addr.to_string().as_ref(),
        "--data-dir".as_ref(),
        data.path().as_os_str(),
        "--static-dir".as_ref(),
        data.path().join("no-frontend").as_os_str(),
    ])
    .map_err(|e| e.to_string())?;
    std::thread::spawn(move || memlens::serve::serve(serve.args));
    let base = format!("http://{addr}");
    let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(600)).build();
    let ready_by = Instant::now() + Duration::from_secs(30);
    while agent.get(&format!("{base}/healthz")).call().is_err() {
        if Instant::now() > ready_by {
            return Err(format!("the server on {addr} did not answer in 30 s"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }

    let size = std::fs::metadata(&file)
        .map_err(|e| format!("{}: {e}", file.display()))?
        .len();
    let body = Throttled {
        inner: std::fs::File::open(&file).map_err(|e| format!("{}: {e}", file.display()))?,
        bytes_per_s: rate_mb * 1e6,
        sent: 0,
        started: Instant::now(),
    };
    let upload_started = Instant::now();
    let created = memlens_bench::post_upload(&agent, &base, &file, size, body)?;
    let answered = Instant::now();
    let upload_s = (answered - upload_started).as_secs_f64();

    let mut stages: Vec<(Stage, f64)> = Vec::new();
    let status = loop {
        let status: Status = agent
            .get(&format!(
                "{base}{}",
                memlens_api::routes::report(memlens_api::routes::REPORT_STATUS, &created.id)
            ))
            .call()
            .map_err(|e| format!("status: {e}"))
            .and_then(|r| serde_json::from_reader(r.into_reader()).map_err(|e| format!("status answer: {e}")))?;
        if stages.last().map(|(s, _)| *s) != Some(status.stage) {
            stages.push((status.stage, answered.elapsed().as_secs_f64()));
        }
        if matches!(status.state, ReportState::Ready | ReportState::Failed) {
            break status;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    if status.state == ReportState::Failed {
        return Err(format!("the report failed: {}", status.error.unwrap_or_default()));
    }
    let (peak, _) = memlens_bench::rss();
    println!(
        "{}: {:.1} MB uploaded in {upload_s:.2} s ({})",
        file.display(),
        size as f64 / 1e6,
        if rate_mb > 0.0 {
            format!("at most {rate_mb} MB/s")
        } else {
            "unthrottled".to_owned()
        }
    );
    for (stage, at) in &stages {
        println!("  {:<10} from {at:.2} s after the upload's answer", stage.name());
    }
    println!("  peak RSS {:.0} MiB", peak as f64 / (1u64 << 20) as f64);
    // The server runs until a signal; the figures are out. Its throwaway store goes first (an
    // exit runs no destructor: each run left the uploaded file and its report behind).
    drop(data);
    std::process::exit(0);
}
