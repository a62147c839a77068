"""A DCGM exporter text file for memlens, written from nvidia-smi readings: no dcgm-exporter
runs on the H200 machine, so each `nvidia-smi --query-gpu` reading (every 100 ms) is written as
one scrape in dcgm-exporter's exposition format — `DCGM_FI_DEV_FB_USED`/`FB_FREE`/`FB_RESERVED`
in MiB, labels `gpu`, `UUID`, `device`, `modelName`, `Hostname`, `pci_bus_id`, each sample with
its timestamp in ms — while PyTorch trains the round-2 MLP with a snapshot recorded. The same
readings are kept as the nvidia-smi CSV they came from.
Run: python3 dcgm.py OUT_DIR → dcgm_run.prom, dcgm_run.nvidia_smi.csv, dcgm_run.pickle (+ memory_stats)
"""
import datetime
import json
import socket
import subprocess
import sys
import time

out = sys.argv[1]
query = "timestamp,index,uuid,name,pci.bus_id,memory.used,memory.free,memory.reserved,memory.total"
smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={query}", "--format=csv", "-lms", "100"],
                       stdout=open(f"{out}/dcgm_run.nvidia_smi.csv", "w"))
time.sleep(1.0)
subprocess.run([sys.executable, "-c", f"""
import json, torch, torch.nn as nn, time
torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python")
m = nn.Sequential(nn.Linear(4096, 8192), nn.ReLU(), nn.Linear(8192, 4096)).cuda()
opt = torch.optim.AdamW(m.parameters())
for _ in range(6):
    m(torch.randn(4096, 4096, device="cuda")).square().mean().backward(); opt.step(); opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize(); time.sleep(0.3)
torch.cuda.memory._dump_snapshot("{out}/dcgm_run.pickle")
json.dump(torch.cuda.memory_stats(), open("{out}/dcgm_run.memory_stats.json", "w"), indent=1, sort_keys=True)
"""], check=True)
time.sleep(1.0)
smi.terminate()
smi.wait()
host = socket.gethostname()
lines = open(f"{out}/dcgm_run.nvidia_smi.csv").read().splitlines()[1:]
metrics = [("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", 5),
           ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", 6),
           ("DCGM_FI_DEV_FB_RESERVED", "Framebuffer memory reserved (in MiB).", 7)]
with open(f"{out}/dcgm_run.prom", "w") as f:
    for line in lines:
        cols = [c.strip() for c in line.split(",")]
        # nvidia-smi writes local wall time without a zone; this machine runs on UTC.
        stamp = datetime.datetime.strptime(cols[0], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc)
        ms = int(stamp.timestamp() * 1000)
        labels = (f'gpu="{cols[1]}",UUID="{cols[2]}",device="nvidia{cols[1]}",modelName="{cols[3]}",'
                  f'Hostname="{host}",pci_bus_id="{cols[4]}"')
        for name, help_text, i in metrics:
            f.write(f"# HELP {name} {help_text}\n# TYPE {name} gauge\n")
            f.write(f"{name}{{{labels}}} {cols[i].split()[0]} {ms}\n")
