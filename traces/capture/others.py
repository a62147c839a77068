"""Training and eval code written the way other people write it, for memlens' anatomy on code it
did not shape: a course assignment's hand-written LM and AdamW, a one-step profile, a forward +
backward benchmark, eval loops, Lightning, FSDP2 on one GPU, torch.compile max-autotune, a whole
step in a CUDA graph, a ConvNeXt that runs out of memory in its first forward. Each case runs in a
fresh process, records the allocator's history (`stacks="python"`, `max_entries` bounded), and
writes `NAME.pickle.gz`, `NAME.memory_stats.json` (`torch.cuda.memory_stats()` right after the
dump) and `NAME.truth.json`: what the script counted from its live objects (parameter, buffer,
gradient and optimizer-state bytes on the GPU, each phase's end with the gradient and state bytes
then, the phase in which the peak was reached). Where weights exist before the recording starts,
the peak counters are reset at its start (`peak_stats_reset_at_record_start`), so
`peak_allocated_bytes` and the counters' peaks are those of the recorded window.

Cases
  course_adamw_zeros     a course-assignment Transformer LM (own Linear/Embedding/RMSNorm/RoPE/
                         SwiGLU/attention modules, hand-written softmax and cross entropy, gradient
                         clipping), vocab 8000, d_model 512, 4 layers, batch 16 × 256, a hand-written
                         `AdamW(torch.optim.Optimizer)` whose state is `torch.zeros_like(p)` made
                         lazily in the first step, updated in place; 3 warm-up steps, then 3 recorded
  course_adamw_remade    the same, the AdamW re-making m and v each step (`state["m"] = b1 * m + ...`)
  one_step_profile       an nn.TransformerEncoder classifier built and moved before the recording,
                         then one forward, backward and torch.optim.AdamW step recorded; no zero_grad
  fwd_bwd_bench          timm vit_small_patch16_224, input made before the recording, 5 iterations of
                         `model(x).sum().backward(); model.zero_grad(set_to_none=True)`, no optimizer
  eval_loop              a Hugging Face Llama from a config in bf16, eval loop of 6 batches under
                         torch.no_grad() (loss.item() per batch; `out` kept until the next batch)
  eval_inference_mode    the same under torch.inference_mode()
  lightning_fit          a LightningModule GPT, Trainer(max_steps=4, ...).fit, recording from
                         on_train_start, dumped after fit (Lightning's teardown moves it to the CPU)
  fsdp2_one_gpu          fully_shard on each block and the root, world size 1 over NCCL, AdamW, 3 steps
  compile_max_autotune   an MLP under torch.compile(mode="max-autotune"), AdamW, 4 steps, recorded from
                         before the first compiled call (falls back to max-autotune-no-cudagraphs)
  cuda_graph_step        forward, backward and capturable AdamW step captured with torch.cuda.graph
                         after a side-stream warm-up; recording from before the capture, 3 replays
  cuda_graph_replay_only the same, recording only around the 3 replays
  cnn_first_forward_oom  torchvision convnext_tiny, AdamW, batch 256 × 224² under a 6 GiB cap: OOM in
                         the first forward, dumped in the except block; then a binary search of fresh
                         processes (`cnn_try BATCH`) for the largest batch whose whole step fits
  resnet_first_forward_oom  the same with torchvision resnet50 (SGD momentum, as the ImageNet recipe)
  unet_first_forward_oom    the same with a hand-written 4-level U-Net (as a course writes it), Adam,
                         batch 64 × 256² segmentation masks, under the same cap
Run (device tool, repository root): traces/capture/others.sh
"""
import gzip
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time

HERE = os.path.abspath(__file__)
CASES = ["course_adamw_zeros", "course_adamw_remade", "one_step_profile", "fwd_bwd_bench", "eval_loop",
         "eval_inference_mode", "fsdp2_one_gpu", "cuda_graph_step", "cuda_graph_replay_only", "lightning_fit",
         "cnn_first_forward_oom", "compile_max_autotune", "resnet_first_forward_oom", "unet_first_forward_oom"]
TIMEOUTS = {"cnn_first_forward_oom": 240, "resnet_first_forward_oom": 240, "unet_first_forward_oom": 240,
            "compile_max_autotune": int(os.environ.get("OTHERS_COMPILE_TIMEOUT_S", "160")), "lightning_fit": 150}
# the CNN whose first forward runs out under the cap, by case: (model, requested batch, image side)
CNN_OF_CASE = {"cnn_first_forward_oom": ("convnext_tiny", 256, 224), "resnet_first_forward_oom": ("resnet50", 256, 224),
               "unet_first_forward_oom": ("unet", 64, 256)}
CAP_BYTES = 6 * 2**30


# ---------------------------------------------------------------- counting and recording helpers

def now_us():
    import torch

    torch.cuda.synchronize()
    return int(time.time() * 1e6)


def local(t):
    return t.to_local() if type(t).__name__ == "DTensor" else t


def cuda_bytes(ts):
    total = 0
    for t in ts:
        if t is None or not hasattr(t, "is_cuda"):
            continue
        t = local(t)
        if t.is_cuda:
            total += t.numel() * t.element_size()
    return total


def grad_bytes(params):
    return cuda_bytes(p.grad for p in params)


def state_bytes(opt):
    import torch

    if opt is None:
        return 0
    return sum(cuda_bytes(v for v in st.values() if torch.is_tensor(v)) for st in opt.state.values())


def state_cpu_tensors(opt):
    import torch

    if opt is None:
        return 0
    return sum(1 for st in opt.state.values() for v in st.values() if torch.is_tensor(v) and not local(v).is_cuda)


def model_truth(model, truth):
    params = list(model.parameters())
    truth["parameters"] = sum(local(p).numel() for p in params)
    truth["parameter_bytes"] = cuda_bytes(params)
    truth["buffer_bytes"] = cuda_bytes(model.buffers())
    truth["parameter_dtypes"] = sorted({str(p.dtype) for p in params})


