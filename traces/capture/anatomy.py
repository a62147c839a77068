"""Training runs of other model families and loop shapes, for memlens' memory anatomy and its
iterations (P17). Each case runs in a fresh process on one GPU, records the allocator's history
(`stacks="python"`, as the other captures), dumps the snapshot, PyTorch's own counters
(`memory_stats.json`) and `truth.json`: the model's own counts taken from the live objects
(parameters and their bytes, buffers, gradients, the optimizer's state tensors, GradScaler's
tensors) and each loop step's start and end on the trace's clock (Unix µs, after a
`torch.cuda.synchronize()`), with the step's batch shape.

Cases
  resnet_sgd          torchvision ResNet-50 (random weights), SGD momentum 0.9, batch 32 × 224²,
                      4 steps, `record_function("iteration")` around each step; PyTorch's own
                      `Optimizer.step#SGD.step` / `zero_grad` ranges as recorded
  resnet_sgd_iter     the same with the optimizer's own ranges switched off (the `record_function`
                      the optimizer calls is a no-op): only the script's `iteration` ranges
  resnet_sgd_plain    the same with no range at all
  vit_amp             torchvision ViT-B/16, AdamW, fp16 autocast with GradScaler, batch 32, 4 steps,
                      no ranges of the script's own
  resnet_eval         ResNet-50 in eval mode under `torch.inference_mode()`, 6 batches of 64
  moe_custom          a hand-written MoE transformer (token embedding, SDPA attention, top-2 routing
                      over 8 expert MLPs, layer norm), Adam, a plain loop with no range at all
  varlen_plain        a Hugging Face Llama from a config, AdamW, bf16 autocast, 40 steps whose
                      batch × sequence vary (seeded: the same in both), no ranges of its own
  varlen_expandable   the same with `expandable_segments:True`
Run (device tool, repository root): traces/capture/anatomy.sh
"""
import contextlib
import json
import os
import subprocess
import sys
import time

HERE = os.path.abspath(__file__)
CASES = ["resnet_sgd", "resnet_sgd_iter", "resnet_sgd_plain", "vit_amp", "resnet_eval", "moe_custom",
         "varlen_plain", "varlen_expandable"]


class NoRange:
    """A `record_function` that records nothing (what a run without ranges has)."""

    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def now_us(torch):
    torch.cuda.synchronize()
    return int(time.time() * 1e6)


def tensor_bytes(ts):
    return sum(t.numel() * t.element_size() for t in ts if hasattr(t, "is_cuda") and t.is_cuda)


def optimizer_state_bytes(opt):
    return sum(tensor_bytes(v for v in st.values()) for st in opt.state.values())


def moe_model(torch):
    nn = torch.nn
    F = torch.nn.functional

    class Expert(nn.Module):
        def __init__(self, d, h):
            super().__init__()
            self.up = nn.Linear(d, h)
            self.down = nn.Linear(h, d)

        def forward(self, x):
            return self.down(F.gelu(self.up(x)))

    class Block(nn.Module):
        def __init__(self, d, heads, experts, h):
            super().__init__()
            self.heads = heads
            self.ln1 = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d)
            self.router = nn.Linear(d, experts)
            self.experts = nn.ModuleList(Expert(d, h) for _ in range(experts))

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
            y = self.ln2(x).reshape(b * s, d)
            weights, chosen = torch.topk(F.softmax(self.router(y), dim=-1), 2, dim=-1)
            out = torch.zeros_like(y)
            for e, expert in enumerate(self.experts):
                rows, slot = torch.where(chosen == e)
                if rows.numel():
                    out.index_add_(0, rows, expert(y[rows]) * weights[rows, slot, None])
            return x + out.view(b, s, d)

    class Moe(nn.Module):
        def __init__(self, vocab=16000, d=512, heads=8, layers=4, experts=8, h=1024):
            super().__init__()
            self.embed = nn.Embedding(vocab, d)
            self.blocks = nn.ModuleList(Block(d, heads, experts, h) for _ in range(layers))
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)

        def forward(self, ids):
            x = self.embed(ids)
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln(x))

    return Moe()


