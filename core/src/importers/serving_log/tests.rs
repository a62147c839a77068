//! Each wording read as printed: the real startup logs of `traces/serving-logs/` (their figures
//! to the token and to the printed digit), and the wordings no log there shows, in the shapes of
//! the engines' source.

use super::*;
use crate::importers::common::text_lines::numbered_lines as lines;
use values::gib;

macro_rules! fixture {
    ($name:literal) => {
        include_str!(concat!("../../../../traces/serving-logs/", $name))
    };
}

fn all(text: &str) -> Vec<ServingStartup> {
    find_serving_startups(&lines(text))
}

fn one(text: &str) -> ServingStartup {
    let s = all(text);
    assert_eq!(s.len(), 1, "{s:#?}");
    s.into_iter().next().expect("one")
}

#[test]
fn vllm_064_one_line_profile() {
    let s = one(fixture!("vllm-0.6.4-phi-1_5-gtx1080.log"));
    assert_eq!(s.engine, ServingEngine::Vllm);
    assert_eq!(s.version.as_deref(), Some("0.6.4.post1"));
    assert_eq!(s.model.as_deref(), Some("microsoft/phi-1_5"));
    assert_eq!(s.dtype.as_deref(), Some("torch.float16"));
    assert_eq!(s.kv_cache_dtype.as_deref(), Some("auto"));
    assert_eq!(s.max_model_len, Some(2048));
    assert_eq!(s.tensor_parallel_size, Some(1));
    // `Loading model weights took 2.6419 GB`: GiB printed as GB.
    assert_eq!(s.weights, gib("2.6419"));
    assert_eq!(s.total_gpu_memory, gib("7.92"));
    assert_eq!(s.peak_torch, gib("3.12"));
    assert_eq!(s.non_torch, gib("0.47"));
    assert_eq!(s.kv_cache_bytes, gib("3.54"));
    assert_eq!(s.gpu_memory_utilization, Some(0.90));
    assert_eq!(s.gpu_blocks, Some(1207));
    assert_eq!(s.max_concurrency, Some(9.43));
    assert_eq!(s.concurrency_tokens, Some(2048));
    assert_eq!(s.cuda_graph, gib("0.54"));
    assert!(!s.cuda_graph_estimated);
    assert_eq!(s.stages.weights_loaded, Some(5));
    assert_eq!(s.stages.kv_cache_sized, Some(6));
    assert_eq!(s.stages.graph_capture_began, Some(9));
}

#[test]
fn vllm_v0_max_seq_len_errors() {
    let s = one(fixture!("vllm-0.6.4-llama-3.1-8b-3090-max-seq-len.log"));
    assert_eq!(s.weights, gib("14.9888"));
    assert_eq!(s.gpu_blocks, Some(1478));
    let e = s.error.expect("error");
    assert_eq!(e.line, 5);
    assert!(matches!(
        e.kind,
        ServingErrorKind::MaxSeqLenOverKvCache {
            max_model_len: 29000,
            tokens: Some(23648),
            ..
        }
    ));
    let old = one(fixture!("vllm-0.2-alpaca2-max-seq-len.log"));
    assert_eq!(old.max_model_len, Some(4096));
    assert_eq!(old.gpu_blocks, Some(229));
    assert!(matches!(
        old.error.map(|e| e.kind),
        Some(ServingErrorKind::MaxSeqLenOverKvCache {
            max_model_len: 4096,
            tokens: Some(3664),
            ..
        })
    ));
}

#[test]
fn vllm_065_one_figure_a_line_and_the_command() {
    let s = one(fixture!("vllm-0.6.5-dev-llama-3-8b-h100.log"));
    assert_eq!(s.model.as_deref(), Some("meta-llama/Meta-Llama-3-8B"));
    assert_eq!(s.total_gpu_memory, gib("79.22"));
    assert_eq!(s.gpu_memory_utilization, Some(0.90));
    assert_eq!(s.weights, gib("14.96"));
    assert_eq!(s.non_torch, gib("1.79"));
    assert_eq!(s.activation_peak, gib("1.26"));
    assert_eq!(s.kv_cache_bytes, gib("53.29"));
}

#[test]
fn vllm_07_sentences() {
    let s = one(fixture!("vllm-0.7-llama-3.2-11b-vision-h100-eager.log"));
    assert_eq!(
        (s.total_gpu_memory, s.gpu_memory_utilization),
        (gib("79.22"), Some(0.90))
    );
    assert_eq!(s.weights, gib("19.86"));
    assert_eq!(s.non_torch, gib("0.16"));
    assert_eq!(s.activation_peak, gib("36.63"));
    assert_eq!(s.kv_cache_bytes, gib("14.65"));
    assert_eq!(s.gpu_blocks, Some(6001));
    assert_eq!(
        (s.max_model_len, s.max_num_seqs, s.enforce_eager),
        (Some(65536), Some(128), Some(true))
    );
}

