"""Derives older/other snapshot shapes from the real H200 traces in this folder.

The derived files are committed; CI does not run this script. Each keeps the real trace's data
and changes only the container shape, so the real oracles still apply where stated.

- mlp_train.pt21_shape.pickle: as PyTorch 2.1 wrote it: no time_us, no allocator_settings,
  no external_annotations, no compile_context/user_metadata (peaks equal mlp_train's oracle).
- mlp_train.protocol2.pickle: the same dict pickled with protocol 2 (BINPUT memo, no FRAME),
  as the C++/TorchScript pickler writes it.
- mlp_train.segments_only.pickle: the legacy bare list of segments (torch.cuda.memory_snapshot()).
- leak.two_devices.pickle: two devices, device 0 with an empty trace, device 1 holding leak's.
- leak.pt21_shape.pickle: leak in the 2.1 shape (no timestamps, no annotations): iterations must
  come from the allocation pattern.
- mlp_train.pt113_shape.pickle: the final state as PyTorch 1.13 wrote it with history
  recording on: a bare segment list whose blocks have no `address`, `frames` or
  `requested_size`, but `history: [{addr, real_size, frames}]` (the last entry is the live one).
- nvidia_smi_gpu.ist.csv: nvidia_smi_gpu.csv as nvidia-smi writes it on a machine set to
  UTC+05:30 (its zone-less local times 5 h 30 min ahead); lining it up with the snapshots
  must undo exactly that.
- nvidia_smi_gpu.nounits.csv: the same log as `--format=csv,nounits` writes it (no units in
  the header or the values).
- four_gpus.pickle.gz: four devices in one snapshot, as one process driving four GPUs writes
  it: cuda:0, cuda:2 and cuda:3 are ddp_rank0/1/2's traces and segments, cuda:1 is
  gpt_b16_oom's (the only OOM). Each device's peaks equal its source's oracle.
"""
import pickle

with open("mlp_train.pickle", "rb") as f:
    mlp = pickle.load(f)

old = {"segments": mlp["segments"], "device_traces": [[{k: v for k, v in e.items() if k not in ("time_us", "compile_context", "user_metadata")} for e in t] for t in mlp["device_traces"]]}
with open("mlp_train.pt21_shape.pickle", "wb") as f:
    pickle.dump(old, f, protocol=4)
with open("mlp_train.protocol2.pickle", "wb") as f:
    pickle.dump(mlp, f, protocol=2)
with open("mlp_train.segments_only.pickle", "wb") as f:
    pickle.dump(mlp["segments"], f, protocol=4)

def pt21(snapshot):
    return {"segments": snapshot["segments"], "device_traces": [[{k: v for k, v in e.items() if k not in ("time_us", "compile_context", "user_metadata")} for e in t] for t in snapshot["device_traces"]]}

with open("leak.pickle", "rb") as f:
    leak = pickle.load(f)
with open("leak.pt21_shape.pickle", "wb") as f:
    pickle.dump(pt21(leak), f, protocol=4)
for s in leak["segments"]:
    s["device"] = 1
leak["device_traces"] = [[], leak["device_traces"][0]]
for a in leak["external_annotations"]:
    a["device"] = 1
with open("leak.two_devices.pickle", "wb") as f:
    pickle.dump(leak, f, protocol=4)

import datetime
import re

with open("nvidia_smi_gpu.csv") as f:
    lines = f.read().splitlines()
fmt = "%Y/%m/%d %H:%M:%S.%f"
shifted = [lines[0]]
for line in lines[1:]:
    stamp, rest = line.split(", ", 1)
    t = datetime.datetime.strptime(stamp, fmt) + datetime.timedelta(hours=5, minutes=30)
    shifted.append(t.strftime(fmt)[:-3] + ", " + rest)
with open("nvidia_smi_gpu.ist.csv", "w") as f:
    f.write("\n".join(shifted) + "\n")
nounits = [re.sub(r" \[[^]]*\]", "", lines[0])]
for line in lines[1:]:
    nounits.append(", ".join(re.sub(r" (MiB|%|W)$", "", v) for v in line.split(", ")))
with open("nvidia_smi_gpu.nounits.csv", "w") as f:
    f.write("\n".join(nounits) + "\n")

pt113 = []
for seg in mlp["segments"]:
    blocks = []
    for b in seg["blocks"]:
        nb = {"size": b["size"], "state": b["state"]}
        if b["state"] != "inactive":
            nb["history"] = [{"addr": b["address"], "real_size": b["requested_size"], "frames": b["frames"]}]
        blocks.append(nb)
    keep = ("device", "address", "total_size", "allocated_size", "active_size", "stream", "segment_type")
    ns = {k: seg[k] for k in keep}
    ns["blocks"] = blocks
    pt113.append(ns)
with open("mlp_train.pt113_shape.pickle", "wb") as f:
    pickle.dump(pt113, f, protocol=4)

import gzip


def load_gz(name):
    with gzip.open(name, "rb") as f:
        return pickle.load(f)


sources = ["ddp_rank0.pickle.gz", "gpt_b16_oom.pickle.gz", "ddp_rank1.pickle.gz", "ddp_rank2.pickle.gz"]
four = {"segments": [], "device_traces": [], "external_annotations": []}
for device, name in enumerate(sources):
    snap = load_gz(name)
    four.setdefault("allocator_settings", snap.get("allocator_settings"))
    for seg in snap["segments"]:
        seg["device"] = device
        four["segments"].append(seg)
    four["device_traces"].append(snap["device_traces"][0])
    for a in snap.get("external_annotations", []):
        a["device"] = device
        four["external_annotations"].append(a)
with gzip.open("four_gpus.pickle.gz", "wb", compresslevel=9) as f:
    pickle.dump(four, f, protocol=4)
