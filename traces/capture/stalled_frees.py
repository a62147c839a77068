"""Frees stalled on another stream (the `record_stream` pattern, memviz-neo's "pending-free
stalls"): each step makes a 256 MiB tensor on the default stream, hands it to a side stream
that runs a long chain of matmuls on it (`record_stream`), and drops it at once. The allocator
logs `free_requested` then, and `free_completed` only once the side stream is done, while the
default stream keeps allocating small tensors. Run: python3 stalled_frees.py OUT_DIR
→ OUT_DIR/stalled_frees.pickle (+ .memory_stats.json).
"""
import json
import sys

import torch

out = sys.argv[1]
side = torch.cuda.Stream()
torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python")
w = torch.randn(8192, 8192, device="cuda")
for step in range(5):
    x = torch.randn(8192, 8192, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x
        for _ in range(30):
            y = torch.tanh(y @ w)
    x.record_stream(side)
    del x
    # The default stream goes on allocating while the side stream still reads the freed block.
    for _ in range(200):
        z = torch.empty(1 << 20, device="cuda")
        del z
    side.synchronize()
    z = torch.empty(1 << 20, device="cuda")
    del z, y
torch.cuda.synchronize()
torch.cuda.memory._dump_snapshot(f"{out}/stalled_frees.pickle")
with open(f"{out}/stalled_frees.memory_stats.json", "w") as f:
    json.dump(torch.cuda.memory_stats(), f, indent=1, sort_keys=True)
