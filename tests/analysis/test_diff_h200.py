"""`zym diff` on real H200 captures (bench/diff/results/h200): the rerank workload as written,
twice, and with one planted fix (``scores.tolist()`` once instead of ``scores[i].item()`` per
candidate). The fix must be the top improvement and nothing else above noise; the two runs of
the same code must show nothing above noise.

Where the fix is comes from the workload's source, not from zym: the line of ``.item()`` (before)
and of ``.tolist()`` (after) in bench/whatif/workloads/rerank.py, and for torch.profiler traces
(which name a function's first line) the line of ``def handle``."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from zym.analysis.export.diff import diff_captures

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "bench" / "diff" / "results" / "h200"
SOURCE = REPO / "bench" / "whatif" / "workloads" / "rerank.py"


def line_of(pattern: str) -> int:
    lines = SOURCE.read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if re.search(pattern, text))


def capture(name: str, ext: str) -> Path:
    path = H200 / f"rerank-{name}.{ext}"
    if not path.exists():
        pytest.fail(f"{path} is missing (committed with bench/diff)")
    return path


def fix_site(ext: str) -> tuple[str, str]:
    """The planted fix's site before and after, as zym labels sites, from the source."""
    item = line_of(r"^\s+values\.append\(scores\[i\]\.item\(\)\)")
    tolist = line_of(r"^\s+values = scores\.tolist\(\)")
    if ext == "parquet":  # zym capture: the executing line
        return (f"workloads/rerank.py:{item} Service.handle",
                f"workloads/rerank.py:{tolist} Service.handle")
    first = f"rerank.py:{line_of(r'def handle[(]')} handle"  # Kineto: the function's first line
    return first, first


def assert_only_the_fix(d: dict, ext: str) -> None:
    before, after = fix_site(ext)
    assert len(d["top_improvements"]) == 1, [s["site"] for s in d["top_improvements"]]
    top = d["top_improvements"][0]
    assert (top["site_before"], top["site_after"]) == (before, after)
    # the fix removes per-candidate readbacks: syncs and copies fall at that site
    assert top["measures"]["syncs"]["delta"] < -10
    assert top["measures"]["copies"]["delta"] < -10
    assert d["top_regressions"] == []
    assert [s for s in d["sites"] if s["above_noise"]] == [top]
    # every total above noise is the fixed site's own change
    for t in d["totals"]:
        if t["above_noise"]:
            assert abs(t["delta"] - top["measures"][t["measure"]]["delta"]) <= t["threshold"], t
    # the GPU operations above noise are the device-to-host copies of the readbacks
    moved = [k["name"] for k in d["kernels"] if k["above_noise"]]
    assert moved and all(name.startswith("Memcpy DtoH") for name in moved), moved
    gone = [f["rule_id"] for f in d["findings"]["disappeared"]]
    assert "syncs.scalar-readback" in gone


@pytest.mark.parametrize("ext", ["parquet", "kineto.parquet"])
def test_the_planted_fix_is_the_top_improvement(ext):
    d = diff_captures(capture("base-a", ext), capture("tolist", ext)).to_dict()
    assert d["per"] == "step"
    assert_only_the_fix(d, ext)


def test_with_a_repeat_of_the_baseline_as_noise():
    d = diff_captures(capture("base-a", "parquet"), capture("tolist", "parquet"),
                      repeat=capture("base-b", "parquet")).to_dict()
    assert_only_the_fix(d, "parquet")


@pytest.mark.parametrize("ext", ["parquet", "kineto.parquet"])
def test_two_runs_of_the_same_code_differ_by_nothing_above_noise(ext):
    d = diff_captures(capture("base-a", ext), capture("base-b", ext)).to_dict()
    assert [t["measure"] for t in d["totals"] if t["above_noise"]] == []
    assert [s["site"] for s in d["sites"] if s["above_noise"]] == []
    assert [k["name"] for k in d["kernels"] if k["above_noise"]] == []
    assert d["matched"]["appeared"] == d["matched"]["disappeared"] == 0
    # findings that come and go with the host's speed (launch-bound, idle GPU) save less than
    # the wall-time noise
    f = d["findings"]
    assert not [x["rule_id"] for x in f["appeared"] + f["disappeared"] if x["above_noise"]]
