"""Real out-of-memory failures in each phase of a training step, with everything a user is left
holding: the at-OOM snapshot (dumped by PyTorch's OOM observer at the failure), the error text
and the whole log with its traceback, `torch.cuda.memory_summary()`, `memory_stats()` and the
`nvidia-smi` screen; plus, for each case, the largest batch that really fits under the same cap
(a binary search of fresh processes), to check memlens' `fits.batch_fraction` against.

Models are Hugging Face Llamas built from a config (random weights, nothing downloaded), trained
with AdamW under bf16 autocast the way an HF user writes it: no record_function ranges.
  llama      vocab 32000, hidden 1024, MLP 2816, 8 layers, 16 heads, sequence 512
  llama_big  vocab 32000, hidden 2048, MLP 5504, 8 layers, 16 heads, sequence 512

Cases (each in a fresh process; caps by `torch.cuda.set_per_process_memory_fraction`, chosen
from an uncapped run's per-phase peaks so that the failure lands in the named phase):
  fwd_jump   llama, a step at batch 2, then batch 64: fails in the second forward
  fwd_first  llama, batch 64: the very first forward fails
  bwd        llama at the batch whose backward peaks furthest above its forward, the loss computed
             by the script on the upcast logits (so backward starts with their fp32 gradient)
  opt        llama_big, batch 1: fails in the first AdamW.step, creating its state
  other_proc llama, batch 64, no cap, while another process holds all but 6 GiB of the device
  non_torch  llama, batch 64, no cap, after CuPy (same process) took all but 6 GiB
Run (device tool, repository root): python3 traces/capture/oom_phases.py main $OUT
"""
import json
import os
import subprocess
import sys
import threading
import time
import traceback

SEQ = 512
MODELS = {
    "llama": dict(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                  num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=1024),
    "llama_big": dict(vocab_size=32000, hidden_size=2048, intermediate_size=5504, num_hidden_layers=8,
                      num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=1024),
}
HERE = os.path.abspath(__file__)


def build(name):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(**MODELS[name])
    return LlamaForCausalLM(cfg), cfg


def worker(out, tag, model_name, cap_bytes, batches, record, measure):
    """Trains one step per batch size in `batches`; prints one JSON line of what happened."""
    import torch

    phase = {"now": "setup", "step": -1}
    if cap_bytes > 0:
        torch.cuda.set_per_process_memory_fraction(cap_bytes / torch.cuda.get_device_properties(0).total_memory)
    if os.environ.get("CUPY_TAKE_ALL_BUT_GIB"):
        import cupy

        free, _ = cupy.cuda.runtime.memGetInfo()
        keep = int(float(os.environ["CUPY_TAKE_ALL_BUT_GIB"]) * 2**30)
        held = cupy.empty(free - keep, dtype=cupy.uint8)  # noqa: F841 (held for the run)
        held.fill(1)
        cupy.cuda.runtime.deviceSynchronize()
        print(f"cupy holds {free - keep} bytes", flush=True)
    if record:
        torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python", max_entries=2_000_000)

        def on_oom(device, alloc, device_alloc, device_free):
            torch.cuda.memory._dump_snapshot(f"{out}/{tag}.at_oom.pickle")

        torch._C._cuda_attach_out_of_memory_observer(on_oom)
    model, cfg = build(model_name)
    model = model.cuda()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    peaks = []
    result = {"tag": tag, "model": model_name, "parameters": params, "cap_bytes": cap_bytes, "batches": batches}

    def mark(name, step=None):
        torch.cuda.synchronize()
        if measure:
            peaks.append({"step": phase["step"], "phase": phase["now"],
                          "peak_allocated": torch.cuda.max_memory_allocated(),
                          "peak_reserved": torch.cuda.max_memory_reserved(),
                          "allocated_after": torch.cuda.memory_allocated()})
            torch.cuda.reset_peak_memory_stats()
        phase["now"] = name
        if step is not None:
            phase["step"] = step

    try:
        mark("setup")
        for k, b in enumerate(batches):
            mark("batch", k)
            ids = torch.randint(0, cfg.vocab_size, (b, SEQ), device="cuda")
            mark("forward")
            if os.environ.get("LOSS_OUTSIDE"):
                # The loss computed by the script on the upcast logits: backward starts with
                # their fp32 gradient, above the forward's peak.
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    logits = model(input_ids=ids).logits
                loss = torch.nn.functional.cross_entropy(logits.float().view(-1, cfg.vocab_size), ids.view(-1))
                del logits
            else:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(input_ids=ids, labels=ids).loss
            print(f"step {k} batch {b} loss {loss.item():.4f}", flush=True)
            mark("backward")
            loss.backward()
            mark("optimizer_step")
            opt.step()
            opt.zero_grad(set_to_none=True)
            del loss, ids
        mark("done")
        result.update(fits=True, peaks=peaks)
        print("RESULT " + json.dumps(result), flush=True)
    except torch.OutOfMemoryError as e:
        result.update(fits=False, failed_in=phase["now"], failed_step=phase["step"], peaks=peaks)
        print("RESULT " + json.dumps(result), flush=True)
        if record:
            with open(f"{out}/{tag}.error.txt", "w") as f:
                f.write(traceback.format_exc())
            with open(f"{out}/{tag}.memory_summary.txt", "w") as f:
                f.write(torch.cuda.memory_summary())
            with open(f"{out}/{tag}.memory_summary_abbreviated.txt", "w") as f:
                f.write(torch.cuda.memory_summary(abbreviated=True))
            with open(f"{out}/{tag}.memory_stats.json", "w") as f:
                json.dump(torch.cuda.memory_stats(), f, indent=1, sort_keys=True)
            with open(f"{out}/{tag}.nvidia_smi.txt", "w") as f:
                f.write(subprocess.run(["nvidia-smi"], capture_output=True, text=True).stdout)
            with open(f"{out}/{tag}.truth.json", "w") as f:
                json.dump(result, f, indent=1)
            raise  # the log gets Python's own traceback, as a user's would


