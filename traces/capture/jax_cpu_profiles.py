"""Small JAX device memory profiles made on the CPU backend, for memlens' JAX importer (issue 78, P28):
`jax.profiler.save_device_memory_profile` works on every backend, so these are real profiles, written by the
same XLA code (PyClient::HeapProfile) as on a GPU, of a model small enough to commit.

Cases (one process, in order; the model and step are jax_capture.py's, smaller):
  jax_cpu_train.step1 / .step5   a flax.linen MLP (64 -> 256 -> 256 -> 64, ReLU), optax.adam, a jitted train
                                 step returning params, opt_state, grads and loss; every step's grads kept in a
                                 list (grad_history), so step 5 holds four more grads trees than step 1.
  jax_cpu_eager                  the same model without jit: params from model.init (flax frames), Adam's state
                                 from tx.init (optax frames), grads from jax.grad called eagerly, the batch.
Each NAME.truth.json holds what this script counted from its arrays: every live jax.Array's buffers on each
device (deduplicated by buffer pointer, as XLA's profile counts each buffer once), sum of nbytes and of
on_device_size_in_bytes, and each pytree's own sums (params, grads, opt_state, batch).
Run: python3 -m pip install jax flax optax && python3 traces/capture/jax_cpu_profiles.py traces/jax-cpu
"""
import importlib.metadata as md
import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flax.linen as nn  # noqa: E402


class MLP(nn.Module):
    features: tuple

    @nn.compact
    def __call__(self, x):
        for feat in self.features[:-1]:
            x = nn.relu(nn.Dense(feat)(x))
        return nn.Dense(self.features[-1])(x)


def tree_bytes(tree):
    leaves = [x for x in jax.tree_util.tree_leaves(tree) if isinstance(x, jax.Array)]
    return {"leaves": len(leaves), "nbytes": int(sum(x.nbytes for x in leaves))}


def live_buffers():
    """Every live array's buffers, each once (XLA's profile skips a buffer already counted)."""
    seen = {}
    for a in jax.live_arrays():
        if a.is_deleted():
            continue
        for shard in a.addressable_shards:
            ptr = shard.data.unsafe_buffer_pointer()
            seen[(str(shard.device), ptr)] = (int(shard.data.nbytes), int(shard.data.on_device_size_in_bytes()))
    by_device = {}
    for (device, _), (nbytes, on_device) in seen.items():
        d = by_device.setdefault(device, {"buffers": 0, "nbytes": 0, "on_device_bytes": 0})
        d["buffers"] += 1
        d["nbytes"] += nbytes
        d["on_device_bytes"] += on_device
    return by_device


def save(out, name, trees, extra):
    path = os.path.join(out, f"{name}.prof")
    jax.profiler.save_device_memory_profile(path)
    truth = {"profile": os.path.basename(path), "live_buffers_by_device": live_buffers(),
             "trees": {k: tree_bytes(v) for k, v in trees.items()},
             "versions": {p: md.version(p) for p in ("jax", "jaxlib", "flax", "optax")}}
    truth.update(extra)
    with open(os.path.join(out, f"{name}.truth.json"), "w") as f:
        json.dump(truth, f, indent=1, sort_keys=True)
        f.write("\n")


def main(out):
    os.makedirs(out, exist_ok=True)
    model = MLP(features=(256, 256, 64))
    key = jax.random.PRNGKey(0)
    kx, ky, kinit = jax.random.split(key, 3)
    x = jax.random.normal(kx, (32, 64))
    y = jax.random.normal(ky, (32, 64))
    tx = optax.adam(1e-3)

    def loss_fn(p, x, y):
        return jnp.mean((model.apply(p, x) - y) ** 2)

    # Eager: each tree made by its library's own code.
    params = model.init(kinit, x)
    opt_state = tx.init(params)
    grads = jax.grad(loss_fn)(params, x, y)
    save(out, "jax_cpu_eager", {"params": params, "opt_state": opt_state, "grads": grads, "batch": [x, y]},
         {"case": "eager: params from model.init, opt_state from tx.init, grads from jax.grad, batch x and y"})
    del grads

    @jax.jit
    def train_step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, grads, loss

    grad_history = []
    for step in range(1, 6):
        params, opt_state, grads, loss = train_step(params, opt_state, x, y)
        grad_history.append(grads)
        if step in (1, 5):
            jax.block_until_ready((params, opt_state, grads, loss))
            save(out, f"jax_cpu_train.step{step}",
                 {"params": params, "opt_state": opt_state, "grads": grads, "grad_history": grad_history,
                  "batch": [x, y], "loss": loss},
                 {"case": f"jitted train step, after step {step}; grad_history holds {len(grad_history)} grads trees"})


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "traces/jax-cpu")