class Marks:
    """Each phase's end: time, allocated bytes, the peak so far, gradient and optimizer-state bytes.
    The peak counter only rises, so the phase whose end first shows the final peak holds it."""

    def __init__(self, params, opt=None):
        self.params = list(params)
        self.opt = opt
        self.rows = []
        self.steps = []
        self.mark(None, "record_start")

    def begin(self, step, batch=None, size=None):
        self.steps.append({"step": step, "start_us": now_us(), "end_us": None, "batch": batch, "size": size})

    def end(self):
        self.steps[-1]["end_us"] = now_us()

    def mark(self, step, phase):
        import torch

        self.rows.append({"step": step, "phase": phase, "end_us": now_us(),
                          "allocated_bytes": torch.cuda.memory_allocated(),
                          "peak_so_far": torch.cuda.max_memory_allocated(),
                          "gradient_bytes": grad_bytes(self.params),
                          "optimizer_state_bytes": state_bytes(self.opt)})

    def summary(self):
        import torch

        peak = torch.cuda.max_memory_allocated()
        i = next((k for k, r in enumerate(self.rows) if r["peak_so_far"] >= peak), len(self.rows) - 1)
        cur, prev = self.rows[i], self.rows[max(i - 1, 0)]
        out = {"peak_phase": {"step": cur["step"], "phase": cur["phase"]} if i > 0 else
               {"step": None, "phase": "before the recording (its peak was not passed)"}}
        for key in ("gradient_bytes", "optimizer_state_bytes"):
            lo, hi = sorted((prev[key], cur[key]))
            out[f"{key}_at_peak"] = lo if lo == hi else None
            out[f"{key}_at_peak_range"] = [lo, hi]
        out["phases"] = self.rows
        if self.steps:
            out["steps"] = self.steps
        return out


def start_recording(truth, max_entries=100_000, reset_peak=True):
    import torch

    torch.cuda.synchronize()
    if reset_peak:
        torch.cuda.reset_peak_memory_stats()
    truth["peak_stats_reset_at_record_start"] = reset_peak
    truth["allocated_at_record_start"] = torch.cuda.memory_allocated()
    truth["record_start_us"] = int(time.time() * 1e6)
    truth["max_entries"] = max_entries
    torch.cuda.memory._record_memory_history(max_entries=max_entries, stacks="python")


def finish(out, name, truth, marks=None):
    import torch

    torch.cuda.synchronize()
    if marks is not None:
        truth.update(marks.summary())
    truth["allocated_at_end"] = torch.cuda.memory_allocated()
    truth["reserved_at_end"] = torch.cuda.memory_reserved()
    path = f"{out}/{name}.pickle"
    torch.cuda.memory._dump_snapshot(path)
    stats = torch.cuda.memory_stats()
    torch.cuda.memory._record_memory_history(enabled=None)
    truth["peak_allocated_bytes"] = stats.get("allocated_bytes.all.peak")
    truth["peak_requested_bytes"] = stats.get("requested_bytes.all.peak")
    truth["peak_reserved_bytes"] = stats.get("reserved_bytes.all.peak")
    with open(path, "rb") as f, gzip.open(path + ".gz", "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    os.remove(path)
    with open(f"{out}/{name}.memory_stats.json", "w") as f:
        json.dump(stats, f, indent=1, sort_keys=True)
    with open(f"{out}/{name}.truth.json", "w") as f:
        json.dump(truth, f, indent=1)
    print(json.dumps({k: v for k, v in truth.items() if k not in ("phases", "steps", "attempts")}), flush=True)


def base_truth(case):
    import torch

    return {"case": case, "torch": torch.__version__, "device": torch.cuda.get_device_name(0),
            "total_memory": torch.cuda.get_device_properties(0).total_memory}


# ---------------------------------------------------------------- 1, 2: a course assignment

def course_model():
    """A CS336-style Transformer LM, each piece hand-written as the assignment asks."""
    import torch
    import torch.nn as nn

    class Linear(nn.Module):
        def __init__(self, in_features, out_features, device=None, dtype=None):
            super().__init__()
            std = math.sqrt(2.0 / (in_features + out_features))
            w = torch.empty(out_features, in_features, device=device, dtype=dtype)
            nn.init.trunc_normal_(w, mean=0.0, std=std, a=-3 * std, b=3 * std)
            self.weight = nn.Parameter(w)

        def forward(self, x):
            return x @ self.weight.T

    class Embedding(nn.Module):
        def __init__(self, num_embeddings, embedding_dim, device=None, dtype=None):
            super().__init__()
            w = torch.empty(num_embeddings, embedding_dim, device=device, dtype=dtype)
            nn.init.trunc_normal_(w, mean=0.0, std=1.0, a=-3.0, b=3.0)
            self.weight = nn.Parameter(w)

        def forward(self, token_ids):
            return self.weight[token_ids]

    class RMSNorm(nn.Module):
        def __init__(self, d_model, eps=1e-5, device=None, dtype=None):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(d_model, device=device, dtype=dtype))

        def forward(self, x):
            in_dtype = x.dtype
            x = x.to(torch.float32)
            rms = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
            return (x / rms * self.weight).to(in_dtype)

    def silu(x):
        return x * torch.sigmoid(x)

    class SwiGLU(nn.Module):
        def __init__(self, d_model, d_ff):
            super().__init__()
            self.w1 = Linear(d_model, d_ff)
            self.w2 = Linear(d_ff, d_model)
            self.w3 = Linear(d_model, d_ff)

        def forward(self, x):
            return self.w2(silu(self.w1(x)) * self.w3(x))

    def softmax(x, dim):
        x = x - x.max(dim=dim, keepdim=True).values
        e = torch.exp(x)
        return e / e.sum(dim=dim, keepdim=True)

    def scaled_dot_product_attention(Q, K, V, mask=None):
        d_k = Q.shape[-1]
        scores = Q @ K.transpose(-2, -1) / math.sqrt(d_k)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return softmax(scores, dim=-1) @ V

    class RotaryPositionalEmbedding(nn.Module):
        def __init__(self, theta, d_k, max_seq_len, device=None):
            super().__init__()
            inv = 1.0 / (theta ** (torch.arange(0, d_k, 2, device=device).float() / d_k))
            ang = torch.outer(torch.arange(max_seq_len, device=device).float(), inv)
            self.register_buffer("cos", torch.cos(ang), persistent=False)
            self.register_buffer("sin", torch.sin(ang), persistent=False)

        def forward(self, x, token_positions):
            cos = self.cos[token_positions]
            sin = self.sin[token_positions]
            x1, x2 = x[..., 0::2], x[..., 1::2]
            return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)

    class MultiHeadSelfAttention(nn.Module):
        def __init__(self, d_model, num_heads, max_seq_len, theta):
            super().__init__()
            self.num_heads = num_heads
            self.d_k = d_model // num_heads
            self.q_proj = Linear(d_model, d_model)
            self.k_proj = Linear(d_model, d_model)
            self.v_proj = Linear(d_model, d_model)
            self.output_proj = Linear(d_model, d_model)
            self.rope = RotaryPositionalEmbedding(theta, self.d_k, max_seq_len)

        def forward(self, x):
            b, s, d = x.shape
            q = self.q_proj(x).view(b, s, self.num_heads, self.d_k).transpose(1, 2)
            k = self.k_proj(x).view(b, s, self.num_heads, self.d_k).transpose(1, 2)
            v = self.v_proj(x).view(b, s, self.num_heads, self.d_k).transpose(1, 2)
            positions = torch.arange(s, device=x.device)
            q = self.rope(q, positions)
            k = self.rope(k, positions)
            mask = torch.tril(torch.ones(s, s, dtype=torch.bool, device=x.device))
            out = scaled_dot_product_attention(q, k, v, mask)
            return self.output_proj(out.transpose(1, 2).contiguous().view(b, s, d))

    class TransformerBlock(nn.Module):
        def __init__(self, d_model, num_heads, d_ff, max_seq_len, theta):
            super().__init__()
            self.ln1 = RMSNorm(d_model)
            self.attn = MultiHeadSelfAttention(d_model, num_heads, max_seq_len, theta)
            self.ln2 = RMSNorm(d_model)
            self.ffn = SwiGLU(d_model, d_ff)

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.ffn(self.ln2(x))

    class TransformerLM(nn.Module):
        def __init__(self, vocab_size, context_length, d_model, num_layers, num_heads, d_ff, rope_theta):
            super().__init__()
            self.token_embeddings = Embedding(vocab_size, d_model)
            self.layers = nn.ModuleList(TransformerBlock(d_model, num_heads, d_ff, context_length, rope_theta)
                                        for _ in range(num_layers))
            self.ln_final = RMSNorm(d_model)
            self.lm_head = Linear(d_model, vocab_size)

        def forward(self, in_indices):
            x = self.token_embeddings(in_indices)
            for layer in self.layers:
                x = layer(x)
            return self.lm_head(self.ln_final(x))

    return TransformerLM(vocab_size=8000, context_length=256, d_model=512, num_layers=4, num_heads=8,
                         d_ff=1344, rope_theta=10000.0)


