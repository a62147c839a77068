//! A serving plan's settings resolved: each from the request, else from the calibrating log
//! (what it printed, or what its figures imply), else the engine's default.

use memlens_api::{KvCacheDtype, PlanParams, ServingEngine, ServingSummary, WeightsDtype};

use super::engine::{DummyBatch, Engine, Version};
use crate::plan::config::ModelShape;
use crate::plan::PlanError;

/// A serving plan's settings, resolved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServeSettings {
    pub engine: Engine,
    /// The GPU's memory, bytes.
    pub total: i64,
    /// vLLM's `gpu_memory_utilization` or SGLang's `mem_fraction_static`.
    pub utilization: f64,
    pub max_model_len: u64,
    pub max_num_seqs: Option<u64>,
    pub tp: u64,
    pub kv_dtype: KvCacheDtype,
    pub weights: WeightsDtype,
}

impl ServeSettings {
    /// The profile run's dummy batch at these settings.
    pub fn batch(&self) -> DummyBatch {
        self.engine
            .dummy_batch(self.max_model_len, self.max_num_seqs, self.total)
    }
}

/// A KV cache dtype as an engine prints it (`fp8_e4m3` is fp8; `auto` and 16-bit names are not).
fn kv_dtype_named(name: &str) -> KvCacheDtype {
    if name.contains("fp8") {
        KvCacheDtype::Fp8
    } else {
        KvCacheDtype::Auto
    }
}

/// The settings of `q`, each from the request, else the log's, else the engine's default.
pub fn resolve(q: &PlanParams, m: &ModelShape, log: Option<&ServingSummary>) -> Result<ServeSettings, PlanError> {
    let kind = q.engine.or(log.map(|l| l.engine)).unwrap_or(ServingEngine::Vllm);
    let version =
        match q.engine_version.as_deref().filter(|v| !v.trim().is_empty()) {
            Some(v) => Some(Version::parse(v).ok_or_else(|| {
                PlanError::Settings(format!("engine_version {v:?}: expected a version such as 0.6.4"))
            })?),
            None => log.and_then(|l| l.version.as_deref()).and_then(Version::parse),
        };
    let engine = Engine { kind, version };
    let tp =
        q.tp.or(log.and_then(|l| l.tensor_parallel_size).map(|t| t.max(1) as u64))
            .unwrap_or(1);
    if tp == 0 {
        return Err(PlanError::Settings("tp is at least 1".into()));
    }
    let total = q
        .gpu_memory_bytes
        .or(log.and_then(|l| l.total_gpu_memory_bytes))
        .ok_or_else(|| {
            PlanError::Settings("a serving plan needs the GPU's memory (--gpu-memory SIZE; gpu_memory_bytes)".into())
        })?;
    let logged_share = log.and_then(|l| match kind {
        ServingEngine::Vllm => l.gpu_memory_utilization,
        ServingEngine::Sglang => l.mem_fraction_static.or_else(|| implied_fraction(l)),
    });
    let utilization = q
        .gpu_memory_utilization
        .or(logged_share)
        .unwrap_or_else(|| engine.default_utilization(tp));
    if !(utilization > 0.0 && utilization <= 1.0) {
        return Err(PlanError::Settings(format!(
            "gpu_memory_utilization {utilization}: a share of the GPU, above 0 and at most 1"
        )));
    }
    let max_model_len = q
        .max_model_len
        .or(log.and_then(|l| l.max_model_len).map(|l| l.max(1) as u64))
        .or(m.max_positions)
        .unwrap_or(2048)
        .max(1);
    Ok(ServeSettings {
        engine,
        total,
        utilization,
        max_model_len,
        max_num_seqs: q
            .max_num_seqs
            .or(log.and_then(|l| l.max_num_seqs).map(|n| n.max(1) as u64)),
        tp,
        kv_dtype: q
            .kv_cache_dtype
            .or(log.and_then(|l| l.kv_cache_dtype.as_deref()).map(kv_dtype_named))
            .unwrap_or_default(),
        weights: q.weights.unwrap_or(WeightsDtype::Bf16),
    })
}

/// SGLang's `mem_fraction_static` as a log implies it where it does not print it: its weights
/// and KV pool over the memory free before the weights (the pool is that share of the free
/// memory less the weights).
pub fn implied_fraction(log: &ServingSummary) -> Option<f64> {
    if log.engine != ServingEngine::Sglang || log.mem_fraction_static.is_some() {
        return None;
    }
    let (kv, w, free) = (log.kv_cache_bytes?, log.weights_bytes?, log.free_at_start_bytes?);
    (free > 0).then(|| (kv + w) as f64 / free as f64)
}
