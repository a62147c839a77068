//! The serving verdict on hand-made startups: each cause from the stage an out-of-memory error
//! falls in, and each remedy's number from the log's own figures (checked against the engine's
//! arithmetic where it is simple enough to redo by hand).

use memlens_api::{ServingAction, ServingCause};

use super::serving::{serving_summary, thousands};
use crate::importers::common::text_lines::numbered_lines;
use crate::importers::oom_message::find_oom_messages;
use crate::importers::serving_log::find_serving_startups;

fn summary(text: &str) -> memlens_api::ServingSummary {
    let lines = numbered_lines(text);
    serving_summary(&find_serving_startups(&lines), &find_oom_messages(&lines)).expect("a startup")
}

const PROFILE: &str = "INFO 01-16 09:40:00 worker.py:238] the current vLLM instance can use total_gpu_memory (79.22GiB) x gpu_memory_utilization (0.90) = 71.29GiB\n\
INFO 01-16 09:40:00 worker.py:238] model weights take 14.99GiB; non_torch_memory takes 0.30GiB; PyTorch activation peak memory takes 1.20GiB; the rest of the memory reserved for KV Cache is 54.81GiB.\n\
INFO 01-16 09:40:00 executor_base.py:95] # CUDA blocks: 28062, # CPU blocks: 2048\n\
INFO 01-16 09:40:00 executor_base.py:100] Maximum concurrency for 8192 tokens per request: 54.81x\n";

const OOM: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.50 GiB is free. Including non-PyTorch memory, this process has 77.68 GiB memory in use. Of the allocated memory 76.00 GiB is allocated by PyTorch, and 1.00 GiB is reserved by PyTorch but unallocated.\n";

#[test]
fn a_startup_that_worked_leads_with_its_budget() {
    let s = summary(PROFILE);
    assert!(s.failure.is_none());
    // 28,062 blocks × 16 = 448,992 tokens: 54.81 × 8,192 is 449,003.5, within the printed digits.
    assert_eq!(s.block_size, Some(16));
    assert_eq!(s.kv_cache_tokens, Some(448_992));
    assert!(s.verdict.starts_with("KV cache: 54.81 GiB holds 448,992 tokens (54.81× requests of 8,192 tokens) on a 79.22 GiB GPU at gpu_memory_utilization 0.90; weights 14.99 GiB, activation peak 1.20 GiB, non-torch 307.2 MiB"), "{}", s.verdict);
}

#[test]
fn an_oom_is_placed_by_the_stage_it_falls_in() {
    let capture = summary(&format!(
        "{PROFILE}INFO 01-16 09:40:03 model_runner.py:1400] Capturing cudagraphs for decoding.\n{OOM}"
    ));
    let f = capture.failure.expect("failure");
    assert_eq!(f.cause, ServingCause::OomInCudaGraphCapture);
    assert_eq!(f.remedies[0].action, ServingAction::EnforceEager);
    let lower = f
        .remedies
        .iter()
        .find(|r| r.action == ServingAction::LowerGpuMemoryUtilization)
        .expect("lower");
    // 0.90 less the 2 GiB that was missing over 79.22 GiB (0.0252), rounded down.
    assert_eq!(lower.value, Some(0.87));
    let loading = summary(&format!("INFO 01-16 09:39:00 llm_engine.py:249] Initializing an LLM engine (v0.6.4) with config: model='m', tensor_parallel_size=1\n{OOM}"));
    assert_eq!(loading.failure.map(|f| f.cause), Some(ServingCause::OomLoadingWeights));
    let profile = summary(&format!(
        "INFO 01-16 09:39:30 model_runner.py:1077] Loading model weights took 14.9888 GB\n{OOM}"
    ));
    assert_eq!(profile.failure.map(|f| f.cause), Some(ServingCause::OomInProfileRun));
}

#[test]
fn no_kv_cache_memory_is_sized_from_the_negative_budget() {
    let s = summary("INFO 05-30 06:40:55 worker.py:267] the current vLLM instance can use total_gpu_memory (14.56GiB) x gpu_memory_utilization (0.50) = 7.28GiB\n\
INFO 05-30 06:40:55 worker.py:267] model weights take 6.59GiB; non_torch_memory takes 0.29GiB; PyTorch activation peak memory takes 1.93GiB; the rest of the memory reserved for KV Cache is -1.53GiB.\n\
ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.\n");
    let f = s.failure.expect("failure");
    assert_eq!(f.cause, ServingCause::NoKvCacheMemory);
    assert_eq!(f.line, 3);
    let raise = &f.remedies[0];
    assert_eq!(raise.action, ServingAction::RaiseGpuMemoryUtilization);
    // 0.50 + 1.53 / 14.56 = 0.6051: the least that brings the KV cache above zero, rounded up.
    assert_eq!(raise.value, Some(0.61));
    let quantize = f
        .remedies
        .iter()
        .find(|r| r.action == ServingAction::QuantizeWeights)
        .expect("quantize");
    assert!(quantize.note.contains("3.29 GiB of the 6.59 GiB"), "{}", quantize.note);
    assert!(
        s.verdict
            .starts_with("vLLM did not start: nothing was left for the KV cache (-1.53 GiB)."),
        "{}",
        s.verdict
    );
}

#[test]
fn free_memory_below_the_utilization_asks_for_the_most_that_fits() {
    let s = summary("ValueError: Free memory on device (30.12/79.19 GiB) on startup is less than desired GPU memory utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.\n");
    let f = s.failure.expect("failure");
    assert_eq!(f.cause, ServingCause::FreeMemoryBelowUtilization);
    assert_eq!(f.remedies[0].action, ServingAction::LowerGpuMemoryUtilization);
    assert_eq!(f.remedies[0].value, Some(0.38));
}

#[test]
fn max_model_len_remedies_hold_one_request() {
    // vLLM 0.6.4 on a 3090 (vllm-project/vllm#10517): 2.89 GiB for 23,648 tokens, 29,000 wanted.
    let s = summary(include_str!(
        "../../../traces/serving-logs/vllm-0.6.4-llama-3.1-8b-3090-max-seq-len.log"
    ));
    let f = s.failure.expect("failure");
    assert_eq!(f.cause, ServingCause::MaxModelLenOverKvCache);
    let value = |a: ServingAction| f.remedies.iter().find(|r| r.action == a).and_then(|r| r.value);
    assert_eq!(value(ServingAction::LowerMaxModelLen), Some(23_648.0));
    // vLLM's own arithmetic at 0.93: 23.58 × 0.93 − 17.98 − 0.35 = 3.60 GiB, 29,460 tokens at
    // 2.89 GiB / 23,648; at 0.92 it is 3.36 GiB, 27,500 tokens: 0.93 is the least that fits.
    assert_eq!(value(ServingAction::RaiseGpuMemoryUtilization), Some(0.93));
    assert_eq!(value(ServingAction::Fp8KvCache), Some(47_296.0));
    assert_eq!(s.kv_bytes_per_token, Some(131_221));
}

#[test]
fn thousands_are_separated() {
    assert_eq!(thousands(428_000), "428,000");
    assert_eq!(thousands(999), "999");
    assert_eq!(thousands(-1_234_567), "-1,234,567");
}