def course_optimizers():
    import torch

    class AdamW(torch.optim.Optimizer):
        def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
            if lr < 0:
                raise ValueError(f"Invalid learning rate: {lr}")
            defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}
            super().__init__(params, defaults)

        def step(self, closure=None):
            loss = None if closure is None else closure()
            for group in self.param_groups:
                lr = group["lr"]
                beta1, beta2 = group["betas"]
                eps = group["eps"]
                wd = group["weight_decay"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state[p]
                    if len(state) == 0:
                        state["t"] = 0
                        state["m"] = torch.zeros_like(p)
                        state["v"] = torch.zeros_like(p)
                    grad = p.grad.data
                    m, v = state["m"], state["v"]
                    t = state["t"] + 1
                    m.mul_(beta1).add_(grad, alpha=1 - beta1)
                    v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                    alpha_t = lr * math.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)
                    p.data.addcdiv_(m, v.sqrt().add_(eps), value=-alpha_t)
                    p.data.mul_(1 - lr * wd)
                    state["t"] = t
            return loss

    class AdamWRemade(torch.optim.Optimizer):
        """The same update written as the formulas read: m and v are new tensors every step."""

        def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
            defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}
            super().__init__(params, defaults)

        def step(self, closure=None):
            loss = None if closure is None else closure()
            for group in self.param_groups:
                lr = group["lr"]
                beta1, beta2 = group["betas"]
                eps = group["eps"]
                wd = group["weight_decay"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state[p]
                    if len(state) == 0:
                        state["t"] = 0
                        state["m"] = torch.zeros_like(p)
                        state["v"] = torch.zeros_like(p)
                    t = state["t"] + 1
                    grad = p.grad.data
                    state["m"] = beta1 * state["m"] + (1 - beta1) * grad
                    state["v"] = beta2 * state["v"] + (1 - beta2) * grad ** 2
                    alpha_t = lr * math.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)
                    p.data -= alpha_t * state["m"] / (torch.sqrt(state["v"]) + eps)
                    p.data -= lr * wd * p.data
                    state["t"] = t
            return loss

    return AdamW, AdamWRemade


