//! A report file from text evidence: each OOM message explained as a snapshot's OOM is (the
//! same fields, the same classifier and remedies), memory summaries' counters set on their
//! device, an nvidia-smi screen in the same text naming the processes a message left out, and
//! a vLLM or SGLang startup's budget ([`super::serving`]).

use memlens_api::{
    DeviceSummary, FileSummary, Format, IterationInfo, OomExplanation, OomPhase, OomText, ProcessMemory, SourceInfo,
    TimeAxis,
};

use super::oom_cause::{classify, remedies, verdict, OomFacts};
use crate::evidence::{OomMessage, SmiScreen, TextEvidence};

/// The code that captures an at-OOM snapshot next time, for a report made from text.
pub const CAPTURE_NEXT_TIME: &str = "import memlens.torch\nmemlens.torch.on_oom(server=\"http://YOUR-MEMLENS:8080\")  # before training: uploads a snapshot at the next OOM\n# or, without memlens' client:\n# torch.cuda.memory._record_memory_history(max_entries=1_000_000)\n# torch._C._cuda_attach_out_of_memory_observer(lambda *a: torch.cuda.memory._dump_snapshot(\"oom.pickle\"))";

/// The phase a traceback's frames show, innermost evidence first: an optimizer's frames, the
/// autograd engine's backward, Hugging Face generation (its `_prefill`, else a decode step:
/// transformers 4 ran its prefill inside the loop, where a traceback cannot tell it from one),
/// a module's forward.
pub fn phase_of_frames(frames: &[String]) -> OomPhase {
    let any = |f: &dyn Fn(&str) -> bool| frames.iter().any(|x| f(x));
    if any(&|x| super::kv_cache::is_generation_frame(x)) && !any(&|x| super::training_structure::is_backward_frame(x)) {
        return if any(&|x| x.ends_with(":_prefill")) {
            OomPhase::Prefill
        } else {
            OomPhase::Decode
        };
    }
    if any(&|x| super::phases::is_optimizer_frame(x) || x.contains("Optimizer.step")) {
        OomPhase::OptimizerStep
    } else if any(&|x| super::training_structure::is_backward_frame(x)) {
        OomPhase::Backward
    } else if any(&|x| x.contains("torch/nn/modules/module.py") || x.ends_with(":forward")) {
        OomPhase::Forward
    } else {
        OomPhase::Unknown
    }
}

/// The facts a message gives, with the processes split into this one and the others. In a
/// container the message may name this process by its host pid with no "this process"
/// sentence: a process holding at least PyTorch's reserve, and less than 2 GiB above it, is
/// taken for this one.
pub fn facts_of(m: &OomMessage) -> OomFacts {
    let mut processes = m.processes.clone();
    let own = processes.iter().position(|p| p.this_process).or_else(|| {
        let reserved = m.reserved?;
        processes
            .iter()
            .position(|p| p.bytes >= reserved && p.bytes - reserved < 2 << 30)
            .filter(|_| processes.len() > 1 || m.device_free.is_some())
    });
    let own_bytes = own.map(|i| processes.remove(i).bytes);
    let others: i64 = processes.iter().map(|p| p.bytes).sum();
    // MPS caps what it and the driver's other allocations hold together (the high watermark).
    let reserved = match m.backend {
        memlens_api::OomBackend::Mps => m.allocated.map(|a| a + m.other_allocations.unwrap_or(0)),
        _ => m.reserved,
    };
    OomFacts {
        requested: m.requested.unwrap_or(0),
        allocated: m.allocated,
        reserved,
        reserved_free: m.reserved_unallocated,
        largest_free_block: None,
        device_free: m.device_free,
        device_total: m.device_total,
        allowed: m.allowed,
        other_processes: (!m.processes.is_empty()).then_some(others),
        non_pytorch: m
            .other_allocations
            .or_else(|| Some((own_bytes? - m.reserved? - m.private_pool.unwrap_or(0)).max(0))),
        private_pool: m.private_pool,
        expandable_segments: false,
    }
}

