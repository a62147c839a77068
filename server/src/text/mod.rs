//! Answers as text for people: a report's verdicts and numbers, a run, a GPU log, a plan. The
//! command line prints them and the MCP tools lead their answers with them; neither transport
//! reaches into the other for them.

pub mod plan;

use memlens_api::{DeviceSummary, FileSummary, GpuLogSummary, RunOverview, SampleClock, ServingSummary};

/// Bytes as GiB (at least one) or MiB, as the texts write sizes.
pub fn gib(b: i64) -> String {
    let f = b as f64;
    if f.abs() >= (1u64 << 30) as f64 {
        format!("{:.2} GiB", f / (1u64 << 30) as f64)
    } else {
        format!("{:.1} MiB", f / (1u64 << 20) as f64)
    }
}

/// The human-readable summary of one file: each device's verdict first.
pub fn render_text(f: &FileSummary) -> String {
    let mut s = format!("{} ({}{})\n", f.file, f.format, if f.gzip { ", gzip" } else { "" });
    if let Some(sv) = &f.serving {
        s += &render_serving(sv);
    }
    for d in &f.devices {
        s += &if f.format.is_text_evidence() {
            render_text_device(d)
        } else {
            render_device(d)
        };
    }
    for n in &f.source.notes {
        s += &format!("  note: {n}\n");
    }
    s
}

