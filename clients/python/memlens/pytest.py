"""A pytest plugin: hold a test's GPU memory to a stored baseline (loaded on its own once the
client is installed).

    def test_train_step(memlens_check):
        with memlens_check(max_peak_increase="5%", max_category_increase={"activation": "10%"}):
            train_step()

The block runs with PyTorch's allocator history recorded; on leaving it the snapshot is dumped
and sent to a memlens server (`--memlens-server` or `MEMLENS_SERVER`), with the test's stored
baseline snapshot (`--memlens-baselines DIR`, default `memlens-baselines/` under pytest's root
folder, one `.pickle.gz` per test and name), and the server's check (`GET /api/check`, the
same as `memlens check`) decides: past a limit the test fails with the verdict and a link that
compares the two runs. A test with no baseline yet records one and passes, and
`--memlens-update-baselines` records them all anew. Without a server the test is skipped,
saying why. An exception inside the block goes on untouched, with nothing checked.
"""
import gzip
import json
import os
import re
import shutil
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from ._upload import upload


def pytest_addoption(parser):
    group = parser.getgroup("memlens", "GPU memory regression checks")
    group.addoption("--memlens-server", default=None,
                    help="memlens server checking memory (default: MEMLENS_SERVER)")
    group.addoption("--memlens-token", default=None, help="upload token (default: MEMLENS_TOKEN)")
    group.addoption("--memlens-baselines", default=None,
                    help="folder of baseline snapshots (default: ROOTDIR/memlens-baselines)")
    group.addoption("--memlens-update-baselines", action="store_true", default=False,
                    help="record every checked block's snapshot as its new baseline")


class CheckFailed(AssertionError):
    """The block's memory went past a limit; the message is the server's verdict."""


def _limit_arg(limit):
    """`"5%"`, `"512MiB"` or a number of bytes, as the server reads it."""
    return str(limit) if isinstance(limit, str) else str(int(limit))


def _get_json(url, timeout=60):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, json.loads(r.read() or b"null")


def _wait_analysed(server, link, seconds):
    """Waits until the report `link` is analysed; raises naming it if it failed or took too long."""
    report = link.rstrip("/").rsplit("/", 1)[-1]
    deadline = time.time() + seconds
    while True:
        _, status = _get_json(f"{server}/api/reports/{report}/status")
        state = status.get("state") if isinstance(status, dict) else None
        if state == "ready":
            return report
        if state == "failed":
            raise CheckFailed(f"memlens: {link} could not be analysed: {status.get('error')}")
        if time.time() > deadline:
            raise CheckFailed(f"memlens: {link} still being analysed after {seconds} s")
        time.sleep(0.5)


class MemoryCheck:
    """What `memlens_check(...)` returns: a context manager whose result (`outcome`, the
    server's JSON; `link`, the new run's report) is kept after the block."""

    def __init__(self, owner, name, limits):
        self.owner, self.name, self.limits = owner, name, limits
        self.outcome = self.link = self.baseline_link = None

    def __enter__(self):
        from . import torch as mt

        mt._backend.start(1_000_000, "python")
        return self

    def __exit__(self, exc_type, exc, tb):
        from . import torch as mt

        try:
            if exc_type is None:
                fd, path = tempfile.mkstemp(suffix=".pickle")
                os.close(fd)
                try:
                    mt._backend.dump(path)
                    self.owner._check(self, path)
                finally:
                    os.remove(path)
        finally:
            try:
                mt._backend.stop()
            except Exception:
                pass
        return False


class _Checker:
    def __init__(self, config, nodeid):
        opt = config.getoption
        self.server = (opt("--memlens-server") or os.environ.get("MEMLENS_SERVER") or "").rstrip("/")
        self.token = opt("--memlens-token") or os.environ.get("MEMLENS_TOKEN")
        self.folder = opt("--memlens-baselines") or os.path.join(str(config.rootpath), "memlens-baselines")
        self.update = opt("--memlens-update-baselines")
        self.nodeid = nodeid

    def baseline_path(self, name):
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", self.nodeid + (f".{name}" if name else "")).strip("_")
        return os.path.join(self.folder, stem + ".pickle.gz")

    def _check(self, check, snapshot):
        baseline = self.baseline_path(check.name)
        if self.update or not os.path.exists(baseline):
            os.makedirs(self.folder, exist_ok=True)
            with open(snapshot, "rb") as f, gzip.open(baseline + ".tmp", "wb") as out:
                shutil.copyfileobj(f, out)
            os.replace(baseline + ".tmp", baseline)
            print(f"memlens: baseline recorded at {baseline}")
            return
        sent = dict(server=self.server, token=self.token, job=self.nodeid, quiet=True)
        check.link = upload(snapshot, name="snapshot.pickle", title=f"{self.nodeid} (new)", **sent)
        check.baseline_link = upload(baseline, name=os.path.basename(baseline),
                                     title=f"{self.nodeid} (baseline)", **sent)
        new = _wait_analysed(self.server, check.link, 600)
        base = _wait_analysed(self.server, check.baseline_link, 600)
        query = {"new": new, "baseline": base}
        limits = check.limits
        if limits.get("max_peak_increase") is not None:
            query["max_peak_increase"] = _limit_arg(limits["max_peak_increase"])
        if limits.get("max_reserved_increase") is not None:
            query["max_reserved_increase"] = _limit_arg(limits["max_reserved_increase"])
        if limits.get("max_category_increase"):
            query["max_category_increase"] = ",".join(
                f"{c}={_limit_arg(v)}" for c, v in limits["max_category_increase"].items())
        url = f"{self.server}/api/check?{urllib.parse.urlencode(query)}"
        try:
            _, check.outcome = _get_json(url)
        except urllib.error.HTTPError as e:
            body = e.read().decode("utf-8", "replace")
            try:
                body = json.loads(body).get("error", body)
            except ValueError:
                pass
            raise CheckFailed(f"memlens: the check was refused ({e.code}): {body}") from None
        if not check.outcome["passed"]:
            raise CheckFailed(
                f"memlens: {check.outcome['verdict']}\n"
                f"  compare: {self.server}/compare/{new}/{base}\n"
                f"  baseline: {baseline} (--memlens-update-baselines records a new one)"
            )


@pytest.fixture
def memlens_check(request):
    """`memlens_check(name=None, max_peak_increase="5%", max_reserved_increase=None,
    max_category_increase=None)`: a context manager holding the block's memory to the test's
    baseline (see the module's help)."""
    checker = _Checker(request.config, request.node.nodeid)
    if not checker.server:
        pytest.skip("memlens: no server to check memory on (--memlens-server or MEMLENS_SERVER)")

    def make(name=None, max_peak_increase="5%", max_reserved_increase=None, max_category_increase=None):
        return MemoryCheck(checker, name, {
            "max_peak_increase": max_peak_increase,
            "max_reserved_increase": max_reserved_increase,
            "max_category_increase": max_category_increase or {},
        })

    return make


__all__ = ["CheckFailed", "MemoryCheck", "memlens_check"]
