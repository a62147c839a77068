#!/usr/bin/env bash
# FX-augmented snapshot capture on the H200 (memlens' `device` tool); files land in $OUT.
set -euo pipefail
python3 "$(dirname "$0")/fx_frames.py" "$OUT" 2>&1 | grep -v Warning
gzip -9 "$OUT/fx_frames.pickle" && ls -la "$OUT"