def course(out, case):
    import numpy as np
    import torch

    def cross_entropy(logits, targets):
        logits = logits - logits.max(dim=-1, keepdim=True).values
        log_sum_exp = torch.log(torch.exp(logits).sum(dim=-1))
        return (log_sum_exp - logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)).mean()

    def gradient_clipping(parameters, max_l2_norm, eps=1e-6):
        grads = [p.grad for p in parameters if p.grad is not None]
        total = torch.sqrt(sum((g.detach() ** 2).sum() for g in grads))
        if total > max_l2_norm:
            for g in grads:
                g.mul_(max_l2_norm / (total + eps))

    def get_batch(dataset, batch_size, context_length, device):
        starts = np.random.randint(0, len(dataset) - context_length, size=batch_size)
        x = np.stack([dataset[i:i + context_length] for i in starts]).astype(np.int64)
        y = np.stack([dataset[i + 1:i + 1 + context_length] for i in starts]).astype(np.int64)
        return torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)

    torch.manual_seed(0)
    np.random.seed(0)
    device = "cuda"
    dataset = np.random.randint(0, 8000, size=2_000_000).astype(np.uint16)
    model = course_model().to(device)
    AdamW, AdamWRemade = course_optimizers()
    opt_cls = AdamW if case == "course_adamw_zeros" else AdamWRemade
    optimizer = opt_cls(model.parameters(), lr=3e-4, weight_decay=0.1)
    truth = base_truth(case)
    truth.update({"optimizer": f"hand-written {opt_cls.__name__} (torch.optim.Optimizer subclass)",
                  "optimizer_state_made_by": "torch.zeros_like(p) on the first step, updated in place"
                  if case == "course_adamw_zeros" else
                  "torch.zeros_like(p) on the first step, then new m and v tensors every step",
                  "warmup_steps_before_recording": 3, "recorded_steps": 3, "batch": 16, "context_length": 256,
                  "weights_loaded_before_recording": True, "optimizer_state_exists_before_recording": True,
                  "zero_grad": "optimizer.zero_grad() (set_to_none=True) at the start of each step",
                  "note": "logits and loss of the previous step stay referenced until reassigned in the next"})
    model_truth(model, truth)
    marks = None
    for it in range(6):
        if it == 3:
            start_recording(truth)
            marks = Marks(model.parameters(), optimizer)
        if marks:
            marks.begin(it, 16, 256)
        x, y = get_batch(dataset, 16, 256, device)
        optimizer.zero_grad()
        if marks:
            marks.mark(it, "zero_grad")
        logits = model(x)
        loss = cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        if marks:
            marks.mark(it, "forward")
        loss.backward()
        if marks:
            marks.mark(it, "backward")
            truth["gradient_bytes"] = grad_bytes(model.parameters())
        gradient_clipping(model.parameters(), 1.0)
        if marks:
            marks.mark(it, "clip")
        optimizer.step()
        if marks:
            marks.mark(it, "step")
            marks.end()
        print(f"iter {it} loss {loss.item():.4f}", flush=True)
    truth["optimizer_state_bytes"] = state_bytes(optimizer)
    truth["gradient_bytes_at_end"] = grad_bytes(model.parameters())
    finish(out, case, truth, marks)


# ---------------------------------------------------------------- 3: one step under a profiler's eye

def one_step_profile(out, case):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class TextClassifier(nn.Module):
        def __init__(self, vocab_size=32000, d_model=512, nhead=8, num_layers=6, num_classes=2, max_len=512):
            super().__init__()
            self.embedding = nn.Embedding(vocab_size, d_model)
            self.pos_embedding = nn.Embedding(max_len, d_model)
            layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=2048, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, num_layers=num_layers)
            self.classifier = nn.Linear(d_model, num_classes)

        def forward(self, input_ids):
            pos = torch.arange(input_ids.size(1), device=input_ids.device)
            x = self.embedding(input_ids) + self.pos_embedding(pos)
            x = self.encoder(x)
            return self.classifier(x.mean(dim=1))

    torch.manual_seed(0)
    device = torch.device("cuda")
    model = TextClassifier().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    truth = base_truth(case)
    truth.update({"optimizer": "torch.optim.AdamW (defaults: foreach)", "batch": 32, "seq": 256,
                  "weights_loaded_before_recording": True, "optimizer_state_exists_before_recording": False,
                  "recorded": "one forward, backward and optimizer.step(); no zero_grad; batch made inside"})
    model_truth(model, truth)
    start_recording(truth)
    marks = Marks(model.parameters(), optimizer)
    marks.begin(0, 32, 256)
    input_ids = torch.randint(0, 32000, (32, 256), device=device)
    labels = torch.randint(0, 2, (32,), device=device)
    logits = model(input_ids)
    loss = F.cross_entropy(logits, labels)
    marks.mark(0, "forward")
    loss.backward()
    marks.mark(0, "backward")
    optimizer.step()
    marks.mark(0, "step")
    marks.end()
    truth["gradient_bytes"] = grad_bytes(model.parameters())
    truth["optimizer_state_bytes"] = state_bytes(optimizer)
    truth["optimizer_state_cpu_tensors"] = state_cpu_tensors(optimizer)
    finish(out, case, truth, marks)


# ---------------------------------------------------------------- 4: a forward + backward benchmark

def fwd_bwd_bench(out, case):
    import timm
    import torch

    torch.manual_seed(0)
    model = timm.create_model("vit_small_patch16_224", pretrained=False).cuda()
    x = torch.randn(64, 3, 224, 224, device="cuda")
    truth = base_truth(case)
    truth.update({"model": "timm vit_small_patch16_224 (random weights)", "batch": 64, "optimizer": "none",
                  "iterations": 5, "zero_grad": "model.zero_grad(set_to_none=True) after each backward",
                  "weights_loaded_before_recording": True, "input_made_before_recording": True,
                  "timm": timm.__version__})
    model_truth(model, truth)
    start_recording(truth)
    marks = Marks(model.parameters())
    times = []
    for i in range(5):
        marks.begin(i, 64, 224)
        t0 = time.perf_counter()
        loss = model(x).sum()
        marks.mark(i, "forward")
        loss.backward()
        marks.mark(i, "backward")
        truth["gradient_bytes_after_backward"] = grad_bytes(model.parameters())
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        marks.mark(i, "zero_grad")
        marks.end()
    print("iteration ms", [round(t * 1e3, 1) for t in times], flush=True)
    truth["gradient_bytes"] = grad_bytes(model.parameters())
    truth["optimizer_state_bytes"] = 0
    finish(out, case, truth, marks)


