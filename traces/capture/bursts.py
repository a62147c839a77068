"""A short script without a loop: three bursts of tensors, all kept alive to the end.

Captured on the H200 for memlens (leak detection must not call this a leak: nothing grows
per iteration, there is no iteration). Writes bursts.pickle and bursts.memory_stats.json.
Run: python3 bursts.py OUT_DIR
"""
import json
import sys
import time

import torch

out = sys.argv[1]
torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python")
keep = []


def burst(count, mib):
    for _ in range(count):
        keep.append(torch.empty(mib << 20, dtype=torch.uint8, device="cuda"))
    torch.cuda.synchronize()


burst(10, 16)  # model-like weights
time.sleep(0.2)
burst(4, 64)  # a few large buffers
time.sleep(0.2)
burst(20, 2)  # many small ones
torch.cuda.synchronize()
torch.cuda.memory._dump_snapshot(f"{out}/bursts.pickle")
with open(f"{out}/bursts.memory_stats.json", "w") as f:
    json.dump(torch.cuda.memory_stats(), f, indent=1)
print("kept", len(keep), "tensors,", sum(t.numel() for t in keep) >> 20, "MiB")
