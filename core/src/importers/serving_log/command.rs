//! The command a server was started with, as people paste it beside its log: `vllm serve MODEL
//! --tensor-parallel-size 4 --gpu-memory-utilization 0.9 …`, `python -m
//! vllm.entrypoints.openai.api_server --model M …`, `python3 -m sglang.launch_server
//! --model-path M --tp 4 --mem-fraction-static 0.93 …` (continued lines already joined). Its
//! settings fill what the log itself does not print.

use std::sync::LazyLock;

use memlens_api::ServingEngine;
use regex::Regex;

use super::values::{fraction, re};
use crate::evidence::ServingStartup;

static VLLM: LazyLock<Regex> = LazyLock::new(|| re(r"(?:^|[\s$>`])(?:vllm serve|-m vllm\.entrypoints\.\S+)(\s.*)"));
static SGLANG: LazyLock<Regex> = LazyLock::new(|| re(r"(?:^|[\s$>`])-m sglang\.launch_server(\s.*)"));
static SERVE_MODEL: LazyLock<Regex> = LazyLock::new(|| re(r"^\s+([^\s-][^\s`]*)"));

/// `--flag value`, `--flag=value` or `-f value`: the value of the first of `names` given.
fn flag(args: &str, names: &[&str]) -> Option<String> {
    names.iter().find_map(|name| {
        let pattern = format!(r"(?:^|\s){}(?:=|\s+)([^\s`]+)", regex::escape(name));
        Regex::new(&pattern)
            .ok()?
            .captures(args)
            .map(|c| c[1].trim_matches(|c| c == '\'' || c == '"').to_owned())
    })
}

fn has_flag(args: &str, names: &[&str]) -> bool {
    names.iter().any(|n| {
        args.split_whitespace()
            .any(|a| a == *n || a.starts_with(&format!("{n}=")))
    })
}

fn int(v: Option<String>) -> Option<i64> {
    v?.parse().ok()
}

/// The settings of a vLLM or SGLang command line, or `None` for any other line.
pub fn read_command(line: &str, number: usize) -> Option<ServingStartup> {
    if let Some(c) = VLLM.captures(line) {
        let args = c[1].to_owned();
        let mut s = ServingStartup::new(ServingEngine::Vllm, number);
        s.model = flag(&args, &["--model"]).or_else(|| {
            line.contains("vllm serve")
                .then(|| SERVE_MODEL.captures(&args).map(|m| m[1].to_owned()))
                .flatten()
        });
        s.tensor_parallel_size = int(flag(
            &args,
            &["--tensor-parallel-size", "-tp", "--tensor_parallel_size"],
        ));
        s.pipeline_parallel_size = int(flag(&args, &["--pipeline-parallel-size", "-pp"]));
        s.gpu_memory_utilization = flag(&args, &["--gpu-memory-utilization", "--gpu_memory_utilization"])
            .as_deref()
            .and_then(fraction);
        s.max_model_len = int(flag(&args, &["--max-model-len", "--max_model_len"]));
        s.max_num_seqs = int(flag(&args, &["--max-num-seqs", "--max_num_seqs"]));
        s.kv_cache_dtype = flag(&args, &["--kv-cache-dtype", "--kv_cache_dtype"]);
        s.dtype = flag(&args, &["--dtype"]).filter(|d| d != "auto");
        s.enforce_eager = has_flag(&args, &["--enforce-eager", "--enforce_eager"]).then_some(true);
        return Some(s);
    }
    let c = SGLANG.captures(line)?;
    let args = c[1].to_owned();
    let mut s = ServingStartup::new(ServingEngine::Sglang, number);
    s.model = flag(&args, &["--model-path", "--model"]);
    s.tensor_parallel_size = int(flag(&args, &["--tp-size", "--tp", "--tensor-parallel-size"]));
    s.pipeline_parallel_size = int(flag(&args, &["--pp-size", "--pp"]));
    s.mem_fraction_static = flag(&args, &["--mem-fraction-static"]).as_deref().and_then(fraction);
    s.max_model_len = int(flag(&args, &["--context-length"]));
    s.max_num_seqs = int(flag(&args, &["--max-running-requests"]));
    s.kv_cache_dtype = flag(&args, &["--kv-cache-dtype"]);
    s.dtype = flag(&args, &["--dtype"]).filter(|d| d != "auto");
    s.enforce_eager = has_flag(&args, &["--disable-cuda-graph"]).then_some(true);
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_as_people_paste_them() {
        let v = read_command(
            "CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve /path/to/Qwen3-235B-A22B-FP8 --tensor-parallel-size 4 --kv-transfer-config '{\"a\":1}'",
            3,
        )
        .expect("vllm");
        assert_eq!(v.engine, ServingEngine::Vllm);
        assert_eq!(v.model.as_deref(), Some("/path/to/Qwen3-235B-A22B-FP8"));
        assert_eq!(v.tensor_parallel_size, Some(4));
        let s = read_command(
            " python3 -m sglang.launch_server --model /path/to/Qwen3-235B-A22B-FP8 --tp 4 --trust-remote-code --mem-fraction-static 0.93",
            9,
        )
        .expect("sglang");
        assert_eq!(s.engine, ServingEngine::Sglang);
        assert_eq!(s.tensor_parallel_size, Some(4));
        assert_eq!(s.mem_fraction_static, Some(0.93));
        let e = read_command(
            "python -m vllm.entrypoints.openai.api_server --model=m --gpu-memory-utilization=0.95 --enforce-eager",
            1,
        )
        .expect("entrypoint");
        assert_eq!(e.model.as_deref(), Some("m"));
        assert_eq!(e.gpu_memory_utilization, Some(0.95));
        assert_eq!(e.enforce_eager, Some(true));
        assert!(read_command("INFO 12-06 11:39:36 worker.py:232] Memory profiling results", 1).is_none());
        assert!(read_command(
            "WARNING [argparse_utils.py:193] With `vllm serve`, you should provide the model",
            1
        )
        .is_none());
    }
}
