#!/usr/bin/env bash
# Runs plan_runs.py on the GPU machine (memlens' `device` tool) from the repository root with OUT
# set: params.json and one tarball per model family (snapshots gzipped) come back.
set -uo pipefail
export PYTHONUNBUFFERED=1
mkdir -p /tmp/plan && python3 traces/capture/plan_runs.py main /tmp/plan 2>&1 | tee "$OUT/run.log"
cd /tmp/plan && gzip -9 ./*.pickle && cp params.json "$OUT/" \
  && tar cf "$OUT/llama.tar" llama_* && tar cf "$OUT/gpt2.tar" gpt2_* \
  && tar cf "$OUT/others.tar" neox_* falcon_* gemma_* phi_* qwen2_* mixtral_* && ls -la "$OUT"