# ---------------------------------------------------------------- 5: eval loops

def cache_bytes(cache):
    try:
        return sum(cuda_bytes([layer.keys, layer.values]) for layer in cache.layers)
    except Exception:
        try:
            return sum(cuda_bytes(kv) for kv in cache)
        except Exception:
            return None


def eval_loop(out, case):
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                         num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=2048)
    model = LlamaForCausalLM(config).to(device="cuda", dtype=torch.bfloat16)
    model.eval()
    truth = base_truth(case)
    grad_mode = "torch.no_grad()" if case == "eval_loop" else "torch.inference_mode()"
    truth.update({"model": "transformers LlamaForCausalLM from a config, random weights, bf16",
                  "transformers": transformers.__version__, "batches": 6, "batch": 8, "seq": 512,
                  "grad_mode": grad_mode, "optimizer": "none", "weights_loaded_before_recording": True,
                  "use_cache": bool(model.config.use_cache),
                  "note": "model(input_ids, labels=input_ids) per batch; `out` (logits, past_key_values) "
                          "stays referenced until the next batch's is made"})
    model_truth(model, truth)
    start_recording(truth)
    marks = Marks(model.parameters())
    ctx = torch.no_grad if case == "eval_loop" else torch.inference_mode
    total_loss, n = 0.0, 0
    with ctx():
        for i in range(6):
            marks.begin(i, 8, 512)
            input_ids = torch.randint(0, 32000, (8, 512)).to("cuda")
            out_ = model(input_ids=input_ids, labels=input_ids)
            total_loss += out_.loss.item()
            n += 1
            marks.mark(i, "forward")
            marks.end()
            truth["logits_bytes_per_batch"] = cuda_bytes([out_.logits])
            truth["kv_cache_bytes_per_batch"] = cache_bytes(out_.past_key_values) if out_.past_key_values is not None else 0
    print("mean loss", total_loss / n, flush=True)
    truth["gradient_bytes"] = 0
    truth["optimizer_state_bytes"] = 0
    finish(out, case, truth, marks)


# ---------------------------------------------------------------- 6: Lightning