def worker(out, case):
    if case == "varlen_expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    import torch

    record_function = torch.autograd.profiler.record_function
    if case in ("resnet_sgd_iter", "resnet_sgd_plain", "moe_custom"):
        # The optimizer's own Optimizer.step#… / zero_grad ranges are not recorded.
        torch.autograd.profiler.record_function = NoRange
    script_ranges = case in ("resnet_sgd", "resnet_sgd_iter")
    torch.manual_seed(0)
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python", max_entries=1_000_000)
    truth = {"case": case, "torch": torch.__version__, "device": torch.cuda.get_device_name(0), "steps": []}
    scaler = None
    autocast = contextlib.nullcontext
    if case.startswith("resnet"):
        import torchvision

        model = torchvision.models.resnet50().cuda()
        batches = [(64, 224)] * 6 if case == "resnet_eval" else [(32, 224)] * 4
        opt = None if case == "resnet_eval" else torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        truth["optimizer"] = "none" if opt is None else "SGD momentum 0.9"
    elif case == "vit_amp":
        import torchvision

        model = torchvision.models.vit_b_16().cuda()
        batches = [(32, 224)] * 4
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        scaler = torch.amp.GradScaler("cuda")
        truth["optimizer"] = "AdamW, fp16 autocast + GradScaler"

        def autocast():
            return torch.autocast("cuda", dtype=torch.float16)
    elif case == "moe_custom":
        model = moe_model(torch).cuda()
        batches = [(16, 512)] * 4
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        truth["optimizer"] = "Adam"
    else:
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                          num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=2048)
        model = LlamaForCausalLM(cfg).cuda()
        import random

        rng = random.Random(17)
        batches = [(rng.choice([2, 4, 6, 8, 12, 16]), rng.choice([128, 256, 384, 512, 768, 1024]))
                   for _ in range(40)]
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        truth["optimizer"] = "AdamW, bf16 autocast"

        def autocast():
            return torch.autocast("cuda", dtype=torch.bfloat16)
    truth["parameters"] = sum(p.numel() for p in model.parameters())
    truth["parameter_bytes"] = tensor_bytes(model.parameters())
    truth["buffer_bytes"] = tensor_bytes(model.buffers())
    for k, (b, s) in enumerate(batches):
        start = now_us(torch)
        scope = record_function("iteration") if script_ranges else contextlib.nullcontext()
        with scope:
            if case.startswith("resnet") or case == "vit_amp":
                x = torch.randn(b, 3, s, s, device="cuda")
                y = torch.randint(0, 1000, (b,), device="cuda")
            else:
                vocab = 16000 if case == "moe_custom" else 32000
                x = torch.randint(0, vocab, (b, s), device="cuda")
            if opt is None:
                model.eval()
                with torch.inference_mode():
                    logits = model(x)
                    pred = logits.argmax(-1)
                    del logits, pred
            else:
                with autocast():
                    if case.startswith("varlen"):
                        loss = model(input_ids=x, labels=x).loss
                    elif case == "moe_custom":
                        logits = model(x)
                        loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                                 x[:, 1:].reshape(-1))
                        del logits
                    else:
                        loss = torch.nn.functional.cross_entropy(model(x), y)
                if scaler is not None:
                    scaler.scale(loss).backward()
                else:
                    loss.backward()
                torch.cuda.synchronize()
                truth["gradient_bytes"] = tensor_bytes(p.grad for p in model.parameters() if p.grad is not None)
                if scaler is not None:
                    scaler.step(opt)
                    scaler.update()
                else:
                    opt.step()
                opt.zero_grad(set_to_none=True)
                del loss
            del x
        truth["steps"].append({"start_us": start, "end_us": now_us(torch), "batch": b, "size": s})
    if opt is not None:
        truth["optimizer_state_bytes"] = optimizer_state_bytes(opt)
    if scaler is not None:
        truth["grad_scaler_bytes"] = tensor_bytes(t for t in vars(scaler).values() if torch.is_tensor(t))
    truth["allocated_at_end"] = torch.cuda.memory_allocated()
    torch.cuda.memory._dump_snapshot(f"{out}/{case}.pickle")
    with open(f"{out}/{case}.memory_stats.json", "w") as f:
        json.dump(torch.cuda.memory_stats(), f, indent=1, sort_keys=True)
    with open(f"{out}/{case}.truth.json", "w") as f:
        json.dump(truth, f, indent=1)
    print(json.dumps({k: v for k, v in truth.items() if k != "steps"}), flush=True)


def main(out):
    os.makedirs(out, exist_ok=True)
    for case in CASES:
        t0 = time.time()
        p = subprocess.run([sys.executable, HERE, "worker", out, case], capture_output=True, text=True)
        print(f"== {case} rc={p.returncode} {time.time() - t0:.1f}s", flush=True)
        print(p.stdout[-3000:], p.stderr[-3000:], flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        worker(sys.argv[2], sys.argv[3])
    else:
        main(sys.argv[2])
