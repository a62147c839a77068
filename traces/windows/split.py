"""Splits a full allocator snapshot into the windows a recording taken window by window would
have sent (`memlens.torch.record(every_steps=N)`): window k holds the k-th slice of each
device's trace; only the last holds the allocator's state (the segments), as only the last
window's state is the state at the end. Joined, the windows are the snapshot again.

    python3 split.py SNAPSHOT(.gz) K OUT_PREFIX   → OUT_PREFIX.window_{0..K-1}.pickle.gz
"""
import gzip
import pickle
import sys

src, k, prefix = sys.argv[1], int(sys.argv[2]), sys.argv[3]
opener = gzip.open if src.endswith(".gz") else open
with opener(src, "rb") as f:
    snap = pickle.load(f)
traces = snap["device_traces"]
for w in range(k):
    window = {key: value for key, value in snap.items() if key not in ("segments", "device_traces")}
    window["segments"] = snap["segments"] if w == k - 1 else []
    window["device_traces"] = [t[len(t) * w // k:len(t) * (w + 1) // k] for t in traces]
    # mtime 0: the same bytes every time the script runs.
    with open(f"{prefix}.window_{w}.pickle.gz", "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as out:
        pickle.dump(window, out, protocol=4)
