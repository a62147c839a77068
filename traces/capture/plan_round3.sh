#!/usr/bin/env bash
# P27's third round of plan_runs.py (ROUND=3: gradient accumulation, trained layers, LoRA, QLoRA)
# on the GPU machine (memlens' `device` tool) from the repository root with OUT set: one tarball.
set -uo pipefail
export PYTHONUNBUFFERED=1 ROUND=3
python3 -c "import peft, bitsandbytes; print('peft', peft.__version__, 'bitsandbytes', bitsandbytes.__version__)" 2>&1 | tail -1
mkdir -p /tmp/plan3 && python3 traces/capture/plan_runs.py main /tmp/plan3 2>&1 | tee "$OUT/plan3.log"
cd /tmp/plan3 && (gzip -9 ./*.pickle || true) && tar cf "$OUT/plan3.tar" ./* && ls -la "$OUT"