/// One message, explained.
pub fn explain_message(m: &OomMessage, screen: Option<&SmiScreen>) -> OomExplanation {
    if let Some(xla) = &m.xla {
        return super::jax_oom::explain(m, xla);
    }
    let mut processes = m.processes.clone();
    // A screen in the same log names the processes an older message (or ROCm's) did not.
    if processes.is_empty() {
        if let Some(s) = screen {
            let gpu = m.device.unwrap_or(0) as i32;
            processes = s
                .processes
                .iter()
                .filter(|p| p.gpu == gpu)
                .filter_map(|p| {
                    Some(ProcessMemory {
                        pid: Some(p.pid),
                        bytes: p.used_bytes?,
                        this_process: false,
                    })
                })
                .collect();
        }
    }
    let with_processes = OomMessage {
        processes: processes.clone(),
        ..m.clone()
    };
    let facts = facts_of(&with_processes);
    let cause = classify(&facts);
    let phase = phase_of_frames(&m.traceback);
    let list = remedies(cause, &facts, phase, None, None);
    let mut remedy = verdict(cause, &facts, phase, None, &list, None);
    if !m.missing.is_empty() {
        remedy += &format!(" The message was cut short: it lacks {}.", m.missing.join(", "));
    }
    OomExplanation {
        event_index: 0,
        time_us: None,
        requested_bytes: facts.requested,
        device_free_bytes: m.device_free,
        reserved_bytes: m.reserved.unwrap_or(0),
        allocated_bytes: m.allocated.unwrap_or(0),
        reserved_free_bytes: m.reserved_unallocated.unwrap_or(0),
        largest_free_block_bytes: 0,
        cause,
        phase,
        allowed_bytes: m.allowed,
        device_total_bytes: m.device_total,
        processes,
        non_pytorch_bytes: facts.non_pytorch,
        private_pool_bytes: m.private_pool,
        remedy,
        remedies: list,
        fits: None,
        live_stacks: Vec::new(),
        live_categories: Vec::new(),
        stack: m.traceback.iter().rev().take(12).rev().cloned().collect(),
        text: Some(OomText {
            line: m.line,
            rank: m.rank,
            exception: m.exception.clone(),
            backend: m.backend,
            missing: {
                let mut missing = m.missing.clone();
                missing.push("largest_free_block".into());
                missing
            },
            capture_next_time: CAPTURE_NEXT_TIME.to_owned(),
            xla: None,
            max_new_tokens: m.max_new_tokens,
            max_length: m.max_length,
        }),
    }
}

/// A text's device verdict: its first OOM's, else what its memory summary says.
fn text_verdict(d: &DeviceSummary) -> String {
    if !d.ooms.is_empty() {
        return super::verdict::device_verdict(d);
    }
    match &d.memory_summary {
        Some(s) => format!(
            "Memory summary: peak {} allocated, {} reserved; {} OOM(s) and {} cudaMalloc retries{}.",
            super::oom_cause::human(d.peak_allocated_bytes),
            super::oom_cause::human(d.peak_reserved_bytes),
            s.num_ooms,
            s.num_alloc_retries,
            match s.non_releasable {
                Some(n) if n.current > 0 => format!(
                    "; {} of the reserve sits in split blocks (non-releasable)",
                    super::oom_cause::human(n.current)
                ),
                _ => String::new(),
            }
        ),
        None => String::new(),
    }
}

fn empty_device(device: i64) -> DeviceSummary {
    DeviceSummary {
        device,
        time_axis: TimeAxis::EventOrder,
        event_count: 0,
        alloc_count: 0,
        peak_allocated_bytes: 0,
        peak_time_us: None,
        peak_event_index: None,
        peak_reserved_bytes: 0,
        initial_allocated_bytes: 0,
        initial_reserved_bytes: 0,
        final_allocated_bytes: 0,
        final_reserved_bytes: 0,
        peak_stacks: Vec::new(),
        peak_modules: Vec::new(),
        fragmentation_at_peak: None,
        oom_count: 0,
        ooms: Vec::new(),
        leaks: Vec::new(),
        iterations: IterationInfo {
            source: "none".into(),
            count: 0,
            note: Some("a text has no allocation history".into()),
            evidence: memlens_api::IterationEvidence::None,
            range_name: None,
            steps: Vec::new(),
        },
        phases: Vec::new(),
        categories: Vec::new(),
        trace_truncated: false,
        complete_from_us: None,
        frees_before_trace: 0,
        pools: Vec::new(),
        pending_free_stalls: Vec::new(),
        pending_free_peak_bytes: 0,
        memory_summary: None,
        kv_cache: None,
        verdict: String::new(),
    }
}

/// The report file of one text. Devices are PyTorch's indices; a message without one (MPS)
/// is device 0. A distributed log's ranks each name their own device 0: their OOMs are kept
/// apart by `text.rank`.
pub fn text_file_summary(e: &TextEvidence, name: &str, format: Format, gzip: bool) -> FileSummary {
    let devices = devices_of(e);
    let notes = notes_of(e);
    let focus_device = devices
        .iter()
        .max_by_key(|d| (d.oom_count, d.peak_reserved_bytes))
        .map(|d| d.device);
    FileSummary {
        file: name.to_owned(),
        format,
        gzip,
        source: SourceInfo {
            notes,
            ..Default::default()
        },
        devices,
        focus_device,
        serving: super::serving::serving_summary(&e.serving, &e.ooms),
    }
}

