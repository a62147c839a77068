#!/usr/bin/env bash
# Runs others.py on the GPU machine (memlens' `device` tool) from the repository root with OUT set:
# each case in a fresh process (one failing does not stop the rest), everything packed into
# $OUT/others.tar.gz after each case, the whole output in $OUT/log.
set -uo pipefail
export PYTHONUNBUFFERED=1
mkdir -p /tmp/others
python3 traces/capture/others.py main /tmp/others "$OUT/others.tar.gz" "${1:-}" 2>&1 | tee "$OUT/log"
ls -la /tmp/others "$OUT"
