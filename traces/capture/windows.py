"""A GPT trained for a few hundred steps, recorded window by window
(`memlens.torch.record(every_steps=N)`) into a memlens server, against one full snapshot of the
same run, and the cost of each way of recording on training throughput.

The model is small (vocab 8192, d 256, 4 heads, 4 layers, context 256; AdamW, bf16 autocast,
batch 8) so that the recording's windows can be committed. Seeded: every run allocates the same.
  python3 windows.py OUT windowed STEPS EVERY  → the report (server: MEMLENS_SERVER), each
      window's snapshot as sent (OUT/windows/window_K.pickle), OUT/windowed.memory_stats.json
  python3 windows.py OUT full STEPS            → OUT/full.pickle (+ .memory_stats.json)
  python3 windows.py OUT time STEPS MODE [EVERY] → steps per second with MODE none|full|windowed
"""
import json
import os
import pickle
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))
import memlens.torch as mt  # noqa: E402

out, mode, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
V, D, H, L, T, B = 8192, 256, 4, 4, 256, 8
torch.manual_seed(0)


class GPT(nn.Module):
    """Token and position embeddings, pre-norm causal transformer layers, an untied head."""

    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(T, D)
        layer = nn.TransformerEncoderLayer(D, H, 4 * D, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.layers = nn.TransformerEncoder(layer, L, enable_nested_tensor=False)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=idx.device)
        return self.head(self.layers(x, mask=mask, is_causal=True))


def train(model, opt, n):
    for _ in range(n):
        x = torch.randint(0, V, (B, T), device="cuda")
        y = torch.randint(0, V, (B, T), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x).view(-1, V), y.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


def stats(name):
    with open(os.path.join(out, f"{name}.memory_stats.json"), "w") as f:
        json.dump(torch.cuda.memory_stats(), f, indent=1, sort_keys=True)


class Keeping(type(mt._backend)):
    """The real backend, keeping a copy of each window as it is sent."""

    def __init__(self):
        self.k = 0

    def window(self, max_entries, stacks):
        snap = super().window(max_entries, stacks)
        os.makedirs(os.path.join(out, "windows"), exist_ok=True)
        with open(os.path.join(out, "windows", f"window_{self.k}.pickle"), "wb") as f:
            pickle.dump(snap, f)
        self.k += 1
        return snap


print("torch", torch.__version__, torch.cuda.get_device_name(0), file=sys.stderr)
if mode == "time":
    how = sys.argv[4]
    every = int(sys.argv[5]) if len(sys.argv) > 5 else 50
    model = GPT().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    train(model, opt, 10)  # warm up
    torch.cuda.synchronize()

    rec = None
    if how == "full":
        torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python", max_entries=10_000_000)
    elif how == "windowed":
        rec = mt.record(every_steps=every, print_link=False, max_entries=10_000_000)
        rec.__enter__()
    t0 = time.perf_counter()
    train(model, opt, steps)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    if rec is not None:
        rec.__exit__(None, None, None)
    print(json.dumps({"mode": how, "steps": steps, "every_steps": every if how == "windowed" else None,
                      "seconds": dt, "steps_per_second": steps / dt}))
    sys.exit(0)

if mode == "windowed":
    every = int(sys.argv[4])
    mt._backend = Keeping()
    with mt.record(every_steps=every, job="gpt-windows", title=f"gpt {steps} steps, a window every {every}",
                   max_entries=10_000_000) as rec:
        model = GPT().cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        train(model, opt, steps)
    stats("windowed")
    with open(os.path.join(out, "windowed.link"), "w") as f:
        f.write(rec.link + "\n")
else:
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python", max_entries=10_000_000)
    model = GPT().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    train(model, opt, steps)
    torch.cuda.memory._dump_snapshot(os.path.join(out, "full.pickle"))
    stats("full")
