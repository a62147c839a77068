"""Four DDP ranks training one model on the one H200 (gloo backend: NCCL refuses two ranks on one
GPU), each process dumping its own allocator snapshot and memory_stats, for memlens' run overview
(one report of several ranks) and rank compare.

The model is a small GPT (vocab 8192, d 512, 8 heads, 4 layers, untied head: 21,523,456 parameters)
trained with AdamW for 4 steps with forward/backward/optimizer_step ranges. The data is uneven the
way real jobs are: ranks 0-2 get sequences of 512 tokens, rank 3 gets 1024 (a packing bug), so rank
3 has the largest activation peak. Gradients are all-reduced by DDP (buckets in the snapshot).
Run: python3 ddp_ranks.py OUT_DIR  → OUT_DIR/ddp_rank{0..3}.pickle (+ .memory_stats.json).
"""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

V, D, H, L = 8192, 512, 8, 4
WORLD = 4
BATCH = 8


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
        self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(1024, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln, self.head = nn.LayerNorm(D), nn.Linear(D, V, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def rank_main(rank, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29517")
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    model = GPT()
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python")
    model = nn.parallel.DistributedDataParallel(model.cuda())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    seq = 1024 if rank == 3 else 512
    for i in range(4):
        with torch.profiler.record_function(f"iteration_{i}"):
            x = torch.randint(0, V, (BATCH, seq), device="cuda")
            y = torch.randint(0, V, (BATCH, seq), device="cuda")
            with torch.profiler.record_function("forward"):
                loss = F.cross_entropy(model(x).view(-1, V), y.view(-1))
            with torch.profiler.record_function("backward"):
                loss.backward()
            with torch.profiler.record_function("optimizer_step"):
                opt.step()
                opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    torch.cuda.memory._dump_snapshot(f"{out}/ddp_rank{rank}.pickle")
    with open(f"{out}/ddp_rank{rank}.memory_stats.json", "w") as f:
        json.dump(torch.cuda.memory_stats(), f, indent=1, sort_keys=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    assert sum(p.numel() for p in GPT().parameters()) == 21_523_456, sum(p.numel() for p in GPT().parameters())
    mp.spawn(rank_main, args=(sys.argv[1],), nprocs=WORLD)