#[test]
fn workers_without_the_driver_are_read_from_one_rank() {
    let s = one(fixture!("vllm-0.8-tp4-3090-workers.log"));
    assert_eq!(s.ranks, 3, "three workers printed figures");
    assert_eq!(
        s.line, 3,
        "pid 507's first figure: the first of the ranks with the most figure lines"
    );
    assert_eq!(s.total_gpu_memory, gib("23.58"));
    assert_eq!(s.gpu_memory_utilization, Some(0.99));
    assert_eq!(s.kv_cache_bytes, gib("1.57"));
    let tp = one(fixture!("vllm-v1-0.21-tp4-3090-workers.log"));
    assert_eq!(tp.kv_cache_bytes, gib("15.72"));
    assert_eq!(tp.gpu_memory_utilization, Some(0.92));
    assert_eq!(tp.cuda_graph, None, "TP1's estimate is not TP0's");
}

#[test]
fn vllm_v1_lines() {
    let s = one(fixture!("vllm-v1-0.8-llama-3.1-8b-l40s.log"));
    assert_eq!(
        s.weights,
        gib("14.9889"),
        "`Loading weights took 2.95 seconds` is no size"
    );
    assert_eq!(s.kv_cache_tokens, Some(158_656));
    assert_eq!((s.concurrency_tokens, s.max_concurrency), (Some(32_768), Some(4.84)));
    let g = one(fixture!("vllm-v1-0.21-qwen3-8b-a5000-lmcache.log"));
    assert_eq!(g.cuda_graph, gib("0.52"));
    assert!(g.cuda_graph_estimated);
    assert_eq!(g.kv_cache_bytes, gib("6.37"));
    assert_eq!(g.kv_cache_tokens, Some(46_368));
    assert_eq!(g.gpu_memory_utilization, Some(0.9764));
    let n = one(fixture!("vllm-v1-0.11-dev-b200-negative-cudagraph.log"));
    assert_eq!((n.free_at_start, n.total_gpu_memory), (gib("176.17"), gib("178.35")));
    assert_eq!(n.gpu_memory_utilization, Some(0.9));
    assert_eq!(n.weights, gib("60.79"));
    assert_eq!(n.activation_peak, gib("13.33"));
    assert_eq!(n.non_torch, gib("10.96"));
    assert_eq!(n.cuda_graph, gib("-9.96"));
    assert_eq!(n.kv_cache_bytes, gib("75.44"));
}

#[test]
fn vllm_v1_errors_and_the_command_beside_them() {
    let s = one(fixture!("vllm-v1-0.15-qwen3-coder-30b-pp2-max-seq-len.log"));
    assert_eq!(s.pipeline_parallel_size, Some(2));
    assert_eq!(s.gpu_memory_utilization, Some(0.9));
    assert_eq!(s.model.as_deref(), Some("./Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8"));
    let Some(ServingErrorKind::MaxSeqLenOverKvCache {
        max_model_len,
        needed_bytes,
        available_bytes,
        estimated_max_len,
        ..
    }) = s.error.map(|e| e.kind)
    else {
        panic!("no v1 error")
    };
    assert_eq!(max_model_len, 262_144);
    assert_eq!((needed_bytes, available_bytes), (gib("24.0"), gib("3.18")));
    assert_eq!(estimated_max_len, Some(34_736));
    let t = one(fixture!("vllm-v1-0.15-pp8-max-seq-len-traceback.log"));
    assert_eq!(t.error.map(|e| e.line), Some(4));
}

#[test]
fn two_engines_in_one_paste_are_two_startups_with_their_commands() {
    let v = one(fixture!("vllm-v1-qwen3-235b-fp8-tp4-h100.log"));
    assert_eq!((v.kv_cache_bytes, v.kv_cache_tokens), (gib("8.11"), Some(178_880)));
    assert_eq!(v.tensor_parallel_size, Some(4));
    let both = all(&format!(
        "{}\n{}",
        fixture!("vllm-v1-qwen3-235b-fp8-tp4-h100.log"),
        fixture!("sglang-qwen3-235b-fp8-tp4-h100.log")
    ));
    assert_eq!(both.len(), 2);
    assert_eq!(both[1].engine, ServingEngine::Sglang);
    assert_eq!(both[1].kv_cache_bytes, Some(gib("8.23").unwrap_or(0) * 2));
    assert_eq!(both[1].kv_cache_tokens, Some(367_404));
    assert_eq!(
        (both[1].tensor_parallel_size, both[1].mem_fraction_static),
        (Some(4), Some(0.93))
    );
}

