"""Runs memlens' Python hooks for real on the H200: a job that truly runs out of memory under a
per-process cap (a stack of 8192-wide linear layers at a batch that does not fit in 6 GiB),
with `memlens.torch.on_oom` (mode `on_oom`) or inside `memlens.torch.record` (mode `record`).
The job must still raise its `OutOfMemoryError`; the uploaded report is fetched back and saved.
Run: MEMLENS_SERVER=… MEMLENS_TOKEN=… PYTHONPATH=clients/python python3 oom_hook.py MODE OUT_DIR
"""
import json
import sys
import time
import urllib.request

import torch
import torch.nn as nn

import memlens.torch as mt

mode, out = sys.argv[1], sys.argv[2]
torch.cuda.set_per_process_memory_fraction(6 * 2**30 / torch.cuda.get_device_properties(0).total_memory)
model = nn.Sequential(*[nn.Linear(8192, 8192) for _ in range(6)]).cuda()


def train():
    x = torch.randn(65536, 8192, device="cuda")
    model(x).sum().backward()


links = []
try:
    if mode == "on_oom":
        hook = mt.on_oom(timeout=120)
        train()
    else:
        rec = mt.record()
        try:
            with rec:
                train()
        finally:
            links.append(rec.link)
    print("no OOM?!")
    sys.exit(1)
except torch.OutOfMemoryError as e:
    print(f"the job raised {type(e).__module__}.{type(e).__name__}: {str(e).splitlines()[0]}")
    if mode == "on_oom":
        links = hook.links
print("links:", links)
server = links[0].split("/r/")[0]
report = links[0].rsplit("/", 1)[-1]
for _ in range(600):
    with urllib.request.urlopen(f"{server}/api/reports/{report}/status") as r:
        status = json.load(r)
    if status["state"] in ("ready", "failed"):
        break
    time.sleep(0.2)
print("report state:", status["state"], status.get("error"))
with urllib.request.urlopen(f"{server}/api/reports/{report}") as r:
    summary = json.load(r)
with open(f"{out}/{mode}.report.json", "w") as f:
    json.dump(summary, f, indent=1)
dev = summary["files"][0]["devices"][0]
print("ooms:", dev["oom_count"])
for o in dev["ooms"]:
    print(f"  requested {o['requested_bytes']} B, cause {o['cause']}: {o['remedy'][:160]}")
