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
