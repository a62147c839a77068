"""Generation with Hugging Face `generate()` as people write it, for memlens' serving work (issue 75,
P25): the KV cache in a snapshot, and generation running out of memory.

The model is a Llama built from a small config (hidden 1024, 8 layers, 16 heads of 64, no GQA, vocab
32000, random weights), the prompt 512 random tokens, `max_new_tokens=512` with `min_new_tokens=512`
so every sequence runs to full length (random weights would otherwise stop at the EOS id now and then),
greedy. Each case is a fresh process that loads the model, then records the allocator's history
(`stacks="python"`) around `generate()` and writes NAME.pickle.gz, NAME.memory_stats.json
(`torch.cuda.memory_stats()` right after the dump) and NAME.truth.json, counted from live objects:
parameter bytes, the KV cache's bytes at the end counted from `out.past_key_values`
(`return_dict_in_generate=True`), its tokens, the bytes per token per sequence, the peak, and each
forward call's allocated bytes (`forward_calls`: call 0 of a request is the prefill, the rest decode).

Cases
  generate_dynamic_fp32   batch 8, the default DynamicCache (grown by torch.cat every step), fp32
  generate_dynamic_bf16   the same in bf16
  generate_static_fp32    batch 8, cache_implementation="static" (StaticCache of max_length 1024),
                          two requests one after the other (the second reuses the model's cache if
                          transformers keeps it), disable_compile=True (no automatic torch.compile)
  generate_static_bf16    the same in bf16
  generate_oom_prefill    fp32, batch 64 under a 3 GiB cap (torch.cuda.set_per_process_memory_fraction):
                          out of memory; the snapshot is dumped in the except block and the traceback
                          saved as NAME.oom.txt; then a binary search of fresh processes (`gen_try
                          BATCH`) for the largest batch whose whole generate at full length fits
  generate_oom_decode     fp32, batch 32 under the same cap: the prefill fits, a decode step does not
                          (the search of the first run: batch 32 ran out in decode step 193; the first
                          run's batch 40 ran out in its prefill, in layer 7 of 8, not in decode); the
                          generate call is written with its numbers on its line, as people write it,
                          so the traceback in NAME.oom.txt shows max_new_tokens; then a search of
                          fresh processes (`len_try BATCH NEW_TOKENS`) for the largest
                          max_new_tokens whose whole generate fits at this batch
  generate_kept_across_requests
                          fp32, batch 4, 256 + 128 tokens, four requests one after the other whose
                          outputs (and so their past_key_values) a list keeps — a chat server that
                          keeps every conversation's cache: the cache kept across requests grows
                          by one request's cache each time (the truth counts each)
Run (device tool, repository root): traces/capture/serving.sh; the cases added after the first run
alone: SERVING_BUDGET_S=900 traces/capture/serving.sh generate_oom_decode,generate_kept_across_requests
(the decode OOM's search of max_new_tokens takes about nine fresh processes of 15-20 s).
"""
import json
import os
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from others import base_truth, finish, model_truth, pack, start_recording  # noqa: E402

HERE = os.path.abspath(__file__)
CASES = ["generate_dynamic_fp32", "generate_dynamic_bf16", "generate_static_fp32", "generate_static_bf16",
         "generate_oom_prefill", "generate_oom_decode", "generate_kept_across_requests"]
TIMEOUTS = {"generate_oom_prefill": 240, "generate_oom_decode": 300}
DECODE_OOM_BATCH = 32
CAP_BYTES = 3 * 2**30
PROMPT_LEN = 512
NEW_TOKENS = 512


def build_model(dtype):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                         num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=2048)
    model = LlamaForCausalLM(config).to(device="cuda", dtype=dtype)
    model.eval()
    return model


def make_inputs(batch):
    import torch

    torch.manual_seed(1)
    input_ids = torch.randint(0, 32000, (batch, PROMPT_LEN)).to("cuda")
    attention_mask = torch.ones_like(input_ids)
    return input_ids, attention_mask


def gen_kwargs(static):
    kw = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False, return_dict_in_generate=True)
    if static:
        kw.update(cache_implementation="static", disable_compile=True)
    return kw


