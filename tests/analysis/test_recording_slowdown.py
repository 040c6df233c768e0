"""A torch.profiler trace's own host speed (analysis/report.py ``slowdown``): the median span
of its aten::empty ops over the reference (3,100 ns), at least 1; an op's and a runtime call's
recording costs are taken out scaled by it (``capture_overhead``; the count per call by
bisection: tests/analysis/test_fixed_costs.py). Derived here from the capture files' raw
rows, not from the analysis."""
from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
import polars as pl
import pytest

ROOT = Path(__file__).resolve().parents[2]
BLIND6 = ROOT / "bench" / "whatif" / "results" / "h100-blind6" / "kineto"


def test_slowdown_is_the_median_over_the_reference_and_never_below_one():
    from zym.analysis.report import slowdown

    ten = np.ones(10, np.int64)
    assert slowdown(np.r_[6_200 * ten, 9_000 * ten, 1_000 * ten]) == pytest.approx(2.0)
    assert slowdown(np.r_[3_000 * ten, 3_200 * ten, 6_000 * ten, 6_400 * ten]) == \
        pytest.approx(4_600 / 3_100)                    # an even count: the middle two's mean
    assert slowdown(np.r_[1_000 * ten, 2_000 * ten, 3_000 * ten]) == 1.0   # a faster host
    assert slowdown(np.zeros(0, np.int64)) == 1.0                          # no aten::empty
    assert slowdown(np.array([9_300, 9_300, 9_300, 9_300])) == 1.0        # too few to say
    assert slowdown(np.full(5, 9_300, np.int64)) == pytest.approx(3.0)


def _raw_empty_median(path: Path) -> float:
    """The median duration of the spans whose frame is aten::empty, from the Parquet's rows."""
    raw = pl.read_parquet(path, columns=["record", "stack_id", "frame_id", "name", "dur_ns"])
    frames = raw.filter(pl.col("record") == "frame").select("frame_id", "name")
    stacks = raw.filter(pl.col("record") == "stack").select("stack_id", "frame_id")
    spans = raw.filter(pl.col("record") == "span").select("stack_id", "dur_ns")
    empty = frames.filter(pl.col("name") == "aten::empty")["frame_id"]
    ids = set(stacks.filter(pl.col("frame_id").is_in(empty.implode()))["stack_id"].to_list())
    return statistics.median(d for s, d in spans.iter_rows() if s in ids)


@pytest.mark.parametrize("workload, slow", [("cliptag", True), ("ctseg", False)])
def test_a_trace_s_slowdown_is_its_own_aten_empty_median(workload, slow):
    """cliptag's trace (its ops ~1.8x a typical host's: the sixth blind round) is slowed;
    ctseg's (2.9 µs) is not."""
    from zym.analysis import analyze

    path = BLIND6 / f"{workload}.parquet"
    median = _raw_empty_median(path)
    got = analyze(path).recording_slowdown
    assert got == pytest.approx(max(median / 3_100, 1.0))
    assert (got > 1.5) if slow else (got == 1.0)


def test_the_slowdown_scales_an_op_s_and_a_runtime_call_s_cost_not_a_python_call_s(
        monkeypatch):
    """Per call of cliptag's window, the cost taken out with the trace's slowdown s, less the
    same analysis's with none (the reference set past every span): the runtime call's cost
    and each op's in the gap grow by their scaled cost, whatever Python calls the gap also
    holds. The ops per gap are counted here from the raw spans: a call's gap is after the
    previous call on its thread started (the window's first call: from the window's start),
    up to its own start."""
    from bisect import bisect_left, bisect_right

    from zym.analysis import analyze, replay
    from zym.analysis.report import capture_overhead

    path = BLIND6 / "cliptag.parquet"
    a = analyze(path)
    s = a.recording_slowdown
    scaled = capture_overhead(a)
    monkeypatch.setattr(replay, "KINETO_SPEED_REF_NS", 10**12)
    b = analyze(path)
    assert b.recording_slowdown == 1.0
    grew = scaled - capture_overhead(b)
    raw = pl.read_parquet(path, columns=["record", "ts_ns", "op_id"])
    op_ts = np.sort(raw.filter((pl.col("record") == "span") & pl.col("op_id").is_not_null())
                    ["ts_ns"].to_numpy())
    assert a.whole.calls["tid"].n_unique() == 1        # one thread: cliptag's
    calls = a.whole.calls["ts_ns"].to_numpy()
    first = int(np.searchsorted(calls, a.window[0], "left"))
    want = []
    for k in range(a.facts.calls.height):
        i = first + k
        lo = bisect_right(op_ts, calls[i - 1]) if k else bisect_left(op_ts, a.window[0])
        n_ops = bisect_right(op_ts, calls[i]) - lo
        want.append(round(2_156 * s) - 2_156 + n_ops * (round(3_934 * s) - 3_934))
    assert len(want) > 1_000 and sum(want) > 0
    assert grew.tolist() == want


