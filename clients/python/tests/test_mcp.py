"""`memlens mcp` driven by the official Python MCP client (`mcp` from PyPI): the tools are
listed, each answers on real traces with the numbers the command line prints, a failure is a
tool error naming the file (the server goes on), and an answer on the 176 MB bench file stays
under 64 KB."""
import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from conftest import REPO, TOKEN, TRACES, oracle

BENCH = REPO.parent / "shared" / "traces" / "bench" / "big_many_small.pickle.gz"


def binary():
    return os.environ.get("MEMLENS_BIN") or str(
        Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")) / "debug" / "memlens")


def cli_json(*args):
    out = subprocess.run([binary(), *args, "--json"], capture_output=True, text=True)
    return json.loads(out.stdout)


async def with_session(fn):
    params = StdioServerParameters(command=binary(), args=["mcp"], env={**os.environ, "MEMLENS_LOG": "warn"})
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            return await fn(session)


def run(fn):
    return asyncio.run(with_session(fn))


def answer(result):
    """The text summary and the JSON of a successful call."""
    assert not result.isError, result.content[0].text
    assert len(result.content) == 2
    data = json.loads(result.content[1].text)
    # The same answer as structured content (MCP 2025-06-18), for clients that read structure.
    assert result.structuredContent == data
    return result.content[0].text, data


def test_the_tools_are_listed_with_schemas():
    tools = run(lambda s: s.list_tools()).tools
    names = {t.name for t in tools}
    assert names == {"analyze_files", "explain_oom", "compare_runs", "what_if", "plan", "check", "open_report"}
    for t in tools:
        assert t.description and t.inputSchema["type"] == "object", t.name


def test_analyze_files_answers_what_the_cli_prints():
    path = str(TRACES / "oom_fragmentation.pickle")

    async def go(s):
        return await s.call_tool("analyze_files", {"paths": [path]})

    text, v = answer(run(go))
    cli = cli_json("analyze", path)
    d, c = v["files"][0]["devices"][0], cli["files"][0]["devices"][0]
    assert d["peak_allocated_bytes"] == c["peak_allocated_bytes"] == 5152702464
    assert d["oom_count"] == c["oom_count"] == 2
    assert d["verdict"] == c["verdict"] and d["verdict"] in text


def test_explain_oom_reads_a_pasted_message():
    message = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
               "capacity of 79.19 GiB of which 1.50 GiB is free. Including non-PyTorch memory, this process has "
               "77.68 GiB memory in use. Of the allocated memory 70.12 GiB is allocated by PyTorch, and 6.90 GiB "
               "is reserved by PyTorch but unallocated.")

    async def go(s):
        return await s.call_tool("explain_oom", {"text": message})

    text, v = answer(run(go))
    f = v["files"][0]
    assert f["format"] == "oom_message"
    assert "2.00 GiB" in text or "2147483648" in json.dumps(v)


def test_compare_what_if_and_check_answer_as_the_cli_does():
    b8, b16 = str(TRACES / "gpt_b8.pickle.gz"), str(TRACES / "gpt_b16.pickle.gz")

    async def go(s):
        return (await s.call_tool("compare_runs", {"a": b16, "b": b8}),
                await s.call_tool("what_if", {"path": b8, "run_batch_size": 8, "set": {"batch_size": 16}}),
                await s.call_tool("check", {"new": b16, "baseline": b8,
                                            "thresholds": {"max_category_increase": {"activation": "90%"}}}))

    compared, predicted, checked = run(go)
    text, c = answer(compared)
    assert c["peak_delta_bytes"] == oracle("gpt_b16.pickle.gz") - oracle("gpt_b8.pickle.gz")
    assert c["headline"] in text and "timeline" not in c
    _, w = answer(predicted)
    cli = cli_json("whatif", b8, "--batch-size", "8", "--set", "batch_size=16")
    assert w["files"][0]["devices"][0]["predicted_peak_allocated_bytes"] == \
        cli["files"][0]["devices"][0]["predicted_peak_allocated_bytes"]
    text, k = answer(checked)
    assert k["passed"] is False and text.startswith("regression: ")
    assert {v["measure"] for v in k["violations"]} == {"peak_allocated", "category"}


def test_plan_answers_as_the_cli_does_from_a_config_and_calibrated():
    config = str(TRACES / "plan" / "configs" / "llama_train.json")
    run_b2 = str(TRACES / "plan" / "runs" / "llama_b2.pickle.gz")

    async def go(s):
        return (await s.call_tool("plan", {"config_path": config, "batch_size": 8, "seq_len": 1024,
                                           "gpu_memory_bytes": 24 << 30}),
                await s.call_tool("plan", {"config_path": config, "batch_size": 2, "seq_len": 1024,
                                           "calibrate": run_b2, "run_batch_size": 2}),
                await s.call_tool("plan", {"config_path": config, "batch_sise": 8}))

    planned, calibrated, bad = run(go)
    text, p = answer(planned)
    cli = cli_json("plan", "--model", config, "--batch-size", "8", "--seq-len", "1024", "--gpu-memory", "24GiB")
    assert p["predicted_peak_allocated_bytes"] == cli["predicted_peak_allocated_bytes"]
    assert p["parameter_count"] == 155_730_944 and p["max_batch_size"] == cli["max_batch_size"]
    assert text.startswith("fits in 24.00 GiB")
    _, c = answer(calibrated)
    assert c["predicted_peak_allocated_bytes"] == oracle("plan/runs/llama_b2.pickle.gz")
    assert bad.isError and "batch_sise" in bad.content[0].text


def test_open_report_reads_a_report_by_its_link(server):
    import memlens

    link = memlens.upload(str(TRACES / "leak.pickle"), server=server.url, token=TOKEN)
    server.wait_ready(link)

    async def go(s):
        return await s.call_tool("open_report", {"url": link})

    text, v = answer(run(go))
    assert v["files"][0]["devices"][0]["peak_allocated_bytes"] == oracle("leak.pickle")


def test_failures_are_tool_errors_and_the_server_goes_on():
    async def go(s):
        missing = await s.call_tool("analyze_files", {"paths": ["/nonexistent/run.pickle"]})
        bad = await s.call_tool("what_if", {"path": str(TRACES / "gpt_b8.pickle.gz"), "set": {"optimizer": "lbfgs"}})
        after = await s.call_tool("analyze_files", {"paths": [str(TRACES / "leak.pickle")]})
        return missing, bad, after

    missing, bad, after = run(go)
    assert missing.isError and "/nonexistent/run.pickle" in missing.content[0].text
    assert bad.isError and "optimizer" in bad.content[0].text
    answer(after)


@pytest.mark.skipif(not BENCH.exists(), reason=f"{BENCH} is not beside the checkout")
def test_an_answer_on_the_bench_file_stays_under_64_kb():
    async def go(s):
        return await s.call_tool("analyze_files", {"paths": [str(BENCH)]})

    result = run(go)
    size = sum(len(c.text.encode()) for c in result.content)
    assert size < 64 << 10, size
    _, v = answer(result)
    assert v["files"][0]["devices"][0]["peak_allocated_bytes"] > 0
