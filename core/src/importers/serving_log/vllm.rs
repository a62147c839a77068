//! vLLM's memory lines, v0 and v1 engines, in the wording of each version:
//!
//! - settings: `Initializing an LLM engine (v0.6.4.post1) with config: model='…', dtype=…,
//!   max_seq_len=…, tensor_parallel_size=…, kv_cache_dtype=…` (v1: `Initializing a V1 LLM
//!   engine`), `non-default args: {'max_model_len': …, 'gpu_memory_utilization': …}`, `args:
//!   Namespace(…)`, `vLLM API server version X` and the banner's `version X` / `model M`;
//! - weights: v0 `Loading model weights took 14.9888 GB` and 0.7–0.10's `Model loading took
//!   8.6253 GB and 7.67 seconds` (GiB printed as GB: `model_memory_usage / float(2**30)`), v1
//!   `Model loading took 14.9889 GiB and 3.65 seconds` / `… GiB memory and …`;
//! - the profile: 0.6.4's `Memory profiling results: total_gpu_memory=79.19GiB
//!   initial_memory_usage=… peak_torch_memory=… memory_usage_post_profile=… non_torch_memory=…
//!   kv_cache_size=… gpu_memory_utilization=0.90` (peak_torch_memory counts the weights);
//!   0.6.5's one figure a line (`total_gpu_memory<TAB>79.22GiB`, `model weights take<TAB>…`,
//!   `PyTorch activation peak memory<TAB>…`, `available_kv_cache_memory<TAB>…`); 0.6.6–0.10's
//!   `the current vLLM instance can use total_gpu_memory (79.22GiB) x gpu_memory_utilization
//!   (0.90) = 71.29GiB` and `model weights take 14.96GiB; non_torch_memory takes 1.79GiB; PyTorch
//!   activation peak memory takes 1.26GiB; the rest of the memory reserved for KV Cache is
//!   53.29GiB.`; v1's `Available KV cache memory: 52.36 GiB`; 0.10+'s `Free memory on device
//!   (176.17/178.35 GiB) on startup. Desired GPU memory utilization is (0.9, 160.52 GiB). Actual
//!   usage is 60.79 GiB for weight, 13.33 GiB for peak activation, 10.96 GiB for non-torch memory,
//!   and 0.55 GiB for CUDAGraph memory. … Current kv cache memory in use is 75.44 GiB.` (later
//!   `… GiB for consumed memory (weights + non-torch), …`);
//! - the KV cache: `# GPU blocks: 2310, # CPU blocks: 2048` (0.7–0.10: `# CUDA blocks`, `# cuda
//!   blocks`), v1 `GPU KV cache size: 428,000 tokens`, `Maximum concurrency for 4,096 tokens per
//!   request: 104.49x`;
//! - CUDA graphs: `Graph capturing finished in 9 secs, took 0.54 GiB`, 0.21+'s `Estimated CUDA
//!   graph memory: 0.52 GiB total` and its `The current --gpu-memory-utilization=0.9764 is
//!   equivalent to …`;
//! - errors: `The model's max seq len (L) is larger than the maximum number of tokens that can
//!   be stored in KV cache (T)`, v1's `To serve at least one request with the models's max seq
//!   len (L), (N GiB KV cache is needed, which is larger than the available KV cache memory (A
//!   GiB). Based on the available memory, the estimated maximum model length is E.`, `No
//!   available memory for the cache blocks`, `Free memory on device (F/T GiB) on startup is less
//!   than desired GPU memory utilization (U, R GiB)`.

use std::sync::LazyLock;

use memlens_api::ServingEngine;
use regex::Captures;

use super::values::{count, fraction, gib, pairs, re, setting};
use super::{read_with, Clause, Fold};
use crate::evidence::ServingErrorKind;

const V: ServingEngine = ServingEngine::Vllm;

