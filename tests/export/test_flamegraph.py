"""Folded stacks and speedscope: integer nanoseconds that add up to the capture's totals."""
from __future__ import annotations

import re

import pytest
from zym.analysis.export.flamegraph import folded_stacks, speedscope, weighted_stacks

LINE = re.compile(r"^(?P<stack>[^\n]+) (?P<ns>\d+)$")  # speedscope's and flamegraph.pl's reader


def _parse(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        m = LINE.match(line)
        assert m, line
        out[m["stack"]] = int(m["ns"])
    return out


def test_folded_gpu_time_adds_up_and_ends_in_gpu_operations(export_source):
    stacks = _parse(folded_stacks(export_source.analysis))
    assert sum(stacks.values()) == int(export_source.data.gpu["dur_ns"].sum())
    heaviest = max(stacks, key=stacks.get)
    frames = heaviest.split(";")
    assert frames[0].startswith("<module> (gpt_decode_server.py:")
    assert "forward (gpt_decode_server.py:40)" in frames
    assert frames[-2].startswith("cudaLaunchKernel") and "gemm" in frames[-1]


def test_folded_stall_weights_blocking_calls(export_source):
    stacks = _parse(folded_stacks(export_source.analysis, weight="stall"))
    paths = export_source.analysis.call_paths.paths
    assert sum(stacks.values()) == int(paths["cpu_blocked_ns"].sum())
    top = max(stacks, key=stacks.get)
    assert top.endswith("cudaStreamSynchronize") and "generate (gpt_decode_server.py:83)" in top


def test_frames_cannot_break_the_format(export_source, monkeypatch):
    from zym.analysis.export import flamegraph

    real = flamegraph.stack_chains

    def evil(analysis):
        chains = real(analysis)
        return {k: [f | {"label": f["label"] + ";x\ny "} for f in v] for k, v in chains.items()}

    monkeypatch.setattr(flamegraph, "stack_chains", evil)
    text = folded_stacks(export_source.analysis)
    assert all(LINE.match(line) for line in text.splitlines())
    assert ";x" not in text and ":x y" in text  # a frame's ';' and newline are neutralized


def test_speedscope_profiles(export_source):
    doc = speedscope(export_source.analysis)
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    gpu, stall = doc["profiles"]
    n = len(doc["shared"]["frames"])
    for p in (gpu, stall):
        assert p["type"] == "sampled" and p["unit"] == "nanoseconds"
        assert len(p["samples"]) == len(p["weights"])
        assert all(0 <= i < n for s in p["samples"] for i in s)
        assert p["endValue"] == sum(p["weights"])
    assert gpu["endValue"] == int(export_source.data.gpu["dur_ns"].sum())


def test_unknown_weight_is_refused(export_source):
    with pytest.raises(ValueError, match="weight"):
        weighted_stacks(export_source.analysis, "wall")
