"""GPT training at several batch sizes, with and without activation checkpointing, for checking
memlens' what-if predictions against real runs.

The model is the shared traces' GPT (vocab 32000, d 1024, 16 heads, 8 layers, context 1024,
untied head: 167,356,416 parameters), trained with AdamW under bf16 autocast for 5 steps with
forward/backward/optimizer_step ranges, like ../shared/traces/pytorch/gpt_train.
Run: python3 gpt_batches.py OUT_DIR BATCH [ckpt] [cap=GIB]  → OUT_DIR/gpt_b{BATCH}[_ckpt][_oom].pickle
(+ .memory_stats.json). With cap=GIB the process is held to GIB GiB
(`torch.cuda.set_per_process_memory_fraction`) and the snapshot is dumped when training runs out.
"""
import json
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

out, batch = sys.argv[1], int(sys.argv[2])
ckpt = "ckpt" in sys.argv[3:]
cap = next((float(a[4:]) for a in sys.argv[3:] if a.startswith("cap=")), None)
if cap is not None:
    torch.cuda.set_per_process_memory_fraction(cap * 2**30 / torch.cuda.get_device_properties(0).total_memory)
V, D, H, L, T = 32000, 1024, 16, 8, 1024


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.out = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=2)
        q, k, v = (z.view(b, t, H, D // H).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln, self.head = nn.LayerNorm(D), nn.Linear(D, V, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = checkpoint(blk, x, use_reentrant=False) if ckpt else blk(x)
        return self.head(self.ln(x))


model = GPT()
assert sum(p.numel() for p in model.parameters()) == 167_356_416
torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python")
model = model.cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)


def train():
    for i in range(5):
        with torch.profiler.record_function(f"iteration_{i}"):
            x = torch.randint(0, V, (batch, T), device="cuda")
            y = torch.randint(0, V, (batch, T), device="cuda")
            with torch.profiler.record_function("forward"):
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = F.cross_entropy(model(x).view(-1, V), y.view(-1))
            with torch.profiler.record_function("backward"):
                loss.backward()
            with torch.profiler.record_function("optimizer_step"):
                opt.step()
                opt.zero_grad(set_to_none=True)


oom = False
try:
    train()
except torch.OutOfMemoryError:
    oom = True
torch.cuda.synchronize()
name = f"{out}/gpt_b{batch}{'_ckpt' if ckpt else ''}{'_oom' if oom else ''}"
torch.cuda.memory._dump_snapshot(f"{name}.pickle")
with open(f"{name}.memory_stats.json", "w") as f:
    json.dump(torch.cuda.memory_stats(), f, indent=1)
print(name, "peak", torch.cuda.memory_stats()["requested_bytes.all.peak"])
