"""Capture: two torch.cuda.MemPools named through user_metadata (`pool=kv_cache`,
`pool=scratch`) beside AdamW training in the default pool; the kv_cache pool grows each step.

Writes OUT/named_pools.pickle and OUT/named_pools.memory_stats.json. Run: python3 named_pools.py OUT
"""
import json
import sys

import torch
import torch.nn as nn

out = sys.argv[1]
meta = torch.cuda.memory._set_memory_metadata
torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python")
model = nn.Sequential(nn.Linear(2048, 4096), nn.ReLU(), nn.Linear(4096, 2048)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
kv_pool, scratch_pool = torch.cuda.MemPool(), torch.cuda.MemPool()
cache = []
for step in range(4):
    meta("pool=kv_cache")
    with torch.cuda.use_mem_pool(kv_pool):
        cache += [torch.empty(64 << 20, dtype=torch.uint8, device="cuda") for _ in range(2)]
    meta("pool=scratch")
    with torch.cuda.use_mem_pool(scratch_pool):
        tmp = [torch.randn(1024, 4096, device="cuda") for _ in range(3)]
        del tmp
    meta("")
    x = torch.randn(1024, 2048, device="cuda")
    model(x).square().mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
torch.cuda.memory._dump_snapshot(f"{out}/named_pools.pickle")
with open(f"{out}/named_pools.memory_stats.json", "w") as f:
    json.dump(torch.cuda.memory_stats(), f)
print("pools", kv_pool.id, scratch_pool.id)