/// The settings a config line, an argument dict or a Namespace names.
fn settings(text: &str, fold: &mut Fold) {
    for (key, value) in pairs(text) {
        let text = setting(&value);
        let int = text.as_deref().and_then(|t| t.parse::<i64>().ok());
        match key.as_str() {
            "model" => fold.fill(V, |s| &mut s.model, text),
            "dtype" => fold.replace(V, |s| &mut s.dtype, text.filter(|t| t != "auto")),
            "kv_cache_dtype" => fold.fill(V, |s| &mut s.kv_cache_dtype, text),
            "max_seq_len" | "max_model_len" => fold.fill(V, |s| &mut s.max_model_len, int),
            "tensor_parallel_size" => fold.fill(V, |s| &mut s.tensor_parallel_size, int),
            "pipeline_parallel_size" => fold.fill(V, |s| &mut s.pipeline_parallel_size, int),
            "max_num_seqs" => fold.fill(V, |s| &mut s.max_num_seqs, int),
            "gpu_memory_utilization" => {
                fold.fill(V, |s| &mut s.gpu_memory_utilization, text.as_deref().and_then(fraction))
            }
            "enforce_eager" => fold.fill(V, |s| &mut s.enforce_eager, text.map(|t| t == "True" || t == "true")),
            _ => {}
        }
    }
}

fn error(c: &Captures, fold: &mut Fold, kind: ServingErrorKind) {
    fold.error(V, kind, c.get(0).map_or("", |m| m.as_str()));
}

fn opt_count(c: &Captures, i: usize) -> Option<i64> {
    c.get(i).and_then(|m| count(m.as_str()))
}

macro_rules! clauses {
    ($($pattern:expr => $apply:expr),* $(,)?) => {
        vec![$(Clause { pattern: re($pattern), apply: $apply }),*]
    };
}

/// Settings, weights and the profile's lines.
fn setting_and_profile_clauses() -> Vec<Clause> {
    clauses![
        r"Initializing an? (?:V1 )?LLM engine(?: \(v([^)\s]+)\))? with config: (.*)" => |c, f| {
            f.begin(V);
            f.fill(V, |s| &mut s.version, c.get(1).map(|m| m.as_str().to_owned()));
            settings(&c[2], f);
        },
        r"non-default args: (\{.*\})" => |c, f| { f.begin(V); settings(&c[1], f) },
        r"\bargs: Namespace\((.*)\)" => |c, f| { f.begin(V); settings(&c[1], f) },
        r"vLLM API server version (\S+)" => |c, f| { f.begin(V); f.fill(V, |s| &mut s.version, Some(c[1].to_owned())) },
        r"█.*\bversion (\d+\.\d+\S*)" => |c, f| { f.begin(V); f.fill(V, |s| &mut s.version, Some(c[1].to_owned())) },
        r"Loading (?:model )?weights took (NUM) ?(?:GiB|GB)\b" => |c, f| f.weights_loaded(V, gib(&c[1])),
        r"Model loading took (NUM) ?(?:GiB|GB)\b" => |c, f| f.weights_loaded(V, gib(&c[1])),
        // 0.6.4: one line of key=value figures.
        r"\btotal_gpu_memory=(NUM)GiB" => |c, f| f.fact(V, |s| &mut s.total_gpu_memory, gib(&c[1])),
        r"\bpeak_torch_memory=(NUM)GiB" => |c, f| f.fill(V, |s| &mut s.peak_torch, gib(&c[1])),
        r"\bnon_torch_memory=(NUM)GiB" => |c, f| f.fill(V, |s| &mut s.non_torch, gib(&c[1])),
        r"\bkv_cache_size=(NUM)GiB" => |c, f| {
            f.fill(V, |s| &mut s.kv_cache_bytes, gib(&c[1]));
            f.stage(V, |s| &mut s.kv_cache_sized);
        },
        r"\bgpu_memory_utilization=(NUM)\b" => |c, f| f.fill(V, |s| &mut s.gpu_memory_utilization, fraction(&c[1])),
        // 0.6.5: one figure a line, after the logger's `] `.
        r"(?:^|\] )\s*total_gpu_memory\s+(NUM)\s*GiB\s*$" => |c, f| f.fact(V, |s| &mut s.total_gpu_memory, gib(&c[1])),
        r"(?:^|\] )\s*gpu_memory_utilization\s+(NUM)\s*$" => |c, f| f.fill(V, |s| &mut s.gpu_memory_utilization, fraction(&c[1])),
        r"(?:^|\] )\s*model weights take\s+(NUM)\s*GiB\s*$" => |c, f| f.fill(V, |s| &mut s.weights, gib(&c[1])),
        r"(?:^|\] )\s*non_torch_memory\s+(NUM)\s*GiB\s*$" => |c, f| f.fill(V, |s| &mut s.non_torch, gib(&c[1])),
        r"(?:^|\] )\s*PyTorch activation peak memory\s+(NUM)\s*GiB\s*$" => |c, f| f.fill(V, |s| &mut s.activation_peak, gib(&c[1])),
        r"(?:^|\] )\s*available_kv_cache_memory\s+(NUM)\s*GiB\s*$" => |c, f| {
            f.fill(V, |s| &mut s.kv_cache_bytes, gib(&c[1]));
            f.stage(V, |s| &mut s.kv_cache_sized);
        },
        // 0.6.6–0.10: sentences.
        r"total_gpu_memory \((NUM) ?GiB\) x gpu_memory_utilization \((NUM)\)" => |c, f| {
            f.fact(V, |s| &mut s.total_gpu_memory, gib(&c[1]));
            f.fill(V, |s| &mut s.gpu_memory_utilization, fraction(&c[2]));
        },
        r"model weights take (NUM) ?GiB[;.]" => |c, f| f.fill(V, |s| &mut s.weights, gib(&c[1])),
        r"non_torch_memory takes (NUM) ?GiB" => |c, f| f.fill(V, |s| &mut s.non_torch, gib(&c[1])),
        r"PyTorch activation peak memory takes (NUM) ?GiB" => |c, f| f.fill(V, |s| &mut s.activation_peak, gib(&c[1])),
        r"the rest of the memory reserved for KV Cache is (NUM) ?GiB" => |c, f| {
            f.fill(V, |s| &mut s.kv_cache_bytes, gib(&c[1]));
            f.stage(V, |s| &mut s.kv_cache_sized);
        },
    ]
}

