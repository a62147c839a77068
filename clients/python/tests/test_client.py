"""The Python client against a real `memlens serve`: uploads carry PyTorch's own numbers,
refusals are clear, and the torch hooks dump, upload and re-raise (PyTorch is reached through
`memlens.torch._backend`, replaced here by one that writes real snapshots)."""
import gzip
import pickle
import socket
import subprocess
import sys
import threading

import pytest

import memlens
import memlens.torch as mt
from conftest import TOKEN, TRACES, oracle, unpack


def test_upload_a_file_prints_a_link_whose_report_has_the_oracle_peak(server):
    link = memlens.upload(str(TRACES / "mlp_train.pickle"), server=server.url, token=TOKEN, title="mlp", tags=["a", "b"])
    assert link.startswith(server.url + "/r/")
    report = server.wait_ready(link)
    assert report["files"][0]["devices"][0]["peak_allocated_bytes"] == oracle("mlp_train.pickle")
    status = server.get(f"/api/reports/{link.rsplit('/', 1)[-1]}/status")
    assert status["meta"] == {"title": "mlp", "tags": ["a", "b"]}


def test_python_m_memlens_upload_prints_the_link(server):
    out = subprocess.run(
        [sys.executable, "-m", "memlens", "upload", str(TRACES / "leak.pickle"), "--server", server.url, "--token", TOKEN],
        capture_output=True, text=True, check=True,
    )
    link = out.stdout.strip()
    assert link.startswith(server.url + "/r/"), out
    report = server.wait_ready(link)
    assert report["files"][0]["devices"][0]["peak_allocated_bytes"] == oracle("leak.pickle")


def test_a_snapshot_dict_uploads_as_well(server, tmp_path):
    import pickle

    with open(TRACES / "mlp_train.pickle", "rb") as f:
        snapshot = pickle.load(f)
    link = memlens.upload(snapshot, server=server.url, token=TOKEN)
    assert server.wait_ready(link)["files"][0]["devices"][0]["peak_allocated_bytes"] == oracle("mlp_train.pickle")


def test_without_or_with_a_wrong_token_the_refusal_is_one_clear_error(server):
    for token in (None, "wrong"):
        with pytest.raises(memlens.UploadError, match="401"):
            memlens.upload(str(TRACES / "mlp_train.pickle"), server=server.url, token=token, attempts=1)
    out = subprocess.run([sys.executable, "-m", "memlens", "upload", str(TRACES / "mlp_train.pickle"),
                          "--server", server.url], capture_output=True, text=True)
    assert out.returncode == 2 and "401" in out.stderr


def test_an_unreachable_server_is_retried_then_named():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(memlens.UploadError, match="cannot reach"):
        memlens.upload(str(TRACES / "mlp_train.pickle"), server=f"http://127.0.0.1:{port}", attempts=2)


class FakeTorch:
    """Stands in for PyTorch: `dump` writes a real snapshot, the observer is kept to be fired."""

    def __init__(self, snapshot):
        self.snapshot, self.calls, self.observer = snapshot, [], None

    def start(self, max_entries, stacks):
        self.calls.append(("start", max_entries, stacks))

    def stop(self):
        self.calls.append(("stop",))

    def dump(self, path):
        self.calls.append(("dump",))
        unpack(self.snapshot, path)

    def attach_oom_observer(self, fn):
        self.observer = fn


