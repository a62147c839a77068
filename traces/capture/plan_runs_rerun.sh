#!/usr/bin/env bash
# The runs of plan_runs.py named in ONLY, again (after a fix), into one tarball.
set -uo pipefail
export PYTHONUNBUFFERED=1
mkdir -p /tmp/plan && python3 traces/capture/plan_runs.py main /tmp/plan 2>&1 | tee "$OUT/run.log"
cd /tmp/plan && (gzip -9 ./*.pickle || true) && tar cf "$OUT/rerun.tar" ./* && ls -la "$OUT"
