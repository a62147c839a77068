//! Command-line parsing and the `analyze` subcommand.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use memlens_api::{AnalyzeOutput, DeviceSummary, FileSummary, GpuLogSummary};
use memlens_core::analysis::gpu_samples::link_process_gpus;
use memlens_core::importers::{import_path, ImportOptions, Imported};
use memlens_core::report::{analyze_gpu_log, snapshot_time_range, summarize_snapshot};

#[derive(Parser)]
#[command(
    name = "memlens",
    version,
    about = "Explains GPU memory: PyTorch allocator snapshots, Nsight exports, NVML logs"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Analyse trace files and print a summary.
    Analyze(AnalyzeArgs),
    /// Serve the web app and its API.
    Serve(crate::serve::ServeArgs),
    /// Exit 0 when the server at `--bind` answers `GET /healthz` (for container health checks).
    Healthcheck(HealthArgs),
}

#[derive(Args)]
pub struct HealthArgs {
    /// The server's address (`0.0.0.0` is checked on loopback).
    #[arg(long, env = "MEMLENS_BIND", default_value = "127.0.0.1:8080")]
    pub bind: std::net::SocketAddr,
}

/// A minimal HTTP/1.1 probe, so the runtime image needs no curl.
pub fn healthcheck(args: HealthArgs) -> ExitCode {
    use std::io::{Read, Write};
    let mut addr = args.bind;
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let probe = || -> std::io::Result<bool> {
        let timeout = std::time::Duration::from_secs(3);
        let mut s = std::net::TcpStream::connect_timeout(&addr, timeout)?;
        s.set_read_timeout(Some(timeout))?;
        s.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes())?;
        let mut buf = String::new();
        s.read_to_string(&mut buf)?;
        Ok(buf.starts_with("HTTP/1.1 200"))
    };
    match probe() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("memlens: {addr}/healthz did not answer 200");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("memlens: {addr}: {e}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Args)]
pub struct AnalyzeArgs {
    /// Input files: PyTorch snapshot `.pickle` (optionally gzip-compressed), and NVML logs of the
    /// same run (nvidia-smi --query-gpu CSV, nvidia-smi dmon, pynvml JSON lines).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Imports and summarises one file; the error is one line naming the file and the problem.
pub fn summarize_file(path: &std::path::Path) -> Result<FileSummary, String> {
    let name = path.display().to_string();
    let imported = import_path(path, ImportOptions::default()).map_err(|e| format!("{name}: {e}"))?;
    match imported.data {
        Imported::Snapshot(t) => summarize_snapshot(&t, &name, imported.gzip).map_err(|e| format!("{name}: {e}")),
        Imported::GpuSamples(_) => Err(format!(
            "{name}: an NVML log ({}), not an allocator snapshot",
            imported.format.name()
        )),
    }
}

/// Imports and summarises several files as one report (what the server stores for an upload):
/// snapshots first, then NVML logs lined up with the snapshots' clock.
pub fn analyze_paths(paths: &[PathBuf]) -> Result<AnalyzeOutput, String> {
    let mut out = AnalyzeOutput {
        files: Vec::new(),
        gpu_logs: Vec::new(),
        skipped: Vec::new(),
    };
    let mut logs = Vec::new();
    let mut ranges = Vec::new();
    for path in paths {
        let name = path.display().to_string();
        let imported = import_path(path, ImportOptions::default()).map_err(|e| format!("{name}: {e}"))?;
        match imported.data {
            Imported::Snapshot(t) => {
                ranges.extend(snapshot_time_range(&t).map_err(|e| format!("{name}: {e}"))?);
                out.files
                    .push(summarize_snapshot(&t, &name, imported.gzip).map_err(|e| format!("{name}: {e}"))?);
            }
            Imported::GpuSamples(t) => logs.push((name, imported.format, imported.gzip, t)),
        }
    }
    for (name, format, gzip, mut t) in logs {
        let summary =
            analyze_gpu_log(&mut t, &name, format.name(), gzip, &ranges).map_err(|e| format!("{name}: {e}"))?;
        out.gpu_logs.push(summary);
    }
    link_process_gpus(&mut out.gpu_logs);
    Ok(out)
}

pub fn analyze(args: AnalyzeArgs) -> ExitCode {
    let out = match analyze_paths(&args.files) {
        Ok(out) => out,
        Err(line) => {
            eprintln!("memlens: {line}");
            return ExitCode::from(2);
        }
    };
    if args.json {
        match serde_json::to_string_pretty(&out) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("memlens: cannot encode JSON: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        for f in &out.files {
            print!("{}", render_text(f));
        }
        for g in &out.gpu_logs {
            print!("{}", render_gpu_log_text(g));
        }
    }
    ExitCode::SUCCESS
}

fn gib(b: i64) -> String {
    let f = b as f64;
    if f.abs() >= (1u64 << 30) as f64 {
        format!("{:.2} GiB", f / (1u64 << 30) as f64)
    } else {
        format!("{:.1} MiB", f / (1u64 << 20) as f64)
    }
}

/// The human-readable summary of one file.
pub fn render_text(f: &FileSummary) -> String {
    let mut s = format!("{} ({}{})\n", f.file, f.format, if f.gzip { ", gzip" } else { "" });
    for d in &f.devices {
        s += &render_device(d);
    }
    s
}

/// The human-readable summary of one NVML log.
pub fn render_gpu_log_text(g: &GpuLogSummary) -> String {
    let mut s = format!("{} ({}{})\n", g.file, g.format, if g.gzip { ", gzip" } else { "" });
    if g.clock == "local_time" {
        s += &match g.clock_offset_minutes {
            0 => "  times are local time without a zone, read as UTC\n".to_owned(),
            m => format!(
                "  times are local time without a zone; shifted by {m:+} minutes to line up with the snapshots\n"
            ),
        };
    }
    for gpu in &g.gpus {
        let name = gpu.name.as_deref().map_or(String::new(), |n| format!(" ({n})"));
        s += &format!(
            "  GPU {}{name}: {} samples over {:.1} s",
            gpu.gpu,
            gpu.sample_count,
            (gpu.end_time_us - gpu.start_time_us) as f64 / 1e6
        );
        if let Some(ms) = gpu.median_interval_ms {
            s += &format!(", every {ms:.0} ms");
        }
        s += "\n";
        if let (Some(p), Some(t)) = (gpu.peak_used_bytes, gpu.peak_time_us) {
            s += &format!("    peak used       {} (t={t} µs)\n", gib(p));
        }
        if let Some(m) = gpu.min_used_bytes {
            s += &format!("    lowest used     {}\n", gib(m));
        }
        if let Some(t) = gpu.total_bytes {
            s += &format!("    total           {}\n", gib(t));
        }
        if let Some(r) = gpu.driver_reserved_bytes {
            s += &format!("    driver reserved {}\n", gib(r));
        }
    }
    for p in &g.processes {
        let name = p.name.as_deref().unwrap_or("?");
        let gpu = match (p.gpu, &p.bus_id) {
            (Some(i), _) => format!("GPU {i}"),
            (None, Some(b)) => format!("bus {b}"),
            (None, None) => "GPU ?".to_owned(),
        };
        s += &format!(
            "  process {} ({name}) on {gpu}: peak {} over {} samples\n",
            p.pid,
            p.peak_used_bytes.map_or("n/a".to_owned(), gib),
            p.sample_count
        );
    }
    s += &format!("  note: {}\n", g.used_note);
    for l in &g.skipped_lines {
        s += &format!("  skipped {l}\n");
    }
    s
}

fn render_device(d: &DeviceSummary) -> String {
    let mut s = format!(
        "  device {}: {} trace entries, {} allocations\n",
        d.device, d.event_count, d.alloc_count
    );
    let when = match (d.peak_time_us, d.peak_event_index) {
        (Some(t), Some(i)) => format!(" at entry {i} (t={t} µs)"),
        (None, Some(i)) => format!(" at entry {i}"),
        _ => " before the trace began".to_owned(),
    };
    s += &format!("    peak allocated  {}{when}\n", gib(d.peak_allocated_bytes));
    s += &format!("    peak reserved   {}\n", gib(d.peak_reserved_bytes));
    if let Some(fp) = &d.fragmentation_at_peak {
        s += &format!(
            "    at the peak     {} reserved but free, largest free block {}, fragmentation {:.2}\n",
            gib(fp.reserved_free_bytes),
            gib(fp.largest_free_block_bytes),
            fp.fragmentation_index
        );
    }
    for g in d.peak_stacks.iter().take(3) {
        s += &format!(
            "      {} in {} allocation(s) from {}\n",
            gib(g.bytes),
            g.count,
            g.stack.first().map_or("(no stack)", |f| f.as_str())
        );
    }
    s += &format!("    OOMs            {}\n", d.oom_count);
    for o in &d.ooms {
        s += &format!(
            "      requested {} with {} reserved-but-free, largest free block {} ({})\n        {}\n",
            gib(o.requested_bytes),
            gib(o.reserved_free_bytes),
            gib(o.largest_free_block_bytes),
            o.cause,
            o.remedy
        );
    }
    s += &format!(
        "    leak candidates {} (iterations: {} from {})\n",
        d.leaks.len(),
        d.iterations.count,
        d.iterations.source
    );
    for l in &d.leaks {
        s += &format!(
            "      {} in {} allocation(s) over {} iterations, from {}\n",
            gib(l.bytes),
            l.count,
            l.iterations_seen,
            l.stack.iter().take(3).cloned().collect::<Vec<_>>().join(" ← ")
        );
    }
    s
}
