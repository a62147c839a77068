//! What each serving engine does by default and how it draws its budget, where a plan must
//! know it: vLLM's `gpu_memory_utilization` and SGLang's `mem_fraction_static`, the profile
//! run's dummy batch (vLLM's `max_num_batched_tokens` and `max_num_seqs`, whose defaults
//! changed with its versions), what vLLM counts outside PyTorch and when it counts CUDA graphs
//! before sizing the KV cache. Each rule names the versions it holds for; without a version the
//! newest behaviour is planned.

use memlens_api::ServingEngine;

/// 2^30.
pub const GIB: f64 = 1_073_741_824.0;

/// An engine version as major.minor.patch (`0.6.4.post1` → 0.6.4, `0.15.2rc1` → 0.15.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u32, pub u32, pub u32);

impl Version {
    /// The leading numbers of `text` (a `v` before them is allowed); `None` without two.
    pub fn parse(text: &str) -> Option<Version> {
        let mut parts = text.trim().trim_start_matches('v').split('.').map(|p| {
            let digits: String = p.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u32>().ok()
        });
        let major = parts.next()??;
        let minor = parts.next()??;
        let patch = parts.next().flatten().unwrap_or(0);
        Some(Version(major, minor, patch))
    }
}

/// What tensor parallelism's communication holds beyond the communicators on GPUs of 70 GiB
/// or more (data-centre GPUs, linked by NVLink: NCCL's NVLink buffers): 1 GiB, what both
/// Qwen3-235B logs of traces/serving-logs (four H100s, vLLM and SGLang) held beyond the rest of
/// the plan — two logs of one machine, so an estimate.
pub const NVLINK_COMMUNICATION_BYTES: i64 = 1 << 30;

fn nvlink_communication(tp: u64, total: i64) -> i64 {
    if tp > 1 && total as f64 >= 70.0 * GIB {
        NVLINK_COMMUNICATION_BYTES
    } else {
        0
    }
}

/// The dummy batch of vLLM's profile run: this many tokens over this many requests (the
/// sampler runs once per request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DummyBatch {
    pub tokens: u64,
    pub requests: u64,
}

/// The engine planned and its version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Engine {
    pub kind: ServingEngine,
    /// `None`: the newest behaviour.
    pub version: Option<Version>,
}

impl Engine {
    /// vLLM at `v` or later (or with no version given).
    fn vllm_since(&self, v: Version) -> bool {
        self.kind == ServingEngine::Vllm && self.version.is_none_or(|x| x >= v)
    }

    /// vLLM's V1 engine (the default from 0.8).
    pub fn v1(&self) -> bool {
        self.vllm_since(Version(0, 8, 0))
    }

    /// vLLM ≥ 0.21 estimates CUDA graphs before sizing the KV cache and leaves them out of it;
    /// before, they were captured afterwards, in what the utilization leaves over.
    pub fn graphs_before_kv(&self) -> bool {
        self.vllm_since(Version(0, 21, 0))
    }

    /// vLLM's hybrid KV cache manager (0.10 on) keeps only a window's tokens for a
    /// sliding-window layer; older vLLM and SGLang hold every token in every layer.
    pub fn keeps_windows(&self) -> bool {
        self.vllm_since(Version(0, 10, 0))
    }

    /// vLLM up to 0.6.4 measured memory outside PyTorch as everything the GPU had in use
    /// (the CUDA context included); from 0.6.5 only what grew during profiling.
    fn non_torch_includes_context(&self) -> bool {
        self.kind == ServingEngine::Vllm && self.version.is_some_and(|v| v < Version(0, 6, 5))
    }

    /// Memory outside PyTorch's allocator that vLLM counts against the utilization: the CUDA
    /// context (up to 0.6.4; 0.35 GiB on an RTX 3090, 0.47 GiB on a GTX 1080) or what grew
    /// during profiling (0.16 GiB on an H100 under 0.7, 0.20 GiB on four RTX 3090s under 0.8),
    /// and with tensor parallelism on a GPU of 70 GiB or more [`NVLINK_COMMUNICATION_BYTES`].
    pub fn non_torch_bytes(&self, tp: u64, total: i64) -> i64 {
        let base = match self.kind {
            ServingEngine::Sglang => return 0,
            _ if self.non_torch_includes_context() => (0.4 * GIB) as i64,
            _ => (0.2 * GIB) as i64,
        };
        base + nvlink_communication(tp, total)
    }

