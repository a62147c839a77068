"""Holds N MiB on the GPU for S seconds (a process for nvidia-smi pmon to see)."""
import sys
import time

import torch

mib, seconds = int(sys.argv[1]), float(sys.argv[2])
x = torch.empty(mib << 20, dtype=torch.uint8, device="cuda")
x.fill_(1)
torch.cuda.synchronize()
time.sleep(seconds)
