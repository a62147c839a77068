//! What the bench binaries share: the file they default to, percentiles, and timing a query
//! over the full range and a set of zoom windows.

use std::path::PathBuf;
use std::time::Instant;

/// The file named on the command line, else the shared benchmark trace.
pub fn bench_file() -> PathBuf {
    std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(shared_bench_file)
}

/// The shared benchmark trace.
pub fn shared_bench_file() -> PathBuf {
    manifest_dir().join("../../shared/traces/bench/big_many_small.pickle.gz")
}

// The checkout at run time: cargo and nextest set CARGO_MANIFEST_DIR for the test process; the
// compile-time value can be stale when a shared target directory serves several checkouts.
fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// The `p` quantile of ascending `sorted`.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Latencies (ms, ascending) of a query over the full range and over zoom windows, and each
/// answer's JSON in order.
pub struct Timed {
    pub full: Vec<f64>,
    pub zoom: Vec<f64>,
    pub answers: Vec<Vec<u8>>,
}

/// Times `query` (start, end → JSON) `full_runs` times over the full range, then once per
/// window.
pub fn time_windows(
    full_runs: usize,
    windows: &[(i64, i64)],
    mut query: impl FnMut(Option<i64>, Option<i64>) -> Vec<u8>,
) -> Timed {
    let mut timed = Timed {
        full: Vec::new(),
        zoom: Vec::new(),
        answers: Vec::new(),
    };
    let asked = std::iter::repeat_n(None, full_runs).chain(windows.iter().map(Some));
    for (i, w) in asked.enumerate() {
        let s = Instant::now();
        let (start, end) = w.map_or((None, None), |&(a, b)| (Some(a), Some(b)));
        timed.answers.push(query(start, end));
        let ms = s.elapsed().as_secs_f64() * 1e3;
        if i < full_runs {
            timed.full.push(ms);
        } else {
            timed.zoom.push(ms);
        }
    }
    timed.full.sort_by(f64::total_cmp);
    timed.zoom.sort_by(f64::total_cmp);
    timed
}

/// `VmHWM` (peak RSS) and `VmRSS` from /proc, in bytes.
pub fn rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// CPU seconds this process has used so far, user and system, all threads (`getrusage`): set
/// against a stage's wall time it says how many cores the stage kept busy.
pub fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes the struct it is given and nothing else.
    let mut usage = unsafe { std::mem::zeroed::<libc::rusage>() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0.0;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// Bytes in MiB.
pub fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

/// Sends `body` (`size` bytes, the file `file`'s content) to `base`'s upload endpoint as a new
/// report named after the file, as a raw body: the server's answer.
pub fn post_upload(
    agent: &ureq::Agent,
    base: &str,
    file: &std::path::Path,
    size: u64,
    body: impl std::io::Read,
) -> Result<memlens_api::Created, String> {
    let name = file
        .file_name()
        .map_or("upload".into(), |n| n.to_string_lossy().into_owned());
    agent
        .post(&format!("{base}{}", memlens_api::routes::REPORTS))
        .query("name", &name)
        .set("Content-Type", "application/octet-stream")
        .set("Content-Length", &size.to_string())
        .send(body)
        .map_err(|e| format!("upload: {e}"))
        .and_then(|r| serde_json::from_reader(r.into_reader()).map_err(|e| format!("upload's answer: {e}")))
}