def test_gap_counter_counts_kinds_apart_in_one_search():
    """Two kinds of weight counted in one GapCounter (spans in parts, in any order, on two
    threads, some after a thread's last call) against a count by brute force: each span goes
    to the first call on its thread that starts at or after it."""
    from zym.analysis.replay import GapCounter

    rng = np.random.default_rng(7)
    calls = pl.DataFrame({"pid": [1] * 40, "tid": rng.integers(1, 3, 40),
                          "ts_ns": np.sort(rng.integers(0, 10_000, 40)),
                          "call_idx": np.arange(40)})
    spans = pl.DataFrame({"pid": [1] * 500, "tid": rng.integers(1, 4, 500),
                          "ts_ns": rng.integers(0, 11_000, 500)})
    weight = np.column_stack((rng.integers(0, 2, 500), rng.integers(0, 5_000, 500)))
    counter = GapCounter(calls, kinds=2)
    order = rng.permutation(500)
    for part in np.array_split(order, 4):
        counter.add(spans[part], weight[part])
    want = np.zeros((40, 2), np.int64)
    rows = calls.rows(named=True)
    for (tid, ts), w in zip(spans.select("tid", "ts_ns").rows(), weight):
        mine = [r for r in rows if r["tid"] == tid and r["ts_ns"] >= ts]
        if mine:
            want[min(mine, key=lambda r: (r["ts_ns"], r["call_idx"]))["call_idx"]] += w
    assert counter.total.tolist() == want.tolist()
    assert want[:, 0].sum() > 0 and want[:, 1].sum() > 0


def test_zym_analyze_says_the_host_speed_in_text_and_json():
    """As users see it: cliptag's trace (ops at ~1.8x, from its raw rows) gets the line and the
    JSON figure; ctseg's (at the reference's pace) gets neither."""
    import json
    import subprocess
    import sys

    def zym(*args: str) -> str:
        return subprocess.run([sys.executable, "-m", "zym.cli.main", "analyze", *args],
                              capture_output=True, text=True, check=True).stdout

    slow = max(_raw_empty_median(BLIND6 / "cliptag.parquet") / 3_100, 1.0)
    text = " ".join(zym(str(BLIND6 / "cliptag.parquet"), "--no-progress").split())
    assert f"the trace's ops dispatched at {slow:.2f}x a typical host's time" in text
    got = json.loads(zym(str(BLIND6 / "cliptag.parquet"), "--format", "json"))
    assert got["replay"]["recording_slowdown"] == pytest.approx(slow, abs=1e-3)
    assert "dispatched at" not in zym(str(BLIND6 / "ctseg.parquet"), "--no-progress")
    got = json.loads(zym(str(BLIND6 / "ctseg.parquet"), "--format", "json"))
    assert "recording_slowdown" not in got["replay"]


def test_markdown_and_html_say_the_host_speed_too(tmp_path):
    """The Markdown report and the HTML one say what the text one does (cliptag's speed, from
    its raw rows; none for ctseg's)."""
    import html
    import subprocess
    import sys

    def zym(*args: str) -> str:
        return subprocess.run([sys.executable, "-m", "zym.cli.main", *args],
                              capture_output=True, text=True, check=True).stdout

    slow = max(_raw_empty_median(BLIND6 / "cliptag.parquet") / 3_100, 1.0)
    said = f"the trace's ops dispatched at {slow:.2f}x a typical host's time"
    for name, present in (("cliptag", True), ("ctseg", False)):
        md = zym("analyze", str(BLIND6 / f"{name}.parquet"), "--format", "markdown")
        assert (said.replace(".", "\\.") in md) is present
        out = tmp_path / f"{name}.html"
        zym("report", str(BLIND6 / f"{name}.parquet"), "-o", str(out))
        page = html.unescape(out.read_text())
        assert (said in page) is present and ("Host speed" in page) is present


@pytest.mark.parametrize(("replay", "want"), [
    ({}, []),
    ({"recording_slowdown": 1.04, "usable": True, "error_pct": 4.9}, []),
    ({"recording_slowdown": 1.05, "usable": True, "error_pct": -5.0},
     [("Host speed", False), ("Replay", True)]),
    ({"usable": False, "error_pct": 30.0}, []),   # no replay to be off
])
def test_replay_notes_say_the_speed_and_a_replay_off_by_five_percent(replay, want):
    from zym.analysis.export.summary import replay_notes

    got = replay_notes(replay)
    assert [(title, warn) for title, _, warn in got] == want
    if want and want[-1][0] == "Replay":
        assert "off by -5.0%: savings are rough" in got[-1][1]
