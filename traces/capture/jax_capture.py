"""JAX on the GPU as people write it, for memlens' JAX work (issue 78, P28): device memory profiles
(`jax.profiler.save_device_memory_profile`, a gzip-compressed pprof protobuf of every live buffer with
its Python stack) and XLA's out-of-memory text.

Cases, each a fresh process
  jax_train           a flax.linen MLP (1024 -> 4096 -> 4096 -> 4096 -> 1024, ReLU), optax.adam, a
                      jitted train step that returns params, opt_state, the grads and the loss (so
                      the grads stay alive); the script keeps every step's grads in a list
                      (`grad_history`, "to plot their norms later"), which grows: a profile after
                      step 1 (jax_train.step1.prof: params, grads, Adam state, data, nothing else) and
                      one after step 5 (jax_train.step5.prof: four more steps' grads kept) for a diff.
                      Default settings (XLA preallocates 75 % of the GPU).
  jax_oom_fraction    XLA_PYTHON_CLIENT_MEM_FRACTION=.05 and TF_CPP_MIN_LOG_LEVEL=0: the same model's
                      jitted train step at batch 131072 runs out of memory. jax_oom_fraction.stderr.txt
                      is the process' whole stderr (XLA's BFC allocator dump, then the uncaught
                      traceback), jax_oom_fraction.exception.txt the except block's
                      traceback.format_exc(), jax_oom_fraction.prof the device memory profile saved
                      in the except block.
  jax_two_processes   preallocation left at its default in two processes: the first holds its 75 %
                      (a notebook left open), the second starts on the same GPU and asks for 40 % of it;
                      its stderr and exception text as above (jax_two_processes.*).
Each case writes NAME.truth.json: what the script counted from its arrays (sum of x.nbytes and of
x.on_device_size_in_bytes() over jax.tree_util.tree_leaves of params, grads, opt_state, ...; every
jax.live_arrays(), and their buffers each counted once, `unique_buffers`, as the profile counts them), `jax.devices()[0].memory_stats()` at each profile, the environment variables
and the versions of jax, jaxlib, the CUDA plugin, flax and optax.
Run (device tool, repository root): traces/capture/jax_capture.sh
"""
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
import traceback

HERE = os.path.abspath(__file__)
ENV_KEYS = ["XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_ALLOCATOR",
            "TF_CPP_MIN_LOG_LEVEL", "XLA_FLAGS"]


# ---------------------------------------------------------------- the code under study

def make_model():
    from typing import Sequence

    import flax.linen as nn

    class MLP(nn.Module):
        features: Sequence[int]

        @nn.compact
        def __call__(self, x):
            for feat in self.features[:-1]:
                x = nn.relu(nn.Dense(feat)(x))
            x = nn.Dense(self.features[-1])(x)
            return x

    return MLP(features=[4096, 4096, 4096, 1024])


