"""Reruns the captured OOM cases (oom_phases.py) at the batches memlens' `fits.batch_fraction`
names: the fraction's batch (rounded down) must fit under the same cap, and 25 % more must not.
Each run is a fresh process of oom_phases.py's worker, the steps before the failing one kept;
the runs at the fractions go together, then those 25 % above.
Run (device tool, repository root): python3 traces/capture/oom_rerun.py OUT CASE=FRACTION ...
→ OUT/rerun.json: for each case, both batches and whether each fit.
"""
import json
import math
import os
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import oom_phases  # noqa: E402

out = sys.argv[1]
info = json.load(open(os.path.join(HERE, "..", "oom", "capture_info.json")))
results = {}
waves = {"fraction": [], "25_percent_more": []}
for arg in sys.argv[2:]:
    case, fraction = arg.split("=")
    c = info["cases"][case]
    full = c["batches"][-1]
    for label, batch in (("fraction", math.floor(float(fraction) * full)),
                         ("25_percent_more", math.floor(1.25 * float(fraction) * full))):
        def run(case=case, c=c, label=label, batch=batch, full=full):
            env = oom_phases.BWD_ENV if case == "bwd" else None
            r = oom_phases.spawn(out, f"{case}_{label}", c["model"], c["cap_bytes"], c["batches"][:-1] + [batch], env=env)
            results[f"{case} {label}"] = {"batch": batch, "of": full, "fits": r.get("fits"), "failed_in": r.get("failed_in"),
                                          "error": r.get("error")}
        waves[label].append(threading.Thread(target=run))
# One wave at a time: the caps are per process, and all six at once would not fit on an 80 GB
# card (the device itself would run out first).
for threads in waves.values():
    [t.start() for t in threads]
    [t.join() for t in threads]
with open(os.path.join(out, "rerun.json"), "w") as f:
    json.dump(results, f, indent=1, sort_keys=True)
print(json.dumps(results, indent=1, sort_keys=True))
