"""A JAX device memory profile of arrays over two devices, made on the CPU backend split into two
devices (XLA_FLAGS=--xla_force_host_platform_device_count=2), for memlens' JAX importer (issue 78,
P28): a weight sharded over both devices by rows (NamedSharding over a 1-D mesh), a bias replicated
on both, and a batch on device 0 alone. The profile lists each device's buffers with the device's
label (cpu:0, cpu:1); NAME.truth.json counts each live array's buffers on each device (each buffer
once), so memlens' per-device live bytes are checked to the byte.
Run: python3 -m pip install jax && python3 traces/capture/jax_cpu_sharded.py traces/jax-cpu
"""
import importlib.metadata as md
import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402


def by_device():
    seen = {}
    for a in jax.live_arrays():
        if a.is_deleted():
            continue
        for shard in a.addressable_shards:
            seen[(str(shard.device), shard.data.unsafe_buffer_pointer())] = int(shard.data.nbytes)
    out = {}
    for (device, _), nbytes in seen.items():
        d = out.setdefault(device, {"buffers": 0, "nbytes": 0})
        d["buffers"] += 1
        d["nbytes"] += nbytes
    return out


def main(out):
    devices = jax.devices()
    assert len(devices) == 2, devices
    mesh = Mesh(devices, ("d",))
    weight = jax.device_put(jnp.ones((512, 256), jnp.float32), NamedSharding(mesh, PartitionSpec("d", None)))
    bias = jax.device_put(jnp.zeros((256,), jnp.float32), NamedSharding(mesh, PartitionSpec()))
    batch = jax.device_put(jnp.ones((64, 512), jnp.float32), devices[0])
    jax.block_until_ready((weight, bias, batch))
    path = os.path.join(out, "jax_cpu_sharded.prof")
    jax.profiler.save_device_memory_profile(path)
    truth = {"profile": os.path.basename(path), "live_buffers_by_device": by_device(),
             "arrays": {"weight": "f32[512,256] sharded by rows over cpu:0 and cpu:1 (256 KiB each)",
                        "bias": "f32[256] replicated on both (1 KiB each)",
                        "batch": "f32[64,512] on cpu:0 (128 KiB)"},
             "versions": {p: md.version(p) for p in ("jax", "jaxlib")}}
    with open(os.path.join(out, "jax_cpu_sharded.truth.json"), "w") as f:
        json.dump(truth, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "traces/jax-cpu")
