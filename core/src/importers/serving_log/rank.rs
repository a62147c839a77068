//! Which rank printed a line. Every tensor-parallel worker prints its own memory lines (the
//! same figures, or its own share), so a startup is read from one rank: the lead — vLLM's
//! driver (lines with no worker prefix), `Worker_TP0`, `EngineCore_DP0`, SGLang's `TP0` — or,
//! where the log shows no lead line with a figure, the first rank that printed one.
//!
//! The prefixes: vLLM v0's `(VllmWorkerProcess pid=N)` and `(RayWorkerWrapper pid=N)` (other
//! workers than the driver), v1's `(Worker_TP1 pid=N)`, `(Worker_PP1_TP0 pid=N)`,
//! `(EngineCore_DP1 pid=N)`, `(Worker pid=N)`; SGLang's `[2025-03-08 12:29:21 DP0 TP1 EP1]`;
//! torchrun's `[rank1]:`.

use std::sync::LazyLock;

use regex::Regex;

use super::values::re;

/// The rank a line came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Rank {
    /// The driver, rank 0 of every parallel dimension, or a line of no rank.
    Lead,
    /// Another worker, named as the log names it.
    Other(String),
}

/// vLLM v1's `(Worker_TP1 pid=N)`, `(EngineCore_DP0 pid=N)`, `(Worker_PP1_TP0_EP0 pid=N)`.
static V1_WORKER: LazyLock<Regex> = LazyLock::new(|| re(r"\((?:Worker|EngineCore)_((?:[A-Z]{2,4}\d+_?)+) pid=(\d+)\)"));
/// vLLM v0's workers other than the driver, and v1's untagged `(Worker pid=N)`.
static V0_WORKER: LazyLock<Regex> = LazyLock::new(|| re(r"\((VllmWorkerProcess|RayWorkerWrapper|Worker) pid=(\d+)\)"));
/// SGLang's `[time DP0 TP1 PP0 EP1]`.
static SGLANG: LazyLock<Regex> =
    LazyLock::new(|| re(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d((?: (?:DP|TP|PP|EP|ATTN_DP|CP)\d+)+)\]"));
static TORCHRUN: LazyLock<Regex> = LazyLock::new(|| re(r"^\s*\[rank(\d+)\]:"));
static INDEX: LazyLock<Regex> = LazyLock::new(|| re(r"[A-Z]+(\d+)"));

/// Whether every index in `tags` (`TP0_EP0`, ` DP0 TP1`) is 0.
fn all_zero(tags: &str) -> bool {
    INDEX.captures_iter(tags).all(|c| &c[1] == "0")
}

/// The rank of a line.
pub fn rank_of(line: &str) -> Rank {
    if let Some(c) = V1_WORKER.captures(line) {
        return if all_zero(&c[1]) {
            Rank::Lead
        } else {
            Rank::Other(c[1].to_owned())
        };
    }
    if let Some(c) = SGLANG.captures(line) {
        return if all_zero(&c[1]) {
            Rank::Lead
        } else {
            Rank::Other(c[1].trim().to_owned())
        };
    }
    if let Some(c) = V0_WORKER.captures(line) {
        return Rank::Other(format!("{} {}", &c[1], &c[2]));
    }
    match TORCHRUN.captures(line) {
        Some(c) if &c[1] != "0" => Rank::Other(format!("rank{}", &c[1])),
        _ => Rank::Lead,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_from_every_prefix() {
        let lead = [
            "INFO 12-06 11:39:36 worker.py:232] Memory profiling results",
            "(EngineCore_DP0 pid=246) INFO 03-01 11:23:38 [kv_cache_utils.py:1314] GPU KV cache size",
            "qwen3.5-122    | (Worker pid=312) (Worker_TP0 pid=312) INFO 03-01 [gpu_worker.py:423] Available",
            "[2025-03-08 12:29:21 TP0] KV Cache is allocated.",
            "[2025-07-02 07:41:58 DP0 TP0] Load weight end.",
            "[rank0]: ValueError",
        ];
        for l in lead {
            assert_eq!(rank_of(l), Rank::Lead, "{l}");
        }
        let other = [
            (
                "(VllmWorkerProcess pid=521) INFO 04-12 08:21:19 [worker.py:267] model weights take",
                "VllmWorkerProcess 521",
            ),
            (
                "(Worker pid=313) (Worker_TP1 pid=313) INFO 03-01 [gpu_worker.py:423] Available",
                "TP1",
            ),
            ("(Worker_PP6 pid=583) WARNING", "PP6"),
            ("[2025-03-08 12:29:21 TP3] KV Cache is allocated.", "TP3"),
            ("[2025-07-02 07:41:59 DP7 TP7] max_total_tokens", "DP7 TP7"),
            ("(EngineCore_DP1 pid=9) INFO", "DP1"),
        ];
        for (l, name) in other {
            assert_eq!(rank_of(l), Rank::Other(name.into()), "{l}");
        }
    }
}