/// A closed set's wire name (`lower_max_model_len`).
fn wire<T: serde::Serialize>(t: &T) -> String {
    serde_json::to_value(t)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// A vLLM or SGLang startup: its verdict first, the budget, the KV cache, the failure and each
/// remedy with its number.
fn render_serving(v: &ServingSummary) -> String {
    let settings: Vec<String> = [
        v.version.as_ref().map(|x| format!("version {x}")),
        v.model.clone(),
        v.tensor_parallel_size.map(|t| format!("tensor parallel {t}")),
        v.pipeline_parallel_size
            .filter(|p| *p > 1)
            .map(|p| format!("pipeline parallel {p}")),
        v.dtype.as_ref().map(|d| format!("dtype {d}")),
        v.kv_cache_dtype.as_ref().map(|d| format!("KV cache dtype {d}")),
        v.max_model_len.map(|l| format!("max_model_len {l}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut s = format!("  serving         {} {}\n", v.engine.label(), settings.join(", "));
    s += &format!("    verdict       {}\n", v.verdict);
    let opt = |b: Option<i64>| b.map(gib).unwrap_or_else(|| "?".into());
    s += &format!(
        "    budget        total {}, weights {}, activation peak {}, non-torch {}, CUDA graphs {}, KV cache {}\n",
        opt(v.total_gpu_memory_bytes),
        opt(v.weights_bytes),
        opt(v.activation_peak_bytes),
        opt(v.non_torch_bytes),
        opt(v.cuda_graph_bytes),
        opt(v.kv_cache_bytes)
    );
    if let Some(t) = v.kv_cache_tokens {
        s += &format!(
            "    KV cache      {t} tokens{}{}{}\n",
            v.kv_cache_blocks
                .map(|n| format!(
                    " in {n} blocks{}",
                    v.block_size.map(|b| format!(" of {b}")).unwrap_or_default()
                ))
                .unwrap_or_default(),
            v.kv_bytes_per_token
                .map(|p| format!(", {} a token", memlens_api::bytes_label(p)))
                .unwrap_or_default(),
            v.max_concurrency
                .zip(v.concurrency_tokens)
                .map(|(c, t)| format!(", {c:.2}x requests of {t} tokens"))
                .unwrap_or_default()
        );
    }
    if let Some(f) = &v.failure {
        s += &format!(
            "    failure       {} (line {}): {}\n",
            wire(&f.cause),
            f.line,
            f.message
        );
        for r in &f.remedies {
            let value = r.value.map(|x| format!(" {x}")).unwrap_or_default();
            s += &format!("      remedy      {}{value}: {}\n", wire(&r.action), r.note);
        }
    }
    for n in &v.notes {
        s += &format!("    note          {n}\n");
    }
    s
}

/// A device of a text (an OOM message or log, a memory summary): its verdict and OOMs.
fn render_text_device(d: &DeviceSummary) -> String {
    let mut s = format!("  device {}\n    verdict         {}\n", d.device, d.verdict);
    s += &render_ooms(d);
    if let Some(m) = &d.memory_summary {
        s += &format!(
            "    memory summary  peak allocated {}, peak reserved {}, {} OOM(s), {} cudaMalloc retries\n",
            gib(d.peak_allocated_bytes),
            gib(d.peak_reserved_bytes),
            m.num_ooms,
            m.num_alloc_retries
        );
    }
    s
}

/// Each OOM: its cause and phase, figures, how much of the batch fits and the remedies.
fn render_ooms(d: &DeviceSummary) -> String {
    let mut s = format!("    OOMs            {}\n", d.oom_count);
    for o in &d.ooms {
        s += &format!(
            "      {} in {}: requested {}, reserved {} ({} free in it), allocated {}{}{}\n",
            o.cause,
            o.phase.describe(),
            gib(o.requested_bytes),
            gib(o.reserved_bytes),
            gib(o.reserved_free_bytes),
            gib(o.allocated_bytes),
            o.allowed_bytes.map(|a| format!(", cap {}", gib(a))).unwrap_or_default(),
            o.text
                .as_ref()
                .map(|t| format!(
                    " (line {}{})",
                    t.line,
                    t.rank.map(|r| format!(", rank {r}")).unwrap_or_default()
                ))
                .unwrap_or_default()
        );
        if !o.live_categories.is_empty() {
            let live: Vec<String> = o
                .live_categories
                .iter()
                .map(|c| format!("{} {}", c.category.name(), gib(c.bytes)))
                .collect();
            s += &format!("        live        {}\n", live.join(", "));
        }
        if let Some(f) = &o.fits {
            s += &format!(
                "        fits        {:.3} of the batch under {} ({})\n",
                f.batch_fraction,
                gib(f.limit_bytes),
                f.how
            );
        }
        for r in &o.remedies {
            let name = serde_json::to_value(r.action)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            s += &format!("        remedy      {name} ({}): {}\n", gib(r.saves_bytes), r.note);
        }
    }
    s
}

/// The run overview of several ranks: one line per rank, then the worst one.
pub fn render_run_text(r: &RunOverview) -> String {
    let mut s = format!(
        "run of {} ranks (rank numbers from {})\n",
        r.ranks.len(),
        r.rank_source.describe()
    );
    for k in &r.ranks {
        s += &format!(
            "  rank {:>3}  peak {:>10}  reserved {:>10}  OOMs {}  {}\n",
            k.rank,
            gib(k.peak_allocated_bytes),
            gib(k.peak_reserved_bytes),
            k.oom_count,
            k.file
        );
    }
    s += &format!(
        "  worst rank {} peaks at {}, {:.0}% above the median {} (spread {}){}\n",
        r.worst_rank,
        gib(r.max_peak_bytes),
        100.0 * r.worst_above_median,
        gib(r.median_peak_bytes),
        gib(r.spread_bytes),
        if r.imbalanced { " — imbalanced" } else { "" }
    );
    s
}

/// The human-readable summary of one NVML log.
pub fn render_gpu_log_text(g: &GpuLogSummary) -> String {
    let mut s = format!("{} ({}{})\n", g.file, g.format, if g.gzip { ", gzip" } else { "" });
    if g.clock == SampleClock::LocalNoZone {
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
        if let Some(o) = gpu.non_pytorch_peak_bytes {
            s += &format!(
                "    outside PyTorch {} at most while the snapshot ran (used − PyTorch's reserved: CUDA context, NCCL, cuBLAS, other libraries and processes)\n",
                gib(o)
            );
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
    s += &format!("  note: {}\n", g.used_meaning.note());
    for l in &g.skipped_lines {
        s += &format!("  skipped {l}\n");
    }
    for n in &g.notes {
        s += &format!("  note: {n}\n");
    }
    s
}

fn render_device(d: &DeviceSummary) -> String {
    let mut s = format!(
        "  device {}: {} trace entries, {} allocations\n    verdict         {}\n",
        d.device, d.event_count, d.alloc_count, d.verdict
    );
    let when = match (d.peak_time_us, d.peak_event_index) {
        (Some(t), Some(i)) => format!(" at entry {i} (t={t} µs)"),
        (None, Some(i)) => format!(" at entry {i}"),
        // A file of one instant (a JAX profile, a snapshot of segments alone): nothing before it.
        _ if d.event_count == 0 => " (no trace: what was live when the file was written)".to_owned(),
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
    if !d.categories.is_empty() {
        let parts: Vec<String> = d
            .categories
            .iter()
            .filter(|c| c.bytes_at_peak > 0)
            .map(|c| format!("{} {}", c.category.name(), gib(c.bytes_at_peak)))
            .collect();
        s += &format!("    made of         {}\n", parts.join(", "));
    }
    if let Some(kv) = &d.kv_cache {
        s += &format!("    kv cache        {}\n", kv.describe());
    }
    for g in d.peak_stacks.iter().take(3) {
        s += &format!(
            "      {} in {} allocation(s) from {}\n",
            gib(g.bytes),
            g.count,
            g.headline()
        );
    }
    if d.pools.len() > 1 {
        let parts: Vec<String> = d
            .pools
            .iter()
            .map(|p| format!("{:?} {:?} peak {}", p.kind, p.pool_id, gib(p.peak_reserved_bytes)))
            .collect();
        s += &format!("    pools           {}\n", parts.join(", "));
    }
    for st in d.pending_free_stalls.iter().take(3) {
        s += &format!(
            "    stalled frees   {} block(s) of up to {} waited on another stream for up to {:.1} ms, from {}\n",
            st.count,
            gib(st.largest_block_bytes),
            st.longest_wait_us as f64 / 1000.0,
            memlens_api::stack_headline(st.module.as_deref(), &st.stack, None, None)
        );
    }
    if d.trace_truncated {
        s += &format!(
            "    history         incomplete: the trace frees {} allocation(s) made before its first entry (max_entries dropped the start, or recording began late); earlier memory is counted from the final state\n",
            d.frees_before_trace
        );
    }
    s += &render_ooms(d);
    s += &match &d.iterations.note {
        Some(note) => format!("    leak candidates {} ({note})\n", d.leaks.len()),
        None => format!(
            "    leak candidates {} (iterations: {} from {})\n",
            d.leaks.len(),
            d.iterations.count,
            d.iterations.found_from()
        ),
    };
    let unit = if d.iterations.count == 0 {
        "separate moments"
    } else {
        "iterations"
    };
    for l in &d.leaks {
        s += &format!(
            "      {} in {} allocation(s) over {} {unit}, from {}\n",
            gib(l.bytes),
            l.count,
            l.iterations_seen,
            l.headline()
        );
    }
    s
}