    /// SGLang's memory in use before the weights load (its `avail mem` is the GPU less this):
    /// the CUDA context, and the NCCL communicators of tensor parallelism (0.13 GiB on four
    /// L4s), more over NVLink ([`NVLINK_COMMUNICATION_BYTES`]).
    pub fn context_bytes(&self, tp: u64, total: i64) -> i64 {
        let nccl = if tp > 1 { 0.13 } else { 0.0 };
        ((0.6 + nccl) * GIB) as i64 + nvlink_communication(tp, total)
    }

    /// vLLM's default `gpu_memory_utilization` (0.9); SGLang's `mem_fraction_static` by tensor
    /// parallel size, as its server arguments set it when not given.
    pub fn default_utilization(&self, tp: u64) -> f64 {
        match self.kind {
            ServingEngine::Vllm => 0.9,
            ServingEngine::Sglang => match tp {
                16.. => 0.79,
                8.. => 0.81,
                4.. => 0.85,
                2.. => 0.87,
                _ => 0.88,
            },
        }
    }

    /// Tokens a KV cache block holds: vLLM's 16; SGLang pages single tokens.
    pub fn block_size(&self) -> i64 {
        match self.kind {
            ServingEngine::Vllm => 16,
            ServingEngine::Sglang => 1,
        }
    }

    /// The profile run's dummy batch under vLLM's defaults for `vllm serve`: V0 without chunked
    /// prefill runs `max(max_model_len, 2048)` tokens (512 with chunked prefill, which it turns
    /// on past 32,768 tokens) over 256 requests; V1 runs 2,048 over 256, and from 0.9 on GPUs
    /// of 70 GiB or more 8,192 over 1,024; the requests are never more than the tokens.
    pub fn dummy_batch(&self, max_model_len: u64, max_num_seqs: Option<u64>, total_bytes: i64) -> DummyBatch {
        let (tokens, seqs) = if !self.v1() {
            let tokens = if max_model_len > 32_768 {
                512
            } else {
                max_model_len.max(2048)
            };
            (tokens, 256)
        } else if self.vllm_since(Version(0, 9, 0)) && total_bytes as f64 >= 70.0 * GIB {
            (8192, 1024)
        } else {
            (2048, 256)
        };
        let requests = max_num_seqs.unwrap_or(seqs).min(tokens).max(1);
        DummyBatch { tokens, requests }
    }

    /// Bytes per logit the profile run's sampler holds at its peak. V0 samples the dummy
    /// batch with top-k and top-p (the bf16 logits, their fp32 copy, the sorted values and
    /// indices, the masks, the inverse permutation, the re-gathered logits: 39 bytes). V1 of
    /// 0.8 does too, beside an int64 `prompt_token_ids` of the logits' shape in its dummy
    /// sampling metadata (`gpu_model_runner.profile_run`: 47 bytes). The newest V1 samples
    /// without sorting (bf16 logits, fp32 logits, probabilities and the exponential draw:
    /// 14 bytes; the 0.21 log of `traces/serving-logs` leaves no room for more). Where between
    /// 0.9 and 0.21 the sort went is not known here: 0.10 is taken.
    pub fn sampler_bytes_per_logit(&self) -> f64 {
        if !self.v1() {
            39.0
        } else if !self.vllm_since(Version(0, 10, 0)) {
            47.0
        } else {
            14.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_read_their_leading_numbers() {
        assert_eq!(Version::parse("0.6.4.post1"), Some(Version(0, 6, 4)));
        assert_eq!(Version::parse("v0.15.2rc1"), Some(Version(0, 15, 2)));
        assert_eq!(Version::parse("0.21"), Some(Version(0, 21, 0)));
        assert_eq!(Version::parse("latest"), None);
        assert!(Version(0, 10, 0) > Version(0, 9, 9));
    }

    #[test]
    fn the_dummy_batch_follows_the_version_and_the_gpu() {
        let at = |v: &str| Engine {
            kind: ServingEngine::Vllm,
            version: Version::parse(v),
        };
        let big = (79.2 * GIB) as i64;
        let small = (23.6 * GIB) as i64;
        assert_eq!(
            at("0.6.4").dummy_batch(29_000, None, small),
            DummyBatch {
                tokens: 29_000,
                requests: 256
            }
        );
        assert_eq!(at("0.6.4").dummy_batch(131_072, None, small).tokens, 512);
        assert_eq!(
            at("0.8.4").dummy_batch(32_768, None, big),
            DummyBatch {
                tokens: 2048,
                requests: 256
            }
        );
        assert_eq!(
            at("0.21.0").dummy_batch(32_768, None, big),
            DummyBatch {
                tokens: 8192,
                requests: 1024
            }
        );
        assert_eq!(
            at("0.21.0").dummy_batch(32_768, Some(64), small),
            DummyBatch {
                tokens: 2048,
                requests: 64
            }
        );
    }
}