def lightning_fit(out, case):
    import lightning as L
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    truth = base_truth(case)
    truth["lightning"] = L.__version__
    state = {}

    class LitGPT(L.LightningModule):
        def __init__(self, vocab_size=8192, d_model=384, n_head=6, n_layer=4, block_size=256, lr=3e-4):
            super().__init__()
            self.save_hyperparameters()
            self.tok_emb = nn.Embedding(vocab_size, d_model)
            self.pos_emb = nn.Embedding(block_size, d_model)
            layer = nn.TransformerEncoderLayer(d_model, n_head, 4 * d_model, dropout=0.1, activation="gelu",
                                               batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(layer, n_layer, enable_nested_tensor=False)
            self.ln_f = nn.LayerNorm(d_model)
            self.head = nn.Linear(d_model, vocab_size, bias=False)
            self.register_buffer("causal_mask", nn.Transformer.generate_square_subsequent_mask(block_size),
                                 persistent=False)

        def forward(self, idx):
            t = idx.size(1)
            x = self.tok_emb(idx) + self.pos_emb(torch.arange(t, device=idx.device))
            x = self.blocks(x, mask=self.causal_mask[:t, :t], is_causal=True)
            return self.head(self.ln_f(x))

        def training_step(self, batch, batch_idx):
            x, y = batch
            logits = self(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
            self.log("train_loss", loss, prog_bar=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=0.1)

        def train_dataloader(self):
            data = torch.randint(0, self.hparams.vocab_size, (256, self.hparams.block_size + 1))
            return DataLoader(TensorDataset(data[:, :-1], data[:, 1:]), batch_size=16, shuffle=True)

        # the part added for the capture
        def on_train_start(self):
            model_truth(self, truth)
            truth["optimizer_state_bytes_at_record_start"] = state_bytes(self.trainer.optimizers[0])
            start_recording(truth)
            state["marks"] = Marks(self.parameters(), self.trainer.optimizers[0])
            state["marks"].begin(0, 16, 256)

        def on_train_batch_end(self, outputs, batch, batch_idx):
            m = state["marks"]
            m.mark(batch_idx, "train_batch_end")
            m.end()
            truth["gradient_bytes"] = grad_bytes(self.parameters())
            if batch_idx + 1 < 4:
                m.begin(batch_idx + 1, 16, 256)

        def on_train_end(self):
            opt = self.trainer.optimizers[0]
            truth["optimizer"] = type(opt).__name__
            truth["optimizer_state_bytes"] = state_bytes(opt)
            truth["optimizer_state_cpu_tensors"] = state_cpu_tensors(opt)
            truth["gradient_bytes_at_train_end"] = grad_bytes(self.parameters())
            truth["parameter_bytes_on_gpu_at_train_end"] = cuda_bytes(self.parameters())
            state["marks"].mark(None, "on_train_end")

    torch.manual_seed(0)
    model = LitGPT()
    trainer = L.Trainer(accelerator="gpu", devices=1, max_steps=4, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False)
    trainer.fit(model)
    truth.update({"max_steps": 4, "batch": 16, "seq": 256, "weights_loaded_before_recording": True,
                  "recording": "started in on_train_start, dumped after trainer.fit returned",
                  "parameters_device_after_fit": str(next(model.parameters()).device),
                  "parameter_bytes_on_gpu_after_fit": cuda_bytes(model.parameters()),
                  "optimizer_state_bytes_on_gpu_after_fit": state_bytes(trainer.optimizers[0])
                  if trainer.optimizers else None})
    state["marks"].mark(None, "after_fit")
    finish(out, case, truth, state["marks"])


# ---------------------------------------------------------------- 7: FSDP2 on one GPU

def fsdp2_one_gpu(out, case):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.distributed.fsdp import fully_shard

    class Block(nn.Module):
        def __init__(self, dim, n_heads):
            super().__init__()
            self.n_heads = n_heads
            self.attn_norm = nn.LayerNorm(dim)
            self.wqkv = nn.Linear(dim, 3 * dim, bias=False)
            self.wo = nn.Linear(dim, dim, bias=False)
            self.ffn_norm = nn.LayerNorm(dim)
            self.w1 = nn.Linear(dim, 4 * dim, bias=False)
            self.w2 = nn.Linear(4 * dim, dim, bias=False)

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = self.wqkv(self.attn_norm(x)).view(b, s, 3, self.n_heads, d // self.n_heads).unbind(2)
            a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                               is_causal=True)
            x = x + self.wo(a.transpose(1, 2).reshape(b, s, d))
            return x + self.w2(F.gelu(self.w1(self.ffn_norm(x))))

    class Transformer(nn.Module):
        def __init__(self, vocab_size=8192, dim=512, n_layers=6, n_heads=8, max_seq_len=256):
            super().__init__()
            self.tok_embeddings = nn.Embedding(vocab_size, dim)
            self.pos_embeddings = nn.Embedding(max_seq_len, dim)
            self.layers = nn.ModuleList(Block(dim, n_heads) for _ in range(n_layers))
            self.norm = nn.LayerNorm(dim)
            self.output = nn.Linear(dim, vocab_size, bias=False)

        def forward(self, tokens):
            h = self.tok_embeddings(tokens) + self.pos_embeddings(torch.arange(tokens.size(1), device=tokens.device))
            for layer in self.layers:
                h = layer(h)
            return self.output(self.norm(h))

    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1, init_method="tcp://127.0.0.1:29511")
    torch.manual_seed(0)
    model = Transformer().cuda()
    full_param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    truth = base_truth(case)
    truth.update({"world_size": dist.get_world_size(), "batch": 8, "seq": 256, "recorded_steps": 3,
                  "optimizer": "torch.optim.AdamW", "weights_loaded_before_recording": True,
                  "fully_shard": "each of 6 blocks, then the root; reshard_after_forward default",
                  "unsharded_parameter_bytes": full_param_bytes,
                  "zero_grad": "optimizer.zero_grad() (set_to_none) after each step"})
    model_truth(model, truth)
    truth["sharded_parameter_bytes"] = truth["parameter_bytes"]
    truth["parameter_types"] = sorted({type(p).__name__ for p in model.parameters()})
    start_recording(truth)
    marks = Marks(model.parameters(), optimizer)
    for step in range(3):
        marks.begin(step, 8, 256)
        tokens = torch.randint(0, 8192, (8, 257), device="cuda")
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        marks.mark(step, "forward")
        loss.backward()
        marks.mark(step, "backward")
        truth["gradient_bytes"] = grad_bytes(model.parameters())
        optimizer.step()
        marks.mark(step, "step")
        optimizer.zero_grad()
        marks.mark(step, "zero_grad")
        marks.end()
        print(f"step {step} loss {loss.item():.4f}", flush=True)
    truth["optimizer_state_bytes"] = state_bytes(optimizer)
    truth["optimizer_state_cpu_tensors"] = state_cpu_tensors(optimizer)
    finish(out, case, truth, marks)
    dist.destroy_process_group()


# ---------------------------------------------------------------- 8: torch.compile max-autotune

def compile_max_autotune(out, case):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    mode = os.environ.get("OTHERS_COMPILE_MODE", "max-autotune")

    class MLP(nn.Module):
        def __init__(self, d_in=1024, hidden=4096, d_out=1024):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(),
                                     nn.LayerNorm(hidden), nn.Linear(hidden, d_out))

        def forward(self, x):
            return self.net(x)

    torch.manual_seed(0)
    model = MLP().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    compiled = torch.compile(model, mode=mode)
    x = torch.randn(512, 1024, device="cuda")
    y = torch.randn(512, 1024, device="cuda")
    truth = base_truth(case)
    truth.update({"compile_mode": mode, "fallback_from": os.environ.get("OTHERS_FALLBACK_FROM"),
                  "batch": 512, "recorded_steps": 4, "optimizer": "torch.optim.AdamW (eager)",
                  "weights_loaded_before_recording": True, "input_made_before_recording": True,
                  "recording": "from before the first compiled call (compilation and autotuning inside)"})
    model_truth(model, truth)
    start_recording(truth, max_entries=200_000)
    marks = Marks(model.parameters(), optimizer)
    step_s = []
    for step in range(4):
        marks.begin(step, 512, 1024)
        t0 = time.time()
        out_ = compiled(x)
        loss = F.mse_loss(out_, y)
        marks.mark(step, "forward")
        loss.backward()
        marks.mark(step, "backward")
        truth["gradient_bytes"] = grad_bytes(model.parameters())
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        marks.mark(step, "step")
        marks.end()
        step_s.append(round(time.time() - t0, 2))
        print(f"step {step} {step_s[-1]} s loss {loss.item():.4f}", flush=True)
    truth["step_seconds"] = step_s
    truth["optimizer_state_bytes"] = state_bytes(optimizer)
    truth["zero_grad"] = "optimizer.zero_grad(set_to_none=True) after each step"
    finish(out, case, truth, marks)


# ---------------------------------------------------------------- 9: a whole step in a CUDA graph

