#!/usr/bin/env bash
# The end of the ConvNeXt batch search of others.py (cnn_first_forward_oom): `others.py cnn_try BATCH`
# for each batch given (default 48..56: 49..55 were never tried in the first run, 48 and 56 again on this machine), each a fresh process, all
# started at once (each under its own 6 GiB cap, set_per_process_memory_fraction; the GPU has room for
# all). One line per try in $OUT/cnn_scan.txt: batch, exit status (0 fits, 3 OOM), milliseconds, output.
set -uo pipefail
batches=${1:-"48 49 50 51 52 53 54 55 56"}
for b in $batches; do
  (
    t0=$(date +%s%N)
    out=$(python3 traces/capture/others.py cnn_try "$b" 2>/tmp/cnn_try_$b.err)
    rc=$?
    t1=$(date +%s%N)
    echo "$b $rc $(( (t1 - t0) / 1000000 )) $out" >> "$OUT/cnn_scan.txt"
    [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ] && tail -20 /tmp/cnn_try_$b.err >> "$OUT/cnn_scan.txt"
  ) &
done
wait
sort -n "$OUT/cnn_scan.txt"
