"""`zym mcp` end to end: the MCP Python SDK's own stdio client spawns `zym mcp`, lists its tools
and calls them on the sample; the results must equal what the CLI prints with --format json
(analyze, findings) and the library's diff."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("mcp", reason="mcp not installed (pip install 'zym[mcp]', in the test extra)")

from zym.analysis.export.diff import diff_captures


def call_server(calls: list[tuple[str, dict]]) -> tuple[list[str], list]:
    """Spawn `zym mcp` with the SDK's stdio client; list the tools, make ``calls``."""
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    async def run():
        params = StdioServerParameters(command=sys.executable,
                                       args=["-m", "zym.cli.main", "mcp"])
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            names = [t.name for t in (await s.list_tools()).tools]
            results = [await s.call_tool(name, args) for name, args in calls]
            return names, results

    return anyio.run(run)


def cli_json(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "zym.cli.main", *args, "--format", "json",
                          "--no-progress"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def payload(result) -> dict:
    assert not result.is_error, result.content
    text = json.loads(result.content[0].text)  # the text content agents read
    assert result.structured_content == text
    return text


@pytest.fixture(scope="module")
def served(sample_trace):
    s = str(sample_trace)
    return call_server([("analyze", {"path": s, "top": 5}), ("findings", {"path": s}),
                        ("diff", {"before": s, "after": s, "top": 5}),
                        ("findings", {"path": s + ".missing"}),
                        ("analyze", {"path": s, "window": "steps:nonsense"})])


def test_lists_the_tools(served):
    names, _ = served
    assert {"analyze", "findings", "diff"} <= set(names)


def test_analyze_equals_the_cli(served, sample_trace):
    _, results = served
    got = payload(results[0])
    want = cli_json("analyze", str(sample_trace), "--top", "5")
    for key in ("capture", "phases", "gpu", "top_kernels", "paths_by_gpu_time",
                "paths_by_cpu_blocked", "fixes_together", "replay"):
        assert got[key] == want[key], key
    strip = ("examples",)  # example events: the same rows, shown in the CLI too
    assert [{k: v for k, v in f.items() if k not in strip} for f in got["findings"]] == \
        [{k: v for k, v in f.items() if k not in strip} for f in want["findings"]]


def test_findings_equal_the_cli(served, sample_trace):
    _, results = served
    got = payload(results[1])
    want = cli_json("analyze", str(sample_trace))
    assert [(f["rule_id"], f["site"], f["saving_ns"]) for f in got["findings"]] == \
        [(f["rule_id"], f["site"], f["saving_ns"]) for f in want["findings"]]
    assert got["fixes_together"] == want["fixes_together"]


def test_diff_equals_the_library(served, sample_trace):
    _, results = served
    got = payload(results[2])
    want = json.loads(json.dumps(diff_captures(sample_trace, sample_trace).to_dict(5),
                                 default=str))
    assert got == want
    assert not any(t["above_noise"] for t in got["totals"])


def test_bad_input_is_a_tool_error_with_the_cli_message(served):
    _, results = served
    for r in results[3:]:
        assert r.is_error
        assert "zym: error:" in r.content[0].text


def test_extension_modules_add_tools(tmp_path, monkeypatch):
    """A module in TOOL_MODULES (zym.fleet, when the fleet work lands) adds its mcp_tools();
    one whose own dependency is missing is left out, and the server still starts."""
    import anyio
    from zym.analysis.export import agent

    (tmp_path / "zym_tools_probe.py").write_text(
        "def fleet_top(label: str, top: int = 5) -> dict:\n"
        "    '''Top sites across the fleet.'''\n"
        "    return {'label': label, 'top': top}\n\n"
        "def mcp_tools():\n    return [fleet_top]\n")
    (tmp_path / "zym_tools_broken.py").write_text("import no_such_dependency_here\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(agent, "TOOL_MODULES", ("zym_tools_probe", "zym_tools_broken",
                                                "zym_tools_absent"))
    server = agent.build_server()

    async def run():
        names = [t.name for t in await server.list_tools()]
        result = await server.call_tool("fleet_top", {"label": "v2"})
        return names, result

    names, result = anyio.run(run)
    assert {"analyze", "findings", "diff", "fleet_top"} <= set(names)
    assert "v2" in str(result)


def test_fleet_queries_are_tools(tmp_path):
    """zym.fleet's queries come through the extension point: fleet_top and fleet_sql answer as
    `zym fleet top/sql --format json` do on the same store."""
    pytest.importorskip("chdb", reason="chdb not installed (pip install chdb)")
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    store = str(tmp_path / "store")
    zym = [sys.executable, "-m", "zym.cli.main"]
    subprocess.run([*zym, "fleet", "ingest", "--store", store, "-l", "version=1",
                    str(repo / "sample_traces" / "gpt_decode_server.parquet")],
                   check=True, capture_output=True)
    names, results = call_server([
        ("fleet_top", {"store": store, "by": "kernel", "limit": 5}),
        ("fleet_sql", {"store": store, "query": "SELECT count() AS n FROM zym.captures"}),
    ])
    assert {"fleet_top", "fleet_findings", "fleet_diff", "fleet_sql"} <= set(names)
    top, count = (json.loads(r.content[0].text) for r in results)
    cli = json.loads(subprocess.run([*zym, "fleet", "top", "--store", store, "--by", "kernel",
                                     "-n", "5", "--format", "json"], check=True,
                                    capture_output=True, text=True).stdout)
    assert top["rows"] == json.loads(json.dumps(cli, default=str)) and len(cli) == 5
    assert int(count["rows"][0]["n"]) == 1