# The backward case computes its loss outside the model (see `worker`).
BWD_ENV = {"LOSS_OUTSIDE": "1"}


def spawn(out, tag, model, cap, batches, record=False, measure=False, env=None, log=None):
    args = [sys.executable, HERE, "worker", out, tag, model, str(cap), ",".join(map(str, batches)),
            "1" if record else "0", "1" if measure else "0"]
    p = subprocess.run(args, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if log:
        with open(log, "w") as f:
            f.write(p.stdout + p.stderr)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"tag": tag, "error": p.stderr[-3000:]}


def biggest_fitting(out, tag, model, cap, batches, results):
    """Largest last batch (earlier batches kept) that runs its whole step under `cap`."""
    probes = []

    def probe(b):
        r = spawn(out, f"{tag}_probe", model, cap, batches[:-1] + [b], env=BWD_ENV if tag == "bwd" else None)
        probes.append({"batch": b, "fits": bool(r.get("fits")), "failed_in": r.get("failed_in"),
                       "error": r.get("error")})
        return bool(r.get("fits"))

    lo, hi = 0, batches[-1]
    if probe(hi):  # the failing batch itself, once more
        lo = hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if probe(mid):
            lo = mid
        else:
            hi = mid
    results[tag] = {"max_fitting_batch": lo, "failing_batch": batches[-1], "probes": probes, "cap_bytes": cap}


def peak_of(r, step, phase):
    for p in r.get("peaks", []):
        if p["step"] == step and p["phase"] == phase:
            return p
    return None


