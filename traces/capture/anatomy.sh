#!/usr/bin/env bash
# Runs anatomy.py on the GPU machine (memlens' `device` tool) from the repository root with OUT
# set; the snapshots come back gzipped in one tarball.
set -uo pipefail
export PYTHONUNBUFFERED=1
mkdir -p /tmp/anatomy && python3 traces/capture/anatomy.py main /tmp/anatomy 2>&1 | tee "$OUT/run.log"
cd /tmp/anatomy && gzip -9 ./*.pickle && tar czf "$OUT/anatomy.tar.gz" ./* && ls -la . "$OUT"
