#!/usr/bin/env bash
# The Python hooks run for real on the H200 (memlens' `device` tool), against a memlens server
# on loopback (that machine reaches nothing else): carry a release binary as bin/memlens.
#   bash traces/capture/oom_hook.sh bin/memlens   → $OUT/{on_oom,record}.{log,report.json}
set -uo pipefail
bin=$1
data=$(mktemp -d)
mkdir -p "$data/dist"
echo '<html><head></head><body></body></html>' > "$data/dist/index.html"
"$bin" serve --bind 127.0.0.1:0 --data-dir "$data/store" --static-dir "$data/dist" --upload-token hook-token \
  > "$data/stdout" 2> "$data/stderr" &
server=$!
for _ in $(seq 1 100); do grep -q listening "$data/stdout" && break; sleep 0.1; done
export MEMLENS_SERVER=$(awk '/listening on/ {print $NF}' "$data/stdout") MEMLENS_TOKEN=hook-token
export PYTHONPATH="$PWD/clients/python"
for mode in on_oom record; do
  python3 traces/capture/oom_hook.py "$mode" "$OUT" > "$OUT/$mode.log" 2>&1
  echo "exit status $?" >> "$OUT/$mode.log"
done
kill $server
