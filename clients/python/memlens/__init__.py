"""Send PyTorch CUDA allocator snapshots to a memlens server (standard library only).

`upload` streams files (or an in-memory snapshot) to `POST /api/reports` and returns the share
link; `memlens.torch` records allocator history and dumps and uploads on exit or on an OOM;
`memlens.jax` uploads JAX's device memory profile with XLA's out-of-memory error.
"""
from ._upload import UploadError, upload

__all__ = ["UploadError", "upload"]
__version__ = "0.1.0"
