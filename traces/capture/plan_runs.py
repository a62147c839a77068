"""Ground truth for `memlens plan` (P22), from Hugging Face `config.json` files
(traces/plan/configs/): nothing is downloaded, every model is built from its config with random
weights by `transformers.AutoModelForCausalLM.from_config`.

1. Parameter counts: each config's model built on the meta device; `sum(p.numel())` over its
   unique parameters, and the parameter names (layer numbers folded) with their shapes.
   → params.json
2. Training runs: a fresh process per run, the allocator's history recorded from before the model
   reaches the GPU, then 3 steps of the loop an HF user writes (`loss = model(input_ids=ids,
   labels=ids).loss; loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)`), AdamW,
   SDPA attention. Variants: bf16 autocast over fp32 weights (the default), activation
   checkpointing (`model.gradient_checkpointing_enable()`), bf16 weights with no autocast, and a
   partly frozen model (input embeddings and the first half of the layers). Each run leaves its
   snapshot, PyTorch's `memory_stats()` and `truth.json` (settings, parameter counts, optimizer
   state bytes, the peaks). → RUN.pickle, RUN.memory_stats.json, RUN.truth.json

Run (device tool, repository root): traces/capture/plan_runs.sh
"""
import concurrent.futures
import glob
import json
import os
import re
import subprocess
import sys

HERE = os.path.abspath(__file__)
CONFIGS = os.path.join(os.path.dirname(HERE), "..", "plan", "configs")


def runs():
    out = []
    for family, seq in (("llama_train", 1024), ("gpt2_train", 1024)):
        for batch in (2, 4, 8):
            for ckpt in (False, True):
                out.append(dict(config=family, batch=batch, seq=seq, checkpointing=ckpt, weights="fp32",
                                autocast="bf16", frozen=False))
        out.append(dict(config=family, batch=4, seq=seq, checkpointing=False, weights="bf16", autocast="none",
                        frozen=False))
        out.append(dict(config=family, batch=4, seq=seq, checkpointing=False, weights="fp32", autocast="bf16",
                        frozen=True))
    for family in ("neox_train", "falcon_train", "gemma_train", "phi_train", "qwen2_train", "mixtral_train"):
        out.append(dict(config=family, batch=4, seq=512, checkpointing=False, weights="fp32", autocast="bf16",
                        frozen=False))
    # A second round (2026-12-07): four more families, a long sequence, other optimizers,
    # fp16 autocast with GradScaler, fp32 without autocast, bf16 weights with checkpointing.
    def more(config, batch, seq, **kw):
        r = dict(config=config, batch=batch, seq=seq, checkpointing=False, weights="fp32", autocast="bf16",
                 frozen=False, optimizer="adamw")
        r.update(kw)
        r["name"] = kw.pop("name", None) or "{}_b{}_s{}".format(config.replace("_train", ""), batch, seq)
        return r
    extra = [
        more("qwen3_train", 4, 512), more("phi3_train", 4, 512), more("gemma2_train", 4, 512),
        more("falcon_mq_train", 4, 512), more("llama_train", 1, 2048),
        more("llama_train", 4, 1024, optimizer="sgd_momentum", name="llama_b4_sgdm"),
        more("llama_train", 4, 1024, optimizer="adafactor", name="llama_b4_adafactor"),
        more("llama_train", 4, 1024, autocast="fp16", name="llama_b4_fp16_scaler"),
        more("llama_train", 2, 1024, autocast="none", name="llama_b2_fp32"),
        more("gpt2_train", 2, 1024, autocast="none", name="gpt2_b2_fp32"),
        more("llama_train", 8, 1024, weights="bf16", autocast="none", checkpointing=True, name="llama_b8_ckpt_bf16w"),
        more("gpt2_train", 4, 1024, weights="bf16", autocast="none", name="gpt2_b4_bf16w_again"),
    ]
    for r in out:
        r["optimizer"] = "adamw"
        r["name"] = "{}_b{}{}{}{}".format(r["config"].replace("_train", ""), r["batch"],
                                          "_ckpt" if r["checkpointing"] else "",
                                          "_bf16w" if r["weights"] == "bf16" else "",
                                          "_frozen" if r["frozen"] else "")
    return out + extra


