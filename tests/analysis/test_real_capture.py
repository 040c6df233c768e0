"""The committed real H200 capture (eBPF + CUPTI joined): every host round trip at its line."""
from __future__ import annotations

from pathlib import Path

import pytest
from zym.analysis import analyze

CAPTURE = Path(__file__).resolve().parents[2] / "sample_traces" / "gpt_decode_server.parquet"


@pytest.fixture(scope="module")
def report() -> dict:
    return analyze(CAPTURE).to_dict()


def test_all_gpu_time_has_its_python_stack(report):
    gpu = report["gpu"]
    assert gpu["activity_ns"] > 0
    assert gpu["attributed_ns"] >= 0.99 * gpu["activity_ns"]
    assert report["capture"]["producer"] == "zym capture"
    assert not any(report["capture"]["dropped"].values())


def test_item_tolist_and_cpu_at_their_exact_lines(report):
    """Per line, the device-to-host copies of 7 batches (5 measured + 2 warm-up): one scalar
    per decode step for .item() (8 steps), one list per batch for .tolist(), one copy per row
    (16 rows) for .cpu(). Each line is reached from two call chains (warm-up and measured)."""
    copies: dict[int, int] = {}
    for p in report["paths_by_cpu_blocked"]:
        frame = p["user_frame"]
        if frame and frame["file"].endswith("gpt_decode_server.py") and p["api"].startswith(
                "cuMemcpyDtoH"):
            assert p["cpu_blocked_ns"] > 0
            copies[frame["line"]] = copies.get(frame["line"], 0) + p["calls"]
    assert copies[87] == 7 * 8
    assert copies[95] == 7
    assert copies[96] == 7 * 16
