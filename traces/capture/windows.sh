#!/usr/bin/env bash
# A windowed recording for real on the lent GPU (memlens' `device` tool), into a memlens
# server on loopback (that machine reaches nothing else): carry a release binary as bin/memlens.
#   bash traces/capture/windows.sh bin/memlens STEPS EVERY
#   → $OUT/windows/window_K.pickle (each window as sent), $OUT/full.pickle (the same run, one
#     snapshot), $OUT/{windowed,full}.memory_stats.json, $OUT/windowed.report.json (the
#     growing report once every window is in), $OUT/throughput.jsonl, $OUT/*.log
set -uo pipefail
bin=$1 steps=${2:-300} every=${3:-50}
data=$(mktemp -d)
mkdir -p "$data/dist"
echo '<html><head></head><body></body></html>' > "$data/dist/index.html"
"$bin" serve --bind 127.0.0.1:0 --data-dir "$data/store" --static-dir "$data/dist" > "$data/stdout" 2> "$data/stderr" &
server=$!
for _ in $(seq 1 100); do grep -q listening "$data/stdout" && break; sleep 0.1; done
export MEMLENS_SERVER=$(awk '/listening on/ {print $NF}' "$data/stdout")
here=$(dirname "$0")
python3 "$here/windows.py" "$OUT" windowed "$steps" "$every" > "$OUT/windowed.log" 2>&1; echo "exit $?" >> "$OUT/windowed.log"
python3 "$here/windows.py" "$OUT" full "$steps" > "$OUT/full.log" 2>&1; echo "exit $?" >> "$OUT/full.log"
link=$(cat "$OUT/windowed.link")
id=${link##*/}
for _ in $(seq 1 600); do
  state=$(curl -s "$MEMLENS_SERVER/api/reports/$id/status" | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
  [ "$state" = ready ] || [ "$state" = failed ] && break
  sleep 0.5
done
curl -s "$MEMLENS_SERVER/api/reports/$id/status" > "$OUT/windowed.status.json"
curl -s "$MEMLENS_SERVER/api/reports/$id" > "$OUT/windowed.report.json"
"$bin" analyze --json "$OUT/full.pickle" > "$OUT/full.report.json" 2> "$OUT/full.analyze.log"
for round in 1 2; do
  for how in none full windowed; do
    python3 "$here/windows.py" "$OUT" time "$steps" "$how" "$every" >> "$OUT/throughput.jsonl" 2>> "$OUT/throughput.log"
  done
done
kill $server
cp "$data/stderr" "$OUT/server.log"
