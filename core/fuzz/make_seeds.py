#!/usr/bin/env python3
"""Derives the fuzz targets' seed corpora (core/fuzz/seeds/<target>/) from the real traces in
traces/ (the `sniff` target starts from all of them): small, still-valid cuts of each format (a few segments and trace entries of a
snapshot, the first lines of a log, the first events of an export), so that libFuzzer starts
from the files' real structure at a few KB each. Re-run after adding traces; the output is
committed.

Usage: python3 core/fuzz/make_seeds.py
"""
import gzip
import json
import os
import pickle
import shutil
import sqlite3
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TRACES = os.path.join(ROOT, "traces")
SEEDS = os.path.join(ROOT, "core", "fuzz", "seeds")


def read(name):
    path = os.path.join(TRACES, name)
    with open(path, "rb") as f:
        data = f.read()
    return gzip.decompress(data) if name.endswith(".gz") else data


def put(target, name, data):
    d = os.path.join(SEEDS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def first_lines(data, n):
    return b"".join(data.splitlines(keepends=True)[:n])


def cut_snapshot(snap, segments=3, entries=40):
    """A snapshot with its first segments and the first entries of each device's trace."""
    out = dict(snap)
    out["segments"] = snap.get("segments", [])[:segments]
    out["device_traces"] = [t[:entries] for t in snap.get("device_traces", [])]
    if "external_annotations" in snap:
        out["external_annotations"] = snap["external_annotations"][:5]
    return out


def snapshots():
    for name, proto in [
        ("mlp_train.pickle", 4),
        ("mlp_train.protocol2.pickle", 2),
        ("mlp_train_cpp_stacks.pickle", 4),
        ("ring_truncated.pickle.gz", 4),
        ("mempool.pickle.gz", 4),
        ("named_pools.pickle.gz", 4),
        ("fx_frames.pickle.gz", 4),
        ("profiled.from_profiler.pickle.gz", 4),
        ("expandable_oom_fragmentation.at_oom.pickle", 4),
        ("leak.two_devices.pickle", 4),
    ]:
        snap = pickle.loads(read(name))
        base = name.split(".pickle")[0]
        put("pytorch_snapshot", f"{base}.pickle", pickle.dumps(cut_snapshot(snap), protocol=proto))
    # Tiny real files as they are, and one gzip member for the gzip path.
    for name in ["mlp_train.pt113_shape.pickle", "mlp_train.segments_only.pickle"]:
        put("pytorch_snapshot", name, read(name))
    put("pytorch_snapshot", "bursts.pickle.gz", gzip.compress(read("bursts.pickle"), mtime=0))


def json_snapshot():
    snap = json.loads(read("json_run.json.gz"))
    put("pytorch_snapshot_json", "json_run.json", json.dumps(cut_snapshot(snap)).encode())


def nsys():
    data = read("cuda_alloc.json")
    lines = data.splitlines(keepends=True)
    kept, per_type = [], {}
    for line in lines:
        d = json.loads(line)
        if "data" in d:
            d["data"] = d["data"][:400]
            kept.append((json.dumps(d) + "\n").encode())
            continue
        t = next(iter(k for k in d if k != "Type"), "")
        per_type[t] = per_type.get(t, 0) + 1
        if per_type[t] <= 25:
            kept.append(line)
    put("nsys_json", "cuda_alloc.json", b"".join(kept))
    with tempfile.TemporaryDirectory() as tmp:
        db_path = os.path.join(tmp, "cut.sqlite")
        shutil.copy(os.path.join(TRACES, "cuda_alloc.sqlite"), db_path)
        db = sqlite3.connect(db_path)
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        keep = {"CUDA_GPU_MEMORY_USAGE_EVENTS", "StringIds", "TARGET_INFO_SESSION_START_TIME",
                "TARGET_INFO_GPU", "CUPTI_ACTIVITY_KIND_RUNTIME", "ENUM_CUDA_MEM_KIND",
                "ENUM_CUDA_DEV_MEM_EVENT_OPER", "PROCESSES", "TARGET_INFO_CUDA_STREAM"}
        for t in tables:
            if t not in keep:
                db.execute(f'DROP TABLE "{t}"')
            elif t != "StringIds":
                db.execute(f'DELETE FROM "{t}" WHERE rowid NOT IN (SELECT rowid FROM "{t}" LIMIT 30)')
        db.commit()
        db.execute("PRAGMA page_size = 512")
        db.execute("VACUUM")
        db.close()
        with open(db_path, "rb") as f:
            put("nsys_sqlite", "cuda_alloc.sqlite", f.read())


def logs():
    for name in ["nvidia_smi_gpu.csv", "nvidia_smi_gpu.nounits.csv", "nvidia_smi_gpu.ist.csv",
                 "nvidia_smi_apps.csv", "cupy_outside.nvidia_smi.csv"]:
        put("nvidia_smi_csv", name, first_lines(read(name), 30))
    put("nvidia_smi_dmon", "nvidia_smi_dmon.txt", first_lines(read("nvidia_smi_dmon.txt"), 30))
    for name in ["nvidia_smi_pmon.txt", "nvidia_smi_pmon_um.txt"]:
        put("nvidia_smi_pmon", name, read(name))
    put("nvml_jsonl", "pynvml_log.jsonl", first_lines(read("pynvml_log.jsonl"), 20))
    prom = read("dcgm_run.prom.gz")
    # The first two scrapes: every metric's HELP/TYPE lines and samples, twice.
    scrapes = prom.split(b"\n\n")
    put("dcgm_exporter", "dcgm_run.prom", first_lines(prom, 80) if len(scrapes) < 2 else b"\n\n".join(scrapes[:2]))


def texts():
    """Out-of-memory messages and logs, memory summaries and nvidia-smi screens, whole (each is
    a few KB): one of each shape."""
    for name in ["oom/fwd_first.error.txt", "oom/other_proc.log", "oom_text/torchrun_ranks.log",
                 "oom_text/cuda_113_allowed.txt", "oom_text/cuda_2018_cached.txt", "oom_text/mps_oom.txt",
                 "oom_text/cuda_malloc_async.txt", "oom_text/wrapped_issue_paste.txt", "oom_text/truncated.txt"]:
        put("oom_message", os.path.basename(name), read(name))
    for name in ["oom/fwd_jump.memory_summary.txt", "oom/fwd_jump.memory_summary_abbreviated.txt",
                 "oom_text/memory_summary_113_shape.txt"]:
        put("memory_summary", os.path.basename(name), read(name))
    for name in ["oom/nvidia_smi_busy.txt", "oom_text/nvidia_smi_470_narrow.txt"]:
        put("nvidia_smi_screen", os.path.basename(name), read(name))


def serving():
    """vLLM and SGLang startup logs, whole (a few KB each): every wording of traces/serving-logs/."""
    for name in sorted(os.listdir(os.path.join(TRACES, "serving-logs"))):
        if name.endswith(".log"):
            put("serving_log", name, read("serving-logs/" + name))


def jax():
    """JAX device memory profiles made on the CPU (traces/jax-cpu/, a few KB each), decompressed:
    the protobuf itself is what the fuzzer mutates."""
    for name in sorted(os.listdir(os.path.join(TRACES, "jax-cpu"))):
        if name.endswith(".prof"):
            put("jax_device_memory_profile", name, gzip.decompress(read("jax-cpu/" + name)))
    # XLA's out-of-memory texts are the OOM text importer's too.
    for name in sorted(os.listdir(os.path.join(TRACES, "jax-texts"))):
        if name.endswith(".txt"):
            put("oom_message", "jax-" + name, read("jax-texts/" + name))


def profiler():
    for name in ["mlp_train.profiler_trace.json", "profiled.profiler_trace.json.gz"]:
        trace = json.loads(read(name))
        events = trace["traceEvents"]
        mem = [e for e in events if e.get("name") == "[memory]"][:40]
        other = [e for e in events if e.get("name") != "[memory]"][:20]
        trace["traceEvents"] = other + mem
        put("pytorch_profiler_trace", name.split(".json")[0] + ".json", json.dumps(trace).encode())
    for name in ["profiled.memory_timeline.json.gz", "profiled.memory_timeline.raw.json.gz"]:
        data = json.loads(read(name))
        if name.endswith(".raw.json.gz"):
            cut = data[:60]
        else:
            cut = [data[0][:30], data[1][:30]]
        put("pytorch_memory_timeline", name[: -len(".gz")], json.dumps(cut).encode())


def multipart(parts):
    out = b""
    for name, fname, body in parts:
        out += b'--memlensfuzz\r\nContent-Disposition: form-data; name="%s"' % name
        if fname is not None:
            out += b'; filename="%s"' % fname
        out += b"\r\nContent-Type: application/octet-stream\r\n\r\n" + body + b"\r\n"
    return out + b"--memlensfuzz--\r\n"


def uploads():
    """The upload target's input: a query string, a newline, a multipart body."""
    head = read("mlp_train.pt113_shape.pickle")[:64]
    put("upload", "two_files", b"title=step%2010&tags=a,b&rank=3&world_size=4&run=job-1\n" + multipart(
        [(b"file", b"snap.pickle", head), (b"file", b"../../rank_2.csv", first_lines(read("nvidia_smi_gpu.csv"), 2))]))
    put("upload", "raw_named", b"name=..%2F..%2Fx%E2%80%AE.pickle&expires_in_days=3\n" + head)
    put("upload", "field_without_file", b"notes=hi\n" + multipart(
        [(b"comment", None, b"just text"), (b"file", b".hidden", b"x")]))


if __name__ == "__main__":
    shutil.rmtree(SEEDS, ignore_errors=True)
    snapshots()
    json_snapshot()
    nsys()
    logs()
    texts()
    serving()
    jax()
    profiler()
    uploads()
    for target in sorted(os.listdir(SEEDS)):
        files = os.listdir(os.path.join(SEEDS, target))
        size = sum(os.path.getsize(os.path.join(SEEDS, target, f)) for f in files)
        print(f"{target}: {len(files)} seeds, {size} bytes")
