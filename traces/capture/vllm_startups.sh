#!/usr/bin/env bash
# Runs vllm_startups.py on the GPU machine (memlens' `device` tool) from the repository root with OUT
# set: each case a fresh vLLM process, its log and settings in /tmp/vllm_startups, packed into
# $OUT/vllm_startups.tar.gz, the whole output in $OUT/vllm_startups.out. Optional argument: a
# comma-separated list of cases.
set -uo pipefail
export PYTHONUNBUFFERED=1
mkdir -p /tmp/vllm_startups
python3 traces/capture/vllm_startups.py main /tmp/vllm_startups "${1:-}" 2>&1 | tee "$OUT/vllm_startups.out"
tar -czf "$OUT/vllm_startups.tar.gz" -C /tmp vllm_startups
ls -la /tmp/vllm_startups