/// The KV cache, CUDA graphs, the newest profile sentence and the errors.
fn cache_clauses() -> Vec<Clause> {
    clauses![
        r"Available KV cache memory: (NUM) ?GiB" => |c, f| {
            f.fact(V, |s| &mut s.kv_cache_bytes, gib(&c[1]));
            f.stage(V, |s| &mut s.kv_cache_sized);
        },
        r"# (?:GPU|CUDA|cuda|gpu|NPU|npu|XPU|xpu|HPU|hpu|ROCm|rocm) blocks: (\d+)" => |c, f| {
            f.fact(V, |s| &mut s.gpu_blocks, count(&c[1]));
            f.stage(V, |s| &mut s.kv_cache_sized);
        },
        r"GPU KV cache size: (COUNT) tokens" => |c, f| {
            f.fact(V, |s| &mut s.kv_cache_tokens, count(&c[1]));
            f.stage(V, |s| &mut s.kv_cache_sized);
        },
        r"Maximum concurrency for (COUNT) tokens per request: (NUM)x" => |c, f| {
            f.fill(V, |s| &mut s.concurrency_tokens, count(&c[1]));
            f.fill(V, |s| &mut s.max_concurrency, fraction(&c[2]));
        },
        r"Capturing cudagraphs for decoding|Capturing CUDA graphs" => |_, f| f.stage(V, |s| &mut s.graph_capture_began),
        r"Graph capturing finished in \d+ secs?, took (NUM) ?GiB" => |c, f| {
            f.replace(V, |s| &mut s.cuda_graph, gib(&c[1]));
            f.at(V).cuda_graph_estimated = false;
        },
        r"Estimated CUDA graph memory: (NUM) ?GiB" => |c, f| {
            if f.at(V).cuda_graph.is_none() {
                f.fill(V, |s| &mut s.cuda_graph, gib(&c[1]));
                f.at(V).cuda_graph_estimated = true;
            }
        },
        r"The current --gpu-memory-utilization=(NUM) is equivalent" => |c, f| f.fill(V, |s| &mut s.gpu_memory_utilization, fraction(&c[1])),
        r"Free memory on device \((NUM)/(NUM) ?GiB\) on startup\. Desired GPU memory utilization is \((NUM), (NUM) ?GiB\)" => |c, f| {
            f.fill(V, |s| &mut s.free_at_start, gib(&c[1]));
            f.fill(V, |s| &mut s.total_gpu_memory, gib(&c[2]));
            f.fill(V, |s| &mut s.gpu_memory_utilization, fraction(&c[3]));
        },
        r"Actual usage(?: is|:) (NUM) ?GiB for weights?\b" => |c, f| f.fill(V, |s| &mut s.weights, gib(&c[1])),
        r"Actual usage is (NUM) ?GiB for consumed memory \(weights \+ non-torch\)" => |c, f| f.fill(V, |s| &mut s.weights_and_non_torch, gib(&c[1])),
        r"(NUM) ?GiB for peak activation" => |c, f| f.fill(V, |s| &mut s.activation_peak, gib(&c[1])),
        r"(NUM) ?GiB for non-torch memory" => |c, f| f.fill(V, |s| &mut s.non_torch, gib(&c[1])),
        r"(NUM) ?GiB for (?:CUDAGraph|NPU graph) memory" => |c, f| {
            f.replace(V, |s| &mut s.cuda_graph, gib(&c[1]));
            f.at(V).cuda_graph_estimated = false;
        },
        r"Current kv cache memory in use is (NUM) ?GiB" => |c, f| f.fill(V, |s| &mut s.kv_cache_bytes, gib(&c[1])),
        r"The model's max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored in KV cache \((\d+)\).*" => |c, f| {
            let kind = ServingErrorKind::MaxSeqLenOverKvCache {
                max_model_len: count(&c[1]).unwrap_or(0),
                tokens: count(&c[2]),
                needed_bytes: None,
                available_bytes: None,
                estimated_max_len: None,
            };
            error(c, f, kind)
        },
        r"To serve at least one request with the models?'s max seq len \((\d+)\), \((NUM) ?GiB KV cache is needed, which is larger than the available KV cache memory \((NUM) ?GiB\)(?:\. Based on the available memory, the estimated maximum model length is (\d+))?.*" => |c, f| {
            let kind = ServingErrorKind::MaxSeqLenOverKvCache {
                max_model_len: count(&c[1]).unwrap_or(0),
                tokens: None,
                needed_bytes: gib(&c[2]),
                available_bytes: gib(&c[3]),
                estimated_max_len: opt_count(c, 4),
            };
            error(c, f, kind)
        },
        r"No available memory for the cache blocks.*" => |c, f| error(c, f, ServingErrorKind::NoKvCacheMemory { profiled_tokens: None }),
        r"Free memory on device \((NUM)/(NUM) ?GiB\) on startup is less than desired GPU memory utilization \((NUM), (NUM) ?GiB\).*" => |c, f| {
            let kind = ServingErrorKind::FreeBelowUtilization {
                free: gib(&c[1]),
                total: gib(&c[2]),
                utilization: fraction(&c[3]),
            };
            f.fill(V, |s| &mut s.total_gpu_memory, gib(&c[2]));
            f.fill(V, |s| &mut s.gpu_memory_utilization, fraction(&c[3]));
            error(c, f, kind)
        },
    ]
}

static CLAUSES: LazyLock<Vec<Clause>> = LazyLock::new(|| {
    let mut v = setting_and_profile_clauses();
    v.extend(cache_clauses());
    v
});

/// What one line of a vLLM log says.
pub fn read_line(line: &str, fold: &mut Fold) {
    read_with(&CLAUSES, line, fold);
}
