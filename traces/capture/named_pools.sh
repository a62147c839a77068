#!/usr/bin/env bash
# Named MemPools capture on the H200 (memlens' `device` tool); files land in $OUT.
set -euo pipefail
python3 "$(dirname "$0")/named_pools.py" "$OUT"
gzip -9 "$OUT/named_pools.pickle" && ls -la "$OUT"