def round3():
    """P27 (2026-12-07, third round): gradient accumulation, chosen trained layers, LoRA and QLoRA,
    each as people write it (peft's `get_peft_model`, bitsandbytes' 4-bit NF4 with double
    quantisation when it can be imported there)."""
    def r(name, batch=2, seq=1024, **kw):
        d = dict(config="llama_train", batch=batch, seq=seq, checkpointing=False, weights="fp32",
                 autocast="bf16", frozen=False, optimizer="adamw", name=name)
        d.update(kw)
        return d
    return [
        r("llama_b2_accum2", grad_accum=2), r("llama_b2_accum4", grad_accum=4), r("llama_b2_accum8", grad_accum=8),
        r("llama_b4_accum4_ckpt", batch=4, grad_accum=4, checkpointing=True),
        r("llama_b4_train_top2", batch=4, train=["model.layers.6.*", "model.layers.7.*"]),
        r("llama_b4_train_mid_head", batch=4, train=["model.layers.3.*", "lm_head.weight"]),
        r("llama_b4_train_attn", batch=4, train=["*.self_attn.*"]),
        r("llama_b4_lora_qv", batch=4, weights="bf16", autocast="none",
          lora=dict(rank=16, targets=["q_proj", "v_proj"])),
        r("llama_b4_lora_all", batch=4, weights="bf16", autocast="none",
          lora=dict(rank=16, targets=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])),
        r("llama_b4_lora_qv_fp32", batch=4, lora=dict(rank=8, targets=["q_proj", "v_proj"])),
        r("llama_b4_qlora_all", batch=4, weights="nf4", autocast="none",
          lora=dict(rank=16, targets=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])),
    ]


def load(name):
    with open(os.path.join(CONFIGS, name + ".json")) as f:
        return json.load(f)


def config_of(transformers, d):
    d = dict(d)
    return transformers.AutoConfig.for_model(d.pop("model_type"), **d)


def count_params(out):
    import torch
    import transformers

    result = {"transformers": transformers.__version__, "torch": torch.__version__, "configs": {}}
    for path in sorted(glob.glob(os.path.join(CONFIGS, "*.json"))):
        name = os.path.basename(path)[:-5]
        try:
            with torch.device("meta"):
                model = transformers.AutoModelForCausalLM.from_config(config_of(transformers, load(name)))
            shapes = {}
            for pname, p in model.named_parameters():
                key = re.sub(r"\.\d+\.", ".N.", pname)
                shapes.setdefault(key, [list(p.shape), 0])[1] += 1
            result["configs"][name] = {"parameters": sum(p.numel() for p in model.parameters()), "shapes": shapes}
        except Exception as e:  # noqa: BLE001 - the error is the result
            result["configs"][name] = {"error": repr(e)}
        print(name, result["configs"][name].get("parameters", result["configs"][name].get("error")), flush=True)
    with open(os.path.join(out, "params.json"), "w") as f:
        json.dump(result, f, indent=1)