# ---------------------------------------------------------------- counting from live objects

def cache_tensors(cache):
    import torch

    if cache is None:
        return []
    if hasattr(cache, "layers"):
        ts = [t for layer in cache.layers for t in (getattr(layer, "keys", None), getattr(layer, "values", None))]
    elif hasattr(cache, "key_cache"):
        ts = list(cache.key_cache) + list(cache.value_cache)
    else:
        ts = [t for kv in cache for t in kv]
    return [t for t in ts if torch.is_tensor(t)]


def kv_info(cache):
    seen, total, shapes = set(), 0, set()
    ts = cache_tensors(cache)
    for t in ts:
        if t.is_cuda and t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()
            shapes.add((tuple(t.shape), str(t.dtype)))
    info = {"kv_cache_type": type(cache).__name__ if cache is not None else None, "kv_cache_bytes": total,
            "kv_cache_tensors": len(seen), "kv_cache_shapes": sorted([list(s), d] for s, d in shapes)}
    try:
        info["kv_cache_seq_length"] = int(cache.get_seq_length())
    except Exception:
        info["kv_cache_seq_length"] = None
    if ts:
        info["kv_cache_allocated_tokens"] = int(ts[0].shape[-2])
    return info


class ForwardLog:
    """One row per forward call of the model inside generate(): allocated bytes and the peak so far
    after it (call 0 of a request is the prefill); the cache object seen last, for the OOM's count."""

    columns = ["request", "call", "tokens_in", "allocated_bytes", "peak_so_far", "end_us"]

    def __init__(self, model):
        self.rows, self.request, self.calls, self.done, self.cache = [], 0, 0, 0, None
        self.handles = [model.register_forward_pre_hook(self.pre, with_kwargs=True),
                        model.register_forward_hook(self.post, with_kwargs=True)]

    def new_request(self, r):
        self.request, self.calls, self.done = r, 0, 0

    def pre(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.tokens_in = int(ids.shape[1]) if ids is not None else None
        self.calls += 1
        if kwargs.get("past_key_values") is not None:
            self.cache = kwargs["past_key_values"]

    def post(self, module, args, kwargs, output):
        import torch

        self.done += 1
        if getattr(output, "past_key_values", None) is not None:
            self.cache = output.past_key_values
        self.rows.append([self.request, self.calls - 1, self.tokens_in, torch.cuda.memory_allocated(),
                          torch.cuda.max_memory_allocated(), int(time.time() * 1e6)])

    def remove(self):
        for h in self.handles:
            h.remove()


def add_truth(out, case, extra):
    path = f"{out}/{case}.truth.json"
    with open(path) as f:
        truth = json.load(f)
    truth.update(extra)
    with open(path, "w") as f:
        json.dump(truth, f, indent=1)


def serving_truth(case, model, batch, dtype, static):
    import torch
    import transformers

    truth = base_truth(case)
    cfg = model.config
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    dbytes = torch.tensor([], dtype=dtype).element_size()
    truth.update({"model": "transformers LlamaForCausalLM from a config, random weights",
                  "transformers": transformers.__version__, "dtype": str(dtype),
                  "config": {"hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size,
                             "num_hidden_layers": cfg.num_hidden_layers,
                             "num_attention_heads": cfg.num_attention_heads,
                             "num_key_value_heads": cfg.num_key_value_heads, "head_dim": head_dim,
                             "vocab_size": cfg.vocab_size, "tie_word_embeddings": cfg.tie_word_embeddings},
                  "batch": batch, "prompt_len": PROMPT_LEN, "max_new_tokens": NEW_TOKENS,
                  "min_new_tokens": NEW_TOKENS, "do_sample": False,
                  "cache_implementation": "static" if static else "dynamic (default)",
                  "disable_compile": True if static else None,
                  "attn_implementation": getattr(cfg, "_attn_implementation", None),
                  "kv_bytes_per_token_per_sequence_formula": 2 * cfg.num_hidden_layers * cfg.num_key_value_heads
                  * head_dim * dbytes,
                  "kv_bytes_full_length_formula": 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim
                  * dbytes * batch * (PROMPT_LEN + NEW_TOKENS),
                  "weights_loaded_before_recording": True, "inputs_made_before_recording": True})
    model_truth(model, truth)
    return truth


# ---------------------------------------------------------------- the cases

def generate_case(out, case):
    import torch

    dtype = torch.bfloat16 if case.endswith("bf16") else torch.float32
    static = "static" in case
    batch = 8
    requests = 2 if static else 1
    model = build_model(dtype)
    input_ids, attention_mask = make_inputs(batch)
    truth = serving_truth(case, model, batch, dtype, static)
    truth["requests"] = requests
    start_recording(truth, max_entries=400_000)
    log = ForwardLog(model)
    first = {}
    t0 = time.time()
    for r in range(requests):
        log.new_request(r)
        outputs = model.generate(input_ids=input_ids, attention_mask=attention_mask, **gen_kwargs(static))
        if r == 0:
            first = {"cache_id": id(outputs.past_key_values),
                     "key0_ptr": cache_tensors(outputs.past_key_values)[0].data_ptr()}
        print(f"request {r}: {outputs.sequences.shape} in {time.time() - t0:.1f}s", flush=True)
    log.remove()
    cache = outputs.past_key_values
    truth.update(kv_info(cache))
    truth["generate_seconds"] = round(time.time() - t0, 2)
    truth["sequences_shape"] = list(outputs.sequences.shape)
    truth["sequences_bytes"] = outputs.sequences.numel() * outputs.sequences.element_size()
    ntok = truth.get("kv_cache_allocated_tokens") or 0
    truth["kv_bytes_per_token_per_sequence"] = truth["kv_cache_bytes"] / (batch * ntok) if ntok else None
    if requests > 1:
        truth["second_request_reused_cache_object"] = id(cache) == first["cache_id"]
        truth["second_request_reused_cache_memory"] = cache_tensors(cache)[0].data_ptr() == first["key0_ptr"]
    truth["model_keeps_cache_attribute"] = hasattr(model, "_cache") and getattr(model, "_cache") is not None
    truth["prefill_end"] = next((r for r in log.rows if r[1] == 0), None)
    truth["alive_at_dump"] = "model, inputs, outputs (sequences and past_key_values) of the last request"
    finish(out, case, truth)
    add_truth(out, case, {"forward_calls_columns": ForwardLog.columns, "forward_calls": log.rows})


def set_cap():
    import torch

    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(CAP_BYTES / total)
    return total


def gen_try(batch, new_tokens=NEW_TOKENS):
    import torch

    set_cap()
    model = build_model(torch.float32)
    input_ids, attention_mask = make_inputs(batch)
    log = ForwardLog(model)
    kw = dict(gen_kwargs(False), max_new_tokens=new_tokens, min_new_tokens=new_tokens)
    try:
        outputs = model.generate(input_ids=input_ids, attention_mask=attention_mask, **kw)
        torch.cuda.synchronize()
    except torch.OutOfMemoryError:
        where = "prefill" if log.calls <= 1 else f"decode step {log.calls - 1}"
        print(f"batch {batch}: OOM in {where}", flush=True)
        sys.exit(3)
    print(f"batch {batch}: fits, {outputs.sequences.shape[1]} tokens, peak {torch.cuda.max_memory_allocated()}",
          flush=True)
    sys.exit(0)


def generate_oom(out, case):
    import torch

    batch = 64 if case == "generate_oom_prefill" else DECODE_OOM_BATCH
    total = set_cap()
    model = build_model(torch.float32)
    input_ids, attention_mask = make_inputs(batch)
    truth = serving_truth(case, model, batch, torch.float32, False)
    truth.update({"cap_bytes": CAP_BYTES, "cap_fraction": CAP_BYTES / total,
                  "cap_set_by": "torch.cuda.set_per_process_memory_fraction before the model was loaded"})
    start_recording(truth, max_entries=400_000)
    log = ForwardLog(model)
    try:
        if case == "generate_oom_prefill":
            outputs = model.generate(input_ids=input_ids, attention_mask=attention_mask, **gen_kwargs(False))
        else:
            # As people write it: the numbers on the call's line, which the traceback prints.
            outputs = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=512, min_new_tokens=512, do_sample=False, return_dict_in_generate=True)  # noqa: E501
        truth["oom"] = False
        truth.update(kv_info(outputs.past_key_values))
        log.remove()
        finish(out, case, truth)
    except torch.OutOfMemoryError as e:
        with open(f"{out}/{case}.oom.txt", "w") as f:
            f.write(traceback.format_exc())
        truth["oom"] = True
        truth["oom_message"] = str(e).splitlines()[0] if str(e) else repr(e)
        truth["oom_text_file"] = f"{case}.oom.txt (traceback.format_exc() in the except block)"
        truth["failed_phase"] = "prefill" if log.calls <= 1 else "decode"
        truth["failed_in_forward"] = log.calls > log.done
        truth["forward_calls_started"] = log.calls
        truth["decode_step_at_oom"] = log.calls - 1 if log.calls > 1 else None
        truth["allocated_at_oom"] = torch.cuda.memory_allocated()
        truth.update({f"{k}_at_oom" if k.startswith("kv_cache") else k: v for k, v in kv_info(log.cache).items()})
        truth["dumped"] = "in the except block (the traceback still holds generate's locals: the cache)"
        log.remove()
        finish(out, case, truth)
        del e
    add_truth(out, case, {"forward_calls_columns": ForwardLog.columns, "forward_calls": log.rows})
    del model, input_ids, attention_mask, log
    torch.cuda.empty_cache()
    if case != "generate_oom_prefill":
        search_new_tokens(out, case, batch)
        return
    # the largest batch whose whole generate (512 + 512 tokens) fits under the same cap, each try a fresh process
    lo, hi, attempts = 0, batch, []
    while hi - lo > 1:
        mid = (lo + hi) // 2
        t0 = time.time()
        try:
            p = subprocess.run([sys.executable, HERE, "gen_try", str(mid)], capture_output=True, text=True,
                               timeout=120)
            rc, text, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired:
            rc, text, err = "timeout", "", ""
        fits = rc == 0
        if rc not in (0, 3):
            print(f"gen_try {mid} rc={rc}\n{err[-2000:]}", flush=True)
        attempts.append({"batch": mid, "fits": fits, "rc": rc, "seconds": round(time.time() - t0, 1),
                         "out": text.strip()[-200:]})
        print(attempts[-1], flush=True)
        if rc not in (0, 3):
            break
        lo, hi = (mid, hi) if fits else (lo, mid)
    add_truth(out, case, {"largest_fitting_batch": lo if hi - lo == 1 else None, "smallest_failing_batch": hi,
                          "attempts": attempts, "search_complete": hi - lo == 1,
                          "search": "binary search over 1..64, each try a fresh process (serving.py gen_try "
                                    "BATCH): the whole generate at 512 + 512 tokens, fp32, DynamicCache, "
                                    "under the same 3 GiB cap"})
    print("largest_fitting_batch", lo, flush=True)


