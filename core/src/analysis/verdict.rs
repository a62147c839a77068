//! A device's verdict: the one or two sentences a report leads with. An OOM's own verdict
//! (cause, phase, biggest live category, first remedy) when the device ran out; else the most
//! important finding: a leak, fragmentation at the peak, or what the peak is made of.

use memlens_api::{stack_headline, Category, DeviceSummary};

use super::oom_cause::human;

/// Fragmentation at the peak worth leading with: most free memory out of reach, and the free
/// part a real share of what is reserved.
const FRAGMENTED_INDEX: f64 = 0.5;

pub fn device_verdict(d: &DeviceSummary) -> String {
    if let Some(o) = d.ooms.first() {
        let more = match d.ooms.len() {
            1 => String::new(),
            n => format!(" ({n} OOMs on this device; the first is shown.)"),
        };
        return format!("{}{more}", o.remedy);
    }
    if let Some(l) = d.leaks.first() {
        return format!(
            "Leak: {} piles up per iteration from {} ({} live at the end in {} allocations, made over {} iterations).",
            human(l.bytes_per_iteration),
            stack_headline(l.module.as_deref(), &l.stack, l.no_stack_reason, None),
            human(l.bytes),
            l.count,
            l.iterations_seen
        );
    }
    if let Some(f) = &d.fragmentation_at_peak {
        if f.fragmentation_index >= FRAGMENTED_INDEX && f.reserved_free_bytes * 10 >= f.reserved_bytes {
            let why = match &d.kv_cache {
                Some(kv) if kv.grown_by_copy => {
                    " The key/value cache is grown by torch.cat: every step makes each of its tensors again a token \
                     longer, and the blocks it frees are a token too short for the next; a static cache \
                     (cache_implementation=\"static\") is allocated once."
                }
                _ => "",
            };
            return format!(
                "Fragmentation: at the peak {} of the {} reserved is free, but the largest free block is {} \
                 (fragmentation index {:.2}).{why}",
                human(f.reserved_free_bytes),
                human(f.reserved_bytes),
                human(f.largest_free_block_bytes),
                f.fragmentation_index
            );
        }
    }
    let total = d.peak_allocated_bytes.max(1);
    let made_of = made_of(d, 3);
    if made_of.is_empty() {
        format!(
            "Peak: {} allocated, {} reserved.",
            human(d.peak_allocated_bytes),
            human(d.peak_reserved_bytes)
        )
    } else {
        format!(
            "Peak: {} allocated ({} reserved), made of {}.{} No OOM and no leak.",
            human(d.peak_allocated_bytes),
            human(d.peak_reserved_bytes),
            made_of.join(", "),
            what_rests_on_less(d, total)
        )
    }
}

/// The `most` largest categories at the peak, largest first, each as `name bytes (share %)`.
pub(super) fn made_of(d: &DeviceSummary, most: usize) -> Vec<String> {
    let total = d.peak_allocated_bytes.max(1);
    let mut parts: Vec<(Category, i64)> = d
        .categories
        .iter()
        .filter(|c| c.bytes_at_peak > 0)
        .map(|c| (c.category, c.bytes_at_peak))
        .collect();
    parts.sort_by_key(|p| std::cmp::Reverse(p.1));
    parts
        .iter()
        .take(most)
        .map(|(c, b)| {
            format!(
                "{} {} ({:.0} %)",
                c.name().replace('_', " "),
                human(*b),
                *b as f64 * 100.0 / total as f64
            )
        })
        .collect()
}

/// Why what a rule left as `other` has no category, in the verdict's words.
fn why_unexplained(rule: memlens_api::CategoryRule) -> &'static str {
    use memlens_api::CategoryRule as R;
    match rule {
        R::KeptPastItsIteration => "made in one iteration and kept past the next, by nothing the trace names",
        R::LongLived => "kept for most of the run, with no optimizer step, backward or label to say what it is",
        R::PredatesTheTrace => "there before the recording began, in a run that moved its weights in during it",
        _ => "nothing in the trace places it",
    }
}

/// A tenth of the peak: the share of `other` a verdict says is unexplained.
const UNEXPLAINED_SHARE: f64 = 0.1;
/// The share of the peak cuBLAS's workspaces must reach before the verdict names them.
const WORKSPACES_WORTH_SAYING: f64 = 0.05;

