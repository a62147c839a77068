#!/usr/bin/env bash
# Formats round 2 captures on the H200 (memlens' `device` tool); files land in $OUT.
set -euo pipefail
here=$(dirname "$0")
python3 "$here/round2.py" json "$OUT"
# CuPy holding 3 GiB beside PyTorch, with nvidia-smi sampling the GPU all along.
nvidia-smi --query-gpu=timestamp,index,name,pci.bus_id,memory.total,memory.used,memory.free,memory.reserved --format=csv -lms 100 > "$OUT/cupy_outside.nvidia_smi.csv" & smi=$!
sleep 1
python3 "$here/round2.py" cupy "$OUT"
sleep 1; kill $smi
python3 "$here/round2.py" mempool "$OUT"
python3 "$here/round2.py" ring "$OUT"
cd "$OUT" && gzip -9 json_run.json json_run.pickle cupy_outside.pickle mempool.pickle ring_truncated.pickle
tar cf round2.tar --remove-files json_run.* cupy_outside.* mempool.* ring_truncated.* && ls -la
