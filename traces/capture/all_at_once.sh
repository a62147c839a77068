#!/usr/bin/env bash
# One device call for every capture that waits on a GPU (memlens' `device` tool, repository root, OUT set):
# JAX alone first (its default preallocation wants 75 % of the card), then P27's third planner round,
# P25's decode OOM, P23's CNN first-forward OOMs and P23's torch.compile max-autotune side by side
# (each under its own per-process cap or its own process, so their counters do not mix).
# A packer re-tars each job's folder into $OUT/<job>.tgz every 15 s, so whatever ran comes back even
# if the call is stopped at its limit (the device returns at most 8 files). Wheels in .whl/ (peft,
# bitsandbytes reduced to its CUDA 13.0 library) are installed only where the machine lacks them.
# Usage: ALL_DEADLINE_S=575 traces/capture/all_at_once.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
start=$(date +%s)
deadline=$((start + ${ALL_DEADLINE_S:-575}))
cap=/tmp/cap inner=/tmp/inner
mkdir -p $cap/jax $cap/plan3 $cap/serving $cap/cnn $cap/compile $inner
for pkg in peft bitsandbytes; do
  python3 -c "import $pkg" 2>/dev/null && continue
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/$pkg-*.whl
done
export PYTHONPATH=/tmp/site
pack() {
  for job in jax plan3 serving cnn compile; do
    tar czf "$OUT/$job.tgz.tmp" -C $cap $job 2>/dev/null && mv "$OUT/$job.tgz.tmp" "$OUT/$job.tgz"
  done
}
(while true; do sleep 15; pack; done) &
packer=$!
left() { echo $((deadline - $(date +%s))); }

timeout 200 python3 traces/capture/jax_capture.py main $cap/jax $inner/jax.tar.gz > $cap/jax/jax.log 2>&1
echo "jax done rc=$? at $(( $(date +%s) - start )) s"
rest=$(( $(left) - 20 ))
ROUND=3 timeout $rest python3 traces/capture/plan_runs.py main $cap/plan3 > $cap/plan3/plan3.log 2>&1 &
SERVING_BUDGET_S=$rest python3 traces/capture/serving.py main $cap/serving $inner/serving.tar.gz \
  generate_oom_decode,generate_kept_across_requests > $cap/serving/serving.log 2>&1 &
OTHERS_BUDGET_S=$rest python3 traces/capture/others.py main $cap/cnn $inner/cnn.tar.gz \
  resnet_first_forward_oom,unet_first_forward_oom > $cap/cnn/others.log 2>&1 &
OTHERS_BUDGET_S=$rest OTHERS_COMPILE_TIMEOUT_S=$rest python3 traces/capture/others.py main $cap/compile \
  $inner/compile.tar.gz compile_max_autotune > $cap/compile/others.log 2>&1 &
while [ "$(jobs -pr | grep -vc "^$packer$")" -gt 0 ] && [ "$(left)" -gt 5 ]; do sleep 5; done
kill $packer 2>/dev/null
(cd $cap/plan3 && gzip -9 -f ./*.pickle 2>/dev/null)
pack
echo "all done at $(( $(date +%s) - start )) s"; ls -la "$OUT"; tail -3 $cap/*/*.log
