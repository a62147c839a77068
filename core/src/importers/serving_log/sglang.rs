//! SGLang's memory lines (`model_executor/model_runner.py`, `mem_cache/memory_pool.py`,
//! `managers/scheduler.py`), each prefixed `[time TPn]` (`DPn TPn EPn` with data parallelism):
//!
//! - `server_args=ServerArgs(model_path='…', dtype='auto', kv_cache_dtype='auto',
//!   mem_fraction_static=0.85, tp_size=4, context_length=None, …)`;
//! - `Load weight begin. avail mem=21.63 GB` and `Load weight end. [elapsed=… s, ]type=
//!   Qwen2ForCausalLM, dtype=torch.bfloat16, avail mem=6.09 GB, mem usage=15.54 GB.`;
//! - `KV Cache is allocated. [dtype: torch.bfloat16, ]#tokens: 46611, K size: 1.42 GB, V size:
//!   1.42 GB` (MLA models: `#tokens: N, KV size: 19.36 GB`);
//! - `Capture cuda graph begin. …` and `Capture cuda graph end. Time elapsed: 7.23 s. mem
//!   usage=0.93 GB. avail mem=0.53 GB.` (either order of the last two);
//! - `max_total_num_tokens=46611, chunked_prefill_size=…, max_prefill_tokens=…,
//!   max_running_requests=2049, context_len=131072[, available_gpu_mem=…]`;
//! - errors: `Not enough memory. Please try to increase --mem-fraction-static.`, and
//!   `max_total_tokens=131072 is larger than the profiled value -561981` (nothing left for the
//!   pool).
//!
//! `GB` is 2^30 bytes here (SGLang's `GB = 1024 * 1024 * 1024`, `get_available_gpu_memory`'s
//! `/ (1 << 30)`).

use std::sync::LazyLock;

use memlens_api::ServingEngine;

use super::values::{count, fraction, gib, pairs, re, setting};
use super::{read_with, Clause, Fold};
use crate::evidence::ServingErrorKind;

const S: ServingEngine = ServingEngine::Sglang;

/// The settings `server_args=ServerArgs(…)` names.
fn settings(text: &str, fold: &mut Fold) {
    for (key, value) in pairs(text) {
        let text = setting(&value);
        let int = text.as_deref().and_then(|t| t.parse::<i64>().ok());
        match key.as_str() {
            "model_path" => fold.fill(S, |s| &mut s.model, text),
            "dtype" => fold.fill(S, |s| &mut s.dtype, text.filter(|t| t != "auto")),
            "kv_cache_dtype" => fold.fill(S, |s| &mut s.kv_cache_dtype, text),
            "mem_fraction_static" => fold.fill(S, |s| &mut s.mem_fraction_static, text.as_deref().and_then(fraction)),
            "tp_size" => fold.fill(S, |s| &mut s.tensor_parallel_size, int),
            "pp_size" => fold.fill(S, |s| &mut s.pipeline_parallel_size, int),
            "context_length" => fold.fill(S, |s| &mut s.max_model_len, int),
            "max_running_requests" => fold.fill(S, |s| &mut s.max_num_seqs, int),
            "disable_cuda_graph" => fold.fill(S, |s| &mut s.enforce_eager, text.map(|t| t == "True")),
            _ => {}
        }
    }
}

macro_rules! clauses {
    ($($pattern:expr => $apply:expr),* $(,)?) => {
        vec![$(Clause { pattern: re($pattern), apply: $apply }),*]
    };
}

static CLAUSES: LazyLock<Vec<Clause>> = LazyLock::new(|| {
    clauses![
        r"server_args=ServerArgs\((.*)\)" => |c, f| { f.begin(S); settings(&c[1], f) },
        r"Load weight begin\. avail mem=(NUM) ?GB" => |c, f| {
            f.begin(S);
            f.fill(S, |s| &mut s.free_at_start, gib(&c[1]));
        },
        r"Load weight end\..*?\btype=(\w+)" => |c, f| f.fill(S, |s| &mut s.model, Some(c[1].to_owned())),
        r"Load weight end\..*?\bdtype=([\w.]+)" => |c, f| f.replace(S, |s| &mut s.dtype, Some(c[1].to_owned())),
        r"Load weight end\..*?\bmem usage=(NUM) ?GB" => |c, f| f.weights_loaded(S, gib(&c[1])),
        r"KV Cache is allocated\..*?\bdtype: ([\w.]+)" => |c, f| f.fill(S, |s| &mut s.kv_cache_dtype, Some(c[1].to_owned())),
        r"KV Cache is allocated\..*?#tokens: (\d+), K size: (NUM) ?GB, V size: (NUM) ?GB" => |c, f| {
            let kv = gib(&c[2]).zip(gib(&c[3])).map(|(k, v)| k + v);
            f.fact(S, |s| &mut s.kv_cache_bytes, kv);
            f.fill(S, |s| &mut s.kv_cache_tokens, count(&c[1]));
            f.stage(S, |s| &mut s.kv_cache_sized);
        },
        r"KV Cache is allocated\..*?#tokens: (\d+), KV size: (NUM) ?GB" => |c, f| {
            f.fact(S, |s| &mut s.kv_cache_bytes, gib(&c[2]));
            f.fill(S, |s| &mut s.kv_cache_tokens, count(&c[1]));
            f.stage(S, |s| &mut s.kv_cache_sized);
        },
        r"Capture (?:\w+ )*cuda graph begin" => |_, f| f.stage(S, |s| &mut s.graph_capture_began),
        r"(?i)Capture (?:\w+ )*cuda graph end\..*?\bmem usage=(NUM) ?GB" => |c, f| f.replace(S, |s| &mut s.cuda_graph, gib(&c[1])),
        r"max_total_num_tokens=(\d+)" => |c, f| {
            f.fill(S, |s| &mut s.kv_cache_tokens, count(&c[1]));
            f.stage(S, |s| &mut s.kv_cache_sized);
        },
        r"max_total_num_tokens=.*?\bmax_running_requests=(\d+)" => |c, f| f.fill(S, |s| &mut s.max_num_seqs, count(&c[1])),
        r"max_total_num_tokens=.*?\bcontext_len=(\d+)" => |c, f| f.fill(S, |s| &mut s.max_model_len, count(&c[1])),
        r"max_total_tokens=\d+ is larger than the profiled value (-?\d+).*" => |c, f| {
            let profiled: Option<i64> = c[1].parse().ok();
            match profiled {
                Some(p) if p <= 0 => f.error(S, ServingErrorKind::NoKvCacheMemory { profiled_tokens: Some(p) }, &c[0]),
                _ => f.fill(S, |s| &mut s.kv_cache_tokens, profiled),
            }
        },
        r"Not enough memory\. Please try to increase --mem-fraction-static.*" => |c, f| {
            f.error(S, ServingErrorKind::NoKvCacheMemory { profiled_tokens: None }, &c[0])
        },
    ]
});

/// What one line of an SGLang log says.
pub fn read_line(line: &str, fold: &mut Fold) {
    read_with(&CLAUSES, line, fold);
}
