"""The per-analysis shortcuts of the fixed-cost round (issues 13 and 15) against plain
definitions: each expected value is computed here by a Python loop over the rows, not by the
code under test."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from zym.analysis import analyze
from zym.analysis.kernels import classify_kernels, classify_names
from zym.analysis.replay import GapCounter

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces"


@pytest.fixture(scope="module")
def trace():
    return analyze(SAMPLE / "gpt_decode_server.trace.json.gz")


def events_in_gaps(calls: pl.DataFrame, spans: pl.DataFrame) -> np.ndarray:
    """GapCounter with every span as one part."""
    counter = GapCounter(calls)
    counter.add(spans)
    return counter.total


def _events_in_gaps_by_loop(calls: pl.DataFrame, spans: pl.DataFrame) -> list[int]:
    """Per call: spans of its (pid, tid) starting after the thread's previous call started
    (any time before the first call) and at or before the call itself."""
    threads: dict[tuple, list[tuple[int, int]]] = {}
    for i, (pid, tid, ts) in enumerate(calls.select("pid", "tid", "ts_ns").iter_rows()):
        threads.setdefault((pid, tid), []).append((ts, i))
    out = [0] * calls.height
    span_rows = list(spans.select("pid", "tid", "ts_ns").iter_rows())
    for key, rows in threads.items():
        starts = [s for p, t, s in span_rows if (p, t) == key]
        prev = None
        for ts, i in sorted(rows):  # by time, ties by row
            out[i] = sum(1 for s in starts if (prev is None or s > prev) and s <= ts)
            prev = ts
    return out


@pytest.mark.parametrize("seed", range(40))
def test_events_in_gaps_counts_each_threads_spans_between_its_calls(seed):
    rng = np.random.default_rng(seed)
    n_calls, n_spans = int(rng.integers(1, 50)), int(rng.integers(0, 70))
    ts = np.sort(rng.integers(0, 40, n_calls))  # ties on purpose
    calls = pl.DataFrame({"call_idx": np.arange(n_calls), "pid": rng.integers(0, 3, n_calls),
                          "tid": rng.integers(0, 3, n_calls), "ts_ns": ts})
    spans = pl.DataFrame({"pid": rng.integers(0, 4, n_spans), "tid": rng.integers(0, 3, n_spans),
                          "ts_ns": rng.integers(-5, 45, n_spans)},
                         schema={"pid": pl.Int64, "tid": pl.Int64, "ts_ns": pl.Int64})
    assert events_in_gaps(calls, spans).tolist() == _events_in_gaps_by_loop(calls, spans)


def test_events_in_gaps_on_the_sample(trace):
    calls = trace.facts.calls.head(3000)
    spans = trace.data.spans()
    spans = spans.filter(pl.col("ts_ns") <= calls["ts_ns"].max())
    got = events_in_gaps(calls, spans)
    assert got.tolist() == _events_in_gaps_by_loop(calls, spans)
    assert got.sum() > 0


def test_events_in_gaps_with_timestamps_too_far_apart_for_one_key():
    # thread * range would overflow: the per-thread search answers
    calls = pl.DataFrame({"call_idx": [0, 1, 2], "pid": [1, 2, 1], "tid": [1, 1, 1],
                          "ts_ns": [-(1 << 61), 0, 1 << 61]})
    spans = pl.DataFrame({"pid": [1, 1, 2, 1], "tid": [1, 1, 1, 1],
                          "ts_ns": [-(1 << 61), 5, -3, 1 << 61]})
    assert events_in_gaps(calls, spans).tolist() == _events_in_gaps_by_loop(calls, spans)


def test_site_columns_are_the_site_tables_row_of_each_stack(trace):
    facts = trace.facts
    sites = facts.sites
    first: dict[int, int] = {}
    for row, sid in enumerate(sites["stack_id"].to_list()):
        first.setdefault(sid, row)
    stacks = facts.calls["stack_id"].to_list()
    queries = pl.Series([*stacks, None, -1, 10**9, max(first) + 1], dtype=pl.Int64)
    got = facts.site_of(queries, ("code_site", "site", "user_line"))
    for col in got:
        want = [None if q not in first else sites[col.name][first[q]]
                for q in queries.to_list()]
        assert col.to_list() == want
        assert col.dtype == sites[col.name].dtype


def test_site_columns_with_sparse_stack_ids_take_the_join():
    from zym.analysis.facts import Facts

    facts = Facts.__new__(Facts)
    facts.__dict__["sites"] = pl.DataFrame({"stack_id": [7, 10**12, 7, None],
                                            "site": ["a", "b", "c", "d"]})
    got = facts.site_of(pl.Series([10**12, 7, 3, None]), ("site",))[0]
    assert got.to_list() == ["b", "a", None, None]


def test_the_windows_kernel_classes_are_its_own(trace):
    # The window's facts gather from the whole capture's table: the same as classifying the
    # window's names alone.
    assert trace.facts is not trace.whole
    gpu = trace.facts.gpu
    alone = classify_kernels(gpu["name"], gpu["kind"])
    for col in alone:
        assert gpu[col.name].to_list() == col.to_list()
    names = set(gpu["name"].cast(pl.String).drop_nulls().to_list())
    table = trace.facts.kernel_table
    assert names <= set(table["name"].to_list())
    assert table.equals(classify_names(table["name"]))


def _compiled_by_walk(nodes: pl.DataFrame, hops: int = 8) -> list[bool]:
    """compiled_frames' definition, walked node by node: a user frame called by Dynamo's
    eval_frame.py (past at most ``hops`` nn.Module wrapper frames: module.py's, or Kineto's
    "nn.Module: Name" frames, which have no file) that calls the compiled
    runtime (a child frame under torch/_dynamo, _functorch or _inductor)."""
    import re

    from zym.analysis.usercode import COMPILED_RUNTIME, DYNAMO_CALLER, MODULE_WRAPPER

    rows = nodes.to_dicts()
    by_id = {r["stack_id"]: r for r in rows}
    parent = {r["stack_id"]: by_id.get(r["parent_id"]) for r in rows}
    runtime_parents = {r["parent_id"] for r in rows
                       if re.search(COMPILED_RUNTIME, r["file"] or "")}
    out = []
    for r in rows:
        caller = parent[r["stack_id"]]
        for _ in range(hops):
            if caller is None or not (re.search(MODULE_WRAPPER, caller["file"] or "") or (
                    caller["file"] is None and (caller["name"] or "").startswith("nn.Module: "))):
                break
            caller = parent[caller["stack_id"]]
        out.append(bool(r["is_user"]) and caller is not None
                   and re.search(DYNAMO_CALLER, caller["file"] or "") is not None
                   and r["stack_id"] in runtime_parents)
    return out


@pytest.mark.parametrize("seed", range(30))
def test_compiled_frames_match_a_walk_up_the_stack(seed):
    from zym.analysis.usercode import compiled_frames

    rng = np.random.default_rng(seed)
    files = ["app.py", "torch/_dynamo/eval_frame.py", "/x/torch/nn/modules/module.py",
             "torch/_inductor/runtime.py", "torch/_functorch/aot.py", None, "model.py"]
    n = int(rng.integers(1, 60))
    ids = rng.permutation(np.arange(100, 100 + 3 * n))[:n]  # not row numbers
    parents = [None if i == 0 or rng.random() < 0.1 else int(ids[rng.integers(0, i)])
               for i in range(n)]
    names = ["forward", "nn.Module: Linear", None, "step"]  # torch.profiler's module frames
    nodes = pl.DataFrame({"stack_id": ids, "parent_id": parents,
                          "file": [files[k] for k in rng.integers(0, len(files), n)],
                          "name": [names[k] for k in rng.integers(0, len(names), n)],
                          "is_user": rng.random(n) < 0.7},
                         schema={"stack_id": pl.Int64, "parent_id": pl.Int64,
                                 "file": pl.String, "name": pl.String, "is_user": pl.Boolean})
    # and a compiled forward two wrappers below Dynamo (module.py's, then Kineto's frame): a
    # compiled frame past 8 hops, not past 1 (checked: in the random tables of these seeds no
    # frame was more than one wrapper below, so the two limits gave the same frames)
    nodes = pl.concat([nodes, pl.DataFrame(
        {"stack_id": [1, 2, 3, 4, 5], "parent_id": [None, 1, 2, 3, 4],
         "file": ["torch/_dynamo/eval_frame.py", "/x/torch/nn/modules/module.py", None,
                  "model.py", "torch/_inductor/runtime.py"],
         "name": ["_fn", "_call_impl", "nn.Module: Linear", "forward", "run"],
         "is_user": [False, False, False, True, False]}, schema=nodes.schema)])
    got = {}
    for hops in (8, 1):
        got[hops] = compiled_frames(nodes, hops)
        assert got[hops].to_list() == _compiled_by_walk(nodes, hops)
    assert got[8][-2] and not got[1][-2]  # the limit reached
    assert got[1].dtype == pl.Boolean and got[1].len() == n + 5


@pytest.mark.parametrize("seed", range(20))
def test_span_steps_are_the_outermost_spans_of_the_function(seed):
    from zym.analysis.load import SpanTable
    from zym.analysis.phases import _span_steps

    rng = np.random.default_rng(seed)
    nodes = pl.DataFrame({"stack_id": [1, 2, 3], "file": ["a.py", "a.py", "b.py"],
                          "name": ["step", "other", "step"]})
    n = int(rng.integers(1, 40))
    ts = rng.integers(0, 200, n)
    spans = pl.DataFrame({"pid": rng.integers(1, 3, n), "tid": np.full(n, 7),
                          "stack_id": rng.integers(1, 4, n), "ts_ns": ts,
                          "dur_ns": rng.integers(0, 30, n)})
    mine = pl.DataFrame({"pid": [1], "tid": [7]})
    # Outermost: a span that starts before every earlier one (by start) has ended.
    rows = sorted((t, t + d) for p, s, t, d in spans.select("pid", "stack_id", "ts_ns", "dur_ns")
                  .iter_rows() if p == 1 and s == 1)
    kept, reach = [], None
    for t, e in rows:
        if reach is None or t >= reach:
            kept.append((t, e))
        reach = e if reach is None else max(reach, e)
    ids = nodes.filter((pl.col("file") == "a.py") & (pl.col("name") == "step"))["stack_id"]
    starts, ends, returns = _span_steps(SpanTable(held=spans), ids, mine)
    assert starts.tolist() == [t for t, _ in kept]
    assert ends.tolist() == [t for t, _ in kept[1:]] + ([kept[-1][1]] if kept else [])
    assert returns.tolist() == [e for _, e in kept]   # where each step's function returned


@pytest.mark.parametrize("calls_ids, spans_ids", [
    (([1, 1], [5, 5]), ([1, 1, 1], [5, 5, 5])),       # one thread
    (([1, 1], [5, 5]), ([1, 2, 1], [5, 5, 5])),       # another process's spans
    (([1, 2], [5, 6]), ([2, 1, 1], [6, 5, 5])),       # two threads on both sides
    (([1, 1], [5, 5]), ([1, 1, 1], [6, 6, 6])),       # one thread each, not the same
    (([1, None], [5, 5]), ([1, 1, 1], [5, 5, 5])),    # an unknown process
])
def test_events_in_gaps_tells_threads_apart(calls_ids, spans_ids):
    calls = pl.DataFrame({"call_idx": [0, 1], "pid": calls_ids[0], "tid": calls_ids[1],
                          "ts_ns": [10, 20]}, schema_overrides={"pid": pl.Int64})
    spans = pl.DataFrame({"pid": spans_ids[0], "tid": spans_ids[1], "ts_ns": [5, 15, 18]},
                         schema_overrides={"pid": pl.Int64})
    assert events_in_gaps(calls, spans).tolist() == _events_in_gaps_by_loop(calls, spans)


def test_gap_counts_of_a_two_thread_h200_trace_in_parts():
    """A real trace whose second thread makes CUDA calls too (the H200 sidecar workload):
    the spans counted a part at a time, parts out of order, against the loop, with counts
    on both threads."""
    sidecar = analyze(SAMPLE.parent / "bench/whatif/results/h200-threads/sidecar.trace.json.gz")
    calls = sidecar.facts.calls.head(3000)
    spans = sidecar.data.spans().filter(pl.col("ts_ns") <= calls["ts_ns"].max())
    counter = GapCounter(calls)
    for part in reversed(range(0, spans.height, 997)):
        counter.add(spans.slice(part, 997))
    want = _events_in_gaps_by_loop(calls, spans)
    assert counter.total.tolist() == want
    per_thread = calls.with_columns(pl.Series("n", want)).group_by("tid").agg(pl.col("n").sum())
    assert per_thread.height == 2 and per_thread["n"].min() > 0


def _overhead_by_bisect(analysis) -> list[int]:
    """Per call of the window: torch.profiler's cost of the spans on its thread that start
    after the thread's previous call started, up to its own start (a thread's first call in
    a window: from the window's start; the capture's first: any time before), an op's span
    3,934 ns, a C built-in call's (its function's name starts "<built-in") 271, any other
    Python call's 279, plus the runtime call's own 2,156 ns; an op's and the runtime call's
    times the trace's slowdown (its median aten::empty span over 3,100 ns, at least 1; 1 with
    fewer than 5 such spans; from the spans read here)."""
    import statistics
    from bisect import bisect_left, bisect_right

    spans = analysis.data.spans() if analysis.facts is analysis.whole else None
    if spans is None:  # the window's spans are cut to it: read the whole capture's
        spans = analyze(analysis.data.source, window="all").data.spans()
    name = dict(analysis.data.frames.select("frame_id", pl.col("name").cast(pl.String)).rows())
    function = {node: name.get(frame) or "" for node, frame in
                analysis.data.stacks.select("stack_id", "frame_id").rows()}
    empties = [d for node, d in spans.select("stack_id", "dur_ns").iter_rows()
               if function.get(node) == "aten::empty"]
    slow = max(statistics.median(empties) / 3_100, 1.0) if len(empties) >= 5 else 1.0
    starts: dict[tuple, tuple[list[int], list[int]]] = {}
    for pid, tid, ts, op, node in sorted(
            spans.select("pid", "tid", "ts_ns", "op_id", "stack_id").iter_rows(),
            key=lambda r: r[2]):
        s, w = starts.setdefault((pid, tid), ([], []))
        s.append(ts)
        cost = (round(3_934 * slow) if op is not None
                else 271 if function.get(node, "").startswith("<built-in") else 279)
        w.append((w[-1] if w else 0) + cost)
    previous: dict[tuple, int | None] = {}
    before: dict[int, int | None] = {}
    whole = analysis.whole.calls.select("pid", "tid", "ts_ns", "call_idx").rows()
    for pid, tid, ts, i in whole:  # time order
        before[i] = previous.get((pid, tid))
        previous[(pid, tid)] = ts
    w0 = analysis.window[0]
    first = sum(1 for row in whole if row[2] < w0)
    out = []
    for k, (pid, tid) in enumerate(analysis.facts.calls.select("pid", "tid").rows()):
        s, w = starts.get((pid, tid), ([], []))
        ts, prev = whole[first + k][2], before[first + k]
        hi = bisect_right(s, ts)
        if prev is not None and prev >= w0:  # the gap since the thread's previous call
            lo = bisect_right(s, prev)
        elif analysis.facts is analysis.whole:  # the capture's first call: any time before
            lo = 0
        else:  # the thread's first call in a window: the gap since the window's start
            lo = bisect_left(s, w0)
        cost = (w[hi - 1] if hi else 0) - (w[lo - 1] if lo else 0)
        out.append(round(2_156 * slow) + cost)
    return out


@pytest.mark.parametrize("trace_name, window", [
    ("sample_traces/gpt_decode_server.trace.json.gz", "steady"),
    ("sample_traces/gpt_decode_server.trace.json.gz", "all"),
    ("bench/whatif/results/h200-threads/sidecar.trace.json.gz", "steady"),
])
def test_capture_overhead_counts_each_calls_gap_in_the_whole_capture(trace_name, window):
    """The profiler's own cost before each call of the window (what replays take out),
    against a count by bisection over each thread's spans: a window's first call on a
    thread counts the spans from the window's start (where the replay's gap before it
    starts), not every span that merely overlaps the window, nor those since its previous
    call before the window."""
    from zym.analysis.report import capture_overhead

    got = analyze(SAMPLE.parent / trace_name, window=window)
    if window == "steady":
        assert got.facts is not got.whole  # a window that starts after the capture's first call
    assert capture_overhead(got).tolist() == _overhead_by_bisect(got)


def test_span_costs_by_kind_with_sparse_stack_ids_and_none():
    """Each span's recording cost: an op's where it has an op id (whatever its stack node), a
    built-in's where its stack node is a built-in's, a Python call's otherwise, and for a span
    with no stack node; stack ids far apart (a capture's ids need not be dense) allocate
    nothing by their size."""
    from zym.analysis.replay import KINETO_NS_PER_EVENT as COST
    from zym.analysis.report import _span_cost

    builtin = np.array([7, 1 << 40], np.int64)
    part = pl.DataFrame({"stack_id": [7, 8, 1 << 40, None, 7, (1 << 40) + 1],
                         "op_id": [None, None, None, None, 3, None]},
                        schema={"stack_id": pl.Int64, "op_id": pl.Int64})
    want = [COST["python_builtin"], COST["python_function"], COST["python_builtin"],
            COST["python_function"], COST["cpu_op"], COST["python_function"]]
    assert _span_cost(part, builtin).tolist() == want
    assert _span_cost(part.drop("stack_id"), builtin).tolist() == [
        COST["python_function"]] * 4 + [COST["cpu_op"], COST["python_function"]]
    assert _span_cost(part, np.zeros(0, np.int64)).tolist() == [
        COST["python_function"]] * 4 + [COST["cpu_op"], COST["python_function"]]