/// Each device a text speaks of, with its OOMs explained and its memory summary's figures,
/// in device order, each with its verdict.
fn devices_of(e: &TextEvidence) -> Vec<DeviceSummary> {
    let mut devices: Vec<DeviceSummary> = Vec::new();
    let device_mut = |devices: &mut Vec<DeviceSummary>, d: i64| -> usize {
        match devices.iter().position(|x| x.device == d) {
            Some(i) => i,
            None => {
                devices.push(empty_device(d));
                devices.len() - 1
            }
        }
    };
    for m in &e.ooms {
        let screen = e.screens.iter().rev().find(|s| s.line > m.line).or(e.screens.last());
        let i = device_mut(&mut devices, m.device.unwrap_or(0));
        let d = &mut devices[i];
        let o = explain_message(m, screen);
        d.peak_reserved_bytes = d.peak_reserved_bytes.max(o.reserved_bytes);
        d.peak_allocated_bytes = d.peak_allocated_bytes.max(o.allocated_bytes);
        d.ooms.push(o);
        d.oom_count = d.ooms.len();
    }
    for s in &e.summaries {
        let i = device_mut(&mut devices, s.device);
        let d = &mut devices[i];
        let f = &s.facts;
        if let Some(a) = f.allocated {
            d.peak_allocated_bytes = d.peak_allocated_bytes.max(a.peak);
            d.final_allocated_bytes = a.current;
        }
        if let Some(r) = f.reserved {
            d.peak_reserved_bytes = d.peak_reserved_bytes.max(r.peak);
            d.final_reserved_bytes = r.current;
        }
        d.oom_count = d.oom_count.max(f.num_ooms.max(0) as usize);
        d.memory_summary = Some(f.clone());
    }
    devices.sort_by_key(|d| d.device);
    for d in &mut devices {
        d.verdict = text_verdict(d);
    }
    devices
}

/// What was read from the text and what it cannot say, for people: the OOM messages, the
/// memory summary tables, each nvidia-smi screen's GPUs and processes.
fn notes_of(e: &TextEvidence) -> Vec<String> {
    let mut notes = Vec::new();
    if !e.ooms.is_empty() {
        notes.push(format!(
            "Read from text: {} out-of-memory message(s){}. A message gives the allocator's totals, not what the memory \
             is made of: {} for that.",
            e.ooms.len(),
            match e.ooms.iter().map(|m| m.occurrences).sum::<usize>() {
                n if n > e.ooms.len() => format!(" ({n} lines, repeats counted once)"),
                _ => String::new(),
            },
            if e.ooms.iter().all(|m| m.xla.is_some()) {
                "save the device memory profile at the next OOM (memlens.jax.on_oom)"
            } else {
                "capture a snapshot at the next OOM (memlens.torch.on_oom)"
            }
        ));
    }
    if !e.summaries.is_empty() {
        notes.push(format!(
            "Read from text: {} torch.cuda.memory_summary() table(s); their byte cells are rounded down in the unit printed.",
            e.summaries.len()
        ));
    }
    for s in &e.screens {
        let procs: Vec<String> = s
            .processes
            .iter()
            .map(|p| {
                format!(
                    "GPU {} pid {} {} {}",
                    p.gpu,
                    p.pid,
                    p.name,
                    p.used_bytes
                        .map(super::oom_cause::human)
                        .unwrap_or_else(|| "N/A".into())
                )
            })
            .collect();
        notes.push(format!(
            "nvidia-smi screen (line {}): {}{}",
            s.line,
            s.gpus
                .iter()
                .map(|g| format!(
                    "GPU {} {} {} of {} used",
                    g.index,
                    g.name,
                    g.used_bytes.map(super::oom_cause::human).unwrap_or_else(|| "?".into()),
                    g.total_bytes.map(super::oom_cause::human).unwrap_or_else(|| "?".into())
                ))
                .collect::<Vec<_>>()
                .join("; "),
            if procs.is_empty() {
                String::new()
            } else {
                format!("; processes: {}", procs.join(", "))
            }
        ));
    }
    notes
}

/// Whether a message's request is the snapshot's: the same bytes as printed (two decimals in
/// the unit: within half a hundredth of a GiB).
fn same_request(printed: i64, exact: i64) -> bool {
    (printed - exact).abs() <= (exact / 200).max(6 << 20)
}

