"""Per kept torch.profiler trace timed without the profiler: each kind of recorded event's own
time a request (Python calls, built-ins, torch ops, CUDA runtime calls: each span's time less
its children's, the calls nested by time on their thread), the events a request, and the
unfixed replay without the recording against the measured request (as ``deflation_check.py``
prints it). Whether the services the deflation leaves slow are those with the most Python or
built-in time.

    python bench/whatif/trace_self_time.py OUT.json RESULTS_DIR=W=N,...

Folders: as ``deflation_check.py``'s (a results folder and its workloads' requests per pass).
A plain loop over each trace's events: an offline study, seconds a trace.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import polars as pl

HERE = Path(__file__).resolve().parent
KINDS = ("py", "builtin", "op", "call")


def self_times(a) -> tuple[dict[str, int], dict[str, int]]:
    """Own time (ns) and count of each kind of event in the analysis ``a``'s window."""
    win = a.facts.window
    d = a.data
    frames = d.frames.select("frame_id", pl.col("name").cast(pl.String))
    spans = (d.spans().join(d.stacks.select("stack_id", "frame_id"), on="stack_id", how="left")
             .join(frames, on="frame_id", how="left")
             .with_columns(pl.when(pl.col("op_id").is_not_null()).then(pl.lit("op"))
                           .when(pl.col("name").str.starts_with("<built-in"))
                           .then(pl.lit("builtin")).otherwise(pl.lit("py")).alias("cls")))
    calls = d.calls.select("tid", "ts_ns", "dur_ns").with_columns(pl.lit("call").alias("cls"))
    events = pl.concat([spans.select("tid", "ts_ns", "dur_ns", "cls"), calls])
    own = dict.fromkeys(KINDS, 0)
    count = dict.fromkeys(KINDS, 0)
    for _, g in events.sort("ts_ns", "dur_ns", descending=[False, True]).group_by(
            "tid", maintain_order=True):
        ts, dur, cls = g["ts_ns"].to_numpy(), g["dur_ns"].to_numpy(), g["cls"].to_list()
        mine = dur.astype(np.int64).copy()
        open_: list[tuple[int, int]] = []   # (end, index) of the events enclosing this one
        for i in range(len(ts)):
            while open_ and open_[-1][0] <= ts[i]:
                open_.pop()
            if open_:
                mine[open_[-1][1]] -= dur[i]
            open_.append((ts[i] + dur[i], i))
        inside = (ts >= win[0]) & (ts < win[1])
        for k in KINDS:
            at = inside & (np.array(cls) == k)
            own[k] += int(mine[at].sum())
            count[k] += int(at.sum())
    return own, count


def main() -> None:
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent))
    from bench_scale import write_json
    from deflation_check import timed_traces
    from kineto_costs import fail

    if len(sys.argv) < 3:
        fail("usage: trace_self_time.py OUT.json RESULTS_DIR=W=N,...", "trace_self_time")
    from zym.analysis import analyze

    rows = []
    for folder, w, trace, measured in timed_traces(sys.argv[2:], "trace_self_time"):
        a = analyze(trace)
        steps = a.steps_in_window()
        k = steps.count if steps is not None else 1
        own, count = self_times(a)
        row = {"folder": folder.name, "workload": w, "measured_ms": measured,
               "replayed_ms": a.timeline.fidelity["uninstrumented_ns"] / k / 1e6,
               "recorded_ms": a.facts.window_ns / k / 1e6, "steps": k,
               **{f"own_{c}_ms": own[c] / k / 1e6 for c in KINDS},
               **{f"events_{c}": count[c] / k for c in KINDS}}
        rows.append(row)
        print(f"{folder.name:14s} {w:12s} replayed/measured "
              f"{row['replayed_ms'] / measured:.2f}  own ms a request: "
              + "  ".join(f"{c} {row[f'own_{c}_ms']:.1f}" for c in KINDS), flush=True)
    write_json(Path(sys.argv[1]), rows)


if __name__ == "__main__":
    main()