def make_train_step(model, tx):
    import jax
    import jax.numpy as jnp
    import optax

    @jax.jit
    def train_step(params, opt_state, x, y):
        def loss_fn(p):
            pred = model.apply(p, x)
            return jnp.mean((pred - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return params, opt_state, grads, loss

    return train_step


# ---------------------------------------------------------------- counting from live arrays

def versions():
    import importlib.metadata as md

    import jax

    out = {"jax": jax.__version__}
    for name in ["jaxlib", "flax", "optax", "jax-cuda13-plugin", "jax-cuda13-pjrt", "jax-cuda12-plugin"]:
        try:
            out[name] = md.version(name)
        except Exception:
            pass
    try:
        d = jax.devices()[0]
        out["device"] = f"{d.platform} {d.device_kind}"
    except Exception as e:
        out["device"] = f"error: {e!r}"
    return out


def leaves_bytes(tree):
    import jax

    leaves = [x for x in jax.tree_util.tree_leaves(tree) if hasattr(x, "nbytes")]
    return {"leaves": len(leaves), "nbytes": int(sum(x.nbytes for x in leaves)),
            "on_device_bytes": int(sum(x.on_device_size_in_bytes() for x in leaves))}


def unique_buffers(arrs):
    """Each live array's buffers, each once: arrays may share one (a jitted function returning one
    value twice), and XLA's profile counts a buffer once (PyClient::HeapProfile)."""
    seen = {}
    for a in arrs:
        for shard in a.addressable_shards:
            seen[(str(shard.device), shard.data.unsafe_buffer_pointer())] = int(shard.data.on_device_size_in_bytes())
    return {"count": len(seen), "on_device_bytes": int(sum(seen.values()))}


def live_arrays_summary():
    import jax

    arrs = [a for a in jax.live_arrays() if not a.is_deleted()]
    return {"count": len(arrs), "nbytes": int(sum(a.nbytes for a in arrs)),
            "on_device_bytes": int(sum(a.on_device_size_in_bytes() for a in arrs)),
            "unique_buffers": unique_buffers(arrs),
            "arrays": sorted([[list(a.shape), str(a.dtype), int(a.on_device_size_in_bytes())] for a in arrs],
                             key=lambda r: -r[2])[:40]}


def memory_stats():
    import jax

    try:
        return {k: int(v) for k, v in (jax.devices()[0].memory_stats() or {}).items()}
    except Exception as e:
        return {"error": repr(e)}


def save_profile(path):
    import jax

    jax.profiler.save_device_memory_profile(path)
    with open(path, "rb") as f:
        head = f.read(2)
    return {"file": os.path.basename(path), "bytes": os.path.getsize(path), "gzip": head == b"\x1f\x8b"}


def base_truth(case):
    return {"case": case, "versions": versions(), "env": {k: os.environ.get(k) for k in ENV_KEYS},
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


# ---------------------------------------------------------------- cases

def jax_train(out, case):
    import jax
    import optax

    model = make_model()
    key = jax.random.PRNGKey(0)
    key, kx, ky, kinit = jax.random.split(key, 4)
    batch = 1024
    x = jax.random.normal(kx, (batch, 1024))
    y = jax.random.normal(ky, (batch, 1024))
    params = model.init(kinit, x)
    tx = optax.adam(1e-3)
    opt_state = tx.init(params)
    train_step = make_train_step(model, tx)
    truth = base_truth(case)
    truth.update({"model": "flax.linen MLP 1024-4096-4096-4096-1024, ReLU, float32", "optimizer": "optax.adam(1e-3)",
                  "batch": batch, "steps": 5, "jit": "train_step returns (params, opt_state, grads, loss)",
                  "grad_history": "every step's grads appended to a Python list (grows by one grads tree a step)",
                  "profiles": []})
    grad_history = []
    losses = []
    for step in range(1, 6):
        params, opt_state, grads, loss = train_step(params, opt_state, x, y)
        grad_history.append(grads)
        losses.append(float(loss))
        print(f"step {step} loss {losses[-1]:.5f}", flush=True)
        if step in (1, 5):
            jax.block_until_ready((params, opt_state, grads, loss))
            p = save_profile(f"{out}/{case}.step{step}.prof")
            stats = memory_stats()
            counted = {"params": leaves_bytes(params), "grads": leaves_bytes(grads),
                       "opt_state": leaves_bytes(opt_state), "data_x_y": leaves_bytes([x, y]),
                       "loss": leaves_bytes(loss), "prng_keys": leaves_bytes([key, kx, ky, kinit])}
            seen = {id(a) for a in jax.tree_util.tree_leaves(grads)}
            older = [a for g in grad_history for a in jax.tree_util.tree_leaves(g) if id(a) not in seen]
            counted["grad_history_older_steps"] = leaves_bytes(older)
            counted["grad_history_len"] = len(grad_history)
            live = live_arrays_summary()
            known = {id(a) for t in (params, grads, opt_state, x, y, loss, key, kx, ky, kinit, grad_history)
                     for a in jax.tree_util.tree_leaves(t)}
            live["not_counted_above"] = [[list(a.shape), str(a.dtype), int(a.on_device_size_in_bytes())]
                                         for a in jax.live_arrays() if id(a) not in known]
            accounted = sum(v["on_device_bytes"] for k, v in counted.items() if isinstance(v, dict))
            p.update({"step": step, "counted": counted, "live_arrays": live, "accounted_on_device_bytes": accounted,
                      "unaccounted_on_device_bytes": live["on_device_bytes"] - accounted, "memory_stats": stats})
            truth["profiles"].append(p)
            print(json.dumps({k: v for k, v in p.items() if k != "live_arrays"}), flush=True)
    truth["losses"] = losses
    truth["opt_state_structure"] = str(jax.tree_util.tree_structure(opt_state))[:2000]
    with open(f"{out}/{case}.truth.json", "w") as f:
        json.dump(truth, f, indent=1)


def jax_oom_fraction(out, case):
    import jax
    import optax

    batch = 131072
    truth = base_truth(case)
    truth.update({"model": "the same flax.linen MLP, float32", "optimizer": "optax.adam(1e-3)", "batch": batch,
                  "expected": "out of memory in the first jitted train step (activations of 131072 x 4096 "
                              "float32 are 2 GiB each)"})
    model = make_model()
    key = jax.random.PRNGKey(0)
    kx, ky, kinit = jax.random.split(key, 3)
    x = jax.random.normal(kx, (batch, 1024))
    y = jax.random.normal(ky, (batch, 1024))
    params = model.init(kinit, x[:8])
    tx = optax.adam(1e-3)
    opt_state = tx.init(params)
    train_step = make_train_step(model, tx)
    truth["memory_stats_before_step"] = memory_stats()
    truth["counted_before_step"] = {"params": leaves_bytes(params), "opt_state": leaves_bytes(opt_state),
                                    "data_x_y": leaves_bytes([x, y])}
    try:
        params, opt_state, grads, loss = train_step(params, opt_state, x, y)
        jax.block_until_ready(loss)
        truth["oom"] = False
    except Exception as e:
        text = traceback.format_exc()
        with open(f"{out}/{case}.exception.txt", "w") as f:
            f.write(text)
        truth.update({"oom": True, "exception_type": f"{type(e).__module__}.{type(e).__name__}",
                      "exception_first_line": str(e).splitlines()[0] if str(e) else repr(e),
                      "memory_stats_at_oom": memory_stats(), "live_arrays_at_oom": live_arrays_summary()})
        try:
            truth["profile_at_oom"] = save_profile(f"{out}/{case}.prof")
        except Exception as e2:
            truth["profile_at_oom"] = {"error": repr(e2)}
        with open(f"{out}/{case}.truth.json", "w") as f:
            json.dump(truth, f, indent=1)
        raise
    with open(f"{out}/{case}.truth.json", "w") as f:
        json.dump(truth, f, indent=1)


def holder(seconds):
    """A process with JAX's defaults that keeps its preallocated pool: a notebook left open."""
    import jax.numpy as jnp

    w = jnp.ones((4096, 4096))
    (w @ w).block_until_ready()
    print("holder ready", flush=True)
    time.sleep(seconds)


def jax_two_processes(out, case):
    import jax
    import jax.numpy as jnp

    smi = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True)
    total = int(smi.stdout.split()[0]) * 2**20
    request = int(total * 0.4) // 4 * 4
    truth = base_truth(case)
    truth.update({"first_process": "holder: defaults, one 4096x4096 matmul, then idle (started before this one)",
                  "this_process": "defaults; asks for one float32 array of 40 % of the GPU's memory (fits an "
                                  "empty GPU's 75 %, not the 25 % the first process left)",
                  "gpu_total_bytes_nvidia_smi": total, "request_bytes": request})
    try:
        truth["devices"] = [str(d) for d in jax.devices()]
        truth["memory_stats_at_start"] = memory_stats()
        big = jnp.zeros((request // 4,), dtype=jnp.float32)
        big.block_until_ready()
        truth["oom"] = False
        truth["memory_stats_after"] = memory_stats()
    except Exception as e:
        text = traceback.format_exc()
        with open(f"{out}/{case}.exception.txt", "w") as f:
            f.write(text)
        truth.update({"oom": True, "exception_type": f"{type(e).__module__}.{type(e).__name__}",
                      "exception_first_line": str(e).splitlines()[0] if str(e) else repr(e),
                      "memory_stats_at_oom": memory_stats()})
        with open(f"{out}/{case}.truth.json", "w") as f:
            json.dump(truth, f, indent=1)
        raise
    with open(f"{out}/{case}.truth.json", "w") as f:
        json.dump(truth, f, indent=1)


WORKERS = {"jax_train": jax_train, "jax_oom_fraction": jax_oom_fraction, "jax_two_processes": jax_two_processes}


# ---------------------------------------------------------------- driver

def run_case(out, case, timeout, env):
    t0 = time.time()
    err_path = f"{out}/{case}.stderr.txt"
    with open(err_path, "w") as err:
        p = subprocess.Popen([sys.executable, HERE, "worker", out, case], stdout=subprocess.PIPE, stderr=err,
                             text=True, start_new_session=True, env=env)
        try:
            text, _ = p.communicate(timeout=timeout)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            text, _ = p.communicate()
            rc = "timeout"
    size = os.path.getsize(err_path)
    if size > 2_000_000:  # keep the head and tail of a huge log
        with open(err_path, "rb") as f:
            data = f.read()
        with open(err_path, "wb") as f:
            f.write(data[:1_000_000] + b"\n[... %d bytes cut by jax_capture.py ...]\n" % (size - 1_800_000)
                    + data[-800_000:])
    print(f"== {case} rc={rc} {time.time() - t0:.1f}s stderr {size} bytes", flush=True)
    print(text[-3000:], flush=True)
    with open(err_path, errors="replace") as f:
        print("stderr tail:", f.read()[-1500:], flush=True)
    return rc


def pack(out, tarball):
    with tarfile.open(tarball + ".tmp", "w:gz") as tar:
        for name in sorted(os.listdir(out)):
            tar.add(os.path.join(out, name), arcname=name)
    os.replace(tarball + ".tmp", tarball)


def main(out, tarball, cases=None):
    os.makedirs(out, exist_ok=True)
    base = {k: v for k, v in os.environ.items() if k not in ENV_KEYS}
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv"],
                         capture_output=True, text=True)
    with open(f"{out}/run_info.txt", "w") as f:
        f.write(smi.stdout + time.strftime("%Y-%m-%dT%H:%M:%SZ\n", time.gmtime()))
    for case in cases or list(WORKERS):
        if case == "jax_train":
            run_case(out, case, 150, base)
        elif case == "jax_oom_fraction":
            run_case(out, case, 150, dict(base, XLA_PYTHON_CLIENT_MEM_FRACTION=".05", TF_CPP_MIN_LOG_LEVEL="0"))
        elif case == "jax_two_processes":
            with open(f"{out}/{case}.holder.log", "w") as hl:
                h = subprocess.Popen([sys.executable, HERE, "holder", "120"], stdout=subprocess.PIPE, stderr=hl,
                                     text=True, env=base)
                line = h.stdout.readline()
                print("holder:", line.strip(), flush=True)
                smi = subprocess.run(["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv"],
                                     capture_output=True, text=True)
                with open(f"{out}/{case}.nvidia_smi.txt", "w") as f:
                    f.write(smi.stdout)
                run_case(out, case, 120, dict(base, TF_CPP_MIN_LOG_LEVEL="0"))
                h.kill()
                h.wait()
        pack(out, tarball)


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        WORKERS[sys.argv[3]](sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "holder":
        holder(int(sys.argv[2]))
    else:
        main(sys.argv[2], sys.argv[3], sys.argv[4].split(",") if len(sys.argv) > 4 and sys.argv[4] else None)