/// A report holding an at-OOM snapshot and the message of the same failure (its log, its error
/// text): the figures the snapshot cannot see — the cap, the device's size, other processes,
/// memory outside PyTorch — join the snapshot's OOM, which is classified again and keeps what
/// only the snapshot knows (what is live, how much of the batch fits).
pub fn join_messages_to_snapshots(files: &mut [FileSummary]) {
    use super::oom_cause::LiveAtFailure;
    let messages: Vec<(i64, OomExplanation)> = files
        .iter()
        .filter(|f| f.format.is_text_evidence())
        .flat_map(|f| {
            f.devices
                .iter()
                .flat_map(|d| d.ooms.iter().map(move |o| (d.device, o.clone())))
        })
        .collect();
    if messages.is_empty() {
        return;
    }
    for f in files.iter_mut().filter(|f| !f.format.is_text_evidence()) {
        for d in f.devices.iter_mut() {
            let mut joined = false;
            for o in d.ooms.iter_mut().filter(|o| o.text.is_none()) {
                let Some((_, m)) = messages
                    .iter()
                    .find(|(dev, m)| *dev == d.device && same_request(m.requested_bytes, o.requested_bytes))
                else {
                    continue;
                };
                let others: i64 = m.processes.iter().filter(|p| !p.this_process).map(|p| p.bytes).sum();
                let facts = OomFacts {
                    requested: o.requested_bytes,
                    allocated: Some(o.allocated_bytes),
                    reserved: Some(o.reserved_bytes),
                    reserved_free: Some(o.reserved_free_bytes),
                    largest_free_block: Some(o.largest_free_block_bytes),
                    device_free: o.device_free_bytes.or(m.device_free_bytes),
                    device_total: m.device_total_bytes,
                    allowed: m.allowed_bytes,
                    other_processes: (!m.processes.is_empty()).then_some(others),
                    non_pytorch: m.non_pytorch_bytes,
                    private_pool: m.private_pool_bytes,
                    expandable_segments: false,
                };
                let mut live = LiveAtFailure::of(&o.live_categories);
                let lazily = o.remedies.iter().any(|r| r.note.contains("lazily"));
                if o.phase == OomPhase::OptimizerStep && lazily {
                    live.optimizer_state_to_come = Some(2 * live.gradient.max(live.parameter));
                }
                let cause = classify(&facts);
                if let (Some(fit), Some(text)) = (o.fits.as_ref(), m.text.as_ref()) {
                    if let Some(full) = at_full_length(fit, text) {
                        o.fits = Some(full);
                    }
                }
                let mut list = remedies(cause, &facts, o.phase, Some(&live), o.fits.as_ref());
                if o.phase.is_inference() {
                    keep_cache_sizing(&mut list, &o.remedies);
                }
                // The snapshot's own sizing of checkpointing (its layers) stands.
                for r in list.iter_mut() {
                    if let Some(old) = o.remedies.iter().find(|x| {
                        x.action == r.action && x.action == memlens_api::RemedyAction::ActivationCheckpointing
                    }) {
                        *r = old.clone();
                    }
                }
                o.remedy = verdict(cause, &facts, o.phase, Some(&live), &list, o.fits.as_ref());
                o.remedies = list;
                o.cause = cause;
                o.allowed_bytes = m.allowed_bytes;
                o.device_total_bytes = m.device_total_bytes;
                o.processes = m.processes.clone();
                o.non_pytorch_bytes = m.non_pytorch_bytes;
                o.private_pool_bytes = m.private_pool_bytes;
                joined = true;
            }
            if joined {
                d.verdict = super::verdict::device_verdict(d);
            }
        }
    }
}

/// An inference OOM's remedies the snapshot sized from its key/value cache and weights, which
/// the categories a join reads again do not hold: the snapshot's stand.
fn keep_cache_sizing(list: &mut Vec<memlens_api::Remedy>, snapshot: &[memlens_api::Remedy]) {
    use memlens_api::RemedyAction as A;
    let sized_by_the_cache = |a: A| {
        matches!(
            a,
            A::ShorterGeneration | A::NarrowerKvCache | A::StaticKvCache | A::Bf16Weights | A::QuantizeWeights
        )
    };
    for old in snapshot.iter().filter(|r| sized_by_the_cache(r.action)) {
        match list.iter_mut().find(|r| r.action == old.action) {
            Some(r) => *r = old.clone(),
            None => list.push(old.clone()),
        }
    }
    // The first follows from the cause; the rest by bytes saved, as `remedies` orders them.
    if let Some(rest) = list.get_mut(1..) {
        rest.sort_by_key(|r| std::cmp::Reverse(r.saves_bytes));
    }
}

