"""`memlens.jax` against a real `memlens serve`: an XLA out-of-memory error leaving `on_oom`
uploads the device memory profile of that instant with the error's text as one report and is
re-raised untouched; other errors upload nothing. JAX is reached through `memlens.jax._backend`,
replaced here by one that returns a real profile (traces/jax-cpu, made by
traces/capture/jax_cpu_profiles.py), so the test needs no JAX."""
import json

import pytest

import memlens.jax as mj
from conftest import TOKEN, TRACES


class _SavedProfile:
    def __init__(self, name):
        self.data = (TRACES / "jax-cpu" / name).read_bytes()
        self.calls = 0

    def profile(self):
        self.calls += 1
        return self.data


class XlaRuntimeError(RuntimeError):
    """Stands for jaxlib's class: the hook reads the message, not the class."""


OOM = "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4770354232 bytes."


def truth(name):
    return json.loads((TRACES / "jax-cpu" / name).read_text())


def test_an_oom_uploads_the_profile_and_the_message_as_one_report_and_is_reraised(server, monkeypatch):
    saved = _SavedProfile("jax_cpu_train.step1.prof")
    monkeypatch.setattr(mj, "_backend", saved)
    hook = mj.on_oom(server=server.url, token=TOKEN, title="jax oom")
    with pytest.raises(XlaRuntimeError, match="RESOURCE_EXHAUSTED") as raised:
        with hook:
            raise XlaRuntimeError(OOM)
    assert str(raised.value) == OOM, "the error goes on as it was"
    assert saved.calls == 1 and hook.link and hook.link.startswith(server.url + "/r/")
    report = server.wait_ready(hook.link)
    by_format = {f["format"]: f for f in report["files"]}
    assert set(by_format) == {"jax_device_memory_profile", "oom_message"}, report["files"]
    live = truth("jax_cpu_train.step1.truth.json")["live_buffers_by_device"]["cpu:0"]["nbytes"]
    assert by_format["jax_device_memory_profile"]["devices"][0]["peak_allocated_bytes"] == live
    oom = by_format["oom_message"]["devices"][0]["ooms"][0]
    assert oom["requested_bytes"] == 4770354232
    assert oom["text"]["backend"] == "xla"
    assert oom["text"]["exception"].endswith("XlaRuntimeError")
    # The text's failure says what the profile taken with it held live.
    assert sum(c["bytes"] for c in oom["live_categories"]) == live
    assert "The device memory profile taken at the error (oom.prof)" in oom["remedy"]


def test_as_a_decorator_and_without_an_oom_nothing_is_sent(server, monkeypatch):
    saved = _SavedProfile("jax_cpu_train.step1.prof")
    monkeypatch.setattr(mj, "_backend", saved)

    @mj.on_oom(server=server.url, token=TOKEN)
    def step(fail):
        if fail:
            raise ValueError("shapes do not match")
        return 7

    assert step(False) == 7
    with pytest.raises(ValueError, match="shapes"):
        step(True)
    assert saved.calls == 0, "only XLA's out-of-memory error takes a profile"
    assert mj.is_oom(RuntimeError("Resource exhausted: Out of memory while trying to allocate 24 bytes."))
    assert not mj.is_oom(RuntimeError("INVALID_ARGUMENT: bad shape"))


def test_upload_profile_sends_one_now(server, monkeypatch):
    monkeypatch.setattr(mj, "_backend", _SavedProfile("jax_cpu_train.step5.prof"))
    link = mj.upload_profile(server=server.url, token=TOKEN, print_link=False)
    report = server.wait_ready(link)
    live = truth("jax_cpu_train.step5.truth.json")["live_buffers_by_device"]["cpu:0"]["nbytes"]
    assert report["files"][0]["devices"][0]["peak_allocated_bytes"] == live


def test_a_server_that_cannot_be_reached_never_masks_the_oom(monkeypatch, capsys):
    monkeypatch.setattr(mj, "_backend", _SavedProfile("jax_cpu_eager.prof"))
    with pytest.raises(XlaRuntimeError):
        with mj.on_oom(server="http://127.0.0.1:9", attempts=1, timeout=2):
            raise XlaRuntimeError(OOM)
    assert "could not upload the device memory profile" in capsys.readouterr().err
