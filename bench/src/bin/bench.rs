//! `memlens-bench [FILE]`: times the import (decode straight into tables) and the analyses of a
//! snapshot, and reports peak resident memory. Defaults to the shared benchmark file
//! `../shared/traces/bench/big_many_small.pickle.gz`. Run it in release mode:
//! `cargo run --release --bin memlens-bench`.

use memlens_core::pipeline::Pipeline;
use std::time::Instant;

use memlens_api::Stage;
use memlens_core::pipeline::{Input, PipelineSink};

/// Notes when the pipeline's stages begin (decode+tables, then analysis).
#[derive(Default)]
struct Timings {
    analysing_at: Option<Instant>,
    cpu_at_analysis: f64,
    hwm_after_decode: u64,
}

impl PipelineSink for Timings {
    fn stage(&mut self, stage: Stage, _file: Option<&str>) {
        if stage == Stage::Analysing && self.analysing_at.is_none() {
            self.analysing_at = Some(Instant::now());
            self.cpu_at_analysis = memlens_bench::cpu_seconds();
            self.hwm_after_decode = memlens_bench::rss().0;
        }
    }
}

fn main() {
    // As the `memlens` binary starts.
    memlens_core::infra::free_memory::one_arena_per_cpu();
    let path = memlens_bench::bench_file();
    let file_len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let (_, base_rss) = memlens_bench::rss();
    let cpu0 = memlens_bench::cpu_seconds();
    let t0 = Instant::now();
    let mut timings = Timings::default();
    let out = match Pipeline::new().run(vec![Input::path(&path)], &mut timings) {
        Ok(out) => out,
        Err(e) => {
            eprintln!("memlens-bench: {e}");
            std::process::exit(2);
        }
    };
    let end = Instant::now();
    let cpu_end = memlens_bench::cpu_seconds();
    let (hwm, _) = memlens_bench::rss();
    let split = timings.analysing_at.unwrap_or(end);
    let (decode, analysis) = (split - t0, end - split);
    let hwm_decode = timings.hwm_after_decode;
    let Some(summary) = out.files.first() else {
        eprintln!("memlens-bench: {}: not an allocator snapshot", path.display());
        std::process::exit(2);
    };
    let rows = summary.devices.iter().map(|d| d.event_count).sum::<usize>();
    let d = summary.devices.first();
    println!(
        "file            {} ({:.1} MiB on disk, gzip: {})",
        path.display(),
        memlens_bench::mib(file_len),
        summary.gzip
    );
    println!("trace entries   {rows}");
    let cpu_split = if timings.analysing_at.is_some() {
        timings.cpu_at_analysis
    } else {
        cpu_end
    };
    println!(
        "decode+tables   {:.3} s (cpu {:.3} s)",
        decode.as_secs_f64(),
        cpu_split - cpu0
    );
    println!(
        "analysis        {:.3} s (cpu {:.3} s)",
        analysis.as_secs_f64(),
        cpu_end - cpu_split
    );
    println!(
        "total           {:.3} s (cpu {:.3} s)",
        (decode + analysis).as_secs_f64(),
        cpu_end - cpu0
    );
    println!(
        "peak RSS        {:.1} MiB (after decode: {:.1} MiB; process baseline {:.1} MiB)",
        memlens_bench::mib(hwm),
        memlens_bench::mib(hwm_decode),
        memlens_bench::mib(base_rss)
    );
    println!(
        "peak RSS − baseline {:.1} MiB",
        memlens_bench::mib(hwm.saturating_sub(base_rss))
    );
    if let Some(d) = d {
        println!(
            "peak allocated  {} bytes, peak reserved {} bytes",
            d.peak_allocated_bytes, d.peak_reserved_bytes
        );
        println!("loop steps      {} ({:?})", d.iterations.count, d.iterations.evidence);
        match d.leaks.first() {
            Some(l) => println!(
                "largest leak    {} bytes, {} per step, at {}",
                l.bytes,
                l.bytes_per_iteration,
                l.stack.first().map_or("(no stack)", String::as_str)
            ),
            None => println!("largest leak    none"),
        }
    }
}
