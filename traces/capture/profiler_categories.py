"""Capture: one AdamW training run under torch.profiler (profile_memory, record_shapes, with_stack)
with the allocator history recorded at the same time, so PyTorch's own memory categories can be
checked against memlens'.

Writes to the folder given as argv[1]:
- profiled.pickle             the allocator snapshot of the run (`torch.cuda.memory._snapshot()`)
- profiled.memory_stats.json  `torch.cuda.memory_stats()` at the end
- profiled.profiler_trace.json   `prof.export_chrome_trace`
- profiled.memory_timeline.json.gz      `prof.export_memory_timeline(..., device="cuda:0")`
- profiled.memory_timeline.raw.json.gz  the same, raw events
- profiled.from_profiler.pickle `torch.cuda._memory_viz._profile_to_snapshot(prof)`: the
  profiler-derived snapshot whose trace entries carry PyTorch's `category`
- profiled.facts.json          parameter count and the optimizer
"""

import json
import os
import pickle
import sys

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

out = sys.argv[1]
torch.manual_seed(0)
dev = "cuda"
model = nn.Sequential(
    nn.Linear(2048, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10)
)
torch.cuda.memory._record_memory_history(max_entries=200000)
model = model.to(dev)
params = sum(p.numel() for p in model.parameters())
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
batch = 512


def step(i):
    with record_function(f"iteration_{i}"):
        x = torch.randn(batch, 2048, device=dev)
        y = torch.randint(0, 10, (batch,), device=dev)
        with record_function("forward"):
            loss = nn.functional.cross_entropy(model(x), y)
        with record_function("backward"):
            loss.backward()
        opt.step()
        opt.zero_grad()


with profile(
    activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
    profile_memory=True,
    record_shapes=True,
    with_stack=True,
) as prof:
    for i in range(4):
        step(i)
    torch.cuda.synchronize()

snap = torch.cuda.memory._snapshot()
torch.cuda.memory._record_memory_history(enabled=None)
with open(os.path.join(out, "profiled.pickle"), "wb") as f:
    pickle.dump(snap, f)
with open(os.path.join(out, "profiled.memory_stats.json"), "w") as f:
    json.dump(torch.cuda.memory_stats(), f)
prof.export_chrome_trace(os.path.join(out, "profiled.profiler_trace.json"))
prof.export_memory_timeline(os.path.join(out, "profiled.memory_timeline.json.gz"), device="cuda:0")
prof.export_memory_timeline(os.path.join(out, "profiled.memory_timeline.raw.json.gz"), device="cuda:0")
from torch.cuda import _memory_viz

derived = _memory_viz._profile_to_snapshot(prof)
with open(os.path.join(out, "profiled.from_profiler.pickle"), "wb") as f:
    pickle.dump(derived, f)
with open(os.path.join(out, "profiled.facts.json"), "w") as f:
    json.dump(
        {
            "parameters": params,
            "optimizer": "AdamW (2 fp32 states per parameter)",
            "batch": batch,
            "torch": torch.__version__,
        },
        f,
    )
print("parameters", params, "torch", torch.__version__)
cats = {}
for dev_trace in derived.get("device_traces", []):
    for e in dev_trace:
        cats[e.get("category")] = cats.get(e.get("category"), 0) + 1
print("derived categories", cats)
print("derived keys", list(derived.keys()), "entry keys", list(derived["device_traces"][0][0].keys()) if derived.get("device_traces") and derived["device_traces"][0] else None)
