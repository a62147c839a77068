//! A serving plan calibrated by a startup log of the same model (`--calibrate vllm.log`): each
//! term the log measured (weights, the profile run's activation peak, memory outside PyTorch,
//! CUDA graphs) replaces the estimate's, scaled by how the estimate changes from the log's
//! settings to the plan's — so at the log's own settings the plan is the log, and a changed
//! utilization, `max_model_len`, KV dtype or tensor parallelism moves each term as the
//! estimate says it moves. A log that prints the KV cache's bytes (or tokens) but not the terms
//! gives their sum: what the utilization's share leaves after the KV cache.

use memlens_api::{PlanParams, ServingEngine, ServingSummary};

use super::settings::ServeSettings;
use crate::analysis::oom_cause::human;

/// A startup log's summary and the name it is known by (its path, or a report's link).
#[derive(Debug, Clone)]
pub struct LogCalibration {
    pub name: String,
    pub log: ServingSummary,
}

/// The terms of a startup's budget other than the KV cache, per GPU, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Terms {
    pub weights: i64,
    /// The profile run's activation peak (vLLM; SGLang keeps activations outside its share).
    pub activation: i64,
    pub non_torch: i64,
    pub cuda_graph: i64,
    /// SGLang's memory in use before the weights load (its `avail mem` is the GPU less this).
    pub context: i64,
}

/// The plan's query at the log's settings: each setting the log printed is the log's, the rest
/// the plan's (the log ran on the GPU and weights the plan names, unless it says otherwise).
pub fn at_log(q: &PlanParams, log: &ServingSummary) -> PlanParams {
    let mut p = q.clone();
    p.engine = Some(log.engine);
    if log.version.is_some() {
        p.engine_version = None;
    }
    if log.tensor_parallel_size.is_some() {
        p.tp = None;
    }
    if log.total_gpu_memory_bytes.is_some() {
        p.gpu_memory_bytes = None;
    }
    if log.gpu_memory_utilization.is_some() || log.mem_fraction_static.is_some() {
        p.gpu_memory_utilization = None;
    }
    if log.max_model_len.is_some() {
        p.max_model_len = None;
    }
    if log.max_num_seqs.is_some() {
        p.max_num_seqs = None;
    }
    if log.kv_cache_dtype.is_some() {
        p.kv_cache_dtype = None;
    }
    p
}

/// `measured` moved as the estimate moves from the log's settings to the plan's.
fn scaled(measured: i64, new: i64, at_log: i64) -> i64 {
    if at_log <= 0 {
        return measured + new - at_log;
    }
    (measured as f64 * new as f64 / at_log as f64).round() as i64
}

/// The log's KV cache bytes: printed, or its tokens at the bytes a token takes.
fn logged_kv(log: &ServingSummary, bytes_per_token: i64) -> Option<i64> {
    log.kv_cache_bytes.or(log.kv_cache_tokens.map(|t| t * bytes_per_token))
}

/// The terms of the plan at `s` with the log's measured ones in place of the estimate's
/// (`new`: the estimate at `s`; `at_log`: the estimate at the log's settings `l`), and what
/// was taken from the log, in words. `log_bytes_per_token`: a KV token's bytes at the log's
/// settings, to read a log that prints tokens only.
pub fn calibrated(
    c: &LogCalibration,
    s: &ServeSettings,
    new: &Terms,
    at_log: &Terms,
    l: &ServeSettings,
    log_bytes_per_token: i64,
) -> (Terms, Vec<String>) {
    let log = &c.log;
    let mut t = *new;
    let mut took = Vec::new();
    let mut take = |name: &str, measured: Option<i64>, slot: &mut i64, new: i64, old: i64| {
        if let Some(m) = measured {
            *slot = scaled(m, new, old);
            took.push(format!("{name} {}", human(m)));
        }
    };
    take(
        "weights",
        log.weights_bytes,
        &mut t.weights,
        new.weights,
        at_log.weights,
    );
    if s.engine.kind == ServingEngine::Vllm {
        take(
            "activation peak",
            log.activation_peak_bytes,
            &mut t.activation,
            new.activation,
            at_log.activation,
        );
        take(
            "non-torch",
            log.non_torch_bytes,
            &mut t.non_torch,
            new.non_torch,
            at_log.non_torch,
        );
    }
    let context = log
        .free_at_start_bytes
        .filter(|_| s.engine.kind == ServingEngine::Sglang);
    // The memory in use before the weights is the GPU less what was free then.
    take(
        "free memory before the weights",
        context.map(|free| l.total - free),
        &mut t.context,
        new.context,
        at_log.context,
    );
    take(
        "CUDA graphs",
        log.cuda_graph_bytes.filter(|g| *g > 0),
        &mut t.cuda_graph,
        new.cuda_graph,
        at_log.cuda_graph,
    );
    let mut notes = Vec::new();
    if !took.is_empty() {
        notes.push(format!(
            "calibrated by {}: its measured {}, each scaled as the estimate changes from the log's settings to these",
            c.name,
            took.join(", ")
        ));
    }
    if let Some(kv) = logged_kv(log, log_bytes_per_token) {
        notes.extend(rest_of_share(c, l, at_log, kv, new, &mut t));
    }
    (t, notes)
}

/// Where the log prints its KV cache but not every term: the terms it did not print share
/// what the utilization's share leaves after the KV cache and the printed terms, split as the
/// estimate splits them at the log's settings, then moved to the plan's. Returns the note.
fn rest_of_share(
    c: &LogCalibration,
    l: &ServeSettings,
    at_log: &Terms,
    kv: i64,
    new: &Terms,
    t: &mut Terms,
) -> Option<String> {
    let log = &c.log;
    let vllm = l.engine.kind == ServingEngine::Vllm;
    let Terms {
        weights,
        activation,
        non_torch,
        ..
    } = t;
    // Each term: what the log printed, its estimate at the log's settings and at the plan's,
    // and where the calibrated value goes (activations and non-torch memory are vLLM's only).
    let rows = [
        (log.weights_bytes, at_log.weights, new.weights, Some(weights)),
        (
            log.activation_peak_bytes,
            at_log.activation,
            new.activation,
            vllm.then_some(activation),
        ),
        (
            log.non_torch_bytes,
            at_log.non_torch,
            new.non_torch,
            vllm.then_some(non_torch),
        ),
    ];
    let mut open: Vec<(i64, i64, &mut i64)> = Vec::new();
    let mut printed = 0;
    for (measured, old, new, slot) in rows {
        let Some(slot) = slot else { continue };
        match measured {
            Some(m) => printed += m,
            None => open.push((old, new, slot)),
        }
    }
    if open.is_empty() {
        return None;
    }
    let graphs = if vllm && l.engine.graphs_before_kv() {
        log.cuda_graph_bytes.unwrap_or(at_log.cuda_graph)
    } else {
        0
    };
    let share = if vllm {
        l.utilization * l.total as f64
    } else {
        l.utilization * (l.total - log.free_at_start_bytes.map_or(at_log.context, |f| l.total - f)) as f64
    };
    let rest = share.round() as i64 - kv - graphs - printed;
    let estimated: i64 = open.iter().map(|(old, _, _)| old).sum();
    let f = if estimated > 0 {
        rest as f64 / estimated as f64
    } else {
        1.0
    };
    for (_, new, slot) in open {
        *slot = (new as f64 * f).round() as i64;
    }
    Some(format!(
        "calibrated by {}: its KV cache of {} leaves {} of the {} share to what the log does not print, split as the estimate splits it (×{f:.3})",
        c.name,
        human(kv),
        human(rest),
        human(share.round() as i64),
    ))
}
