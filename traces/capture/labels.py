"""Explicit category labels: a small training loop whose script labels what it makes with the
allocator's per-allocation `user_metadata` (`torch.cuda.memory._set_memory_metadata`), which
memlens takes as the strongest evidence of a category.
Run: python3 labels.py OUT_DIR → OUT_DIR/labels.pickle (+ .memory_stats.json)
"""
import json
import sys

import torch

out = sys.argv[1]
set_meta = getattr(torch.cuda.memory, "_set_memory_metadata", None)
print("has _set_memory_metadata:", set_meta is not None)
torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python")
model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).cuda()
opt = torch.optim.Adam(model.parameters())
set_meta("category=cache")
lookup = torch.randn(4096, 1024, device="cuda")  # a long-lived table the script keeps
set_meta("")
for step in range(4):
    set_meta("category=input")
    x = torch.randn(256, 1024, device="cuda")
    set_meta("")
    loss = model(x).sum() + lookup[:10].sum()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
torch.cuda.memory._dump_snapshot(f"{out}/labels.pickle")
with open(f"{out}/labels.memory_stats.json", "w") as f:
    json.dump(torch.cuda.memory_stats(), f, indent=1)