def try_process(args, timeout=120):
    """One fresh process of this script (`gen_try ...`): (fits, rc, its last output)."""
    try:
        p = subprocess.run([sys.executable, HERE, *map(str, args)], capture_output=True, text=True, timeout=timeout)
        rc, text, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        rc, text, err = "timeout", "", ""
    if rc not in (0, 3):
        print(f"{args} rc={rc}\n{err[-2000:]}", flush=True)
    return rc == 0, rc, text.strip()[-200:]


def search_new_tokens(out, case, batch):
    """The largest max_new_tokens (1..512) whose whole generate fits at `batch` under the cap, each try
    a fresh process."""
    lo, hi, attempts = 0, NEW_TOKENS + 1, []
    while hi - lo > 1:
        mid = (lo + hi) // 2
        t0 = time.time()
        fits, rc, text = try_process(["gen_try", batch, mid])
        attempts.append({"max_new_tokens": mid, "fits": fits, "rc": rc, "seconds": round(time.time() - t0, 1),
                         "out": text})
        print(attempts[-1], flush=True)
        if rc not in (0, 3):
            break
        lo, hi = (mid, hi) if fits else (lo, mid)
    add_truth(out, case, {"largest_fitting_max_new_tokens": lo if hi - lo == 1 else None,
                          "smallest_failing_max_new_tokens": hi if hi <= NEW_TOKENS else None,
                          "new_tokens_attempts": attempts, "new_tokens_search_complete": hi - lo == 1,
                          "new_tokens_search": f"binary search over 1..{NEW_TOKENS} at batch {batch}, each try a "
                                               "fresh process (serving.py gen_try BATCH NEW_TOKENS), fp32, "
                                               "DynamicCache, under the same 3 GiB cap"})
    print("largest_fitting_max_new_tokens", lo, flush=True)