def cuda_graph_step(out, case):
    import torch

    torch.manual_seed(0)
    N, D_in, H, D_out = 512, 1024, 4096, 1024
    model = torch.nn.Sequential(torch.nn.Linear(D_in, H), torch.nn.ReLU(), torch.nn.Dropout(p=0.1),
                                torch.nn.Linear(H, H), torch.nn.ReLU(), torch.nn.Linear(H, D_out)).cuda()
    loss_fn = torch.nn.MSELoss()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=True)
    static_input = torch.randn(N, D_in, device="cuda")
    static_target = torch.randn(N, D_out, device="cuda")
    truth = base_truth(case)
    truth.update({"optimizer": "torch.optim.AdamW(capturable=True)", "batch": N, "replays": 3,
                  "weights_loaded_before_recording": True,
                  "recording": "from after the side-stream warm-up, before torch.cuda.graph capture"
                  if case == "cuda_graph_step" else "only around the 3 replays (graph captured before)"})
    model_truth(model, truth)

    def record():
        start_recording(truth)
        return Marks(model.parameters(), optimizer)

    # warm-up on a side stream, as in PyTorch's CUDA graphs notes
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(3):
            optimizer.zero_grad(set_to_none=True)
            y_pred = model(static_input)
            loss = loss_fn(y_pred, static_target)
            loss.backward()
            optimizer.step()
    torch.cuda.current_stream().wait_stream(s)
    truth["optimizer_state_bytes_after_warmup"] = state_bytes(optimizer)
    marks = record() if case == "cuda_graph_step" else None
    g = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    if marks:
        marks.mark(None, "zero_grad_before_capture")
    with torch.cuda.graph(g):
        static_y_pred = model(static_input)
        static_loss = loss_fn(static_y_pred, static_target)
        static_loss.backward()
        optimizer.step()
    truth["gradient_bytes"] = grad_bytes(model.parameters())
    truth["graph_pool"] = list(g.pool())
    truth["gradients_allocated_during_capture"] = True
    if marks:
        marks.mark(None, "capture")
    else:
        marks = record()
    for i in range(3):
        marks.begin(i, N, D_in)
        data = torch.randn(N, D_in, device="cuda")
        target = torch.randn(N, D_out, device="cuda")
        static_input.copy_(data)
        static_target.copy_(target)
        g.replay()
        marks.mark(i, "replay")
        marks.end()
        print(f"replay {i} loss {static_loss.item():.4f}", flush=True)
    truth["optimizer_state_bytes"] = state_bytes(optimizer)
    truth["static_input_bytes"] = cuda_bytes([static_input, static_target])
    finish(out, case, truth, marks)


# ---------------------------------------------------------------- 10: ConvNeXt OOM under a cap

def unet(torch):
    """A 4-level U-Net as a course assignment writes it: two 3×3 conv + BatchNorm + ReLU per level,
    max-pool down, transposed conv up, skip connections concatenated, 2 output classes."""
    nn = torch.nn

    def double_conv(c_in, c_out):
        return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out),
                             nn.ReLU(inplace=True), nn.Conv2d(c_out, c_out, 3, padding=1, bias=False),
                             nn.BatchNorm2d(c_out), nn.ReLU(inplace=True))

    class UNet(nn.Module):
        def __init__(self, widths=(64, 128, 256, 512), bottom=1024, classes=2):
            super().__init__()
            self.downs = nn.ModuleList()
            c = 3
            for w in widths:
                self.downs.append(double_conv(c, w))
                c = w
            self.bottleneck = double_conv(widths[-1], bottom)
            self.ups = nn.ModuleList()
            self.up_convs = nn.ModuleList()
            c = bottom
            for w in reversed(widths):
                self.ups.append(nn.ConvTranspose2d(c, w, 2, stride=2))
                self.up_convs.append(double_conv(2 * w, w))
                c = w
            self.head = nn.Conv2d(widths[0], classes, 1)

        def forward(self, x):
            skips = []
            for down in self.downs:
                x = down(x)
                skips.append(x)
                x = torch.nn.functional.max_pool2d(x, 2)
            x = self.bottleneck(x)
            for up, conv, skip in zip(self.ups, self.up_convs, reversed(skips)):
                x = conv(torch.cat([skip, up(x)], dim=1))
            return self.head(x)

    return UNet()


def cnn_setup(batch, arch="convnext_tiny", side=224):
    import torch
    import torchvision

    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(CAP_BYTES / total)
    torch.manual_seed(0)
    if arch == "unet":
        model = unet(torch).cuda()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
        labels = torch.randint(0, 2, (batch, side, side))
    else:
        model = getattr(torchvision.models, arch)().cuda()
        if arch == "resnet50":
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
        else:
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
        labels = torch.randint(0, 1000, (batch,))
    model.train()
    criterion = torch.nn.CrossEntropyLoss()
    images = torch.randn(batch, 3, side, side)
    return model, optimizer, criterion, images, labels, total


