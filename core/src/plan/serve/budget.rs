//! The serving plan's budget: the terms predicted per GPU at the resolved settings
//! ([`super::settings`]), and the startup they give — vLLM's KV cache is `gpu_memory_utilization × total` less the weights, the
//! profile run's activation peak, what it counts outside PyTorch and (from 0.21) the CUDA
//! graphs; SGLang's is `mem_fraction_static` of the memory free before the weights, less the
//! weights. The startup is handed to the startup log's own analysis
//! ([`crate::analysis::serving`]) as if a log had printed it, so the plan's verdict, failure
//! and remedies are the log's, computed the same way.

use memlens_api::{KvCacheDtype, PlanParams, ServingEngine, ServingPlan};

use super::calibrate::{self, LogCalibration, Terms};
use super::engine::Version;
use super::layout::{kv_element_bytes, kv_layout, KvLayout};
use super::settings::{resolve, ServeSettings};
use super::{profile, weights};
use crate::analysis::oom_cause::human;
use crate::evidence::{ServingError, ServingErrorKind, ServingStartup};
use crate::plan::config::ModelShape;
use crate::plan::{presets, PlanError};

/// The model's config text: the one given, else the bundled model's.
fn config_text(q: &PlanParams) -> Result<String, PlanError> {
    match (q.config.as_ref(), q.model.as_deref().map(str::trim)) {
        (Some(c), _) => Ok(c.clone()),
        (None, Some(name)) if !name.is_empty() => Ok(presets::resolve(name)?.config_json()),
        _ => Err(PlanError::Settings(
            "a serving plan needs the model's config.json or a bundled model's name (--model)".into(),
        )),
    }
}

/// The terms predicted at `s`.
pub fn predicted_terms(m: &ModelShape, s: &ServeSettings) -> Terms {
    let vllm = s.engine.kind == ServingEngine::Vllm;
    Terms {
        weights: weights::weights_per_gpu(m, s.weights, s.tp),
        activation: if vllm {
            profile::activation_peak(m, &s.engine, s.weights, s.tp, s.batch())
        } else {
            0
        },
        non_torch: s.engine.non_torch_bytes(s.tp, s.total),
        cuda_graph: profile::cuda_graph_bytes(m),
        context: s.engine.context_bytes(s.tp, s.total),
    }
}

/// The KV cache's bytes at `s` with `t`.
pub fn kv_cache_bytes(s: &ServeSettings, t: &Terms) -> i64 {
    match s.engine.kind {
        ServingEngine::Vllm => {
            let graphs = if s.engine.graphs_before_kv() { t.cuda_graph } else { 0 };
            (s.utilization * s.total as f64).round() as i64 - t.weights - t.activation - t.non_torch - graphs
        }
        ServingEngine::Sglang => (s.utilization * (s.total - t.context) as f64).round() as i64 - t.weights,
    }
}

/// What the plan's KV cache holds.
struct Capacity {
    tokens: i64,
    blocks: Option<i64>,
    /// The longest request it holds, at most the model's context.
    longest: u64,
    /// Requests of `max_model_len` at once.
    concurrency: f64,
}

fn capacity(s: &ServeSettings, layout: &KvLayout, kv: i64, context: u64) -> Capacity {
    let block = s.engine.block_size();
    let per_block = layout.bytes_per_token() * block;
    let blocks = if per_block > 0 { kv.max(0) / per_block } else { 0 };
    let windows = s.engine.keeps_windows();
    let one = layout.bytes_for(s.max_model_len, windows).max(1);
    Capacity {
        tokens: blocks * block,
        blocks: (s.engine.kind == ServingEngine::Vllm).then_some(blocks),
        longest: layout.longest_in(blocks * per_block, windows, context.max(s.max_model_len)),
        concurrency: ((blocks * per_block) as f64 / one as f64 * 100.0).floor() / 100.0,
    }
}

