"""vLLM startups at known settings on the lent GPU, for memlens' serving plan (issue 75, P25 item 4):
each case starts `vllm.LLM` on a bundled model's config with dummy weights (`load_format="dummy"`, no
download, no tokenizer: `skip_tokenizer_init=True`) in a fresh process, and keeps its whole log. The
logs are what `memlens plan --serve … --engine-version VERSION` is then held to (the KV cache's bytes
and tokens, the weights, the profile run's activation peak, non-torch memory, CUDA graphs), like the
logs people posted in traces/serving-logs, but with every setting known.

Each case writes NAME.log (vLLM's stdout and stderr, its memory lines among them) and NAME.json (the
case's settings, vLLM's and torch's versions, the GPU's name and total memory as torch reports it,
measured in a separate process so this one holds no CUDA context, and the exit status). A case that
is meant to fail (max_model_len over the KV cache) fails in vLLM's own words.

The model directory of a case is the preset's `config` (core/src/plan/presets/PRESET.json) written as
config.json with `torch_dtype` bfloat16 — the fields the plan reads; vLLM takes transformers'
defaults for the rest.

Cases (name: preset, settings)
  llama8b_u90        llama-3.1-8b, gpu_memory_utilization 0.90, max_model_len 32768
  llama8b_u60        llama-3.1-8b, 0.60, max_model_len 8192
  llama8b_fp8kv      llama-3.1-8b, 0.90, max_model_len 32768, kv_cache_dtype fp8
  llama8b_seqs64     llama-3.1-8b, 0.90, max_model_len 32768, max_num_seqs 64
  llama8b_too_long   llama-3.1-8b, 0.25, max_model_len 131072: the max-seq-len error
  qwen3_8b           qwen3-8b, 0.90, max_model_len 40960
  qwen3_30b_a3b      qwen3-30b-a3b (MoE), 0.90, max_model_len 40960
  gemma3_1b          gemma-3-1b-it (sliding windows), 0.90, max_model_len 32768
  deepseek_v2_lite   deepseek-v2-lite (MLA), 0.90, max_model_len 32768
Run (device tool, repository root): traces/capture/vllm_startups.sh [CASE,CASE,…]; it needs vLLM
installed on the machine (it says so and stops where `import vllm` fails).
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.abspath(__file__)
TIMEOUT_S = 600

CASES = {
    "llama8b_u90": ("llama-3.1-8b", {"gpu_memory_utilization": 0.90, "max_model_len": 32768}),
    "llama8b_u60": ("llama-3.1-8b", {"gpu_memory_utilization": 0.60, "max_model_len": 8192}),
    "llama8b_fp8kv": ("llama-3.1-8b", {"gpu_memory_utilization": 0.90, "max_model_len": 32768,
                                       "kv_cache_dtype": "fp8"}),
    "llama8b_seqs64": ("llama-3.1-8b", {"gpu_memory_utilization": 0.90, "max_model_len": 32768,
                                        "max_num_seqs": 64}),
    "llama8b_too_long": ("llama-3.1-8b", {"gpu_memory_utilization": 0.25, "max_model_len": 131072}),
    "qwen3_8b": ("qwen3-8b", {"gpu_memory_utilization": 0.90, "max_model_len": 40960}),
    "qwen3_30b_a3b": ("qwen3-30b-a3b", {"gpu_memory_utilization": 0.90, "max_model_len": 40960}),
    "gemma3_1b": ("gemma-3-1b-it", {"gpu_memory_utilization": 0.90, "max_model_len": 32768}),
    "deepseek_v2_lite": ("deepseek-v2-lite", {"gpu_memory_utilization": 0.90, "max_model_len": 32768}),
}


def model_dir(preset):
    """The preset's config as a model directory vLLM can load with dummy weights."""
    with open(os.path.join(ROOT, "core/src/plan/presets", preset + ".json")) as f:
        config = json.load(f)["config"]
    config["torch_dtype"] = "bfloat16"
    path = tempfile.mkdtemp(prefix="vllm_" + preset.replace(".", "_") + "_")
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    return path


def gpu_facts():
    """The GPU's name and total memory and the libraries' versions, from a separate process."""
    code = ("import json, torch; p = torch.cuda.get_device_properties(0); import importlib.metadata as m;"
            "print(json.dumps({'gpu': p.name, 'total_memory': p.total_memory, 'torch': torch.__version__,"
            "'vllm': m.version('vllm')}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        return {"error": out.stderr[-2000:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_case(name):
    """In this process: start vLLM on the case's model and settings, then exit."""
    preset, settings = CASES[name]
    from vllm import LLM  # noqa: PLC0415 (in the child only)

    llm = LLM(model=model_dir(preset), load_format="dummy", skip_tokenizer_init=True, dtype="bfloat16",
              seed=0, **settings)
    print("memlens-capture: engine started", flush=True)
    del llm


def main(out_dir, only):
    os.makedirs(out_dir, exist_ok=True)
    try:
        import vllm  # noqa: F401,PLC0415
    except ImportError as e:
        print(f"vllm_startups: vLLM is not installed here ({e}); nothing captured", flush=True)
        return 1
    facts = gpu_facts()
    print("vllm_startups:", json.dumps(facts), flush=True)
    names = [n for n in CASES if not only or n in only.split(",")]
    for name in names:
        preset, settings = CASES[name]
        log_path = os.path.join(out_dir, name + ".log")
        with open(log_path, "w") as log:
            try:
                p = subprocess.run([sys.executable, HERE, "run", name], stdout=log, stderr=subprocess.STDOUT,
                                   timeout=TIMEOUT_S, env={**os.environ, "VLLM_LOGGING_LEVEL": "DEBUG"})
                status = p.returncode
            except subprocess.TimeoutExpired:
                status = "timeout"
        with open(os.path.join(out_dir, name + ".json"), "w") as f:
            json.dump({"case": name, "preset": preset, "settings": settings, "exit": status, **facts}, f,
                      indent=2)
        print(f"vllm_startups: {name}: exit {status}", flush=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run_case(sys.argv[2])
    else:
        sys.exit(main(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else ""))
