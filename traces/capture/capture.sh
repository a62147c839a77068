#!/usr/bin/env bash
# Captures the small real fixtures of traces/ that need a GPU: run on the H200 (memlens' `device`
# tool) from the repository root with OUT set; the files land in $OUT.
#   nvidia_smi_pmon.txt     `nvidia-smi pmon -s m -o DT` while two processes hold 3 GiB and 1 GiB
#   nvidia_smi_pmon_um.txt  the same with `-s um` (utilisation columns too)
#   bursts.pickle (+ .memory_stats.json)  bursts.py: three bursts of tensors kept alive, no loop
#   ddp_rank{0..3}.pickle (+ .memory_stats.json)  ddp_ranks.py: four gloo DDP ranks on one GPU
#     (gzipped after: gzip -9)
set -euo pipefail
here=$(dirname "$0")
python3 "$here/hold.py" 3072 14 & a=$!
python3 "$here/hold.py" 1024 14 & b=$!
sleep 4
nvidia-smi pmon -s m -o DT -d 1 -c 6 > "$OUT/nvidia_smi_pmon.txt"
nvidia-smi pmon -s um -o DT -d 1 -c 3 > "$OUT/nvidia_smi_pmon_um.txt"
wait $a $b
python3 "$here/bursts.py" "$OUT"
nvidia-smi --query-gpu=driver_version,name --format=csv,noheader > "$OUT/driver.txt"
python3 -c 'import torch; print(torch.__version__)' >> "$OUT/driver.txt"
# GPT at batch 16 held to 10 GiB (runs out of memory in forward: a real capacity OOM), and
# GPT at batch 4, 8, 16, and 4, 8, 16 with activation checkpointing (what-if checks), each run in
# a fresh process so its memory_stats.json is its own.
python3 "$here/gpt_batches.py" "$OUT" 16 cap=10
for b in 4 8 16; do
  python3 "$here/gpt_batches.py" "$OUT" "$b"
  python3 "$here/gpt_batches.py" "$OUT" "$b" ckpt
done
# Four DDP ranks over gloo on the one GPU, rank 3 with sequences twice as long.
python3 "$here/ddp_ranks.py" "$OUT"
gzip -9 "$OUT"/ddp_rank*.pickle
