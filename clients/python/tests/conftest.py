"""A real `memlens serve` (the binary CI just built, `MEMLENS_BIN`) on loopback for the client
tests, with an upload token, and the repository's real traces."""
import gzip
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

# `pytester` runs pytest sessions inside a test (the `memlens_check` plugin's tests).
pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[3]
TRACES = REPO / "traces"
TOKEN = "py-client-token"


class Server:
    def __init__(self, url, proc, data):
        self.url, self.proc, self.data = url, proc, data

    def get(self, path):
        with urllib.request.urlopen(self.url + path, timeout=30) as r:
            return json.loads(r.read())

    def wait_ready(self, link, seconds=120):
        report = link.rsplit("/", 1)[-1]
        deadline = time.time() + seconds
        while time.time() < deadline:
            s = self.get(f"/api/reports/{report}/status")
            assert s["state"] != "failed", s
            if s["state"] == "ready":
                return self.get(f"/api/reports/{report}")
            time.sleep(0.2)
        raise AssertionError(f"{link} not ready")


@pytest.fixture(scope="session")
def server():
    binary = os.environ.get("MEMLENS_BIN") or str(
        Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")) / "debug" / "memlens"
    )
    data = Path(tempfile.mkdtemp(prefix="memlens-py-"))
    (data / "dist").mkdir()
    (data / "dist" / "index.html").write_text("<html><head></head><body></body></html>")
    proc = subprocess.Popen(
        [binary, "serve", "--bind", "127.0.0.1:0", "--data-dir", str(data / "store"), "--static-dir",
         str(data / "dist"), "--upload-token", TOKEN],
        stdout=subprocess.PIPE, text=True,
    )
    line = proc.stdout.readline()
    assert "listening on" in line, line
    yield Server(line.split()[-1], proc, data)
    proc.terminate()
    proc.wait(timeout=30)
    shutil.rmtree(data, ignore_errors=True)


def oracle(name, key="requested_bytes.all.peak"):
    stem = name.split(".pickle")[0]
    return json.loads((TRACES / f"{stem}.memory_stats.json").read_text())[key]


def unpack(name, dest):
    """Writes the real snapshot `name` (gzip-compressed or not) to `dest` as PyTorch dumps it."""
    src = TRACES / name
    opener = gzip.open if name.endswith(".gz") else open
    with opener(src, "rb") as f, open(dest, "wb") as out:
        shutil.copyfileobj(f, out)