@pytest.fixture
def fake(monkeypatch):
    def make(snapshot):
        f = FakeTorch(snapshot)
        monkeypatch.setattr(mt, "_backend", f)
        return f
    for k in ("RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(k, raising=False)
    return make


def test_record_dumps_uploads_and_reraises_the_oom_untouched(server, fake):
    f = fake("gpt_b16_oom.pickle.gz")

    class OutOfMemoryError(RuntimeError):
        pass

    err = OutOfMemoryError("CUDA out of memory. Tried to allocate 1.95 GiB")
    hook = mt.record(server=server.url, token=TOKEN, max_entries=1000)
    with pytest.raises(OutOfMemoryError) as raised:
        with hook:
            raise err
    assert raised.value is err
    assert [c[0] for c in f.calls] == ["start", "dump", "stop"]
    report = server.wait_ready(hook.link)
    dev = report["files"][0]["devices"][0]
    assert dev["oom_count"] == 1 and dev["ooms"][0]["requested_bytes"] > 0


def test_record_as_a_decorator_uploads_on_a_normal_exit(server, fake):
    fake("mlp_train.pickle")

    @mt.record(server=server.url, token=TOKEN)
    def train():
        return 42

    assert train() == 42


def test_an_upload_failure_never_masks_the_jobs_exception(fake, capsys):
    fake("mlp_train.pickle")
    with pytest.raises(ValueError, match="the job's own"):
        with mt.record(server="http://127.0.0.1:9", attempts=1):
            raise ValueError("the job's own")
    assert "could not upload" in capsys.readouterr().err


def test_the_oom_observer_uploads_from_inside_the_allocator(server, fake):
    f = fake("gpt_b16_oom.pickle.gz")
    hook = mt.on_oom(server=server.url, token=TOKEN, timeout=60)
    assert f.observer is hook
    f.observer(0, 2_097_152_000, 10 << 30, 0)  # as the allocator calls it
    assert len(hook.links) == 1
    report = server.wait_ready(hook.links[0])
    assert report["files"][0]["devices"][0]["oom_count"] == 1


def test_ranks_of_one_job_gather_into_one_report_and_only_rank_0_prints(server, fake, monkeypatch, capsys):
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-4242")
    monkeypatch.setenv("WORLD_SIZE", "2")
    links = []
    for rank, snapshot in ((1, "ddp_rank3.pickle.gz"), (0, "ddp_rank0.pickle.gz")):
        monkeypatch.setenv("RANK", str(rank))
        fake(snapshot)
        hook = mt.record(server=server.url, token=TOKEN)
        with hook:
            pass
        links.append(hook.link)
    assert links[0] == links[1]
    err = capsys.readouterr().err
    assert err.count("memory report at") == 1
    report = server.wait_ready(links[0])
    run = report["run"]
    assert [r["rank"] for r in run["ranks"]] == [0, 1]
    assert run["worst_rank"] == 1
    assert {r["peak_allocated_bytes"] for r in run["ranks"]} == {oracle("ddp_rank0.pickle.gz"), oracle("ddp_rank3.pickle.gz")}


class WindowedTorch(FakeTorch):
    """PyTorch recording window by window: each `window()` is the next of a real snapshot's
    windows (traces/windows/, split as a windowed recording sends them); the optimizer-step
    hook is kept to be fired as training would."""

    def __init__(self, name, count):
        super().__init__(None)
        self.windows = []
        for k in range(count):
            with gzip.open(TRACES / "windows" / f"{name}.window_{k}.pickle.gz", "rb") as f:
                self.windows.append(pickle.load(f))
        self.step = None
        self.threads = []

    def window(self, max_entries, stacks):
        self.calls.append(("window",))
        self.threads.append(threading.current_thread().name)
        return self.windows.pop(0)

    def on_step(self, fn):
        self.step = fn
        fake = self

        class Handle:
            def remove(self):
                fake.step = None

        return Handle()


@pytest.mark.parametrize("every", [{"every_steps": 2}, {"every_seconds": 1e-9}])
def test_record_window_by_window_grows_one_report_of_the_whole_run(server, monkeypatch, capsys, every):
    for k in ("RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(k, raising=False)
    f = WindowedTorch("gpt_b8", 4)
    monkeypatch.setattr(mt, "_backend", f)
    steps = 6 if "every_steps" in every else 3
    rec = mt.record(server=server.url, token=TOKEN, job="py-windows", **every)
    with rec:
        for _ in range(steps):
            f.step()  # as the optimizer's step hook is called
    assert f.step is None, "the hook is removed on leaving"
    assert [c[0] for c in f.calls] == ["start", "window", "window", "window", "window", "stop"]
    assert set(f.threads) == {threading.current_thread().name}, "windows are taken on the training thread"
    assert "it grows as the job runs" in capsys.readouterr().err
    report = server.wait_ready(rec.link)
    status = server.get(f"/api/reports/{rec.link.rsplit('/', 1)[-1]}/status")
    assert status["windows"] == 4
    assert status["meta"]["job"] == "py-windows"
    assert report["files"][0]["devices"][0]["peak_allocated_bytes"] == oracle("gpt_b8.pickle.gz")


def test_an_oom_ending_a_windowed_recording_sends_the_last_window_and_is_raised_untouched(server, monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(k, raising=False)
    f = WindowedTorch("gpt_b8", 4)
    monkeypatch.setattr(mt, "_backend", f)

    class OutOfMemoryError(RuntimeError):
        pass

    err = OutOfMemoryError("CUDA out of memory. Tried to allocate 1.95 GiB")
    rec = mt.record(server=server.url, token=TOKEN, every_steps=1, print_link=False)
    with pytest.raises(OutOfMemoryError) as raised:
        with rec:
            for _ in range(3):
                f.step()
            raise err
    assert raised.value is err
    assert [c[0] for c in f.calls].count("window") == 4, "three steps, then the last window as the OOM ends it"
    server.wait_ready(rec.link)
    assert server.get(f"/api/reports/{rec.link.rsplit('/', 1)[-1]}/status")["windows"] == 4
