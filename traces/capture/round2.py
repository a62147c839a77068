"""Captures for memlens' formats round 2, each in its own process (see round2.sh):
  json     an MLP trained 3 steps with AdamW; the same snapshot dumped as pickle and as JSON
           (json.dump(torch.cuda.memory._snapshot())) → json_run.pickle, json_run.json
  cupy     CuPy holds 3 GiB next to PyTorch training the same MLP (memory outside PyTorch,
           seen by an nvidia-smi log of the run) → cupy_outside.pickle
  mempool  a torch.cuda.MemPool receives the activations of one forward → mempool.pickle
  ring     the same training with max_entries=300 (the ring buffer drops the start) → ring_truncated.pickle
Each writes NAME.memory_stats.json beside its snapshot. Run: python3 round2.py MODE OUT_DIR
"""
import json
import sys
import time

import torch
import torch.nn as nn

mode, out = sys.argv[1], sys.argv[2]


def mlp():
    return nn.Sequential(nn.Linear(4096, 8192), nn.ReLU(), nn.Linear(8192, 8192), nn.ReLU(), nn.Linear(8192, 4096)).cuda()


def train(model, steps=3, batch=2048):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(steps):
        x = torch.randn(batch, 4096, device="cuda")
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()


def stats(name):
    with open(f"{out}/{name}.memory_stats.json", "w") as f:
        json.dump(torch.cuda.memory_stats(), f, indent=1, sort_keys=True)


if mode == "json":
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python")
    train(mlp())
    snap = torch.cuda.memory._snapshot()
    import pickle

    with open(f"{out}/json_run.pickle", "wb") as f:
        pickle.dump(snap, f)
    with open(f"{out}/json_run.json", "w") as f:
        json.dump(snap, f)
    stats("json_run")
elif mode == "cupy":
    import cupy

    held = cupy.zeros(3 * 2**30, dtype=cupy.uint8)  # 3 GiB outside PyTorch's allocator
    held[:] = 1
    time.sleep(2)
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python")
    model = mlp()
    for _ in range(4):
        train(model, steps=2)
        time.sleep(0.5)
    torch.cuda.memory._dump_snapshot(f"{out}/cupy_outside.pickle")
    stats("cupy_outside")
    time.sleep(2)
    del held
elif mode == "mempool":
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python")
    model = mlp()
    pool = torch.cuda.MemPool()
    x = torch.randn(2048, 4096, device="cuda")
    with torch.cuda.use_mem_pool(pool):
        y = model(x)
        kept = [y * 2 for _ in range(4)]
    train(model, steps=2)
    torch.cuda.synchronize()
    torch.cuda.memory._dump_snapshot(f"{out}/mempool.pickle")
    stats("mempool")
    del kept, y
elif mode == "ring":
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python", max_entries=300)
    train(mlp(), steps=8)
    torch.cuda.memory._dump_snapshot(f"{out}/ring_truncated.pickle")
    stats("ring_truncated")