#[test]
fn sglang_lines() {
    let s = one(fixture!("sglang-qwq-32b-tp4-l4.log"));
    assert_eq!(s.engine, ServingEngine::Sglang);
    assert_eq!(s.ranks, 3, "TP0, TP1 and TP3 kept figure lines in the excerpt");
    assert_eq!(s.model.as_deref(), Some("/home/model/Qwen/QwQ-32B"));
    assert_eq!(s.dtype.as_deref(), Some("torch.bfloat16"));
    assert_eq!(s.kv_cache_dtype.as_deref(), Some("auto"));
    assert_eq!((s.tensor_parallel_size, s.mem_fraction_static), (Some(4), Some(0.85)));
    assert_eq!(s.free_at_start, gib("21.63"));
    assert_eq!(s.weights, gib("15.54"));
    assert_eq!(s.kv_cache_bytes, Some(2 * gib("1.42").unwrap_or(0)));
    assert_eq!(s.kv_cache_tokens, Some(46_611));
    assert_eq!(s.cuda_graph, gib("0.93"));
    assert_eq!((s.max_model_len, s.max_num_seqs), (Some(131_072), Some(2049)));
    let g = one(fixture!("sglang-gemma-3-h200.log"));
    assert_eq!(g.model.as_deref(), Some("Gemma3ForConditionalGeneration"));
    assert_eq!(g.kv_cache_tokens, Some(834_615));
    let d = one(fixture!("sglang-0.4.8-rocm-deepseek-r1-dp8-negative.log"));
    assert_eq!(d.ranks, 3);
    assert!(matches!(
        d.error.map(|e| e.kind),
        Some(ServingErrorKind::NoKvCacheMemory {
            profiled_tokens: Some(-561_981)
        })
    ));
}

#[test]
fn wordings_no_log_here_shows() {
    let mla = one("[2026-03-11 13:53:21 TP0] Load weight end. elapsed=23.18 s, type=Glm4MoeLiteForCausalLM, avail mem=32.02 GB, mem usage=28.79 GB.\n[2026-03-11 13:53:23 TP0] KV Cache is allocated. #tokens: 383872, KV size: 19.36 GB\n");
    assert_eq!(
        (mla.weights, mla.kv_cache_bytes, mla.kv_cache_tokens),
        (gib("28.79"), gib("19.36"), Some(383_872))
    );
    let dtype = one("[2026-01-02 10:00:00 TP0] KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: 1000, K size: 0.50 GB, V size: 0.50 GB\n");
    assert_eq!(dtype.kv_cache_dtype.as_deref(), Some("torch.float8_e4m3fn"));
    let not_enough = one("[2025-03-29 18:18:34 TP0] Load weight end. type=Gemma3ForConditionalGeneration, dtype=torch.bfloat16, avail mem=1.02 GB, mem usage=17.60 GB.\nRuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n");
    assert!(matches!(
        not_enough.error.map(|e| e.kind),
        Some(ServingErrorKind::NoKvCacheMemory { profiled_tokens: None })
    ));
    let no_blocks = one("INFO 05-30 06:40:55 worker.py:267] model weights take 6.59GiB; non_torch_memory takes 8.29GiB; PyTorch activation peak memory takes 4.93GiB; the rest of the memory reserved for KV Cache is -7.83GiB.\nValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.\n");
    assert_eq!(no_blocks.kv_cache_bytes, gib("-7.83"));
    assert_eq!(no_blocks.error.map(|e| e.line), Some(2));
    let free = one("ValueError: Free memory on device (30.12/79.19 GiB) on startup is less than desired GPU memory utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.\n");
    assert!(
        matches!(free.error.map(|e| e.kind), Some(ServingErrorKind::FreeBelowUtilization { utilization: Some(u), .. }) if u == 0.9)
    );
    let consumed = one("(EngineCore pid=4) INFO 09-18 22:23:41 [gpu_worker.py:298] Free memory on device (94.41/94.97 GiB) on startup. Desired GPU memory utilization is (0.97, 92.12 GiB). Actual usage is 81.7 GiB for consumed memory (weights + non-torch), 1.78 GiB for peak activation, and 0.28 GiB for CUDAGraph memory. Current kv cache memory in use is 8.64 GiB.\n");
    assert_eq!(consumed.weights_and_non_torch, gib("81.7"));
    assert_eq!(consumed.weights, None);
    assert_eq!(
        (consumed.activation_peak, consumed.cuda_graph, consumed.kv_cache_bytes),
        (gib("1.78"), gib("0.28"), gib("8.64"))
    );
}

#[test]
fn restarts_are_separate_startups() {
    let run = "Loading model weights took 14.9888 GB\nMemory profiling results: total_gpu_memory=23.58GiB initial_memory_usage=15.34GiB peak_torch_memory=17.06GiB memory_usage_post_profile=15.35GiB non_torch_memory=0.35GiB kv_cache_size=3.81GiB gpu_memory_utilization=0.90\n# GPU blocks: 1952, # CPU blocks: 2048\n";
    let s = all(&format!("{run}{run}"));
    assert_eq!(s.len(), 2);
    assert_eq!((s[0].line, s[1].line), (1, 4));
}

#[test]
fn other_texts_hold_no_startup() {
    for text in [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.00 GiB is free.",
        "epoch 1 loss 0.3 lr 1e-4 kv_cache hit rate 0.9 memory 12 GB",
        "| 0 NVIDIA H100 80GB HBM3 On | 00000000:18:00.0 Off | 0 |",
    ] {
        assert!(all(text).is_empty(), "{text}");
        assert!(!IMPORTER.sniff(text.as_bytes()), "{text}");
    }
    assert!(IMPORTER.sniff(fixture!("sglang-gemma-3-h200.log").as_bytes()));
}
