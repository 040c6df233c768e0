"""The per-event costs of torch.profiler's recording that ``KINETO_NS_PER_EVENT`` holds, fitted:
with a Python call's and a built-in's fixed (what loops of such calls measured), the op's and
the runtime call's from a grid, the pair whose unfixed replay of each kept torch.profiler
trace, without those costs, comes closest to its service's measured request (the median
|log(replayed / measured)|, as ``deflation_check.py`` prints it per trace); and the same
choice made with each results folder (a round) left out in turn, scored on the folder left
out.

    python bench/whatif/deflation_fit.py [--speed|--speed-ops REF_NS] PY,BUILTIN OUT.json \
        [RESULTS_DIR=W=N,...]...

``--speed REF_NS``: each trace's costs scaled by its own dispatch speed, ``s`` = the median
``aten::empty`` span of the trace over ``REF_NS``, at least 1 (a slower host records each event
more slowly too): the fit zym would need to scale by that speed (docs/benchmarks.md,
"Fifty-first round"); ``--speed-ops REF_NS``: only an op's and a runtime call's costs scaled.

Each trace's events are counted once per kind in the gap before each of the window's calls
(``GapCounter``, as the replay counts them); each grid point is then one replay of the window
per trace (``window_timeline``), not a fresh analysis. Folders: as ``deflation_check.py``'s.
"""
from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl

HERE = Path(__file__).resolve().parent
# x the earlier fit's 1,157 ns, and x its 2,156 ns
OP_FACTORS = (1.4, 1.6, 1.8, 2.0, 2.4, 2.8, 3.0, 3.2, 3.4, 3.6, 4.0, 4.4, 4.8, 5.2)
RUNTIME_FACTORS = (0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0, 2.4, 2.8, 3.2)
OP_FIT, RUNTIME_FIT = 1_157, 2_156   # the H200 host's least-squares fit (calibrate.py)


def gap_counts(a, kind: Callable[[pl.DataFrame], pl.Expr], kinds: int) -> np.ndarray:
    """Per call of the window, the spans recorded in the gap before it, by kind, as the
    replay's :class:`GapCounter` counts (one row a kind). ``kind``: the kind (0 to
    ``kinds - 1``) of each span of a frame of the spans (``pid, tid, ts_ns, dur_ns, op_id,
    stack_id``, their frame's ``name``; in thread and time order)."""
    from zym.analysis import analyze
    from zym.analysis.replay import GapCounter

    d = a.whole.data
    spans = d.spans() if a.facts is a.whole else analyze(d.source, window="all").data.spans()
    names = d.frames.select("frame_id", pl.col("name").cast(pl.String))
    j = (spans.select("pid", "tid", "ts_ns", "dur_ns", "op_id", "stack_id")
         .join(d.stacks.select("stack_id", "frame_id"), on="stack_id", how="left")
         .join(names, on="frame_id", how="left").sort("pid", "tid", "ts_ns"))
    j = j.with_columns(kind(j).alias("k"))
    out = []
    for k in range(kinds):
        c = GapCounter(a.whole.calls)
        c.add(j.filter(pl.col("k") == k))
        out.append(c.total)
    first = int(a.whole.calls["ts_ns"].search_sorted(a.window[0], "left"))
    n = a.facts.calls.height
    return np.stack([x[first:first + n] for x in out])


def _counts(a) -> np.ndarray:
    """Per call of the window: the spans in the gap before it, an op's, a built-in's, any
    other Python call's."""
    from zym.analysis.replay import KINETO_BUILTIN_PREFIX

    return gap_counts(a, lambda _: pl.when(pl.col("op_id").is_not_null()).then(0)
                      .when(pl.col("name").str.starts_with(KINETO_BUILTIN_PREFIX)).then(1)
                      .otherwise(2), 3)


def replay_ms(t: dict, cost: np.ndarray) -> float:
    """The unfixed replay of trace ``t``'s window per step, each call's gap less ``cost``."""
    from zym.analysis.sample import window_timeline

    a, steps = t["analysis"], t["steps"]
    tl = window_timeline(a.facts, cost.astype(np.int64),
                         None if steps is None else steps.start_ns, t["threads"], None)
    return tl.fidelity["uninstrumented_ns"] / t["count"] / 1e6


def _replayed_ms(t: dict, op: float, builtin: float, py: float, runtime: float) -> float:
    """The unfixed replay of trace ``t``'s window per step, each call's gap less the costs."""
    s, s_py = t["s"], t["s"] if t["all_kinds"] else 1.0
    cost = s * (runtime + op * t["counts"][0]) + s_py * (
        (np.array([builtin, py])[:, None] * t["counts"][1:]).sum(axis=0))
    return replay_ms(t, cost)