/// The failure a startup with this KV cache meets, as the engine would report it.
fn failure(s: &ServeSettings, layout: &KvLayout, kv: i64, c: &Capacity) -> Option<ServingError> {
    let windows = s.engine.keeps_windows();
    let needed = layout.bytes_for(s.max_model_len, windows);
    let kind = if kv <= 0 || c.tokens == 0 {
        ServingErrorKind::NoKvCacheMemory {
            profiled_tokens: (s.engine.kind == ServingEngine::Sglang).then(|| kv / layout.bytes_per_token().max(1)),
        }
    } else if c.longest < s.max_model_len && s.engine.kind == ServingEngine::Vllm {
        // vLLM refuses to start; SGLang starts and serves shorter requests.
        ServingErrorKind::MaxSeqLenOverKvCache {
            max_model_len: s.max_model_len as i64,
            tokens: Some(c.tokens),
            needed_bytes: Some(needed),
            available_bytes: Some(kv),
            estimated_max_len: Some(c.longest as i64),
        }
    } else {
        return None;
    };
    let message = match kind {
        ServingErrorKind::NoKvCacheMemory { .. } => {
            format!("predicted: nothing is left for the KV cache ({})", human(kv))
        }
        _ => format!(
            "predicted: one request of max_model_len {} needs {} of KV cache, {} is left for it",
            s.max_model_len,
            human(needed),
            human(kv)
        ),
    };
    Some(ServingError { kind, line: 1, message })
}

/// The startup the terms give, as a log would print it.
fn startup(s: &ServeSettings, t: &Terms, layout: &KvLayout, model: Option<String>, context: u64) -> ServingStartup {
    let kv = kv_cache_bytes(s, t);
    let c = capacity(s, layout, kv, context);
    let vllm = s.engine.kind == ServingEngine::Vllm;
    let mut out = ServingStartup::new(s.engine.kind, 1);
    out.model = model;
    out.version = s.engine.version.map(|Version(a, b, c)| format!("{a}.{b}.{c}"));
    out.tensor_parallel_size = Some(s.tp as i64);
    out.kv_cache_dtype = Some(
        match s.kv_dtype {
            KvCacheDtype::Auto => "auto",
            KvCacheDtype::Fp8 => "fp8",
        }
        .into(),
    );
    if vllm {
        out.gpu_memory_utilization = Some(s.utilization);
        out.activation_peak = Some(t.activation);
        out.non_torch = Some(t.non_torch);
        out.cuda_graph_estimated = s.engine.graphs_before_kv();
    } else {
        out.mem_fraction_static = Some(s.utilization);
        out.free_at_start = Some(s.total - t.context);
    }
    out.total_gpu_memory = Some(s.total);
    out.weights = Some(t.weights);
    out.cuda_graph = Some(t.cuda_graph);
    out.max_model_len = Some(s.max_model_len as i64);
    out.max_num_seqs = match s.engine.kind {
        ServingEngine::Vllm => Some(s.max_num_seqs.unwrap_or_else(|| s.batch().requests) as i64),
        ServingEngine::Sglang => s.max_num_seqs.map(|n| n as i64),
    };
    out.kv_cache_bytes = Some(kv);
    out.kv_cache_tokens = Some(c.tokens);
    out.gpu_blocks = c.blocks;
    out.block_size = Some(s.engine.block_size());
    out.max_concurrency = Some(c.concurrency);
    out.concurrency_tokens = Some(s.max_model_len as i64);
    out.error = failure(s, layout, kv, &c);
    out
}