def cnn_try(batch, case="cnn_first_forward_oom"):
    import torch

    arch, _, side = CNN_OF_CASE[case]
    model, optimizer, criterion, images, labels, _ = cnn_setup(batch, arch, side)
    try:
        images, labels = images.cuda(non_blocking=True), labels.cuda(non_blocking=True)
        output = model(images)
        loss = criterion(output, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        torch.cuda.synchronize()
    except torch.OutOfMemoryError:
        print(f"batch {batch}: OOM", flush=True)
        sys.exit(3)
    print(f"batch {batch}: fits, peak {torch.cuda.max_memory_allocated()}", flush=True)
    sys.exit(0)


def cnn_first_forward_oom(out, case):
    import torch
    import torchvision

    arch, batch, side = CNN_OF_CASE[case]
    model, optimizer, criterion, images, labels, total = cnn_setup(batch, arch, side)
    truth = base_truth(case)
    truth.update({"model": "hand-written 4-level U-Net (random weights)" if arch == "unet"
                  else f"torchvision {arch} (random weights)", "optimizer": type(optimizer).__module__ + "." +
                  type(optimizer).__name__, "torchvision": torchvision.__version__, "requested_batch": batch,
                  "image_size": side,
                  "cap_bytes": CAP_BYTES, "cap_fraction": CAP_BYTES / total,
                  "weights_loaded_before_recording": True,
                  "recording": "from before the batch's copy to the GPU and the first forward"})
    model_truth(model, truth)
    start_recording(truth)
    marks = Marks(model.parameters(), optimizer)
    phase = "input_to_gpu"
    marks.begin(0, batch, side)
    try:
        images, labels = images.cuda(non_blocking=True), labels.cuda(non_blocking=True)
        phase = "forward"
        output = model(images)
        loss = criterion(output, labels)
        phase = "backward"
        optimizer.zero_grad()
        loss.backward()
        phase = "step"
        optimizer.step()
        torch.cuda.synchronize()
        truth["oom"] = False
    except torch.OutOfMemoryError as e:
        truth["oom"] = True
        truth["failed_phase"] = phase
        truth["oom_message"] = str(e).splitlines()[0] if str(e) else repr(e)
        truth["allocated_at_oom"] = torch.cuda.memory_allocated()
        truth["gradient_bytes"] = grad_bytes(model.parameters())
        truth["optimizer_state_bytes"] = state_bytes(optimizer)
        truth["dumped"] = "in the except block (the traceback still holds the forward's tensors)"
        marks.mark(0, f"oom_in_{phase}")
        finish(out, case, truth, marks)
    if not truth["oom"]:
        truth["gradient_bytes"] = grad_bytes(model.parameters())
        truth["optimizer_state_bytes"] = state_bytes(optimizer)
        marks.mark(0, "step")
        finish(out, case, truth, marks)
    del model, optimizer, images, labels
    torch.cuda.empty_cache()
    # the largest batch whose one whole step fits under the same cap, each try a fresh process
    lo, hi, attempts = 0, batch, []
    while hi - lo > 1:
        mid = (lo + hi) // 2
        t0 = time.time()
        p = subprocess.run([sys.executable, HERE, "cnn_try", str(mid), case], capture_output=True, text=True, timeout=90)
        fits = p.returncode == 0
        if p.returncode not in (0, 3):
            print(f"cnn_try {mid} rc={p.returncode}\n{p.stderr[-2000:]}", flush=True)
        attempts.append({"batch": mid, "fits": fits, "rc": p.returncode, "seconds": round(time.time() - t0, 1),
                         "out": p.stdout.strip()[-200:]})
        print(attempts[-1], flush=True)
        lo, hi = (mid, hi) if fits else (lo, mid)
    truth["largest_fitting_batch"] = lo
    truth["smallest_failing_batch"] = hi
    truth["attempts"] = attempts
    truth["search"] = (f"binary search over 1..{batch}, each try a fresh process: forward, backward, "
                       f"{truth['optimizer']} step")
    with open(f"{out}/{case}.truth.json", "w") as f:
        json.dump(truth, f, indent=1)
    print("largest_fitting_batch", lo, flush=True)


# ---------------------------------------------------------------- driver

WORKERS = {"course_adamw_zeros": course, "course_adamw_remade": course, "one_step_profile": one_step_profile,
           "fwd_bwd_bench": fwd_bwd_bench, "eval_loop": eval_loop, "eval_inference_mode": eval_loop,
           "lightning_fit": lightning_fit, "fsdp2_one_gpu": fsdp2_one_gpu,
           "compile_max_autotune": compile_max_autotune, "cuda_graph_step": cuda_graph_step,
           "cuda_graph_replay_only": cuda_graph_step, "cnn_first_forward_oom": cnn_first_forward_oom,
           "resnet_first_forward_oom": cnn_first_forward_oom, "unet_first_forward_oom": cnn_first_forward_oom}


def run_case(out, case, timeout, env=None):
    t0 = time.time()
    p = subprocess.Popen([sys.executable, HERE, "worker", out, case], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True, env=env)
    try:
        text, _ = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        text, _ = p.communicate()
        rc = "timeout"
    print(f"== {case} rc={rc} {time.time() - t0:.1f}s", flush=True)
    print(text[-6000:], flush=True)
    return rc


def pack(out, tarball):
    if not tarball:
        return
    with tarfile.open(tarball + ".tmp", "w:gz") as tar:
        for name in sorted(os.listdir(out)):
            tar.add(os.path.join(out, name), arcname=name)
    os.replace(tarball + ".tmp", tarball)


def main(out, tarball=None, cases=None, budget=540):
    deadline = time.time() + budget
    os.makedirs(out, exist_ok=True)
    info = subprocess.run([sys.executable, "-c", "import torch, torchvision, transformers, timm, lightning;"
                           "print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0),"
                           " torchvision.__version__, transformers.__version__, timm.__version__,"
                           " lightning.__version__)"], capture_output=True, text=True)
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv"],
                         capture_output=True, text=True)
    print("versions:", info.stdout.strip(), info.stderr[-500:], "\n", smi.stdout, flush=True)
    with open(f"{out}/run_info.txt", "w") as f:
        f.write("torch cuda gpu torchvision transformers timm lightning: " + info.stdout + smi.stdout)
    for case in cases or CASES:
        left = deadline - time.time()
        if left < 20:
            print(f"== {case} skipped: {left:.0f}s left", flush=True)
            continue
        rc = run_case(out, case, min(TIMEOUTS.get(case, 100), left))
        if case == "compile_max_autotune" and rc != 0:
            left = deadline - time.time()
            if left > 30:
                print("== compile_max_autotune: falling back to max-autotune-no-cudagraphs", flush=True)
                run_case(out, case, left - 5, dict(os.environ, OTHERS_COMPILE_MODE="max-autotune-no-cudagraphs",
                                                    OTHERS_FALLBACK_FROM=f"max-autotune rc={rc}"))
        pack(out, tarball)


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        WORKERS[sys.argv[3]](sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "cnn_try":
        cnn_try(int(sys.argv[2]), *sys.argv[3:4])
    else:
        main(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None,
             sys.argv[4].split(",") if len(sys.argv) > 4 and sys.argv[4] else None,
             int(os.environ.get("OTHERS_BUDGET_S", "540")))