def load_traces(specs: list[str], script: str, counts: Callable) -> list[dict]:
    """Each timed trace of ``specs`` (``deflation_check.timed_traces``) analysed once: its
    folder, workload, analysis, steps, threads, measured request (ms), speed (``s``) and
    ``counts(analysis)``."""
    from deflation_check import DEFAULT, timed_traces
    from zym.analysis import analyze
    from zym.analysis.phases import step_threads

    traces = []
    for folder, w, path, real in timed_traces(specs or DEFAULT, script):
        a = analyze(path)
        steps = a.steps_in_window()
        traces.append({
            "folder": folder.name, "workload": w, "analysis": a, "steps": steps,
            "count": len(steps.start_ns) if steps is not None else 1,
            "threads": None if steps is None else step_threads(a.facts.calls, a.facts.nodes,
                                                               steps),
            "counts": counts(a), "measured_ms": real, "s": a.recording_slowdown})
    return traces


def main() -> None:
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent))
    from bench_scale import write_json
    from kineto_costs import fail

    argv = sys.argv[1:]
    ref, all_kinds = 0.0, argv[:1] == ["--speed"]
    if argv[:1] in (["--speed"], ["--speed-ops"]):
        try:
            ref = float(argv[1])
        except (IndexError, ValueError):
            ref = 0.0
        if not ref > 0:
            fail(f"{argv[0]} needs a reference span in ns above 0", "deflation_fit")
        argv = argv[2:]
        from zym.analysis import replay

        # each trace's speed as zym reads it (analysis/report.py ``slowdown``), at this
        # reference: the analyses' own replays are not used, their costs are the grid's
        replay.KINETO_SPEED_REF_NS = ref
    if len(argv) < 2 or len(argv[0].split(",")) != 2:
        fail("usage: deflation_fit.py [--speed|--speed-ops REF_NS] PY,BUILTIN OUT.json "
             "[RESULTS_DIR=W=N,...]...", "deflation_fit")
    py, builtin = (float(x) for x in argv[0].split(","))
    traces = load_traces(argv[2:], "deflation_fit", _counts)
    for t in traces:
        t["s"], t["all_kinds"] = t["s"] if ref else 1.0, all_kinds
    grid = [(OP_FIT * o, RUNTIME_FIT * r) for o, r in
            itertools.product(OP_FACTORS, RUNTIME_FACTORS)]
    logs = {g: np.array([math.log(_replayed_ms(t, g[0], builtin, py, g[1]) / t["measured_ms"])
                         for t in traces]) for g in grid}

    def score(e: np.ndarray) -> float:
        return float(np.median(np.abs(e)))

    def summary(e: np.ndarray) -> dict:
        return {"median_abs_log": score(e), "within_15pct": int((np.abs(e) < math.log(1.15)).sum()),
                "within_30pct": int((np.abs(e) < math.log(1.3)).sum())}

    best = min(grid, key=lambda g: score(logs[g]))
    names = np.array([t["folder"] for t in traces])
    held, picks = np.zeros(len(traces)), {}
    for f in sorted(set(names)):
        train = names != f
        g = min(grid, key=lambda g: score(logs[g][train]))
        picks[str(f)] = {"op": round(g[0]), "runtime": round(g[1])}
        held[~train] = logs[g][~train]
    out = {"python_function": py, "python_builtin": builtin, "speed_ref_ns": ref or None,
           "best": {"op": round(best[0]), "runtime": round(best[1])} | summary(logs[best]),
           "left_one_folder_out": summary(held) | {"picks": picks},
           "grid": [{"op": round(g[0]), "runtime": round(g[1])} | summary(logs[g]) for g in grid],
           "traces": [{"folder": t["folder"], "workload": t["workload"],
                       "measured_ms": t["measured_ms"], "s": t["s"],
                       "replayed_ms": t["measured_ms"] * math.exp(e)}
                      for t, e in zip(traces, logs[best], strict=True)]}
    write_json(Path(argv[1]), out)
    for g in sorted(grid, key=lambda g: score(logs[g]))[:8]:
        s = summary(logs[g])
        print(f"op {g[0]:6.0f} ns  runtime {g[1]:6.0f} ns: median |log| {s['median_abs_log']:.3f}"
              f"  within ±15% {s['within_15pct']}  within ±30% {s['within_30pct']}"
              f" of {len(traces)}")
    print("best:", out["best"])
    print("each folder left out in turn, scored on it:", summary(held))
    print("picks:", picks)


if __name__ == "__main__":
    main()
