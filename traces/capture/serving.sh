#!/usr/bin/env bash
# Runs serving.py on the GPU machine (memlens' `device` tool) from the repository root with OUT set:
# each case in a fresh process, everything packed into $OUT/serving.tar.gz after each case, the whole
# output in $OUT/serving.log. Optional argument: a comma-separated list of cases.
set -uo pipefail
export PYTHONUNBUFFERED=1
mkdir -p /tmp/serving
python3 traces/capture/serving.py main /tmp/serving "$OUT/serving.tar.gz" "${1:-}" 2>&1 | tee "$OUT/serving.log"
ls -la /tmp/serving
