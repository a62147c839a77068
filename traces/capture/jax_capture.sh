#!/usr/bin/env bash
# Runs jax_capture.py on the GPU machine (memlens' `device` tool) from the repository root with OUT set:
# each case in a fresh process with its own environment (see the docstring), everything packed into
# $OUT/jax.tar.gz after each case, the whole output in $OUT/jax.log. Optional argument: cases, comma-separated.
set -uo pipefail
export PYTHONUNBUFFERED=1
mkdir -p /tmp/jax
python3 traces/capture/jax_capture.py main /tmp/jax "$OUT/jax.tar.gz" "${1:-}" 2>&1 | tee "$OUT/jax.log"
ls -la /tmp/jax
