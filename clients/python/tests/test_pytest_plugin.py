"""The `memlens_check` fixture (`memlens.pytest`) in pytest sessions of its own, against the real
server: a first run records the baselines, a run whose memory grew fails with the server's
verdict, limits of each kind reach the server, and without a server the test is skipped.
PyTorch is replaced by a backend that "dumps" a real snapshot chosen by the session."""
from conftest import TOKEN, TRACES

INNER_CONFTEST = '''
import gzip, os, shutil
import pytest
import memlens.torch as mt

class Backend:
    def start(self, *args):
        pass
    def stop(self):
        pass
    def dump(self, path):
        with gzip.open(os.environ["MEMLENS_TEST_SNAPSHOT"], "rb") as f, open(path, "wb") as out:
            shutil.copyfileobj(f, out)

@pytest.fixture(autouse=True)
def fake_torch(monkeypatch):
    monkeypatch.setattr(mt, "_backend", Backend())
'''

INNER_TESTS = '''
def test_step(memlens_check):
    with memlens_check():
        pass

def test_activations(memlens_check):
    with memlens_check("fwd", max_peak_increase="100%", max_category_increase={"activation": "95%"}):
        pass

def test_reserved(memlens_check):
    with memlens_check(max_peak_increase=8 << 30, max_reserved_increase="60%"):
        pass
'''


def _session(pytester, monkeypatch, server, baselines, snapshot, *extra):
    monkeypatch.setenv("MEMLENS_TEST_SNAPSHOT", str(TRACES / snapshot))
    return pytester.runpytest_inprocess(
        f"--memlens-server={server.url}", f"--memlens-token={TOKEN}", f"--memlens-baselines={baselines}", *extra)


def test_baselines_are_recorded_then_a_grown_run_fails_with_the_verdict(server, pytester, monkeypatch, tmp_path):
    pytester.makeini("[pytest]\n")  # the root folder, which the test ids (and baselines) are named from
    pytester.makeconftest(INNER_CONFTEST)
    pytester.makepyfile(test_inner=INNER_TESTS)
    baselines = tmp_path / "baselines"
    first = _session(pytester, monkeypatch, server, baselines, "gpt_b8.pickle.gz")
    first.assert_outcomes(passed=3)
    recorded = sorted(p.name for p in baselines.iterdir())
    assert recorded == ["test_inner.py_test_activations.fwd.pickle.gz", "test_inner.py_test_reserved.pickle.gz",
                        "test_inner.py_test_step.pickle.gz"], recorded

    # b8 → b16: allocated +68.5 % (+4.74 GiB), reserved +64.8 %, activations +93.8 %.
    grown = _session(pytester, monkeypatch, server, baselines, "gpt_b16.pickle.gz")
    grown.assert_outcomes(passed=1, failed=2)
    text = grown.stdout.str()
    assert "memlens: regression: allocated peak +4.74 GiB (+68.5 %), limit 5%" in text, text
    assert "memlens: regression: reserved peak +5.28 GiB (+64.8 %), limit 60%" in text, text
    assert f"compare: {server.url}/compare/" in text

    # The same run against its own new baselines passes.
    _session(pytester, monkeypatch, server, baselines, "gpt_b16.pickle.gz", "--memlens-update-baselines").assert_outcomes(passed=3)
    _session(pytester, monkeypatch, server, baselines, "gpt_b16.pickle.gz").assert_outcomes(passed=3)


def test_without_a_server_the_check_is_skipped_saying_why(pytester, monkeypatch, tmp_path):
    pytester.makeini("[pytest]\n")  # the root folder, which the test ids (and baselines) are named from
    pytester.makeconftest(INNER_CONFTEST)
    pytester.makepyfile(test_inner=INNER_TESTS)
    monkeypatch.delenv("MEMLENS_SERVER", raising=False)
    monkeypatch.setenv("MEMLENS_TEST_SNAPSHOT", str(TRACES / "gpt_b8.pickle.gz"))
    result = pytester.runpytest_inprocess("-rs", f"--memlens-baselines={tmp_path / 'b'}")
    result.assert_outcomes(skipped=3)
    assert "no server to check memory on" in result.stdout.str()
    assert not (tmp_path / "b").exists()
