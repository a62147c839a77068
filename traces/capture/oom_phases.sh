#!/usr/bin/env bash
# Runs oom_phases.py on the GPU machine (memlens' `device` tool) from the repository root with OUT
# set, and packs what it made into a few gzipped tarballs under $OUT (the tool brings back 8 files).
set -uo pipefail
export PYTHONUNBUFFERED=1
mkdir -p /tmp/oom_work; python3 traces/capture/oom_phases.py main /tmp/oom_work 2>&1 | tee "$OUT/run.log"
cd /tmp/oom_work || exit 1
rm -f ./*_probe.at_oom.pickle
for k in fwd_jump fwd_first bwd opt other_proc non_torch; do
  ls $k.* >/dev/null 2>&1 && tar czf "$OUT/$k.tar.gz" $k.*
done
tar czf "$OUT/misc.tar.gz" info.json nvidia_smi_*.txt cal_*.log 2>/dev/null || tar czf "$OUT/misc.tar.gz" info.json nvidia_smi_*.txt
ls -la "$OUT"