/// What the verdict's make-up rests on beside the run's structure: weights recognised only as
/// there before the recording began, and how much of the peak no evidence places.
fn what_rests_on_less(d: &DeviceSummary, total: i64) -> String {
    let mut out = String::new();
    let parameters = d.categories.iter().find(|c| c.category == Category::Parameter);
    let before = parameters
        .and_then(|c| {
            c.rules
                .iter()
                .find(|r| r.rule == memlens_api::CategoryRule::ThereBeforeRecording)
        })
        .map_or(0, |r| r.bytes);
    if before > 0 && parameters.is_some_and(|c| before * 2 >= c.bytes_at_peak) {
        out.push_str(&format!(
            " The weights ({}) are recognised as there before the recording began and kept to its end: \
             recording started after the model was loaded.",
            human(before)
        ));
    }
    let by_size = d.bytes_by_rule(memlens_api::CategoryRule::StateBySize);
    if by_size > 0 {
        out.push_str(&format!(
            " Optimizer state made before the recording ({}) is recognised by its sizes: those of the \
             parameters, beyond as many blocks of each as backward makes gradients.",
            human(by_size)
        ));
    }
    let workspaces = d.bytes_by_rule(memlens_api::CategoryRule::WorkspaceBySize);
    if workspaces as f64 >= WORKSPACES_WORTH_SAYING * total as f64 {
        out.push_str(&format!(
            " Of the cache, {} are cuBLAS's workspaces, recognised by their sizes: one per thread and \
             stream that ran a matrix product, kept for the process (CUBLAS_WORKSPACE_CONFIG sets their size).",
            human(workspaces)
        ));
    }
    let other = d.categories.iter().find(|c| c.category == Category::Other);
    let at_peak = other.map_or(0, |c| c.bytes_at_peak);
    let share = at_peak as f64 / total as f64;
    if share >= UNEXPLAINED_SHARE {
        let why = other
            .and_then(|c| c.rules.iter().max_by_key(|r| r.bytes))
            .map_or("nothing in the trace places it", |r| why_unexplained(r.rule));
        let graph_pool: i64 = d
            .pools
            .iter()
            .filter(|p| p.kind == memlens_api::PoolKind::GraphPool)
            .map(|p| p.final_allocated_bytes)
            .sum();
        let why = if d.event_count == 0 {
            "the snapshot holds no trace, only what was live at its dump".to_owned()
        } else if replays_only(d, graph_pool) {
            format!(
                "the recording holds only replays of a CUDA graph captured before it began, and a replay \
                 allocates nothing: what the graph's private pool ({}) and the memory made before the \
                 capture hold is not in the trace (record from before the capture to see it)",
                human(graph_pool)
            )
        } else {
            why.to_owned()
        };
        out.push_str(&format!(
            " {} ({:.0} %) is unexplained: {why}.",
            human(at_peak),
            share * 100.0
        ));
    }
    out
}

/// A recording of CUDA-graph replays alone: a graph's private pool holds memory, and the trace
/// made (almost) nothing of what is live — the replays allocate nothing.
fn replays_only(d: &DeviceSummary, graph_pool: i64) -> bool {
    graph_pool > 0 && d.iterations.count == 0 && d.initial_allocated_bytes * 10 >= d.peak_allocated_bytes * 9
}

/// Memory beside PyTorch's reserve that an NVML log of the same report shows worth leading
/// with, when a device has neither an OOM nor a leak: at least 1 GiB and a tenth of what PyTorch
/// reserved at its peak.
pub fn lead_with_memory_outside(files: &mut [memlens_api::FileSummary], logs: &[memlens_api::GpuLogSummary]) {
    for f in files.iter_mut().filter(|f| !f.format.is_text_evidence()) {
        for d in f.devices.iter_mut().filter(|d| d.ooms.is_empty() && d.leaks.is_empty()) {
            let outside = logs
                .iter()
                .flat_map(|l| l.gpus.iter().map(move |g| (l, g)))
                .filter(|(_, g)| g.gpu == d.device)
                .filter_map(|(l, g)| Some((l, g, g.non_pytorch_peak_bytes?)))
                .max_by_key(|x| x.2);
            if let Some((log, g, bytes)) = outside {
                let total = g.total_bytes.unwrap_or(0);
                if bytes >= 1 << 30 && bytes * 10 >= d.peak_reserved_bytes {
                    d.verdict =
                        format!(
                        "Outside PyTorch: up to {} of this GPU{} was held beside PyTorch's reserve (other processes, \
                         the CUDA context, NCCL or other libraries: {}). {}",
                        human(bytes),
                        if total > 0 { format!("'s {}", human(total)) } else { String::new() },
                        log.file,
                        d.verdict
                    );
                }
            }
        }
    }
}