/// A generation's fit with its cache counted at the full length the traceback sets
/// (`max_length`, or the prompt + `max_new_tokens`; the cache holds one token less, the last
/// one generated never going through the model), when the snapshot read the tokens it counted
/// at and, for `max_new_tokens`, the prompt's.
fn at_full_length(fit: &memlens_api::OomFit, text: &memlens_api::OomText) -> Option<memlens_api::OomFit> {
    let g = fit.generation.as_ref()?;
    let counted = g.cache_tokens.filter(|&t| t > 0)?;
    let (full, said) = match (text.max_length, text.max_new_tokens, g.prompt_tokens) {
        (Some(l), _, _) => (l - 1, format!("max_length = {l}")),
        (None, Some(n), Some(p)) => (p + n - 1, format!("max_new_tokens = {n} after a prompt of {p}")),
        _ => return None,
    };
    if full <= counted {
        return None;
    }
    let cache = (g.cache_bytes as f64 * full as f64 / counted as f64) as i64;
    let decode = g.decode_bytes - g.cache_bytes + cache;
    let scaled = g.prefill_bytes.max(decode);
    let x = if fit.fixed_bytes > g.budget_bytes {
        0.0
    } else {
        ((g.budget_bytes - fit.fixed_bytes) as f64 / scaled.max(1) as f64).clamp(0.0, 1.0)
    };
    let how = format!(
        "Generation: the traceback sets {said}, so the last decode step's cache holds {full} tokens a sequence, \
         not the {counted} it held at the failure: {} with its copy, {} for that step. The weights and what lived \
         before the request ({}) do not scale; the prefill needs {}.",
        super::oom_cause::human(cache),
        super::oom_cause::human(decode),
        super::oom_cause::human(fit.fixed_bytes),
        super::oom_cause::human(g.prefill_bytes)
    );
    Some(memlens_api::OomFit {
        batch_fraction: (x * 1000.0).floor() / 1000.0,
        batch_bytes: scaled,
        how,
        generation: Some(memlens_api::GenerationFit {
            decode_bytes: decode,
            cache_bytes: cache,
            cache_tokens: Some(full),
            ..g.clone()
        }),
        ..fit.clone()
    })
}

#[cfg(test)]
mod tests {
    use memlens_api::{GenerationFit, OomBackend, OomFit, OomText};

    use super::at_full_length;

    const MIB: i64 = 1 << 20;

    fn text(max_new_tokens: Option<i64>, max_length: Option<i64>) -> OomText {
        OomText {
            line: 1,
            rank: None,
            exception: None,
            backend: OomBackend::Cuda,
            missing: Vec::new(),
            capture_next_time: String::new(),
            xla: None,
            max_new_tokens,
            max_length,
        }
    }

    /// A decode step that failed at 705 tokens a sequence after a 512-token prompt: with
    /// max_new_tokens = 512 its cache is counted at 1023 tokens, and the fraction falls.
    #[test]
    fn a_decode_fit_counts_the_cache_at_the_length_the_traceback_sets() {
        let fit = OomFit {
            batch_fraction: 0.99,
            limit_bytes: 3000 * MIB,
            fixed_bytes: 700 * MIB,
            batch_bytes: 1500 * MIB,
            how: String::new(),
            generation: Some(GenerationFit {
                budget_bytes: 2200 * MIB,
                prefill_bytes: 1000 * MIB,
                decode_bytes: 1500 * MIB,
                cache_bytes: 1410 * MIB,
                cache_tokens: Some(705),
                prompt_tokens: Some(512),
            }),
        };
        let full = at_full_length(&fit, &text(Some(512), None)).expect("rescaled");
        let g = full.generation.as_ref().expect("generation");
        assert_eq!(g.cache_tokens, Some(1023));
        assert_eq!(g.cache_bytes, 2046 * MIB);
        assert_eq!(full.batch_bytes, 2136 * MIB);
        assert_eq!(full.batch_fraction, 0.702);
        assert!(full.how.contains("max_new_tokens = 512"), "{}", full.how);
        // max_length wins; a length the cache already reached, or no tokens read, changes nothing.
        let by_length = at_full_length(&fit, &text(Some(1), Some(1024))).expect("rescaled");
        assert_eq!(by_length.generation.expect("generation").cache_tokens, Some(1023));
        assert!(at_full_length(&fit, &text(Some(100), None)).is_none());
        let mut unread = fit.clone();
        unread.generation.as_mut().expect("generation").cache_tokens = None;
        assert!(at_full_length(&unread, &text(Some(512), None)).is_none());
    }
}