def worker(out, spec):
    spec = json.loads(spec)
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = config_of(transformers, load(spec["config"]))
    # GPT-2 with checkpointing fails in backward while the history is recorded (a SystemError
    # from the autograd engine, reentrant or not): those runs keep PyTorch's counters alone.
    record = not (spec["config"] == "gpt2_train" and spec["checkpointing"])
    if record:
        torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python",
                                                 max_entries=2_000_000)
    if spec["weights"] == "nf4":
        # QLoRA as its tutorials write it: a saved checkpoint loaded in 4-bit NF4 with double
        # quantisation and bf16 compute, then prepare_model_for_kbit_training.
        import peft
        saved = f"/tmp/qlora_{spec['name']}"
        transformers.AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).save_pretrained(saved)
        bnb = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                              bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16)
        model = transformers.AutoModelForCausalLM.from_pretrained(saved, quantization_config=bnb,
                                                                  attn_implementation="sdpa", device_map={"": 0})
        model = peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    else:
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
        if spec["weights"] == "bf16":
            model = model.to(torch.bfloat16)
        model = model.cuda()
    if spec.get("lora"):
        import peft
        lcfg = peft.LoraConfig(r=spec["lora"]["rank"], lora_alpha=2 * spec["lora"]["rank"], lora_dropout=0.05,
                               target_modules=spec["lora"]["targets"], task_type="CAUSAL_LM")
        model = peft.get_peft_model(model, lcfg)
    if spec.get("train"):
        import fnmatch
        for pname, p in model.named_parameters():
            p.requires_grad_(any(fnmatch.fnmatch(pname, g) for g in spec["train"]))
    model.train()
    if spec["checkpointing"]:
        model.gradient_checkpointing_enable()
    if spec["frozen"]:
        model.get_input_embeddings().weight.requires_grad_(False)
        layers = next(m for m in model.modules() if isinstance(m, torch.nn.ModuleList))
        for layer in list(layers)[: len(layers) // 2]:
            layer.requires_grad_(False)
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    if spec["optimizer"] == "sgd_momentum":
        opt = torch.optim.SGD(trainable, lr=1e-3, momentum=0.9)
    elif spec["optimizer"] == "adafactor":
        opt = transformers.optimization.Adafactor(trainable, lr=1e-3, relative_step=False, scale_parameter=False)
    else:
        opt = torch.optim.AdamW(trainable, lr=1e-4)
    scaler = torch.amp.GradScaler("cuda") if spec["autocast"] == "fp16" else None
    vocab = cfg.vocab_size
    accum = spec.get("grad_accum", 1)
    for _ in range(3):
        for _micro in range(accum):
            ids = torch.randint(0, vocab, (spec["batch"], spec["seq"]), device="cuda")
            if spec["autocast"] in ("bf16", "fp16"):
                dtype = torch.bfloat16 if spec["autocast"] == "bf16" else torch.float16
                with torch.autocast("cuda", dtype=dtype):
                    loss = model(input_ids=ids, labels=ids).loss / accum
            else:
                loss = model(input_ids=ids, labels=ids).loss / accum
            if scaler is not None:
                scaler.scale(loss).backward()
            else:
                loss.backward()
            del loss, ids
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    name = spec["name"]
    if record:
        torch.cuda.memory._dump_snapshot(f"{out}/{name}.pickle")
    with open(f"{out}/{name}.memory_stats.json", "w") as f:
        json.dump(stats, f, indent=1, sort_keys=True)
    truth = dict(spec)
    truth.update({
        "torch": torch.__version__, "transformers": transformers.__version__,
        "device": torch.cuda.get_device_name(0),
        "parameters": sum(p.numel() for p in params),
        "parameter_bytes": sum(p.numel() * p.element_size() for p in params),
        "trainable_names": [n for n, p in model.named_parameters() if p.requires_grad][:40],
        "trainable_parameters": sum(p.numel() for p in trainable),
        "optimizer_state_bytes": sum(t.numel() * t.element_size() for st in opt.state.values()
                                     for t in st.values() if torch.is_tensor(t) and t.is_cuda),
        "peak_requested_bytes": stats["requested_bytes.all.peak"],
        "peak_allocated_bytes": stats["allocated_bytes.all.peak"],
        "peak_reserved_bytes": stats["reserved_bytes.all.peak"],
    })
    with open(f"{out}/{name}.truth.json", "w") as f:
        json.dump(truth, f, indent=1)
    print(json.dumps({k: truth[k] for k in ("name", "parameters", "trainable_parameters", "peak_requested_bytes",
                                            "peak_reserved_bytes")}), flush=True)


def main(out):
    os.makedirs(out, exist_ok=True)
    if os.environ.get("ROUND") != "3":
        count_params(out)

    def one(spec):
        p = subprocess.run([sys.executable, HERE, "worker", out, json.dumps(spec)], capture_output=True, text=True)
        return spec["name"], p.returncode, p.stdout.strip(), p.stderr[-3000:] if p.returncode else ""

    only = os.environ.get("ONLY", "").split(",") if os.environ.get("ONLY") else None
    todo = [r for r in (round3() if os.environ.get("ROUND") == "3" else runs()) if only is None or r["name"] in only]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for name, rc, stdout, err in pool.map(one, todo):
            print(name, rc, stdout, err, flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        worker(sys.argv[2], sys.argv[3])
    else:
        main(sys.argv[2])