/// What the plan assumes, in words.
fn assumptions(s: &ServeSettings, m: &ModelShape, layout: &KvLayout, calibrated: &[String]) -> Vec<String> {
    let mut out = calibrated.to_vec();
    out.push(match s.engine.version {
        Some(Version(a, b, c)) => format!("{} {a}.{b}.{c}'s accounting and defaults", s.engine.kind.label()),
        None => format!("the newest {}'s accounting and defaults", s.engine.kind.label()),
    });
    if s.engine.kind == ServingEngine::Vllm {
        let b = s.batch();
        out.push(format!(
            "the profile run's dummy batch: {} tokens over {} requests (max_num_batched_tokens and max_num_seqs as the engine defaults them)",
            b.tokens, b.requests
        ));
        if !s.engine.graphs_before_kv() {
            out.push(
                "CUDA graphs are captured after the KV cache is sized, in what the utilization leaves over".into(),
            );
        }
    } else {
        out.push(format!(
            "{} in use before the weights load (CUDA context and communicators); activations and CUDA graphs live in the rest of the GPU",
            human(s.engine.context_bytes(s.tp, s.total))
        ));
    }
    if s.engine.non_torch_bytes(s.tp, s.total) > s.engine.non_torch_bytes(1, s.total)
        || s.engine.context_bytes(s.tp, s.total) > s.engine.context_bytes(s.tp, 0)
    {
        out.push(format!(
            "tensor parallelism on a GPU of 70 GiB or more: {} of NCCL's NVLink buffers (an estimate from two logs of four H100s)",
            human(super::engine::NVLINK_COMMUNICATION_BYTES)
        ));
    }
    out.push(format!(
        "KV cache: {} a token on each GPU ({} layers{})",
        human(layout.bytes_per_token()),
        m.layers,
        if m.mla.is_some() {
            ", MLA's latent and rotary key".to_owned()
        } else {
            format!(", key/value heads a GPU: {}", (m.kv_heads / s.tp).max(1))
        }
    ));
    if !layout.windows.is_empty() {
        out.push(format!(
            "{} of {} layers attend over a sliding window of {} tokens{}",
            layout.windows.len(),
            m.layers,
            layout.windows[0],
            if s.engine.keeps_windows() {
                " and keep only that many tokens a request"
            } else {
                ", but this engine keeps every token in every layer"
            }
        ));
    }
    out
}

/// The serving plan for `q`, calibrated by a startup log's measured terms when one is given.
pub fn serve_plan(q: &PlanParams, calibration: Option<&LogCalibration>) -> Result<ServingPlan, PlanError> {
    let config = config_text(q)?;
    let m = ModelShape::from_config_json(&config)?;
    let log = calibration.map(|c| &c.log);
    let s = resolve(q, &m, log)?;
    let layout = kv_layout(&m, &config, s.tp, kv_element_bytes(s.kv_dtype, s.weights))?;
    let predicted = predicted_terms(&m, &s);
    let (terms, notes) = match calibration {
        Some(c) => {
            let l = resolve(&calibrate::at_log(q, &c.log), &m, Some(&c.log))?;
            let log_layout = kv_layout(&m, &config, l.tp, kv_element_bytes(l.kv_dtype, l.weights))?;
            let at_log = predicted_terms(&m, &l);
            calibrate::calibrated(c, &s, &predicted, &at_log, &l, log_layout.bytes_per_token())
        }
        None => (predicted, Vec::new()),
    };
    let mut notes = notes;
    if calibration.is_some() && s.engine.version.is_none() && s.engine.kind == ServingEngine::Vllm {
        notes.push("the log does not print vLLM's version: planned as the newest (--engine-version sets it)".into());
    }
    let context = m.max_positions.unwrap_or(s.max_model_len);
    let name = q.model.clone().or_else(|| Some(m.model_type.clone()));
    let start = startup(&s, &terms, &layout, name, context);
    let mut serving = crate::analysis::serving::serving_summary(std::slice::from_ref(&start), &[])
        .ok_or_else(|| PlanError::Settings("no startup to summarise".into()))?;
    serving.notes = assumptions(&s, &m, &layout, &notes);
    // A log's verdict tells what happened; the plan's, what would.
    let happened = format!("{} did not start", s.engine.kind.label());
    if let Some(rest) = serving.verdict.strip_prefix(&happened) {
        serving.verdict = format!("{} would not start{rest}", s.engine.kind.label());
    }
    // The analysis divides a log's bytes by its tokens; the plan knows a token's bytes exactly.
    serving.kv_bytes_per_token = Some(layout.bytes_per_token());
    let c = capacity(&s, &layout, kv_cache_bytes(&s, &terms), context);
    let fits = c.tokens > 0 && c.longest >= s.max_model_len;
    Ok(ServingPlan {
        fits_max_model_len: fits,
        largest_max_model_len: c.longest as i64,
        largest_concurrency: if c.tokens > 0 {
            ((c.concurrency.floor() as i64).min(start.max_num_seqs.unwrap_or(i64::MAX))).max(0)
        } else {
            0
        },
        max_num_batched_tokens: (s.engine.kind == ServingEngine::Vllm).then(|| s.batch().tokens as i64),
        calibrated_from: calibration.map(|c| c.name.clone()),
        serving,
    })
}
