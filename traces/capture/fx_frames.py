"""Capture: an MLP run as FX-generated code (`torch.compile(backend="aot_eager")`, whose graphs
execute as FX GraphModule Python) trained 3 steps with the allocator history recorded, dumped
with `augment_with_fx_traces=True` so frames in FX-generated files carry `fx_node_op`,
`fx_node_name` and `fx_original_trace`. FX keeps the metadata this needs only with
`enrich_profiler_metadata` on. Writes OUT/fx_frames.pickle (+ memory_stats.json).
Run: python3 fx_frames.py OUT
"""
import json
import pickle
import sys

import torch
import torch.nn as nn

out = sys.argv[1]
for cfg in ("torch.fx.experimental._config", "torch._dynamo.config", "torch.fx._config"):
    try:
        mod = __import__(cfg, fromlist=["x"])
    except ImportError:
        continue
    if hasattr(mod, "enrich_profiler_metadata"):
        mod.enrich_profiler_metadata = True
        print("enrich_profiler_metadata on in", cfg)
model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
step = torch.compile(model, backend="aot_eager")
torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python")
for _ in range(3):
    x = torch.randn(512, 1024, device="cuda")
    step(x).square().mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
snap = torch.cuda.memory._snapshot(augment_with_fx_traces=True)
with open(f"{out}/fx_frames.pickle", "wb") as f:
    pickle.dump(snap, f)
with open(f"{out}/fx_frames.memory_stats.json", "w") as f:
    json.dump(torch.cuda.memory_stats(), f)
from torch.fx.traceback import _FX_METADATA_REGISTRY

print("registry entries", len(_FX_METADATA_REGISTRY))
frame_keys, files, example = set(), set(), None
for e in snap["device_traces"][0]:
    for fr in e.get("frames", []):
        frame_keys |= set(fr)
        if "fx_generated" in fr["filename"] or "eval_with_key" in fr["filename"]:
            files.add(fr["filename"])
        if example is None and "fx_node_name" in fr:
            example = fr
print("frame keys", sorted(frame_keys))
print("generated files", sorted(files)[:5])
print("example", example)