def kept_across_requests(out, case):
    """Four requests whose outputs a list keeps: their caches stay, one more each request."""
    import torch

    batch, prompt, new = 4, 256, 128
    model = build_model(torch.float32)
    torch.manual_seed(1)
    truth = serving_truth(case, model, batch, torch.float32, False)
    truth.update({"prompt_len": prompt, "max_new_tokens": new, "min_new_tokens": new, "requests": 4,
                  "kv_bytes_full_length_formula": truth["kv_bytes_per_token_per_sequence_formula"] * batch
                  * (prompt + new)})
    start_recording(truth, max_entries=400_000)
    kept, per_request = [], []
    for r in range(4):
        input_ids = torch.randint(0, 32000, (batch, prompt), device="cuda")
        outputs = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                                 max_new_tokens=new, min_new_tokens=new, do_sample=False,
                                 return_dict_in_generate=True)
        kept.append(outputs)  # the conversation's history, cache included, kept for its next turn
        info = kv_info(outputs.past_key_values)
        per_request.append({"request": r, "kv_cache_bytes": info["kv_cache_bytes"],
                            "kv_cache_tensors": info["kv_cache_tensors"],
                            "kv_cache_seq_length": info["kv_cache_seq_length"],
                            "allocated_after": torch.cuda.memory_allocated()})
        print(per_request[-1], flush=True)
    truth.update({"kept_caches": per_request, "kv_cache_bytes_kept": sum(p["kv_cache_bytes"] for p in per_request),
                  "alive_at_dump": "model and the four requests' outputs (sequences and past_key_values)"})
    finish(out, case, truth)