def main(out):
    import torch

    work = out
    os.makedirs(work, exist_ok=True)
    total = torch.cuda.get_device_properties(0).total_memory
    info = {"device": torch.cuda.get_device_name(0), "total": total, "torch": torch.__version__}
    with open(f"{work}/nvidia_smi_idle.txt", "w") as f:
        f.write(subprocess.run(["nvidia-smi"], capture_output=True, text=True).stdout)
    t0 = time.time()
    # Uncapped runs: per-phase peaks (peak since the previous mark) to place the caps.
    cal = {}
    jobs = {
        "jump": ("llama", [2, 64]),
        "first": ("llama", [64]),
        "b8": ("llama", [8]),
        "b16": ("llama", [16]),
        "b32": ("llama", [32]),
        "big1": ("llama_big", [1]),
    }
    # One at a time: together they would not fit on an 80 GB card uncapped.
    for k, (m, b) in jobs.items():
        cal[k] = spawn(work, "cal_" + k, m, 0, b, measure=True, env=BWD_ENV if k.startswith("b") and k != "big1" else None)
    info["calibration"] = cal
    info["calibration_s"] = time.time() - t0
    mib = 1 << 20

    def between(lo, hi, share):
        return int((lo + share * (hi - lo)) // mib * mib)

    cases = {}
    errors = info.setdefault("errors", [])

    def case_fwd_jump():
        j = cal["jump"]
        after0 = peak_of(j, 0, "optimizer_step")["allocated_after"]
        fwd1 = peak_of(j, 1, "forward")["peak_allocated"]
        # After step 0 (batch 2) the state is parameters + AdamW state: fail halfway up the
        # second forward.
        cases["fwd_jump"] = ("llama", [2, 64], between(after0, fwd1, 0.55))

    def case_fwd_first():
        f = cal["first"]
        setup = peak_of(f, -1, "setup")["allocated_after"]
        cases["fwd_first"] = ("llama", [64], between(setup, peak_of(f, 0, "forward")["peak_allocated"], 0.5))

    def case_bwd():
        # The batch whose backward rises furthest above its forward.
        best = None
        for k in ("b8", "b16", "b32"):
            r = cal[k]
            fw, bw = peak_of(r, 0, "forward"), peak_of(r, 0, "backward")
            if fw and bw and bw["peak_allocated"] > fw["peak_allocated"]:
                gap = bw["peak_allocated"] - fw["peak_allocated"]
                if best is None or gap > best[0]:
                    best = (gap, k, fw["peak_allocated"], bw["peak_allocated"])
        if best:
            cases["bwd"] = ("llama", jobs[best[1]][1], between(best[2], best[3], 0.5))
        else:
            errors.append("bwd: no batch's backward rose above its forward")

    def case_opt():
        g = cal["big1"]
        ob = max(peak_of(g, 0, "forward")["peak_allocated"], peak_of(g, 0, "backward")["peak_allocated"])
        cases["opt"] = ("llama_big", [1], between(ob, peak_of(g, 0, "optimizer_step")["peak_allocated"], 0.5))

    for fn in (case_fwd_jump, case_fwd_first, case_bwd, case_opt):
        try:
            fn()
        except Exception:
            errors.append(fn.__name__ + ": " + traceback.format_exc())
    info["cases"] = {k: {"model": m, "batches": b, "cap_bytes": c} for k, (m, b, c) in cases.items()}
    # The at-OOM captures, in parallel (each held to its cap).
    truth = {}
    threads = [threading.Thread(target=lambda k=k, m=m, b=b, c=c: truth.__setitem__(
        k, spawn(work, k, m, c, b, record=True, log=f"{work}/{k}.log", env=BWD_ENV if k == "bwd" else None)))
        for k, (m, b, c) in cases.items()]
    [t.start() for t in threads]
    [t.join() for t in threads]
    info["captures"] = truth
    # The largest batch that fits under each forward/backward cap.
    sweeps = {}
    threads = [threading.Thread(target=biggest_fitting, args=(work, k, m, c, b, sweeps))
               for k, (m, b, c) in cases.items() if k != "opt"]
    [t.start() for t in threads]
    [t.join() for t in threads]
    info["sweeps"] = sweeps
    info["sweeps_done_s"] = time.time() - t0
    with open(f"{work}/info.json", "w") as fh:
        json.dump(info, fh, indent=1)
    # Another process holds all but 6 GiB: the training fails with "Process N has …".
    free, _ = torch.cuda.mem_get_info()
    hold_mib = (free - 6 * 2**30) // mib
    holder = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(HERE), "hold.py"), str(hold_mib), "120"])
    time.sleep(8)
    with open(f"{work}/nvidia_smi_busy.txt", "w") as fh:
        fh.write(subprocess.run(["nvidia-smi"], capture_output=True, text=True).stdout)
    info["captures"]["other_proc"] = spawn(work, "other_proc", "llama", 0, [64], record=True, log=f"{work}/other_proc.log")
    holder.kill()
    holder.wait()
    time.sleep(2)
    info["captures"]["non_torch"] = spawn(work, "non_torch", "llama", 0, [64], record=True,
                                          env={"CUPY_TAKE_ALL_BUT_GIB": "6"}, log=f"{work}/non_torch.log")
    info["total_s"] = time.time() - t0
    with open(f"{work}/info.json", "w") as fh:
        json.dump(info, fh, indent=1)
    print(json.dumps({k: v for k, v in info.items() if k not in ("calibration",)}, indent=1)[:6000])


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        out, tag, model, cap, batches, record, measure = sys.argv[2:9]
        worker(out, tag, model, int(cap), [int(b) for b in batches.split(",")], record == "1", measure == "1")
    else:
        main(sys.argv[2])
