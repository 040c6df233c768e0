"""Each call's instance from the spans (``call_instance`` on Kineto traces): the start of the
latest span of the call's user frame on its thread, by a packed-key search
(``instances.enclosing_span_starts``), against a scan of every span per call, and against
the as-of join it replaced, on H200 traces."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from zym.analysis import analyze, instances, report

RESULTS = Path(__file__).resolve().parents[2] / "bench/whatif/results"


def _scan(thread, user, ts, s_thread, s_user, s_ts, s_end) -> np.ndarray:
    """Per call, every span looked at: of those of its thread and frame that start at or
    before it, the latest (ties: the longest); its start if it has not ended, else -(row+1)."""
    out = []
    for i in range(len(ts)):
        best = None
        for j in range(len(s_ts)):
            if (user[i] >= 0 and s_thread[j] == thread[i] and s_user[j] == user[i]
                    and s_ts[j] <= ts[i]
                    and (best is None or (s_ts[j], s_end[j]) > (s_ts[best], s_end[best]))):
                best = j
        out.append(int(s_ts[best]) if best is not None and s_end[best] >= ts[i] else -(i + 1))
    return np.array(out, np.int64)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("chunk", [5, 1 << 20])
def test_enclosing_span_starts_match_a_scan_of_every_span(seed, chunk):
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(1, 120)), int(rng.integers(0, 60))
    # few threads and frames, times on a coarse grid: ties of starts, calls at a span's end,
    # calls of threads and frames no span has, calls with no user frame (-1)
    threads = np.array([7, (3 << 32) + 9, 11], np.int64)
    thread = rng.choice(threads, n)
    user = rng.integers(-1, 5, n)
    ts = np.sort(rng.integers(1_000, 1_060, n))
    s_thread = rng.choice(threads[:2], m)
    s_user = rng.integers(0, 4, m)
    s_ts = rng.integers(990, 1_030, m)
    s_end = s_ts + rng.integers(0, 30, m)
    got = instances.enclosing_span_starts(thread, user, ts, s_thread, s_user, s_ts, s_end,
                                          chunk=chunk)
    assert np.array_equal(got, _scan(thread, user, ts, s_thread, s_user, s_ts, s_end))


def test_of_spans_that_start_together_the_longest_counts():
    got = instances.enclosing_span_starts(
        np.array([1, 1]), np.array([2, 2]), np.array([15, 40]),
        np.array([1, 1, 1]), np.array([2, 2, 2]), np.array([10, 10, 10]), np.array([20, 30, 12]))
    assert got.tolist() == [10, -2]


def test_calls_out_of_time_order_are_each_their_own():
    got = instances.enclosing_span_starts(
        np.array([1, 1, 1]), np.array([2, 2, 2]), np.array([50, 10, 30]),
        np.array([1, 1]), np.array([2, 2]), np.array([5, 25]), np.array([20, 60]))
    assert got.tolist() == [25, 5, 25]


def test_keys_past_int64_are_left_to_the_join():
    big = np.int64(1) << 61
    assert instances.enclosing_span_starts(
        np.array([1]), np.array([0]), np.array([big]),
        np.array([1, 1, 2, 3]), np.array([0, 1, 2, 3]), np.array([0, 0, 0, 0]),
        np.array([1, 1, 1, 1])) is None


@pytest.mark.parametrize("trace", [None, "h200-threads/sidecar.trace.json.gz",
                                   "h200-varied/moe-nostack.trace.json.gz",
                                   ("h200-varied/detect-schedule2/"
                                    "vm_504.1796257510329301195.pt.trace.json.gz")])
def test_instances_equal_the_as_of_join(trace, sample_trace, monkeypatch):
    analysis = analyze(sample_trace if trace is None else RESULTS / trace)
    rel = analysis.relations
    n = rel.calls_table().height
    every = pl.int_range(n, dtype=pl.Int64, eager=True)
    some = pl.Series(np.arange(0, n, 3, dtype=np.int64))
    searched = [rel._instances(every).to_numpy(), rel._instances(some).to_numpy()]
    monkeypatch.setattr(instances, "enclosing_span_starts", lambda *a, **k: None)
    joined = [rel._instances(every).to_numpy(), rel._instances(some).to_numpy()]
    for a, b in zip(searched, joined):
        assert np.array_equal(a, b)
    assert (searched[0] >= 0).any() or trace and "nostack" in trace


@pytest.mark.parametrize("window", ["steady", "all", "0.5s:1.5s"])
@pytest.mark.parametrize("source", ["trace", "capture"])
def test_user_spans_kept_from_the_checking_pass_give_the_queried_instances(
        window, source, sample_trace, sample_capture):
    """Kept in the pass that checks the spans (and, on a file, a part at a time), or read by a
    query of the (window's) spans: the same instances, for every call and for some."""
    analysis = analyze(sample_trace if source == "trace" else sample_capture, window=window)
    assert analysis.user_spans is not None and analysis.user_spans.height
    rel = analysis.relations
    n = rel.calls_table().height
    asked = [pl.int_range(n, dtype=pl.Int64, eager=True),
             pl.Series(np.arange(1, n, 4, dtype=np.int64))]
    window = analysis.data.span_table.window
    if window is not None:
        # spans that end before the window starts are not the window's: one more per user
        # frame, the latest to start of all, would otherwise end every call's instance
        t0 = window[0]
        extra = analysis.user_spans.unique(["_thread", "user_node"]).with_columns(
            pl.lit(t0 - 2).alias("inst_ts"), pl.lit(t0 - 1).alias("inst_end"))
        analysis.user_spans = pl.concat([analysis.user_spans, extra])
    kept = [rel._instances(a).to_numpy() for a in asked]
    analysis.user_spans = None
    queried = [rel._instances(a).to_numpy() for a in asked]
    for a, b in zip(kept, queried):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("counted", [True, False])
@pytest.mark.parametrize("trace", ["h200-threads/sidecar.trace.json.gz",
                                   "h200-varied/pooled.trace.json.gz"])
def test_user_spans_kept_in_either_pass_give_the_queried_instances(trace, counted,
                                                                   monkeypatch):
    """H200 workloads (two threads; a pooled server): the user frames' spans kept in the pass
    that counts the profiler's events, or, where nothing is counted (a producer that states
    its own cost), in the checking pass of their own."""
    if not counted:
        monkeypatch.setattr(report, "counts_events", lambda meta: False)
    analysis = analyze(RESULTS / trace)
    assert (analysis.recorded_ns is not None) == counted
    assert analysis.user_spans is not None and analysis.user_spans.height
    rel = analysis.relations
    every = pl.int_range(rel.calls_table().height, dtype=pl.Int64, eager=True)
    kept = rel._instances(every).to_numpy()
    analysis.user_spans = None
    assert np.array_equal(kept, rel._instances(every).to_numpy())
    assert (kept >= 0).any()


def test_user_spans_past_the_cap_are_given_up(sample_trace, monkeypatch):
    monkeypatch.setattr(instances, "USER_SPANS_CAP", 10)
    analysis = analyze(sample_trace)
    assert analysis.user_spans is None
    assert (analysis.relations.every_call_instance() >= 0).all()
