#!/usr/bin/env bash
# Profiler categories capture on the H200 (memlens' `device` tool); files land in $OUT as one tar.
set -euo pipefail
here=$(dirname "$0")
python3 "$here/profiler_categories.py" "$OUT"
python3 -c "import inspect, torch.cuda._memory_viz as m; print(inspect.getsource(m._profile_to_snapshot))" > "$OUT/profile_to_snapshot.py.txt"
cd "$OUT" && gzip -9 profiled.pickle profiled.profiler_trace.json profiled.from_profiler.pickle
tar cf profiled.tar --remove-files profiled.* profile_to_snapshot.py.txt && ls -la
