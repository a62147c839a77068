//! A vLLM or SGLang startup explained (`files[].serving`): the budget the engine drew from the
//! log's own figures (what it did not print derived from what it did: 0.6.4's activation peak is
//! `peak_torch_memory` less the weights, v0's tokens are blocks × block size), the KV bytes per
//! token, how many requests fit, and, when the server did not start, the cause and the
//! remedies, each computed from the log (the longest `max_model_len` that fits, the least
//! `gpu_memory_utilization` that holds one request, what an fp8 KV cache or more tensor
//! parallelism would hold). An out-of-memory message in the log is placed by the stage the
//! startup had reached: loading weights, the profile run, or CUDA graph capture.

use memlens_api::{ServingAction, ServingCause, ServingEngine, ServingFailure, ServingRemedy, ServingSummary};

use super::oom_cause::human;
use crate::evidence::{OomMessage, ServingErrorKind, ServingStartup};

/// vLLM's default `gpu_memory_utilization`, assumed where a log does not print it.
const DEFAULT_UTILIZATION: f64 = 0.9;

/// `428,000`.
pub fn thousands(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

/// The figures of a startup, each as printed or derived from what was.
#[derive(Debug, Clone, Copy, Default)]
struct Budget {
    total: Option<i64>,
    utilization: Option<f64>,
    weights: Option<i64>,
    activation: Option<i64>,
    non_torch: Option<i64>,
    cuda_graph: Option<i64>,
    kv_bytes: Option<i64>,
    tokens: Option<i64>,
    blocks: Option<i64>,
    block_size: Option<i64>,
    bytes_per_token: Option<i64>,
    max_model_len: Option<i64>,
    concurrency: Option<f64>,
    concurrency_tokens: Option<i64>,
    /// SGLang's profiled token count for the pool, where it came out at zero or below.
    profiled_tokens: Option<i64>,
}

/// v0 prints blocks and the concurrency of `max_model_len` requests (blocks × block size over
/// it, two decimals): the block size is the power of two that gives it back.
fn block_size_from_concurrency(blocks: i64, concurrency: f64, per_request: i64) -> Option<i64> {
    let tokens = concurrency * per_request as f64;
    (0..=10)
        .map(|k| 1i64 << k)
        .find(|bs| ((blocks * bs) as f64 - tokens).abs() <= per_request as f64 * 0.005 + 0.5)
}

fn budget(s: &ServingStartup) -> Budget {
    let mut b = Budget {
        total: s.total_gpu_memory,
        utilization: s.gpu_memory_utilization,
        weights: s.weights,
        activation: s.activation_peak,
        non_torch: s.non_torch,
        cuda_graph: s.cuda_graph,
        kv_bytes: s.kv_cache_bytes,
        tokens: s.kv_cache_tokens,
        blocks: s.gpu_blocks,
        block_size: s.block_size,
        max_model_len: s.max_model_len.or(s.concurrency_tokens),
        concurrency: s.max_concurrency,
        concurrency_tokens: s.concurrency_tokens,
        ..Budget::default()
    };
    if let (Some(both), Some(w)) = (s.weights_and_non_torch, b.weights) {
        b.non_torch = b.non_torch.or(Some(both - w));
    }
    if let (Some(peak), Some(w)) = (s.peak_torch, b.weights) {
        b.activation = b.activation.or(Some(peak - w));
    }
    if let Some(ServingErrorKind::NoKvCacheMemory { profiled_tokens }) = s.error.as_ref().map(|e| e.kind) {
        b.profiled_tokens = profiled_tokens;
    }
    if let Some(e) = &s.error {
        if let ServingErrorKind::MaxSeqLenOverKvCache {
            max_model_len,
            tokens,
            available_bytes,
            ..
        } = e.kind
        {
            b.max_model_len = Some(max_model_len);
            b.kv_bytes = b.kv_bytes.or(available_bytes);
            if b.block_size.is_none() {
                b.block_size = tokens
                    .zip(b.blocks)
                    .filter(|(t, n)| *n > 0 && t % n == 0)
                    .map(|(t, n)| t / n);
            }
            b.tokens = b.tokens.or(tokens);
        }
    }
    if let (Some(n), Some(t)) = (b.blocks, b.tokens) {
        b.block_size = b.block_size.or((n > 0 && t % n == 0).then(|| t / n));
    }
    if let (None, Some(n), Some(c), Some(per)) = (b.block_size, b.blocks, b.concurrency, b.concurrency_tokens) {
        b.block_size = block_size_from_concurrency(n, c, per);
    }
    if let (None, Some(n), Some(bs)) = (b.tokens, b.blocks, b.block_size) {
        b.tokens = Some(n * bs);
    }
    b.bytes_per_token = match (b.kv_bytes, b.tokens) {
        (Some(k), Some(t)) if k > 0 && t > 0 => Some((k as f64 / t as f64).round() as i64),
        _ => None,
    };
    if let (None, Some(t), Some(l)) = (b.concurrency, b.tokens, b.max_model_len) {
        if l > 0 {
            b.concurrency = Some((t as f64 / l as f64 * 100.0).floor() / 100.0);
            b.concurrency_tokens = Some(l);
        }
    }
    b
}

/// A share of the GPU as the engine was given it: `0.90`, `0.9764`.
fn share(f: f64) -> String {
    let four = format!("{f:.4}");
    let trimmed = four.trim_end_matches('0');
    if trimmed.len() < 4 {
        format!("{f:.2}")
    } else {
        trimmed.to_owned()
    }
}

/// `fraction` rounded up (or down) to two decimals.
fn hundredths(fraction: f64, up: bool) -> f64 {
    let x = fraction * 100.0;
    (if up { (x - 1e-9).ceil() } else { (x + 1e-9).floor() }) / 100.0
}

fn remedy(action: ServingAction, value: Option<f64>, note: String) -> ServingRemedy {
    ServingRemedy { action, value, note }
}

/// The setting that gives the KV cache `extra` more bytes: vLLM's utilization, SGLang's
/// static fraction (both shares of the whole GPU).
fn raise_share(s: &ServingStartup, b: &Budget, extra: i64, why: &str) -> Option<ServingRemedy> {
    let (action, name, current, assumed) = match s.engine {
        ServingEngine::Vllm => (
            ServingAction::RaiseGpuMemoryUtilization,
            "gpu_memory_utilization",
            b.utilization.unwrap_or(DEFAULT_UTILIZATION),
            b.utilization.is_none(),
        ),
        ServingEngine::Sglang => (
            ServingAction::RaiseMemFractionStatic,
            "mem_fraction_static",
            s.mem_fraction_static?,
            false,
        ),
    };
    let Some(total) = b.total.filter(|t| *t > 0) else {
        return Some(remedy(
            action,
            None,
            format!("Raise {name} so the KV cache gets {} more {why} (the log does not print the GPU's total memory to turn that into a fraction).", human(extra)),
        ));
    };
    let wanted = hundredths(current + extra as f64 / total as f64, true);
    let from = if assumed {
        format!("{} (vLLM's default; the log does not print it)", share(current))
    } else {
        share(current)
    };
    if wanted > 1.0 {
        return Some(remedy(
            action,
            None,
            format!(
                "Not enough: even the whole GPU ({name} 1.00) leaves the KV cache {} short {why}.",
                human(((wanted - 1.0) * total as f64) as i64)
            ),
        ));
    }
    let headroom = if wanted > 0.95 {
        "; little is then left for CUDA graphs and other processes"
    } else {
        ""
    };
    Some(remedy(
        action,
        Some(wanted),
        format!(
            "Raise {name} from {from} to {wanted:.2}: {} more for the KV cache {why}{headroom}.",
            human(extra)
        ),
    ))
}

/// An fp8 KV cache: half the bytes per token, twice the tokens in the same memory.
fn fp8_kv(s: &ServingStartup, b: &Budget, want: Option<i64>) -> Option<ServingRemedy> {
    if s.kv_cache_dtype
        .as_deref()
        .is_some_and(|d| d.contains("fp8") || d.contains("int"))
    {
        return None;
    }
    let tokens = b.tokens?;
    let doubled = tokens * 2;
    let fits = match want {
        Some(l) if doubled >= l => format!(", enough for max_model_len {}", thousands(l)),
        Some(l) => format!(", still short of max_model_len {}", thousands(l)),
        None => String::new(),
    };
    let flag = match s.engine {
        ServingEngine::Vllm => "--kv-cache-dtype fp8",
        ServingEngine::Sglang => "--kv-cache-dtype fp8_e4m3",
    };
    Some(remedy(
        ServingAction::Fp8KvCache,
        Some(doubled as f64),
        format!(
            "{flag} halves the KV bytes per token{}: the same memory holds {} tokens{fits}.",
            b.bytes_per_token
                .map(|p| format!(" ({} → {})", human(p), human(p / 2)))
                .unwrap_or_default(),
            thousands(doubled)
        ),
    ))
}

/// Twice the tensor parallelism: each GPU holds half the weights and half of each token's KV.
fn more_tp(s: &ServingStartup, b: &Budget) -> ServingRemedy {
    let gain = match (b.weights, b.kv_bytes, b.bytes_per_token) {
        (Some(w), Some(kv), Some(p)) if p > 0 => format!(
            ": each GPU holds half the weights ({} freed) and half of each token's KV, about {} tokens",
            human(w / 2),
            thousands(((kv.max(0) + w / 2) as f64 / (p as f64 / 2.0)) as i64)
        ),
        (Some(w), _, _) => format!(": each GPU holds half the weights ({} freed)", human(w / 2)),
        _ => ": each GPU holds half the weights and half of each token's KV".to_owned(),
    };
    match s.tensor_parallel_size {
        Some(tp) => {
            let next = tp.max(1) * 2;
            remedy(
                ServingAction::MoreTensorParallel,
                Some(next as f64),
                format!("Tensor parallel size {next} instead of {tp}{gain} (needs {next} GPUs)."),
            )
        }
        None => remedy(
            ServingAction::MoreTensorParallel,
            None,
            format!("Twice the tensor parallel size (the log does not print the current one){gain}."),
        ),
    }
}

/// Remedies when a request of `max_model_len` does not fit in the KV cache.
fn over_kv_remedies(s: &ServingStartup, b: &Budget, kind: &ServingErrorKind) -> Vec<ServingRemedy> {
    let ServingErrorKind::MaxSeqLenOverKvCache {
        max_model_len,
        tokens,
        needed_bytes,
        available_bytes,
        estimated_max_len,
    } = *kind
    else {
        return Vec::new();
    };
    let per_token = needed_bytes
        .filter(|_| max_model_len > 0)
        .map(|n| n / max_model_len)
        .or(b.bytes_per_token);
    let fit = estimated_max_len.or(tokens).or_else(|| {
        let (n, a) = needed_bytes.zip(available_bytes)?;
        (n > 0).then(|| (max_model_len as f64 * a as f64 / n as f64) as i64)
    });
    let mut out = Vec::new();
    if let Some(fit) = fit {
        out.push(remedy(
            ServingAction::LowerMaxModelLen,
            Some(fit as f64),
            format!(
                "--max-model-len {}: the longest request the KV cache holds (one at a time).",
                thousands(fit)
            ),
        ));
    }
    if let (Some(fit), Some(p)) = (fit, per_token) {
        let extra = (max_model_len - fit).max(0) * p;
        out.extend(raise_share(
            s,
            b,
            extra,
            &format!("to hold one request of {} tokens", thousands(max_model_len)),
        ));
    }
    let with_fit = Budget {
        tokens: b.tokens.or(fit),
        ..*b
    };
    out.extend(fp8_kv(s, &with_fit, Some(max_model_len)));
    out.push(more_tp(s, b));
    out.extend(eager_for_kv(s, b));
    out
}

/// `--enforce-eager` frees the KV cache's room only where the engine counted CUDA graphs
/// before sizing it (vLLM ≥ 0.21 estimates them first).
fn eager_for_kv(s: &ServingStartup, b: &Budget) -> Option<ServingRemedy> {
    let g = b.cuda_graph.filter(|g| *g > 0 && s.cuda_graph_estimated)?;
    let tokens = b
        .bytes_per_token
        .map(|p| format!(", about {} more tokens", thousands(g / p.max(1))))
        .unwrap_or_default();
    Some(remedy(
        ServingAction::EnforceEager,
        Some(g as f64),
        format!("--enforce-eager skips CUDA graphs: the {} estimated for them goes to the KV cache{tokens} (decode runs slower).", human(g)),
    ))
}

/// Remedies when nothing was left for the KV cache.
fn no_kv_remedies(s: &ServingStartup, b: &Budget) -> Vec<ServingRemedy> {
    let short = b.kv_bytes.filter(|k| *k < 0).map(|k| -k);
    let mut out = Vec::new();
    match short {
        Some(d) => out.extend(raise_share(s, b, d, "to bring the KV cache above zero, plus what one request needs")),
        None if s.engine == ServingEngine::Sglang => out.push(remedy(
            ServingAction::RaiseMemFractionStatic,
            None,
            "Raise --mem-fraction-static: the weights and the KV pool must fit in that share of the GPU (lower it only for out-of-memory while serving).".into(),
        )),
        None => out.push(remedy(
            ServingAction::RaiseGpuMemoryUtilization,
            None,
            "Raise --gpu-memory-utilization: the weights, the profile run's activations and the KV cache must fit in that share of the GPU.".into(),
        )),
    }
    if let Some(w) = b.weights.filter(|w| *w > 0) {
        out.push(remedy(
            ServingAction::QuantizeWeights,
            Some((w / 2) as f64),
            format!(
                "fp8 weights (--quantization fp8, or an fp8/int4 checkpoint) halve 16-bit weights: {} of the {} freed.",
                human(w / 2),
                human(w)
            ),
        ));
    }
    out.push(more_tp(s, b));
    if let Some(a) = b.activation.filter(|a| *a > 0) {
        out.push(remedy(
            ServingAction::LowerMaxModelLen,
            None,
            format!("A shorter --max-model-len (or --max-num-batched-tokens) shrinks the profile run's activation peak of {}.", human(a)),
        ));
    }
    out.extend(eager_for_kv(s, b));
    out
}

/// Remedies when the GPU had less free than the utilization asks for.
fn free_below_remedies(s: &ServingStartup, b: &Budget, free: Option<i64>, total: Option<i64>) -> Vec<ServingRemedy> {
    let mut out = Vec::new();
    if let (Some(f), Some(t)) = (free, total.or(b.total)) {
        if t > 0 {
            let most = hundredths(f as f64 / t as f64, false);
            out.push(remedy(
                ServingAction::LowerGpuMemoryUtilization,
                Some(most),
                format!("--gpu-memory-utilization {most:.2} at most: other processes hold {} of the {} GPU, only {} was free at startup.", human(t - f), human(t), human(f)),
            ));
        }
    }
    out.push(more_tp(s, b));
    out
}

/// What an out-of-memory message in the log stopped: the stage its line falls in.
fn oom_cause(s: &ServingStartup, line: usize) -> ServingCause {
    let st = s.stages;
    let after = |l: Option<usize>| l.is_some_and(|l| line > l);
    if after(st.graph_capture_began) || after(st.kv_cache_sized) {
        ServingCause::OomInCudaGraphCapture
    } else if after(st.weights_loaded) {
        ServingCause::OomInProfileRun
    } else {
        ServingCause::OomLoadingWeights
    }
}

/// Remedies for an out-of-memory error at `cause`'s stage.
fn oom_remedies(s: &ServingStartup, b: &Budget, cause: ServingCause, requested: Option<i64>) -> Vec<ServingRemedy> {
    let mut out = Vec::new();
    match cause {
        ServingCause::OomInCudaGraphCapture => {
            out.push(remedy(
                ServingAction::EnforceEager,
                b.cuda_graph.map(|g| g as f64),
                format!(
                    "--enforce-eager (SGLang: --disable-cuda-graph) captures no CUDA graphs{}; decode runs slower.",
                    b.cuda_graph
                        .map(|g| format!(" (they took {})", human(g)))
                        .unwrap_or_default()
                ),
            ));
            if let (Some(u), Some(t), Some(r)) = (b.utilization, b.total, requested) {
                let lower = hundredths(u - r as f64 / t as f64, false);
                out.push(remedy(
                    ServingAction::LowerGpuMemoryUtilization,
                    Some(lower),
                    format!("--gpu-memory-utilization {lower:.2}: CUDA graphs are captured outside the KV cache's share; leave them the {} that was missing.", human(r)),
                ));
            }
            let seqs = s.max_num_seqs.map(|n| (n / 2).max(1));
            out.push(remedy(
                ServingAction::LowerMaxNumSeqs,
                seqs.map(|n| n as f64),
                format!(
                    "A lower --max-num-seqs{} captures fewer and smaller graphs.",
                    seqs.map(|n| format!(" ({n})")).unwrap_or_default()
                ),
            ));
        }
        ServingCause::OomInProfileRun => {
            out.push(remedy(
                ServingAction::LowerMaxModelLen,
                b.max_model_len.map(|l| (l / 2) as f64),
                "A shorter --max-model-len (or --max-num-batched-tokens) shrinks the profile run's dummy batch and its activations.".into(),
            ));
            out.push(more_tp(s, b));
        }
        _ => {
            if let Some(w) = b.weights.filter(|w| *w > 0) {
                out.push(remedy(
                    ServingAction::QuantizeWeights,
                    Some((w / 2) as f64),
                    format!("fp8 weights halve 16-bit weights ({} freed).", human(w / 2)),
                ));
            } else {
                out.push(remedy(
                    ServingAction::QuantizeWeights,
                    None,
                    "fp8 or int4 weights: a half or a quarter of 16-bit weights.".into(),
                ));
            }
            out.push(more_tp(s, b));
        }
    }
    out
}

/// The failure of a startup: its own error, else an out-of-memory message within its lines.
fn failure_of(s: &ServingStartup, b: &Budget, ooms: &[&OomMessage]) -> Option<ServingFailure> {
    if let Some(e) = &s.error {
        let (cause, remedies) = match e.kind {
            ServingErrorKind::MaxSeqLenOverKvCache { .. } => {
                (ServingCause::MaxModelLenOverKvCache, over_kv_remedies(s, b, &e.kind))
            }
            ServingErrorKind::NoKvCacheMemory { .. } => (ServingCause::NoKvCacheMemory, no_kv_remedies(s, b)),
            ServingErrorKind::FreeBelowUtilization { free, total, .. } => (
                ServingCause::FreeMemoryBelowUtilization,
                free_below_remedies(s, b, free, total),
            ),
        };
        return Some(ServingFailure {
            cause,
            message: e.message.clone(),
            line: e.line,
            remedies,
        });
    }
    if b.kv_bytes.is_some_and(|k| k <= 0) {
        return Some(ServingFailure {
            cause: ServingCause::NoKvCacheMemory,
            message: format!("the KV cache was given {}", human(b.kv_bytes.unwrap_or(0))),
            line: s.line,
            remedies: no_kv_remedies(s, b),
        });
    }
    let m = ooms.first()?;
    let cause = oom_cause(s, m.line);
    Some(ServingFailure {
        cause,
        message: format!(
            "{}out of memory{}",
            m.exception.as_ref().map(|e| format!("{e}: ")).unwrap_or_default(),
            m.requested
                .map(|r| format!(", tried to allocate {}", human(r)))
                .unwrap_or_default()
        ),
        line: m.line,
        remedies: oom_remedies(s, b, cause, m.requested),
    })
}

/// "KV cache: 52.36 GiB holds 686,320 tokens (6.86× requests of 100,000 tokens) on a 79.19 GiB
/// GPU at gpu_memory_utilization 0.90; weights 14.99 GiB, …".
fn budget_sentence(s: &ServingStartup, b: &Budget) -> String {
    let requests = match (b.concurrency, b.concurrency_tokens) {
        (Some(c), Some(t)) => format!(" ({c:.2}× requests of {} tokens)", thousands(t)),
        _ => String::new(),
    };
    let blocks = b
        .blocks
        .map(|n| format!(" in {} blocks", thousands(n)))
        .unwrap_or_default();
    let mut out = match (b.kv_bytes, b.tokens) {
        (Some(k), Some(t)) => format!("KV cache: {} holds {} tokens{requests}", human(k), thousands(t)),
        (Some(k), None) => format!("KV cache: {}{blocks}", human(k)),
        (None, Some(t)) => format!("KV cache holds {} tokens{requests}", thousands(t)),
        (None, None) if b.blocks.is_some() => format!("KV cache:{blocks}"),
        (None, None) => "KV cache: not printed".to_owned(),
    };
    match (b.total, s.free_at_start) {
        (Some(t), _) => out += &format!(" on a {} GPU", human(t)),
        (None, Some(f)) => out += &format!(" on a GPU with {} free at startup", human(f)),
        _ => {}
    }
    match (s.engine, b.utilization, s.mem_fraction_static) {
        (ServingEngine::Vllm, Some(u), _) => out += &format!(" at gpu_memory_utilization {}", share(u)),
        (ServingEngine::Sglang, _, Some(m)) => out += &format!(", mem_fraction_static {}", share(m)),
        _ => {}
    }
    if let Some(tp) = s.tensor_parallel_size.filter(|t| *t > 1) {
        out += &format!(" (per GPU, tensor parallel {tp})");
    }
    let parts: Vec<String> = [
        ("weights", b.weights),
        ("activation peak", b.activation),
        ("non-torch", b.non_torch),
        (
            if s.cuda_graph_estimated {
                "CUDA graphs (estimated)"
            } else {
                "CUDA graphs"
            },
            b.cuda_graph,
        ),
    ]
    .iter()
    .filter_map(|(name, v)| v.map(|v| format!("{name} {}", human(v))))
    .collect();
    if !parts.is_empty() {
        out += &format!("; {}", parts.join(", "));
    }
    out + "."
}

fn cause_phrase(f: &ServingFailure, b: &Budget) -> String {
    let kv = b.kv_bytes.map(|k| format!(" ({})", human(k))).unwrap_or_default();
    match f.cause {
        ServingCause::MaxModelLenOverKvCache => {
            let fit = f
                .remedies
                .iter()
                .find(|r| r.action == ServingAction::LowerMaxModelLen)
                .and_then(|r| r.value);
            format!(
                "the KV cache{kv} holds {}, fewer than one request of max_model_len {} tokens needs",
                fit.map(|t| format!("{} tokens", thousands(t as i64)))
                    .unwrap_or_else(|| "too few tokens".into()),
                b.max_model_len.map(thousands).unwrap_or_else(|| "?".into()),
            )
        }
        ServingCause::NoKvCacheMemory => match b.profiled_tokens {
            Some(t) => format!(
                "nothing was left for the KV cache (its profile came out at {} tokens)",
                thousands(t)
            ),
            None => format!("nothing was left for the KV cache{kv}"),
        },
        ServingCause::FreeMemoryBelowUtilization => {
            "the GPU had less memory free at startup than gpu_memory_utilization asks for".into()
        }
        ServingCause::OomLoadingWeights => "out of memory while loading the weights".into(),
        ServingCause::OomInProfileRun => "out of memory in the profile run that measures activations".into(),
        ServingCause::OomInCudaGraphCapture => "out of memory while capturing CUDA graphs".into(),
    }
}

/// What the figures rest on and what the log did not print.
fn notes(s: &ServingStartup, b: &Budget, startups: usize) -> Vec<String> {
    let mut out = vec![format!(
        "Read from {}'s own lines: GiB printed to two decimals (`GB` in some versions means GiB too: bytes / 2^30), so each figure is within half the last digit.",
        s.engine.label()
    )];
    if s.ranks > 1 {
        out.push(format!(
            "{} ranks printed memory lines; the figures are one rank's, per GPU.",
            s.ranks
        ));
    }
    if startups > 1 {
        out.push(format!(
            "The log holds {startups} startups; this is the one from line {}.",
            s.line
        ));
    }
    if b.bytes_per_token.is_some() {
        out.push(
            "KV bytes per token are the KV cache's bytes over its tokens (this GPU's share of every layer).".into(),
        );
    }
    if s.cuda_graph_estimated {
        out.push("CUDA graphs: vLLM's estimate before capture (no capture line followed).".into());
    }
    if [b.weights, b.activation, b.non_torch, b.cuda_graph]
        .iter()
        .any(|v| v.is_some_and(|v| v < 0))
    {
        out.push("A negative figure is as the engine printed it (memory other processes freed meanwhile, or a measuring error), not memory given back.".into());
    }
    let missing: Vec<&str> = [
        ("total GPU memory", b.total.is_none()),
        ("weights", b.weights.is_none()),
        (
            "activation peak",
            b.activation.is_none() && s.engine == ServingEngine::Vllm,
        ),
        ("KV cache bytes", b.kv_bytes.is_none()),
        ("KV cache tokens", b.tokens.is_none()),
    ]
    .iter()
    .filter(|(_, m)| *m)
    .map(|(n, _)| *n)
    .collect();
    if !missing.is_empty() {
        out.push(format!("The log does not print: {}.", missing.join(", ")));
    }
    out
}

/// The summary of one startup, with the out-of-memory messages printed within its lines.
fn summarise(s: &ServingStartup, ooms: &[&OomMessage], startups: usize) -> ServingSummary {
    let b = budget(s);
    let failure = failure_of(s, &b, ooms);
    let sentence = budget_sentence(s, &b);
    let verdict = match &failure {
        Some(f) => format!(
            "{} did not start: {}.{} {sentence}",
            s.engine.label(),
            cause_phrase(f, &b),
            f.remedies
                .first()
                .map(|r| format!(" First remedy: {}", r.note))
                .unwrap_or_default(),
        ),
        None => sentence,
    };
    ServingSummary {
        engine: s.engine,
        version: s.version.clone(),
        model: s.model.clone(),
        tensor_parallel_size: s.tensor_parallel_size,
        pipeline_parallel_size: s.pipeline_parallel_size,
        dtype: s.dtype.clone(),
        kv_cache_dtype: s.kv_cache_dtype.clone(),
        gpu_memory_utilization: b.utilization,
        mem_fraction_static: s.mem_fraction_static,
        total_gpu_memory_bytes: b.total,
        free_at_start_bytes: s.free_at_start,
        weights_bytes: b.weights,
        activation_peak_bytes: b.activation,
        non_torch_bytes: b.non_torch,
        cuda_graph_bytes: b.cuda_graph,
        kv_cache_bytes: b.kv_bytes,
        kv_cache_tokens: b.tokens,
        kv_cache_blocks: b.blocks,
        block_size: b.block_size,
        kv_bytes_per_token: b.bytes_per_token,
        max_model_len: b.max_model_len,
        max_num_seqs: s.max_num_seqs,
        max_concurrency: b.concurrency,
        concurrency_tokens: b.concurrency_tokens,
        ranks: s.ranks,
        startups,
        line: s.line,
        notes: notes(s, &b, startups),
        failure,
        verdict,
    }
}

/// The serving summary of a text: its startup that failed last, else its last startup.
pub fn serving_summary(startups: &[ServingStartup], ooms: &[OomMessage]) -> Option<ServingSummary> {
    let within = |i: usize| -> Vec<&OomMessage> {
        let from = startups[i].line;
        let to = startups.get(i + 1).map_or(usize::MAX, |n| n.line);
        ooms.iter().filter(|m| m.line >= from && m.line < to).collect()
    };
    let failed = |i: &usize| {
        let s = &startups[*i];
        s.error.is_some() || s.kv_cache_bytes.is_some_and(|k| k <= 0) || !within(*i).is_empty()
    };
    let i = (0..startups.len())
        .rev()
        .find(failed)
        .or(startups.len().checked_sub(1))?;
    Some(summarise(&startups[i], &within(i), startups.len()))
}