WORKERS = {c: generate_case for c in CASES[:4]}
WORKERS.update({"generate_oom_prefill": generate_oom, "generate_oom_decode": generate_oom,
                "generate_kept_across_requests": kept_across_requests})


# ---------------------------------------------------------------- driver (as others.py's)

def run_case(out, case, timeout):
    import signal

    t0 = time.time()
    p = subprocess.Popen([sys.executable, HERE, "worker", out, case], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        text, _ = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        text, _ = p.communicate()
        rc = "timeout"
    print(f"== {case} rc={rc} {time.time() - t0:.1f}s", flush=True)
    print(text[-4000:], flush=True)
    return rc


def main(out, tarball=None, cases=None, budget=300):
    deadline = time.time() + budget
    os.makedirs(out, exist_ok=True)
    info = subprocess.run([sys.executable, "-c", "import torch, transformers;"
                           "print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0),"
                           " transformers.__version__)"], capture_output=True, text=True)
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv"],
                         capture_output=True, text=True)
    print("versions:", info.stdout.strip(), info.stderr[-500:], "\n", smi.stdout, flush=True)
    with open(f"{out}/run_info.txt", "w") as f:
        f.write("torch cuda gpu transformers: " + info.stdout + smi.stdout)
    for case in cases or CASES:
        left = deadline - time.time()
        if left < 20:
            print(f"== {case} skipped: {left:.0f}s left", flush=True)
            continue
        run_case(out, case, min(TIMEOUTS.get(case, 90), left))
        pack(out, tarball)


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        WORKERS[sys.argv[3]](sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "gen_try":
        gen_try(*map(int, sys.argv[2:4]))
    else:
        main(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None,
             sys.argv[4].split(",") if len(sys.argv) > 4 and sys.argv[4] else None,
             int(os.environ.get("SERVING_BUDGET_S", "300")))
